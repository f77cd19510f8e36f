//! Attacks on the input check: JSON with a key repeated, or with names that a plugin's parser
//! reads as one, to slip a value past the tool's schema.

use llm_worker::*;
use llm_worker_tests::session;
use llm_worker_tests::wat::WatComponent;

/// An echo plugin (it returns its input as it got it) whose schema allows only `"read"` as
/// `mode`, wherever a mode may appear: as a declared property, under a pattern, as any other
/// member, in array items, in a nested object, and behind a `$ref`.
fn echo() -> LoadedPlugin {
    let read_only = r#"{"enum":["read"]}"#;
    let schema = format!(
        r##"{{"type":"object",
            "properties":{{
              "mode":{read_only},
              "list":{{"type":"array","items":{{"type":"object","properties":{{"mode":{read_only}}}}}}},
              "nested":{{"type":"object","properties":{{"inner":{{"type":"object","properties":{{"mode":{read_only}}}}}}}}},
              "by_ref":{{"$ref":"#/$defs/options"}}
            }},
            "patternProperties":{{"^x-":{read_only}}},
            "additionalProperties":{{"type":"object","additionalProperties":{read_only}}},
            "$defs":{{"options":{{"type":"object","properties":{{"mode":{read_only}}}}}}}
          }}"##
    );
    let bytes = WatComponent::new(&[("echo", "Returns its input.", &schema)])
        .echo()
        .build();
    llm_worker_tests::host()
        .load_bytes("/plugins/echo.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_repeated_key_cannot_slip_a_value_past_the_schema() {
    let tools = session(&echo());
    let members: String = (0..30).map(|i| format!(r#""f{i}":{{}},"#)).collect();
    for (input, path, key) in [
        (r#"{"mode":"read","mode":"delete"}"#.to_owned(), "/", "mode"),
        (r#"{"mode":"delete","mode":"read"}"#.to_owned(), "/", "mode"),
        (
            r#"{"list":[{"mode":"read"},{"mode":"read","mode":"delete"}]}"#.to_owned(),
            "/list/1",
            "mode",
        ),
        (
            r#"{"nested":{"inner":{"mode":"read","mode":"delete"}}}"#.to_owned(),
            "/nested/inner",
            "mode",
        ),
        (
            r#"{"by_ref":{"mode":"read","mode":"delete"}}"#.to_owned(),
            "/by_ref",
            "mode",
        ),
        (
            r#"{"x-mode":"read","x-mode":"delete"}"#.to_owned(),
            "/",
            "x-mode",
        ),
        (
            r#"{"other":{"a":"read","a":"delete"}}"#.to_owned(),
            "/other",
            "a",
        ),
        // Many members: the repeat is far from the first occurrence.
        (
            format!(r#"{{"mode":"read",{members}"mode":"delete"}}"#),
            "/",
            "mode",
        ),
        // The same name spelled with escapes.
        (
            r#"{"mode":"read","\u006d\u006fde":"delete"}"#.to_owned(),
            "/",
            "mode",
        ),
        // Names equal but for case (Go's encoding/json reads them as one).
        (r#"{"mode":"read","MODE":"delete"}"#.to_owned(), "/", "MODE"),
        (
            format!(r#"{{"mode":"read",{members}"Mode":"delete"}}"#),
            "/",
            "Mode",
        ),
        // A NUL in a name (C parsers end the name there).
        (
            r#"{"mode\u0000":"delete","mode":"read"}"#.to_owned(),
            "/",
            "mode\0",
        ),
    ] {
        match tools.call_tool("echo", &input).await {
            Err(ToolServerError::ToolExecution(message)) => {
                assert!(
                    message.starts_with("Invalid argument:")
                        && message.contains(&format!("{key:?}"))
                        && message.contains(&format!("at {path};")),
                    "{input}: {message}"
                );
            }
            other => panic!("{input}: the repeated key got through: {other:?}"),
        }
    }
    // What passes the check is exactly what the plugin gets.
    let fine = r#"{"mode":"read","list":[{"mode":"read"}],"x-a":"read","other":{"b":"read"}}"#;
    assert_eq!(tools.call_tool("echo", fine).await.as_deref(), Ok(fine));
    let denied = tools.call_tool("echo", r#"{"mode":"delete"}"#).await;
    assert!(
        matches!(&denied, Err(ToolServerError::ToolExecution(m)) if m.contains("\"delete\"")),
        "{denied:?}"
    );
}

#[tokio::test]
async fn names_go_reads_as_one_cannot_slip_a_value_past_the_schema() {
    // Go's encoding/json fills a field from any member whose name folds like the field's
    // (simple case mappings): a plugin in Go reads "straẞe" as its field "straße". The schema
    // constrains "straße" only; every other name may hold anything.
    let read_only = r#"{"enum":["read"]}"#;
    let names = ["straße", "id", "kind", "mask", "ᾳ", "ᾀ"];
    let properties: Vec<String> = names
        .iter()
        .map(|name| format!(r#""{name}":{read_only}"#))
        .collect();
    let schema = format!(
        r#"{{"type":"object","properties":{{{}}}}}"#,
        properties.join(",")
    );
    let bytes = WatComponent::new(&[("echo", "Returns its input.", &schema)])
        .echo()
        .build();
    let plugin = llm_worker_tests::host()
        .load_bytes("/plugins/go-echo.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    let members: String = (0..30).map(|i| format!(r#""f{i}":0,"#)).collect();
    for (name, variant) in [
        ("straße", "straẞe"),    // ẞ lowercases to ß; ß has no simple uppercase
        ("id", "İd"),            // İ lowercases simply to i
        ("kind", "\u{212a}ind"), // the Kelvin sign lowercases to k
        ("mask", "ma\u{17f}k"),  // long s uppercases to S
        ("ᾳ", "ᾼ"),              // ypogegrammeni: ᾳ uppercases simply to ᾼ
        ("ᾀ", "ᾈ"),
    ] {
        for input in [
            format!(r#"{{"{name}":"read","{variant}":"delete"}}"#),
            format!(r#"{{"{variant}":"delete",{members}"{name}":"read"}}"#),
        ] {
            match tools.call_tool("echo", &input).await {
                Err(ToolServerError::ToolExecution(message)) => assert!(
                    message.starts_with("Invalid argument:")
                        && message.contains("differ only in case")
                        && message.contains(&format!("{variant:?}")),
                    "{input}: {message}"
                ),
                other => panic!("{input}: the variant got through: {other:?}"),
            }
        }
    }
    // Names no folding joins pass, byte for byte.
    let fine = r#"{"straße":"read","straße2":"delete","id":"read","ıx":"delete"}"#;
    assert_eq!(tools.call_tool("echo", fine).await.as_deref(), Ok(fine));
}
