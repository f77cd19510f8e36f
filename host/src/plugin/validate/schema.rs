//! Input and output schemas compiled for checking, and their verdicts: every problem with its
//! JSON path (an enum's allowed values, an unknown member's name and what the object takes),
//! failing closed when the validator lists none.

use serde_json::Value;

use super::{SchemaBudget, ToolListProblem};
use llm_worker_rules::tool::MAX_SCHEMA_BYTES;

/// A tool's input schema, parsed and compiled for checking inputs.
pub(crate) struct CheckedSchema {
    pub(crate) schema: Value,
    pub(crate) validator: crate::plugin::input::InputValidator,
    /// What checking a value against it may take.
    work: super::work::Work,
}

/// Most subschema applications one check may take (a value's size times what its schema
/// applies to each part of it): about a second of a host thread at worst.
const MAX_CHECK_WORK: u64 = 20_000_000;

/// Most bytes the problems of one check may copy: each problem jsonschema finds carries a copy
/// of the value it is about (at most the whole text), and it finds them all before the first
/// is read.
const MAX_LISTED_BYTES: u64 = 32 << 20;

impl CheckedSchema {
    /// What checking `value` may take, if within [`MAX_CHECK_WORK`] (`Err` with what it
    /// would take otherwise).
    fn work_of(&self, value: &crate::plugin::input::InputNode<'_>) -> Result<u64, u64> {
        match self.work.of(value) {
            work if work > MAX_CHECK_WORK => Err(work),
            work => Ok(work),
        }
    }

    /// The problems of `value` (of `text_len` bytes, whose check takes `work`), if listing
    /// them copies at most [`MAX_LISTED_BYTES`]; else a line saying they are not listed.
    fn problems(
        &self,
        value: &crate::plugin::input::InputNode<'_>,
        work: u64,
        text_len: usize,
        what: Checked,
    ) -> Vec<String> {
        let copied = self.work.problems(work).saturating_mul(text_len as u64);
        if copied <= MAX_LISTED_BYTES {
            schema_problems(self, value, what)
        } else {
            vec![TOO_MANY_TO_LIST.to_owned()]
        }
    }
}

/// What a refused value gets in place of its problems when listing them would take too long.
const TOO_MANY_TO_LIST: &str = "(a value this large against this schema: its problems are not \
                                listed; compare it with the schema)";

/// Compiles a schema once the work of checking a value against it is bounded
/// ([`check_work`](super::work::check_work)); remote `$ref`s are not fetched (the host makes
/// no network requests). Charge it to the plugin's [`SchemaBudget`] first.
pub(super) fn compile_schema(
    schema: Value,
    budget: &SchemaBudget,
) -> Result<CheckedSchema, String> {
    let work = super::work::check_work(&schema)?;
    let validator = crate::plugin::input::validator(&schema, &budget.compiled)
        .map_err(|e| format!("it is not a valid JSON Schema: {e}"))?;
    Ok(CheckedSchema {
        schema,
        validator,
        work,
    })
}

/// Checks an input against a tool's schema; the message lists every problem with its JSON
/// path, so a model can correct its call.
pub(crate) fn check_schema(
    checked: &CheckedSchema,
    tool: &str,
    input: &crate::plugin::input::InputNode<'_>,
    text_len: usize,
) -> Result<(), String> {
    let work = checked.work_of(input).map_err(|work| {
        format!(
            "the input of tool '{tool}' is too large for its input schema: checking it could \
             apply {work} subschemas, over the host's {MAX_CHECK_WORK}; send a smaller input"
        )
    })?;
    // The common case, valid input, without building any error.
    input_verdict(tool, checked.validator.is_valid(input), || {
        checked.problems(input, work, text_len, Checked::Input)
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
    let work = checked.work_of(&value).map_err(|work| {
        format!(
            "its result is too large for its output schema: checking it could apply {work} \
             subschemas, over the host's {MAX_CHECK_WORK}"
        )
    })?;
    verdict(checked.validator.is_valid(&value), || {
        checked.problems(&value, work, output.len(), Checked::Output)
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
    // First: every later message may quote the schema's text.
    super::check_schema_text(&schema).map_err(bad)?;
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

/// What a schema checks: a tool's input (its top-level members are the tool's arguments) or
/// its result.
#[derive(Clone, Copy, PartialEq)]
enum Checked {
    Input,
    Output,
}

/// Every problem (up to 20) of a value that the schema refuses, each with its JSON path.
fn schema_problems(
    checked: &CheckedSchema,
    input: &crate::plugin::input::InputNode<'_>,
    what: Checked,
) -> Vec<String> {
    checked
        .validator
        .iter_errors(input)
        .take(20)
        .map(|error| {
            let (path, text) = refused_members(&checked.schema, input, &error, what)
                .unwrap_or_else(|| {
                    let text = choices(&checked.schema, &error)
                        .map(|choices| format!("{} is not one of {choices}", error.instance()))
                        .unwrap_or_else(|| error.to_string());
                    (error.instance_path().to_string(), text)
                });
            let path = if path.is_empty() { "/" } else { &path };
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

/// Names in a message, JSON-quoted: the first ten, then how many more.
fn quoted_names<'n>(names: impl ExactSizeIterator<Item = &'n str>) -> String {
    let count = names.len();
    let mut quoted: Vec<String> = names
        .take(10)
        .map(|name| Value::from(name).to_string())
        .collect();
    if count > quoted.len() {
        quoted.push(format!("and {} more", count - quoted.len()));
    }
    quoted.join(", ")
}

/// For an object member the schema refuses as a member — one it does not name where it allows
/// no others (`additionalProperties` or `unevaluatedProperties` false, `propertyNames` false),
/// or a property whose schema is `false` — the path of the object and a message naming the
/// member and what the object takes: `unknown argument "x"; the tool takes none`. (jsonschema
/// says "False schema does not allow 1" of a member of an object without properties, naming
/// neither the member nor the object.)
fn refused_members(
    schema: &Value,
    input: &crate::plugin::input::InputNode<'_>,
    error: &jsonschema::ValidationError<'_>,
    what: Checked,
) -> Option<(String, String)> {
    use jsonschema::error::ValidationErrorKind;
    let (object_schema, keyword) = error.schema_path().as_str().rsplit_once('/')?;
    let instance_path = error.instance_path();
    let (object_path, object_schema, names, forbidden) = match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => (
            instance_path.as_str(),
            object_schema,
            unexpected.clone(),
            false,
        ),
        // Reported once, of the first member, at the object: every member is refused.
        ValidationErrorKind::FalseSchema
            if keyword == "additionalProperties" || keyword == "propertyNames" =>
        {
            let crate::plugin::input::InputNode::Object(members) = input.at(instance_path)? else {
                return None;
            };
            let names = members.iter().map(|(name, _)| name.to_string()).collect();
            (instance_path.as_str(), object_schema, names, false)
        }
        // A property whose schema is `false`: the member NAME, refused by `…/properties/NAME`.
        ValidationErrorKind::FalseSchema => {
            let (object_schema, "properties") = object_schema.rsplit_once('/')? else {
                return None;
            };
            let (object_path, member) = instance_path.as_str().rsplit_once('/')?;
            if member != keyword {
                return None;
            }
            let name = instance_path.segments().last()?.to_string();
            (object_path, object_schema, vec![name], true)
        }
        _ => return None,
    };
    if names.is_empty() {
        return None;
    }
    let arguments = what == Checked::Input && object_path.is_empty();
    let noun = match (arguments, names.len()) {
        (true, 1) => "argument",
        (true, _) => "arguments",
        (false, 1) => "property",
        (false, _) => "properties",
    };
    let names_text = quoted_names(names.iter().map(String::as_str));
    let mut text = if forbidden {
        format!("{noun} {names_text} is not allowed")
    } else {
        format!("unknown {noun} {names_text}")
    };
    // What it takes instead, where the schema says (a `$ref` to another document does not).
    if let Some(object) = schema.pointer(object_schema).and_then(Value::as_object) {
        let taken: Vec<&str> = object
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(_, property)| **property != Value::Bool(false))
            .map(|(name, _)| name.as_str())
            .collect();
        let patterns: Vec<&str> = object
            .get("patternProperties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(pattern, _)| pattern.as_str())
            .collect();
        let takes = match (taken.is_empty(), patterns.is_empty()) {
            (true, true) => "none".to_owned(),
            (false, true) => quoted_names(taken.into_iter()),
            (true, false) => format!("names matching {}", quoted_names(patterns.into_iter())),
            (false, false) => format!(
                "{} and names matching {}",
                quoted_names(taken.into_iter()),
                quoted_names(patterns.into_iter())
            ),
        };
        if arguments {
            text.push_str(&format!("; the tool takes {takes}"));
        } else {
            text.push_str(&format!("; the object takes {takes}"));
        }
    }
    Some((object_path.to_owned(), text))
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
