//! The host depends on the WIT, not on the Rust SDK: components written by hand in the
//! WebAssembly text format load and run, and their tool lists are checked like any other.

use llm_worker::*;
use llm_worker_tests::host;
use llm_worker_tests::wat::WatComponent;

/// A component of the world `tool-plugin`, hand-written: `tools` returns `tools` (name,
/// description, schema) and `execute` always returns `Ok(output)`.
fn wat_plugin(tools: &[(&str, &str, &str)], output: &str) -> Vec<u8> {
    WatComponent::new(tools).output(output).build()
}

/// [`wat_plugin`] with extra items in its core module (e.g. a start function).
fn wat_plugin_with(tools: &[(&str, &str, &str)], output: &str, extra: &str) -> Vec<u8> {
    WatComponent::new(tools)
        .output(output)
        .core_items(extra)
        .build()
}

const OBJECT: &str = r#"{"type":"object"}"#;

#[tokio::test]
async fn a_hand_written_component_loads_and_runs() {
    let bytes = wat_plugin(&[("echo_time", "Says what time it is.", OBJECT)], "noon");
    let plugin = host()
        .load_bytes("/plugins/wat-clock.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plugin.name(), "wat-clock");
    assert_eq!(plugin.tools()[0].description, "Says what time it is.");
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .expect("registers");
    let handle = worker.tool_server_handle();
    assert_eq!(
        handle.call_tool("echo_time", "{}").await.as_deref(),
        Ok("noon")
    );
    assert_eq!(
        handle
            .call_tool("echo_time", r#"{"a":[1,2]}"#)
            .await
            .as_deref(),
        Ok("noon")
    );
}

fn refused(tools: &[(&str, &str, &str)]) -> PluginError {
    match host().load_bytes("/plugins/wat.wasm", &wat_plugin(tools, "")) {
        Ok(plugin) => panic!("{plugin:?} should have been refused"),
        Err(error) => error,
    }
}

#[test]
fn a_plugin_without_tools_is_refused() {
    let error = refused(&[]);
    assert!(matches!(error, PluginError::NoTools { .. }), "{error}");
    assert!(error.to_string().contains("offers nothing"));
}

#[test]
fn bad_tool_names_are_refused() {
    for name in ["", "has space", "semi;colon", &"x".repeat(65)] {
        let error = refused(&[(name, "d", OBJECT)]);
        assert!(
            matches!(error, PluginError::InvalidToolName { .. }),
            "{name:?}: {error}"
        );
    }
    let ok = host().load_bytes(
        "/plugins/wat.wasm",
        &wat_plugin(&[("A-z_09", "d", OBJECT)], ""),
    );
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn repeated_tool_names_are_refused() {
    let error = refused(&[("same", "a", OBJECT), ("same", "b", OBJECT)]);
    match error {
        PluginError::DuplicateToolName { name, .. } => assert_eq!(name, "same"),
        other => panic!("expected DuplicateToolName, got {other}"),
    }
}

#[test]
fn invalid_schemas_are_refused_naming_the_tool() {
    for schema in ["not json", "[]", r#"{"type":"string"}"#] {
        let error = refused(&[("fine", "d", OBJECT), ("broken", "d", schema)]);
        match &error {
            PluginError::InvalidSchema { tool, .. } => assert_eq!(tool, "broken"),
            other => panic!("expected InvalidSchema for {schema}, got {other}"),
        }
        assert!(error.to_string().contains("'broken'"));
    }
}

/// Property names that differ only in case (`straße` and `strasse` fold alike): every input
/// naming both is refused as ambiguous, so the tool could never be called with both.
#[test]
fn properties_differing_only_in_case_are_refused_naming_them() {
    for schema in [
        r#"{"type":"object","properties":{"id":{},"ID":{}}}"#,
        r#"{"type":"object","properties":{"straße":{},"strasse":{}}}"#,
        r#"{"type":"object","properties":{"a":{"type":"object","properties":{"k":{},"K":{}}}}}"#,
    ] {
        let error = refused(&[("clashing", "d", schema)]);
        let message = error.to_string();
        assert!(
            matches!(error, PluginError::InvalidSchema { .. })
                && message.contains("'clashing'")
                && message.contains("never be called"),
            "{schema}: {message}"
        );
    }
    // Names alike but for more than case are fine.
    assert!(
        llm_worker_tests::host()
            .load_bytes(
                "/plugins/fine.wasm",
                &wat_plugin(
                    &[(
                        "fine",
                        "d",
                        r#"{"type":"object","properties":{"id":{},"id2":{}}}"#
                    )],
                    ""
                ),
            )
            .is_ok()
    );
}

#[test]
fn a_trap_while_starting_refuses_the_plugin() {
    let bytes = wat_plugin_with(
        &[("t", "d", OBJECT)],
        "",
        "(func $boom unreachable) (start $boom)",
    );
    let error = host()
        .load_bytes("/plugins/boom.wasm", &bytes)
        .expect_err("refused");
    assert!(matches!(error, PluginError::Startup { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("boom.wasm") && message.contains("trapped"),
        "{message}"
    );
}

#[test]
fn unbounded_recursion_overflows_the_wasm_stack() {
    let bytes = wat_plugin_with(&[("t", "d", OBJECT)], "", "(func $f call $f) (start $f)");
    let error = host()
        .load_bytes("/plugins/deep.wasm", &bytes)
        .expect_err("refused");
    assert!(
        error.to_string().contains("overflowed its stack"),
        "{error}"
    );
}
