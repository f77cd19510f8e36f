//! [`McpHttpService`]: the MCP server over streamable HTTP as a `tower::Service`, the gate in
//! front of rmcp's streamable HTTP service.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::Body;
use super::auth::Authenticator;
use super::gate::Gate;
use super::options::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_REQUEST_MEMORY,
    DEFAULT_MAX_SESSIONS, HttpOptions,
};
use super::sessions::PrefixedSessions;
use crate::mcp::admission::{Admission, SessionCounter};
use crate::mcp::catalog::Caller;
use crate::mcp::session::McpServer;
use crate::mcp::{McpError, McpOptions, ToolCatalog};

/// How long a cancelled request's stream is kept for a client to resume it.
const COMPLETED_ANSWERS_KEPT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a liveness probe asks: `GET /healthz` is answered `200 ok` to anyone, before the
/// host check and authentication (it tells nothing but that the server answers).
pub(crate) const HEALTH_PATH: &str = "/healthz";

/// The answer to a liveness probe.
fn health() -> Response<Body> {
    use http_body_util::BodyExt;
    let mut response =
        Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"ok\n")).boxed());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
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
///
/// [`serve_http`]: super::serve_http
#[derive(Clone)]
pub struct McpHttpService {
    /// What each identity may use (the quota of sessions), and where refusals are counted.
    options: Arc<McpOptions>,
    gate: Arc<Gate>,
    auth: Arc<Authenticator>,
    sessions: Arc<PrefixedSessions>,
    service: StreamableHttpService<McpServer, PrefixedSessions>,
    cancel: tokio_util::sync::CancellationToken,
    /// How long a request's body may take to arrive.
    body_timeout: std::time::Duration,
    /// Largest request body.
    max_body_bytes: usize,
    /// The memory requests hold, in all and by identity.
    intake: Arc<super::intake::Intake>,
    /// The standing streams each client holds open.
    standing: Arc<super::standing::Standing>,
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
    ///
    /// [`serve_http`]: super::serve_http
    pub fn new(
        catalog: ToolCatalog,
        options: McpOptions,
        http: HttpOptions,
    ) -> Result<Self, McpError> {
        Self::build(catalog, options, http, None)
    }

    /// The service, for a server listening on `address` (`None`: unknown, as when mounted).
    pub(super) fn build(
        catalog: ToolCatalog,
        options: McpOptions,
        http: HttpOptions,
        address: Option<SocketAddr>,
    ) -> Result<Self, McpError> {
        // A mounted service (no address) may be reached from anywhere: it needs tokens.
        let no_auth_allowed = address.is_some_and(|address| address.ip().is_loopback());
        let loopback = address.is_none_or(|address| address.ip().is_loopback());
        // Anyone who reaches the server may guess at a token: one a person made up is refused,
        // wherever it came from.
        // (Counted as the token is compared: without the spaces around it.)
        if let Some(weak) = http
            .tokens
            .iter()
            .find(|token| token.secret.trim().chars().count() < crate::mcp::token::MIN_TOKEN_CHARS)
        {
            return Err(McpError::WeakToken {
                name: weak.name.clone(),
                chars: weak.secret.trim().chars().count(),
            });
        }
        let auth = Authenticator::new(&http.tokens);
        // With several issuers, a grant to anyone is a grant to every token of each: said once.
        #[cfg(feature = "oauth")]
        if let (Some(oauth), Some(policy)) = (&http.oauth, &options.access)
            && oauth.issuers.len() > 1
            && let anyone = policy.grants_to_anyone_of_any_issuer()
            && !anyone.is_empty()
        {
            tracing::warn!(
                "{} issuers are configured, and grant(s) {anyone:?} of the access policy are for \
                 anyone (`who = [\"*\"]`) without `issuer`: every token any of them issues gets \
                 them; add `issuer = \"…\"` if only one issuer's users are meant",
                oauth.issuers.len()
            );
        }
        // With several issuers, a grant by claim must name the issuer it trusts.
        #[cfg(feature = "oauth")]
        if let (Some(oauth), Some(policy)) = (&http.oauth, &options.access)
            && oauth.issuers.len() > 1
            && let unbound = policy.grants_without_issuer()
            && !unbound.is_empty()
        {
            return Err(McpError::OAuth(format!(
                "{} issuers are configured, and grant(s) {unbound:?} of the access policy name \
                 identities by a claim (`sub:`, `scope:`, `group:`) without `issuer`: any of the \
                 issuers could issue that claim; add `issuer = \"…\"` to each",
                oauth.issuers.len()
            )));
        }
        #[cfg(feature = "oauth")]
        let auth = match &http.oauth {
            Some(oauth) => auth.with_oauth(Arc::new(
                crate::mcp::oauth::Verifier::new(oauth.clone()).map_err(McpError::OAuth)?,
            )),
            None => auth,
        };
        if !auth.is_configured() && !(no_auth_allowed && http.no_auth) {
            return Err(McpError::NoAuthentication {
                address: address.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
            });
        }
        let max_sessions = http.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS);
        let sessions = Arc::new(SessionCounter::default());
        // The gate checks `Host` and `Origin` before the token (rmcp's own checks would come
        // after it, and refuse the server's own origin).
        let max_body_bytes = http.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES).max(1);
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(max_body_bytes)
            .disable_allowed_hosts()
            .disable_allowed_origins();
        let cancel = config.cancellation_token.clone();
        let allowed_hosts: Vec<String> = if !http.allowed_hosts.is_empty() {
            http.allowed_hosts.clone()
        } else if loopback {
            super::gate::LOOPBACK_HOSTS.map(String::from).to_vec()
        } else {
            // Off loopback, behind its own listener, tokens are required: any name passes.
            Vec::new()
        };
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(http.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT));
        // A finished request's answer is kept for a client that lost its stream to resume it:
        // a few of the 3 s retries it is told to wait, not rmcp's minute (every answer of a
        // flood of requests, up to the output limit each, would be held that long).
        local.session_config.completed_cache_ttl = COMPLETED_ANSWERS_KEPT;
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
        let manager = Arc::new(PrefixedSessions::new(local, prefix, max_sessions));
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &options.metrics {
            metrics.sessions(&sessions);
        }
        let options = Arc::new(options);
        let service_options = Arc::clone(&options);
        let factory_sessions = Arc::clone(&sessions);
        let service = StreamableHttpService::new(
            move || {
                // Cheap: rmcp builds a handler for a schema lookup too. The session takes its
                // place among the live ones when it first creates instances (the gate refuses
                // new sessions at the cap; the admission holds it under a race too).
                Ok(McpServer::open(
                    &catalog,
                    Arc::clone(&options),
                    Some(Admission::new(Arc::clone(&factory_sessions), max_sessions)),
                ))
            },
            Arc::clone(&manager),
            config,
        );
        let gate = Arc::new(Gate {
            allowed_hosts,
            allowed_origins: http.allowed_origins.clone(),
            sessions,
            max_sessions,
        });
        Ok(Self {
            options: service_options,
            gate,
            auth: Arc::new(auth),
            sessions: manager,
            service,
            cancel,
            body_timeout: http.body_timeout.unwrap_or(DEFAULT_BODY_TIMEOUT),
            max_body_bytes,
            intake: super::intake::Intake::new(
                http.max_request_memory
                    .unwrap_or(DEFAULT_MAX_REQUEST_MEMORY)
                    .max(max_body_bytes.saturating_mul(4)),
            ),
            standing: Arc::default(),
        })
    }

    /// Answers one HTTP request: refused by the gate, or handled by the MCP server.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send + 'static,
        B::Error: std::fmt::Display,
    {
        // A liveness probe (a load balancer's, Kubernetes'): answered before anything else,
        // to anyone, with nothing but that the server answers. It comes by the pod's address,
        // which the gate's list of names may not hold.
        if request.method() == http::Method::GET && request.uri().path() == HEALTH_PATH {
            return health();
        }
        if let Some(refused) = self.gate.check(&request) {
            return self.refused("host_or_origin", refused);
        }
        let request = request.map(|body| super::body::InTime::new(body, self.body_timeout));
        if let Some(metadata) = self.auth.metadata(&request) {
            return metadata;
        }
        let identity = match self.auth.authenticate(request.headers()).await {
            Ok(identity) => identity,
            Err(refused) => {
                let reason = if refused.status() == http::StatusCode::FORBIDDEN {
                    "insufficient_scope"
                } else {
                    "unauthenticated"
                };
                return self.refused(reason, refused);
            }
        };
        if let Some(refused) = self.gate.check_capacity(&request) {
            return self.refused("session_cap", refused);
        }
        // Who asks, for the sessions to scope notices by (rmcp hands the request's parts to
        // the handler).
        let caller = Caller(
            identity
                .as_ref()
                .map(|identity| match &self.options.access {
                    Some(policy) => policy.caller_key(identity),
                    None => identity.key(),
                }),
        );
        // Whose quota of sessions a session counts against: the identity's, whatever the
        // grants of the token that opened it.
        let counted = Caller(identity.as_ref().map(|identity| identity.key()));
        // A POST's body, read and weighed before rmcp parses it, and held in its identity's
        // share of the memory for requests until both the request (as rmcp keeps it for its
        // handler) and its answer have ended. rmcp reads no other method's body: none is kept.
        let mut share = self.intake.share(counted);
        let (parts, body) = request.into_parts();
        let posted = parts.method == http::Method::POST;
        let body = if posted {
            let declared = parts
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
            match super::intake::read(body, declared, self.max_body_bytes, &mut share).await {
                Ok(body) => body,
                Err(refused) => return self.refused("request_body", refused),
            }
        } else {
            bytes::Bytes::new()
        };
        let head = posted.then(|| super::intake::request_head(&body)).flatten();
        let listens = head
            .as_ref()
            .is_some_and(|(_, method)| method == "subscriptions/listen");
        let request_id = head.map(|(id, _)| id);
        let share = posted.then(|| super::intake::RequestShare::new(share));
        let mut request = Request::from_parts(parts, http_body_util::Full::new(body));
        if let Some(share) = &share {
            request.extensions_mut().insert(share.clone());
        }

        // A session is its opener's: another identity that learns its id finds no session
        // there (as though it had ended), and cannot act in it or read its streams.
        let session = request
            .headers()
            .get(SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        if let Some(session) = &session
            && !self.sessions.belongs_to(session, caller)
        {
            // The same identity with other grants (a token with other scopes or groups): it
            // is told why, and may open a session of its own.
            if self.sessions.counted_against(session, counted) {
                self.audit_refusal("other_grants", identity.as_deref(), Some(session));
                return self.refused(
                    "other_grants",
                    super::gate::refusal(
                        http::StatusCode::FORBIDDEN,
                        "this session was opened with other grants (the token's scopes or \
                         groups differ from those of the session's first request); open a new \
                         session with this token",
                    ),
                );
            }
            // A session that ended (or never was) is no one's: a client coming back with its
            // own old id is not taken for one trying another's.
            if self.sessions.is_open(session) {
                self.audit_refusal(
                    "another_identitys_session",
                    identity.as_deref(),
                    Some(session),
                );
            }
            return self.refused(
                "another_identitys_session",
                super::gate::refusal(http::StatusCode::NOT_FOUND, "no such session"),
            );
        }
        // A request whose id is in progress in its session (or one past the session's ids in
        // progress) is refused here, with its id: rmcp would take it and route the first
        // request's answer to it.
        if let (Some(session), Some(id)) = (&session, &request_id)
            && let Err((status, why)) = self.sessions.may_begin(session, id)
        {
            return self.refused(
                "request_in_progress",
                super::intake::refused_request(status, id, &why),
            );
        }
        // A request of a session is the session's: rmcp serves one that names the stateless
        // revision (its `MCP-Protocol-Version` header, which a `_meta` version must match) as a
        // stateless request, outside the session and outside its identity's `sessions` quota.
        if session.is_some()
            && request.method() == http::Method::POST
            && let Some(version) = stateless_version(request.headers())
        {
            return self.refused(
                "stateless_in_session",
                super::gate::refusal(
                    http::StatusCode::BAD_REQUEST,
                    &format!(
                        "a request of a session (Mcp-Session-Id) cannot carry the stateless \
                         revision's protocol version ({version}, which has no sessions): send \
                         it without the session id, or with the session's version"
                    ),
                ),
            );
        }
        let opens = session.is_none() && request.method() == http::Method::POST;
        // A request that may open a session holds a place among its identity's until it is
        // answered (a stateless one too: it is a session of its own while it runs, to the end
        // of its answer's stream).
        let opening = if opens {
            let limit = self.session_quota(identity.as_ref());
            let cap = limit.as_ref().map(|(_, limit)| *limit as usize);
            match self.sessions.reserve(counted, caller, cap).await {
                Some(opening) => Some(opening),
                None => {
                    let (name, limit) = limit.unwrap_or_default();
                    self.audit_refusal("quota", identity.as_deref(), None);
                    return self.refused("quota", too_many_sessions(&name, limit));
                }
            }
        } else {
            None
        };
        // A standing stream ends when the token it was opened with expires: a session's GET
        // (its notices, its tasks' logs) and a stateless `subscriptions/listen` (a POST whose
        // answer streams for as long as the client stays; which method a POST is, is read from
        // its body too: the `Mcp-Method` header, which rmcp holds to the body's method
        // only on some protocol versions, may be left out). The client opens it again with a
        // current token, checked as any request is. A call's streamed answer is not cut: it
        // ends with the call, within its time limit.
        let standing = request.method() == http::Method::GET
            || (request.method() == http::Method::POST
                && (listens
                    || request
                        .headers()
                        .get("mcp-method")
                        .is_some_and(|method| method.as_bytes() == b"subscriptions/listen")));
        let expires = identity
            .as_deref()
            .filter(|_| standing)
            .and_then(|id| expiry(id, self.auth.leeway()));
        // Each holds a connection for as long as its client stays: one client holds at most a
        // quarter of the connections the server accepts, however many sessions it opens.
        let place = if standing {
            match self.standing.take(counted) {
                Some(place) => Some(place),
                None => {
                    return self.refused(
                        "standing_streams",
                        super::gate::refusal(
                            http::StatusCode::TOO_MANY_REQUESTS,
                            &format!(
                                "this client has {} streams open (GET streams and \
                                 subscriptions/listen), its limit: close some first",
                                super::standing::MAX_STANDING_PER_CLIENT
                            ),
                        ),
                    );
                }
            }
        } else {
            None
        };
        request.extensions_mut().insert(caller);
        let asking = identity.clone();
        if let Some(identity) = identity {
            request.extensions_mut().insert(identity);
        }
        let opening = opening.map(Arc::new);
        let handled = crate::mcp::session::ASKING.scope(asking, self.service.handle(request));
        let response = match &opening {
            Some(opening) => {
                let handled = super::sessions::OPENING.scope(Arc::clone(opening), handled);
                held(handled.await, share)
            }
            None => held(handled.await, share),
        };
        let streams = response.status() == http::StatusCode::OK
            && response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
        let response = match expires {
            Some(at) if streams => response.map(|body| {
                http_body_util::BodyExt::boxed(Until {
                    body,
                    until: Box::pin(tokio::time::sleep_until(at)),
                })
            }),
            _ => response,
        };
        // Its place is given back when its stream ends.
        let response = holding(response, place);
        // A session it opened took its place when rmcp made it.
        if opens && response.headers().contains_key(SESSION_ID) {
            return response;
        }
        // A stateless request's answer may be a stream that goes on after `handle` returned
        // (rmcp answers as soon as the first message, a progress report say, is there): its
        // place is held until the stream ends.
        holding(response, opening)
    }

    /// The name of `identity` and its quota of sessions, if it has one.
    fn session_quota(&self, identity: Option<&Arc<crate::Identity>>) -> Option<(String, u32)> {
        let policy = self.options.access.as_ref()?;
        let identity = identity?;
        let limit = policy.quota(Some(identity)).sessions?;
        Some((identity.name.clone(), limit))
    }

    /// Writes the refusal of `identity`'s request to the audit log, if there is one: who tried
    /// another identity's open session, a session of other grants, or more sessions than its
    /// quota (`identity` is `None` on a server without authentication).
    fn audit_refusal(
        &self,
        reason: &'static str,
        identity: Option<&crate::Identity>,
        session: Option<&str>,
    ) {
        if let Some(audit) = &self.options.audit {
            audit.refused(reason, identity, session);
        }
    }

    /// `response`, a refusal for `reason`, counted.
    fn refused(&self, reason: &'static str, response: Response<Body>) -> Response<Body> {
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.options.metrics {
            metrics.refused(reason);
        }
        let _ = reason;
        response
    }

    /// Ends every open session (their instances are dropped) and every response stream; the
    /// service then refuses new sessions. For an embedder shutting down.
    pub fn close(&self) {
        self.cancel.cancel();
    }
}

/// When the access token of `identity` stops being accepted: its `exp` claim, if it has one,
/// and the `leeway` the verifier allows past it; for an issuer's token without one, a minute
/// from now. `None` for a static token, or a time too far off to be a moment of this process.
fn expiry(identity: &crate::Identity, leeway: std::time::Duration) -> Option<tokio::time::Instant> {
    // An issuer's token that says no expiry (an introspection answer may not) is asked about
    // again after a minute, as its verdict is kept no longer: the stream ends then.
    let Some(exp) = identity
        .claims
        .get("exp")
        .and_then(serde_json::Value::as_f64)
    else {
        return identity
            .issuer
            .is_some()
            .then(|| tokio::time::Instant::now() + UNDATED_STREAM);
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let left = std::time::Duration::try_from_secs_f64((exp - now).max(0.0)).ok()?;
    tokio::time::Instant::now().checked_add(left.checked_add(leeway)?)
}

/// How long a standing stream opened with an issuer's token that names no expiry lasts.
const UNDATED_STREAM: std::time::Duration = std::time::Duration::from_secs(60);

/// `response`, its body holding `held` (if any) until the body is dropped: a place given
/// back when the stream it is for ends.
fn holding<T: Send + Sync + 'static>(response: Response<Body>, held: Option<T>) -> Response<Body> {
    match held {
        Some(held) => response.map(|body| {
            http_body_util::BodyExt::boxed(http_body_util::BodyExt::map_frame(body, move |frame| {
                let _held = &held;
                frame
            }))
        }),
        None => response,
    }
}

/// A response body that ends at `until` (whatever it would still send).
struct Until<B> {
    body: B,
    until: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B: http_body::Body + Unpin> http_body::Body for Until<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.until.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
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

/// `response`, holding `share` until its body ends (a stream's, when the client or the
/// server closes it).
fn held(response: Response<Body>, share: Option<super::intake::RequestShare>) -> Response<Body> {
    let Some(share) = share else {
        return response;
    };
    response.map(|body| http_body_util::BodyExt::boxed(super::intake::Holding::new(body, share)))
}

/// The answer to a request of `who` past its quota of `limit` sessions: 429 with the JSON-RPC
/// error saying so.
fn too_many_sessions(who: &str, limit: u32) -> Response<Body> {
    let error = crate::mcp::quota::too_many_sessions(who, limit);
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": error,
    });
    let mut response = http::Response::new(http_body_util::BodyExt::boxed(
        http_body_util::Full::new(bytes::Bytes::from(body.to_string())),
    ));
    *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The header naming a request's session.
const SESSION_ID: &str = "mcp-session-id";

/// The protocol version a request's `MCP-Protocol-Version` header names, if it is one without
/// sessions (2026-07-28 and later: no `initialize`).
fn stateless_version(headers: &http::HeaderMap) -> Option<String> {
    let named = headers.get("mcp-protocol-version")?.to_str().ok()?;
    let version: rmcp::model::ProtocolVersion =
        serde_json::from_value(serde_json::Value::String(named.to_owned())).ok()?;
    (!version.has_initialize()).then(|| named.to_owned())
}
