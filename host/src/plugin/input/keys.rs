//! Member names that parsers other than the host's could read differently: a name repeated
//! in one object, or names that case-insensitive parsers (Go's) fold together.

use std::borrow::Cow;
use std::fmt;

use super::InputNode;

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
pub(super) fn go_fold(c: char) -> char {
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
    first_clash(members, |(name, _)| name.as_ref())
}

/// The first clash ([`clash`]) among the names of `items` (`name` gives each one's).
fn first_clash<'n, T>(items: &'n [T], name: impl Fn(&'n T) -> &'n str) -> Option<KeyProblem> {
    // Most objects are small: comparing pairs beats hashing them.
    if items.len() <= 16 {
        return items.iter().enumerate().find_map(|(index, item)| {
            items[..index]
                .iter()
                .find_map(|earlier| clash(name(earlier), name(item)))
        });
    }
    // One map per folding: a name clashes with an earlier one if either finds it.
    let mut seen = std::collections::HashMap::with_capacity(items.len());
    let mut go_seen = std::collections::HashMap::with_capacity(items.len());
    items.iter().find_map(|item| {
        let name = name(item);
        let earlier = seen.insert(folded(name), name);
        let go_earlier = go_seen.insert(go_folded(name), name);
        earlier
            .or(go_earlier)
            .and_then(|earlier| clash(earlier, name))
    })
}

/// The first clash ([`clash`]) among the names of some `properties` object of `schema`, at
/// any depth: an input holding both names is refused as ambiguous, so a schema naming both
/// describes inputs no call can give.
pub(crate) fn property_names_clash(schema: &serde_json::Value) -> Option<KeyProblem> {
    use serde_json::Value;
    let mut stack = vec![schema];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(members) => {
                if let Some(Value::Object(properties)) = members.get("properties") {
                    let names: Vec<&str> = properties.keys().map(String::as_str).collect();
                    if let Some(problem) = first_clash(&names, |name| name) {
                        return Some(problem);
                    }
                }
                stack.extend(members.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    None
}
