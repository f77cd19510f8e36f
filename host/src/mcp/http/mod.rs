//! MCP over streamable HTTP: a session per `Mcp-Session-Id`, bearer tokens, a cap on open
//! sessions, an idle timeout, bounded request bodies, and `Host`/`Origin` validation.

mod auth;
mod body;
pub(in crate::mcp) mod gate;
mod intake;
mod options;
mod serve;
mod service;
mod sessions;

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

pub use options::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_REQUEST_MEMORY,
    DEFAULT_MAX_SESSIONS, HttpOptions,
};
pub use serve::{serve_http, serve_http_with_shutdown};
pub use service::McpHttpService;

/// The body of every response: a refusal, or what rmcp answers.
type Body = BoxBody<Bytes, Infallible>;
