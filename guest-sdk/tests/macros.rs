//! How the macros turn ordinary methods into tools, checked natively through the public API:
//! return values by type, errors with their causes, arguments that refuse typos, defaults,
//! descriptions from the whole doc comment, `#[cfg]`, titles and hints.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use llm_worker_guest::{
    TaskSupport, ToolAnnotations, ToolDefinition, ToolError, ToolMeta, ToolRegistry, block_on,
    description, tool, tool_registry,
};
use serde::Serialize;
use serde_json::{Value, json};

type ToolResult<T> = Result<T, String>;

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Stats {
    /// How many words.
    words: u32,
    longest: Option<String>,
}

#[derive(Debug, Serialize)]
struct Untyped {
    n: u32,
}

#[derive(Debug)]
enum Shape {
    Circle(#[allow(dead_code)] u32),
}

#[derive(Debug, thiserror::Error)]
#[error("cannot open the index")]
struct IndexError(#[source] std::io::Error);

#[derive(Clone, Default)]
struct App;

impl App {
    const PAGE: u32 = 20;
}

#[tool_registry]
impl App {
    #[tool]
    fn alias_err(&self) -> ToolResult<String> {
        Err("no such user".into())
    }

    #[tool]
    fn alias_ok(&self) -> ToolResult<String> {
        Ok("fine".into())
    }

    #[tool]
    fn anyhow_err(&self) -> anyhow::Result<String> {
        use anyhow::Context;
        Err(anyhow::anyhow!("disk full")).context("cannot save the note")
    }

    #[tool]
    fn io_err(&self) -> std::io::Result<u32> {
        Err(std::io::Error::other("pipe closed"))
    }

    #[tool]
    fn qualified(&self) -> ::core::result::Result<u32, ::std::string::String> {
        Ok(7)
    }

    #[tool]
    fn chained(&self) -> Result<(), IndexError> {
        Err(IndexError(std::io::Error::other("permission denied")))
    }

    #[tool]
    fn boxed_err(&self) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        Err(Box::new(IndexError(std::io::Error::other("disk full"))))
    }

    #[tool]
    fn own_error(&self) -> Result<String, ToolError> {
        Err(ToolError::InvalidArgument("limit must be positive".into()))
    }

    #[tool]
    fn text(&self) -> String {
        "hello".into()
    }

    #[tool]
    fn static_text(&self) -> &'static str {
        "static"
    }

    #[tool]
    fn cow(&self) -> Cow<'static, str> {
        Cow::Borrowed("cow")
    }

    #[tool]
    fn json_value(&self) -> Value {
        json!({"a": [1, 2]})
    }

    #[tool]
    fn stats(&self) -> Result<Stats, String> {
        Ok(Stats {
            words: 3,
            longest: Some("word".into()),
        })
    }

    #[tool]
    fn list(&self) -> Vec<u32> {
        vec![1, 2]
    }

    #[tool]
    fn untyped(&self) -> Untyped {
        Untyped { n: 1 }
    }

    #[tool]
    fn shape(&self) -> Shape {
        Shape::Circle(2)
    }

    #[tool]
    fn nothing(&self) {}

    #[tool]
    fn search(
        &self,
        #[description = "Words to find"] query: String,
        #[default = 10] limit: u32,
        #[default = "en"] lang: String,
        #[serde(default)] exact: bool,
        #[default = Self::PAGE] size: u32,
        page: Option<u32>,
    ) -> String {
        format!("{query} {limit} {lang} {exact} {page:?} {size}")
    }

    // Two tools whose names and arguments' names join the same way (`a_b` + `c`, `a` + `b_c`):
    // each argument's default is its own.
    #[tool]
    fn a_b(&self, #[default = 1] c: u32) -> String {
        c.to_string()
    }

    #[tool]
    fn a(&self, #[default = 2] b_c: u32) -> String {
        b_c.to_string()
    }

    /// First paragraph,
    /// still the first.
    ///
    /// Second paragraph:
    ///
    ///     indented code
    #[tool]
    fn documented(&self) {}

    /**
     * A block comment.
     *
     * With two paragraphs.
     */
    #[tool]
    fn block(&self) {}

    #[doc = include_str!("doc.md")]
    #[tool]
    fn manual(&self) {}

    #[tool]
    fn undocumented(&self) {}

    /// Reads a note.
    #[tool(title = "Read a note", read_only, idempotent, open_world = false)]
    fn read_note(&self, id: u32) -> String {
        id.to_string()
    }

    /// Rebuilds the index: long, so it may run as a task.
    #[tool(task = "optional")]
    async fn reindex(&self) -> String {
        "done".into()
    }

    /// Exports everything: always a task.
    #[tool(task = "required", read_only)]
    fn export(&self) -> String {
        "exported".into()
    }

    // `self: &Self` is `&self` (clippy prefers the short form; the macro accepts both).
    #[allow(clippy::needless_arbitrary_self_type)]
    #[tool]
    fn r#type(self: &Self, r#match: String) -> String {
        r#match
    }

    #[llm_worker_guest::tool]
    async fn by_path(&self) -> u32 {
        1
    }

    #[cfg(any())]
    #[tool]
    fn compiled_out(&self, x: NotAType) -> String {
        x.to_string()
    }

    #[cfg(not(any()))]
    #[tool]
    fn compiled_in(&self) -> String {
        "in".into()
    }
}

fn definitions() -> BTreeMap<String, (ToolMeta, Arc<dyn llm_worker_guest::Tool>)> {
    App.tool_definitions()
        .iter()
        .map(|definition: &ToolDefinition| {
            let (meta, tool) = definition();
            (meta.name.clone(), (meta, tool))
        })
        .collect()
}

fn meta(name: &str) -> ToolMeta {
    definitions()
        .remove(name)
        .unwrap_or_else(|| panic!("no tool {name}"))
        .0
}

fn call(name: &str, input: &str) -> Result<String, ToolError> {
    let tools = definitions();
    let (_, tool) = tools.get(name).unwrap_or_else(|| panic!("no tool {name}"));
    block_on(tool.execute(input))
}

#[test]
fn errors_are_never_successes_whatever_the_result_is_called() {
    assert_eq!(
        call("alias_err", "{}"),
        Err(ToolError::ExecutionFailed("no such user".into()))
    );
    assert_eq!(call("alias_ok", "{}"), Ok("fine".into()));
    assert_eq!(
        call("io_err", "{}"),
        Err(ToolError::ExecutionFailed("pipe closed".into()))
    );
    assert_eq!(call("qualified", "{}"), Ok("7".into()));
    // A `ToolError` keeps its kind.
    assert_eq!(
        call("own_error", "{}"),
        Err(ToolError::InvalidArgument("limit must be positive".into()))
    );
}

#[test]
fn an_error_keeps_its_whole_chain_of_causes() {
    assert_eq!(
        call("anyhow_err", "{}"),
        Err(ToolError::ExecutionFailed(
            "cannot save the note: disk full".into()
        ))
    );
    assert_eq!(
        call("boxed_err", "{}"),
        Err(ToolError::ExecutionFailed(
            "cannot open the index: disk full".into()
        ))
    );
    assert_eq!(
        call("chained", "{}"),
        Err(ToolError::ExecutionFailed(
            "cannot open the index: permission denied".into()
        ))
    );
}

#[test]
fn text_is_returned_as_it_is() {
    assert_eq!(call("text", "{}"), Ok("hello".into()));
    assert_eq!(call("static_text", "{}"), Ok("static".into()));
    assert_eq!(call("cow", "{}"), Ok("cow".into()));
    assert_eq!(call("alias_ok", "{}"), Ok("fine".into()));
}

#[test]
fn serializable_values_are_json_and_objects_get_an_output_schema() {
    assert_eq!(call("json_value", "{}"), Ok(r#"{"a":[1,2]}"#.into()));
    let stats: Value = serde_json::from_str(&call("stats", "{}").unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats, json!({"words": 3, "longest": "word"}));
    let schema = meta("stats")
        .output_schema
        .unwrap_or_else(|| panic!("no output schema"));
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["properties"]["words"]["description"],
        "How many words."
    );
    assert!(schema.get("title").is_none(), "{schema}");
    // JSON that is not an object, JSON without a schema, text and Debug: no output schema.
    assert_eq!(call("list", "{}"), Ok("[1,2]".into()));
    assert_eq!(call("untyped", "{}"), Ok(r#"{"n":1}"#.into()));
    for name in ["list", "untyped", "text", "shape", "json_value"] {
        assert_eq!(meta(name).output_schema, None, "{name}");
    }
}

#[test]
fn other_values_are_formatted_with_debug() {
    assert_eq!(call("shape", "{}"), Ok("Circle(2)".into()));
    assert_eq!(call("nothing", "{}"), Ok("null".into()));
}

#[test]
fn unknown_fields_are_refused_and_schemas_say_so() {
    let error = call("search", r#"{"query":"x","limt":5}"#);
    assert!(
        matches!(&error, Err(ToolError::InvalidArgument(text)) if text.contains("unknown field `limt`")),
        "{error:?}"
    );
    let schema = meta("search").input_schema;
    assert_eq!(schema["additionalProperties"], false, "{schema}");
    assert!(schema.get("title").is_none(), "{schema}");
    // A tool without arguments takes only an object, and only an empty one.
    assert_eq!(call("undocumented", "{}"), Ok("null".into()));
    for input in ["[]", "null", "5", r#""x""#, r#"{"x":1}"#] {
        assert!(
            matches!(
                call("undocumented", input),
                Err(ToolError::InvalidArgument(_))
            ),
            "{input}"
        );
    }
    // Arguments by position are refused too.
    assert!(matches!(
        call("search", r#"["x"]"#),
        Err(ToolError::InvalidArgument(_))
    ));
}

#[test]
fn defaults_apply_and_are_in_the_schema() {
    assert_eq!(
        call("search", r#"{"query":"x"}"#),
        Ok("x 10 en false None 20".into())
    );
    assert_eq!(
        call(
            "search",
            r#"{"query":"x","limit":2,"lang":"fr","exact":true,"page":3,"size":5}"#
        ),
        Ok("x 2 fr true Some(3) 5".into())
    );
    let schema = meta("search").input_schema;
    assert_eq!(schema["properties"]["limit"]["default"], 10, "{schema}");
    assert_eq!(schema["properties"]["lang"]["default"], "en", "{schema}");
    assert_eq!(schema["properties"]["size"]["default"], 20, "{schema}");
    assert_eq!(schema["properties"]["exact"]["default"], false, "{schema}");
    assert_eq!(
        schema["properties"]["query"]["description"],
        "Words to find"
    );
    assert_eq!(schema["required"], json!(["query"]), "{schema}");
    assert_eq!(call("a_b", "{}"), Ok("1".into()));
    assert_eq!(call("a", "{}"), Ok("2".into()));
}

#[test]
fn the_description_is_the_whole_doc_comment() {
    assert_eq!(
        meta("documented").description,
        "First paragraph,\nstill the first.\n\nSecond paragraph:\n\n    indented code"
    );
    assert_eq!(
        meta("block").description,
        "A block comment.\n\nWith two paragraphs."
    );
    assert_eq!(
        meta("manual").description,
        "Reads the tool's manual from a file.\n\nIt keeps paragraphs."
    );
    assert_eq!(meta("undocumented").description, "Tool: undocumented");
}

#[test]
fn titles_and_hints_are_in_the_meta() {
    let meta = meta("read_note");
    assert_eq!(meta.title.as_deref(), Some("Read a note"));
    assert_eq!(
        meta.annotations,
        ToolAnnotations {
            read_only: Some(true),
            destructive: None,
            idempotent: Some(true),
            open_world: Some(false),
        }
    );
    assert!(self::meta("text").annotations.is_empty());
    assert_eq!(self::meta("text").title, None);
}

#[test]
fn task_support_is_in_the_meta() {
    assert_eq!(meta("reindex").task_support, TaskSupport::Optional);
    assert_eq!(meta("export").task_support, TaskSupport::Required);
    assert_eq!(meta("export").annotations.read_only, Some(true));
    assert_eq!(meta("read_note").task_support, TaskSupport::Forbidden);
    assert_eq!(call("reindex", "{}"), Ok("done".into()));
}

#[test]
fn raw_names_paths_and_cfg_work() {
    assert_eq!(call("type", r#"{"match":"m"}"#), Ok("m".into()));
    assert!(
        meta("type").input_schema["properties"]
            .get("match")
            .is_some()
    );
    assert_eq!(call("by_path", "{}"), Ok("1".into()));
    assert_eq!(call("compiled_in", "{}"), Ok("in".into()));
    let names: Vec<String> = definitions().into_keys().collect();
    assert!(!names.iter().any(|n| n == "compiled_out"), "{names:?}");
    // The spec's names are generated.
    let _: TextArgs = serde_json::from_str("{}").unwrap_or_else(|e| panic!("{e}"));
    let _ = App.text_definition();
    let _ = std::mem::size_of::<ToolText>();
}

// `description` is imported above and used only as an argument marker: with
// `#![deny(unused_imports)]` this file would not compile if the import counted as unused.
#[deny(unused_imports)]
mod marker_import {
    use llm_worker_guest::{description, tool, tool_registry};

    #[derive(Clone)]
    pub struct Small;

    #[tool_registry]
    impl Small {
        #[tool]
        fn one(&self, #[description = "a number"] n: u32) -> u32 {
            n
        }
    }
}

#[test]
fn marker_imports_count_as_used() {
    let (meta, _) = marker_import::Small.one_definition()();
    assert_eq!(
        meta.input_schema["properties"]["n"]["description"],
        "a number"
    );
}

// The same with the import and the impl block inside a function body.
#[test]
#[deny(unused_imports)]
fn marker_imports_in_a_function_count_as_used() {
    use llm_worker_guest::{description, tool, tool_registry};

    #[derive(Clone)]
    struct Local;

    #[tool_registry]
    impl Local {
        #[tool]
        fn one(&self, #[description = "a number"] n: u32) -> u32 {
            n
        }
    }

    let (meta, _) = Local.one_definition()();
    assert_eq!(
        meta.input_schema["properties"]["n"]["description"],
        "a number"
    );
}
