//! `llm-worker schema`: the tool definitions of a directory in a provider's JSON shape.

use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use llm_worker::provider::{ProviderFormat, ProviderOptions, provider_json_with};

use crate::load::{Loader, holds_no_plugins, load, no_plugins};

pub(crate) fn schema(
    out: &mut String,
    loader: &Loader,
    dir: &Path,
    format: ProviderFormat,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    if strict && format != ProviderFormat::OpenAi {
        bail!(
            "--strict is OpenAI's strict mode and applies to --format openai only, not \
             --format {format}; drop --strict, or use --format openai"
        );
    }
    let loaded = load(loader, dir)?;
    if holds_no_plugins(&loaded) {
        // An empty list would read as a directory of no tools.
        anyhow::bail!(no_plugins(dir, loader.options));
    }
    let mut definitions: Vec<llm_worker::LlmToolDefinition> = loaded
        .plugins
        .iter()
        .flat_map(|p| p.tools())
        .map(llm_worker::LlmToolDefinition::from)
        .collect();
    definitions.sort_by(|a, b| a.name.cmp(&b.name));
    let options = ProviderOptions::default().strict(strict);
    let json = provider_json_with(&definitions, format, &options)?;
    let text = serde_json::to_string_pretty(&json)?;
    outln!(out, "{text}");
    // The definitions of the plugins that loaded, and failure if any did not (the reasons are
    // on stderr): a script would otherwise ship a part of the directory's tools for the whole.
    Ok(if loaded.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
