//! `llm-worker call`: one call of one tool, its input from the argument or stdin.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use llm_worker::{LoadedPlugin, ToolServerError, Worker};
use llm_worker_rules::tool::{OneLine, Visible};

use crate::load::{Loader, holds_no_plugins, load, no_plugins};

pub(crate) async fn call(
    out: &mut String,
    loader: &Loader,
    dir: &Path,
    tool: &str,
    input: Option<String>,
) -> anyhow::Result<ExitCode> {
    let from_stdin = matches!(input.as_deref(), Some("-") | None);
    let input = match input.as_deref() {
        Some("-") | None => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                eprintln!(
                    "reading the input of '{tool}' (a JSON object) from stdin; end it with \
                     Ctrl-D, or give it as an argument"
                );
            }
            // Read within a bound: what a pipe gives may be endless (a plugin's limits refuse
            // far less than this anyway).
            const MAX_STDIN_BYTES: u64 = 64 << 20;
            let mut input = String::new();
            std::io::stdin()
                .take(MAX_STDIN_BYTES + 1)
                .read_to_string(&mut input)
                .context("cannot read the input from stdin")?;
            if input.len() as u64 > MAX_STDIN_BYTES {
                anyhow::bail!(
                    "the input of '{tool}' on stdin is over {} MiB; no plugin takes that much \
                     (a plugin's `max_input_bytes` is 1 MiB by default)",
                    MAX_STDIN_BYTES >> 20
                );
            }
            // Editors on some systems start a file with a byte-order mark.
            input
                .strip_prefix('\u{feff}')
                .map(str::to_owned)
                .unwrap_or(input)
        }
        Some(input) => input.to_owned(),
    };
    // Nothing at all is not "no arguments": a pipe that gave nothing is more likely a
    // mistake than a call, and `{}` says "none" in one word.
    if input.trim().is_empty() {
        eprintln!(
            "error: {}: give the arguments of '{tool}' as a JSON object, e.g. '{{}}' for none",
            if from_stdin {
                "no input on stdin"
            } else {
                "the input is empty"
            }
        );
        return Ok(ExitCode::from(2));
    }
    let loaded = load(loader, dir)?;
    if holds_no_plugins(&loaded) {
        bail!(no_plugins(dir, loader.options));
    }
    // Only the plugin offering the tool is registered (and started): a call needs no other.
    let mut worker = Worker::new();
    worker.register_tools(
        loaded
            .plugins
            .iter()
            .filter(|plugin| plugin.tool_names().contains(&tool))
            .flat_map(LoadedPlugin::definitions),
    )?;
    let tools = worker.tool_server_handle();
    match tools.call_tool(tool, input.trim()).await {
        Ok(output) => {
            outln!(out, "{output}");
            Ok(ExitCode::SUCCESS)
        }
        Err(ToolServerError::ToolNotFound(name)) => {
            let mut names: Vec<&str> = loaded
                .plugins
                .iter()
                .flat_map(|plugin| plugin.tool_names())
                .collect();
            names.sort_unstable();
            if loaded.failures.is_empty() {
                eprintln!(
                    "error: no tool '{name}' in {}; the tools are: {}",
                    dir.display(),
                    names.join(", ")
                );
                return Ok(ExitCode::from(2));
            }
            // A plugin that failed may be the one offering it: say so, and why it failed.
            let failed: Vec<String> = loaded.failures.iter().map(ToString::to_string).collect();
            eprintln!(
                "error: no tool '{name}' among the plugins that loaded in {}, but {} plugin(s) \
                 failed to load or start and may offer it: {}",
                dir.display(),
                failed.len(),
                OneLine(&failed.join("; "))
            );
            Ok(ExitCode::FAILURE)
        }
        // The tool's own message ("Execution failed: …"), without the tool server's prefix.
        Err(ToolServerError::ToolExecution(message)) => {
            eprintln!("error: tool '{tool}': {}", Visible(&message));
            Ok(ExitCode::FAILURE)
        }
        Err(error) => {
            eprintln!("error: {}", Visible(&error.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}
