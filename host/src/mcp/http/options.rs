//! What an HTTP server admits and how it bounds sessions: [`HttpOptions`] and its defaults.

use std::time::Duration;

use crate::mcp::identity::BearerToken;

/// How an HTTP server admits clients and bounds their sessions.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Bearer tokens, any of which admits a request (`Authorization: Bearer TOKEN`) as the
    /// identity it names. Tokens or [`oauth`](Self::oauth) are required, on loopback too
    /// (another user of the machine could otherwise run every tool with the operator's grants
    /// and secrets), unless [`HttpOptions::no_auth`] is set.
    /// [`persistent_token`](crate::mcp::persistent_token) keeps a generated token for a user.
    pub tokens: Vec<BearerToken>,
    /// Accept OAuth access tokens (feature `oauth`), beside the static tokens.
    #[cfg(feature = "oauth")]
    pub oauth: Option<crate::mcp::OAuthOptions>,
    /// Serve without tokens, on a loopback address only: every local user and process can then
    /// call every tool. An explicit opt-out (`--no-auth`); refused off loopback.
    pub no_auth: bool,
    /// Most sessions open at once; past it, new sessions are refused (503). Default 64.
    pub max_sessions: Option<usize>,
    /// A session without requests for this long is closed and its instances dropped.
    /// Default 5 minutes.
    pub idle_timeout: Option<Duration>,
    /// Largest request body, in bytes; larger ones get 413. Default 4 MiB. A body whose JSON
    /// would take more than 16 times this once parsed (very many small values) gets 413 too.
    pub max_body_bytes: Option<usize>,
    /// Most memory the requests in progress may hold together, in bytes: their bodies as they
    /// arrive, then what their JSON takes once parsed, until their answers end (a standing
    /// stream's when it closes). One identity may hold a quarter of it; past either, a request
    /// gets 503 with `Retry-After`. Default 512 MiB; at least four times the body limit.
    pub max_request_memory: Option<usize>,
    /// How long a request's body may take to arrive once its headers have; a body still
    /// arriving then is refused (500, saying why) and its connection closed.
    /// Default 60 s.
    pub body_timeout: Option<Duration>,
    /// Values of the `Host` header accepted (names, or `name:port`). Default: on a loopback
    /// address, `localhost`, `127.0.0.1` and `::1`; elsewhere any (requests then need a
    /// token, which a rebinding web page does not have).
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (e.g. `https://app.example.com`); a request with any other
    /// `Origin` header gets 403. Requests without `Origin` (not from a browser) pass.
    pub allowed_origins: Vec<String>,
    /// A prefix of every session id this server gives (letters, digits, `-`, `_`; at most
    /// 32): behind a load balancer, each replica gets its own, and the balancer sends a
    /// request to the replica whose prefix its `Mcp-Session-Id` carries.
    pub session_prefix: Option<String>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("tokens", &self.tokens)
            .field("no_auth", &self.no_auth)
            .field("max_sessions", &self.max_sessions)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_request_memory", &self.max_request_memory)
            .field("body_timeout", &self.body_timeout)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("session_prefix", &self.session_prefix)
            .finish()
    }
}

/// The default cap on open sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 64;
/// The default idle timeout of a session.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The default cap on request bodies.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

/// The default cap on the memory requests in progress hold together.
pub const DEFAULT_MAX_REQUEST_MEMORY: usize = 512 << 20;

/// How long a request's body may take to arrive by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

impl HttpOptions {
    /// Admits requests carrying one of `tokens` (empty ones and surrounding spaces ignored),
    /// each the identity `token-N` (N counting from 1). The service refuses to start with a
    /// token of fewer than [`MIN_TOKEN_CHARS`](crate::mcp::MIN_TOKEN_CHARS) characters
    /// ([`McpError::WeakToken`](crate::mcp::McpError::WeakToken)).
    #[must_use]
    pub fn tokens(mut self, tokens: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tokens = tokens
            .into_iter()
            .map(Into::into)
            .map(|token: String| token.trim().to_owned())
            .filter(|token| !token.is_empty())
            .enumerate()
            .map(|(index, token)| BearerToken::new(format!("token-{}", index + 1), token))
            .collect();
        self
    }

    /// Admits requests carrying one of `tokens`, each as the identity it names (each of at
    /// least [`MIN_TOKEN_CHARS`](crate::mcp::MIN_TOKEN_CHARS) characters, as with
    /// [`tokens`](Self::tokens)).
    #[must_use]
    pub fn named_tokens(mut self, tokens: impl IntoIterator<Item = BearerToken>) -> Self {
        self.tokens = tokens.into_iter().collect();
        self
    }

    /// Accepts OAuth access tokens as `oauth` says (beside any static tokens).
    #[cfg(feature = "oauth")]
    #[must_use]
    pub fn oauth(mut self, oauth: crate::mcp::OAuthOptions) -> Self {
        self.oauth = Some(oauth);
        self
    }

    /// Serves without tokens (loopback only): see [`HttpOptions::no_auth`].
    #[must_use]
    pub fn no_auth(mut self, no_auth: bool) -> Self {
        self.no_auth = no_auth;
        self
    }

    /// Sets the cap on open sessions (at least 1).
    #[must_use]
    pub fn max_sessions(mut self, sessions: usize) -> Self {
        self.max_sessions = Some(sessions.max(1));
        self
    }

    /// Sets the idle timeout of sessions.
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Sets the cap on request bodies.
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = Some(bytes);
        self
    }

    /// Sets the most memory the requests in progress may hold together (see
    /// [`HttpOptions::max_request_memory`](Self#structfield.max_request_memory)).
    #[must_use]
    pub fn max_request_memory(mut self, bytes: usize) -> Self {
        self.max_request_memory = Some(bytes);
        self
    }

    /// How long a request's body may take to arrive once its headers have (see
    /// [`HttpOptions::body_timeout`](Self#structfield.body_timeout)).
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = Some(timeout);
        self
    }

    /// Sets the `Host` values accepted.
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the prefix of session ids (see [`HttpOptions::session_prefix`]).
    #[must_use]
    pub fn session_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.session_prefix = Some(prefix.into());
        self
    }

    /// Sets the browser origins accepted.
    #[must_use]
    pub fn allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }
}
