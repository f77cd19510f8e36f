//! Property tests of the host's input check: whatever JSON a model writes, the host's verdict
//! is `jsonschema`'s on a `serde_json::Value`, and an input with a repeated key never passes.

use std::sync::OnceLock;

use llm_worker::*;
use llm_worker_tests::wat::WatComponent;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Schemas that reach most validators: types, ranges, lengths, patterns, enums, nested
/// objects and arrays, `required`, `additionalProperties`, combinators and references.
fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object"}),
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": -5, "maximum": 100},
                "b": {"type": "string", "minLength": 1, "maxLength": 4, "pattern": "^[a-z]*$"},
                "c": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3, "uniqueItems": true},
                "d": {"enum": ["x", "y", 1, null]}
            },
            "required": ["a"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "n": {"anyOf": [{"type": "number", "multipleOf": 0.5}, {"type": "null"}]},
                "o": {"$ref": "#/$defs/inner"}
            },
            "patternProperties": {"^k": {"type": "string"}},
            "additionalProperties": {"type": ["integer", "object"]},
            "minProperties": 1,
            "$defs": {"inner": {"type": "object", "properties": {"z": {"const": true}}, "required": ["z"]}}
        }),
        json!({
            "type": "object",
            "oneOf": [
                {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                {"properties": {"kind": {"const": "b"}, "v": {"type": "number", "exclusiveMinimum": 0}}, "required": ["kind", "v"]}
            ],
            "not": {"required": ["forbidden"]}
        }),
    ]
}

/// One hand-written plugin offering a tool per schema (`s0`, `s1` …), loaded once.
fn plugin() -> &'static LoadedPlugin {
    static PLUGIN: OnceLock<LoadedPlugin> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        let texts: Vec<(String, String)> = schemas()
            .iter()
            .enumerate()
            .map(|(i, schema)| (format!("s{i}"), schema.to_string()))
            .collect();
        let tools: Vec<(&str, &str, &str)> = texts
            .iter()
            .map(|(name, schema)| (name.as_str(), "d", schema.as_str()))
            .collect();
        llm_worker_tests::host()
            .load_bytes("/plugins/fuzz.wasm", &WatComponent::new(&tools).build())
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("kind".to_owned()),
        Just("k1".to_owned()),
        Just("o".to_owned()),
        Just("z".to_owned()),
        "[a-z]{1,3}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-10i64..200).prop_map(Value::from),
        (-10.0f64..10.0).prop_map(|f| json!((f * 4.0).round() / 4.0)),
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("x"),
            Just("abcde"),
            Just("Ab"),
            Just("")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_host_agrees_with_jsonschema_on_values(
        members in prop::collection::btree_map("[a-z]{1,4}|a|b|kind|v|o|n", json_value(), 0..6),
        index in 0usize..4,
    ) {
        let input = Value::Object(members.into_iter().collect());
        let schema = &schemas()[index];
        let expected = jsonschema::is_valid(schema, &input);
        let verdict = plugin().check_input(&format!("s{index}"), &input.to_string());
        prop_assert_eq!(verdict.is_ok(), expected, "{} against {}: {:?}", input, schema, verdict);
    }

    #[test]
    fn a_repeated_key_never_passes(
        value in json_value(),
        first in json_value(),
        key in "[a-z]{1,3}",
        index in 0usize..4,
    ) {
        // The same key twice in one object, nested one level down to reach other paths.
        // The second spelled with escapes (the same name once unescaped), or in upper case.
        let escaped: String = key.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
        let other = if index % 2 == 0 { escaped } else { key.to_uppercase() };
        let repeated = format!(r#"{{"{key}":{first},"{other}":{value}}}"#);
        for input in [repeated.clone(), format!(r#"{{"o":{repeated}}}"#), format!(r#"{{"a":[{repeated}]}}"#)] {
            let verdict = plugin().check_input(&format!("s{index}"), &input);
            match verdict {
                Err(ToolError::InvalidArgument(message)) => {
                    prop_assert!(message.contains(&format!("{key:?}")), "{}", message);
                    prop_assert!(
                        message.contains("twice") || message.contains("only in case"),
                        "{}",
                        message
                    );
                }
                other => prop_assert!(false, "{} passed: {:?}", input, other),
            }
        }
    }

    #[test]
    fn text_is_refused_unless_it_is_a_json_object(text in texts()) {
        // `s0` takes any object: text is refused exactly when it is not one, saying why; an
        // object is refused only for a key given twice.
        let verdict = plugin().check_input("s0", &text);
        let refused = |verdict: &Result<(), ToolError>, why: &str| {
            matches!(verdict, Err(ToolError::InvalidArgument(message)) if message.contains(why))
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(_)) => prop_assert!(
                verdict.is_ok() || refused(&verdict, "give each key once"),
                "{:?}: {:?}",
                text,
                verdict
            ),
            Ok(_) => prop_assert!(
                refused(&verdict, "does not match its input schema"),
                "{:?}: {:?}",
                text,
                verdict
            ),
            Err(_) => prop_assert!(refused(&verdict, "not valid JSON"), "{:?}: {:?}", text, verdict),
        }
    }
}

/// Text of every kind a model might send: any text at all, a JSON object, a JSON object with
/// one character taken out or one of JSON's own put in (still JSON now and then, and often
/// not), and JSON that is not an object.
fn texts() -> impl Strategy<Value = String> {
    let object = prop::collection::btree_map("[a-z]{1,4}", json_value(), 0..4)
        .prop_map(|members| Value::Object(members.into_iter().collect()).to_string())
        .boxed();
    let cut = (object.clone(), any::<prop::sample::Index>()).prop_map(|(text, at)| {
        let mut chars: Vec<char> = text.chars().collect();
        chars.remove(at.index(chars.len()));
        chars.into_iter().collect::<String>()
    });
    let punctuation = prop::sample::select(vec!['{', '}', '[', ']', '"', ',', ':', ' ', '1']);
    let added = (object.clone(), any::<prop::sample::Index>(), punctuation).prop_map(
        |(text, at, extra)| {
            let mut chars: Vec<char> = text.chars().collect();
            chars.insert(at.index(chars.len() + 1), extra);
            chars.into_iter().collect::<String>()
        },
    );
    let other_json = json_value().prop_map(|value| value.to_string());
    prop_oneof![".{0,40}", object, cut, added, other_json]
}
