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
    // A reference to anything outside the schema (the host fetches nothing).
    assert_refused(
        load_input(
            r#"{"type":"object","properties":{"x":{"$ref":"https://example.com/other.json"}}}"#,
        ),
        "https://example.com/other.json",
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

#[test]
fn references_resolve_as_jsonschema_resolves_them() {
    let fanning: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r##""d{i}":{{"allOf":[{{"$ref":"#/$defs/d{0}"}},{{"$ref":"#/$defs/d{0}"}}]}}"##,
                i + 1
            )
        })
        .collect();
    let bomb = format!(r#"{},"d40":{{}}"#, fanning.join(","));
    // A decoy `$id` whose text matches the reference, while jsonschema normalises the URI
    // (case, dot segments, default ports) to the resource holding the bomb.
    assert_refused(
        load_input(&format!(
            r##"{{"type":"object","properties":{{"a":{{"$ref":"HTTP://H/b.json"}}}},"$defs":{{"decoy":{{"$id":"b.json"}},"bomb":{{"$id":"http://h/b.json","$ref":"#/$defs/d0","$defs":{{{bomb}}}}}}}}}"##
        )),
        "subschemas",
    );
    // An array index as `referencing` reads it (`01` is 1), where RFC 6901 reads none.
    assert_refused(
        load_input(&format!(
            r##"{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/x/01"}}}},"$defs":{{"x":[{{}},{{"$ref":"#/$defs/d0"}}],{bomb}}}}}"##
        )),
        "subschemas",
    );
    // A meta-schema is not the tool's to name.
    assert_refused(
        load_input(
            r#"{"type":"object","properties":{"a":{"$ref":"HTTPS://JSON-SCHEMA.ORG/draft/2020-12/schema"}}}"#,
        ),
        "meta-schema",
    );
}

#[test]
fn unevaluated_keywords_recheck_what_is_below_them() {
    // `unevaluatedProperties` checks again, to find what was evaluated, every subschema
    // below it, once per level of the chain: 300 links check the last one 300 times.
    let links: Vec<String> = (1..300)
        .map(|i| format!(r##""s{i}":{{"allOf":[{{"$ref":"#/$defs/s{}"}}]}}"##, i + 1))
        .collect();
    let leaves = vec![r##"{"$ref":"#/$defs/u"}"##; 1_000].join(",");
    assert_refused(
        load_input(&format!(
            r##"{{"type":"object","unevaluatedProperties":false,"allOf":[{{"$ref":"#/$defs/s1"}}],"$defs":{{{},"s300":{{"allOf":[{leaves}]}},"u":{{"unevaluatedProperties":{{"type":"integer"}}}}}}}}"##,
            links.join(",")
        )),
        "subschemas",
    );
}

/// A schema whose array `a` applies about 5,000 subschemas to each of its items.
fn heavy_items() -> String {
    let to_m = vec![r##"{"$ref":"#/$defs/m"}"##; 70].join(",");
    let to_l = vec![r##"{"$ref":"#/$defs/l"}"##; 70].join(",");
    format!(
        r##"{{"type":"object","properties":{{"a":{{"type":"array","items":{{"allOf":[{to_m}]}}}}}},"$defs":{{"m":{{"allOf":[{to_l}]}},"l":{{"type":"integer"}}}}}}"##
    )
}

#[test]
fn a_check_is_bounded_by_the_value_it_checks() {
    let plugin = load_input(&heavy_items()).unwrap_or_else(|e| panic!("{e}"));
    // Five items: some 25,000 applications, checked, and the problems listed.
    let items = |count: usize, item: &str| format!(r#"{{"a":[{}]}}"#, vec![item; count].join(","));
    assert!(plugin.check_input("t", &items(5, "0")).is_ok());
    let error = plugin
        .check_input("t", &items(5, "\"x\""))
        .expect_err("a string is no integer");
    assert!(error.to_string().contains("at /a/0"), "{error}");
    // A thousand: five million, checked, the problems too many to list.
    assert!(plugin.check_input("t", &items(1_000, "0")).is_ok());
    let error = plugin
        .check_input("t", &items(1_000, "\"x\""))
        .expect_err("a string is no integer");
    assert!(
        error.to_string().contains("problems are not listed"),
        "{error}"
    );
    // Ten thousand: fifty million, over the host's bound for one check: refused unchecked.
    let error = plugin
        .check_input("t", &items(10_000, "0"))
        .expect_err("too much work");
    assert!(
        error
            .to_string()
            .contains("too large for its input schema: checking it could apply"),
        "{error}"
    );
    // Each problem found carries a copy of its value, and jsonschema finds them all before the
    // first is read: 2,500 problems of a 400 KB object took a gigabyte. Not listed.
    let to_m = vec![r##"{"$ref":"#/$defs/m"}"##; 50].join(",");
    let to_l = vec![r##"{"$ref":"#/$defs/l"}"##; 50].join(",");
    let plugin = load_input(&format!(
        r##"{{"type":"object","properties":{{"a":{{"allOf":[{to_m}]}}}},"$defs":{{"m":{{"allOf":[{to_l}]}},"l":{{"type":"array"}}}}}}"##
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let members: Vec<String> = (0..40_000).map(|i| format!(r#""k{i}":1"#)).collect();
    let error = plugin
        .check_input("t", &format!(r#"{{"a":{{{}}}}}"#, members.join(",")))
        .expect_err("an object is no array");
    assert!(
        error.to_string().contains("problems are not listed"),
        "{}",
        &error.to_string()[..2_000.min(error.to_string().len())]
    );
    // A keyword that reads the whole value (`uniqueItems` hashes every item) costs the value's
    // size per application: 3,600 of them on 120,000 items, 400 million steps, refused
    // unchecked.
    let to_u = vec![r##"{"$ref":"#/$defs/u"}"##; 60].join(",");
    let to_v = vec![r##"{"$ref":"#/$defs/v"}"##; 60].join(",");
    let plugin = load_input(&format!(
        r##"{{"type":"object","properties":{{"a":{{"allOf":[{to_u}]}}}},"$defs":{{"u":{{"allOf":[{to_v}]}},"v":{{"uniqueItems":true}}}}}}"##
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let numbers: Vec<String> = (0..120_000).map(|i| i.to_string()).collect();
    let error = plugin
        .check_input("t", &format!(r#"{{"a":[{}]}}"#, numbers.join(",")))
        .expect_err("too much work");
    assert!(
        error.to_string().contains("too large for its input schema"),
        "{error}"
    );
    assert!(plugin.check_input("t", r#"{"a":[1,2,3]}"#).is_ok());
    // `required` looks each name up: 4,000 names on a 50,000-member object, found by an index
    // (a scan per name took 200 million steps per check).
    let names: Vec<String> = (0..4_000).map(|i| format!(r#""k{i}""#)).collect();
    let plugin = load_input(&format!(
        r#"{{"type":"object","properties":{{"a":{{"required":[{}]}}}}}}"#,
        names.join(",")
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let members: Vec<String> = (0..50_000).rev().map(|i| format!(r#""k{i}":1"#)).collect();
    assert!(
        plugin
            .check_input("t", &format!(r#"{{"a":{{{}}}}}"#, members.join(",")))
            .is_ok()
    );
    let error = plugin
        .check_input("t", r#"{"a":{"k0":1}}"#)
        .expect_err("names missing");
    assert!(
        error.to_string().contains("\"k1\" is a required property"),
        "{error}"
    );
}

#[test]
fn enum_const_and_unique_items_compare_without_copying() {
    // 8,000 entries, each compared with a 50,000-member object: each comparison used to copy
    // the whole object (minutes); now it stops at the first difference.
    let entries = vec!["{}"; 8_000].join(",");
    let plugin = load_input(&format!(
        r#"{{"type":"object","properties":{{"a":{{"enum":[{entries}]}},"u":{{"uniqueItems":true}}}}}}"#
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let members: Vec<String> = (0..50_000).map(|i| format!(r#""k{i}":{i}"#)).collect();
    let big = format!("{{{}}}", members.join(","));
    let error = plugin
        .check_input("t", &format!(r#"{{"a":{big}}}"#))
        .expect_err("not one of the entries");
    assert!(
        error
            .to_string()
            .contains("does not match its input schema"),
        "{error}"
    );
    assert!(plugin.check_input("t", r#"{"a":{}}"#).is_ok());
    // `uniqueItems` as JSON Schema compares: 1 and 1.0 are one number, member order does
    // not matter; two copies of a large object are found without a scan per member.
    for (items, unique) in [
        ("[1, 1.0]", false),
        (r#"[{"x":1,"y":2}, {"y":2,"x":1}]"#, false),
        ("[9007199254740993, 9007199254740992]", true),
        (&format!("[{big}, {big}]"), false),
        (
            &format!(
                "[{}]",
                (0..40).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
            ),
            true,
        ),
        (
            &format!(
                "[{}, 3]",
                (0..40).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
            ),
            false,
        ),
    ] {
        let result = plugin.check_input("t", &format!(r#"{{"u":{items}}}"#));
        assert_eq!(
            result.is_ok(),
            unique,
            "{}: {result:?}",
            &items[..items.len().min(80)]
        );
    }
}

#[test]
fn a_regex_format_takes_short_texts_only() {
    // Drafts 4 to 7 assert `format`; jsonschema's check of a regular expression's text takes
    // time quadratic in it.
    let plugin = load_input(
        r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"r":{"format":"regex"}}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(plugin.check_input("t", r#"{"r":"^a+b$"}"#).is_ok());
    assert!(plugin.check_input("t", r#"{"r":"(unclosed"}"#).is_err());
    // A valid expression over 1 KiB is not taken (the old check took any length).
    let long = format!(r#"{{"r":"{}"}}"#, "a".repeat(2_000));
    assert!(plugin.check_input("t", &long).is_err());
    let short = format!(r#"{{"r":"{}"}}"#, "a".repeat(1_000));
    assert!(plugin.check_input("t", &short).is_ok());
}

#[test]
fn decoded_texts_and_member_names_count_their_size() {
    // Drafts 6 and 7 assert `contentMediaType`: each application parses the text as JSON.
    // 4,200 applications to a 1 MiB text would parse four gigabytes: refused unchecked.
    let to_m = vec![r##"{"$ref":"#/$defs/m"}"##; 60].join(",");
    let to_j = vec![r##"{"$ref":"#/$defs/j"}"##; 70].join(",");
    let plugin = load_input(&format!(
        r##"{{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{{"s":{{"allOf":[{to_m}]}}}},"$defs":{{"m":{{"allOf":[{to_j}]}},"j":{{"contentMediaType":"application/json"}}}}}}"##
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(plugin.check_input("t", r#"{"s":"[0,1]"}"#).is_ok());
    let text = format!("[{}0]", "0,".repeat(500_000));
    let error = plugin
        .check_input("t", &serde_json::json!({ "s": text }).to_string())
        .expect_err("too much work");
    assert!(
        error.to_string().contains("too large for its input schema"),
        "{error}"
    );
    // `propertyNames` checks each member's name: a 1 MiB name matched 4,200 times, refused
    // unchecked; short names are checked.
    let to_p = vec![r##"{"$ref":"#/$defs/p"}"##; 70].join(",");
    let plugin = load_input(&format!(
        r##"{{"type":"object","properties":{{"o":{{"propertyNames":{{"allOf":[{to_m}]}}}}}},"$defs":{{"m":{{"allOf":[{to_p}]}},"p":{{"pattern":"^(?:a1)*$"}}}}}}"##
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(plugin.check_input("t", r#"{"o":{"a1a1":0}}"#).is_ok());
    assert!(plugin.check_input("t", r#"{"o":{"b":0}}"#).is_err());
    let name = "a1".repeat(500_000);
    let error = plugin
        .check_input("t", &format!(r#"{{"o":{{"{name}":0}}}}"#))
        .expect_err("too much work");
    assert!(
        error.to_string().contains("too large for its input schema"),
        "{error}"
    );
}
