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

use super::session::{Admission, McpSession, SessionCounter};
use super::{McpError, McpOptions, ToolCatalog};

/// How an HTTP server admits clients and bounds their sessions.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Bearer tokens, any of which admits a request (`Authorization: Bearer TOKEN`). They are
    /// required, on loopback too (another user of the machine could otherwise run every tool
    /// with the operator's grants and secrets), unless [`HttpOptions::no_auth`] is set.
    /// [`persistent_token`](super::persistent_token) keeps a generated token for a user.
    pub tokens: Vec<String>,
    /// Serve without tokens, on a loopback address only: every local user and process can then
    /// call every tool. An explicit opt-out (`--no-auth`); refused off loopback.
    pub no_auth: bool,
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
            .field("no_auth", &self.no_auth)
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

/// What every request passes before rmcp sees it, in this order: its `Host`, its `Origin`
/// (so that a bad one is 403 whatever the token), its token, then the session cap.
struct Gate {
    tokens: Vec<Vec<u8>>,
    /// `Host` values accepted (lower-case names, or `name:port`); empty: any.
    allowed_hosts: Vec<String>,
    /// Browser origins accepted besides the server's own.
    allowed_origins: Vec<String>,
    sessions: Arc<SessionCounter>,
    max_sessions: usize,
}

/// A `Host` header or an origin's host and port, compared without case.
#[derive(Debug, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(text: &str) -> Option<Self> {
        let authority: http::uri::Authority = text.trim().parse().ok()?;
        // A user-info part has no place in a Host header or an origin.
        if authority.as_str().contains('@') {
            return None;
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        Some(Self {
            host,
            port: authority.port_u16(),
        })
    }

    /// Whether an entry of `--allowed-host` (`name`, `name:port`, or a bare IPv6 address such
    /// as `::1`) admits it.
    fn allowed_by(&self, entry: &str) -> bool {
        if let Ok(std::net::IpAddr::V6(address)) = entry.trim().parse::<std::net::IpAddr>() {
            return self.host == address.to_string();
        }
        match Authority::parse(entry) {
            Some(Authority { host, port: None }) => host == self.host,
            Some(allowed) => allowed == *self,
            None => false,
        }
    }
}

/// The scheme and authority of an `Origin` header (`https://app.example.com:8443`).
fn parse_origin(origin: &str) -> Option<(String, Authority)> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https") || rest.contains(['/', '?', '#']) {
        return None;
    }
    let mut authority = Authority::parse(rest)?;
    authority.port = authority
        .port
        .or(Some(if scheme == "https" { 443 } else { 80 }));
    Some((scheme, authority))
}

impl Gate {
    fn admits_token<B>(&self, request: &Request<B>) -> bool {
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

    /// The request's `Host`, if it is one this server answers to.
    fn host<B>(&self, request: &Request<B>) -> Result<Option<Authority>, String> {
        let Some(value) = request.headers().get(header::HOST) else {
            return if self.allowed_hosts.is_empty() {
                Ok(None)
            } else {
                Err("the request has no Host header".into())
            };
        };
        let text = value.to_str().unwrap_or_default();
        let Some(host) = Authority::parse(text) else {
            return Err(format!("the Host header {text:?} is not a host name"));
        };
        if self.allowed_hosts.is_empty()
            || self
                .allowed_hosts
                .iter()
                .any(|entry| host.allowed_by(entry))
        {
            Ok(Some(host))
        } else {
            Err(format!(
                "the Host {text:?} is not one this server answers to (DNS rebinding?); the                  operator can allow it with --allowed-host"
            ))
        }
    }

    /// Whether the request's `Origin`, if it has one, may call: the server's own origin (the
    /// same host and port as the `Host` it was sent to), or one the operator allowed.
    fn check_origin<B>(
        &self,
        request: &Request<B>,
        host: Option<&Authority>,
    ) -> Result<(), String> {
        let Some(value) = request.headers().get(header::ORIGIN) else {
            return Ok(());
        };
        let text = value.to_str().unwrap_or_default().trim();
        let origin = parse_origin(text);
        let allowed = self.allowed_origins.iter().any(|entry| {
            let entry = entry.trim();
            if entry.eq_ignore_ascii_case(text) {
                return true;
            }
            // `http://localhost:*`: any port of that scheme and host.
            if let Some(any_port) = entry.strip_suffix(":*") {
                return parse_origin(any_port).is_some_and(|(scheme, allowed)| {
                    origin
                        .as_ref()
                        .is_some_and(|(given, at)| *given == scheme && at.host == allowed.host)
                });
            }
            parse_origin(entry).is_some_and(|entry| origin.as_ref() == Some(&entry))
        });
        let same_origin = origin.is_some_and(|(scheme, origin)| {
            host.is_some_and(|host| {
                // A Host without a port was sent to the origin scheme's default port.
                let default = if scheme == "https" { 443 } else { 80 };
                origin.host == host.host && origin.port == Some(host.port.unwrap_or(default))
            })
        });
        if allowed || same_origin {
            Ok(())
        } else {
            Err(format!(
                "requests from the web origin {text:?} are not allowed; the operator can allow                  it with --allowed-origin"
            ))
        }
    }

    fn check<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        let host = match self.host(request) {
            Ok(host) => host,
            Err(message) => return Some(refusal(StatusCode::FORBIDDEN, &message)),
        };
        if let Err(message) = self.check_origin(request, host.as_ref()) {
            return Some(refusal(StatusCode::FORBIDDEN, &message));
        }
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

/// The MCP server over streamable HTTP as a service to mount on an embedder's own router (a
/// `tower::Service`, as rmcp's and axum's are), carrying the whole gate: `Host` and `Origin`
/// checks, bearer tokens, the session cap and the body limit come before rmcp sees a request,
/// so mounting it never makes it open. [`serve_http`] is this service behind its own listener.
///
/// Each MCP session (`Mcp-Session-Id`) registers the catalog's tools afresh and drops them when
/// it is deleted or idle past the timeout; a client of the stateless protocol revision
/// (2026-07-28) gets a fresh registration for every request, creating only the instance of
/// the plugin it calls. Clones share the sessions.
#[derive(Clone)]
pub struct McpHttpService {
    gate: Arc<Gate>,
    service: StreamableHttpService<McpSession, PrefixedSessions>,
    cancel: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for McpHttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService")
            .field("allowed_hosts", &self.gate.allowed_hosts)
            .field("max_sessions", &self.gate.max_sessions)
            .finish_non_exhaustive()
    }
}

impl McpHttpService {
    /// The service for `catalog`. [`HttpOptions::tokens`] must not be empty: a mounted service
    /// may be reached from anywhere, so [`HttpOptions::no_auth`] is refused here (it is for
    /// [`serve_http`] on a loopback address). Without [`HttpOptions::allowed_hosts`], only the loopback
    /// names (`localhost`, `127.0.0.1`, `::1`) are accepted as `Host`: set the names under
    /// which the embedder serves it.
    pub fn new(
        catalog: ToolCatalog,
        options: McpOptions,
        http: HttpOptions,
    ) -> Result<Self, McpError> {
        Self::build(catalog, options, http, None)
    }

    /// The service, for a server listening on `address` (`None`: unknown, as when mounted).
    fn build(
        catalog: ToolCatalog,
        options: McpOptions,
        http: HttpOptions,
        address: Option<SocketAddr>,
    ) -> Result<Self, McpError> {
        // A mounted service (no address) may be reached from anywhere: it needs tokens.
        let no_auth_allowed = address.is_some_and(|address| address.ip().is_loopback());
        let loopback = address.is_none_or(|address| address.ip().is_loopback());
        // An empty token would admit `Authorization: Bearer ` with nothing after it.
        let tokens: Vec<Vec<u8>> = http
            .tokens
            .iter()
            .map(|token| token.trim())
            .filter(|token| !token.is_empty())
            .map(|token| token.as_bytes().to_vec())
            .collect();
        if tokens.is_empty() && !(no_auth_allowed && http.no_auth) {
            return Err(McpError::NoAuthentication {
                address: address.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
            });
        }
        let max_sessions = http.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS);
        let sessions = Arc::new(SessionCounter::default());
        // The gate checks `Host` and `Origin` before the token (rmcp's own checks would come
        // after it, and refuse the server's own origin).
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(http.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES))
            .disable_allowed_hosts()
            .disable_allowed_origins();
        let cancel = config.cancellation_token.clone();
        let allowed_hosts: Vec<String> = if !http.allowed_hosts.is_empty() {
            http.allowed_hosts.clone()
        } else if loopback {
            ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec()
        } else {
            // Off loopback, behind its own listener, tokens are required: any name passes.
            Vec::new()
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
                "the session prefix {prefix:?} is not allowed: use at most 32 letters, digits, \
                 '-' and '_'"
            )));
        }
        let manager = PrefixedSessions {
            local,
            prefix,
            max_sessions,
        };
        let options = Arc::new(options);
        let factory_sessions = Arc::clone(&sessions);
        let service = StreamableHttpService::new(
            move || {
                // Cheap: rmcp builds a handler for a schema lookup too. The session takes its
                // place among the live ones when it first creates instances (the gate refuses
                // new sessions at the cap; the admission holds it under a race too).
                Ok(McpSession::new(
                    &catalog,
                    Arc::clone(&options),
                    Some(Admission::new(Arc::clone(&factory_sessions), max_sessions)),
                ))
            },
            Arc::new(manager),
            config,
        );
        let gate = Arc::new(Gate {
            tokens,
            allowed_hosts,
            allowed_origins: http.allowed_origins.clone(),
            sessions,
            max_sessions,
        });
        Ok(Self {
            gate,
            service,
            cancel,
        })
    }

    /// Answers one HTTP request: refused by the gate, or handled by the MCP server.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send + 'static,
        B::Error: std::fmt::Display,
    {
        if let Some(refused) = self.gate.check(&request) {
            return refused;
        }
        self.service.handle(request).await
    }

    /// Ends every open session (their instances are dropped) and every response stream; the
    /// service then refuses new sessions. For an embedder shutting down.
    pub fn close(&self) {
        self.cancel.cancel();
    }
}

impl<B> tower_service::Service<Request<B>> for McpHttpService
where
    B: http_body::Body + Send + 'static,
    B::Data: Send + 'static,
    B::Error: std::fmt::Display,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}

/// Serves `catalog` over streamable HTTP on `listener` until the listener fails: see
/// [`McpHttpService`]. [`HttpOptions::tokens`] must not be empty, unless
/// [`HttpOptions::no_auth`] is set on a loopback address. TLS is left to a reverse proxy in
/// front.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    catalog: ToolCatalog,
    options: McpOptions,
    http: HttpOptions,
) -> Result<(), McpError> {
    serve_http_with_shutdown(listener, catalog, options, http, std::future::pending()).await
}

/// How long a shutdown waits for open connections to finish their requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// [`serve_http`] until `shutdown` completes (as axum's `with_graceful_shutdown`): then it
/// stops accepting connections, ends every session (dropping their instances) and response
/// stream, lets requests in progress finish for a few seconds, and returns.
pub async fn serve_http_with_shutdown(
    listener: tokio::net::TcpListener,
    catalog: ToolCatalog,
    options: McpOptions,
    http: HttpOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), McpError> {
    let address: SocketAddr = listener.local_addr()?;
    let service = McpHttpService::build(catalog, options, http, Some(address))?;
    tracing::info!("serving MCP on http://{address}/");
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A failed accept (out of file descriptors, a connection reset while queued) must not
        // end the server: wait a moment and go on.
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            tracing::warn!("{MAX_CONNECTIONS} connections are open: refusing one more");
            drop(stream);
            continue;
        };
        let service = service.clone();
        let handler = hyper::service::service_fn(move |request| {
            let service = service.clone();
            async move { Ok::<_, Infallible>(service.handle(request).await) }
        });
        // A client that never finishes its request headers is dropped after 30 s.
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .serve_connection(TokioIo::new(stream), handler);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(error) = connection.await {
                tracing::debug!("HTTP connection ended: {error}");
            }
        });
    }
    drop(listener);
    // Sessions and their streams end (a stream held open would keep its connection busy).
    service.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("connections still open after {SHUTDOWN_GRACE:?}: closing them");
    }
    tracing::info!("stopped serving MCP on http://{address}/");
    Ok(())
}

/// rmcp's in-process sessions, with a prefix on every session id (the replica's name, for a
/// load balancer to route by).
struct PrefixedSessions {
    local: LocalSessionManager,
    prefix: String,
    /// Most sessions rmcp keeps at once, initialised or not (a client that never sends
    /// `initialized` takes no place among the admitted sessions, but holds a session's worker
    /// until it expires).
    max_sessions: usize,
}

impl SessionManager for PrefixedSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    /// A session as rmcp's local manager makes one, under a prefixed id.
    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.local.sessions.read().await.len() >= self.max_sessions {
            return Err(LocalSessionManagerError::SessionError(
                rmcp::transport::streamable_http_server::session::local::SessionError::Io(
                    std::io::Error::other(format!(
                        "this MCP server has {} sessions open, its limit",
                        self.max_sessions
                    )),
                ),
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_are_compared_by_host_and_port() {
        let host = |text| Authority::parse(text).expect("a host");
        assert!(host("LocalHost:8080").allowed_by("localhost"));
        assert!(host("localhost:8080").allowed_by("localhost:8080"));
        assert!(!host("localhost:8081").allowed_by("localhost:8080"));
        assert!(host("[::1]:8080").allowed_by("::1"));
        assert!(!host("evil.example").allowed_by("localhost"));
        assert!(Authority::parse("user@localhost").is_none());

        let (scheme, origin) = parse_origin("https://App.Example.com").expect("an origin");
        assert_eq!(
            (scheme.as_str(), origin.host.as_str()),
            ("https", "app.example.com")
        );
        assert_eq!(origin.port, Some(443), "the scheme's default port");
        assert_eq!(
            parse_origin("http://localhost").map(|(_, o)| o.port),
            Some(Some(80))
        );
        for refused in [
            "null",
            "file://x",
            "http://a/path",
            "localhost:8080",
            "ftp://a",
        ] {
            assert!(parse_origin(refused).is_none(), "{refused}");
        }
    }
}
