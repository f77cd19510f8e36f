//! What a JSON value takes in the host's memory once serde_json has parsed it (its "weight"),
//! and an estimate of it read from the text alone: parsed, a megabyte of small objects takes a
//! hundred times as much, so what the host parses or keeps from others (a plugin's structured
//! result, a kept task's, a client's request) is weighed, not only measured in bytes.

use serde_json::Value;

/// What one node of a JSON object's B-tree takes: 11 `String` keys and `Value` members, its
/// parent's link and its place and length (an inner node also links to its 12 children).
pub(crate) const JSON_OBJECT_NODE_BYTES: usize =
    11 * (size_of::<String>() + size_of::<Value>()) + 16;

/// What `value` takes in memory beyond its own slot, as serde_json stores it: a string its
/// capacity, an array its slots' capacity and its items', an object its B-tree's nodes and its
/// members'; each of these blocks as the system's allocator serves it (at least 32 bytes, in
/// steps of 16 with 8 of its own: a one-letter string takes 32 bytes, not 1). The nodes count
/// most for small objects: a node has room for 11 members whether it holds one or eleven, and
/// nodes filled in key order hold as few as 5 or 6 (so 1 MiB of `[{"":0},…]`, some 150,000
/// objects, takes about 100 MiB, and is weighed so).
pub(crate) fn json_bytes(value: &Value) -> usize {
    const LEAF: usize = JSON_OBJECT_NODE_BYTES;
    const INNER: usize = LEAF + 12 * size_of::<usize>();
    match value {
        Value::String(text) => block(text.capacity()),
        Value::Array(items) => {
            block(items.capacity() * size_of::<Value>())
                + items.iter().map(json_bytes).sum::<usize>()
        }
        Value::Object(members) if members.is_empty() => 0,
        Value::Object(members) => {
            let nodes = if members.len() <= 11 {
                block(LEAF)
            } else {
                let leaves = members.len().div_ceil(5);
                leaves * block(LEAF) + leaves.div_ceil(5) * block(INNER)
            };
            nodes
                + members
                    .iter()
                    .map(|(key, member)| block(key.capacity()) + json_bytes(member))
                    .sum::<usize>()
        }
        _ => 0,
    }
}

/// What an allocation of `bytes` takes from glibc's allocator (the system's on Linux): none for
/// none, else its size and 8 bytes of header rounded up to 16, at least 32.
pub(crate) fn block(bytes: usize) -> usize {
    if bytes == 0 {
        0
    } else {
        (bytes + 8).next_multiple_of(16).max(32)
    }
}

/// A mark of a JSON text's structure, outside its strings.
#[cfg_attr(test, derive(Debug, PartialEq))]
enum Mark {
    /// A string's opening quote (a key's too).
    String,
    /// `{` or `[`, and whether the container holds anything.
    Open { object: bool, empty: bool },
    /// `}` or `]`.
    Close,
    /// A comma between members or elements.
    Comma,
}

/// Calls `each` with the marks of the JSON `bytes` in order, in one pass, skipping what strings
/// hold (escaped quotes included; a string's text is passed over with `memchr`, not byte by
/// byte). It does not check that the text is JSON.
fn scan(bytes: &[u8], mut each: impl FnMut(Mark)) {
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => {
                each(Mark::String);
                // To the closing quote: past each backslash and the byte it escapes.
                at += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &bytes[at.min(bytes.len())..]) {
                        Some(found) if bytes[at + found] == b'\\' => at += found + 2,
                        Some(found) => {
                            at += found;
                            break;
                        }
                        None => return,
                    }
                }
            }
            b'{' | b'[' => {
                let empty = bytes[at + 1..]
                    .iter()
                    .find(|next| !next.is_ascii_whitespace())
                    .is_some_and(|next| matches!(next, b'}' | b']'));
                each(Mark::Open {
                    object: byte == b'{',
                    empty,
                });
            }
            b'}' | b']' => each(Mark::Close),
            b',' => each(Mark::Comma),
            _ => {}
        }
        at += 1;
    }
}

/// Roughly what the JSON `bytes` takes once parsed into a `serde_json::Value` (below the exact
/// weight, which follows), read without building it: each object that holds anything at least
/// one B-tree node, each member or element at least its slot (counted by the commas and opening
/// brackets outside strings; empty objects and arrays take nothing).
pub(crate) fn estimated_json_bytes(bytes: &[u8]) -> usize {
    let mut weight = bytes.len();
    scan(bytes, |mark| match mark {
        Mark::Open { empty: true, .. } | Mark::String | Mark::Close => {}
        Mark::Open { object: true, .. } => weight += JSON_OBJECT_NODE_BYTES,
        Mark::Open { object: false, .. } | Mark::Comma => weight += size_of::<Value>(),
    });
    weight
}

/// What the JSON `bytes` would take once parsed into `serde_json` values, as near as can be
/// told from the text without building them, erring high (unlike [`estimated_json_bytes`],
/// which errs low): the text twice (as read, and the strings' contents parsing copies, with
/// what the allocator keeps of large blocks freed meanwhile), each non-empty array its first
/// block of four slots and two slots for each further element (a `Vec` doubles as it grows),
/// each non-empty object its first B-tree node and a third of a node for each further member
/// (leaves hold five or more, and inner nodes link them), each string (keys too) the smallest
/// allocation besides its text. For what the host is sent, before it parses it. Measured
/// against a server's resident memory: the `requests` section of the serve bench.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn parsed_json_bytes(bytes: &[u8]) -> usize {
    const SLOT: usize = size_of::<Value>();
    let node = block(JSON_OBJECT_NODE_BYTES);
    // Whether each open container is an object, innermost last.
    let mut objects: Vec<bool> = Vec::new();
    let mut weight = bytes.len().saturating_mul(2);
    scan(bytes, |mark| match mark {
        Mark::String => weight += block(1),
        Mark::Open { object, empty } => {
            objects.push(object);
            if !empty {
                weight += if object { node } else { block(4 * SLOT) };
            }
        }
        Mark::Close => {
            objects.pop();
        }
        Mark::Comma => match objects.last() {
            Some(true) => weight += node / 3,
            Some(false) => weight += 2 * SLOT,
            None => {}
        },
    });
    weight
}

#[cfg(test)]
mod tests {
    use super::{Mark, estimated_json_bytes, parsed_json_bytes, scan};

    /// The marks of `bytes`, read byte by byte: what [`scan`] skips through strings to find.
    fn marks_byte_by_byte(bytes: &[u8]) -> Vec<Mark> {
        let (mut marks, mut in_string, mut escaped) = (Vec::new(), false, false);
        for (at, &byte) in bytes.iter().enumerate() {
            if in_string {
                match byte {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => {
                    in_string = true;
                    marks.push(Mark::String);
                }
                b'{' | b'[' => marks.push(Mark::Open {
                    object: byte == b'{',
                    empty: bytes[at + 1..]
                        .iter()
                        .find(|next| !next.is_ascii_whitespace())
                        .is_some_and(|next| matches!(next, b'}' | b']')),
                }),
                b'}' | b']' => marks.push(Mark::Close),
                b',' => marks.push(Mark::Comma),
                _ => {}
            }
        }
        marks
    }

    #[test]
    fn strings_are_skipped_whatever_they_hold() {
        for text in [
            r#"{"a":"x,y{[","b":[1,2,{}],"c":{ }}"#,
            r#"["\"", "\\", "\\\"]", "[", ","]"#,
            r#"{"ends with a backslash\"#,
            r#"{"unterminated: [,{"#,
            r#"["\"#,
            r#""\u0022,[" , [ ] ,"#,
            "",
            "\"",
        ] {
            let mut marks = Vec::new();
            scan(text.as_bytes(), |mark| marks.push(mark));
            assert_eq!(marks, marks_byte_by_byte(text.as_bytes()), "{text}");
        }
    }

    /// Erring high: at least what the value takes once parsed, whatever it is made of (the
    /// shapes that weigh most for their text among them), and not far above it.
    #[test]
    fn the_parsed_estimate_is_at_least_the_weight() {
        let nested = format!("{}{}", "[".repeat(120), "]".repeat(120));
        let nested_objects = format!("{}0{}", "{\"a\":".repeat(120), "}".repeat(120));
        let keys = format!(
            "{{{}}}",
            (0..20_000)
                .map(|n| format!("\"{n}\":0"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let small = format!("[{}]", vec!["{\"\":0}"; 20_000].join(","));
        let numbers = format!("[{}]", vec!["1"; 50_000].join(","));
        let strings = format!("{{\"s\":\"{}\"}}", "a,[{\\\"".repeat(10_000));
        let mixed = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "t", "arguments": {"a": [1, 2, {"b": "c"}], "d": {"e": null}}},
        })
        .to_string();
        for text in [nested, nested_objects, keys, small, numbers, strings, mixed] {
            let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            let weight = super::json_bytes(&value) + size_of::<super::Value>();
            let estimate = parsed_json_bytes(text.as_bytes());
            assert!(
                estimate >= weight && estimate <= weight.max(text.len()) * 4,
                "{}…: {estimate} against {weight}",
                &text[..40.min(text.len())]
            );
        }
    }

    /// The estimate stays below what the value takes once parsed, whatever the JSON is made of
    /// (so that only the exact weight refuses what is near the budget), and grows with it.
    #[test]
    fn the_estimate_is_below_the_weight() {
        let empties = format!("{{\"r\":[{}]}}", vec!["{}"; 24_000].join(","));
        let strings = format!("{{\"s\":\"{}\"}}", "a,[{\\\"".repeat(10_000));
        let objects = format!("{{\"r\":[{}]}}", vec!["{\"id\":1}"; 1_000].join(","));
        for text in [empties, strings, objects] {
            let weight = super::json_bytes(&serde_json::from_str(&text).expect("JSON"));
            let estimate = estimated_json_bytes(text.as_bytes());
            assert!(
                estimate <= weight.max(text.len()) * 2,
                "{estimate} > {weight}"
            );
        }
        // Empty containers cost little; non-empty objects a node each.
        assert!(estimated_json_bytes(b"[{},{},[],{ }]") < 200);
        assert!(estimated_json_bytes(b"{\"r\":[{\"a\":1},{\"a\":1}]}") > 1_000);
    }
}
