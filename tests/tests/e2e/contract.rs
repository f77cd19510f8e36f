//! Contract 0.2.0 beside 0.1.0: hand-built 0.1.0 components keep working; 0.2.0 plugins give
//! titles, output schemas (checked) and hints (kept only as far as the policy makes them
//! true), and report logs and progress to the caller's scope, bounded.

use std::sync::{Arc, Mutex};

use llm_worker::events::{LogLevel, MAX_LOGS_PER_CALL, ToolEvent, ToolEventKind, with_tool_events};
use llm_worker::*;
use llm_worker_tests::wat::{MetaV2, WatComponent};
use llm_worker_tests::{
    error_message, host, plugin, plugin_path, plugin_v03_path, scratch_dir, session,
};

fn meta<'a>(plugin: &'a LoadedPlugin, tool: &str) -> &'a ToolMeta {
    plugin
        .tools()
        .iter()
        .find(|m| m.name == tool)
        .unwrap_or_else(|| panic!("no tool {tool}"))
}

#[tokio::test]
async fn a_hand_built_0_1_0_component_still_loads_and_runs() {
    let bytes = WatComponent::new(&[("clock", "Says the time.", r#"{"type":"object"}"#)])
        .output("noon")
        .build();
    let old = host()
        .load_bytes("/plugins/old-clock.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(old.contract_version(), "0.1.0");
    let clock = meta(&old, "clock");
    assert_eq!(clock.title, None);
    assert_eq!(clock.output_schema, None);
    // 0.1.0 says nothing of hints; the host still vouches for what the policy makes true.
    assert_eq!(
        clock.annotations,
        ToolAnnotations {
            open_world: Some(false),
            ..ToolAnnotations::default()
        }
    );
    assert!(old.warnings().is_empty());
    assert_eq!(
        session(&old).call_tool("clock", "{}").await.as_deref(),
        Ok("noon")
    );
}

/// A 0.2.0 component written by hand (no SDK, no wit-bindgen), importing the `host`
/// interface: its title, output schema and hints are read, the hints it cannot back are
/// dropped or set by the host, and its results are checked against its output schema.
#[tokio::test]
async fn a_hand_built_0_2_0_component_is_read_and_checked() {
    let schema = r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#;
    let bytes = WatComponent::new(&[
        ("count", "Counts.", r#"{"type":"object"}"#),
        ("hi", "Says hi.", r#"{"type":"object"}"#),
        ("liar", "Breaks its schema.", r#"{"type":"object"}"#),
    ])
    .v2(vec![
        MetaV2 {
            title: Some("Count things".into()),
            output_schema: Some(schema.into()),
            hints: [Some(true), Some(false), Some(true), Some(false)],
        },
        MetaV2::default(),
        MetaV2 {
            output_schema: Some(schema.into()),
            ..MetaV2::default()
        },
    ])
    .output(r#"{"n":3}"#)
    .output(r#"{"n":"three"}"#)
    .execute(&format!(
        // `count` (the name of 5 bytes) returns the first output; `hi` and `liar` the second,
        // which `hi` (no schema) may return as text and `liar` breaks its schema with.
        "(if (result i32) (i32.eq (local.get $name-len) (i32.const 5))
            (then (i32.const {})) (else (i32.const {})))",
        llm_worker_tests::wat::ret(0),
        llm_worker_tests::wat::ret(1)
    ))
    .build();
    let new = host()
        .load_bytes("/plugins/hand-v2.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(new.contract_version(), "0.2.0");
    let count = meta(&new, "count");
    assert_eq!(count.title.as_deref(), Some("Count things"));
    assert_eq!(
        count.output_schema.as_ref().map(|s| s["type"].clone()),
        Some("object".into())
    );
    assert_eq!(
        count.annotations,
        ToolAnnotations {
            read_only: Some(true),
            destructive: Some(false),
            idempotent: Some(true),
            open_world: Some(false),
        }
    );
    let hi = meta(&new, "hi");
    assert_eq!(
        (hi.title.as_deref(), hi.output_schema.as_ref()),
        (None, None)
    );
    let tools = session(&new);
    assert_eq!(
        tools.call_tool("count", "{}").await.as_deref(),
        Ok(r#"{"n":3}"#)
    );
    assert_eq!(
        tools.call_tool("hi", "{}").await.as_deref(),
        Ok(r#"{"n":"three"}"#)
    );
    let message = error_message(tools.call_tool("liar", "{}").await);
    assert!(
        message.contains("tool 'liar' of plugin 'hand-v2' broke its own contract")
            && message.contains("/n"),
        "{message}"
    );
}

/// One component naming both versions is neither: refused, naming what it found.
#[test]
fn a_component_mixing_versions_is_refused() {
    let mixed = wat::parse_str(
        r#"(component
            (import "llm-worker:tool/types@0.1.0" (instance))
            (import "llm-worker:tool/host@0.2.0" (instance)))"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let error = host()
        .load_bytes("/plugins/mixed.wasm", &mixed)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("llm-worker:tool@0.2.0") && error.contains("0.1.0, 0.2.0, 0.3.0 and 1.0.0"),
        "{error}"
    );
}

#[tokio::test]
async fn a_structured_result_matches_its_output_schema() {
    // As the SDK builds it today (1.0.0), and as it built it for 0.3.0: the same record.
    let v03 = host()
        .load(plugin_v03_path("text"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v03.contract_version(), "0.3.0");
    assert_eq!(meta(&v03, "stats"), meta(&plugin("text"), "stats"));
    let text = plugin("text");
    assert_eq!(text.contract_version(), "1.0.0");
    let stats = meta(&text, "stats");
    assert_eq!(stats.title.as_deref(), Some("Text statistics"));
    assert_eq!(
        stats.annotations,
        ToolAnnotations {
            read_only: Some(true),
            destructive: None,
            idempotent: Some(true),
            open_world: Some(false),
        }
    );
    let schema = stats
        .output_schema
        .clone()
        .unwrap_or_else(|| panic!("stats has no output schema"));
    let output = session(&text)
        .call_tool("stats", r#"{"text":"two words"}"#)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let value: serde_json::Value = serde_json::from_str(&output).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(value, serde_json::json!({"words": 2, "chars": 9}));
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{e}"));
    assert!(validator.is_valid(&value), "{output} against {schema}");
    // A tool without a structured result has none.
    assert_eq!(meta(&text, "join").output_schema, None);
}

#[tokio::test]
async fn a_result_that_breaks_its_own_schema_is_the_plugins_internal_error() {
    let trapper = plugin("trapper");
    let tools = session(&trapper);
    let message = error_message(tools.call_tool("broken_contract", "{}").await);
    assert!(
        message.contains("Internal error")
            && message
                .contains("tool 'broken_contract' of plugin 'trapper' broke its own contract")
            && message.contains("count"),
        "{message}"
    );
}

type Collected = Arc<Mutex<Vec<ToolEvent>>>;

fn collector() -> (impl Fn(ToolEvent) + Send + Sync + 'static, Collected) {
    let events: Collected = Arc::default();
    let into = Arc::clone(&events);
    (
        move |event| into.lock().unwrap_or_else(|p| p.into_inner()).push(event),
        events,
    )
}

#[tokio::test]
async fn logs_and_progress_reach_the_callers_scope() {
    let search = plugin("search");
    let tools = session(&search);
    let (sink, events) = collector();
    let output = with_tool_events(sink, tools.call_tool("search", r#"{"query":"wasm"}"#))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(output.contains("wasmtime"), "{output}");
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        events
            .iter()
            .all(|e| e.plugin == "search" && e.tool == "search")
    );
    let logs: Vec<(LogLevel, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            ToolEventKind::Log { level, message } => Some((*level, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        logs[0],
        (LogLevel::Info, "searching 4 documents for \"wasm\"".into())
    );
    // Throttled to one report per interval, but the one that completes the work passes.
    let last = events.iter().rev().find_map(|e| match &e.kind {
        ToolEventKind::Progress { done, total, .. } => Some((*done, *total)),
        _ => None,
    });
    assert_eq!(last, Some((4.0, Some(4.0))));
}

/// A plugin's dependencies log through the `log` crate, not the SDK: the SDK forwards their
/// records, which reach the host like the plugin's own logs, at their levels, tagged with the
/// plugin and the tool.
#[tokio::test]
async fn a_dependencys_log_records_reach_the_host() {
    let trapper = plugin("trapper");
    let tools = session(&trapper);
    let (sink, events) = collector();
    let output = with_tool_events(
        sink,
        tools.call_tool("count_words", r#"{"text":"one two three"}"#),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(output, "3");
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        events
            .iter()
            .all(|e| e.plugin == "trapper" && e.tool == "count_words"),
        "{events:?}"
    );
    let logs: Vec<(LogLevel, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            ToolEventKind::Log { level, message } => Some((*level, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        logs,
        [
            (LogLevel::Info, "counted 3 words".to_owned()),
            (LogLevel::Debug, "in 13 bytes".to_owned()),
        ]
    );
}

#[tokio::test]
async fn a_worker_tags_events_with_the_call_id() {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin("search").definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let (sink, events) = collector();
    let calls = vec![ToolCall {
        id: "call-7".into(),
        name: "search".into(),
        input: serde_json::json!({"query": "mcp"}),
    }];
    let results = with_tool_events(sink, worker.execute_tool_calls(calls))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(results.len(), 1);
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(!events.is_empty());
    assert!(
        events
            .iter()
            .all(|e| e.call_id.as_deref() == Some("call-7"))
    );
}

#[tokio::test]
async fn a_workers_event_hook_sees_its_calls_reports() {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin("search").definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let (sink, events) = collector();
    worker.add_tool_event_hook(move |event| sink(event.clone()));
    let calls = vec![ToolCall {
        id: "call-9".into(),
        name: "search".into(),
        input: serde_json::json!({"query": "wasi"}),
    }];
    // No `with_tool_events` scope: the hook alone gets them.
    worker
        .execute_tool_calls(calls)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(events.iter().any(|e| matches!(&e.kind,
        ToolEventKind::Progress { done, total: Some(total), .. } if done == total)));
    assert!(
        events
            .iter()
            .all(|e| e.call_id.as_deref() == Some("call-9") && e.tool == "search")
    );
}

#[tokio::test]
async fn a_chatty_plugin_is_bounded() {
    let trapper = plugin("trapper");
    let tools = session(&trapper);
    let (sink, events) = collector();
    let output = with_tool_events(sink, tools.call_tool("chatty", r#"{"lines":5000}"#))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(output, "said it all");
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let logs = events
        .iter()
        .filter(|e| matches!(e.kind, ToolEventKind::Log { .. }))
        .count();
    assert_eq!(logs, MAX_LOGS_PER_CALL as usize + 1);
    assert!(
        matches!(&events.iter().rev().find(|e| matches!(e.kind, ToolEventKind::Log { .. })).map(|e| &e.kind),
        Some(ToolEventKind::Log { message, .. }) if message.starts_with("4900 more log messages"))
    );
    let progress = events.len() - logs;
    assert!(
        progress < 100,
        "{progress} progress reports passed the throttle"
    );
}

#[tokio::test]
async fn what_a_plugin_prints_is_bounded_like_its_logs() {
    let trapper = plugin("trapper");
    let tools = session(&trapper);
    let (sink, events) = collector();
    let output = with_tool_events(sink, tools.call_tool("print_lines", r#"{"lines":5000}"#))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(output, "printed");
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let logs: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            ToolEventKind::Log { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    // 5,000 lines: the same 100 messages per call as the plugin's own logs, then one notice.
    assert_eq!(
        logs.len(),
        MAX_LOGS_PER_CALL as usize + 1,
        "{:?}",
        &logs[..3]
    );
    // The 16 KiB buffer keeps the newest lines: the first may have lost its beginning.
    assert!(logs[0].starts_with("stdout: "), "{}", logs[0]);
    assert!(
        logs[logs.len() - 1].contains("more log messages of this call were dropped"),
        "{logs:?}"
    );
    // The next call has its own allowance.
    let (sink, events) = collector();
    with_tool_events(sink, tools.call_tool("print_lines", r#"{"lines":2}"#))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let said: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            ToolEventKind::Log { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        said,
        [
            "stdout: line 0",
            "stdout: line 1",
            "stderr: printed 2 lines"
        ]
    );
}

/// A plugin claiming read-only, granted a read-write directory: the claim is dropped, with a
/// warning; a granted HTTP destination makes the tool open-world.
#[test]
fn claims_the_policy_contradicts_are_dropped_with_a_warning() {
    let dir = scratch_dir("contract-claims");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap_or_else(|e| panic!("{e}"));
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(plugin_path("text"), plugins.join("text.wasm")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        plugins.join("text.policy.toml"),
        format!(
            "[[dirs]]\nhost = {:?}\nguest = \"/data\"\nmode = \"rw\"\n\n[http]\nallow = [\"https://api.example.com\"]\n",
            data.display().to_string()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = PluginHost::new()
        .and_then(|host| host.load(plugins.join("text.wasm")))
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = meta(&text, "stats");
    assert_eq!(stats.annotations.read_only, None);
    assert_eq!(stats.annotations.open_world, None);
    assert_eq!(stats.annotations.idempotent, Some(true));
    assert!(
        text.warnings()
            .iter()
            .any(|w| w.contains("tool 'stats' claims to be read-only")
                && w.contains("read-write directory")),
        "{:?}",
        text.warnings()
    );
}

/// A component made with the component model's asynchronous calling convention that names no
/// interface of contract 1.0.0 (as another toolchain may make one) is refused at load, saying
/// so: the older contracts run one call at a time, and an async export could leave code
/// running after it returned, outside the bounds a 1.0.0 instance keeps on such code. It is
/// compiled once, not again for the other engine.
#[test]
fn a_component_of_an_older_contract_lifted_asynchronously_is_refused() {
    // With a callback, naming no contract; and stackful (no callback) with an `execute` that
    // names contract 0.3.0 by importing its types: what could return and keep running.
    let components = [
        r#"(component
            (core module $m
                (func (export "run") (result i32) i32.const 0)
                (func (export "callback") (param i32 i32 i32) (result i32) i32.const 0))
            (core instance $i (instantiate $m))
            (type $run (func async))
            (func (export "run") (type $run)
                (canon lift (core func $i "run") async (callback (core func $i "callback")))))"#,
        r#"(component
            (import "llm-worker:tool/types@0.3.0" (instance))
            (core module $m (func (export "execute")))
            (core instance $i (instantiate $m))
            (type $execute (func async))
            (func (export "execute") (type $execute)
                (canon lift (core func $i "execute") async)))"#,
    ];
    for text in components {
        let lifted_async = wat::parse_str(text).unwrap_or_else(|e| panic!("{e}"));
        let error = host()
            .load_bytes("/plugins/lifted-async.wasm", &lifted_async)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("lifted-async.wasm")
                && error.contains("asynchronous calling convention")
                && error.contains("wit/1.0.0"),
            "{error}"
        );
    }
}
