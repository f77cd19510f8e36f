//! Asking the client from a running tool: a person through a form ([`elicit`]), the client's
//! model ([`sample`]) and the client's [`roots`]. The host answers, within the operator's
//! policy; natively (in unit tests) there is no one to ask, and every question fails with
//! [`QuestionError::Unsupported`].
//!
//! The questions are `async`: while one waits for its answer, the plugin's other calls run.
//!
//! Each question has a `key` (1 to 64 characters of `A-Z a-z 0-9 _ -`), unique within the
//! call: it names the question to the client. A tool that asks must ask the same questions,
//! under the same keys, for the same input and answers (the contract's interface `client` says
//! why: over MCP 2026-07-28 the tool runs again with the answers so far): decide what to ask
//! from the input and earlier answers only. There, a question not answered yet fails with
//! [`QuestionError::Deferred`]: return promptly (propagate it with `?`); its answer comes with
//! the next run.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::question::{ElicitationAnswer, QuestionError, Root, SamplingAnswer, SamplingRequest};

/// What the user did with a form asked with [`elicit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elicitation<T> {
    /// Submitted it: the form's content.
    Accept(T),
    /// Said no.
    Decline,
    /// Dismissed it without choosing.
    Cancel,
}

/// Asks the user for a `T`, through a form the client shows with `message`; `key` names the
/// question (see the module's documentation).
///
/// The host shows the message under a line of its own naming the plugin and the tool, and
/// refuses ([`QuestionError::Denied`]) a message of more than 20 lines or 2,000 characters, one
/// holding control characters other than newline and tab or bidirectional formatting
/// characters, or one imitating that line. It checks the answer against the form before the
/// plugin sees it.
///
/// The form's fields are `T`'s: a struct of strings, numbers, integers, booleans and enums of
/// strings (each optionally an `Option`, or with a `#[serde(default)]`), described with doc
/// comments.
///
/// # Errors
/// The host's [`QuestionError`]; [`QuestionError::Failed`] with serde's message when the
/// content the client sent is not a `T`; [`QuestionError::Unsupported`] when `T`'s schema is
/// not an object (use a struct) or outside a plugin host.
pub async fn elicit<T: DeserializeOwned + JsonSchema>(
    key: &str,
    message: &str,
) -> Result<Elicitation<T>, QuestionError> {
    let schema = form_schema(schemars::schema_for!(T).to_value()).ok_or_else(|| {
        QuestionError::Unsupported(format!(
            "a form is a JSON object of fields, but `{}` has no object schema; ask for a struct",
            std::any::type_name::<T>()
        ))
    })?;
    Ok(match elicit_with_schema(key, message, schema).await? {
        ElicitationAnswer::Accept(content) => {
            let value = serde_json::from_value(Value::Object(content)).map_err(|error| {
                QuestionError::Failed(format!(
                    "the client's answer does not fit the form: {error}"
                ))
            })?;
            Elicitation::Accept(value)
        }
        ElicitationAnswer::Decline => Elicitation::Decline,
        ElicitationAnswer::Cancel => Elicitation::Cancel,
    })
}

/// Asks the user to fill a form of `requested_schema` (a flat JSON object schema: strings,
/// numbers, integers, booleans, enums), showing `message`; `key` names the question.
///
/// # Errors
/// The host's [`QuestionError`]; [`QuestionError::Failed`] when the answer is not a JSON
/// object; [`QuestionError::Unsupported`] outside a plugin host.
pub async fn elicit_with_schema(
    key: &str,
    message: &str,
    requested_schema: Value,
) -> Result<ElicitationAnswer, QuestionError> {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::export::bindings::llm_worker::tool::client;
        let answer = client::elicit(
            key.to_owned(),
            message.to_owned(),
            requested_schema.to_string(),
        )
        .await?;
        Ok(match answer {
            client::ElicitationAnswer::Accept(text) => {
                let content: Map<String, Value> = serde_json::from_str(&text).map_err(|error| {
                    QuestionError::Failed(format!(
                        "the client's answer is not a JSON object: {error}"
                    ))
                })?;
                ElicitationAnswer::Accept(content)
            }
            client::ElicitationAnswer::Decline => ElicitationAnswer::Decline,
            client::ElicitationAnswer::Cancel => ElicitationAnswer::Cancel,
        })
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (key, message, requested_schema);
        Err(outside_a_host("elicitation"))
    }
}

/// Asks the client's model to say something; `key` names the question.
///
/// # Errors
/// The host's [`QuestionError`] (sampling is off unless the operator's policy allows it);
/// [`QuestionError::Unsupported`] outside a plugin host.
pub async fn sample(key: &str, request: SamplingRequest) -> Result<SamplingAnswer, QuestionError> {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::export::bindings::llm_worker::tool::client;
        Ok(client::sample(key.to_owned(), request.into()).await?.into())
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (key, request);
        Err(outside_a_host("sampling"))
    }
}

/// The client's roots: the directories and files it works in; `key` names the question.
///
/// # Errors
/// The host's [`QuestionError`] (roots are off unless the operator's policy allows them);
/// [`QuestionError::Unsupported`] outside a plugin host.
pub async fn roots(key: &str) -> Result<Vec<Root>, QuestionError> {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::export::bindings::llm_worker::tool::client;
        Ok(client::roots(key.to_owned())
            .await?
            .into_iter()
            .map(Into::into)
            .collect())
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = key;
        Err(outside_a_host("roots"))
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn outside_a_host(what: &str) -> QuestionError {
    QuestionError::Unsupported(format!(
        "{what} needs a client, and this code runs outside a plugin host (natively, as in a \
         unit test); test the tool's other paths natively, and this one through the host"
    ))
}

/// A form's schema from a type's: the root object with its `$defs` inlined, optional fields
/// (`"type": ["string", "null"]`) written as their type, and no `$schema` or `title` at the
/// root. `None` when the root is not an object.
fn form_schema(schema: Value) -> Option<Value> {
    let Value::Object(mut root) = schema else {
        return None;
    };
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let defs = root.remove("$defs").and_then(|defs| match defs {
        Value::Object(defs) => Some(defs),
        _ => None,
    });
    root.remove("$schema");
    root.remove("title");
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        for field in properties.values_mut() {
            flatten_field(field, defs.as_ref());
        }
    }
    Some(Value::Object(root))
}

fn flatten_field(field: &mut Value, defs: Option<&Map<String, Value>>) {
    let Value::Object(object) = field else {
        return;
    };
    // `$ref` to a definition (an enum): the definition itself, keeping the field's own keys.
    if let Some(Value::String(reference)) = object.remove("$ref") {
        let name = reference.strip_prefix("#/$defs/").unwrap_or(&reference);
        if let Some(Value::Object(definition)) = defs.and_then(|defs| defs.get(name)) {
            for (key, value) in definition {
                object.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
    }
    // `["string", "null"]`: the field may be left out, which `required` already says.
    if let Some(Value::Array(types)) = object.get("type") {
        let kinds: Vec<&Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .collect();
        if let [single] = kinds.as_slice() {
            let single = (*single).clone();
            object.insert("type".to_owned(), single);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum Size {
        Small,
        Large,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Order {
        /// How many.
        count: u32,
        note: Option<String>,
        size: Size,
    }

    #[test]
    fn a_form_is_a_flat_object_of_the_types_fields() {
        let schema = form_schema(schemars::schema_for!(Order).to_value());
        let schema = schema.unwrap_or_default();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["note"]["type"], "string");
        assert_eq!(
            schema["properties"]["size"]["enum"],
            json!(["Small", "Large"])
        );
        assert_eq!(schema["properties"]["count"]["description"], "How many.");
        assert!(schema.get("$defs").is_none() && schema.get("$schema").is_none());
        assert_eq!(form_schema(json!({"type": "string"})), None);
    }

    #[test]
    fn natively_there_is_no_one_to_ask() {
        let unsupported = |e: &QuestionError| matches!(e, QuestionError::Unsupported(t) if t.contains("outside a plugin host"));
        use crate::block_on;
        assert!(block_on(elicit::<Order>("order", "size?")).is_err_and(|e| unsupported(&e)));
        assert!(block_on(sample("s", SamplingRequest::default())).is_err_and(|e| unsupported(&e)));
        assert!(block_on(roots("r")).is_err_and(|e| unsupported(&e)));
        let not_a_form = block_on(elicit::<String>("name", "name?"));
        assert!(matches!(not_a_form, Err(QuestionError::Unsupported(t)) if t.contains("struct")));
    }
}
