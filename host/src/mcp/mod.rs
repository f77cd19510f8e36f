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

#[cfg(feature = "mcp-http")]
mod access;
mod admission;
mod ask;
mod audit;
mod catalog;
mod content;
#[cfg(feature = "mcp-http")]
mod http;
#[cfg(feature = "mcp-http")]
mod identity;
mod input_required;
#[cfg(feature = "metrics")]
mod metrics;
mod notices;
#[cfg(feature = "oauth")]
mod oauth;
mod offerings;
#[cfg(feature = "mcp-http")]
pub(crate) mod quota;
mod reports;
mod request;
mod session;
mod std_streams;
mod stdio;
mod tasks;
#[cfg(feature = "mcp-http")]
mod token;
mod tools;
#[cfg(feature = "otel")]
mod trace;
mod watch;

#[cfg(feature = "mcp-http")]
pub use access::{ACCESS_FILE, AccessPolicy, Quota};
pub use audit::AuditLog;
pub use catalog::{ToolCatalog, ToolGroup};
#[cfg(feature = "mcp-http")]
pub use http::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_REQUEST_MEMORY,
    DEFAULT_MAX_SESSIONS, HttpOptions, McpHttpService, serve_http, serve_http_with_shutdown,
};
#[cfg(feature = "mcp-http")]
pub use identity::BearerToken;
#[cfg(feature = "metrics")]
pub use metrics::{MAX_METRICS_CONNECTIONS, METRICS_CONTENT_TYPE, Metrics, serve_metrics};
#[cfg(feature = "oauth")]
pub use oauth::{
    ALGORITHMS, DEFAULT_FETCH_TIMEOUT, DEFAULT_KEYS_MAX_AGE, DEFAULT_LEEWAY, DEFAULT_MIN_REFRESH,
    IntrospectionOptions, IssuerOptions, OAuthOptions,
};
#[cfg(feature = "mcp-http")]
pub use quota::QUOTA_EXCEEDED;
pub use session::McpServer;
#[cfg(feature = "mcp-http")]
pub use token::{
    MIN_TOKEN_CHARS, default_token_path, persistent_token, read_named_token_file,
    read_request_state_key, read_secret_file, read_token_file,
};
pub use watch::{DirSnapshot, DirWatcher, WATCH_INTERVAL};

use std::sync::Arc;

use crate::hook::{PostToolCallHook, PreToolCallHook};

/// Most resources one MCP session may subscribe to (`resources/subscribe`).
pub const MAX_SUBSCRIPTIONS: usize = 1000;

/// The longest string id or progress token a request may carry to be taken (stdio) or used
/// (progress): every answer or report copies it, and those waiting for a client that does not
/// read would hold megabytes each.
pub(crate) const MAX_ID_BYTES: usize = 256;

/// Whether `id` is a string longer than [`MAX_ID_BYTES`].
pub(crate) fn is_long_id(id: &rmcp::model::NumberOrString) -> bool {
    matches!(id, rmcp::model::NumberOrString::String(text) if text.len() > MAX_ID_BYTES)
}

/// What the server says about itself, how it lists tools, and the hooks every call of every
/// session goes through.
#[derive(Clone)]
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
    /// Run before every `tools/call` of every session, in order (the spec's pre-call hooks,
    /// meaning what they mean on a [`crate::Worker`]; resource reads, prompt renderings and
    /// completions are not tool calls and do not pass through them): a hook may rewrite the
    /// input; `Skip(reason)` answers the call with a tool error giving the reason; `Abort`
    /// fails the request with the hook's reason.
    pub pre_hooks: Vec<Arc<dyn PreToolCallHook>>,
    /// Run after every `tools/call` of every session, in order: a hook sees the result (its
    /// text, blocks and structured value: [`crate::ToolResult`]) and may rewrite it; `Abort`
    /// fails the request with the hook's reason.
    pub post_hooks: Vec<Arc<dyn PostToolCallHook>>,
    /// Signs the request states of revision 2026-07-28's `input_required` answers (a tool's
    /// questions to the client). Replicas behind one balancer must share the key
    /// ([`request_state_key`](Self::request_state_key)); by default each process makes a
    /// random one.
    request_states: Option<Arc<rmcp::model::RequestStateCodec>>,
    /// Which identities may use which tools ([`AccessPolicy`]); `None`: every request may use
    /// every tool. A request without an identity (stdio, a server without authentication)
    /// may use nothing under a policy.
    #[cfg(feature = "mcp-http")]
    pub access: Option<Arc<AccessPolicy>>,
    /// What each identity used of its quota (shared by the clones of these options: one
    /// server's sessions).
    #[cfg(feature = "mcp-http")]
    pub(crate) quotas: Arc<quota::Ledger>,
    /// Where a record of every call, read, prompt, completion and question goes; none by
    /// default.
    pub audit: Option<AuditLog>,
    /// Where requests, refusals and sessions are counted (feature `metrics`); none by default.
    #[cfg(feature = "metrics")]
    pub metrics: Option<Metrics>,
    /// Whether each request that runs plugin code is a span of OpenTelemetry's global tracer
    /// provider, continuing the client's trace context (feature `otel`). Off by default: set
    /// a tracer provider, then turn this on.
    #[cfg(feature = "otel")]
    pub traces: bool,
    /// The tasks of the server's sessions (MCP's tasks extension): shared by the clones of
    /// these options. Its prefix begins every task id: replicas behind one balancer give each
    /// its own (the command uses `--session-prefix`), and the balancer routes `tasks/*`
    /// requests on the `Mcp-Name` header, which carries the id.
    pub tasks: crate::task::TaskStore,
}

impl std::fmt::Debug for McpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpOptions")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("instructions", &self.instructions)
            .field("page_size", &self.page_size)
            .field("pre_hooks", &self.pre_hooks.len())
            .field("post_hooks", &self.post_hooks.len())
            .finish()
    }
}

impl McpOptions {
    /// A server called `name` at `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            instructions: None,
            page_size: 100,
            pre_hooks: Vec::new(),
            post_hooks: Vec::new(),
            request_states: process_codec(),
            #[cfg(feature = "mcp-http")]
            access: None,
            #[cfg(feature = "mcp-http")]
            quotas: Arc::default(),
            audit: None,
            #[cfg(feature = "metrics")]
            metrics: None,
            #[cfg(feature = "otel")]
            traces: false,
            tasks: crate::task::TaskStore::new(),
        }
    }

    /// Signs request states with `key` (at least 32 bytes; secret), so that servers sharing
    /// it accept each other's states (replicas behind one balancer).
    ///
    /// # Errors
    ///
    /// A key shorter than 32 bytes.
    pub fn request_state_key(mut self, key: &[u8]) -> Result<Self, McpError> {
        let codec = input_required::codec(Some(key)).map_err(McpError::Session)?;
        self.request_states = Some(Arc::new(codec));
        Ok(self)
    }

    pub(crate) fn request_states(&self) -> Option<&rmcp::model::RequestStateCodec> {
        self.request_states.as_deref()
    }

    /// Adds a hook run before every tool call of every session (an operator's audit or
    /// approval sees every call, whatever the front end).
    #[must_use]
    pub fn pre_tool_call_hook(mut self, hook: impl PreToolCallHook + 'static) -> Self {
        self.pre_hooks.push(Arc::new(hook));
        self
    }

    /// Adds a hook run after every tool call of every session.
    #[must_use]
    pub fn post_tool_call_hook(mut self, hook: impl PostToolCallHook + 'static) -> Self {
        self.post_hooks.push(Arc::new(hook));
        self
    }

    /// The hooks around every call of `identity`.
    pub(crate) fn hooks<'a>(
        &'a self,
        identity: Option<&'a Arc<crate::Identity>>,
    ) -> crate::call::Hooks<'a> {
        crate::call::Hooks {
            pre: &self.pre_hooks,
            post: &self.post_hooks,
            identity,
        }
    }

    /// Gives each identity only the tools `policy` grants it, within its quota.
    #[cfg(feature = "mcp-http")]
    #[must_use]
    pub fn access(mut self, policy: AccessPolicy) -> Self {
        self.access = Some(Arc::new(policy));
        self
    }

    /// Writes a record of every call, read, prompt rendering, completion and question to
    /// `log`.
    #[must_use]
    pub fn audit(mut self, log: AuditLog) -> Self {
        self.audit = Some(log);
        self
    }

    /// Counts every request, refusal and session in `metrics`.
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Makes a span of every request that runs plugin code (see [`McpOptions::traces`]).
    #[cfg(feature = "otel")]
    #[must_use]
    pub fn traces(mut self, traces: bool) -> Self {
        self.traces = traces;
        self
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

/// This process's request-state codec, with a random key made once; none if the system gave
/// no randomness (then no state is made or accepted: questions on 2026-07-28 fail closed).
fn process_codec() -> Option<Arc<rmcp::model::RequestStateCodec>> {
    static CODEC: std::sync::OnceLock<Option<Arc<rmcp::model::RequestStateCodec>>> =
        std::sync::OnceLock::new();
    CODEC
        .get_or_init(|| match input_required::codec(None) {
            Ok(codec) => Some(Arc::new(codec)),
            Err(error) => {
                tracing::error!("{error}; request states cannot be made or accepted");
                None
            }
        })
        .clone()
}

/// Why serving stopped or could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The transport failed (stdio closed, a socket error …).
    #[error("MCP transport error: {0}")]
    Io(#[from] std::io::Error),
    /// A token file could not be read, created or trusted.
    #[error("cannot use the token file {}: {reason}", path.display())]
    TokenFile {
        /// The token file.
        path: std::path::PathBuf,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The request-state key file could not be read or trusted.
    #[error("cannot use the request-state key {}: {reason}", path.display())]
    KeyFile {
        /// The key file.
        path: std::path::PathBuf,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The MCP session could not start or failed.
    #[error("MCP session error: {0}")]
    Session(String),
    /// The audit log could not be opened.
    #[error("cannot write the audit log {}: {reason}", path.display())]
    Audit {
        /// The log file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The access policy could not be read or trusted.
    #[error("cannot use the access policy {}: {reason}", path.display())]
    AccessPolicy {
        /// The policy file.
        path: std::path::PathBuf,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The OAuth configuration cannot be used.
    #[error("cannot accept OAuth access tokens: {0}")]
    OAuth(String),
    /// An HTTP server without bearer tokens: off loopback always, on loopback unless the
    /// operator opted out ([`HttpOptions::no_auth`]).
    #[error(
        "refusing to serve MCP on {address} without authentication: anyone who can reach it \
         (on loopback: every user of this machine) could run the tools with the operator's \
         grants and secrets; give bearer tokens (`HttpOptions::tokens`, `persistent_token`, or \
         `--token-file FILE`), or, on a loopback address only, opt out explicitly \
         (`HttpOptions::no_auth`, `--no-auth`)"
    )]
    NoAuthentication {
        /// The address.
        address: std::net::SocketAddr,
    },
    /// A bearer token given to the HTTP service is too short to be a secret.
    #[cfg(feature = "mcp-http")]
    #[error(
        "refusing the bearer token of {name:?}: {chars} characters are too few to be a secret \
         (at least {}; `openssl rand -hex 32` makes one, `persistent_token` keeps one)",
        token::MIN_TOKEN_CHARS
    )]
    WeakToken {
        /// Who holds it.
        name: String,
        /// How many characters it has.
        chars: usize,
    },
}

/// Serves `catalog` over stdin and stdout: one session, until the client disconnects.
///
/// Run it on a Tokio runtime with I/O and time enabled (`#[tokio::main]`, or
/// `Builder::enable_all`): stdin and stdout that are pipes or sockets, as MCP clients give, are
/// read and written through the runtime's reactor (their non-blocking mode is set back when
/// the session ends).
pub async fn serve_stdio(catalog: ToolCatalog, options: McpOptions) -> Result<(), McpError> {
    serve_stdio_with_shutdown(catalog, options, std::future::pending()).await
}

/// Like [`serve_stdio`], until the client disconnects or `shutdown` completes (a signal, say);
/// the session has ended and stdin and stdout are set back when this returns.
///
/// A terminal's stdin is read by a blocking thread that cannot be interrupted: a program
/// that served a terminal exits rather than waiting for the runtime to shut down.
pub async fn serve_stdio_with_shutdown(
    catalog: ToolCatalog,
    options: McpOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), McpError> {
    let server = McpServer::new(&catalog, options);
    let streams = std_streams::open();
    let served = server
        .serve_lines(streams.input, streams.output, shutdown)
        .await;
    drop(streams.restore);
    served
}
