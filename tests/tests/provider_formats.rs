//! Every tool of every example plugin in every provider format, each output checked by a
//! validator written from the provider's documentation (not by the code that writes it):
//!
//! - Gemini: Google's `Schema` object (a subset of OpenAPI 3.0), mirrored by a serde struct that
//!   refuses unknown fields, so a keyword outside the subset anywhere fails to parse.
//! - OpenAI strict mode: the rules of OpenAI's Structured Outputs ("Supported schemas"): the
//!   function has `strict: true`, the root is an object (not `anyOf`), every object has
//!   `additionalProperties: false` and lists all its properties in `required`, and only the
//!   supported keywords appear.
//! - Anthropic and MCP: the schema the tool declares, in full.

use std::collections::{BTreeMap, BTreeSet};

use llm_worker::LlmToolDefinition;
use llm_worker::provider::{
    ProviderError, ProviderFormat, ProviderOptions, provider_json, provider_json_with,
};
use llm_worker_tests::{EXAMPLE_PLUGINS, EXAMPLE_TOOLS, plugin};
use serde::Deserialize;
use serde_json::{Value, json};

/// Every tool of the example plugins, sorted by name (as `llm-worker schema` sorts them).
fn definitions() -> Vec<LlmToolDefinition> {
    let mut definitions: Vec<LlmToolDefinition> = EXAMPLE_PLUGINS
        .iter()
        .flat_map(|name| {
            plugin(name)
                .tools()
                .iter()
                .map(LlmToolDefinition::from)
                .collect::<Vec<_>>()
        })
        .collect();
    definitions.sort_by(|a, b| a.name.cmp(&b.name));
    let names: BTreeSet<&str> = definitions.iter().map(|d| d.name.as_str()).collect();
    for expected in EXAMPLE_TOOLS {
        assert!(names.contains(expected), "no tool {expected} in {names:?}");
    }
    definitions
}

fn ok(result: Result<Value, ProviderError>) -> Value {
    result.unwrap_or_else(|e| panic!("{e}"))
}

// ---- Gemini ----------------------------------------------------------------------------------

/// Gemini's `FunctionDeclaration`, the fields this host writes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct GeminiDeclaration {
    name: String,
    description: String,
    parameters: Option<GeminiSchema>,
}

/// Gemini's `Schema` object: exactly its fields, each with its JSON type.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct GeminiSchema {
    #[serde(rename = "type")]
    kind: Option<String>,
    format: Option<String>,
    title: Option<String>,
    description: Option<String>,
    nullable: Option<bool>,
    #[serde(rename = "enum")]
    values: Option<Vec<String>>,
    max_items: Option<u64>,
    min_items: Option<u64>,
    properties: Option<BTreeMap<String, GeminiSchema>>,
    required: Option<Vec<String>>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<String>,
    example: Option<Value>,
    any_of: Option<Vec<GeminiSchema>>,
    property_ordering: Option<Vec<String>>,
    default: Option<Value>,
    items: Option<Box<GeminiSchema>>,
    minimum: Option<f64>,
    maximum: Option<f64>,
}

/// What the fields of one schema say beyond their JSON types: known types and formats, and
/// keywords only where their type has them. `at` names the place, for messages.
fn check_gemini(schema: &GeminiSchema, at: &str) {
    let kind = schema.kind.as_deref().map(str::to_ascii_lowercase);
    if let Some(kind) = &kind {
        assert!(
            [
                "string", "number", "integer", "boolean", "array", "object", "null"
            ]
            .contains(&kind.as_str()),
            "{at}: unknown type {kind}"
        );
    } else {
        assert!(
            schema.any_of.is_some(),
            "{at}: neither a type nor anyOf (Gemini needs one)"
        );
    }
    if let Some(format) = &schema.format {
        let allowed: &[&str] = match kind.as_deref() {
            Some("number") => &["float", "double", "enum"],
            Some("integer") => &["int32", "int64", "enum"],
            Some("string") => &["enum", "date-time"],
            _ => &[],
        };
        assert!(
            allowed.contains(&format.as_str()),
            "{at}: format {format} for type {kind:?}"
        );
    }
    if schema.values.is_some() {
        assert!(
            matches!(kind.as_deref(), Some("string" | "integer" | "number")),
            "{at}: enum on type {kind:?}"
        );
    }
    if schema.items.is_some() {
        assert_eq!(kind.as_deref(), Some("array"), "{at}: items");
    }
    if let Some(properties) = &schema.properties {
        assert_eq!(kind.as_deref(), Some("object"), "{at}: properties");
        for name in schema.required.iter().flatten() {
            assert!(
                properties.contains_key(name),
                "{at}: required {name} is no property"
            );
        }
        for (name, property) in properties {
            check_gemini(property, &format!("{at}/properties/{name}"));
        }
    }
    if let Some(items) = &schema.items {
        check_gemini(items, &format!("{at}/items"));
    }
    for (i, branch) in schema.any_of.iter().flatten().enumerate() {
        check_gemini(branch, &format!("{at}/anyOf/{i}"));
    }
}

#[test]
fn gemini_declarations_use_only_gemini_schema_fields() {
    let definitions = definitions();
    let json = ok(provider_json(&definitions, ProviderFormat::Gemini));
    let top = json.as_object().expect("an object");
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        ["functionDeclarations"],
        "{json}"
    );
    let declarations = json["functionDeclarations"]
        .as_array()
        .expect("declarations");
    assert_eq!(declarations.len(), definitions.len());
    let text = json.to_string();
    assert!(
        !text.contains("\"$ref\"") && !text.contains("\"$defs\""),
        "{text}"
    );
    for (declaration, definition) in declarations.iter().zip(&definitions) {
        let parsed: GeminiDeclaration = serde_json::from_value(declaration.clone())
            .unwrap_or_else(|e| panic!("{}: {e}\n{declaration:#}", definition.name));
        assert_eq!(parsed.name, definition.name);
        assert_eq!(parsed.description, definition.description);
        let declared: BTreeSet<&String> = definition.input_schema["properties"]
            .as_object()
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        match &parsed.parameters {
            None => assert!(
                declared.is_empty(),
                "{}: parameters left out, but it has {declared:?}",
                definition.name
            ),
            Some(parameters) => {
                assert_eq!(
                    parameters.kind.as_deref(),
                    Some("object"),
                    "{}",
                    definition.name
                );
                let properties = parameters.properties.as_ref().expect("properties");
                assert_eq!(
                    properties.keys().collect::<BTreeSet<_>>(),
                    declared,
                    "{}: the same parameters",
                    definition.name
                );
                let required: BTreeSet<&str> = definition.input_schema["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let lowered: BTreeSet<&str> = parameters
                    .required
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .collect();
                assert_eq!(
                    lowered, required,
                    "{}: the same required parameters",
                    definition.name
                );
                check_gemini(parameters, &definition.name);
            }
        }
    }
}

#[test]
fn gemini_keeps_what_the_schemas_mean() {
    let json = ok(provider_json(&definitions(), ProviderFormat::Gemini));
    let declaration = |name: &str| -> Value {
        json["functionDeclarations"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no {name}"))
    };
    // Option<usize>: nullable, not a type list; the unsigned format dropped, the bound kept.
    let limit = &declaration("search")["parameters"]["properties"]["limit"];
    assert_eq!(limit["type"], "integer", "{limit}");
    assert_eq!(limit["nullable"], true, "{limit}");
    assert_eq!(limit["minimum"], 0, "{limit}");
    assert!(limit.get("format").is_none(), "{limit}");
    // A referenced struct, inlined, with the description at the reference.
    let join = declaration("join");
    let style = &join["parameters"]["properties"]["style"];
    assert_eq!(style["type"], "object", "{style}");
    assert_eq!(style["description"], "How to join them", "{style}");
    assert_eq!(
        style["properties"]["separator"]["type"], "string",
        "{style}"
    );
    assert_eq!(style["required"], json!(["separator"]), "{style}");
    assert_eq!(
        join["parameters"]["properties"]["prefix"],
        json!({"type": "string", "nullable": true,
            "description": "Text to put before the result, if any"})
    );
    // An enum of constants (oneOf of const): enum values, reached through the reference.
    let case = &declaration("convert_case")["parameters"]["properties"]["case"];
    let mut values: Vec<&Value> = match case.get("anyOf") {
        Some(branches) => branches
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|b| b["enum"].as_array().into_iter().flatten())
            .collect(),
        None => case["enum"].as_array().into_iter().flatten().collect(),
    };
    values.sort_by_key(|v| v.to_string());
    assert_eq!(values, [&json!("lower"), &json!("upper")], "{case}");
    // No parameters: none declared (Gemini refuses an object without properties).
    for name in ["count", "peek", "list_notes"] {
        assert!(declaration(name).get("parameters").is_none(), "{name}");
    }
}

// ---- OpenAI strict mode ----------------------------------------------------------------------

/// The keywords OpenAI's strict mode supports (types, structure, and the listed string, number
/// and array constraints), plus the annotations `title` and `description`.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "pattern",
    "format",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "maxItems",
];

const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

fn type_names(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(name) => vec![name.as_str()],
        Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn check_strict(schema: &Value, root: &Value, at: &str) {
    let object = schema
        .as_object()
        .unwrap_or_else(|| panic!("{at}: not a schema object: {schema}"));
    for key in object.keys() {
        assert!(
            STRICT_KEYWORDS.contains(&key.as_str()),
            "{at}: `{key}` is not supported in strict mode"
        );
    }
    if let Some(reference) = object.get("$ref") {
        let pointer = reference
            .as_str()
            .and_then(|r| r.strip_prefix('#'))
            .expect("a local reference");
        assert!(
            root.pointer(pointer).is_some(),
            "{at}: {reference} points to nothing"
        );
        return;
    }
    let types = type_names(schema);
    for kind in &types {
        assert!(
            [
                "string", "number", "integer", "boolean", "object", "array", "null"
            ]
            .contains(kind),
            "{at}: type {kind}"
        );
    }
    assert!(
        !types.is_empty()
            || object.contains_key("anyOf")
            || object.contains_key("enum")
            || object.contains_key("const"),
        "{at}: a value of any type"
    );
    if let Some(format) = object.get("format").and_then(Value::as_str) {
        assert!(STRICT_FORMATS.contains(&format), "{at}: format {format}");
    }
    if types.contains(&"object") {
        assert_eq!(
            object.get("additionalProperties"),
            Some(&Value::Bool(false)),
            "{at}: additionalProperties"
        );
        let properties = object
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("{at}: an object without properties"));
        let required: BTreeSet<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("{at}: no required"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            required,
            properties.keys().map(String::as_str).collect(),
            "{at}: every property required"
        );
        for (name, property) in properties {
            check_strict(property, root, &format!("{at}/properties/{name}"));
        }
    }
    if types.contains(&"array") {
        check_strict(
            object.get("items").unwrap_or_else(|| panic!("{at}: items")),
            root,
            &format!("{at}/items"),
        );
    }
    for (i, branch) in object
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        check_strict(branch, root, &format!("{at}/anyOf/{i}"));
    }
}

fn strict_json(definitions: &[LlmToolDefinition]) -> Value {
    ok(provider_json_with(
        definitions,
        ProviderFormat::OpenAi,
        &ProviderOptions::default().strict(true),
    ))
}

#[test]
fn openai_strict_functions_follow_strict_mode_rules() {
    let definitions = definitions();
    let json = strict_json(&definitions);
    let functions = json.as_array().expect("a list");
    assert_eq!(functions.len(), definitions.len());
    for (tool, definition) in functions.iter().zip(&definitions) {
        assert_eq!(tool["type"], "function");
        let function = tool["function"].as_object().expect("function");
        let keys: Vec<&str> = function.keys().map(String::as_str).collect();
        assert_eq!(keys, ["description", "name", "parameters", "strict"]);
        assert_eq!(function["name"], definition.name.as_str());
        assert_eq!(function["strict"], true, "{}", definition.name);
        let parameters = &function["parameters"];
        assert_eq!(parameters["type"], "object", "{}", definition.name);
        assert!(parameters.get("anyOf").is_none(), "{}", definition.name);
        check_strict(parameters, parameters, &definition.name);
        for container in ["$defs", "definitions"] {
            for (name, target) in parameters[container].as_object().into_iter().flatten() {
                check_strict(
                    target,
                    parameters,
                    &format!("{}/{container}/{name}", definition.name),
                );
            }
        }
        // Still a JSON Schema, with the same parameters.
        jsonschema::validator_for(parameters)
            .unwrap_or_else(|e| panic!("{}: {e}", definition.name));
        let declared: BTreeSet<&String> = definition.input_schema["properties"]
            .as_object()
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        let lowered: BTreeSet<&String> = parameters["properties"]
            .as_object()
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        assert_eq!(lowered, declared, "{}", definition.name);
    }
}

#[test]
fn openai_strict_arguments_name_every_parameter_and_are_valid_for_the_tool() {
    let json = strict_json(&definitions());
    let validator = |name: &str| {
        let parameters = json
            .as_array()
            .and_then(|f| f.iter().find(|f| f["function"]["name"] == name))
            .map(|f| f["function"]["parameters"].clone())
            .unwrap_or_else(|| panic!("no {name}"));
        jsonschema::validator_for(&parameters).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let search = validator("search");
    assert!(search.is_valid(&json!({"query": "wasi", "limit": 2})));
    assert!(search.is_valid(&json!({"query": "wasi", "limit": null})));
    assert!(
        !search.is_valid(&json!({"query": "wasi"})),
        "every property required"
    );
    assert!(
        !search.is_valid(&json!({"query": "wasi", "limit": 1, "more": 1})),
        "no other keys"
    );
    let join = validator("join");
    let style = json!({"separator": "-", "uppercase": false});
    let arguments = json!({"words": ["a"], "style": style, "prefix": null});
    assert!(join.is_valid(&arguments));
    // What strict mode accepts, the tool's own schema (which the host checks) accepts too:
    // an `Option` may be null, a field with a default may not.
    let own = definitions()
        .into_iter()
        .find(|d| d.name == "join")
        .map(|d| jsonschema::validator_for(&d.input_schema).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|| panic!("no join"));
    assert!(own.is_valid(&arguments));
    let null_default = json!({"words": ["a"], "style": {"separator": "-", "uppercase": null},
        "prefix": null});
    assert!(!own.is_valid(&null_default));
    assert!(
        !join.is_valid(&null_default),
        "a defaulted field is not made nullable"
    );
    assert!(
        !join.is_valid(&json!({"words": ["a"], "style": {"separator": "-"},
        "prefix": null}))
    );
    assert!(
        !join.is_valid(&json!({"words": ["a"], "style": {"separator": "-",
        "uppercase": true, "x": 1}, "prefix": null}))
    );
    let case = validator("convert_case");
    assert!(case.is_valid(&json!({"text": "a", "case": "upper"})));
    assert!(!case.is_valid(&json!({"text": "a", "case": "title"})));
    let peek = validator("peek");
    assert!(peek.is_valid(&json!({})));
    assert!(!peek.is_valid(&json!({"x": 1})));
}

#[test]
fn strict_is_an_openai_option_only() {
    let definitions = definitions();
    for format in [
        ProviderFormat::Anthropic,
        ProviderFormat::Gemini,
        ProviderFormat::Mcp,
    ] {
        let error = provider_json_with(
            &definitions,
            format,
            &ProviderOptions::default().strict(true),
        )
        .expect_err("strict is for openai");
        assert!(
            matches!(error, ProviderError::StrictNeedsOpenAi { .. }),
            "{error}"
        );
    }
}

// ---- Anthropic, MCP, OpenAI (not strict) -----------------------------------------------------

#[test]
fn anthropic_mcp_and_plain_openai_keep_the_full_schema() {
    let definitions = definitions();
    let anthropic = ok(provider_json(&definitions, ProviderFormat::Anthropic));
    let mcp = ok(provider_json(&definitions, ProviderFormat::Mcp));
    let openai = ok(provider_json(&definitions, ProviderFormat::OpenAi));
    for (i, definition) in definitions.iter().enumerate() {
        let mut without_dialect = definition.input_schema.clone();
        if let Some(object) = without_dialect.as_object_mut() {
            object.remove("$schema");
        }
        assert_eq!(anthropic[i]["name"], definition.name.as_str());
        assert_eq!(anthropic[i]["input_schema"], without_dialect);
        assert_eq!(mcp["tools"][i]["inputSchema"], definition.input_schema);
        assert_eq!(openai[i]["function"]["parameters"], without_dialect);
        assert!(openai[i]["function"].get("strict").is_none());
    }
    // The full schema still has what Gemini and strict mode rewrite.
    let join = definitions.iter().find(|d| d.name == "join").expect("join");
    assert!(
        join.input_schema.get("$defs").is_some(),
        "{}",
        join.input_schema
    );
}
