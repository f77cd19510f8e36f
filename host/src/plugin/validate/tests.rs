//! Unit tests of the tool list, schema and output checks and of the schema memory budget.

use super::budget::{REGEX_OVERHEAD_BYTES, regex_cost, regexes};
use super::schema::{input_verdict, verdict};
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
    super::check_output_schema(text, "t", &mut budget()).map_err(|problem| format!("{problem:?}"))
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
    let message =
        input_verdict("t", false, || vec!["at /n: -1 is less than 0".into()]).expect_err("invalid");
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
    assert_eq!(compatible_version("0.3.0"), Some("0.3.0"));
    assert_eq!(compatible_version("0.3.9"), Some("0.3.0"));
    assert_eq!(compatible_version("0.4.0"), None);
    // From 1.0.0, the major version alone.
    assert_eq!(compatible_version("1.0.0"), Some("1.0.0"));
    assert_eq!(compatible_version("1.2.5"), Some("1.0.0"));
    assert_eq!(compatible_version("2.0.0"), None);
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
    assert_eq!(
        check_schema(&checked, "t", &input(r#"{"n": 1}"#), 0),
        Ok(())
    );
    let message = check_schema(&checked, "t", &input(r#"{"n": -1, "tags": ["a", 2]}"#), 0)
        .expect_err("two problems");
    assert!(message.contains("at /n:"), "{message}");
    assert!(message.contains("at /tags/1:"), "{message}");
    let message = check_schema(&checked, "t", &input("{}"), 0).expect_err("missing field");
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
        check_schema(&checked, "t", &input(r#"{"case":"UPPER"}"#), 0).expect_err("not a case");
    assert!(
        message.contains(r#"at /case: "UPPER" is not one of "upper", "lower""#),
        "{message}"
    );
}

#[test]
fn unknown_members_are_named_with_what_the_object_takes() {
    let problem = |schema: &str, value: &str| {
        let checked = check_tools([("t", schema)])
            .map(|mut s| s.remove(0))
            .unwrap_or_else(|_| panic!("valid schema: {schema}"));
        check_schema(&checked, "t", &input(value), 0).expect_err("refused")
    };
    // A tool without arguments: jsonschema says "False schema does not allow 1".
    let none = r#"{"type":"object","additionalProperties":false}"#;
    let message = problem(none, r#"{"x":1}"#);
    assert!(
        message.ends_with(r#"at /: unknown argument "x"; the tool takes none"#),
        "{message}"
    );
    let message = problem(none, r#"{"x":1,"y":2}"#);
    assert!(
        message.contains(r#"unknown arguments "x", "y"; the tool takes none"#),
        "{message}"
    );
    // With properties, and nested.
    let named = r##"{"type":"object","additionalProperties":false,
        "properties":{"name":{"type":"string"},"style":{"$ref":"#/$defs/Style"}},
        "$defs":{"Style":{"type":"object","properties":{"sep":{"type":"string"}},
                          "additionalProperties":false}}}"##;
    let message = problem(named, r#"{"name":"a","nmae":"b"}"#);
    assert!(
        message.contains(r#"at /: unknown argument "nmae"; the tool takes "name", "style""#),
        "{message}"
    );
    let message = problem(named, r#"{"style":{"sep":"-","zz":1}}"#);
    assert!(
        message.contains(r#"at /style: unknown property "zz"; the object takes "sep""#),
        "{message}"
    );
    // A property whose schema is `false`, and names given by patterns.
    let forbidden = r#"{"type":"object","properties":{"a":{"type":"integer"},"old":false}}"#;
    let message = problem(forbidden, r#"{"old":1}"#);
    assert!(
        message.contains(r#"at /: argument "old" is not allowed; the tool takes "a""#),
        "{message}"
    );
    let patterns =
        r#"{"type":"object","patternProperties":{"^x-":{}},"additionalProperties":false}"#;
    let message = problem(patterns, r#"{"y":1}"#);
    assert!(
        message.contains(r#"unknown argument "y"; the tool takes names matching "^x-""#),
        "{message}"
    );
    // A result's members are not arguments.
    let output = check_output_schema(r#"{"type":"object","additionalProperties":false}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let message = super::check_output(&output, r#"{"x":1}"#).expect_err("refused");
    assert!(
        message.contains(r#"at /: unknown property "x"; the object takes none"#),
        "{message}"
    );
}

/// A schema of 56 KB whose 400 `oneOf` lists each reach a `required` list of 3,600 names a
/// thousand ways (through `allOf` and references): compiling it took jsonschema minutes, at
/// every load. It is refused before it is compiled; a `oneOf` of a hundred tagged variants,
/// as generated schemas have, is not.
#[test]
fn what_compiling_alternatives_takes_is_bounded() {
    let names: Vec<String> = (0..3600).map(|i| format!("{i:x}")).collect();
    let mut properties = serde_json::Map::new();
    for i in 0..400 {
        properties.insert(
            format!("p{i}"),
            serde_json::json!({"oneOf": [{"$ref": "#/$defs/Q"}, {"$ref": "#/$defs/Q"},
                {"$ref": "#/$defs/Q"}]}),
        );
    }
    let ten = |to: &str| {
        serde_json::Value::Array(
            (0..10)
                .map(|_| serde_json::json!({"$ref": format!("#/$defs/{to}")}))
                .collect(),
        )
    };
    let schema = serde_json::json!({"type": "object", "properties": properties, "$defs": {
        "Q": {"allOf": ten("R")}, "R": {"allOf": ten("S")}, "S": {"allOf": ten("P")},
        "P": {"required": names, "properties": {"x": {}}}}})
    .to_string();
    assert!(schema.len() <= MAX_SCHEMA_BYTES, "{}", schema.len());
    match check_tools([("t", schema.as_str())]) {
        Err(ToolListProblem::BadSchema { reason, .. }) => {
            assert!(reason.contains("`oneOf` and `anyOf`"), "{reason}");
        }
        other => panic!("not refused: {:?}", other.map(|_| ())),
    }
    let variants: Vec<serde_json::Value> = (0..100)
        .map(|i| {
            serde_json::json!({"type": "object", "required": ["kind", "value"],
                "properties": {"kind": {"const": format!("k{i}")}, "value": {"type": "string"},
                    "note": {"type": "string"}}})
        })
        .collect();
    let tagged = serde_json::json!({"type": "object", "properties": {
        "a": {"oneOf": variants.clone()}, "b": {"anyOf": variants}}})
    .to_string();
    assert!(check_tools([("t", tagged.as_str())]).is_ok());
}

/// Under a draft before 2019-09 the host's check ignores what is beside a `$ref`, where a
/// provider or model reading the schema as the current draft takes it as a rule: such a schema
/// is refused, naming where; the same keywords under the current draft, annotations beside a
/// reference, the root's type and a property named `$ref` pass.
#[test]
fn rules_an_old_draft_ignores_beside_a_reference_are_refused() {
    let draft7 = "http://json-schema.org/draft-07/schema#";
    let defs = serde_json::json!({"s": {"type": "string"}});
    let with = |schema_uri: &str, status: serde_json::Value| {
        serde_json::json!({
            "$schema": schema_uri, "type": "object",
            "properties": {"status": status}, "definitions": defs,
        })
        .to_string()
    };
    let sibling = serde_json::json!({"$ref": "#/definitions/s", "enum": ["status"]});
    let refused = super::parse_schema(&with(draft7, sibling.clone())).expect_err("refused");
    assert!(
        refused.contains("/properties/status") && refused.contains("`enum` beside `$ref`"),
        "{refused}"
    );
    // A property named as a value keyword is a schema all the same.
    let named_default = serde_json::json!({"$schema": draft7, "type": "object",
        "properties": {"default": {"$ref": "#/definitions/s", "maxLength": 3}},
        "definitions": defs});
    let refused = super::parse_schema(&named_default.to_string()).expect_err("refused");
    assert!(refused.contains("/properties/default"), "{refused}");
    for fine in [
        with("https://json-schema.org/draft/2020-12/schema", sibling),
        with(
            draft7,
            serde_json::json!({"$ref": "#/definitions/s", "description": "What it is."}),
        ),
        serde_json::json!({"$schema": draft7, "$ref": "#/definitions/a", "type": "object",
            "definitions": {"a": {"type": "object"}}})
        .to_string(),
        serde_json::json!({"$schema": draft7, "type": "object",
            "properties": {"$ref": {"type": "string"}, "other": {"type": "string"}}})
        .to_string(),
    ] {
        assert!(super::parse_schema(&fine).is_ok(), "{fine}");
    }
}

/// Keywords a later draft brought, under a schema that declares an earlier one: jsonschema
/// compiles them only from their draft on, so the host's check ignored them (`mode` could be
/// anything), while providers and models, reading the schema as the current draft, are told
/// `mode` must be `read`. Refused, naming where; under the current draft, or where the
/// keyword is a property's name, they pass.
#[test]
fn keywords_of_a_later_draft_than_the_declared_one_are_refused() {
    let declared = |draft: &str, status: serde_json::Value| {
        serde_json::json!({"$schema": draft, "type": "object",
            "properties": {"mode": status}, "required": ["mode"]})
        .to_string()
    };
    let draft4 = "http://json-schema.org/draft-04/schema#";
    let draft7 = "http://json-schema.org/draft-07/schema#";
    let draft2019 = "https://json-schema.org/draft/2019-09/schema";
    for (draft, status, keyword) in [
        (
            draft4,
            serde_json::json!({"type": "string", "const": "read"}),
            "`const`",
        ),
        (
            draft7,
            serde_json::json!({"type": "object", "unevaluatedProperties": false}),
            "`unevaluatedProperties`",
        ),
        (
            draft7,
            serde_json::json!({"type": "object", "dependentRequired": {"a": ["b"]}}),
            "`dependentRequired`",
        ),
        (
            draft2019,
            serde_json::json!({"type": "array", "prefixItems": [{"type": "string"}]}),
            "`prefixItems`",
        ),
    ] {
        let refused = super::parse_schema(&declared(draft, status)).expect_err(keyword);
        assert!(
            refused.contains("/properties/mode") && refused.contains(keyword),
            "{refused}"
        );
    }
    for fine in [
        declared(
            "https://json-schema.org/draft/2020-12/schema",
            serde_json::json!({"type": "string", "const": "read"}),
        ),
        declared(
            draft7,
            serde_json::json!({"type": "string", "const": "read"}),
        ),
        serde_json::json!({"$schema": draft4, "type": "object",
            "properties": {"const": {"type": "string"}, "if": {"type": "string"}}})
        .to_string(),
        serde_json::json!({"type": "object", "properties": {"$schema": {"type": "string"}}})
            .to_string(),
    ] {
        super::parse_schema(&fine).unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
    // A draft declared below the root, where jsonschema reads the subschema under it.
    let nested = serde_json::json!({"type": "object", "properties": {"mode": {
        "$schema": draft4, "type": "string", "const": "read"}}});
    let refused = super::parse_schema(&nested.to_string()).expect_err("a nested draft");
    assert!(
        refused.contains("/properties/mode") && refused.contains("`$schema` below the root"),
        "{refused}"
    );
}
