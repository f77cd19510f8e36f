//! A tool's input, parsed for checking against its schema without copying it.
//!
//! Every call's input is checked on the host before the plugin sees it. Parsing it into a
//! `serde_json::Value` would allocate a map per object and copy every string — for a 100 KB
//! argument, a 100 KB copy that is thrown away once the check passes. [`InputNode`] borrows
//! each string from the input text instead (only strings with escapes are unescaped into an
//! owned copy), and objects are plain vectors of members. jsonschema validates it through its
//! [`Json`] abstraction, exactly as it would validate a `Value`.

mod json;
mod keys;
mod parse;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use serde_json::{Number, Value};

pub(crate) use json::InputJson;
pub(crate) use keys::property_names_clash;

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
    Object(Members<'a>),
}

/// An object's members in input order, with an index by name once there are many: jsonschema
/// looks members up by name (`required`, `properties`, `dependentRequired`), and a scan per
/// name would make a schema of thousands of names on an object of thousands of members take
/// millions of steps per check.
#[derive(Debug, Clone, Default)]
pub(crate) struct Members<'a> {
    members: Vec<(Cow<'a, str>, InputNode<'a>)>,
    /// The members' positions sorted by name (stably: of a repeated name, the first comes
    /// first), for objects of more than [`Members::INDEXED`] members.
    by_name: Option<Box<[u32]>>,
}

impl<'a> Members<'a> {
    /// Objects of more members than this are indexed.
    const INDEXED: usize = 16;

    pub(crate) fn new(members: Vec<(Cow<'a, str>, InputNode<'a>)>) -> Self {
        let by_name = (members.len() > Self::INDEXED).then(|| {
            let mut positions: Vec<u32> = (0..members.len() as u32).collect();
            positions.sort_by(|a, b| members[*a as usize].0.cmp(&members[*b as usize].0));
            positions.into_boxed_slice()
        });
        Self { members, by_name }
    }

    /// The value of the first member named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&InputNode<'a>> {
        let Some(by_name) = &self.by_name else {
            return self
                .members
                .iter()
                .find(|(member, _)| member == name)
                .map(|(_, value)| value);
        };
        let at = by_name.partition_point(|&at| self.members[at as usize].0.as_ref() < name);
        let (member, value) = &self.members[*by_name.get(at)? as usize];
        (member == name).then_some(value)
    }
}

impl<'a> std::ops::Deref for Members<'a> {
    type Target = [(Cow<'a, str>, InputNode<'a>)];

    fn deref(&self) -> &Self::Target {
        &self.members
    }
}

impl PartialEq for Members<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
    }
}

impl<'a> InputNode<'a> {
    /// The value at `location` (a JSON pointer, as jsonschema reports where a problem is), if
    /// there is one; of a repeated member name, the first.
    pub(crate) fn at(&self, location: &jsonschema::paths::Location) -> Option<&InputNode<'a>> {
        use jsonschema::paths::LocationSegment;
        location
            .segments()
            .try_fold(self, |node, segment| match (node, segment) {
                (InputNode::Array(items), LocationSegment::Index(index)) => items.get(index),
                (InputNode::Object(members), segment) => members.get(&segment.to_string()),
                _ => None,
            })
    }
}

/// Parses `text` (serde_json's parser, with its nesting limit).
pub(crate) fn parse(text: &str) -> Result<InputNode<'_>, serde_json::Error> {
    serde_json::from_str(text)
}

/// The validator of a tool's input schema, over [`InputNode`]s.
pub(crate) type InputValidator = jsonschema::Validator<InputJson>;

/// Longest text that `format: "regex"` accepts.
const MAX_REGEX_FORMAT_BYTES: usize = 1 << 10;

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
        // `format: "regex"` (asserted in drafts 4 to 7): jsonschema's check takes time
        // quadratic in the text, so texts over 1 KiB are not taken as regular expressions.
        .with_format("regex", |text: &str| {
            text.len() <= MAX_REGEX_FORMAT_BYTES && jsonschema_regex::is_valid_ecma_regex(text)
        })
        .with_pattern_options(
            jsonschema::PatternOptions::regex().size_limit(super::validate::PATTERN_SIZE_LIMIT),
        )
        .with_pattern_cache(compiled.clone())
        .build(schema)
}
