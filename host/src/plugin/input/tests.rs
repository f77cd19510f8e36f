//! Unit tests of parsing inputs, of their member names and of validating them.

use serde_json::json;

use super::keys::{KeyProblem, go_fold};
use super::*;

#[test]
fn strings_without_escapes_are_borrowed() {
    let text = r#"{"plain":"abc","escaped":"a\"b","list":[1,-2,3.5,true,null]}"#;
    let node = parse(text).expect("valid JSON");
    let InputNode::Object(members) = &node else {
        panic!("an object: {node:?}");
    };
    assert!(matches!(
        members[0].1,
        InputNode::String(Cow::Borrowed("abc"))
    ));
    assert!(matches!(&members[1].1, InputNode::String(Cow::Owned(s)) if s == "a\"b"));
    assert_eq!(
        node.to_json(),
        json!({"plain":"abc","escaped":"a\"b","list":[1,-2,3.5,true,null]})
    );
}

#[test]
fn key_problems_are_found_anywhere_with_their_path() {
    let problem = |text: &str| parse(text).expect("valid JSON").key_problem();
    let repeated = |path: &str, key: &str| Some((path.into(), KeyProblem::Repeated(key.into())));
    assert_eq!(problem(r#"{"a":1,"b":[{"c":2}]}"#), None);
    assert_eq!(
        problem(r#"{"mode":"read","mode":"delete"}"#),
        repeated("/", "mode")
    );
    // Escapes are compared after unescaping, as every parser reads them.
    assert_eq!(
        problem(r#"{"mode":"read","\u006d\u006fde":"delete"}"#),
        repeated("/", "mode")
    );
    assert_eq!(
        problem(r#"{"a":{"b":[0,{"x":1,"y":2,"x":3}]}}"#),
        repeated("/a/b/1", "x")
    );
    assert_eq!(
        problem(r#"[{"k/~":{"z":0,"z":0}}]"#),
        repeated("/0/k~1~0", "z")
    );
    // Many members: the hashed path, with the repeat far from the first.
    let members: Vec<String> = (0..40).map(|i| format!("\"m{i}\":{i}")).collect();
    let wide = format!("{{{},\"m3\":true}}", members.join(","));
    assert_eq!(problem(&wide), repeated("/", "m3"));
    let wide = format!("{{{},\"M3\":true}}", members.join(","));
    assert_eq!(
        problem(&wide),
        Some((
            "/".into(),
            KeyProblem::CaseVariants("m3".into(), "M3".into())
        ))
    );
    // The same name in different objects is no problem.
    assert_eq!(problem(r#"{"a":{"x":1},"b":{"x":1}}"#), None);
    // Names equal but for case, ASCII or not.
    assert_eq!(
        problem(r#"{"mode":"read","MODE":"delete"}"#),
        Some((
            "/".into(),
            KeyProblem::CaseVariants("mode".into(), "MODE".into())
        ))
    );
    assert_eq!(
        problem("{\"kind\":1,\"\u{212a}ind\":2}"),
        Some((
            "/".into(),
            KeyProblem::CaseVariants("kind".into(), "\u{212a}ind".into())
        ))
    );
    assert_eq!(
        problem("{\"mask\":1,\"ma\u{17f}k\":2}"),
        Some((
            "/".into(),
            KeyProblem::CaseVariants("mask".into(), "ma\u{17f}k".into())
        ))
    );
    // A NUL (or any control character) in a name.
    assert_eq!(
        problem(r#"{"mode\u0000":"delete","mode":"read"}"#),
        Some(("/".into(), KeyProblem::ControlCharacter("mode\0".into())))
    );
    let message = KeyProblem::Repeated("k".repeat(100)).to_string();
    assert!(message.len() < 100, "{message}");
}

#[test]
fn names_go_folds_together_are_refused() {
    // Go folds each character to `unicode.ToUpper(unicode.ToLower(c))`, simple mappings.
    for (c, folded) in [
        ('a', 'A'),
        ('Z', 'Z'),
        ('1', '1'),
        ('\u{df}', '\u{df}'),   // ß: no simple uppercase (the full one is "SS")
        ('\u{1e9e}', '\u{df}'), // ẞ lowercases to ß
        ('\u{212a}', 'K'),      // Kelvin sign lowercases to k
        ('\u{17f}', 'S'),       // long s uppercases to S
        ('\u{130}', 'I'),       // İ lowercases simply to i (fully to "i̇")
        ('\u{131}', 'I'),       // dotless ı uppercases to I
        ('\u{1fb3}', '\u{1fbc}'), // ᾳ uppercases simply to titlecase ᾼ (fully to "ΑΙ")
        ('\u{1fbc}', '\u{1fbc}'), // ᾼ lowercases to ᾳ
        ('\u{1f80}', '\u{1f88}'), // ᾀ → ᾈ
        ('\u{1f97}', '\u{1f9f}'), // ᾗ → ᾟ
        ('\u{1fa8}', '\u{1fa8}'), // ᾨ (titlecase) lowercases to ᾠ, which uppercases to ᾨ
        ('\u{1fc3}', '\u{1fcc}'), // ῃ → ῌ
        ('\u{1ff3}', '\u{1ffc}'), // ῳ → ῼ
        ('\u{1fb2}', '\u{1fb2}'), // ᾲ: no simple uppercase
        ('\u{149}', '\u{149}'), // ŉ: no simple uppercase
        ('\u{fb00}', '\u{fb00}'), // ﬀ: no simple uppercase
        ('\u{3c2}', '\u{3a3}'), // final ς → Σ
        ('\u{3a3}', '\u{3a3}'),
        ('\u{1c5}', '\u{1c4}'), // titlecase ǅ → ǆ → Ǆ
    ] {
        assert_eq!(go_fold(c), folded, "{c:?} (U+{:04X})", u32::from(c));
    }
    let problem = |text: &str| parse(text).expect("valid JSON").key_problem();
    let variants = |first: &str, second: &str| {
        Some((
            "/".to_owned(),
            KeyProblem::CaseVariants(first.into(), second.into()),
        ))
    };
    for (first, second) in [
        ("stra\u{df}e", "stra\u{1e9e}e"),
        ("kind", "\u{212a}ind"),
        ("mask", "ma\u{17f}k"),
        ("id", "\u{130}d"),
        ("\u{3b1}\u{1fb3}", "\u{3b1}\u{1fbc}"),
        ("\u{1f80}", "\u{1f88}"),
    ] {
        let text = format!(r#"{{"{first}":1,"{second}":2}}"#);
        assert_eq!(problem(&text), variants(first, second), "{text}");
        // Many members: the hashed path.
        let members: String = (0..20).map(|i| format!(r#""m{i}":{i},"#)).collect();
        let text = format!(r#"{{"{first}":1,{members}"{second}":2}}"#);
        assert_eq!(problem(&text), variants(first, second), "{text}");
    }
    // Full folding still counts ("STRASSE" and "straße" are one name to it).
    assert_eq!(
        problem("{\"stra\u{df}e\":1,\"STRASSE\":2}"),
        variants("stra\u{df}e", "STRASSE")
    );
    // Names no folding joins stay apart.
    assert_eq!(
        problem("{\"stra\u{df}e\":1,\"strase\":2,\"i\":3,\"\u{131}x\":4}"),
        None
    );
}

#[test]
fn validation_agrees_with_serde_json_values() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": true},
            "count": {"type": "integer", "minimum": 0},
            "ratio": {"type": "number", "exclusiveMaximum": 1},
            "nested": {"type": "object", "additionalProperties": false,
                       "properties": {"x": {"const": 1}}}
        },
        "required": ["name"],
        "propertyNames": {"maxLength": 8}
    });
    let ours = validator(&schema, &jsonschema::PatternCache::new()).expect("schema");
    let reference = jsonschema::validator_for(&schema).expect("schema");
    for input in [
        r#"{"name":"ab"}"#,
        r#"{"name":"a"}"#,
        r#"{}"#,
        r#"{"name":"ab","tags":["a","b"]}"#,
        r#"{"name":"ab","tags":["a","a"]}"#,
        r#"{"name":"ab","tags":["c"]}"#,
        r#"{"name":"ab","count":3}"#,
        r#"{"name":"ab","count":3.0}"#,
        r#"{"name":"ab","count":-1}"#,
        r#"{"name":"ab","count":1.5}"#,
        r#"{"name":"ab","ratio":0.5}"#,
        r#"{"name":"ab","ratio":1}"#,
        r#"{"name":"ab","nested":{"x":1}}"#,
        r#"{"name":"ab","nested":{"x":1.0}}"#,
        r#"{"name":"ab","nested":{"x":2}}"#,
        r#"{"name":"ab","nested":{"y":1}}"#,
        r#"{"name":"ab","much_too_long_name":1}"#,
        r#"{"name":"\u00e9\u00e9"}"#,
        r#"[]"#,
        r#""text""#,
    ] {
        let node = parse(input).expect("valid JSON");
        let value: Value = serde_json::from_str(input).expect("valid JSON");
        assert_eq!(
            ours.is_valid(&node),
            reference.is_valid(&value),
            "is_valid of {input}"
        );
        let ours_errors: Vec<String> = ours
            .iter_errors(&node)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        let reference_errors: Vec<String> = reference
            .iter_errors(&value)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert_eq!(ours_errors, reference_errors, "errors of {input}");
    }
}

#[test]
fn repeated_names_are_all_checked() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let ours = validator(&schema, &jsonschema::PatternCache::new()).expect("schema");
    let node = parse(r#"{"n": 1, "n": "two"}"#).expect("valid JSON");
    assert!(!ours.is_valid(&node));
}

#[test]
fn nesting_is_limited_by_the_parser() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let error = parse(&deep).expect_err("too deep");
    assert!(error.to_string().contains("recursion limit"), "{error}");
}
