//! Parsing an input into [`InputNode`]s with serde_json's parser, borrowing each string from
//! the input text unless it has escapes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::InputNode;

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
                Ok(InputNode::Object(super::Members::new(members)))
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}
