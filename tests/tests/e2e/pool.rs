//! A host with a pool of instance slots (wasmtime's pooling allocator): sessions work as on
//! any host, a full pool refuses a new instance with an error that says so, and the slot of a
//! dropped session is reused.

use llm_worker::*;
use llm_worker_tests::plugin_v03_path;

fn session(plugin: &LoadedPlugin) -> (Worker, ToolServerHandle) {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = worker.tool_server_handle();
    (worker, handle)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_pool_refuses_new_instances_until_a_slot_is_freed() {
    let host = PluginHost::builder()
        .instance_pool(2)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let counter = host
        .load(plugin_v03_path("counter"))
        .unwrap_or_else(|e| panic!("{e}"));

    let (_first_worker, first) = session(&counter);
    let (second_worker, second) = session(&counter);
    for handle in [&first, &second] {
        assert_eq!(handle.call_tool("count", "{}").await.as_deref(), Ok("0"));
    }
    assert_eq!(first.call_tool("count", "{}").await.as_deref(), Ok("1"));

    // A third live instance does not fit: registration succeeds (the factory cannot fail),
    // and every call says why the plugin cannot start.
    let (_third_worker, third) = session(&counter);
    let error = third
        .call_tool("count", "{}")
        .await
        .expect_err("the pool has two slots");
    let message = error.to_string();
    assert!(message.contains("plugin 'counter'"), "{message}");
    assert!(
        message.contains("pool of instance slots is full"),
        "{message}"
    );
    assert!(message.contains("larger pool"), "{message}");
    // Loading a plugin needs an instance too (to list its tools): with the pool full, the load
    // fails as the host's capacity, not as the plugin's start failing.
    let busy = host
        .load(plugin_v03_path("greet"))
        .expect_err("no slot to list its tools in");
    assert!(matches!(busy, PluginError::HostBusy { .. }), "{busy}");
    assert!(busy.to_string().contains("not the plugin"), "{busy}");

    // Ending a session frees its slot: a new session starts, and the others are untouched.
    drop((second_worker, second));
    let (_fourth_worker, fourth) = session(&counter);
    assert_eq!(fourth.call_tool("count", "{}").await.as_deref(), Ok("0"));
    assert_eq!(first.call_tool("count", "{}").await.as_deref(), Ok("2"));
}

#[test]
fn a_pooled_host_loads_and_describes_plugins_as_any_host() {
    let host = PluginHost::builder()
        .instance_pool(8)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let greet = host
        .load(plugin_v03_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(greet.tool_names(), ["greet"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_counts_its_live_instances_and_their_memory() {
    // A host of its own: the shared one's count moves with every other test.
    let host = PluginHost::builder()
        .cache_dir(llm_worker_tests::compiled_cache())
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let counter = host
        .load(plugin_v03_path("counter"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        host.usage(),
        HostUsage::default(),
        "the instance that read the tools at load is gone"
    );
    let (first_worker, first) = session(&counter);
    let (second_worker, second) = session(&counter);
    for handle in [&first, &second] {
        assert_eq!(handle.call_tool("count", "{}").await.as_deref(), Ok("0"));
    }
    let two = host.usage();
    assert_eq!(two.instances, 2);
    assert!(two.memory_bytes > 0, "{two:?}");
    drop((first_worker, first));
    llm_worker_tests::wait::until("the first session's instance to go", || {
        host.usage().instances == 1
    })
    .await;
    assert_eq!(host.usage().memory_bytes, two.memory_bytes / 2);
    drop((second_worker, second));
    llm_worker_tests::wait::until("every instance to go", || {
        host.usage() == HostUsage::default()
    })
    .await;
}
