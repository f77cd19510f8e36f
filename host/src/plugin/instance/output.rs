//! What goes in and out of a call: the input checked before any plugin code runs (size, JSON,
//! one key once, the schema), and the result checked before anyone sees it (the output limit,
//! the structured value against the output schema, error texts cut).

use super::super::PluginImage;
use super::super::bindings_v3::RawOutput;
use super::super::validate::CheckedSchema;
use crate::policy::Limits;
use crate::tool::{Content, ToolError, ToolOutput};

/// A finished call's result, within the output limit: an output over it is refused, an error
/// text over it is cut (the plugin's errors are bounded like its outputs). A structured value
/// must be a JSON object (one key once), and, for a tool with an output schema, be there and
/// match it: anything else is the plugin breaking its own contract, an internal error naming
/// the tool.
pub(super) fn checked_output(
    image: &PluginImage,
    limits: &Limits,
    tool: &str,
    output_schema: Option<&CheckedSchema>,
    result: Result<RawOutput, ToolError>,
) -> Result<ToolOutput, ToolError> {
    let cap = limits.max_output_bytes;
    let raw = match result {
        Ok(raw) => raw,
        Err(error) => {
            return Err(match error {
                ToolError::InvalidArgument(text) => ToolError::InvalidArgument(cut(text, cap)),
                ToolError::ExecutionFailed(text) => ToolError::ExecutionFailed(cut(text, cap)),
                ToolError::Internal(text) => ToolError::Internal(cut(text, cap)),
            });
        }
    };
    let RawOutput {
        mut output,
        structured,
        legacy,
    } = raw;
    let size = super::super::charged(output.size(), output.content.len())
        + structured.as_ref().map_or(0, String::len);
    if size > cap {
        return Err(ToolError::ExecutionFailed(format!(
            "tool '{tool}' of plugin '{}' returned {size} bytes, over the output limit of {cap} \
             bytes",
            image.name,
        )));
    }
    let broke = |problem: String| {
        let message = format!(
            "tool '{tool}' of plugin '{}' broke its own contract: {problem}; this is a bug in \
             the plugin",
            image.name
        );
        tracing::warn!(plugin = %image.name, tool, "{message}");
        ToolError::Internal(message)
    };
    // What it names (MIME types, URIs) reaches clients as it is: checked as listed ones are.
    for block in &output.content {
        super::super::validate::offerings::check_content(block).map_err(broke)?;
    }
    // An older plugin's text is the structured value of a tool with an output schema.
    let structured_text = match (&structured, legacy, output_schema) {
        (Some(text), _, _) => Some(text.as_str()),
        (None, true, Some(_)) if !output.is_error => match output.content.first() {
            Some(Content::Text(text)) => Some(text.as_str()),
            _ => None,
        },
        _ => None,
    };
    // Parsed, a megabyte of small objects takes a hundred times as much of the host's memory,
    // outside the plugin's limit, for as long as the result is held: weighed against a
    // multiple of the output limit, roughly from its text before anything is built of it
    // (the schema's check builds a tree of nodes as large), then exactly once a `Value`.
    let budget = cap.saturating_mul(STRUCTURED_MEMORY_PER_OUTPUT_BYTE);
    let too_heavy = |weight: usize| {
        ToolError::ExecutionFailed(format!(
            "tool '{tool}' of plugin '{}' returned a structured value that takes {weight} \
             bytes of the host's memory once parsed, over {budget} \
             ({STRUCTURED_MEMORY_PER_OUTPUT_BYTE} times the output limit): it is made of very \
             many small values; return fewer, larger ones",
            image.name
        ))
    };
    if let Some(text) = structured_text {
        let estimate = crate::json_weight::estimated_json_bytes(text.as_bytes());
        if estimate > budget {
            return Err(too_heavy(estimate));
        }
    }
    match (structured_text, output_schema) {
        (Some(text), Some(schema)) => {
            super::super::validate::check_output(schema, text).map_err(broke)?;
        }
        (Some(text), None) => {
            super::super::validate::check_structured(text).map_err(broke)?;
        }
        (None, Some(_)) if !output.is_error => {
            return Err(broke(
                "it has an output schema but returned no structured value".to_owned(),
            ));
        }
        (None, _) => {}
    }
    // Checked above: an object, each key once.
    output.structured = structured_text.and_then(|text| serde_json::from_str(text).ok());
    if let Some(value) = &output.structured {
        let weight = crate::json_weight::json_bytes(value);
        if weight > budget {
            return Err(too_heavy(weight));
        }
    }
    // With no content, the structured value's text is the content, as the plugin wrote it
    // (its keys in its order): what `execute` returns and older MCP clients read.
    if output.content.is_empty()
        && let Some(text) = structured
    {
        output.content.push(Content::Text(text));
    }
    Ok(output)
}

/// How many bytes of host memory a parsed structured value may take per byte of the output
/// limit (a JSON text of strings takes two or three times its length; of empty objects, a
/// hundred).
pub(crate) const STRUCTURED_MEMORY_PER_OUTPUT_BYTE: usize = 16;

/// `text` cut to at most `cap` bytes (at a character boundary), saying how much was cut.
fn cut(text: String, cap: usize) -> String {
    cut_as(text, cap, "the output limit")
}

/// Most bytes of a plugin's error text answering a request other than a tool call (a read, a
/// rendering, a completion): it becomes a protocol error's message, which clients show and
/// servers log whole, not content.
pub(crate) const MAX_REQUEST_ERROR_BYTES: usize = 4096;

/// A plugin's error answering a request other than a tool call, its text cut to
/// [`MAX_REQUEST_ERROR_BYTES`].
pub(crate) fn cut_request_error(error: crate::tool::RequestError) -> crate::tool::RequestError {
    use crate::tool::RequestError;
    let cap = MAX_REQUEST_ERROR_BYTES;
    let limit = "the limit for a request's error";
    match error {
        RequestError::NotFound(text) => RequestError::NotFound(cut_as(text, cap, limit)),
        RequestError::InvalidArgument(text) => {
            RequestError::InvalidArgument(cut_as(text, cap, limit))
        }
        RequestError::Internal(text) => RequestError::Internal(cut_as(text, cap, limit)),
    }
}

fn cut_as(mut text: String, cap: usize, limit: &str) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    text.truncate(text.floor_char_boundary(cap));
    text.push_str(&format!(
        " … [cut: the plugin's error text was {total} bytes, over {limit} of {cap}]"
    ));
    text
}

/// Checks a call's input before any plugin code runs: its size, JSON syntax, and the tool's
/// input schema.
pub(crate) fn check_input(
    limits: &Limits,
    validator: &CheckedSchema,
    tool: &str,
    input_json: &str,
) -> Result<(), ToolError> {
    if input_json.len() > limits.max_input_bytes {
        return Err(ToolError::InvalidArgument(format!(
            "the input of tool '{tool}' is {} bytes, over the limit of {} bytes",
            input_json.len(),
            limits.max_input_bytes
        )));
    }
    let input = super::super::input::parse(input_json).map_err(|error| {
        ToolError::InvalidArgument(format!(
            "the input of tool '{tool}' is not valid JSON: {error}"
        ))
    })?;
    if let Some((path, problem)) = input.key_problem() {
        return Err(ToolError::InvalidArgument(format!(
            "the input of tool '{tool}' {problem} in the object at {path}; give each key once, \
             spelled one way"
        )));
    }
    super::super::validate::check_schema(validator, tool, &input, input_json.len())
        .map_err(ToolError::InvalidArgument)
}
