//! How a `#[tool]` method's return value becomes the tool's output, decided by the value's
//! type (not by how the type is spelled in the signature).
//!
//! | the method returns                                   | output                        |
//! |------------------------------------------------------|-------------------------------|
//! | `Result<T, E>` (any alias: `anyhow::Result`, …) `Err` | a [`ToolError`]: `E` itself if it is a `ToolError`, else `ExecutionFailed` with the whole cause chain |
//! | [`Content`], `Vec<Content>`, [`ToolOutput`]            | those blocks (`call`); their text (`execute`) |
//! | `String`, `&str`, `Cow<str>`, `Box<str>`, `Arc<str>`  | the text as it is             |
//! | `T: Serialize + JsonSchema`                          | JSON; an object type also gives the tool its output schema, and `call` returns it as the structured value |
//! | `T: Serialize`                                       | JSON                          |
//! | anything else with `Debug`                           | `format!("{:?}", value)`      |
//!
//! A non-finite float (NaN, infinity) in a structured result is written as `null` by
//! serde_json, which its schema (`"type": "number"`) refuses: the host reports that as the
//! plugin breaking its output contract. Return an `Option<f64>` where a value may be missing.
//!
//! The same rules apply to the `T` of `Result<T, E>`.
//!
//! Each tag has two conversions: `output`, the text [`Tool::execute`](crate::Tool::execute)
//! returns, and `content`, the [`ToolOutput`] of [`Tool::call`](crate::Tool::call). What
//! resources and prompts return is converted by [`catalog`]'s traits.
//!
//! The dispatch is "autoref specialisation": generated code calls a method on several layers
//! of references to a type tag, and the compiler picks the impl with the fewest references
//! that applies. Everything here is used by generated code only.

use std::borrow::Cow;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

pub use crate::content::{
    Completion, CompletionRef, Content, Prompt, PromptArgument, PromptMeta, RequestError,
    ResourceContents, ResourceMeta, ResourceTemplate, ToolOutput,
};
pub use crate::export::block_on;
use crate::tool::ToolError;

pub mod catalog;
mod doc;
mod error;

pub use catalog::*;
pub use doc::{doc_description, optional_description};
pub use error::*;

/// A type tag: the type `T`, with no value.
pub struct Is<T>(PhantomData<fn() -> T>);

impl<T> Is<T> {
    /// The tag of `T`.
    #[must_use]
    pub const fn new() -> Self {
        Self(PhantomData)
    }

    /// The tag of the type of `_value`.
    #[must_use]
    pub const fn of(_value: &T) -> Self {
        Self(PhantomData)
    }
}

impl<T> Clone for Is<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Is<T> {}

impl<T> Default for Is<T> {
    fn default() -> Self {
        Self::new()
    }
}

// ---- Result or plain value -------------------------------------------------------------------

/// Picked for `Result<T, E>`: call `(&Is::<R>::new()).__llm_worker_split()`.
pub trait SplitResult {
    /// What the return type's success value and error are.
    type Tag;
    /// The tag.
    fn __llm_worker_split(&self) -> Self::Tag;
}

/// Picked for any other type.
pub trait SplitPlain {
    /// The tag.
    type Tag;
    /// The tag.
    fn __llm_worker_split(&self) -> Self::Tag;
}

impl<T, E> SplitResult for Is<Result<T, E>> {
    type Tag = ResultTag<T, E>;
    fn __llm_worker_split(&self) -> ResultTag<T, E> {
        ResultTag(PhantomData)
    }
}

impl<R> SplitPlain for &Is<R> {
    type Tag = PlainTag<R>;
    fn __llm_worker_split(&self) -> PlainTag<R> {
        PlainTag(PhantomData)
    }
}

/// The return type is `Result<T, E>`.
pub struct ResultTag<T, E>(PhantomData<fn() -> (T, E)>);

impl<T, E> ResultTag<T, E> {
    /// The value as a `Result`.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn result(&self, value: Result<T, E>) -> Result<T, E> {
        value
    }

    /// The tag of the success type.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub const fn ok(&self) -> Is<T> {
        Is::new()
    }
}

/// The return type is a plain value, which never fails.
pub struct PlainTag<T>(PhantomData<fn() -> T>);

impl<T> PlainTag<T> {
    /// The value as a `Result` that is always `Ok`.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn result(&self, value: T) -> Result<T, std::convert::Infallible> {
        Ok(value)
    }

    /// The tag of the value's type.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub const fn ok(&self) -> Is<T> {
        Is::new()
    }
}

// ---- Success values --------------------------------------------------------------------------

/// Text a tool returns as it is.
pub trait ToolText {
    /// The text.
    fn into_text(self) -> String;
}

impl ToolText for String {
    fn into_text(self) -> String {
        self
    }
}
impl ToolText for &str {
    fn into_text(self) -> String {
        self.to_owned()
    }
}
impl ToolText for &String {
    fn into_text(self) -> String {
        self.clone()
    }
}
impl ToolText for Cow<'_, str> {
    fn into_text(self) -> String {
        self.into_owned()
    }
}
impl ToolText for Box<str> {
    fn into_text(self) -> String {
        self.into()
    }
}
impl ToolText for Arc<str> {
    fn into_text(self) -> String {
        self.as_ref().to_owned()
    }
}
impl ToolText for Rc<str> {
    fn into_text(self) -> String {
        self.as_ref().to_owned()
    }
}

/// Content blocks a tool returns as they are: [`Content`], `Vec<Content>`, [`ToolOutput`].
pub trait ToolContent {
    /// The blocks as a tool's output.
    fn into_output(self) -> ToolOutput;
}

impl ToolContent for Content {
    fn into_output(self) -> ToolOutput {
        ToolOutput::content(vec![self])
    }
}
impl ToolContent for Vec<Content> {
    fn into_output(self) -> ToolOutput {
        ToolOutput::content(self)
    }
}
impl ToolContent for ToolOutput {
    fn into_output(self) -> ToolOutput {
        self
    }
}

/// Picked for content blocks. Call `(&&&&&Is::<T>::new()).__llm_worker_output()`.
pub trait OutputIsContent {
    /// The tag.
    fn __llm_worker_output(&self) -> ContentTag;
}

impl<T: ToolContent> OutputIsContent for &&&&Is<T> {
    fn __llm_worker_output(&self) -> ContentTag {
        ContentTag
    }
}

/// The value is content blocks.
pub struct ContentTag;

impl ContentTag {
    /// The blocks' text ([`ToolOutput::to_text`]); an output marked as an error
    /// (`is_error`) is `ExecutionFailed` with that text.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn output<T: ToolContent>(&self, value: T) -> Result<String, ToolError> {
        let output = value.into_output();
        if output.is_error {
            return Err(ToolError::ExecutionFailed(output.to_text()));
        }
        Ok(output.to_text())
    }

    /// The blocks as they are.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn content<T: ToolContent>(&self, value: T) -> Result<ToolOutput, ToolError> {
        Ok(value.into_output())
    }

    /// Content has no output schema.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub const fn output_schema<T>(&self, _type: Is<T>) -> Option<Value> {
        None
    }
}

/// Picked for text. Call `(&&&&Is::<T>::new()).__llm_worker_output()`.
pub trait OutputIsText {
    /// The tag.
    fn __llm_worker_output(&self) -> TextTag;
}
/// Picked for `Serialize + JsonSchema`.
pub trait OutputIsJsonWithSchema {
    /// The tag.
    fn __llm_worker_output(&self) -> JsonSchemaTag;
}
/// Picked for `Serialize`.
pub trait OutputIsJson {
    /// The tag.
    fn __llm_worker_output(&self) -> JsonTag;
}
/// Picked for anything else.
pub trait OutputIsDebug {
    /// The tag.
    fn __llm_worker_output(&self) -> DebugTag;
}

impl<T: ToolText> OutputIsText for &&&Is<T> {
    fn __llm_worker_output(&self) -> TextTag {
        TextTag
    }
}
impl<T: Serialize + JsonSchema> OutputIsJsonWithSchema for &&Is<T> {
    fn __llm_worker_output(&self) -> JsonSchemaTag {
        JsonSchemaTag
    }
}
impl<T: Serialize> OutputIsJson for &Is<T> {
    fn __llm_worker_output(&self) -> JsonTag {
        JsonTag
    }
}
impl<T> OutputIsDebug for Is<T> {
    fn __llm_worker_output(&self) -> DebugTag {
        DebugTag
    }
}
impl<T> ErrorIsDebug for Is<T> {
    fn __llm_worker_error(&self) -> DebugTag {
        DebugTag
    }
}

/// The value is text.
pub struct TextTag;
/// The value is `Serialize + JsonSchema`.
pub struct JsonSchemaTag;
/// The value is `Serialize`.
pub struct JsonTag;

impl TextTag {
    /// The text.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn output<T: ToolText>(&self, value: T) -> Result<String, ToolError> {
        Ok(value.into_text())
    }

    /// One text block.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn content<T: ToolText>(&self, value: T) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(value.into_text()))
    }

    /// Text has no output schema.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub const fn output_schema<T>(&self, _type: Is<T>) -> Option<Value> {
        None
    }
}

impl JsonSchemaTag {
    /// The value as JSON.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn output<T: Serialize>(&self, value: T) -> Result<String, ToolError> {
        json_text(&value)
    }

    /// When `T`'s schema is an object (the tool's output schema): the structured value, and
    /// its JSON text (fields in declaration order) as the content, which `execute` returns and
    /// older MCP clients read; otherwise one block of JSON text.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn content<T: Serialize + JsonSchema>(&self, value: T) -> Result<ToolOutput, ToolError> {
        if self.output_schema(Is::<T>::new()).is_none() {
            return json_text(&value).map(ToolOutput::text);
        }
        let structured = serde_json::to_value(&value).map_err(|error| {
            ToolError::Internal(format!(
                "the tool's result cannot be written as JSON: {error}"
            ))
        })?;
        Ok(ToolOutput {
            content: vec![crate::Content::Text(json_text(&value)?)],
            structured: Some(structured),
            is_error: false,
        })
    }

    /// `T`'s schema, if it describes a JSON object (MCP's `outputSchema` must).
    #[allow(clippy::unused_self)]
    #[must_use]
    pub fn output_schema<T: JsonSchema>(&self, _type: Is<T>) -> Option<Value> {
        let schema = schemars::schema_for!(T).to_value();
        let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
        is_object.then(|| strip_root_title(schema))
    }
}

impl JsonTag {
    /// The value as JSON.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn output<T: Serialize>(&self, value: T) -> Result<String, ToolError> {
        json_text(&value)
    }

    /// One block of JSON text.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn content<T: Serialize>(&self, value: T) -> Result<ToolOutput, ToolError> {
        json_text(&value).map(ToolOutput::text)
    }

    /// Without `JsonSchema` there is no output schema.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub const fn output_schema<T>(&self, _type: Is<T>) -> Option<Value> {
        None
    }
}

/// A `Debug` value, as the spec formats values: `format!("{:?}", value)`.
#[diagnostic::on_unimplemented(
    message = "a #[tool] method's return value `{Self}` cannot become the tool's output",
    label = "not text, `Serialize`, or `Debug`",
    note = "return a `String`, a type that implements `serde::Serialize` (JSON), or one that \
            implements `Debug`"
)]
pub trait DebugOutput: Debug {}
impl<T: Debug + ?Sized> DebugOutput for T {}

impl DebugTag {
    /// `format!("{:?}", value)`.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn output<T: DebugOutput>(&self, value: T) -> Result<String, ToolError> {
        Ok(format!("{value:?}"))
    }

    /// One block of `format!("{:?}", value)`.
    #[allow(clippy::unused_self, clippy::missing_errors_doc)]
    pub fn content<T: DebugOutput>(&self, value: T) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("{value:?}")))
    }

    /// `Debug` text has no output schema.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub const fn output_schema<T>(&self, _type: Is<T>) -> Option<Value> {
        None
    }

    /// `ExecutionFailed` with `format!("{:?}", error)`.
    #[allow(clippy::unused_self)]
    pub fn tool_error<E: DebugOutput>(&self, error: E) -> ToolError {
        ToolError::ExecutionFailed(format!("{error:?}"))
    }

    /// `InvalidArgument` with `format!("{:?}", error)`.
    #[allow(clippy::unused_self)]
    pub fn request_error<E: DebugOutput>(&self, error: E) -> RequestError {
        RequestError::InvalidArgument(format!("{error:?}"))
    }
}

/// The tool's arguments from its input: a JSON object (serde would also take an array, by
/// position, which a model should not rely on).
///
/// # Errors
/// `InvalidArgument` with serde's message, which names a missing, unknown or mistyped field.
pub fn arguments<T: serde::de::DeserializeOwned>(input_json: &str) -> Result<T, ToolError> {
    let trimmed = input_json.trim_start_matches(['\u{feff}', ' ', '\t', '\n', '\r']);
    if !trimmed.starts_with('{') {
        return Err(ToolError::InvalidArgument(
            "the input must be a JSON object of the tool's arguments, such as {}".into(),
        ));
    }
    serde_json::from_str(trimmed).map_err(|error| ToolError::InvalidArgument(error.to_string()))
}

fn json_text<T: Serialize + ?Sized>(value: &T) -> Result<String, ToolError> {
    serde_json::to_string(value).map_err(|error| {
        ToolError::Internal(format!(
            "the tool's result cannot be written as JSON: {error}"
        ))
    })
}

/// A schema without its root `title` (a Rust type name the model should not see).
#[must_use]
pub fn strip_root_title(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot load the index")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn error_chains_keep_every_cause() {
        let error = Outer(std::io::Error::other("disk full"));
        assert_eq!(error_chain(&error), "cannot load the index: disk full");
    }
}
