//! tmp smoke
use llm_worker::*;
use llm_worker_tests::plugin;

#[tokio::test]
async fn counter_counts() {
    let counter = plugin("counter");
    let mut worker = Worker::new();
    worker.register_tools(counter.definitions()).unwrap();
    let h = worker.tool_server_handle();
    for i in 0..3 {
        assert_eq!(h.call_tool("count", "{}").await.unwrap(), i.to_string());
    }
    println!("{:#?}", h.tool_definitions_sorted());
    let greet = plugin("greet");
    worker.register_tools(greet.definitions()).unwrap();
    println!("{:?}", h.call_tool("greet", r#"{"name":"x"}"#).await);
    println!("{:?}", h.call_tool("greet", r#"{"nam":"x"}"#).await);
    let t = plugin("trapper");
    worker.register_tools(t.definitions()).unwrap();
    println!("{:?}", h.call_tool("tick", r#"{}"#).await);
    println!("{:?}", h.call_tool("panic", r#"{}"#).await);
    println!("{:?}", h.call_tool("tick", r#"{}"#).await);
    println!("{:?}", h.call_tool("allocate", r#"{"mib": 100}"#).await);
    println!("{:?}", h.call_tool("big_output", r#"{"bytes": 2000000}"#).await);
}
