//! The demo: load every plugin of a directory, list the tools, and call a few of them through a
//! `Worker` with a hook, showing state kept in a session, errors, and a fresh session.
//!
//! ```text
//! cargo run -p llm-worker --example demo -- target/demo-plugins
//! ```
//!
//! (`./scripts/demo.sh` leaves the example plugins in `target/demo-plugins`; the build folder
//! `plugins/target/wasm32-wasip2/release` holds test fixtures too, hostile ones among them.)

use std::path::PathBuf;

use llm_worker::{PluginHost, PostToolCallAction, PostToolCallContext, ToolCall, Worker};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "target/demo-plugins".into());
    let host = PluginHost::new()?;

    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .collect();
    paths.sort();

    let mut worker = Worker::new();
    println!("Plugins in {}:", dir.display());
    for path in &paths {
        let loaded = {
            let host = host.clone();
            let path = path.clone();
            tokio::task::spawn_blocking(move || host.load(path)).await?
        };
        match loaded {
            Ok(plugin) => {
                println!("  {:<10} {}", plugin.name(), plugin.tool_names().join(", "));
                if let Err(error) = worker.register_tools(plugin.definitions()) {
                    println!("    skipped: {error}");
                }
            }
            Err(error) => println!("  refused: {error}"),
        }
    }

    let handle = worker.tool_server_handle();
    println!("\nTools, sorted by name (what a model is sent):");
    for definition in handle.tool_definitions_sorted() {
        let first_line = definition.description.lines().next().unwrap_or_default();
        println!("  {:<14} {first_line}", definition.name);
    }
    if let Some((meta, _)) = handle.get_tool("join") {
        println!(
            "\nInput schema of `join`:\n{}",
            serde_json::to_string_pretty(&meta.input_schema)?
        );
    }

    worker.add_post_tool_call_hook(|ctx: &mut PostToolCallContext| {
        if ctx.result.is_error {
            ctx.result.content = format!("[error] {}", ctx.result.content);
        }
        PostToolCallAction::Continue
    });

    let calls = [
        ("greet", json!({"name": "Ada"})),
        ("count", json!({})),
        ("count", json!({})),
        ("count", json!({})),
        ("add_note", json!({"text": "buy milk"})),
        ("add_note", json!({"text": "call Bob"})),
        ("list_notes", json!({})),
        ("divide", json!({"dividend": 1, "divisor": 0})),
        (
            "join",
            json!({"words": ["wasm", "tools"], "style": {"separator": " + "}}),
        ),
        ("search", json!({"query": "component"})),
        ("greet", json!({"nom": "typo"})),
        ("no_such_tool", json!({})),
    ];
    println!("\nCalls (one session: state is kept between calls):");
    for (index, (name, input)) in calls.into_iter().enumerate() {
        let call = ToolCall {
            id: index.to_string(),
            name: name.into(),
            input: input.clone(),
        };
        let results = worker.execute_tool_calls(vec![call]).await?;
        for result in results {
            println!(
                "  {name}({input}) -> {}",
                result.content.replace('\n', " | ")
            );
        }
    }
    Ok(())
}
