//! The spec's tool API with native tools: registration, lookup, calls, hooks, type states.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use llm_worker::*;
use serde_json::json;

/// The spec's manual example.
struct Counter {
    count: AtomicUsize,
}

#[async_trait]
impl Tool for Counter {
    async fn execute(&self, _: &str) -> Result<String, ToolError> {
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        Ok(format!("count: {}", n))
    }
}

fn counter_definition(factory_calls: Arc<AtomicUsize>) -> ToolDefinition {
    Arc::new(move || {
        factory_calls.fetch_add(1, Ordering::SeqCst);
        let meta = ToolMeta::new("counter")
            .description("カウンターを増加")
            .input_schema(json!({"type": "object"}));
        (
            meta,
            Arc::new(Counter {
                count: AtomicUsize::new(0),
            }),
        )
    })
}

/// A tool that echoes its input.
struct Echo;

#[async_trait]
impl Tool for Echo {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        Ok(input_json.to_owned())
    }
}

fn named(name: &str) -> ToolDefinition {
    let name = name.to_owned();
    Arc::new(move || (ToolMeta::new(name.clone()), Arc::new(Echo) as Arc<dyn Tool>))
}

/// The spec's macro example, registered natively.
#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    /// 挨拶する
    #[tool]
    async fn greet(&self, #[description = "名前"] name: String) -> String {
        format!("Hello, {}!", name)
    }

    /// Fails when asked to.
    #[tool]
    fn fallible(&self, fail: bool) -> Result<u32, String> {
        if fail {
            Err("asked to fail".into())
        } else {
            Ok(7)
        }
    }

    #[tool]
    fn undocumented(&self) {}
}

#[tokio::test]
async fn spec_counter_runs_its_factory_at_registration_and_keeps_state() {
    let factory_calls = Arc::new(AtomicUsize::new(0));
    let mut worker = Worker::new();
    let def = counter_definition(Arc::clone(&factory_calls));
    assert_eq!(factory_calls.load(Ordering::SeqCst), 0);
    worker.register_tool(def).expect("registers");
    assert_eq!(
        factory_calls.load(Ordering::SeqCst),
        1,
        "factory runs at registration"
    );

    let handle = worker.tool_server_handle();
    for expected in ["count: 0", "count: 1", "count: 2"] {
        assert_eq!(
            handle.call_tool("counter", "{}").await.as_deref(),
            Ok(expected)
        );
    }
    assert_eq!(
        factory_calls.load(Ordering::SeqCst),
        1,
        "calls reuse the instance"
    );

    let (meta, _) = handle.get_tool("counter").expect("registered");
    assert_eq!(meta.description, "カウンターを増加");
}

#[tokio::test]
async fn macro_tools_register_natively_as_in_the_spec() {
    let app = App;
    let mut worker = Worker::new();
    worker
        .register_tool(app.greet_definition())
        .expect("registers");
    let handle = worker.tool_server_handle();

    let (meta, _) = handle.get_tool("greet").expect("registered");
    assert_eq!(meta.description, "挨拶する");
    assert_eq!(
        meta.input_schema["properties"]["name"]["description"],
        "名前"
    );
    assert_eq!(meta.input_schema["required"], json!(["name"]));
    // A non-Result value is formatted with {:?}, as the spec says.
    assert_eq!(
        handle
            .call_tool("greet", r#"{"name":"Alice"}"#)
            .await
            .as_deref(),
        Ok("Hello, Alice!")
    );
}

#[tokio::test]
async fn macro_results_errors_and_fallback_descriptions() {
    let app = App;
    let defs = app.tool_definitions();
    assert_eq!(defs.len(), 3, "ToolRegistry lists every #[tool] method");
    let (meta, fallible) = app.fallible_definition()();
    assert_eq!(meta.name, "fallible");
    assert_eq!(
        fallible.execute(r#"{"fail":false}"#).await.as_deref(),
        Ok("7")
    );
    assert_eq!(
        fallible.execute(r#"{"fail":true}"#).await,
        Err(ToolError::ExecutionFailed("asked to fail".into()))
    );
    match fallible.execute(r#"{"fail":"yes"}"#).await {
        Err(ToolError::InvalidArgument(message)) => assert!(message.contains("invalid type")),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match fallible.execute("not json").await {
        Err(ToolError::InvalidArgument(_)) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let (meta, tool) = app.undocumented_definition()();
    assert_eq!(meta.description, "Tool: undocumented");
    // `()` is `Serialize`: JSON `null`.
    assert_eq!(tool.execute("{}").await.as_deref(), Ok("null"));
}

#[tokio::test]
async fn definitions_are_sorted_by_name() {
    let mut worker = Worker::new();
    worker
        .register_tools([named("zeta"), named("alpha"), named("mid")])
        .expect("registers");
    let names: Vec<String> = worker
        .tool_server_handle()
        .tool_definitions_sorted()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["alpha", "mid", "zeta"]);
}

#[tokio::test]
async fn duplicate_names_are_refused_and_batches_are_all_or_nothing() {
    let mut worker = Worker::new();
    worker.register_tool(named("a")).expect("registers");
    assert_eq!(
        worker.register_tool(named("a")),
        Err(ToolRegistryError::DuplicateName("a".into()))
    );
    assert_eq!(
        worker.register_tools([named("b"), named("a")]),
        Err(ToolRegistryError::DuplicateName("a".into()))
    );
    assert_eq!(
        worker.register_tools([named("c"), named("c")]),
        Err(ToolRegistryError::DuplicateName("c".into()))
    );
    let handle = worker.tool_server_handle();
    assert!(
        handle.get_tool("b").is_none(),
        "a failed batch registers nothing"
    );
    assert_eq!(handle.tool_definitions_sorted().len(), 1);
}

#[tokio::test]
async fn unknown_tools_are_not_found() {
    let worker = Worker::new();
    let handle = worker.tool_server_handle();
    assert_eq!(
        handle.call_tool("nope", "{}").await,
        Err(ToolServerError::ToolNotFound("nope".into()))
    );
    assert!(handle.get_tool("nope").is_none());
    let results = worker
        .execute_tool_calls(vec![call("1", "nope", json!({}))])
        .await
        .expect("no hook aborted");
    assert!(results[0].is_error);
    assert!(results[0].content.contains("'nope' not found"));
}

#[tokio::test]
async fn tool_errors_surface_through_call_tool() {
    let mut worker = Worker::new();
    worker
        .register_tool(App.fallible_definition())
        .expect("registers");
    assert_eq!(
        worker
            .tool_server_handle()
            .call_tool("fallible", r#"{"fail":true}"#)
            .await,
        Err(ToolServerError::ToolExecution(
            "Execution failed: asked to fail".into()
        ))
    );
}

fn call(id: &str, name: &str, input: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        input,
    }
}

#[tokio::test]
async fn pre_hooks_rewrite_skip_and_abort_in_order() {
    let mut worker = Worker::new();
    worker
        .register_tools([named("echo"), named("other")])
        .expect("registers");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));

    let log = Arc::clone(&seen);
    worker.add_pre_tool_call_hook(move |ctx: &mut ToolCallContext| {
        log.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("first:{}", ctx.call.id));
        if ctx.meta.name == "echo" {
            ctx.call.input["rewritten"] = json!(true);
        }
        if ctx.call.id == "skip" {
            return PreToolCallAction::Skip("not during the test".into());
        }
        PreToolCallAction::Continue
    });
    let log = Arc::clone(&seen);
    worker.add_pre_tool_call_hook(move |ctx: &mut ToolCallContext| {
        log.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("second:{}", ctx.call.id));
        PreToolCallAction::Continue
    });

    let results = worker
        .execute_tool_calls(vec![
            call("a", "echo", json!({"x": 1})),
            call("skip", "other", json!({})),
            call("b", "other", json!({"y": 2})),
        ])
        .await
        .expect("no abort");
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].call_id, "a");
    let echoed: serde_json::Value = serde_json::from_str(&results[0].content).expect("json");
    assert_eq!(echoed, json!({"x": 1, "rewritten": true}));
    assert_eq!(results[1].call_id, "skip");
    // A skip is an error result (the tool did not run) that gives the hook's reason.
    assert!(results[1].is_error);
    assert!(
        results[1].content.contains("not during the test"),
        "{}",
        results[1].content
    );
    assert_eq!(results[2].content, r#"{"y":2}"#);
    assert_eq!(
        *seen.lock().unwrap_or_else(|p| p.into_inner()),
        ["first:a", "second:a", "first:skip", "first:b", "second:b"],
        "hooks run in registration order; a skip stops later hooks"
    );

    worker.add_pre_tool_call_hook(|ctx: &mut ToolCallContext| {
        if ctx.call.name == "other" {
            PreToolCallAction::Abort("other is forbidden".into())
        } else {
            PreToolCallAction::Continue
        }
    });
    let aborted = worker
        .execute_tool_calls(vec![
            call("a", "echo", json!({})),
            call("c", "other", json!({})),
        ])
        .await;
    assert_eq!(
        aborted,
        Err(WorkerError::HookAborted {
            call_id: "c".into(),
            tool: "other".into(),
            reason: "other is forbidden".into()
        })
    );
}

#[tokio::test]
async fn post_hooks_rewrite_results_and_abort() {
    let mut worker = Worker::new();
    worker.register_tool(named("echo")).expect("registers");
    worker.add_post_tool_call_hook(|ctx: &mut PostToolCallContext| {
        ctx.result.content = format!("{}:{}", ctx.meta.name, ctx.result.content);
        PostToolCallAction::Continue
    });
    worker.add_post_tool_call_hook(|ctx: &mut PostToolCallContext| {
        ctx.result.content.push('!');
        PostToolCallAction::Continue
    });
    let results = worker
        .execute_tool_calls(vec![call("1", "echo", json!({"a": 1}))])
        .await
        .expect("no abort");
    assert_eq!(results[0].content, r#"echo:{"a":1}!"#);
    assert!(!results[0].is_error);

    worker.add_post_tool_call_hook(|_: &mut PostToolCallContext| {
        PostToolCallAction::Abort("result rejected".into())
    });
    let aborted = worker
        .execute_tool_calls(vec![call("1", "echo", json!({}))])
        .await;
    assert!(
        matches!(aborted, Err(WorkerError::HookAborted { reason, .. }) if reason == "result rejected")
    );
}

#[tokio::test]
async fn locking_keeps_tools_and_hooks_and_unlocking_allows_registration() {
    let mut worker = Worker::new();
    worker.register_tool(named("a")).expect("registers");
    let mut locked = worker.lock();
    locked.add_post_tool_call_hook(|ctx: &mut PostToolCallContext| {
        ctx.result.content = "hooked".into();
        PostToolCallAction::Continue
    });
    let handle = locked.tool_server_handle();
    assert!(handle.get_tool("a").is_some());
    let results = locked
        .execute_tool_calls(vec![call("1", "a", json!({}))])
        .await
        .expect("no abort");
    assert_eq!(results[0].content, "hooked");
    let mut worker = locked.unlock();
    worker.register_tool(named("b")).expect("registers again");
    assert_eq!(
        handle.tool_definitions_sorted().len(),
        2,
        "handles see later registrations"
    );
}

#[tokio::test]
async fn tool_server_handles_share_one_map() {
    let server = ToolServer::new();
    let clone = server.clone();
    assert!(server.handle().tool_definitions_sorted().is_empty());
    assert!(clone.handle().get_tool("x").is_none());
    let default_handle = ToolServerHandle::default();
    assert!(default_handle.tool_definitions_sorted().is_empty());
}
