//! Every example plugin in `plugins/`, built from source, loaded by the host, its schema
//! checked and its tools called through a `Worker`.

use llm_worker::*;
use llm_worker_tests::{EXAMPLE_PLUGINS, EXAMPLE_TOOLS, error_message, plugin};
use serde_json::{Value, json};

fn meta(plugin_name: &str, tool: &str) -> ToolMeta {
    plugin(plugin_name)
        .tools()
        .iter()
        .find(|m| m.name == tool)
        .cloned()
        .unwrap_or_else(|| panic!("{plugin_name} has no tool {tool}"))
}

fn required(schema: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    names.sort_unstable();
    names
}

fn property_description<'a>(schema: &'a Value, field: &str) -> &'a str {
    schema["properties"][field]["description"]
        .as_str()
        .unwrap_or_else(|| panic!("no description for {field} in {schema}"))
}

async fn session(plugin_name: &str) -> ToolServerHandle {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin(plugin_name).definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    worker.tool_server_handle()
}

#[tokio::test]
async fn greet_is_the_spec_example() {
    let meta = meta("greet", "greet");
    assert_eq!(meta.description, "挨拶する\nGreets someone by name.");
    assert_eq!(required(&meta.input_schema), ["name"]);
    assert_eq!(
        property_description(&meta.input_schema, "name"),
        "名前 (the name to greet)"
    );
    let tools = session("greet").await;
    assert_eq!(
        tools
            .call_tool("greet", r#"{"name":"Alice"}"#)
            .await
            .as_deref(),
        Ok("Hello, Alice!")
    );
}

#[tokio::test]
async fn counter_keeps_state_between_calls() {
    let tools = session("counter").await;
    assert_eq!(tools.call_tool("peek", "{}").await.as_deref(), Ok("0"));
    assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
    assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("1"));
    assert_eq!(tools.call_tool("peek", "{}").await.as_deref(), Ok("2"));
    assert!(required(&meta("counter", "count").input_schema).is_empty());
}

#[tokio::test]
async fn notes_share_state_and_report_errors() {
    let add = meta("notes", "add_note");
    assert_eq!(required(&add.input_schema), ["text"]);
    assert_eq!(
        property_description(&add.input_schema, "text"),
        "The note's text"
    );
    let tools = session("notes").await;
    assert_eq!(
        tools
            .call_tool("add_note", r#"{"text":"first"}"#)
            .await
            .as_deref(),
        Ok("1")
    );
    assert_eq!(
        tools
            .call_tool("add_note", r#"{"text":"second"}"#)
            .await
            .as_deref(),
        Ok("2")
    );
    assert_eq!(
        tools.call_tool("list_notes", "{}").await.as_deref(),
        Ok("first\nsecond")
    );
    let message = error_message(tools.call_tool("add_note", r#"{"text":"  "}"#).await);
    assert!(
        message.starts_with("Execution failed: the note is empty"),
        "{message}"
    );
}

#[tokio::test]
async fn calc_handles_numbers_and_result_errors() {
    let divide = meta("calc", "divide");
    assert_eq!(required(&divide.input_schema), ["dividend", "divisor"]);
    assert_eq!(
        divide.input_schema["properties"]["divisor"]["type"],
        "number"
    );
    let isqrt = meta("calc", "isqrt");
    assert_eq!(isqrt.input_schema["properties"]["n"]["type"], "integer");

    let tools = session("calc").await;
    assert_eq!(
        tools
            .call_tool("add", r#"{"a":1.5,"b":2}"#)
            .await
            .as_deref(),
        Ok("3.5")
    );
    assert_eq!(
        tools
            .call_tool("divide", r#"{"dividend":1,"divisor":4}"#)
            .await
            .as_deref(),
        Ok("0.25")
    );
    let message = error_message(
        tools
            .call_tool("divide", r#"{"dividend":1,"divisor":0}"#)
            .await,
    );
    assert!(
        message.contains("Execution failed: division by zero"),
        "{message}"
    );
    assert_eq!(
        tools.call_tool("isqrt", r#"{"n":17}"#).await.as_deref(),
        Ok("4")
    );
    let message = error_message(tools.call_tool("isqrt", r#"{"n":-1}"#).await);
    assert!(message.starts_with("Invalid argument:"), "{message}");
}

#[tokio::test]
async fn text_takes_options_vectors_nested_structs_and_enums() {
    let join = meta("text", "join");
    assert_eq!(
        required(&join.input_schema),
        ["style", "words"],
        "Option fields are optional"
    );
    assert_eq!(join.input_schema["properties"]["words"]["type"], "array");
    assert_eq!(
        property_description(&join.input_schema, "prefix"),
        "Text to put before the result, if any"
    );

    let tools = session("text").await;
    let joined = tools
        .call_tool(
            "join",
            &json!({"words": ["a", "b", "c"], "style": {"separator": "-"}}).to_string(),
        )
        .await;
    assert_eq!(joined.as_deref(), Ok("a-b-c"));
    let joined = tools
        .call_tool(
            "join",
            &json!({"words": ["x", "y"], "style": {"separator": " ", "uppercase": true}, "prefix": "> "})
                .to_string(),
        )
        .await;
    assert_eq!(joined.as_deref(), Ok("> X Y"));
    let stats = tools
        .call_tool("stats", r#"{"text":"one two  three"}"#)
        .await;
    assert_eq!(stats.as_deref(), Ok(r#"{"words":3,"chars":14}"#));
    assert_eq!(
        tools
            .call_tool("convert_case", r#"{"text":"MiXed","case":"lower"}"#)
            .await
            .as_deref(),
        Ok("mixed")
    );
    let message = error_message(
        tools
            .call_tool("convert_case", r#"{"text":"x","case":"title"}"#)
            .await,
    );
    assert!(
        message.starts_with("Invalid argument:") && message.contains(r#"at /case: "title""#),
        "the host checks the schema before the plugin runs: {message}"
    );
}

#[tokio::test]
async fn search_is_the_spec_example() {
    let search = meta("search", "search");
    assert_eq!(
        search.description,
        "検索を実行する\n指定されたクエリでデータベースを検索します。"
    );
    assert_eq!(required(&search.input_schema), ["query"]);
    assert_eq!(
        property_description(&search.input_schema, "query"),
        "検索クエリ文字列"
    );
    let tools = session("search").await;
    let found = tools
        .call_tool("search", r#"{"query":"WebAssembly","limit":2}"#)
        .await;
    assert_eq!(
        found.as_deref(),
        Ok(
            "Results for: webassembly\nwasmtime: A fast and secure runtime for WebAssembly\nwasi: The WebAssembly System Interface"
        )
    );
    let none = tools.call_tool("search", r#"{"query":"zebra"}"#).await;
    assert_eq!(
        none.as_deref(),
        Ok("Results for: zebra\n(no documents match)")
    );
}

#[tokio::test]
async fn all_examples_register_together_in_one_worker() {
    let mut worker = Worker::new();
    for name in EXAMPLE_PLUGINS {
        worker
            .register_tools(plugin(name).definitions())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let names: Vec<String> = worker
        .tool_server_handle()
        .tool_definitions_sorted()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, EXAMPLE_TOOLS);
}
