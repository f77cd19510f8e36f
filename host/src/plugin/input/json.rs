//! [`InputNode`] as a JSON representation jsonschema validates (its [`Json`] abstraction), and
//! as a `serde_json::Value` for error messages.

use std::borrow::Cow;

use jsonschema::JsonType;
use jsonschema::json::{Array, Json, Node, NodeIdentity, Object};
use serde_json::{Map, Number, Value};

use super::{InputNode, Members};

impl InputNode<'_> {
    /// The same value as a `serde_json::Value` (for error messages only). A repeated member
    /// name keeps its last value, as serde_json does.
    pub(super) fn to_json(&self) -> Value {
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
    type Object = &'a Members<'a>;
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

    // Compared in place: the default copies the whole value for every `const` and every
    // `enum` entry.
    fn equals_value(&self, expected: &Value) -> bool {
        equals(self, expected)
    }

    fn identity(&self) -> Option<NodeIdentity> {
        Some(NodeIdentity::new(
            std::ptr::from_ref::<InputNode<'a>>(*self) as usize,
        ))
    }
}

/// The members of an object, by name.
pub(crate) struct MemberIter<'a>(std::slice::Iter<'a, (Cow<'a, str>, InputNode<'a>)>);

impl<'a> Iterator for MemberIter<'a> {
    type Item = (&'a str, &'a InputNode<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(name, value)| (name.as_ref(), value))
    }
}

impl<'a> Object<'a, InputJson> for &'a Members<'a> {
    type Node = &'a InputNode<'a>;
    type MemberName = &'a str;
    type MembersIter = MemberIter<'a>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }

    fn get(&self, key: &String) -> Option<&'a InputNode<'a>> {
        Members::get(self, key)
    }

    fn members(&self) -> MemberIter<'a> {
        MemberIter(self.iter())
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

    // Without copying the items: pairwise for a few, else by a structural hash, compared
    // only within a hash's bucket.
    fn is_unique(&self) -> bool {
        let items = *self;
        if items.len() <= 16 {
            return items
                .iter()
                .enumerate()
                .all(|(at, item)| items[at + 1..].iter().all(|other| !same(item, other)));
        }
        let state = std::hash::RandomState::new();
        let mut buckets: std::collections::HashMap<u64, Vec<&InputNode<'_>>> =
            std::collections::HashMap::with_capacity(items.len());
        for item in items {
            let bucket = buckets.entry(hash(&state, item)).or_default();
            if bucket.iter().any(|other| same(item, other)) {
                return false;
            }
            bucket.push(item);
        }
        true
    }
}

/// Whether `node` equals `expected` as JSON Schema compares (numbers mathematically).
fn equals(node: &InputNode<'_>, expected: &Value) -> bool {
    match (node, expected) {
        (InputNode::Null, Value::Null) => true,
        (InputNode::Bool(a), Value::Bool(b)) => a == b,
        (InputNode::Number(a), Value::Number(b)) => jsonschema::json::cmp::equal_numbers(a, b),
        (InputNode::String(a), Value::String(b)) => a == b,
        (InputNode::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| equals(a, b))
        }
        // A value checked holds each member name once (repeated names are refused first).
        (InputNode::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter().all(|(name, value)| {
                    b.get(name.as_ref())
                        .is_some_and(|expected| equals(value, expected))
                })
        }
        _ => false,
    }
}

/// Whether two values are equal as JSON Schema compares them: objects by sorted member names
/// (never one scan per member).
fn same(a: &InputNode<'_>, b: &InputNode<'_>) -> bool {
    match (a, b) {
        (InputNode::Null, InputNode::Null) => true,
        (InputNode::Bool(a), InputNode::Bool(b)) => a == b,
        (InputNode::Number(a), InputNode::Number(b)) => jsonschema::json::cmp::equal_numbers(a, b),
        (InputNode::String(a), InputNode::String(b)) => a == b,
        (InputNode::Array(a), InputNode::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        (InputNode::Object(a), InputNode::Object(b)) => {
            if a.len() != b.len() {
                return false;
            }
            let (left, right) = (sorted_names(a), sorted_names(b));
            left.iter()
                .zip(&right)
                .all(|((name, at), (other, other_at))| {
                    name == other && same(&a[*at].1, &b[*other_at].1)
                })
        }
        _ => false,
    }
}

/// An object's member names, sorted, each with where it is.
fn sorted_names<'n>(members: &'n [(Cow<'_, str>, InputNode<'_>)]) -> Vec<(&'n str, usize)> {
    let mut sorted: Vec<(&str, usize)> = members
        .iter()
        .enumerate()
        .map(|(at, (name, _))| (name.as_ref(), at))
        .collect();
    sorted.sort_unstable();
    sorted
}

/// A hash of `node` under which equal values (as [`same`] compares) fall together: numbers by
/// their exact integer value where they have one (so `1` and `1.0` meet, and large distinct
/// integers do not), members in any order.
fn hash(state: &std::hash::RandomState, node: &InputNode<'_>) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut hasher = state.build_hasher();
    match node {
        InputNode::Null => 0u8.hash(&mut hasher),
        InputNode::Bool(value) => (1u8, value).hash(&mut hasher),
        InputNode::Number(number) => {
            2u8.hash(&mut hasher);
            if let Some(value) = number.as_i64() {
                i128::from(value).hash(&mut hasher);
            } else if let Some(value) = number.as_u64() {
                i128::from(value).hash(&mut hasher);
            } else if let Some(value) = number.as_f64() {
                // Integral floats within i128's range hash as those integers (`-0.0` as 0).
                if value.fract() == 0.0 && value.abs() < 1.0e38 {
                    (value as i128).hash(&mut hasher);
                } else {
                    value.to_bits().hash(&mut hasher);
                }
            }
        }
        InputNode::String(text) => (3u8, text.as_ref()).hash(&mut hasher),
        InputNode::Array(items) => {
            (4u8, items.len()).hash(&mut hasher);
            for item in items {
                hash(state, item).hash(&mut hasher);
            }
        }
        InputNode::Object(members) => {
            (5u8, members.len()).hash(&mut hasher);
            let mut sum = 0u64;
            for (name, value) in members.iter() {
                sum = sum.wrapping_add(state.hash_one((name.as_ref(), hash(state, value))));
            }
            sum.hash(&mut hasher);
        }
    }
    hasher.finish()
}
