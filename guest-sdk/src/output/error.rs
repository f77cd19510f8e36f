//! How a method's error becomes a [`ToolError`] (tools) or a [`RequestError`] (resources and
//! prompts), decided by the error's type: kept when it is already one, otherwise its message
//! with every cause.

use std::fmt::Display;

use super::Is;
use crate::content::RequestError;
use crate::tool::ToolError;

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

    /// `InvalidArgument` with the error's message and its causes.
    #[allow(clippy::unused_self)]
    pub fn request_error<E: std::ops::Deref<Target = D>, D: std::error::Error + ?Sized>(
        &self,
        error: E,
    ) -> RequestError {
        RequestError::InvalidArgument(error_chain(&*error))
    }
}

impl<E: Display> ErrorIsDisplay for &Is<E> {
    fn __llm_worker_error(&self) -> DisplayTag {
        DisplayTag
    }
}

/// Picked for `RequestError` (a resource's or a prompt's): kept as it is.
pub trait ErrorIsRequestError {
    /// The tag.
    fn __llm_worker_error(&self) -> RequestErrorTag;
}

impl ErrorIsRequestError for &&&Is<RequestError> {
    fn __llm_worker_error(&self) -> RequestErrorTag {
        RequestErrorTag
    }
}

/// The error is a [`RequestError`].
pub struct RequestErrorTag;

impl RequestErrorTag {
    /// The error as it is.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub fn request_error(&self, error: RequestError) -> RequestError {
        error
    }

    /// A tool that fails with a `RequestError`: what was not found or did not fit is an
    /// invalid argument.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub fn tool_error(&self, error: RequestError) -> ToolError {
        match error {
            RequestError::NotFound(text) | RequestError::InvalidArgument(text) => {
                ToolError::InvalidArgument(text)
            }
            RequestError::Internal(text) => ToolError::Internal(text),
        }
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

    /// A resource or a prompt that fails with a `ToolError`: kept as a bug when it is one,
    /// otherwise an invalid argument with the text.
    #[allow(clippy::unused_self)]
    #[must_use]
    pub fn request_error(&self, error: ToolError) -> RequestError {
        match error {
            ToolError::InvalidArgument(text) | ToolError::ExecutionFailed(text) => {
                RequestError::InvalidArgument(text)
            }
            ToolError::Internal(text) => RequestError::Internal(text),
        }
    }
}

impl StdErrorTag {
    /// `ExecutionFailed` with the error's message and its causes, joined by `": "`.
    #[allow(clippy::unused_self)]
    pub fn tool_error<E: std::error::Error>(&self, error: E) -> ToolError {
        ToolError::ExecutionFailed(error_chain(&error))
    }

    /// `InvalidArgument` with the error's message and its causes.
    #[allow(clippy::unused_self)]
    pub fn request_error<E: std::error::Error>(&self, error: E) -> RequestError {
        RequestError::InvalidArgument(error_chain(&error))
    }
}

impl DisplayTag {
    /// `ExecutionFailed` with the error's alternate (`{:#}`) text.
    #[allow(clippy::unused_self)]
    pub fn tool_error<E: Display>(&self, error: E) -> ToolError {
        ToolError::ExecutionFailed(format!("{error:#}"))
    }

    /// `InvalidArgument` with the error's alternate (`{:#}`) text.
    #[allow(clippy::unused_self)]
    pub fn request_error<E: Display>(&self, error: E) -> RequestError {
        RequestError::InvalidArgument(format!("{error:#}"))
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
