//! Checks a component against the world `tool-plugin` and its tool list against the rules.

use std::collections::HashSet;

use serde_json::Value;

/// The WIT package this host implements.
pub(crate) const PACKAGE: &str = "llm-worker:tool";
/// The versions this host loads, oldest first.
pub(crate) use super::bindings::VERSIONS;

/// A problem with the tools a plugin lists.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ToolListProblem {
    Empty,
    BadName {
        name: String,
        reason: &'static str,
    },
    Duplicate(String),
    BadSchema {
        tool: String,
        reason: String,
    },
    /// Over one of the caps below.
    TooLarge(String),
}

/// Most tools one plugin may list.
pub(crate) const MAX_TOOLS: usize = 256;
/// Longest tool description, in bytes.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 16 << 10;
/// Longest input schema of one tool, in bytes (of JSON text).
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// Checks a tool list (name, description, schema) against the caps: a plugin's tool list is
/// shown to every client and model, and kept for the host's lifetime.
pub(crate) fn check_sizes(tools: &[(String, String, String)]) -> Result<(), ToolListProblem> {
    if tools.len() > MAX_TOOLS {
        return Err(ToolListProblem::TooLarge(format!(
            "it lists {} tools, over the limit of {MAX_TOOLS}",
            tools.len()
        )));
    }
    for (name, description, schema) in tools {
        let name: String = name.chars().take(64).collect();
        for (what, len, cap) in [
            ("description", description.len(), MAX_DESCRIPTION_BYTES),
            ("input schema", schema.len(), MAX_SCHEMA_BYTES),
        ] {
            if len > cap {
                return Err(ToolListProblem::TooLarge(format!(
                    "the {what} of tool {name:?} is {len} bytes, over the limit of {cap} bytes"
                )));
            }
        }
    }
    Ok(())
}

/// Which of our versions a component's version is compatible with: the same major version,
/// or for 0.x the same minor version (semver's rule, as wasmtime applies it when linking).
pub(crate) fn compatible_version(found: &str) -> Option<&'static str> {
    let found = semver::Version::parse(found).ok()?;
    VERSIONS.into_iter().find(|ours| {
        let Ok(ours) = semver::Version::parse(ours) else {
            return false;
        };
        if ours.major == 0 {
            found.major == 0 && found.minor == ours.minor
        } else {
            found.major == ours.major
        }
    })
}

/// The version in an import or export name of our package (`llm-worker:tool/types@0.1.0`).
pub(crate) fn package_version(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
    Some(rest.split_once('@').map_or("", |(_, version)| version))
}

fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.len() > 64 {
        return Err("it is longer than 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err("only the characters A-Z, a-z, 0-9, '_' and '-' are allowed");
    }
    Ok(())
}

/// Parses and checks an input schema: JSON, an object, and (if it says) of type "object".
pub(crate) fn parse_schema(text: &str) -> Result<Value, String> {
    let schema: Value =
        serde_json::from_str(text).map_err(|e| format!("it is not valid JSON: {e}"))?;
    let Some(object) = schema.as_object() else {
        return Err("it is not a JSON object".to_owned());
    };
    match object.get("type") {
        None => {}
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "its \"type\" is {other}, but a tool's input must be an object (\"type\": \"object\")"
            ));
        }
    }
    Ok(schema)
}

/// A tool's input schema, parsed and compiled for checking inputs.
pub(crate) struct CheckedSchema {
    pub(crate) schema: Value,
    pub(crate) validator: super::input::InputValidator,
}

/// Compiles a schema; remote `$ref`s are not fetched (the host makes no network requests).
fn compile_schema(schema: Value) -> Result<CheckedSchema, String> {
    let validator = super::input::validator(&schema)
        .map_err(|e| format!("it is not a valid JSON Schema: {e}"))?;
    Ok(CheckedSchema { schema, validator })
}

/// Checks an input against a tool's schema; the message lists every problem with its JSON
/// path, so a model can correct its call.
pub(crate) fn check_schema(
    checked: &CheckedSchema,
    tool: &str,
    input: &super::input::InputNode<'_>,
) -> Result<(), String> {
    // The common case, valid input, without building any error.
    if checked.validator.is_valid(input) {
        return Ok(());
    }
    let problems = schema_problems(checked, input);
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the input of tool '{tool}' does not match its input schema: {}",
        problems.join("; ")
    ))
}

/// Checks a tool's result against its output schema: JSON, and valid.
pub(crate) fn check_output(checked: &CheckedSchema, output: &str) -> Result<(), String> {
    let value =
        super::input::parse(output).map_err(|error| format!("its result is not JSON ({error})"))?;
    // A repeated key would be read one way by the check and another by a client.
    if let Some((path, problem)) = value.key_problem() {
        return Err(format!("its result {problem} in the object at {path}"));
    }
    if !matches!(value, super::input::InputNode::Object(_)) {
        return Err("its result is not a JSON object".to_owned());
    }
    if checked.validator.is_valid(&value) {
        return Ok(());
    }
    let problems = schema_problems(checked, &value);
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "its result does not match its output schema: {}",
        problems.join("; ")
    ))
}

/// Parses and compiles an output schema: JSON, an object schema of `"type": "object"` (MCP
/// requires it: a structured result is a JSON object).
pub(crate) fn check_output_schema(text: &str) -> Result<CheckedSchema, String> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "it is {} bytes, over the limit of {MAX_SCHEMA_BYTES} bytes",
            text.len()
        ));
    }
    let schema: Value =
        serde_json::from_str(text).map_err(|e| format!("it is not valid JSON: {e}"))?;
    if schema.get("type").and_then(Value::as_str) != Some("object") || schema.get("$ref").is_some()
    {
        return Err(
            "its root must be a JSON object schema with \"type\": \"object\" and no \"$ref\" (a structured \
             result is a JSON object)"
                .to_owned(),
        );
    }
    compile_schema(schema)
}

/// Longest title, in bytes.
pub(crate) const MAX_TITLE_BYTES: usize = 256;

/// Checks a title: short, one line.
pub(crate) fn check_title(title: &str) -> Result<(), String> {
    if title.len() > MAX_TITLE_BYTES {
        return Err(format!(
            "it is {} bytes, over the limit of {MAX_TITLE_BYTES}",
            title.len()
        ));
    }
    if title.trim().is_empty() || title.chars().any(char::is_control) {
        return Err("it must be one line of text, not empty".to_owned());
    }
    Ok(())
}

/// Every problem (up to 20) of a value that the schema refuses, each with its JSON path.
fn schema_problems(checked: &CheckedSchema, input: &super::input::InputNode<'_>) -> Vec<String> {
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

/// Checks a plugin's tool list: at least one tool, valid and unique names, valid JSON Schemas
/// of objects. Returns the compiled schemas in order.
pub(crate) fn check_tools<'a>(
    tools: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<CheckedSchema>, ToolListProblem> {
    let mut seen = HashSet::new();
    let mut schemas = Vec::new();
    for (name, schema) in tools {
        check_name(name).map_err(|reason| ToolListProblem::BadName {
            name: name.to_owned(),
            reason,
        })?;
        if !seen.insert(name) {
            return Err(ToolListProblem::Duplicate(name.to_owned()));
        }
        let checked = parse_schema(schema)
            .and_then(compile_schema)
            .map_err(|reason| ToolListProblem::BadSchema {
                tool: name.to_owned(),
                reason,
            })?;
        schemas.push(checked);
    }
    if schemas.is_empty() {
        return Err(ToolListProblem::Empty);
    }
    Ok(schemas)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(text: &str) -> super::super::input::InputNode<'_> {
        super::super::input::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn output_schemas_and_titles_are_checked() {
        let ok = check_output_schema(
            r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_output(&ok, r#"{"n":1}"#), Ok(()));
        let wrong = check_output(&ok, r#"{"n":"one"}"#)
            .err()
            .unwrap_or_default();
        assert!(
            wrong.contains("does not match its output schema") && wrong.contains("/n"),
            "{wrong}"
        );
        let missing = check_output(&ok, "{}").err().unwrap_or_default();
        assert!(
            missing.contains("\"n\" is a required property"),
            "{missing}"
        );
        let text = check_output(&ok, "plain text").err().unwrap_or_default();
        assert!(text.contains("is not JSON"), "{text}");
        // Read one way by the check and another by a client: refused.
        let twice = check_output(&ok, r#"{"n":1,"a":0,"b":0,"c":0,"n":"rm -rf /"}"#)
            .err()
            .unwrap_or_default();
        assert!(twice.contains("\"n\""), "{twice}");
        let loose = check_output_schema(r#"{"type":"object"}"#).unwrap_or_else(|e| panic!("{e}"));
        assert!(check_output(&loose, "[1]").is_err());
        for bad in [
            r#"{"type":"array"}"#,
            "{}",
            "[]",
            "not json",
            r#"{"type":"object","minimum":"x"}"#,
        ] {
            assert!(check_output_schema(bad).is_err(), "{bad}");
        }
        let huge = format!(
            r#"{{"type":"object","description":"{}"}}"#,
            "x".repeat(MAX_SCHEMA_BYTES)
        );
        assert!(
            check_output_schema(&huge)
                .err()
                .unwrap_or_default()
                .contains("over the limit")
        );
        assert_eq!(check_title("Read a note"), Ok(()));
        assert!(check_title("").is_err());
        assert!(check_title("two\nlines").is_err());
        assert!(check_title(&"t".repeat(MAX_TITLE_BYTES + 1)).is_err());
    }

    #[test]
    fn versions_follow_semver_for_zero_major() {
        assert_eq!(compatible_version("0.1.0"), Some("0.1.0"));
        assert_eq!(compatible_version("0.1.7"), Some("0.1.0"));
        assert_eq!(compatible_version("0.2.0"), Some("0.2.0"));
        assert_eq!(compatible_version("0.2.3"), Some("0.2.0"));
        assert_eq!(compatible_version("0.3.0"), None);
        assert_eq!(compatible_version("1.0.0"), None);
        assert_eq!(compatible_version("not-a-version"), None);
    }

    #[test]
    fn package_version_is_read_from_names() {
        assert_eq!(
            package_version("llm-worker:tool/types@0.1.0"),
            Some("0.1.0")
        );
        assert_eq!(package_version("llm-worker:tool/types"), Some(""));
        assert_eq!(package_version("wasi:io/streams@0.2.0"), None);
    }

    #[test]
    fn tool_lists_are_checked() {
        let ok = check_tools([("a-b_1", r#"{"type":"object"}"#), ("b", "{}")]);
        assert_eq!(ok.map(|s| s.len()).ok(), Some(2));
        assert!(matches!(check_tools([]), Err(ToolListProblem::Empty)));
        assert!(matches!(
            check_tools([("has space", "{}")]),
            Err(ToolListProblem::BadName { .. })
        ));
        assert!(matches!(
            check_tools([(&*"x".repeat(65), "{}")]),
            Err(ToolListProblem::BadName { .. })
        ));
        assert!(matches!(
            check_tools([("a", "{}"), ("a", "{}")]),
            Err(ToolListProblem::Duplicate(name)) if name == "a"
        ));
        assert!(matches!(
            check_tools([("a", "[1]")]),
            Err(ToolListProblem::BadSchema { .. })
        ));
        assert!(matches!(
            check_tools([("a", r#"{"type":"string"}"#)]),
            Err(ToolListProblem::BadSchema { .. })
        ));
        assert!(matches!(
            check_tools([("a", "{not json")]),
            Err(ToolListProblem::BadSchema { .. })
        ));
        assert!(matches!(
            check_tools([(
                "a",
                r#"{"type":"object","properties":{"x":{"type":"nope"}}}"#
            )]),
            Err(ToolListProblem::BadSchema { .. })
        ));
    }

    #[test]
    fn inputs_are_checked_with_json_paths() {
        let checked = check_tools([(
            "t",
            r#"{"type":"object","properties":{"n":{"type":"integer","minimum":0},
                "tags":{"type":"array","items":{"type":"string"}}},"required":["n"]}"#,
        )])
        .map(|mut s| s.remove(0))
        .unwrap_or_else(|_| panic!("valid schema"));
        assert_eq!(check_schema(&checked, "t", &input(r#"{"n": 1}"#)), Ok(()));
        let message = check_schema(&checked, "t", &input(r#"{"n": -1, "tags": ["a", 2]}"#))
            .expect_err("two problems");
        assert!(message.contains("at /n:"), "{message}");
        assert!(message.contains("at /tags/1:"), "{message}");
        let message = check_schema(&checked, "t", &input("{}")).expect_err("missing field");
        assert!(
            message.contains("at /:") && message.contains("\"n\""),
            "{message}"
        );
    }

    #[test]
    fn enum_mismatches_name_the_allowed_values() {
        let checked = check_tools([(
            "t",
            r##"{"type":"object","properties":{"case":{"$ref":"#/$defs/Case"}},
                "$defs":{"Case":{"oneOf":[{"const":"upper","description":"UP"},
                                          {"const":"lower","description":"down"}]}}}"##,
        )])
        .map(|mut s| s.remove(0))
        .unwrap_or_else(|_| panic!("valid schema"));
        let message =
            check_schema(&checked, "t", &input(r#"{"case":"UPPER"}"#)).expect_err("not a case");
        assert!(
            message.contains(r#"at /case: "UPPER" is not one of "upper", "lower""#),
            "{message}"
        );
    }
}
