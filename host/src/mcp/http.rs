//! MCP over streamable HTTP: a session per `Mcp-Session-Id`, bearer tokens, a cap on open
//! sessions, an idle timeout, bounded request bodies, and `Host`/`Origin` validation.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper_util::rt::TokioIo;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::common::server_side_http::{ServerSseMessage, SessionId, session_id};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, create_local_session,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq;

use super::session::{McpSession, SessionCounter};
use super::{McpError, McpOptions, ToolCatalog};

/// How an HTTP server admits clients and bounds their sessions.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Bearer tokens, any of which admits a request (`Authorization: Bearer TOKEN`). Empty:
    /// no authentication, allowed only on a loopback address.
    pub tokens: Vec<String>,
    /// Most sessions open at once; past it, new sessions are refused (503). Default 64.
    pub max_sessions: Option<usize>,
    /// A session without requests for this long is closed and its instances dropped.
    /// Default 5 minutes.
    pub idle_timeout: Option<Duration>,
    /// Largest request body, in bytes; larger ones get 413. Default 4 MiB.
    pub max_body_bytes: Option<usize>,
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
            .field("tokens", &format_args!("[{} redacted]", self.tokens.len()))
            .field("max_sessions", &self.max_sessions)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
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
/// Most connections open at once.
const MAX_CONNECTIONS: usize = 1024;

/// The default cap on request bodies.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

impl HttpOptions {
    /// Admits requests carrying one of `tokens` (empty lines and surrounding spaces ignored).
    #[must_use]
    pub fn tokens(mut self, tokens: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tokens = tokens
            .into_iter()
            .map(Into::into)
            .map(|token: String| token.trim().to_owned())
            .filter(|token| !token.is_empty())
            .collect();
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

type Body = BoxBody<Bytes, Infallible>;

/// A JSON-RPC error as an HTTP response (no request id: the request was not read).
fn refusal(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": message},
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// What every request passes before rmcp sees it: the token, then the session cap.
struct Gate {
    tokens: Vec<Vec<u8>>,
    sessions: Arc<SessionCounter>,
    max_sessions: usize,
}

impl Gate {
    fn admits_token(&self, request: &Request<hyper::body::Incoming>) -> bool {
        if self.tokens.is_empty() {
            return true;
        }
        // The scheme's name is case-insensitive (RFC 9110).
        let Some(given) = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|value| value.as_bytes())
            .filter(|value| value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer "))
            .map(|value| &value[7..])
        else {
            return false;
        };
        // Compared in constant time with each token (a token's length is not secret).
        self.tokens
            .iter()
            .fold(false, |found, token| found | bool::from(token.ct_eq(given)))
    }

    fn check(&self, request: &Request<hyper::body::Incoming>) -> Option<Response<Body>> {
        if !self.admits_token(request) {
            let mut response = refusal(
                StatusCode::UNAUTHORIZED,
                "this MCP server needs a bearer token: send `Authorization: Bearer TOKEN`",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"llm-worker\""),
            );
            return Some(response);
        }
        // A POST without a session id opens a session (or is a stateless request, which is a
        // session of its own while it runs).
        let opens_session = request.method() == http::Method::POST
            && !request.headers().contains_key("mcp-session-id");
        if opens_session && self.sessions.live() >= self.max_sessions {
            let mut response = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "this MCP server has {} sessions open, its limit; try again when one ends",
                    self.max_sessions
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            return Some(response);
        }
        None
    }
}

/// Serves `catalog` over streamable HTTP on `listener` until the listener fails.
///
/// Each MCP session (`Mcp-Session-Id`) registers the catalog's tools afresh when it is
/// initialised and drops them when it is deleted or idle past the timeout; a client of the
/// stateless protocol revision (2026-07-28) gets a fresh registration for every request.
/// Off the loopback interface, [`HttpOptions::tokens`] must not be empty. TLS is left to a
/// reverse proxy in front.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    catalog: ToolCatalog,
    options: McpOptions,
    http: HttpOptions,
) -> Result<(), McpError> {
    let address: SocketAddr = listener.local_addr()?;
    let loopback = address.ip().is_loopback();
    // An empty token would admit `Authorization: Bearer ` with nothing after it.
    let http = HttpOptions {
        tokens: http
            .tokens
            .iter()
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty())
            .collect(),
        ..http
    };
    if !loopback && http.tokens.is_empty() {
        return Err(McpError::NoAuthentication { address });
    }
    let max_sessions = http.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS);
    let sessions = Arc::new(SessionCounter::default());
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(http.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES))
        .with_allowed_origins(http.allowed_origins.clone())
        .enforce_origin_validation();
    config = if !http.allowed_hosts.is_empty() {
        config.with_allowed_hosts(http.allowed_hosts.clone())
    } else if loopback {
        config.with_allowed_hosts(["localhost", "127.0.0.1", "::1"])
    } else {
        config.disable_allowed_hosts()
    };
    let mut local = LocalSessionManager::default();
    local.session_config.keep_alive = Some(http.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT));
    let prefix = http.session_prefix.clone().unwrap_or_default();
    if prefix.len() > 32
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(McpError::Session(format!(
            "the session prefix {prefix:?} is not allowed: use at most 32 letters, digits, '-' \
             and '_'"
        )));
    }
    let manager = PrefixedSessions { local, prefix };
    let options = Arc::new(options);
    let factory_sessions = Arc::clone(&sessions);
    let service = StreamableHttpService::new(
        move || {
            // The gate refuses new sessions at the cap; this holds it under a race too.
            let counted = factory_sessions.enter(max_sessions).ok_or_else(|| {
                std::io::Error::other("the server's limit of open sessions is reached")
            })?;
            Ok(McpSession::new(
                &catalog,
                Arc::clone(&options),
                Some(counted),
            ))
        },
        Arc::new(manager),
        config,
    );
    let gate = Arc::new(Gate {
        tokens: http.tokens.iter().map(|t| t.as_bytes().to_vec()).collect(),
        sessions,
        max_sessions,
    });
    tracing::info!("serving MCP on http://{address}/");
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A failed accept (out of file descriptors, a connection reset while queued) must not
        // end the server: wait a moment and go on.
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!("cannot accept a connection: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            tracing::warn!("{MAX_CONNECTIONS} connections are open: refusing one more");
            drop(stream);
            continue;
        };
        let (service, gate) = (service.clone(), Arc::clone(&gate));
        let handler = hyper::service::service_fn(move |request| {
            let (service, gate) = (service.clone(), Arc::clone(&gate));
            async move {
                if let Some(refused) = gate.check(&request) {
                    return Ok::<_, Infallible>(refused);
                }
                Ok(service.handle(request).await)
            }
        });
        tokio::spawn(async move {
            let _permit = permit;
            // A client that never finishes its request headers is dropped after 30 s.
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), handler)
                .await
            {
                tracing::debug!("HTTP connection ended: {error}");
            }
        });
    }
}

/// rmcp's in-process sessions, with a prefix on every session id (the replica's name, for a
/// load balancer to route by).
struct PrefixedSessions {
    local: LocalSessionManager,
    prefix: String,
}

impl SessionManager for PrefixedSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    /// A session as rmcp's local manager makes one, under a prefixed id.
    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id = SessionId::from(format!("{}{}", self.prefix, session_id()));
        let (handle, worker) = create_local_session(id.clone(), self.local.session_config.clone());
        self.local.sessions.write().await.insert(id.clone(), handle);
        Ok((id, WorkerTransport::spawn(worker)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.resume(id, last_event_id).await
    }
}
