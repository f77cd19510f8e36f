//! Checks a component against the world `tool-plugin` and its tool list against the rules.

use std::collections::HashSet;

use serde_json::Value;

/// The versions this host loads, oldest first.
pub(crate) use super::bindings::VERSIONS;
/// The WIT package this host implements.
pub(crate) use llm_worker_rules::contract::PACKAGE;
/// The caps on a plugin's tool list.
use llm_worker_rules::tool::{MAX_DESCRIPTION_BYTES, MAX_NAME_LEN, MAX_SCHEMA_BYTES, MAX_TOOLS};

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
/// Charge it to the plugin's [`SchemaBudget`] first.
fn compile_schema(schema: Value, budget: &SchemaBudget) -> Result<CheckedSchema, String> {
    let validator = super::input::validator(&schema, &budget.compiled)
        .map_err(|e| format!("it is not a valid JSON Schema: {e}"))?;
    Ok(CheckedSchema { schema, validator })
}

/// What one compiled regular expression takes beyond what `regex-automata` reports for its
/// automata and its first search cache: jsonschema's validator around it, its `Arc`s, the
/// pattern text (original and translated), its entries in the pattern caches, the cache pool.
/// Measured with `tests::measure_the_memory_of_compiled_patterns`: 2,263 patterns like
/// `^\S+123.*$` took 14,563 bytes each, of which `regex-automata` reported 5,261 (and 4,198
/// for a search cache, not yet made); 5,045 bytes more each, rounded up.
const REGEX_OVERHEAD_BYTES: usize = 6 << 10;

/// The host memory one plugin's compiled schemas may take, charged before each schema is
/// compiled, across all its tools' input and output schemas.
///
/// jsonschema compiles every `pattern` and every `patternProperties` key into a regular
/// expression, and keeps it for as long as the plugin is loaded: a 60 KB schema of 2,000
/// patterns took 64 MiB of host memory, which the instance memory limit never sees. The budget
/// walks the schema first, and builds each regular expression it has not charged yet exactly
/// as jsonschema will (the same translation from ECMA 262, the same `regex-automata` engine
/// and options) with its automata limited to what is left of the budget, so that an
/// over-large one fails at once; it then charges what that build reports as its memory, plus
/// its first search cache and [`REGEX_OVERHEAD_BYTES`]. A pattern the plugin's schemas repeat
/// is compiled once for all of them (jsonschema's pattern cache, shared by the plugin's
/// builds) and charged once.
pub(crate) struct SchemaBudget {
    limit: usize,
    spent: usize,
    /// The regular expressions charged so far (their text in the schema).
    charged: HashSet<String>,
    /// jsonschema's compiled patterns, shared by every schema of the plugin.
    compiled: jsonschema::PatternCache,
}

/// Largest compiled automaton of one `pattern` (jsonschema's `size_limit`, which
/// `regex-automata` applies to each of its NFAs).
pub(crate) const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The lazy DFA's cache capacity the `regex` crate gives each regular expression by default
/// (jsonschema does not change it).
const LAZY_DFA_CAPACITY: usize = 2 << 20;

impl SchemaBudget {
    /// A budget of `limit` bytes (the plugin's `Limits::schema_memory_bytes`).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            spent: 0,
            charged: HashSet::new(),
            compiled: jsonschema::PatternCache::new(),
        }
    }

    /// Bytes charged so far.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> usize {
        self.spent
    }

    /// Charges what compiling `schema` will add (the schema of `what`, e.g. `tool "t"'s input
    /// schema`), or refuses it, without compiling it, when that is more than is left.
    fn charge(&mut self, schema: &Value, what: &str) -> Result<(), String> {
        let mut found = Vec::new();
        regexes(schema, &mut found);
        for pattern in found {
            if self.charged.contains(pattern) {
                continue;
            }
            let room = self.limit.saturating_sub(self.spent);
            let cost = regex_cost(pattern, room)
                .filter(|&cost| cost <= room)
                .ok_or_else(|| {
                    format!(
                        "the regular expressions (`pattern`, `patternProperties`) of {what}                          take the plugin's compiled schemas over their limit of {} MiB of host                          memory ({} distinct ones, {:.1} MiB, were charged before it); use                          fewer or simpler patterns, or, if you trust the plugin, raise                          `schema_memory_mib` under [limits] in its policy file",
                        self.limit >> 20,
                        self.charged.len(),
                        self.spent as f64 / f64::from(1 << 20),
                    )
                })?;
            self.spent += cost;
            self.charged.insert(pattern.to_owned());
        }
        Ok(())
    }
}

/// Every string of `schema` that jsonschema may compile as a regular expression: each
/// `pattern` string and each key of a `patternProperties` object, wherever they are (also
/// where they are data, such as in a `const`: charging those too is the safe side, and a
/// property named `const` must not hide the schema under it).
fn regexes<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(members) => {
            for (key, value) in members {
                match (key.as_str(), value) {
                    ("pattern", Value::String(pattern)) => found.push(pattern),
                    ("patternProperties", Value::Object(patterns)) => {
                        found.extend(patterns.keys().map(String::as_str));
                    }
                    _ => {}
                }
                regexes(value, found);
            }
        }
        Value::Array(items) => {
            for item in items {
                regexes(item, found);
            }
        }
        _ => {}
    }
}

/// The host memory `pattern` takes once jsonschema has compiled it and searched with it once,
/// built with each automaton limited to `room` bytes: `None` if it does not fit. A text that
/// is no regular expression costs [`REGEX_OVERHEAD_BYTES`] (jsonschema refuses it where it is a
/// pattern).
fn regex_cost(pattern: &str, room: usize) -> Option<usize> {
    use jsonschema_regex::Search;
    use regex_automata::meta;
    // As jsonschema compiles it: translated from ECMA 262 to Rust's syntax, then counted
    // without an engine (a repeated class) or compiled by the `regex` crate.
    let Ok(translated) = jsonschema_regex::to_rust_regex(pattern) else {
        return Some(REGEX_OVERHEAD_BYTES);
    };
    let form = jsonschema_regex::search_form(pattern, &translated);
    let compiled = match &form {
        Some(Search::RepeatedClass(_)) => return Some(REGEX_OVERHEAD_BYTES),
        Some(Search::Collapsed(text)) => text.as_str(),
        None => translated.as_ref(),
    };
    // `regex::RegexBuilder`'s configuration, with jsonschema's size limit or less.
    let config = meta::Config::new()
        .nfa_size_limit(Some(room.min(PATTERN_SIZE_LIMIT)))
        .hybrid_cache_capacity(LAZY_DFA_CAPACITY);
    match meta::Builder::new().configure(config).build(compiled) {
        Ok(regex) => Some(
            regex
                .memory_usage()
                .saturating_add(regex.create_cache().memory_usage())
                .saturating_add(REGEX_OVERHEAD_BYTES),
        ),
        Err(error) if error.size_limit().is_some() => None,
        Err(_) => Some(REGEX_OVERHEAD_BYTES),
    }
}

/// Checks an input against a tool's schema; the message lists every problem with its JSON
/// path, so a model can correct its call.
pub(crate) fn check_schema(
    checked: &CheckedSchema,
    tool: &str,
    input: &super::input::InputNode<'_>,
) -> Result<(), String> {
    // The common case, valid input, without building any error.
    input_verdict(tool, checked.validator.is_valid(input), || {
        schema_problems(checked, input)
    })
}

/// [`verdict`] on the input of `tool`, as the message a model gets.
fn input_verdict(
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
fn verdict(valid: bool, problems: impl FnOnce() -> Vec<String>) -> Result<(), String> {
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

/// Checks a title: one line, not empty, short (the rule is `llm_worker_rules::tool`'s).
pub(crate) fn check_title(title: &str) -> Result<(), String> {
    llm_worker_rules::tool::check_title(title).map_err(|problem| problem.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use llm_worker_rules::tool::MAX_TITLE_BYTES;

    fn input(text: &str) -> super::super::input::InputNode<'_> {
        super::super::input::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The default budget of a plugin.
    fn budget() -> SchemaBudget {
        SchemaBudget::new(crate::Limits::default().schema_memory_bytes)
    }

    fn check_output_schema(text: &str) -> Result<CheckedSchema, String> {
        super::check_output_schema(text, "t", &mut budget())
            .map_err(|problem| format!("{problem:?}"))
    }

    fn check_tools<'a>(
        tools: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Vec<CheckedSchema>, ToolListProblem> {
        super::check_tools(tools, &mut budget())
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
    fn a_validator_that_lists_no_problem_does_not_let_a_value_through() {
        assert_eq!(input_verdict("t", true, Vec::new), Ok(()));
        // `is_valid` false with no error listed: refused all the same, naming the tool.
        let message = input_verdict("t", false, Vec::new).expect_err("fails closed");
        assert!(
            message.contains("input of tool 't' does not match its input schema"),
            "{message}"
        );
        let message = input_verdict("t", false, || vec!["at /n: -1 is less than 0".into()])
            .expect_err("invalid");
        assert!(
            message.ends_with("schema: at /n: -1 is less than 0"),
            "{message}"
        );
        assert!(verdict(false, Vec::new).is_err());
    }

    /// A schema of `count` distinct regular expressions of this shape (`{i}` is a number), as
    /// `patternProperties` keys, and an input whose one member each of them is tried on.
    fn patterns_schema(count: usize, shape: &str) -> (String, String) {
        let patterns: Vec<String> = (0..count)
            .map(|i| format!(r#""{}":{{}}"#, shape.replace("{i}", &i.to_string())))
            .collect();
        let schema = format!(
            r#"{{"type":"object","patternProperties":{{{}}}}}"#,
            patterns.join(",")
        );
        (schema, r#"{"a0":1}"#.to_owned())
    }

    /// The shape of the patterns of the attack in SECURITY.md: 2,263 of them fit a 60 KB
    /// schema.
    const ATTACK_SHAPE: &str = r"^\\S+{i}.*$";

    #[test]
    fn schema_memory_is_charged_before_compiling() {
        let (schema, _) = patterns_schema(2_000, ATTACK_SHAPE);
        assert!(schema.len() <= MAX_SCHEMA_BYTES, "{}", schema.len());
        // Within the default budget, one such schema loads; charged, not free.
        let mut plugin = budget();
        let checked = super::check_tools([("t", schema.as_str())], &mut plugin)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(checked.len(), 1);
        let one = plugin.spent();
        assert!(one > 2_000 * REGEX_OVERHEAD_BYTES, "{one}");
        // The same patterns again, in another tool or an output schema: compiled once, charged
        // once.
        let output = schema.replace(r#""type":"object""#, r#""type":"object","title":"o""#);
        super::check_output_schema(&output, "t", &mut plugin).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(plugin.spent(), one);
        // A budget below what they take: refused, naming the tool and what to do.
        let mut small = SchemaBudget::new(one / 2);
        let problem = super::check_tools([("a", "{}"), ("big", schema.as_str())], &mut small)
            .err()
            .unwrap_or_else(|| panic!("over the budget"));
        let ToolListProblem::TooLarge(message) = problem else {
            panic!("{problem:?}");
        };
        assert!(
            message.contains("the input schema of tool \"big\"")
                && message.contains("schema_memory_mib")
                && message.contains("[limits]"),
            "{message}"
        );
        assert!(small.spent() <= one / 2);
        // The same for an output schema.
        let mut small = SchemaBudget::new(one / 2);
        let problem = super::check_output_schema(&output, "out", &mut small)
            .err()
            .unwrap_or_else(|| panic!("over the budget"));
        assert!(
            matches!(&problem, ToolListProblem::TooLarge(m) if m.contains("output schema of tool \"out\"")),
            "{problem:?}"
        );
        // One regular expression bigger than what is left fails as it is built (its NFA alone).
        assert_eq!(regex_cost(r"x\w{500}y", 8 << 10), None);
        assert!(regex_cost(r"x\w{500}y", 64 << 20).is_some_and(|cost| cost > 8 << 10));
        // Every place a regular expression hides is found, data included.
        let mut found = Vec::new();
        let schema = serde_json::json!({
            "patternProperties": {"^a": {}, "^b": {"pattern": "c"}},
            "properties": {"const": {"pattern": "d"}, "pattern": {"type": "string"}},
            "items": [{"pattern": "e"}],
        });
        regexes(&schema, &mut found);
        found.sort_unstable();
        assert_eq!(found, ["^a", "^b", "c", "d", "e"]);
    }

    /// Host memory now (Linux): resident pages, in bytes.
    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: usize = statm
            .split_whitespace()
            .nth(1)
            .and_then(|pages| pages.parse().ok())
            .unwrap_or(0);
        pages * 4096
    }

    /// Calibrates [`REGEX_OVERHEAD_BYTES`]: what a schema of 2,263 distinct patterns really
    /// takes (resident memory, compiled and after one validation), against what the budget
    /// charges for it. Run alone:
    /// `cargo test -p llm-worker --lib measure_the_memory -- --ignored --nocapture`
    /// (`SHAPE` may give another pattern shape, `{i}` for the number).
    #[test]
    #[ignore = "a measurement: run it alone, by hand"]
    fn measure_the_memory_of_compiled_patterns() {
        let shape = std::env::var("SHAPE").unwrap_or_else(|_| ATTACK_SHAPE.to_owned());
        let count = 2_263;
        let (schema, input_text) = patterns_schema(count, &shape);
        let value: Value = serde_json::from_str(&schema).expect("schema");
        let before = resident_bytes();
        let started = std::time::Instant::now();
        let validator = super::super::input::validator(&value, &jsonschema::PatternCache::new())
            .unwrap_or_else(|e| panic!("{e}"));
        let compile_time = started.elapsed();
        let compiled = resident_bytes() - before;
        let input = super::super::input::parse(&input_text).expect("input");
        let valid = validator.is_valid(&input);
        let used = resident_bytes() - before;
        let started = std::time::Instant::now();
        let mut budget = SchemaBudget::new(usize::MAX);
        budget.charge(&value, "it").expect("no limit");
        let charge_time = started.elapsed();
        let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
        println!(
            "{count} patterns like {shape:?}, schema {} bytes: compiled in {compile_time:?}, \
             {:.1} MiB resident ({} bytes each); {:.1} MiB after one validation (valid: {valid}); \
             charged {:.1} MiB ({} bytes each, {} of them overhead) in {charge_time:?}",
            schema.len(),
            mib(compiled),
            compiled / count,
            mib(used),
            mib(budget.spent()),
            budget.spent() / count,
            REGEX_OVERHEAD_BYTES,
        );
        drop(validator);
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
