//! `llm-worker list`: the tools of a directory, as a table or as JSON.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use llm_worker_rules::tool::OneLine;

use crate::load::{Loader, file_name, load};

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

pub(crate) fn list(
    out: &mut String,
    loader: &Loader,
    dir: &Path,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let loaded = load(loader, dir)?;
    let mut rows: Vec<(&str, String, &llm_worker::ToolMeta)> = loaded
        .plugins
        .iter()
        .flat_map(|p| {
            p.tools()
                .iter()
                .map(move |m| (m.name.as_str(), file_name(p, dir), m))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    if as_json {
        let tools: Vec<_> = rows
            .iter()
            .map(|(name, file, meta)| {
                json!({"tool": name, "plugin": file, "description": meta.description,
                    "input_schema": meta.input_schema})
            })
            .collect();
        outln!(out, "{}", serde_json::Value::from(tools));
        return Ok(exit_code(&loaded));
    }
    // The table: a file's name on one line (JSON escapes it already).
    for row in &mut rows {
        row.1 = OneLine(&row.1).to_string();
    }
    let tool_width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(4);
    let file_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(6);
    outln!(
        out,
        "{:tool_width$}  {:file_width$}  DESCRIPTION",
        "TOOL",
        "PLUGIN"
    );
    for (name, file, meta) in &rows {
        outln!(
            out,
            "{name:tool_width$}  {file:file_width$}  {}",
            first_line(&meta.description)
        );
    }
    // A plugin offering no tools (only resources or prompts) is shown too, by what it offers.
    for plugin in loaded.plugins.iter().filter(|p| p.tools().is_empty()) {
        let file = OneLine(&file_name(plugin, dir)).to_string();
        outln!(
            out,
            "{:tool_width$}  {file:file_width$}  no tools: {} resources, {} templates, {} prompts \
             (check shows them)",
            "-",
            plugin.resources().len(),
            plugin.resource_templates().len(),
            plugin.prompts().len()
        );
    }
    // Plugins that failed are listed as such, not left out (the reasons are on stderr).
    for failure in &loaded.failures {
        let file = failure
            .path()
            .map(|path| path.strip_prefix(dir).unwrap_or(path).display().to_string())
            .unwrap_or_default();
        let file = OneLine(&file).to_string();
        outln!(
            out,
            "{:tool_width$}  {file:file_width$}  failed to load: see the warning above",
            "-"
        );
    }
    Ok(exit_code(&loaded))
}

/// Failure when a plugin failed to load: what was listed is not the whole directory (a
/// script reading `--json` would otherwise take a part for the whole). The reasons are on
/// stderr.
fn exit_code(loaded: &llm_worker::PluginDir) -> ExitCode {
    if loaded.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
