//! The host depends on the WIT, not on the Rust SDK: components written by hand in the
//! WebAssembly text format load and run, and their tool lists are checked like any other.

use llm_worker::*;
use llm_worker_tests::host;

const LIST_AT: usize = 256;
const STRINGS_AT: usize = 1024;
const TOOLS_RET: usize = 64;
const EXECUTE_RET: usize = 96;

/// A component of the world `tool-plugin`, hand-written: `tools` returns `tools` (name,
/// description, schema) and `execute` always returns `Ok(output)`.
fn wat_plugin(tools: &[(&str, &str, &str)], output: &str) -> Vec<u8> {
    wat_plugin_with(tools, output, "")
}

/// [`wat_plugin`] with extra items in its core module (e.g. a start function).
fn wat_plugin_with(tools: &[(&str, &str, &str)], output: &str, extra: &str) -> Vec<u8> {
    let mut memory = vec![0u8; 8192];
    let mut next_string = STRINGS_AT;
    let mut put_string = |memory: &mut Vec<u8>, text: &str| -> (u32, u32) {
        let at = next_string;
        memory[at..at + text.len()].copy_from_slice(text.as_bytes());
        next_string += text.len();
        (at as u32, text.len() as u32)
    };
    let put_u32 = |memory: &mut Vec<u8>, at: usize, value: u32| {
        memory[at..at + 4].copy_from_slice(&value.to_le_bytes());
    };
    for (index, (name, description, schema)) in tools.iter().enumerate() {
        let record = LIST_AT + index * 24;
        for (field, text) in [name, description, schema].into_iter().enumerate() {
            let (ptr, len) = put_string(&mut memory, text);
            put_u32(&mut memory, record + field * 8, ptr);
            put_u32(&mut memory, record + field * 8 + 4, len);
        }
    }
    put_u32(&mut memory, TOOLS_RET, LIST_AT as u32);
    put_u32(&mut memory, TOOLS_RET + 4, tools.len() as u32);
    let (ptr, len) = put_string(&mut memory, output);
    memory[EXECUTE_RET] = 0; // result::ok
    put_u32(&mut memory, EXECUTE_RET + 4, ptr);
    put_u32(&mut memory, EXECUTE_RET + 8, len);
    let data: String = memory.iter().map(|b| format!("\\{b:02x}")).collect();

    let text = format!(
        r#"(component
  (import "llm-worker:tool/types@0.1.0" (instance $types
    (type $meta (record (field "name" string) (field "description" string) (field "input-schema" string)))
    (export "tool-meta" (type (eq $meta)))
    (type $err (variant (case "invalid-argument" string) (case "execution-failed" string) (case "internal" string)))
    (export "tool-error" (type (eq $err)))))
  (alias export $types "tool-meta" (type $tool-meta))
  (alias export $types "tool-error" (type $tool-error))
  (core module $m
    (memory (export "memory") 2)
    (data (i32.const 0) "{data}")
    (global $heap (mut i32) (i32.const 16384))
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      global.get $heap
      local.set $at
      global.get $heap
      local.get 3
      i32.add
      global.set $heap
      local.get $at)
    (func (export "tools") (result i32) i32.const {TOOLS_RET})
    (func (export "execute") (param i32 i32 i32 i32) (result i32) i32.const {EXECUTE_RET})
    {extra})
  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "cabi_realloc" (core func $realloc))
  (type $tools-type (func (result (list $tool-meta))))
  (func $tools (type $tools-type) (canon lift (core func $i "tools") (memory $mem)))
  (type $execute-type (func (param "name" string) (param "input-json" string)
    (result (result string (error $tool-error)))))
  (func $execute (type $execute-type)
    (canon lift (core func $i "execute") (memory $mem) (realloc $realloc)))
  (export "tools" (func $tools))
  (export "execute" (func $execute)))"#
    );
    wat::parse_str(text).unwrap_or_else(|e| panic!("{e}"))
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
    assert!(error.to_string().contains("lists no tools"));
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
