//! How a `#[tool]` method's return value becomes the tool's output, decided by the value's
//! type (not by how the type is spelled in the signature).
//!
//! | the method returns                                   | output                        |
//! |------------------------------------------------------|-------------------------------|
//! | `Result<T, E>` (any alias: `anyhow::Result`, …) `Err` | a [`ToolError`]: `E` itself if it is a `ToolError`, else `ExecutionFailed` with the whole cause chain |
//! | `String`, `&str`, `Cow<str>`, `Box<str>`, `Arc<str>`  | the text as it is             |
//! | `T: Serialize + JsonSchema`                          | JSON; an object type also gives the tool its output schema |
//! | `T: Serialize`                                       | JSON                          |
//! | anything else with `Debug`                           | `format!("{:?}", value)`      |
//!
//! A non-finite float (NaN, infinity) in a structured result is written as `null` by
//! serde_json, which its schema (`"type": "number"`) refuses: the host reports that as the
//! plugin breaking its output contract. Return an `Option<f64>` where a value may be missing.
//!
//! The same rules apply to the `T` of `Result<T, E>`.
//!
//! The dispatch is "autoref specialisation": generated code calls a method on several layers
//! of references to a type tag, and the compiler picks the impl with the fewest references
//! that applies. Everything here is used by generated code only.

use std::borrow::Cow;
use std::fmt::{Debug, Display};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::tool::ToolError;

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

// ---- Errors ----------------------------------------------------------------------------------

/// Picked for `ToolError`: kept as it is. Call `(&&&&Is::<E>::new()).__llm_worker_error()`.
pub trait ErrorIsToolError {
    /// The tag.
    fn __llm_worker_error(&self) -> ToolErrorTag;
}
/// Picked for `E: std::error::Error`: the message and every `source()`.
pub trait ErrorIsStdError {
    /// The tag.
    fn __llm_worker_error(&self) -> StdErrorTag;
}
/// Picked for `E: Display` (as `anyhow::Error`): the alternate form, `{:#}`, which shows the
/// whole chain for anyhow and is the plain text for most other types.
pub trait ErrorIsDisplay {
    /// The tag.
    fn __llm_worker_error(&self) -> DisplayTag;
}
/// Picked for anything else: `{:?}`.
pub trait ErrorIsDebug {
    /// The tag.
    fn __llm_worker_error(&self) -> DebugTag;
}

impl ErrorIsToolError for &&&Is<ToolError> {
    fn __llm_worker_error(&self) -> ToolErrorTag {
        ToolErrorTag
    }
}
impl<E: std::error::Error> ErrorIsStdError for &&Is<E> {
    fn __llm_worker_error(&self) -> StdErrorTag {
        StdErrorTag
    }
}
/// Picked for a boxed `dyn Error`, which does not implement `std::error::Error` itself: the
/// message and every `source()`, as for any other error.
pub trait ErrorIsBoxedError {
    /// The tag.
    fn __llm_worker_error(&self) -> BoxedErrorTag;
}

impl ErrorIsBoxedError for &&Is<Box<dyn std::error::Error>> {
    fn __llm_worker_error(&self) -> BoxedErrorTag {
        BoxedErrorTag
    }
}
impl ErrorIsBoxedError for &&Is<Box<dyn std::error::Error + Send>> {
    fn __llm_worker_error(&self) -> BoxedErrorTag {
        BoxedErrorTag
    }
}
impl ErrorIsBoxedError for &&Is<Box<dyn std::error::Error + Send + Sync>> {
    fn __llm_worker_error(&self) -> BoxedErrorTag {
        BoxedErrorTag
    }
}

/// The error is a boxed `dyn Error`.
pub struct BoxedErrorTag;

impl BoxedErrorTag {
    /// `ExecutionFailed` with the error's message and its causes, joined by `": "`.
    #[allow(clippy::unused_self)]
    pub fn tool_error<E: std::ops::Deref<Target = D>, D: std::error::Error + ?Sized>(
        &self,
        error: E,
    ) -> ToolError {
        ToolError::ExecutionFailed(error_chain(&*error))
    }
}

impl<E: Display> ErrorIsDisplay for &Is<E> {
    fn __llm_worker_error(&self) -> DisplayTag {
        DisplayTag
    }
}

/// The error is a [`ToolError`].
pub struct ToolErrorTag;
/// The error implements `std::error::Error`.
pub struct StdErrorTag;
/// The error implements `Display`.
pub struct DisplayTag;
/// The value implements `Debug` only.
pub struct DebugTag;

impl ToolErrorTag {
    /// The error as it is.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub fn tool_error(&self, error: ToolError) -> ToolError {
        error
    }
}

impl StdErrorTag {
    /// `ExecutionFailed` with the error's message and its causes, joined by `": "`.
    #[allow(clippy::unused_self)]
    pub fn tool_error<E: std::error::Error>(&self, error: E) -> ToolError {
        ToolError::ExecutionFailed(error_chain(&error))
    }
}

impl DisplayTag {
    /// `ExecutionFailed` with the error's alternate (`{:#}`) text.
    #[allow(clippy::unused_self)]
    pub fn tool_error<E: Display>(&self, error: E) -> ToolError {
        ToolError::ExecutionFailed(format!("{error:#}"))
    }
}

/// The message of `error` followed by each of its causes, `"outer: inner: root"`. A cause whose
/// text the message already ends with (errors that print their source) is not repeated.
pub fn error_chain<E: std::error::Error + ?Sized>(error: &E) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !line.is_empty() && !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
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

// ---- Descriptions ----------------------------------------------------------------------------

/// The description from a doc comment's pieces (each `#[doc = …]` attribute, in order): lines
/// of `///` comments, whole `/** */` blocks or `include_str!` texts.
///
/// Removes a `/** */` block's leading `*` column, the indentation common to all lines, and
/// blank lines at the start and end; keeps blank lines between paragraphs.
#[must_use]
pub fn doc_description(pieces: &[&str]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for piece in pieces {
        // `split`, not `lines`: an empty piece (a blank `///` line) is one empty line.
        let piece_lines: Vec<&str> = piece
            .split('\n')
            .map(|line| line.strip_suffix('\r').unwrap_or(line))
            .collect();
        // A `/** */` block whose continuation lines all start with `*` (after spaces).
        let starred = piece_lines.len() > 1
            && piece_lines
                .iter()
                .skip(1)
                .filter(|line| !line.trim().is_empty())
                .all(|line| line.trim_start().starts_with('*'));
        for (index, line) in piece_lines.iter().enumerate() {
            let line = if starred && index > 0 {
                let rest = line.trim_start();
                rest.strip_prefix('*').unwrap_or(rest)
            } else {
                line
            };
            lines.push(line.trim_end().to_owned());
        }
    }
    // Indentation in characters (a doc comment may be indented with wide spaces).
    let indent = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.chars().take_while(|c| c.is_whitespace()).count())
        .min()
        .unwrap_or(0);
    let lines: Vec<&str> = lines
        .iter()
        .map(|line| {
            let cut = line
                .char_indices()
                .nth(indent)
                .map_or(line.len(), |(at, _)| at);
            line[cut..].trim_end()
        })
        .collect();
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |e| e + 1);
    lines[start..end].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_comments_keep_paragraphs_and_lose_decoration() {
        assert_eq!(
            doc_description(&[" First line.", " Second.", "", " Para two."]),
            "First line.\nSecond.\n\nPara two."
        );
        assert_eq!(
            doc_description(&["\n * Block line.\n *\n * More.\n "]),
            "Block line.\n\nMore."
        );
        assert_eq!(
            doc_description(&[" Intro:", "", "     code();"]),
            "Intro:\n\n    code();"
        );
        assert_eq!(doc_description(&["# Title\n\nBody\n"]), "# Title\n\nBody");
        assert_eq!(doc_description(&[]), "");
        assert_eq!(doc_description(&[" Intro", "\u{3000}詳細"]), "Intro\n詳細");
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl Display for Outer {
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
