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
mod standing;

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

/// The share of the server's memory for requests that the request of `extensions` holds (for
/// what its parsed JSON takes), if it came over HTTP: whoever keeps the request's arguments
/// past its answer (a task, for its life) keeps this too, so that they stay counted.
pub(in crate::mcp) fn request_share(
    extensions: &rmcp::model::Extensions,
) -> Option<impl Send + Sync + 'static> {
    share_of(extensions)
}

/// Makes the request of `extensions` hold `bytes` more of the server's memory for requests,
/// for what its answer copies from what the server keeps (a task's result, sent again for each
/// poll): refused past its client's part, with why. Nothing to count for other transports.
pub(in crate::mcp) fn charge_answer(
    extensions: &rmcp::model::Extensions,
    bytes: usize,
) -> Result<(), String> {
    share_of(extensions).map_or(Ok(()), |share| share.charge(bytes))
}

fn share_of(extensions: &rmcp::model::Extensions) -> Option<intake::RequestShare> {
    extensions
        .get::<http::request::Parts>()?
        .extensions
        .get::<intake::RequestShare>()
        .cloned()
}
