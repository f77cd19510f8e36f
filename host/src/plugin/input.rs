//! A tool's input, parsed for checking against its schema without copying it.
//!
//! Every call's input is checked on the host before the plugin sees it. Parsing it into a
//! `serde_json::Value` would allocate a map per object and copy every string — for a 100 KB
//! argument, a 100 KB copy that is thrown away once the check passes. [`InputNode`] borrows
//! each string from the input text instead (only strings with escapes are unescaped into an
//! owned copy), and objects are plain vectors of members. jsonschema validates it through its
//! [`Json`] abstraction, exactly as it would validate a `Value`.

use std::borrow::Cow;
use std::fmt;

use jsonschema::JsonType;
use jsonschema::json::{Array, Json, Node, NodeIdentity, Object};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value whose strings borrow from the input text where they can.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) enum InputNode<'a> {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<InputNode<'a>>),
    /// Members in input order; a repeated name is kept twice, so each value is checked.
    Object(Vec<(Cow<'a, str>, InputNode<'a>)>),
}

/// Parses `text` (serde_json's parser, with its nesting limit).
pub(crate) fn parse(text: &str) -> Result<InputNode<'_>, serde_json::Error> {
    serde_json::from_str(text)
}

/// The validator of a tool's input schema, over [`InputNode`]s.
pub(crate) type InputValidator = jsonschema::Validator<InputJson>;

/// Compiles `schema` for checking inputs (remote references are not fetched), with the
/// patterns `compiled` already holds (one cache per plugin: a pattern its schemas repeat is
/// compiled once).
///
/// `pattern`s run on a linear-time engine (no lookaround or backreferences): the schema comes
/// from the plugin and the input from a model, and a backtracking engine would let the two
/// together keep the host busy for minutes on one input.
pub(crate) fn validator(
    schema: &Value,
    compiled: &jsonschema::PatternCache,
) -> Result<InputValidator, jsonschema::ValidationError<'static>> {
    jsonschema::options_for::<InputJson>()
        .with_pattern_options(
            jsonschema::PatternOptions::regex().size_limit(super::validate::PATTERN_SIZE_LIMIT),
        )
        .with_pattern_cache(compiled.clone())
        .build(schema)
}

/// A string that borrows from the input when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E>(self, text: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

impl<'de> Deserialize<'de> for InputNode<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = InputNode<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<InputNode<'de>, E> {
                Ok(InputNode::Null)
            }
            fn visit_bool<E>(self, value: bool) -> Result<InputNode<'de>, E> {
                Ok(InputNode::Bool(value))
            }
            fn visit_u64<E>(self, value: u64) -> Result<InputNode<'de>, E> {
                Ok(InputNode::Number(value.into()))
            }
            fn visit_i64<E>(self, value: i64) -> Result<InputNode<'de>, E> {
                Ok(InputNode::Number(value.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<InputNode<'de>, E> {
                // JSON has no NaN or infinity; serde_json refuses out-of-range numbers itself.
                Number::from_f64(value)
                    .map(InputNode::Number)
                    .ok_or_else(|| E::custom("a number out of range"))
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<InputNode<'de>, E> {
                Ok(InputNode::String(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<InputNode<'de>, E> {
                Ok(InputNode::String(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E>(self, text: String) -> Result<InputNode<'de>, E> {
                Ok(InputNode::String(Cow::Owned(text)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<InputNode<'de>, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(InputNode::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputNode<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some((Text(name), value)) = map.next_entry()? {
                    members.push((name, value));
                }
                Ok(InputNode::Object(members))
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}

/// A member name that parsers other than the host's could read differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyProblem {
    /// The same name twice in one object: parsers disagree on which value wins.
    Repeated(String),
    /// Two names equal but for case: some parsers (Go's `encoding/json`) match names without
    /// regard to case, and would take one value for both.
    CaseVariants(String, String),
    /// A control character in a name: C parsers end a name at NUL.
    ControlCharacter(String),
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::Repeated(key) => write!(f, "has the key {} twice", Shown(key)),
            KeyProblem::CaseVariants(first, second) => write!(
                f,
                "has the keys {} and {}, which differ only in case (some JSON parsers read them \
                 as one key)",
                Shown(first),
                Shown(second)
            ),
            KeyProblem::ControlCharacter(key) => write!(
                f,
                "has the key {}, with a control character (some JSON parsers end a key there)",
                Shown(key)
            ),
        }
    }
}

/// A member name quoted for a message, at most 64 characters of it.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(64) {
            Some((end, _)) => write!(f, "{:?}…", &self.0[..end]),
            None => write!(f, "{:?}", self.0),
        }
    }
}

impl InputNode<'_> {
    /// The first member name, anywhere in the value, that another JSON parser could read
    /// differently from the host, with the JSON pointer of its object (`/` for the top level).
    ///
    /// JSON parsers disagree on repeated names (serde_json and jsonschema see the first or the
    /// last value, JavaScript's `JSON.parse` the last, others refuse them), on names that
    /// differ only in case, and on names with NUL in them; an input with one could pass the
    /// schema check with one value and reach the plugin with another.
    pub(crate) fn key_problem(&self) -> Option<(String, KeyProblem)> {
        match self {
            InputNode::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
                item.key_problem()
                    .map(|(path, problem)| (format!("/{index}{}", strip_root(&path)), problem))
            }),
            InputNode::Object(members) => {
                if let Some(problem) = object_key_problem(members) {
                    return Some(("/".to_owned(), problem));
                }
                members.iter().find_map(|(name, value)| {
                    value.key_problem().map(|(path, problem)| {
                        (
                            format!("/{}{}", escape_pointer(name), strip_root(&path)),
                            problem,
                        )
                    })
                })
            }
            _ => None,
        }
    }
}

/// A nested path without the root's `/`, for appending to its parent's.
fn strip_root(path: &str) -> &str {
    if path == "/" { "" } else { path }
}

/// A member name as a JSON pointer segment (RFC 6901: `~` as `~0`, `/` as `~1`).
fn escape_pointer(name: &str) -> Cow<'_, str> {
    if name.contains(['~', '/']) {
        Cow::Owned(name.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(name)
    }
}

/// A name folded for comparing without regard to case (as Unicode simple case folding does
/// for the names that matter: `K` (Kelvin) and `k`, `ſ` and `s`); borrowed when it is
/// lowercase ASCII already.
fn folded(name: &str) -> Cow<'_, str> {
    if name
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_uppercase())
    {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .flat_map(char::to_uppercase)
            .flat_map(char::to_lowercase)
            .collect(),
    )
}

/// A name as Go's `encoding/json` folds it to match a member to a struct field (Go 1.21 and
/// later, `appendFoldedName`): ASCII letters upper-cased, every other character mapped to
/// `unicode.ToUpper(unicode.ToLower(c))` with Unicode's *simple* case mappings. Two names that
/// fold alike fill one field, e.g. `straße` and `straẞe`, `id` and `İd`, `k` and `K` (Kelvin);
/// borrowed when nothing changes.
fn go_folded(name: &str) -> Cow<'_, str> {
    if name
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_lowercase())
    {
        return Cow::Borrowed(name);
    }
    Cow::Owned(name.chars().map(go_fold).collect())
}

/// One character as Go's `encoding/json` folds it (see [`go_folded`]).
fn go_fold(c: char) -> char {
    if c.is_ascii() {
        c.to_ascii_uppercase()
    } else {
        simple_uppercase(simple_lowercase(c))
    }
}

/// Unicode's simple lowercase mapping of `c` (UnicodeData.txt, field 13). Rust's
/// `char::to_lowercase` is the full mapping (with SpecialCasing.txt); where that is one
/// character it is the simple one, and the only character whose full lowercase is longer is
/// U+0130 `İ` (`i̇`), whose simple lowercase is `i`.
fn simple_lowercase(c: char) -> char {
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(single), None) => single,
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// Unicode's simple uppercase mapping of `c` (UnicodeData.txt, field 12). Rust's
/// `char::to_uppercase` is the full mapping; where that is one character it is the simple
/// one. Where it is longer (SpecialCasing.txt), the simple mapping is the character itself —
/// `ß` (U+00DF), `ŉ`, `ǰ`, `ΐ`, `ΰ`, `և`, `ẖ`…`ẚ`, `ὐ`…, the titlecase letters `ᾈ`…`ᾏ`,
/// `ᾘ`…, `ᾨ`…, `ᾼ`, `ῌ`, `ῼ` and the Latin and Armenian ligatures — except for the Greek
/// small letters with ypogegrammeni, whose simple uppercase is their titlecase letter:
/// U+1F80..=U+1F87 → U+1F88.., U+1F90..=U+1F97 → U+1F98.., U+1FA0..=U+1FA7 → U+1FA8..,
/// U+1FB3 → U+1FBC, U+1FC3 → U+1FCC, U+1FF3 → U+1FFC.
fn simple_uppercase(c: char) -> char {
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(single), None) => single,
        _ => {
            let titlecase = match u32::from(c) {
                0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => u32::from(c) + 8,
                0x1FB3 | 0x1FC3 | 0x1FF3 => u32::from(c) + 9,
                _ => return c,
            };
            char::from_u32(titlecase).unwrap_or(c)
        }
    }
}

/// The problem of two names of one object, if they clash: equal, equal once case is folded
/// fully ([`folded`]), or as Go folds them ([`go_folded`]).
fn clash(first: &str, second: &str) -> Option<KeyProblem> {
    if first == second {
        return Some(KeyProblem::Repeated(first.to_owned()));
    }
    let same_but_case = if first.is_ascii() && second.is_ascii() {
        first.eq_ignore_ascii_case(second)
    } else {
        folded(first) == folded(second) || go_folded(first) == go_folded(second)
    };
    same_but_case.then(|| KeyProblem::CaseVariants(first.to_owned(), second.to_owned()))
}

/// The first problem among an object's member names.
fn object_key_problem(members: &[(Cow<'_, str>, InputNode<'_>)]) -> Option<KeyProblem> {
    if let Some((name, _)) = members
        .iter()
        .find(|(name, _)| name.chars().any(char::is_control))
    {
        return Some(KeyProblem::ControlCharacter(name.to_string()));
    }
    // Most objects are small: comparing pairs beats hashing them.
    if members.len() <= 16 {
        return members.iter().enumerate().find_map(|(index, (name, _))| {
            members[..index]
                .iter()
                .find_map(|(earlier, _)| clash(earlier, name))
        });
    }
    // One map per folding: a name clashes with an earlier one if either finds it.
    let mut seen = std::collections::HashMap::with_capacity(members.len());
    let mut go_seen = std::collections::HashMap::with_capacity(members.len());
    members.iter().find_map(|(name, _)| {
        let earlier = seen.insert(folded(name), name.as_ref());
        let go_earlier = go_seen.insert(go_folded(name), name.as_ref());
        earlier
            .or(go_earlier)
            .and_then(|earlier| clash(earlier, name))
    })
}

impl InputNode<'_> {
    /// The same value as a `serde_json::Value` (for error messages only). A repeated member
    /// name keeps its last value, as serde_json does.
    fn to_json(&self) -> Value {
        match self {
            InputNode::Null => Value::Null,
            InputNode::Bool(value) => Value::Bool(*value),
            InputNode::Number(number) => Value::Number(number.clone()),
            InputNode::String(text) => Value::String(text.clone().into_owned()),
            InputNode::Array(items) => Value::Array(items.iter().map(Self::to_json).collect()),
            InputNode::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(name, value)| (name.clone().into_owned(), value.to_json()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }
}

/// [`InputNode`] as a JSON representation jsonschema can validate.
#[derive(Debug)]
pub(crate) struct InputJson;

impl Json for InputJson {
    type Node<'a> = &'a InputNode<'a>;
    type PreparedKey = String;
    type StringBuffer = InputNode<'static>;

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>(
        buffer: &mut InputNode<'static>,
        string: &str,
        f: impl FnOnce(Self::Node<'_>) -> T,
    ) -> T {
        *buffer = InputNode::String(Cow::Owned(string.to_owned()));
        f(buffer)
    }
}

impl<'a> Node<'a, InputJson> for &'a InputNode<'a> {
    type Object = &'a [(Cow<'a, str>, InputNode<'a>)];
    type Array = &'a [InputNode<'a>];
    type Number = &'a Number;

    fn as_object(&self) -> Option<Self::Object> {
        match self {
            InputNode::Object(members) => Some(members),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<Self::Array> {
        match self {
            InputNode::Array(items) => Some(items),
            _ => None,
        }
    }

    fn as_string(&self) -> Option<Cow<'a, str>> {
        match self {
            InputNode::String(text) => Some(Cow::Borrowed(text.as_ref())),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<&'a Number> {
        match self {
            InputNode::Number(number) => Some(number),
            _ => None,
        }
    }

    fn as_boolean(&self) -> Option<bool> {
        match self {
            InputNode::Bool(value) => Some(*value),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, InputNode::Null)
    }

    fn json_type(&self) -> JsonType {
        match self {
            InputNode::Null => JsonType::Null,
            InputNode::Bool(_) => JsonType::Boolean,
            InputNode::Number(_) => JsonType::Number,
            InputNode::String(_) => JsonType::String,
            InputNode::Array(_) => JsonType::Array,
            InputNode::Object(_) => JsonType::Object,
        }
    }

    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(self.to_json())
    }

    fn identity(&self) -> Option<NodeIdentity> {
        Some(NodeIdentity::new(
            std::ptr::from_ref::<InputNode<'a>>(*self) as usize,
        ))
    }
}

/// The members of an object, by name.
pub(crate) struct Members<'a>(std::slice::Iter<'a, (Cow<'a, str>, InputNode<'a>)>);

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a InputNode<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(name, value)| (name.as_ref(), value))
    }
}

impl<'a> Object<'a, InputJson> for &'a [(Cow<'a, str>, InputNode<'a>)] {
    type Node = &'a InputNode<'a>;
    type MemberName = &'a str;
    type MembersIter = Members<'a>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }

    fn get(&self, key: &String) -> Option<&'a InputNode<'a>> {
        self.iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value)
    }

    fn members(&self) -> Members<'a> {
        Members(self.iter())
    }
}

impl<'a> Array<'a, InputJson> for &'a [InputNode<'a>] {
    type Node = &'a InputNode<'a>;
    type ElementsIter = std::slice::Iter<'a, InputNode<'a>>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }

    fn elements(&self) -> Self::ElementsIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
        let repeated =
            |path: &str, key: &str| Some((path.into(), KeyProblem::Repeated(key.into())));
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
            ('\u{df}', '\u{df}'), // ß: no simple uppercase (the full one is "SS")
            ('\u{1e9e}', '\u{df}'), // ẞ lowercases to ß
            ('\u{212a}', 'K'),    // Kelvin sign lowercases to k
            ('\u{17f}', 'S'),     // long s uppercases to S
            ('\u{130}', 'I'),     // İ lowercases simply to i (fully to "i̇")
            ('\u{131}', 'I'),     // dotless ı uppercases to I
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
}
