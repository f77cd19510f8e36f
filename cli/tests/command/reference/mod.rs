//! The MCP reference servers beside our plugins that offer the same tools: the same MCP calls
//! are sent to the original (a Node or Python process, installed pinned from npm or PyPI) and
//! to `llm-worker serve` with our plugin, and the answers compared.
//!
//! The originals, their installer (cached under `target/tmp/reference-servers/`) and how each
//! is started are in `llm_worker_tests::reference`, shared with the benchmark
//! (`cli/benches/reference.rs`). This module holds the comparisons; each plugin's tests are in
//! its submodule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) use llm_worker_tests::reference::{Original, Session, plugin_dir};

mod fetch;
mod filesystem;
mod memory;
mod time;

/// The program of `original`, installed under this target directory on first use; `None`
/// when it cannot be installed here (the test is skipped).
pub(crate) fn program(original: Original) -> Option<PathBuf> {
    original.program(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// `llm-worker serve` of a directory made by [`plugin_dir`], connected.
pub(crate) async fn ours(dir: &Path) -> Session {
    llm_worker_tests::reference::ours(Path::new(env!("CARGO_BIN_EXE_llm-worker")), dir).await
}

/// What an agent sees of a server's tools: each tool's input properties, and which of them
/// are required.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) properties: BTreeSet<String>,
    pub(crate) required: BTreeSet<String>,
}

/// The shapes of the tools `session` lists, by name.
pub(crate) async fn shapes(session: &Session) -> BTreeMap<String, Shape> {
    let tools = session.list_all_tools().await.expect("tools/list");
    tools
        .into_iter()
        .map(|tool| {
            let names = |key: &str| -> BTreeSet<String> {
                match tool.input_schema.get(key) {
                    Some(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
                    Some(serde_json::Value::Array(items)) => items
                        .iter()
                        .filter_map(|item| item.as_str().map(str::to_owned))
                        .collect(),
                    _ => BTreeSet::new(),
                }
            };
            let shape = Shape {
                properties: names("properties"),
                required: names("required"),
            };
            (tool.name.into_owned(), shape)
        })
        .collect()
}

/// What a server answered to one call: the text blocks joined, the structured value, and
/// whether it is an error result.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) text: String,
    pub(crate) structured: Option<serde_json::Value>,
    pub(crate) is_error: bool,
}

/// Calls `tool` with `arguments` on `session`; a protocol error fails the test.
pub(crate) async fn call(
    session: &Session,
    tool: &'static str,
    arguments: serde_json::Value,
) -> Answer {
    let result = session
        .call_tool(super::mcp::call(tool, arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    Answer {
        text: super::mcp::text(&result),
        structured: result.structured_content.clone(),
        is_error: result.is_error == Some(true),
    }
}

/// Calls `tool` with `arguments` (an object) on `session`: the result's text blocks joined,
/// and whether it is an error result. A protocol error is returned as `Err` with its text.
pub(crate) async fn call_text(
    session: &Session,
    tool: &'static str,
    arguments: serde_json::Value,
) -> Result<(String, bool), String> {
    let result = session
        .call_tool(super::mcp::call(tool, arguments))
        .await
        .map_err(|e| e.to_string())?;
    Ok((super::mcp::text(&result), result.is_error == Some(true)))
}
