use serde_json::Map;

use super::*;

fn definition(name: &str, input_schema: Value) -> LlmToolDefinition {
    LlmToolDefinition {
        name: name.into(),
        description: format!("The {name} tool"),
        input_schema,
        ..Default::default()
    }
}

fn definitions() -> Vec<LlmToolDefinition> {
    vec![LlmToolDefinition {
        name: "greet".into(),
        description: "Greets".into(),
        input_schema: json!({"$schema": "x", "type": "object",
            "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        ..Default::default()
    }]
}

/// Gemini's parameters for one tool with `schema`.
fn gemini(schema: Value) -> Result<Value, ProviderError> {
    let json = provider_json(&[definition("t", schema)], ProviderFormat::Gemini)?;
    Ok(json["functionDeclarations"][0]["parameters"].clone())
}

/// OpenAI's strict parameters for one tool with `schema`.
fn strict(schema: Value) -> Result<Value, ProviderError> {
    let json = provider_json_with(
        &[definition("t", schema)],
        ProviderFormat::OpenAi,
        &ProviderOptions::default().strict(true),
    )?;
    assert_eq!(json[0]["function"]["strict"], true);
    Ok(json[0]["function"]["parameters"].clone())
}

fn ok(result: Result<Value, ProviderError>) -> Value {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn err(result: Result<Value, ProviderError>) -> ProviderError {
    match result {
        Ok(value) => panic!("expected an error, got {value}"),
        Err(e) => e,
    }
}

#[test]
fn shapes_follow_each_provider() {
    let defs = definitions();
    let parameters = json!({"type": "object", "properties": {"name": {"type": "string"}},
        "required": ["name"]});
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::OpenAi)),
        json!([{"type": "function", "function": {"name": "greet", "description": "Greets",
            "parameters": parameters}}])
    );
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::Anthropic)),
        json!([{"name": "greet", "description": "Greets", "input_schema": parameters}])
    );
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::Gemini))["functionDeclarations"][0]["parameters"],
        parameters
    );
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::Mcp))["tools"][0]["inputSchema"],
        defs[0].input_schema
    );
    assert!("OpenAI".parse::<ProviderFormat>().is_ok());
    assert!("claude".parse::<ProviderFormat>().is_err());
    for format in ["openai", "anthropic", "gemini", "mcp"] {
        let parsed: ProviderFormat = format.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.to_string(), format);
    }
}

#[test]
fn anthropic_and_mcp_keep_the_full_schema() {
    let schema = json!({"$schema": "s", "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": ["string", "null"]}},
        "$defs": {"A": {"type": "object", "additionalProperties": true}}});
    let defs = [definition("t", schema.clone())];
    let mut without = schema.clone();
    without.as_object_mut().map(|o| o.remove("$schema"));
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::Anthropic))[0]["input_schema"],
        without
    );
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::OpenAi))[0]["function"]["parameters"],
        without
    );
    assert_eq!(
        ok(provider_json(&defs, ProviderFormat::Mcp))["tools"][0]["inputSchema"],
        schema
    );
}

#[test]
fn gemini_inlines_references() {
    let parameters = ok(gemini(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "style": {"$ref": "#/$defs/Style", "description": "How"},
            "list": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
        },
        "required": ["style"],
        "$defs": {
            "Style": {"type": "object", "description": "A style",
                "properties": {"item": {"$ref": "#/$defs/Item"}},
                "additionalProperties": false},
            "Item": {"type": "string", "title": "Item"},
        },
    })));
    assert_eq!(
        parameters,
        json!({"type": "object", "required": ["style"], "properties": {
            "style": {"type": "object", "description": "How",
                "properties": {"item": {"type": "string", "title": "Item"}}},
            "list": {"type": "array", "items": {"type": "string", "title": "Item"}},
        }})
    );
    // Draft-07 `definitions`, and references to references.
    let parameters = ok(gemini(json!({
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/A"}},
        "definitions": {"A": {"$ref": "#/definitions/B"}, "B": {"type": "integer"}},
    })));
    assert_eq!(
        parameters,
        json!({"type": "object", "properties": {"a": {"type": "integer"}}})
    );
}

#[test]
fn gemini_turns_null_types_into_nullable() {
    let parameters = ok(gemini(json!({"type": "object", "properties": {
        "limit": {"type": ["integer", "null"], "format": "uint", "minimum": 0},
        "prefix": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "P"},
        "inner": {"anyOf": [{"$ref": "#/$defs/In"}, {"type": "null"}]},
        "mixed": {"type": ["string", "integer"], "maxLength": 3, "maximum": 9},
    }, "$defs": {"In": {"type": "object", "properties": {"x": {"type": "boolean"}}}}})));
    assert_eq!(
        parameters["properties"],
        json!({
            "limit": {"type": "integer", "minimum": 0, "nullable": true},
            "prefix": {"type": "string", "description": "P", "nullable": true},
            "inner": {"type": "object", "properties": {"x": {"type": "boolean"}},
                "nullable": true},
            "mixed": {"anyOf": [{"type": "string", "maxLength": 3},
                {"type": "integer", "maximum": 9}]},
        })
    );
}

#[test]
fn gemini_lowers_constants_unions_and_formats() {
    let parameters = ok(gemini(json!({"type": "object", "properties": {
        "case": {"oneOf": [
            {"const": "upper", "type": "string", "description": "UP"},
            {"const": "lower", "type": "string", "description": "low"},
        ]},
        "level": {"type": "integer", "enum": [1, 2], "format": "int32"},
        "x": {"type": "number", "format": "double", "exclusiveMinimum": 0.5},
        "n": {"type": "integer", "format": "uint64", "exclusiveMaximum": 10},
        "when": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email", "uniqueItems": true},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "minItems": 2, "maxItems": 2},
        "both": {"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]},
    }, "additionalProperties": false, "$defs": {
        "A": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        "B": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]},
    }})));
    assert!(parameters.get("additionalProperties").is_none());
    let p = &parameters["properties"];
    assert_eq!(
        p["case"],
        json!({"anyOf": [
            {"type": "string", "enum": ["upper"], "description": "UP"},
            {"type": "string", "enum": ["lower"], "description": "low"},
        ]})
    );
    assert_eq!(
        p["level"],
        json!({"type": "integer", "enum": ["1", "2"], "format": "enum"})
    );
    assert_eq!(
        p["x"],
        json!({"type": "number", "format": "double", "minimum": 0.5})
    );
    assert_eq!(p["n"], json!({"type": "integer", "maximum": 9}));
    assert_eq!(p["when"], json!({"type": "string", "format": "date-time"}));
    assert_eq!(p["mail"], json!({"type": "string"}));
    assert_eq!(
        p["pair"],
        json!({"type": "array", "minItems": 2, "maxItems": 2,
            "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}})
    );
    assert_eq!(
        p["both"],
        json!({"type": "object", "required": ["a", "b"],
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}}})
    );
}

#[test]
fn gemini_declares_no_parameters_for_a_tool_without_any() {
    let json = ok(provider_json(
        &[definition(
            "peek",
            json!({"$schema": "s", "title": "PeekArgs", "type": "object"}),
        )],
        ProviderFormat::Gemini,
    ));
    assert_eq!(
        json,
        json!({"functionDeclarations": [{"name": "peek", "description": "The peek tool"}]})
    );
}

#[test]
fn gemini_refuses_a_recursive_type() {
    let error = err(gemini(json!({"type": "object", "properties": {
        "tree": {"$ref": "#/$defs/Node"},
    }, "$defs": {"Node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
    }}}})));
    assert_eq!(error.tool(), Some("t"));
    assert_eq!(
        error.pointer(),
        Some("/$defs/Node/properties/children/items/$ref")
    );
    let message = error.to_string();
    assert!(
        message.contains("tool 't'")
            && message.contains("recursive")
            && message.contains("#/$defs/Node"),
        "{message}"
    );
    assert!(matches!(error, ProviderError::Recursive { .. }));
    // The root referring to itself, and through `allOf`.
    let error = err(gemini(json!({"type": "object", "properties": {
        "again": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}})));
    assert!(matches!(error, ProviderError::Recursive { .. }), "{error}");
    let error = err(gemini(
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
        "$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}}}),
    ));
    assert!(matches!(error, ProviderError::Recursive { .. }), "{error}");
}

#[test]
fn strict_requires_every_property_and_keeps_nullable_only_what_accepts_null() {
    let parameters = ok(strict(json!({
        "$schema": "s", "title": "Args", "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": ["integer", "null"], "format": "uint", "minimum": 0},
            "flag": {"type": "boolean", "default": false},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "one": {"const": "x", "type": "string"},
            "words": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
        },
        "required": ["query", "flag"],
    })));
    assert_eq!(
        parameters,
        json!({"title": "Args", "type": "object", "additionalProperties": false,
        "required": ["flag", "limit", "mode", "one", "query", "words"],
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": ["integer", "null"], "minimum": 0},
            // Optional without accepting `null`: required, not made nullable (the tool's
            // own schema would refuse `null`).
            "flag": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "one": {"type": "string", "const": "x"},
            "words": {"type": "array", "items": {"type": "string"}},
        }})
    );
}

#[test]
fn strict_closes_nested_objects_and_keeps_references() {
    let parameters = ok(strict(json!({
        "type": "object",
        "properties": {
            "style": {"$ref": "#/$defs/Style", "description": "How"},
            "maybe": {"anyOf": [{"$ref": "#/$defs/Style"}, {"type": "null"}]},
            "tree": {"$ref": "#/$defs/Node"},
            "case": {"oneOf": [{"const": "up", "type": "string"}, {"const": "down", "type": "string"}]},
        },
        "required": ["style", "maybe", "tree", "case"],
        "$defs": {
            "Style": {"type": "object", "properties": {"sep": {"type": "string"},
                "upper": {"type": "boolean", "default": false}}, "required": ["sep"]},
            "Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "required": ["children"]},
            "Unused": {"type": "object", "additionalProperties": true},
        },
    })));
    let style = json!({"type": "object", "additionalProperties": false,
        "required": ["sep", "upper"], "properties": {"sep": {"type": "string"},
        "upper": {"type": "boolean"}}});
    let mut described = style.clone();
    described["description"] = "How".into();
    assert_eq!(parameters["properties"]["style"], described);
    assert_eq!(
        parameters["properties"]["maybe"],
        json!({"anyOf": [{"$ref": "#/$defs/Style"}, {"type": "null"}]})
    );
    assert_eq!(
        parameters["properties"]["tree"],
        json!({"$ref": "#/$defs/Node"})
    );
    assert_eq!(
        parameters["properties"]["case"],
        json!({"anyOf": [{"const": "up", "type": "string"}, {"const": "down", "type": "string"}]})
    );
    assert_eq!(
        parameters["$defs"],
        json!({"Style": style, "Node": {"type": "object", "additionalProperties": false,
            "required": ["children"], "properties": {"children": {"type": "array",
            "items": {"$ref": "#/$defs/Node"}}}}}),
        "only the definitions still referred to, each strict"
    );
}

#[test]
fn strict_gives_a_tool_without_arguments_an_empty_closed_object() {
    assert_eq!(
        ok(strict(json!({"title": "PeekArgs", "type": "object"}))),
        json!({"title": "PeekArgs", "type": "object", "properties": {}, "required": [],
            "additionalProperties": false})
    );
}

#[test]
fn strict_refuses_free_form_values_with_their_pointer() {
    let cases = [
        (
            json!({"type": "object", "properties": {"meta": {"type": "object",
                "additionalProperties": {"type": "string"}}}}),
            "/properties/meta/additionalProperties",
            "keys",
        ),
        (
            json!({"type": "object", "properties": {"any": true}}),
            "/properties/any",
            "any JSON",
        ),
        (
            json!({"type": "object", "properties": {"any": {"description": "x"}}}),
            "/properties/any",
            "any JSON",
        ),
        (
            json!({"type": "object", "properties": {"list": {"type": "array"}}}),
            "/properties/list",
            "items",
        ),
        (
            json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/V"}},
                "$defs": {"V": {}}}),
            "/$defs/V",
            "any JSON",
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer",
                "not": {"const": 3}}}}),
            "/properties/n/not",
            "`not`",
        ),
        (
            json!({"type": "object", "additionalProperties": true}),
            "/additionalProperties",
            "keys",
        ),
        (
            json!({"anyOf": [{"type": "object"}, {"type": "object"}]}),
            "",
            "root",
        ),
    ];
    for (schema, pointer, why) in cases {
        let error = err(strict(schema.clone()));
        assert_eq!(error.tool(), Some("t"), "{schema}");
        assert_eq!(error.pointer(), Some(pointer), "{schema}: {error}");
        let message = error.to_string();
        assert!(
            message.contains("tool 't'")
                && message.contains("strict mode")
                && message.contains(why),
            "{message}"
        );
    }
}

#[test]
fn strict_is_for_openai_only() {
    for format in [
        ProviderFormat::Anthropic,
        ProviderFormat::Gemini,
        ProviderFormat::Mcp,
    ] {
        let error = err(provider_json_with(
            &definitions(),
            format,
            &ProviderOptions::default().strict(true),
        ));
        assert_eq!(error, ProviderError::StrictNeedsOpenAi { format });
        assert_eq!(error.tool(), None);
        assert!(error.to_string().contains("openai"), "{error}");
    }
    let json = ok(provider_json_with(
        &definitions(),
        ProviderFormat::OpenAi,
        &ProviderOptions::default(),
    ));
    assert!(json[0]["function"].get("strict").is_none());
}

#[test]
fn inlining_is_bounded() {
    // Each definition refers twice to the next: 2^40 nodes if inlined naively.
    let mut defs = Map::new();
    for i in 0..40 {
        let next = json!({"$ref": format!("#/$defs/D{}", i + 1)});
        defs.insert(
            format!("D{i}"),
            json!({"type": "object", "properties": {"a": next, "b": next}}),
        );
    }
    defs.insert("D40".into(), json!({"type": "string"}));
    let schema = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}},
        "$defs": defs});
    let error = err(gemini(schema));
    assert!(error.to_string().contains("larger than"), "{error}");
}

/// A schema of about 64 KiB whose definitions each use the next fourteen times: 14⁴ uses of
/// `leaf`, under the node bound, each copying what `leaf` holds.
fn fanned_out(leaf: Value, beside: Option<(&str, Value)>) -> Value {
    let mut defs = Map::new();
    for level in 0..4 {
        let next = if level == 3 {
            "E".to_owned()
        } else {
            format!("D{}", level + 1)
        };
        let mut reference = json!({"$ref": format!("#/$defs/{next}")});
        if let Some((key, value)) = &beside {
            reference[*key] = value.clone();
        }
        let properties: Map<String, Value> = (0..14)
            .map(|i| (format!("p{i}"), reference.clone()))
            .collect();
        defs.insert(
            format!("D{level}"),
            json!({"type": "object", "properties": properties, "required": ["p0"],
                "additionalProperties": false}),
        );
    }
    defs.insert("E".into(), leaf);
    json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}, "required": ["x"],
        "additionalProperties": false, "$defs": defs})
}

#[test]
fn what_inlining_copies_is_bounded_in_bytes() {
    let described = json!({"type": "string", "description": "d".repeat(60_000)});
    let listed = json!({"type": "string", "enum": vec!["v"; 20_000]});
    // Copied by merging, though Gemini drops it from what it writes.
    let negated = json!({"type": "string", "not": {"description": "d".repeat(30_000)}});
    for (leaf, beside) in [
        (described.clone(), None),
        (listed, None),
        (negated, None),
        (described, Some(("title", json!("t")))),
    ] {
        let schema = fanned_out(leaf, beside.clone());
        assert!(schema.to_string().len() < 128 << 10);
        let error = err(gemini(schema.clone()));
        assert!(error.to_string().contains("MiB"), "{error}");
        match (strict(schema), beside) {
            // A reference beside another keyword is inlined: copied at each use.
            (lowered, Some(_)) => {
                let error = err(lowered);
                assert!(error.to_string().contains("MiB"), "{error}");
            }
            // A bare reference to `$defs` stays one: nothing is copied.
            (Ok(lowered), None) => assert!(lowered.to_string().len() < 1 << 20),
            (Err(_), None) => {}
        }
    }
    // `allOf` lists are joined when merged: 600 branches each bringing a copy of a 20 KB
    // schema into one (refused: a definition used twice in one `allOf`, or past the bytes).
    let mut branches = Vec::new();
    for _ in 0..600 {
        branches.push(json!({"$ref": "#/$defs/A"}));
        branches.push(json!({"$ref": "#/$defs/B"}));
    }
    let joined = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/M"}},
        "$defs": {"M": {"allOf": branches},
            "A": {"allOf": [{"description": "d".repeat(20_000)}]},
            "B": {"allOf": [{"title": "y"}]}}});
    let error = err(gemini(joined));
    assert!(
        ["MiB", "recursive"]
            .iter()
            .any(|why| error.to_string().contains(why)),
        "{error}"
    );
    // With a definition of its own for each of 400 branches (none twice), the bytes bound it:
    // each use of `M` copies every branch into one schema.
    let mut defs = Map::new();
    let mut branches = Vec::new();
    for i in 0..400 {
        defs.insert(
            format!("A{i}"),
            json!({"allOf": [{"description": "d".repeat(40)}]}),
        );
        branches.push(json!({"$ref": format!("#/$defs/A{i}")}));
    }
    defs.insert("M".into(), json!({"allOf": branches}));
    let mut uses = Map::new();
    for i in 0..300 {
        uses.insert(format!("x{i}"), json!({"$ref": "#/$defs/M"}));
    }
    let joined = json!({"type": "object", "properties": uses, "$defs": defs});
    assert!(joined.to_string().len() < llm_worker_rules::tool::MAX_SCHEMA_BYTES);
    let error = err(gemini(joined));
    assert!(error.to_string().contains("MiB"), "{error}");
    // The same shape with a short leaf lowers.
    let mut small = fanned_out(json!({"type": "string", "description": "short"}), None);
    small["$defs"]["D0"]["properties"] = json!({"p0": {"$ref": "#/$defs/D1"}});
    ok(gemini(small));
}

/// A `$ref` inside a subschema with an `$id` of its own resolves against that `$id` (the host's
/// check follows it), while inlining reads every reference against the root: a definition of
/// the same name at the root could be shown instead. Such a reference is refused, naming it.
#[test]
fn a_reference_under_a_nested_id_is_not_inlined_against_the_root() {
    let schema = json!({
        "type": "object",
        "properties": {"mode": {
            "$id": "https://example.com/mode",
            "$ref": "#/$defs/C",
            "$defs": {"C": {"type": "string"}},
        }},
        "$defs": {"C": {"enum": ["shown but not enforced"]}},
    });
    // The same through an `allOf` wrapper, and a reference from the root into a resource
    // with its own `$id` (whose own references resolve against it).
    let wrapped = json!({
        "type": "object",
        "properties": {"mode": {
            "$id": "https://example.com/mode",
            "allOf": [{"$ref": "#/$defs/C"}],
            "$defs": {"C": {"type": "string"}},
        }},
        "$defs": {"C": {"enum": ["shown but not enforced"]}},
    });
    let into = json!({
        "type": "object",
        "properties": {"mode": {"$ref": "#/$defs/M/$defs/D"}},
        "$defs": {
            "M": {"$id": "https://example.com/m", "$defs": {
                "D": {"$ref": "#/$defs/C"}, "C": {"type": "string"}}},
            "C": {"enum": ["shown but not enforced"]},
        },
    });
    for lowered in [
        gemini(schema.clone()),
        strict(schema),
        gemini(wrapped.clone()),
        strict(wrapped),
        gemini(into.clone()),
        strict(into),
    ] {
        let error = err(lowered);
        assert!(error.to_string().contains("`$id` of its own"), "{error}");
    }
    // An `$id` at the root changes nothing.
    let rooted = json!({"$id": "https://example.com/args", "type": "object",
        "properties": {"mode": {"$ref": "#/$defs/C"}}, "$defs": {"C": {"type": "string"}}});
    assert!(gemini(rooted).is_ok());
}

/// Branches of an `allOf` each constraining one property merge into one `allOf` of their
/// constraints: nested one inside another, 2,200 of them (a 64 KiB schema) made a value as
/// deep, which cloning and dropping walk recursively, past a small thread's stack.
#[test]
fn many_branches_constraining_one_property_do_not_nest() {
    let branches: Vec<Value> = (0..2_200)
        .map(|n| json!({"properties": {"p": {"maxLength": n}}}))
        .collect();
    let schema = json!({"type": "object", "allOf": branches});
    // On a thread with a small stack, in a debug build: deep recursion would overflow it.
    let lowered = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || gemini(schema).map(|value| value.to_string().len()))
        .expect("a thread")
        .join()
        .expect("no overflow");
    // Lowered, or refused for what Gemini cannot say (the lengths disagree): no crash.
    match lowered {
        Ok(_) => {}
        Err(error) => assert!(error.to_string().contains("disagree"), "{error}"),
    }
}

/// The attack: a plugin lists many tools, each with a small schema whose references fan out
/// when inlined to just under the bound of one tool. Each tool passed its own bound, so the
/// export of all of them (Gemini's, or OpenAI's strict one, which inline) took the bound as
/// many times as there were tools: gigabytes for a plugin's 256. The tools of one export now
/// share a bound too. (OpenAI's strict form keeps such references as references.)
#[test]
fn the_tools_of_one_export_share_a_bound_on_what_inlining_makes() {
    // d0 → two uses of d1 → … → d14, a string: 2^15 - 1 nodes once inlined.
    let mut defs = Map::new();
    for level in 0..14 {
        let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
        defs.insert(
            format!("d{level}"),
            json!({"type": "object", "properties": {"a": next.clone(), "b": next}}),
        );
    }
    defs.insert("d14".into(), json!({"type": "string"}));
    let schema = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}},
        "$defs": defs});
    let tools = |count: usize| -> Vec<LlmToolDefinition> {
        (0..count)
            .map(|n| definition(&format!("t{n}"), schema.clone()))
            .collect()
    };
    provider_json(&tools(1), ProviderFormat::Gemini).expect("one tool is within its bound");
    let error = provider_json(&tools(8), ProviderFormat::Gemini)
        .expect_err("eight together are not")
        .to_string();
    assert!(error.contains("exported together"), "{error}");
}
