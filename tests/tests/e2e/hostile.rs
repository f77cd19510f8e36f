//! The hostile-plugin suite: each attack gets a clear error, and the other tools keep
//! answering correctly meanwhile and afterwards.

use std::time::Duration;

use llm_worker::events::with_tool_events;
use llm_worker::*;
use llm_worker_tests::wait::within;
use llm_worker_tests::{error_message, host, plugin, plugin_path, plugin_v03_path, when_logged};

/// A session with the hostile plugin (loaded by `plugin_host`) and a well-behaved counter.
fn session(hostile: &LoadedPlugin) -> ToolServerHandle {
    let mut worker = Worker::new();
    worker
        .register_tools(hostile.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    worker
        .register_tools(plugin("counter").definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    worker.tool_server_handle()
}

/// The counter answers 0, 1, 2 … across the attacks: nothing disturbed it.
async fn counter_still_counts(handle: &ToolServerHandle, expected: u32) {
    assert_eq!(
        handle.call_tool("count", "{}").await.as_deref(),
        Ok(expected.to_string().as_str()),
        "the well-behaved plugin keeps answering"
    );
}

#[tokio::test]
async fn unbounded_recursion_overflows_the_stack_and_is_contained() {
    let handle = session(&plugin("trapper"));
    counter_still_counts(&handle, 0).await;
    assert_eq!(
        handle
            .call_tool("recurse", r#"{"depth":10}"#)
            .await
            .as_deref(),
        Ok("55")
    );
    let message = error_message(handle.call_tool("recurse", r#"{"depth":100000000}"#).await);
    // Rust keeps large frames on a shadow stack in linear memory: overflowing it is an
    // out-of-bounds access; small frames overflow the wasm stack itself (see other_toolchains).
    assert!(
        message.contains("overflowed its stack") || message.contains("shadow stack"),
        "{message}"
    );
    assert!(message.contains("restarted"), "{message}");
    counter_still_counts(&handle, 1).await;
    assert_eq!(handle.call_tool("tick", "{}").await.as_deref(), Ok("0"));
}

#[tokio::test]
async fn a_call_sleeping_forever_hits_the_wall_clock_limit() {
    let sleeper =
        PluginHost::with_limits(Limits::default().call_timeout(Duration::from_millis(300)))
            .and_then(|host| host.load(plugin_v03_path("sleeper")))
            .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&sleeper);
    // The plugin's sleep is the attack under test: it must run out of time.
    let message = error_message(handle.call_tool("sleep", r#"{"ms":100000000}"#).await);
    assert!(message.contains("time limit of 300ms"), "{message}");
    counter_still_counts(&handle, 0).await;
    let quick = handle.call_tool("sleep", r#"{"ms":1}"#).await;
    assert!(
        quick.is_ok(),
        "a fresh instance serves the next call: {quick:?}"
    );
}

#[tokio::test]
async fn a_huge_result_hits_the_memory_limit_before_the_host_sees_it() {
    let handle = session(&plugin("trapper"));
    let message = error_message(
        handle
            .call_tool("big_output", r#"{"bytes":104857600}"#)
            .await,
    );
    assert!(
        message.contains("memory") && message.contains("64 MiB"),
        "{message}"
    );
    counter_still_counts(&handle, 0).await;
}

#[tokio::test]
async fn flooding_stdout_costs_the_host_nothing() {
    let handle = session(&plugin("trapper"));
    assert_eq!(
        handle
            .call_tool("flood_output", r#"{"mib":100}"#)
            .await
            .as_deref(),
        Ok("flooded"),
        "output beyond the capture buffer is dropped, not stored"
    );
    counter_still_counts(&handle, 0).await;
}

#[tokio::test]
async fn the_file_system_is_not_reachable() {
    let handle = session(&plugin("trapper"));
    for path in ["/etc/passwd", "..", "../../etc/passwd", ".", "/"] {
        let message = error_message(
            handle
                .call_tool(
                    "read_file",
                    &serde_json::json!({ "path": path }).to_string(),
                )
                .await,
        );
        assert!(
            message.starts_with("Execution failed:"),
            "{path}: {message}"
        );
        let listing = handle
            .call_tool("list_dir", &serde_json::json!({ "path": path }).to_string())
            .await;
        assert!(listing.is_err(), "{path} must not be listable: {listing:?}");
    }
    let write = handle
        .call_tool(
            "write_file",
            r#"{"path":"/tmp/llm-worker-escape","text":"x"}"#,
        )
        .await;
    assert!(write.is_err(), "{write:?}");
    assert!(!std::path::Path::new("/tmp/llm-worker-escape").exists());
    counter_still_counts(&handle, 0).await;
}

#[tokio::test]
async fn the_environment_and_arguments_are_empty() {
    assert!(std::env::var_os("PATH").is_some(), "the host has PATH");
    let handle = session(&plugin("trapper"));
    let message = error_message(handle.call_tool("get_env", r#"{"name":"PATH"}"#).await);
    assert!(
        message.contains("PATH: environment variable not found"),
        "{message}"
    );
    assert_eq!(
        handle.call_tool("environment", "{}").await.as_deref(),
        Ok("vars=[] args=[]")
    );
}

#[tokio::test]
async fn sockets_are_denied() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let address = listener.local_addr().expect("address").to_string();
    let handle = session(&plugin("trapper"));
    let message = error_message(
        handle
            .call_tool(
                "connect",
                &serde_json::json!({ "address": address }).to_string(),
            )
            .await,
    );
    assert!(message.starts_with("Execution failed:"), "{message}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no connection reached the listener"
    );
    let message = error_message(
        handle
            .call_tool("connect", r#"{"address":"example.com:80"}"#)
            .await,
    );
    assert!(message.starts_with("Execution failed:"), "{message}");
    counter_still_counts(&handle, 0).await;
}

#[test]
fn http_imports_are_refused_naming_the_interface() {
    let http = wat::parse_str(
        r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" (func)))))"#,
    )
    .expect("wat");
    let error = host()
        .load_bytes("/plugins/fetch.wasm", &http)
        .expect_err("refused");
    assert!(
        matches!(error, PluginError::UnsupportedImport { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("wasi:http/outgoing-handler"),
        "{error}"
    );
}

/// While one plugin spins in an endless loop, another keeps answering — on a single-threaded
/// runtime, so the loop does not hold the thread. Had it held it, the counter could answer
/// only once the loop had ended at its time limit: the loop must still be running when the
/// counter has answered five times. (That the loop ends at its limit is
/// `plugins::an_endless_loop_hits_the_time_limit`; here the caller drops it.)
#[tokio::test(flavor = "current_thread")]
async fn other_tools_answer_while_a_plugin_spins() {
    let handle = session(&plugin("trapper"));
    let (sink, started) = when_logged("spinning forever");
    let spinning = with_tool_events(sink, handle.call_tool("spin_forever", "{}"));
    let meanwhile = async {
        // Once the loop runs (it says so as it begins), the counter answers meanwhile.
        within("the endless loop to start", started.notified()).await;
        let mut answers = Vec::new();
        for _ in 0..5 {
            answers.push(handle.call_tool("count", "{}").await);
        }
        answers
    };
    let answers = tokio::select! {
        ended = spinning => panic!("the loop ended before the counter had answered: {ended:?}"),
        answers = meanwhile => answers,
    };
    let expected: Vec<Result<String, ToolServerError>> =
        (0..5).map(|i| Ok(i.to_string())).collect();
    assert_eq!(answers, expected);
}

#[tokio::test]
async fn clocks_and_randomness_work() {
    // The fetcher imports wasi:http, so it loads only with an HTTP grant (unused here).
    let mut policy = SandboxPolicy::default();
    policy.http = vec![HttpGrant::parse("http://127.0.0.1:9").expect("a rule")];
    let fetcher = host()
        .load_with_policy(plugin_path("fetcher"), policy)
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&fetcher);
    let out = handle.call_tool("entropy", "{}").await.expect("entropy");
    let fields: Vec<u64> = out.split(' ').map(|f| f.parse().expect("number")).collect();
    assert_ne!(fields[0], fields[1], "two random numbers differ");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!(fields[2].abs_diff(now) < 60, "the wall clock is the host's");
}
