//! Checks a component against the world `tool-plugin` and its tool list against the rules.

mod budget;
pub(crate) mod offerings;
mod schema;
#[cfg(test)]
mod tests;
mod work;

use std::collections::HashSet;

use serde_json::Value;

/// The versions this host loads, oldest first.
pub(crate) use super::bindings::VERSIONS;
/// The WIT package this host implements.
pub(crate) use llm_worker_rules::contract::PACKAGE;
/// The caps on a plugin's tool list.
use llm_worker_rules::tool::{MAX_DESCRIPTION_BYTES, MAX_NAME_LEN, MAX_SCHEMA_BYTES, MAX_TOOLS};

pub(crate) use budget::{PATTERN_SIZE_LIMIT, SchemaBudget};
use schema::compile_schema;
pub(crate) use schema::{
    CheckedSchema, check_output, check_output_schema, check_schema, check_structured,
};

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
        let name: String = name.chars().take(MAX_NAME_LEN).collect();
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

/// Parses and checks an input schema: JSON, an object, and (if it says) of type "object".
pub(crate) fn parse_schema(text: &str) -> Result<Value, String> {
    let schema: Value =
        serde_json::from_str(text).map_err(|e| format!("it is not valid JSON: {e}"))?;
    // First: every later message may quote the schema's text.
    check_schema_text(&schema)?;
    let Some(object) = schema.as_object() else {
        return Err("it is not a JSON object".to_owned());
    };
    check_draft_rules(&schema)?;
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

/// Refuses a schema of an earlier draft (`$schema` naming draft 3, 4, 6, 7 or 2019-09) with
/// what that draft ignores (and so does the host's check) while the providers and models the
/// schema is shown to read it as the current draft and take it as a rule: keywords that
/// constrain beside a `$ref` (before 2019-09), and keywords of a later draft (`const` under
/// draft 4, `unevaluatedProperties` under draft 7, `prefixItems` under 2019-09…). What the
/// model is told would not be what is enforced.
///
/// A `$schema` below the root is refused: jsonschema reads the subschema under the draft it
/// names (without an `$id`), so `"const"` in a subschema declaring draft 4 went unchecked.
fn check_draft_rules(schema: &Value) -> Result<(), String> {
    let declared = schema.get("$schema").and_then(Value::as_str).unwrap_or("");
    let draft: u32 = if declared.contains("draft-03") || declared.contains("draft-04") {
        4
    } else if declared.contains("draft-06") {
        6
    } else if declared.contains("draft-07") {
        7
    } else if declared.contains("2019-09") {
        2019
    } else {
        2020
    };
    // Beside a `$ref`, what annotates or holds definitions says nothing the draft ignores.
    const INERT: [&str; 13] = [
        "$ref",
        "$schema",
        "$id",
        "$comment",
        "definitions",
        "$defs",
        "title",
        "description",
        "default",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
    ];
    // Members whose values are maps of names to schemas (a property may be named `enum`).
    const MAPS: [&str; 6] = [
        "properties",
        "patternProperties",
        "definitions",
        "$defs",
        "dependencies",
        "dependentSchemas",
    ];
    // Keywords that constrain, and the draft that brought them (jsonschema compiles each only
    // from that draft on).
    const LATER: [(&str, u32); 14] = [
        ("const", 6),
        ("contains", 6),
        ("propertyNames", 6),
        ("if", 7),
        ("then", 7),
        ("else", 7),
        ("dependentRequired", 2019),
        ("dependentSchemas", 2019),
        ("unevaluatedProperties", 2019),
        ("unevaluatedItems", 2019),
        ("minContains", 2019),
        ("maxContains", 2019),
        ("prefixItems", 2020),
        ("$dynamicRef", 2020),
    ];
    // `value` at `at`: a schema, or (`map`) a map of names to schemas.
    fn walk(value: &Value, at: &mut String, map: bool, draft: u32) -> Result<(), String> {
        match value {
            Value::Object(object) if map => {
                for (name, member) in object {
                    descend(at, name, |at| walk(member, at, false, draft))?;
                }
                Ok(())
            }
            Value::Object(object) => {
                let here = if at.is_empty() { "/" } else { at.as_str() };
                if !at.is_empty() && object.contains_key("$schema") {
                    return Err(format!(
                        "at {here}: a `$schema` below the root, which makes the host read that \
                         part under another draft than providers and models do; declare the \
                         draft once, at the root"
                    ));
                }
                if let Some((key, since)) = LATER
                    .iter()
                    .find(|(key, since)| *since > draft && object.contains_key(*key))
                {
                    let since = match since {
                        2019 => "2019-09".to_owned(),
                        2020 => "2020-12".to_owned(),
                        draft => format!("draft {draft}"),
                    };
                    return Err(format!(
                        "at {here}: `{key}` (from JSON Schema {since}), which the draft the \
                         schema declares does not have: it ignores it (and so does the host's \
                         check), while providers and models read it as a rule; declare \
                         \"$schema\": \"https://json-schema.org/draft/2020-12/schema\", or \
                         leave the keyword out"
                    ));
                }
                // The root's `"type": "object"` says what every tool's input is anyway.
                let inert = |key: &&String| {
                    INERT.contains(&key.as_str())
                        || key.starts_with("x-")
                        || (at.is_empty() && key.as_str() == "type")
                };
                if draft < 2019
                    && object.get("$ref").is_some_and(Value::is_string)
                    && let Some(key) = object.keys().find(|key| !inert(key))
                {
                    return Err(format!(
                        "at {}: `{key}` beside `$ref`, which the draft the schema declares \
                         ignores (and so does the host's check), while providers and models \
                         read it as a rule; move it into the definition, or declare \
                         \"$schema\": \"https://json-schema.org/draft/2020-12/schema\"",
                        if at.is_empty() { "/" } else { at }
                    ));
                }
                for (key, member) in object {
                    // Values, not schemas.
                    if matches!(key.as_str(), "enum" | "const" | "default" | "examples") {
                        continue;
                    }
                    let map = MAPS.contains(&key.as_str());
                    descend(at, key, |at| walk(member, at, map, draft))?;
                }
                Ok(())
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    descend(at, &index.to_string(), |at| walk(item, at, false, draft))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(schema, &mut String::new(), false, draft)
}

/// Runs `walk` with the JSON pointer `at` one `token` deeper (escaped as RFC 6901 says), and
/// gives `at` back as it was.
fn descend(
    at: &mut String,
    token: &str,
    walk: impl FnOnce(&mut String) -> Result<(), String>,
) -> Result<(), String> {
    let len = at.len();
    at.push('/');
    at.push_str(&token.replace('~', "~0").replace('/', "~1"));
    let walked = walk(at);
    at.truncate(len);
    walked
}

/// Checks a title: one line, not empty, short (the rule is `llm_worker_rules::tool`'s).
pub(crate) fn check_title(title: &str) -> Result<(), String> {
    llm_worker_rules::tool::check_title(title).map_err(|problem| problem.to_string())
}

/// Checks a description: within the cap, no character a terminal would act on or that
/// reorders the text (the rule is `llm_worker_rules::tool`'s).
pub(crate) fn check_description(text: &str) -> Result<(), String> {
    llm_worker_rules::tool::check_description(text).map_err(|problem| problem.to_string())
}

/// Checks every text of a schema (each string and each member name, at any depth: nested
/// `description`s and `title`s, property names, `enum` values …), which a client passes to
/// its model as it is: none may hold a character of `is_hidden_char`, as a tool's description
/// may not. The problem names where, as a JSON pointer.
pub(crate) fn check_schema_text(schema: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    fn walk(value: &Value, at: &mut String) -> Result<(), String> {
        let hidden =
            |text: &str, at: &str, what: &str| match llm_worker_rules::tool::first_hidden(text) {
                Some((index, found)) => Err(format!(
                    "{what} at #{} holds {found:?} (U+{:04X}) at character {index}: a schema's \
                 texts reach the model as they are, so they may hold line breaks and tabs but \
                 no other control character, nor one that reorders or hides text",
                    llm_worker_rules::tool::Visible(at),
                    u32::from(found)
                )),
                None => Ok(()),
            };
        match value {
            Value::String(text) => hidden(text, at, "the text"),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(index, item)| descend(at, &index.to_string(), |at| walk(item, at))),
            Value::Object(members) => members.iter().try_for_each(|(name, member)| {
                descend(at, name, |at| {
                    hidden(name, at, "the member name").and_then(|()| walk(member, at))
                })
            }),
            _ => Ok(()),
        }
    }
    walk(schema, &mut String::new())
}

/// Checks a plugin's tool list: at least one tool, valid and unique names, valid JSON Schemas
/// of objects, within the plugin's schema memory `budget` (every input schema is charged
/// before any is compiled). Returns the compiled schemas in order.
pub(crate) fn check_tools<'a>(
    tools: impl IntoIterator<Item = (&'a str, &'a str)>,
    budget: &mut SchemaBudget,
) -> Result<Vec<CheckedSchema>, ToolListProblem> {
    let mut seen = HashSet::new();
    let mut parsed = Vec::new();
    for (name, schema) in tools {
        llm_worker_rules::tool::check_name(name).map_err(|problem| ToolListProblem::BadName {
            name: name.to_owned(),
            reason: problem.reason(),
        })?;
        if !seen.insert(name) {
            return Err(ToolListProblem::Duplicate(name.to_owned()));
        }
        let schema = parse_schema(schema).map_err(|reason| ToolListProblem::BadSchema {
            tool: name.to_owned(),
            reason,
        })?;
        if let Some(problem) = crate::plugin::input::property_names_clash(&schema) {
            return Err(ToolListProblem::BadSchema {
                tool: name.to_owned(),
                reason: format!(
                    "its properties {problem}: every input naming both is refused (a parser \
                     that ignores case would take one value for both), so the tool could \
                     never be called with both; rename one"
                ),
            });
        }
        budget
            .charge(&schema, &format!("the input schema of tool {name:?}"))
            .map_err(ToolListProblem::TooLarge)?;
        parsed.push((name, schema));
    }
    if parsed.is_empty() {
        return Err(ToolListProblem::Empty);
    }
    parsed
        .into_iter()
        .map(|(name, schema)| {
            compile_schema(schema, budget).map_err(|reason| ToolListProblem::BadSchema {
                tool: name.to_owned(),
                reason,
            })
        })
        .collect()
}
