//! Serving tools over the [Model Context Protocol](https://modelcontextprotocol.io) (feature
//! `mcp`; streamable HTTP with the feature `mcp-http`).
//!
//! A [`ToolCatalog`] says what is served; every MCP session registers the catalog's tools
//! afresh (new plugin instances, so sessions never see each other's state) and keeps them
//! until it ends. [`serve_stdio`] serves one session over stdin and stdout;
//! [`serve_http`] serves many clients over streamable HTTP.
//!
//! ```no_run
//! use llm_worker::mcp::{McpOptions, ToolCatalog, serve_stdio};
//! use llm_worker::PluginHost;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let host = PluginHost::new()?;
//! let plugins = host.load_dir("plugins")?;
//! let catalog = ToolCatalog::from_plugins(&plugins.plugins);
//! serve_stdio(catalog, McpOptions::new("my-tools", "1.0.0")).await?;
//! # Ok(())
//! # }
//! ```

mod catalog;
#[cfg(feature = "mcp-http")]
mod http;
mod session;
mod stdio;

pub use catalog::{ToolCatalog, ToolGroup};
#[cfg(feature = "mcp-http")]
pub use http::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SESSIONS, HttpOptions, serve_http,
};

use std::sync::Arc;

/// What the server says about itself, and how it lists tools.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpOptions {
    /// The server's name in `serverInfo`.
    pub name: String,
    /// The server's version in `serverInfo`.
    pub version: String,
    /// Instructions for the client (shown to the model by some clients).
    pub instructions: Option<String>,
    /// Most tools in one page of `tools/list`; the rest follow with a cursor. Default 100.
    pub page_size: usize,
}

impl McpOptions {
    /// A server called `name` at `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            instructions: None,
            page_size: 100,
        }
    }

    /// Sets the instructions.
    #[must_use]
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Sets the page size of `tools/list` (at least 1).
    #[must_use]
    pub fn page_size(mut self, tools: usize) -> Self {
        self.page_size = tools.max(1);
        self
    }
}

/// Why serving stopped or could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The transport failed (stdio closed, a socket error …).
    #[error("MCP transport error: {0}")]
    Io(#[from] std::io::Error),
    /// The MCP session could not start or failed.
    #[error("MCP session error: {0}")]
    Session(String),
    /// An HTTP server off the loopback interface without bearer tokens.
    #[error(
        "refusing to serve MCP on {address} without authentication: anyone who can reach it \
         could run the tools; give bearer tokens (`HttpOptions::tokens`, or `--token-file FILE` \
         with one token per line), or serve on 127.0.0.1"
    )]
    NoAuthentication {
        /// The address.
        address: std::net::SocketAddr,
    },
}

/// Serves `catalog` over stdin and stdout: one session, until the client disconnects.
pub async fn serve_stdio(catalog: ToolCatalog, options: McpOptions) -> Result<(), McpError> {
    let session = session::McpSession::new(&catalog, Arc::new(options), None);
    stdio::serve_lines(session, tokio::io::stdin(), tokio::io::stdout()).await
}
