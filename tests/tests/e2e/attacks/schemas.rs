//! Attacks by schemas whose check would hold a host thread for hours or overflow its stack:
//! references that fan out (within a level or from level to level of a value), chains of
//! references thousands long, subschemas that apply themselves, references out of the schema.

use llm_worker::*;
use llm_worker_tests::wat::WatComponent;

use super::OBJECT;

/// Loads a plugin of one tool, `t`, whose input schema is `schema`.
fn load_input(schema: &str) -> Result<LoadedPlugin, PluginError> {
    let wasm = WatComponent::new(&[("t", "A tool.", schema)])
        .echo()
        .build();
    llm_worker_tests::host().load_bytes("/plugins/schemas.wasm", &wasm)
}

/// `depth` definitions, each applying the next one `fan` times (`allOf`), the last a string.
fn fanning_definitions(depth: usize, fan: usize) -> String {
    let definitions: Vec<String> = (0..depth)
        .map(|i| {
            let branch = format!(r##"{{"$ref":"#/$defs/d{}"}}"##, i + 1);
            let branches = vec![branch; fan].join(",");
            format!(r#""d{i}":{{"allOf":[{branches}]}}"#)
        })
        .chain([format!(r#""d{depth}":{{"type":"string"}}"#)])
        .collect();
    format!(
        r##"{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/d0"}}}},"$defs":{{{}}}}}"##,
        definitions.join(",")
    )
}

/// Asserts that `result` is the refusal of tool `t`'s input schema, with `expected` in its
/// message.
fn assert_refused(result: Result<LoadedPlugin, PluginError>, expected: &str) {
    let error = result.expect_err("refused at load");
    let message = error.to_string();
    assert!(
        matches!(error, PluginError::InvalidSchema { ref tool, .. } if tool == "t")
            && message.contains("/plugins/schemas.wasm")
            && message.contains(expected),
        "{message}"
    );
}

#[test]
fn schemas_whose_references_fan_out_are_refused_at_load() {
    // 2⁴⁰ applications of `d40` to the member `a` (2⁴² - 2 subschemas in all): hours of one
    // host thread per call.
    assert_refused(
        load_input(&fanning_definitions(40, 2)),
        "could apply 4398046511102 subschemas to a value nested 1 deep",
    );
    // Beyond 2⁶⁴, the count saturates and still refuses.
    assert_refused(
        load_input(&fanning_definitions(70, 2)),
        "more than 2⁶⁴ subschemas",
    );
    // Doubling from level to level of the value: the member `x` of every level gets the root
    // schema twice, so a value 40 deep would be checked 2⁴⁰ times.
    assert_refused(
        load_input(
            r##"{"type":"object","properties":{"x":{"anyOf":[{"$ref":"#"},{"$ref":"#"}]}}}"##,
        ),
        "to a value nested",
    );
    // The same through `items` and `additionalProperties` on one member.
    assert_refused(
        load_input(
            r##"{"type":"object","properties":{"x":{"$ref":"#"}},"additionalProperties":{"$ref":"#"},"patternProperties":{"^x$":{"$ref":"#"}}}"##,
        ),
        "to a value nested",
    );
    // `unevaluatedProperties` checks again every subschema applied beside it (to find what
    // they evaluated): nested 40 deep, each level checks the next one at least twice.
    let nested: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r##""u{i}":{{"allOf":[{{"$ref":"#/$defs/u{}"}}],"unevaluatedProperties":false}}"##,
                i + 1
            )
        })
        .collect();
    assert_refused(
        load_input(&format!(
            r##"{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/u0"}}}},"$defs":{{{},"u40":{{}}}}}}"##,
            nested.join(",")
        )),
        "subschemas to a value nested 1 deep",
    );
    // The same as an output schema.
    let meta = llm_worker_tests::wat::MetaV2 {
        output_schema: Some(fanning_definitions(40, 2).replace(
            r#"{"type":"object","#,
            r#"{"type":"object","required":["a"],"#,
        )),
        ..Default::default()
    };
    let wasm = WatComponent::new(&[("t", "A tool.", OBJECT)])
        .v2(vec![meta])
        .build();
    let error = llm_worker_tests::host()
        .load_bytes("/plugins/outputs.wasm", &wasm)
        .expect_err("refused at load");
    assert!(
        error.to_string().contains("output schema") && error.to_string().contains("subschemas"),
        "{error}"
    );
}

#[test]
fn reference_chains_and_loops_are_refused_at_load() {
    // 1,800 references in a row: as many nested calls on a host thread's stack.
    let chain: Vec<String> = (0..1_800)
        .map(|i| format!(r##""{i}":{{"$ref":"#/$defs/{}"}}"##, i + 1))
        .collect();
    let schema = format!(
        r##"{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/0"}}}},"$defs":{{{},"1800":{{}}}}}}"##,
        chain.join(",")
    );
    assert_refused(
        load_input(&schema),
        "could nest 1803 subschema applications",
    );
    // Subschemas applying each other to the same value, without end.
    assert_refused(
        load_input(
            r##"{"type":"object","$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"not":{"$ref":"#/$defs/a"}}},"properties":{"x":{"$ref":"#/$defs/a"}}}"##,
        ),
        "applies itself to the same value without end",
    );
    // A reference to anything outside the schema.
    assert_refused(
        load_input(
            r#"{"type":"object","properties":{"x":{"$ref":"https://example.com/other.json"}}}"#,
        ),
        "names nothing in the schema",
    );
    assert_refused(
        load_input(r##"{"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}}"##),
        "names nothing in the schema",
    );
}

#[test]
fn recursive_and_generated_schemas_load_and_check_deep_values() {
    // A tree: each level applies the root schema once to each of two members.
    let plugin = load_input(
        r##"{"type":"object","properties":{"value":{"type":"integer"},"left":{"$ref":"#"},"right":{"$ref":"#/$defs/node"}},"$defs":{"node":{"$ref":"#"}}}"##,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // 120 levels (within serde_json's nesting limit of 128), of one path each.
    let mut value = r#"{"value":1}"#.to_owned();
    for _ in 0..120 {
        value = format!(r#"{{"value":1,"left":{value}}}"#);
    }
    assert!(plugin.check_input("t", &value).is_ok());
    let bad = value.replacen(r#"{"value":1}"#, r#"{"value":"one"}"#, 1);
    let error = plugin
        .check_input("t", &bad)
        .expect_err("a string is no integer");
    assert!(error.to_string().contains("/left/left"), "{error}");
    // A chain of references just within the bound checks a value on a thread of the usual
    // 2 MiB stack, even unoptimised.
    let chain: Vec<String> = (0..990)
        .map(|i| format!(r##""{i}":{{"$ref":"#/$defs/{}"}}"##, i + 1))
        .collect();
    let plugin = load_input(&format!(
        r##"{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/0"}}}},"$defs":{{{},"990":{{"type":"string"}}}}}}"##,
        chain.join(",")
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(plugin.check_input("t", r#"{"a":"x"}"#).is_ok());
    assert!(plugin.check_input("t", r#"{"a":1}"#).is_err());
    // Anchors, `$id`s and an `anyOf` naming a shared definition once per branch load.
    let plugin = load_input(
        r##"{"$id":"https://example.com/t.json","type":"object","properties":{"shape":{"anyOf":[{"$ref":"#circle"},{"$ref":"https://example.com/t.json#/$defs/square"},{"$ref":"#/$defs/square"}]}},"$defs":{"circle":{"$anchor":"circle","type":"object","properties":{"r":{"$ref":"#/$defs/length"}}},"square":{"type":"object","properties":{"side":{"$ref":"#/$defs/length"}}},"length":{"type":"number","minimum":0}}}"##,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(plugin.check_input("t", r#"{"shape":{"r":2}}"#).is_ok());
    // One `unevaluatedProperties` over definitions it combines loads and closes the object.
    let plugin = load_input(
        r##"{"type":"object","allOf":[{"$ref":"#/$defs/named"},{"$ref":"#/$defs/dated"}],"unevaluatedProperties":false,"$defs":{"named":{"properties":{"name":{"type":"string"}}},"dated":{"properties":{"date":{"type":"string"}}}}}"##,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        plugin
            .check_input("t", r#"{"name":"a","date":"b"}"#)
            .is_ok()
    );
    assert!(
        plugin
            .check_input("t", r#"{"name":"a","other":1}"#)
            .is_err()
    );
}
