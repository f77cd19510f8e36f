//! Wasm plugins through the public API: lifecycle, sessions, parallelism, refusals, faults.

use std::time::Duration;

use llm_worker::events::with_tool_events;
use llm_worker::*;
use llm_worker_tests::wait::within;
use llm_worker_tests::{
    Release, error_message, held_sleeper, host, plugin, plugin_path, session, when_logged,
};
use serde_json::{Value, json};

fn worker_with(plugins: &[&str]) -> Worker {
    let mut worker = Worker::new();
    for name in plugins {
        worker
            .register_tools(plugin(name).definitions())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    worker
}

async fn call(
    handle: &ToolServerHandle,
    tool: &str,
    input: &str,
) -> Result<String, ToolServerError> {
    handle.call_tool(tool, input).await
}

#[tokio::test]
async fn a_counter_counts_within_a_session_and_restarts_in_a_new_one() {
    let first = worker_with(&["counter"]).tool_server_handle();
    for expected in ["0", "1", "2"] {
        assert_eq!(call(&first, "count", "{}").await.as_deref(), Ok(expected));
    }
    let second = worker_with(&["counter"]).tool_server_handle();
    assert_eq!(call(&second, "count", "{}").await.as_deref(), Ok("0"));
    assert_eq!(
        call(&first, "count", "{}").await.as_deref(),
        Ok("3"),
        "sessions are isolated"
    );
}

#[tokio::test]
async fn tools_of_one_plugin_share_one_instance() {
    let handle = worker_with(&["counter", "notes"]).tool_server_handle();
    call(&handle, "count", "{}").await.expect("count");
    call(&handle, "count", "{}").await.expect("count");
    assert_eq!(call(&handle, "peek", "{}").await.as_deref(), Ok("2"));

    assert_eq!(
        call(&handle, "add_note", r#"{"text":"milk"}"#)
            .await
            .as_deref(),
        Ok("1")
    );
    assert_eq!(
        call(&handle, "add_note", r#"{"text":"eggs"}"#)
            .await
            .as_deref(),
        Ok("2")
    );
    assert_eq!(
        call(&handle, "list_notes", "{}").await.as_deref(),
        Ok("milk\neggs")
    );
}

#[tokio::test]
async fn loaded_plugins_describe_their_tools() {
    let counter = plugin("counter");
    assert_eq!(counter.name(), "counter");
    assert_eq!(counter.tool_names(), ["count", "peek"]);
    assert_eq!(counter.path(), plugin_path("counter"));
    let defs = counter.definitions();
    let (meta, _) = defs[0]();
    assert_eq!(&meta, &counter.tools()[0]);
    assert_eq!(meta.input_schema["type"], "object");
}

#[tokio::test]
async fn plugin_and_native_tools_share_one_namespace() {
    let mut worker = worker_with(&["greet"]);
    let native: ToolDefinition = std::sync::Arc::new(|| {
        struct Nop;
        #[async_trait::async_trait]
        impl Tool for Nop {
            async fn execute(&self, _: &str) -> Result<String, ToolError> {
                Ok(String::new())
            }
        }
        (
            ToolMeta::new("greet"),
            std::sync::Arc::new(Nop) as std::sync::Arc<dyn Tool>,
        )
    });
    assert_eq!(
        worker.register_tool(native),
        Err(ToolRegistryError::DuplicateName("greet".into()))
    );
}

#[tokio::test]
async fn bad_input_is_an_invalid_argument() {
    let greet = plugin("greet").definitions();
    let (_, tool) = greet[0]();
    match tool.execute("{not json").await {
        Err(ToolError::InvalidArgument(message)) => assert!(message.contains("not valid JSON")),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match tool.execute(r#"{"nam":"typo"}"#).await {
        Err(ToolError::InvalidArgument(message)) => {
            assert!(
                message.contains(r#"at /: "name" is a required property"#),
                "{message}"
            )
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(
        tool.execute(r#"{"name":"Ada"}"#).await.as_deref(),
        Ok("Hello, Ada!")
    );
}

fn span(result: &ToolResult) -> (u64, u64) {
    let value: Value =
        serde_json::from_str(&result.content).unwrap_or_else(|e| panic!("{e}: {}", result.content));
    let field = |name: &str| value[name].as_u64().unwrap_or_else(|| panic!("no {name}"));
    (field("start"), field("end"))
}

/// Calls `hold` in two sessions of `sleeper` (pausing between its looks, or `busy`) and
/// releases them only once both are inside at once. Were they not able to be, the first would
/// hold its instance until its time limit ended it, before the second began: the test fails
/// saying so.
async fn two_sessions_hold_at_once(sleeper: &LoadedPlugin, release: &Release, busy: bool) {
    let input = json!({ "busy": busy }).to_string();
    let hold = |sink| {
        let tools = session(sleeper);
        let input = input.clone();
        tokio::spawn(with_tool_events(sink, async move {
            tools.call_tool("hold", &input).await
        }))
    };
    let (sink_a, a_inside) = when_logged("holding");
    let (sink_b, b_inside) = when_logged("holding");
    let (mut a, mut b) = (hold(sink_a), hold(sink_b));
    tokio::select! {
        ended = &mut a => panic!("a ended before b was inside: {ended:?}"),
        ended = &mut b => panic!("b ended before a was inside: {ended:?}"),
        () = within("both calls to be inside at once", async {
            a_inside.notified().await;
            b_inside.notified().await;
        }) => {}
    }
    release.release();
    for (name, call) in [("a", a), ("b", b)] {
        let result = within("the released call to return", call).await;
        assert_eq!(result.expect("joined").as_deref(), Ok("released"), "{name}");
    }
}

/// Two sessions' calls run at once even on a single-threaded runtime: a call waiting in the
/// guest does not block the runtime's thread.
#[tokio::test(flavor = "current_thread")]
async fn calls_to_different_instances_overlap() {
    let (sleeper, release) = held_sleeper("overlap", Limits::default());
    two_sessions_hold_at_once(&sleeper, &release, false).await;
}

/// Computation in two instances runs at once on a multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_calls_to_different_instances_overlap() {
    let (sleeper, release) = held_sleeper("busy-overlap", Limits::default());
    two_sessions_hold_at_once(&sleeper, &release, true).await;
}

/// Calls to one instance run one at a time, in parallel batches too (each call sleeps in the
/// plugin, long enough to overlap if it could).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_one_instance_are_serialised() {
    let worker = worker_with(&["sleeper"]);
    let calls = (0..2)
        .map(|i| ToolCall {
            id: i.to_string(),
            name: "sleep".into(),
            input: json!({"ms": 100}),
        })
        .collect();
    let results = worker.execute_tool_calls(calls).await.expect("no abort");
    let (first_start, first_end) = span(&results[0]);
    let (second_start, second_end) = span(&results[1]);
    assert!(
        first_end <= second_start || second_end <= first_start,
        "one instance never runs two calls at once"
    );
}

fn load_error(bytes: &[u8]) -> PluginError {
    match host().load_bytes("/plugins/bad.wasm", bytes) {
        Ok(plugin) => panic!("{plugin:?} should have been refused"),
        Err(error) => error,
    }
}

#[test]
fn malformed_files_are_refused_with_the_reason() {
    let error = load_error(b"hello, not wasm");
    assert!(matches!(error, PluginError::NotWasm { .. }), "{error}");
    assert!(error.to_string().contains("/plugins/bad.wasm"));

    let mut truncated = std::fs::read(plugin_path("greet")).expect("built");
    truncated.truncate(truncated.len() / 2);
    let error = load_error(&truncated);
    assert!(matches!(error, PluginError::Invalid { .. }), "{error}");
}

#[test]
fn core_modules_are_refused() {
    let module = wat::parse_str("(module (func (export \"run\")))").expect("wat");
    let error = load_error(&module);
    assert!(matches!(error, PluginError::CoreModule { .. }), "{error}");
    assert!(error.to_string().contains("wasm32-wasip2"));
}

#[test]
fn components_of_another_world_are_refused() {
    let other = wat::parse_str(
        r#"(component
            (core module $m (func (export "run")))
            (core instance $i (instantiate $m))
            (func $run (canon lift (core func $i "run")))
            (export "run" (func $run)))"#,
    )
    .expect("wat");
    let error = load_error(&other);
    assert!(matches!(error, PluginError::WrongWorld { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("tools and execute") && message.contains("exports run"),
        "{message}"
    );
}

/// The refusal names what the component exports: all of them, each whole, made an error the
/// size of the file (a thousand exports of a hundred characters), logged and printed.
#[test]
fn the_exports_of_a_component_of_another_world_are_named_within_bounds() {
    let long = "a".repeat(200);
    let exports: String = (0..1000)
        .map(|i| format!("(export \"{long}-x{i}\" (func $run))\n"))
        .collect();
    let other = wat::parse_str(format!(
        r#"(component
            (core module $m (func (export "run")))
            (core instance $i (instantiate $m))
            (func $run (canon lift (core func $i "run")))
            {exports})"#
    ))
    .expect("wat");
    let message = load_error(&other).to_string();
    assert!(message.contains("and 980 more"), "{}", &message[..200]);
    assert!(message.len() < 4_000, "{} bytes", message.len());
}

#[test]
fn exports_of_the_wrong_type_are_refused() {
    let wrong = wat::parse_str(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "tools" (func $f))
            (export "execute" (func $f)))"#,
    )
    .expect("wat");
    let error = load_error(&wrong);
    assert!(matches!(error, PluginError::WrongWorld { .. }), "{error}");
}

#[test]
fn another_version_of_the_contract_is_refused_naming_both() {
    for version in ["2.0.0", "0.4.0"] {
        let future = wat::parse_str(format!(
            r#"(component (import "llm-worker:tool/types@{version}" (instance)))"#
        ))
        .expect("wat");
        let error = load_error(&future);
        match &error {
            PluginError::WrongVersion {
                found, expected, ..
            } => {
                assert_eq!(found, version);
                assert_eq!(expected, "0.1.0, 0.2.0, 0.3.0 and 1.0.0");
            }
            other => panic!("expected WrongVersion, got {other}"),
        }
        let message = error.to_string();
        assert!(
            message.contains(&format!("llm-worker:tool@{version}")),
            "{message}"
        );
        assert!(
            message.contains("0.1.0, 0.2.0, 0.3.0 and 1.0.0"),
            "{message}"
        );
    }
}

#[test]
fn unknown_imports_are_refused_naming_the_import() {
    let needs = wat::parse_str(
        r#"(component (import "evil:host/escape@1.0.0" (instance (export "open" (func)))))"#,
    )
    .expect("wat");
    let error = load_error(&needs);
    assert!(
        matches!(error, PluginError::UnsupportedImport { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("evil:host/escape@1.0.0"),
        "{error}"
    );
}

#[test]
fn missing_files_are_io_errors() {
    let error = host()
        .load("/definitely/not/here.wasm")
        .expect_err("no such file");
    assert!(matches!(error, PluginError::Io { .. }), "{error}");
    assert!(error.to_string().contains("/definitely/not/here.wasm"));
}

fn limited_host(limits: Limits) -> LoadedPlugin {
    PluginHost::with_limits(limits)
        .and_then(|host| host.load(plugin_path("trapper")))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_trap_restarts_the_instance_and_other_tools_keep_working() {
    let mut worker = worker_with(&["trapper", "counter"]);
    worker
        .register_tools(plugin("notes").definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    assert_eq!(call(&handle, "tick", "{}").await.as_deref(), Ok("0"));
    assert_eq!(call(&handle, "tick", "{}").await.as_deref(), Ok("1"));
    assert_eq!(call(&handle, "count", "{}").await.as_deref(), Ok("0"));

    let message = error_message(call(&handle, "panic", "{}").await);
    assert!(
        message.contains("trapper") && message.contains("panic"),
        "{message}"
    );
    assert!(
        message.contains("restarted") && message.contains("state was lost"),
        "{message}"
    );

    assert_eq!(
        call(&handle, "tick", "{}").await.as_deref(),
        Ok("0"),
        "a fresh instance"
    );
    assert_eq!(
        call(&handle, "count", "{}").await.as_deref(),
        Ok("1"),
        "others unaffected"
    );
}

#[tokio::test]
async fn an_endless_loop_hits_the_time_limit() {
    let trapper = limited_host(Limits::default().call_timeout(Duration::from_millis(200)));
    let mut worker = Worker::new();
    worker
        .register_tools(trapper.definitions())
        .expect("registers");
    worker
        .register_tools(plugin("counter").definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    let message = error_message(call(&handle, "spin_forever", "{}").await);
    assert!(message.contains("time limit of 200ms"), "{message}");
    assert_eq!(call(&handle, "tick", "{}").await.as_deref(), Ok("0"));
    assert_eq!(call(&handle, "count", "{}").await.as_deref(), Ok("0"));
}

/// An output limit above the 4 MiB wasmtime lets one copy out of a plugin take by default:
/// a result under the limit trapped the instance (a failure counted against the plugin, its
/// state lost) instead of being returned, and one over it was not refused as such.
#[tokio::test]
async fn an_output_limit_above_four_mebibytes_is_honoured() {
    let trapper = limited_host(
        Limits::default()
            .memory_bytes(64 << 20)
            .max_output_bytes(8 << 20),
    );
    let mut worker = Worker::new();
    worker
        .register_tools(trapper.definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    assert_eq!(call(&handle, "tick", "{}").await.as_deref(), Ok("0"));
    let six = call(
        &handle,
        "big_output",
        &format!(r#"{{"bytes":{}}}"#, 6 << 20),
    )
    .await;
    assert_eq!(
        six.map(|text| text.len()).map_err(|e| e.to_string()),
        Ok(6 << 20)
    );
    let message = error_message(
        call(
            &handle,
            "big_output",
            &format!(r#"{{"bytes":{}}}"#, 9 << 20),
        )
        .await,
    );
    assert!(
        message.contains("output limit of 8388608 bytes"),
        "{message}"
    );
    // The same instance: neither call trapped it.
    assert_eq!(call(&handle, "tick", "{}").await.as_deref(), Ok("1"));
}

#[tokio::test]
async fn memory_and_output_limits_are_enforced() {
    let trapper = limited_host(
        Limits::default()
            .memory_bytes(32 << 20)
            .max_output_bytes(1000),
    );
    let mut worker = Worker::new();
    worker
        .register_tools(trapper.definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    let message = error_message(call(&handle, "allocate", r#"{"mib":64}"#).await);
    assert!(
        message.contains("memory") && message.contains("32 MiB"),
        "{message}"
    );
    assert_eq!(
        call(&handle, "allocate", r#"{"mib":1}"#).await.as_deref(),
        Ok("1048576")
    );

    let message = error_message(call(&handle, "big_output", r#"{"bytes":5000}"#).await);
    assert!(message.contains("output limit of 1000 bytes"), "{message}");
    assert_eq!(
        call(&handle, "big_output", r#"{"bytes":3}"#)
            .await
            .as_deref(),
        Ok("xxx")
    );
}

#[tokio::test]
async fn inputs_over_the_limit_never_reach_the_plugin() {
    let trapper = limited_host(Limits::default().max_input_bytes(64));
    let mut worker = Worker::new();
    worker
        .register_tools(trapper.definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    let big = format!(r#"{{"bytes":1,"pad":"{}"}}"#, "x".repeat(100));
    let message = error_message(call(&handle, "big_output", &big).await);
    assert!(
        message.contains("Invalid argument") && message.contains("limit"),
        "{message}"
    );
}

#[tokio::test]
async fn repeated_failures_disable_the_instance() {
    let trapper = limited_host(Limits::default().max_consecutive_failures(2));
    let mut worker = Worker::new();
    worker
        .register_tools(trapper.definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    error_message(call(&handle, "panic", "{}").await);
    error_message(call(&handle, "panic", "{}").await);
    let message = error_message(call(&handle, "tick", "{}").await);
    assert!(
        message.contains("disabled") && message.contains("2 consecutive failures"),
        "{message}"
    );

    // A new session of the same plugin is not affected.
    let mut fresh = Worker::new();
    fresh
        .register_tools(trapper.definitions())
        .expect("registers");
    assert_eq!(
        fresh
            .tool_server_handle()
            .call_tool("tick", "{}")
            .await
            .as_deref(),
        Ok("0")
    );
}

/// The host checks inputs against the schema before the plugin runs, listing every problem
/// with its JSON path; the plugin never sees the bad input (its state does not change).
#[tokio::test]
async fn inputs_are_checked_against_the_schema_before_the_plugin_runs() {
    let handle = worker_with(&["text", "trapper"]).tool_server_handle();
    let message = error_message(
        call(
            &handle,
            "join",
            r#"{"words":["a",3],"style":{"separator":1}}"#,
        )
        .await,
    );
    assert!(message.contains("at /words/1:"), "{message}");
    assert!(message.contains("at /style/separator:"), "{message}");

    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let message = error_message(call(&handle, "tick", &deep).await);
    assert!(
        message.contains("not valid JSON") && message.contains("recursion limit"),
        "{message}"
    );
    let message = error_message(call(&handle, "tick", "[]").await);
    assert!(message.contains("input schema"), "{message}");
    assert_eq!(
        call(&handle, "tick", "{}").await.as_deref(),
        Ok("0"),
        "no call reached it"
    );
}

#[test]
fn inputs_can_be_checked_without_calling() {
    let text = plugin("text");
    assert_eq!(
        text.check_input("join", r#"{"words":["a","b"],"style":{"separator":" "}}"#),
        Ok(())
    );
    let Err(ToolError::InvalidArgument(message)) =
        text.check_input("join", r#"{"words":["a",3],"style":{"separator":1}}"#)
    else {
        panic!("a schema violation is an invalid argument");
    };
    assert!(message.contains("at /words/1:"), "{message}");
    assert!(message.contains("at /style/separator:"), "{message}");
    let Err(ToolError::InvalidArgument(message)) = text.check_input("join", "{") else {
        panic!("bad JSON is an invalid argument");
    };
    assert!(message.contains("not valid JSON"), "{message}");
    let Err(ToolError::InvalidArgument(message)) = text.check_input("nope", "{}") else {
        panic!("an unknown tool is an invalid argument");
    };
    assert!(
        message.contains("'nope'") && message.contains("join"),
        "{message}"
    );
}
