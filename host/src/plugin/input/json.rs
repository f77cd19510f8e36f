//! [`InputNode`] as a JSON representation jsonschema validates (its [`Json`] abstraction), and
//! as a `serde_json::Value` for error messages.

use std::borrow::Cow;

use jsonschema::JsonType;
use jsonschema::json::{Array, Json, Node, NodeIdentity, Object};
use serde_json::{Map, Number, Value};

use super::InputNode;

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
