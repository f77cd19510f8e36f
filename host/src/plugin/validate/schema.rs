//! Input and output schemas compiled for checking, and their verdicts: every problem with its
//! JSON path (and an enum's allowed values), failing closed when the validator lists none.

use serde_json::Value;

use super::{SchemaBudget, ToolListProblem};
use llm_worker_rules::tool::MAX_SCHEMA_BYTES;

/// A tool's input schema, parsed and compiled for checking inputs.
pub(crate) struct CheckedSchema {
    pub(crate) schema: Value,
    pub(crate) validator: crate::plugin::input::InputValidator,
}

/// Compiles a schema; remote `$ref`s are not fetched (the host makes no network requests).
/// Charge it to the plugin's [`SchemaBudget`] first.
pub(super) fn compile_schema(
    schema: Value,
    budget: &SchemaBudget,
) -> Result<CheckedSchema, String> {
    let validator = crate::plugin::input::validator(&schema, &budget.compiled)
        .map_err(|e| format!("it is not a valid JSON Schema: {e}"))?;
    Ok(CheckedSchema { schema, validator })
}

/// Checks an input against a tool's schema; the message lists every problem with its JSON
/// path, so a model can correct its call.
pub(crate) fn check_schema(
    checked: &CheckedSchema,
    tool: &str,
    input: &crate::plugin::input::InputNode<'_>,
) -> Result<(), String> {
    // The common case, valid input, without building any error.
    input_verdict(tool, checked.validator.is_valid(input), || {
        schema_problems(checked, input)
    })
}

/// [`verdict`] on the input of `tool`, as the message a model gets.
pub(super) fn input_verdict(
    tool: &str,
    valid: bool,
    problems: impl FnOnce() -> Vec<String>,
) -> Result<(), String> {
    verdict(valid, problems).map_err(|detail| {
        format!("the input of tool '{tool}' does not match its input schema{detail}")
    })
}

/// The verdict of a schema check: valid as the validator's `is_valid` says; otherwise refused,
/// with the problems it lists (`: a; b`), or none when it lists none — failing closed, so that
/// a validator whose two answers disagree never lets a value through.
pub(super) fn verdict(valid: bool, problems: impl FnOnce() -> Vec<String>) -> Result<(), String> {
    if valid {
        return Ok(());
    }
    let problems = problems();
    Err(if problems.is_empty() {
        " (the validator lists no detail)".to_owned()
    } else {
        format!(": {}", problems.join("; "))
    })
}

/// Checks a tool's result against its output schema: JSON, and valid.
/// Checks a structured value of a tool with no output schema: a JSON object, each key once.
pub(crate) fn check_structured(output: &str) -> Result<(), String> {
    let value = crate::plugin::input::parse(output)
        .map_err(|error| format!("its structured result is not JSON ({error})"))?;
    if let Some((path, problem)) = value.key_problem() {
        return Err(format!(
            "its structured result {problem} in the object at {path}"
        ));
    }
    if !matches!(value, crate::plugin::input::InputNode::Object(_)) {
        return Err("its structured result is not a JSON object".to_owned());
    }
    Ok(())
}

pub(crate) fn check_output(checked: &CheckedSchema, output: &str) -> Result<(), String> {
    let value = crate::plugin::input::parse(output)
        .map_err(|error| format!("its result is not JSON ({error})"))?;
    // A repeated key would be read one way by the check and another by a client.
    if let Some((path, problem)) = value.key_problem() {
        return Err(format!("its result {problem} in the object at {path}"));
    }
    if !matches!(value, crate::plugin::input::InputNode::Object(_)) {
        return Err("its result is not a JSON object".to_owned());
    }
    verdict(checked.validator.is_valid(&value), || {
        schema_problems(checked, &value)
    })
    .map_err(|problems| format!("its result does not match its output schema{problems}"))
}

/// Parses and compiles the output schema of `tool`: JSON, an object schema of
/// `"type": "object"` (MCP requires it: a structured result is a JSON object), charged to the
/// plugin's `budget` before it is compiled. Refused as [`ToolListProblem::BadSchema`] (it is
/// invalid) or [`ToolListProblem::TooLarge`] (over the budget).
pub(crate) fn check_output_schema(
    text: &str,
    tool: &str,
    budget: &mut SchemaBudget,
) -> Result<CheckedSchema, ToolListProblem> {
    let bad = |reason: String| ToolListProblem::BadSchema {
        tool: tool.to_owned(),
        reason,
    };
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(bad(format!(
            "it is {} bytes, over the limit of {MAX_SCHEMA_BYTES} bytes",
            text.len()
        )));
    }
    let schema: Value =
        serde_json::from_str(text).map_err(|e| bad(format!("it is not valid JSON: {e}")))?;
    if schema.get("type").and_then(Value::as_str) != Some("object") || schema.get("$ref").is_some()
    {
        return Err(bad(
            "its root must be a JSON object schema with \"type\": \"object\" and no \"$ref\" (a structured \
             result is a JSON object)"
                .to_owned(),
        ));
    }
    budget
        .charge(&schema, &format!("the output schema of tool {tool:?}"))
        .map_err(ToolListProblem::TooLarge)?;
    compile_schema(schema, budget).map_err(bad)
}

/// Every problem (up to 20) of a value that the schema refuses, each with its JSON path.
fn schema_problems(
    checked: &CheckedSchema,
    input: &crate::plugin::input::InputNode<'_>,
) -> Vec<String> {
    checked
        .validator
        .iter_errors(input)
        .take(20)
        .map(|error| {
            let path = error.instance_path().to_string();
            let path = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            let text = choices(&checked.schema, &error)
                .map(|choices| format!("{} is not one of {choices}", error.instance()))
                .unwrap_or_else(|| error.to_string());
            // A message may quote the input (up to its whole size): keep each one short.
            let mut message = format!("at {path}: {text}");
            if message.len() > 300 {
                let mut end = 300;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
                message.push('…');
            }
            message
        })
        .collect()
}

/// For a `oneOf`/`anyOf` whose every branch is one constant (how an enum with documented
/// variants is written), the allowed values, to say `"UPPER" is not one of "upper", "lower"`
/// instead of "not valid under any of the schemas listed in the 'oneOf'".
fn choices(schema: &Value, error: &jsonschema::ValidationError<'_>) -> Option<String> {
    use jsonschema::error::ValidationErrorKind;
    if !matches!(
        error.kind(),
        ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::AnyOf { .. }
    ) {
        return None;
    }
    let branches = schema.pointer(error.schema_path().as_str())?.as_array()?;
    let values: Option<Vec<String>> = branches
        .iter()
        .map(|branch| {
            branch
                .get("const")
                .or_else(|| {
                    branch
                        .get("enum")
                        .and_then(Value::as_array)
                        .filter(|values| values.len() == 1)
                        .and_then(|values| values.first())
                })
                .map(Value::to_string)
        })
        .collect();
    values
        .filter(|values| !values.is_empty())
        .map(|values| values.join(", "))
}
