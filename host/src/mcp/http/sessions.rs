//! rmcp's in-process session manager with a prefix on every session id and a cap on the
//! sessions it keeps.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher as _;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::WorkerTransport;
use rmcp::transport::common::server_side_http::{ServerSseMessage, SessionId, session_id};
use rmcp::transport::streamable_http_server::session::SessionManager;

use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, create_local_session,
};

use crate::mcp::catalog::Caller;

/// rmcp's in-process sessions, with a prefix on every session id (the replica's name, for a
/// load balancer to route by), each bound to the identity that opened it.
pub(super) struct PrefixedSessions {
    local: LocalSessionManager,
    prefix: String,
    /// Most sessions rmcp keeps at once, initialised or not (a client that never sends
    /// `initialized` takes no place among the admitted sessions, but holds a session's worker
    /// until it expires).
    max_sessions: usize,
    /// Who opened each session, and the sessions being opened.
    owners: Arc<Mutex<Owners>>,
}

#[derive(Default)]
struct Owners {
    /// Who opened each session (the caller, whose alone it is), and whose quota of sessions
    /// it counts against (the caller's identity, whatever its grants).
    sessions: HashMap<String, (Caller, Caller)>,
    /// How many requests of each identity are opening a session now.
    opening: HashMap<Caller, usize>,
    /// The ids of each session's requests whose answers have not been seen going out: a
    /// request id is used once in a session (MCP), and rmcp routes by it, so a second request
    /// of the same id while the first is in progress took the first's answer, and its own went
    /// to the session's general stream, kept there for the session's life. A request whose
    /// client left before its answer keeps its id (its answer may still come). Each id is kept
    /// as its hash under a key of this server's, whatever its length (a client chooses it):
    /// a client cannot make two ids collide without the key.
    requests: HashMap<String, HashSet<u64>>,
    ids: std::hash::RandomState,
}

impl Owners {
    /// Holds `request` in progress in `session`, or says why it may not be.
    fn begin(&mut self, session: &str, request: &RequestId) -> Result<(), String> {
        let key = self.may_begin(session, request).map_err(|(_, why)| why)?;
        self.requests
            .entry(session.to_owned())
            .or_default()
            .insert(key);
        Ok(())
    }

    /// Whether `request` may begin in `session` (its id's key, if so): not if one of its id is
    /// in progress there (409), nor past the session's most requests in progress (429); why,
    /// for the client.
    fn may_begin(
        &self,
        session: &str,
        request: &RequestId,
    ) -> Result<u64, (http::StatusCode, String)> {
        let key = self.ids.hash_one(request);
        let Some(held) = self.requests.get(session) else {
            return Ok(key);
        };
        if held.contains(&key) {
            Err((
                http::StatusCode::CONFLICT,
                format!(
                    "a request of id {request} is in progress in this session; each request \
                     of a session takes an id of its own (MCP)"
                ),
            ))
        } else if held.len() >= MAX_REQUESTS_IN_PROGRESS {
            Err((
                http::StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "this session has {MAX_REQUESTS_IN_PROGRESS} requests in progress (or left \
                     before their answers: a client that went away, a stream cut by a proxy), \
                     its limit; open another session"
                ),
            ))
        } else {
            Ok(key)
        }
    }

    /// Lets go of `request` in `session`: answered, or cancelled.
    fn end(&mut self, session: &str, request: &RequestId) {
        let key = self.ids.hash_one(request);
        if let Some(held) = self.requests.get_mut(session) {
            held.remove(&key);
        }
    }
}

/// Most request ids one session may hold in progress (or left by clients before their
/// answers): past it, its requests are refused.
const MAX_REQUESTS_IN_PROGRESS: usize = 4096;

/// A place among an identity's sessions, held while its request opens one (or, for a stateless
/// request, while its answer is sent).
pub(super) struct Opening {
    sessions: Arc<PrefixedSessions>,
    /// Whose quota the place counts against.
    identity: Caller,
}

impl Drop for Opening {
    fn drop(&mut self) {
        let mut owners = self.sessions.owners();
        if let Some(count) = owners.opening.get_mut(&self.identity) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                owners.opening.remove(&self.identity);
            }
        }
    }
}

impl PrefixedSessions {
    pub(super) fn new(local: LocalSessionManager, prefix: String, max_sessions: usize) -> Self {
        Self {
            local,
            prefix,
            max_sessions,
            owners: Arc::default(),
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request of id `request` may begin in the session `id` (see
    /// `Owners::may_begin`): the status and why not, for the client.
    pub(super) fn may_begin(
        &self,
        id: &str,
        request: &RequestId,
    ) -> Result<(), (http::StatusCode, String)> {
        self.owners().may_begin(id, request).map(drop)
    }

    /// `stream` of the session `id`, letting go of each request whose answer it carries.
    fn releasing<S>(
        &self,
        id: &SessionId,
        stream: S,
    ) -> impl Stream<Item = ServerSseMessage> + use<S>
    where
        S: Stream<Item = ServerSseMessage>,
    {
        let (owners, session) = (Arc::clone(&self.owners), id.to_string());
        stream.inspect(move |sent| {
            let answered = sent.message.as_deref().and_then(|message| match message {
                JsonRpcMessage::Response(response) => Some(&response.id),
                JsonRpcMessage::Error(error) => error.id.as_ref(),
                _ => None,
            });
            if let Some(answered) = answered {
                owners
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .end(&session, answered);
            }
        })
    }

    /// Records that `caller` opened the session `id`, counted against the quota of
    /// `identity` (the key [`Self::reserve`] was given).
    pub(super) fn opened(&self, id: &str, caller: Caller, identity: Caller) {
        self.owners()
            .sessions
            .insert(id.to_owned(), (caller, identity));
    }

    /// Takes a place among `identity`'s sessions for a request that may open one, if it has
    /// fewer than `limit` open or being opened (counted together, so that requests sent at
    /// once cannot all pass); `None` at the limit. An identity's tokens with other grants
    /// (other scopes or groups) are other callers with sessions of their own, counted against
    /// the one quota of the identity.
    pub(super) async fn reserve(
        self: &Arc<Self>,
        identity: Caller,
        limit: Option<usize>,
    ) -> Option<Opening> {
        let live = self.local.sessions.read().await;
        let mut owners = self.owners();
        // Sessions that ended (closed, or expired inside rmcp) are forgotten.
        owners
            .sessions
            .retain(|id, _| live.contains_key(&SessionId::from(id.as_str())));
        if let Some(limit) = limit {
            let open = owners
                .sessions
                .values()
                .filter(|(_, counted)| *counted == identity)
                .count();
            let opening = owners.opening.get(&identity).copied().unwrap_or(0);
            if open + opening >= limit {
                return None;
            }
        }
        *owners.opening.entry(identity).or_default() += 1;
        Some(Opening {
            sessions: Arc::clone(self),
            identity,
        })
    }

    /// Whether a request of `caller` may use the session `id`: one this server opened for
    /// `caller`. Another identity's session, or an id this server never gave (a stateless
    /// request cannot pass itself off as a session's to skip the caps), is not found.
    /// Whether the session `id` counts against the quota of `identity` (whoever of it opened
    /// the session, with whatever grants).
    pub(super) fn counted_against(&self, id: &str, identity: Caller) -> bool {
        identity.0.is_some()
            && self
                .owners()
                .sessions
                .get(id)
                .is_some_and(|(_, counted)| *counted == identity)
    }

    /// Whether the session `id` is open (another's, or the caller's).
    pub(super) fn is_open(&self, id: &str) -> bool {
        self.owners().sessions.contains_key(id)
    }

    pub(super) fn belongs_to(&self, id: &str, caller: Caller) -> bool {
        self.owners()
            .sessions
            .get(id)
            .is_some_and(|(owner, _)| *owner == caller)
    }
}

impl SessionManager for PrefixedSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    /// A session as rmcp's local manager makes one, under a prefixed id.
    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id = SessionId::from(format!("{}{}", self.prefix, session_id()));
        let (handle, worker) = create_local_session(id.clone(), self.local.session_config.clone());
        {
            // Counted and inserted under one lock: a burst of `initialize` requests cannot all
            // pass the count before any is inserted.
            let mut sessions = self.local.sessions.write().await;
            if sessions.len() >= self.max_sessions {
                return Err(LocalSessionManagerError::SessionError(
                    rmcp::transport::streamable_http_server::session::local::SessionError::Io(
                        std::io::Error::other(format!(
                            "this MCP server has {} sessions open, its limit",
                            self.max_sessions
                        )),
                    ),
                ));
            }
            // The owners of sessions that ended (closed, or expired inside rmcp) are forgotten.
            let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            owners
                .sessions
                .retain(|id, _| sessions.contains_key(&SessionId::from(id.as_str())));
            owners
                .requests
                .retain(|id, _| sessions.contains_key(&SessionId::from(id.as_str())));
            drop(owners);
            sessions.insert(id.clone(), handle);
        }
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
        {
            let mut owners = self.owners();
            owners.sessions.remove(id.as_ref());
            owners.requests.remove(id.as_ref());
        }
        self.local.close_session(id).await
    }

    /// A request's stream, once its id is known not to be in progress in the session: the id
    /// is held until a stream carries the request's answer (or the client cancels it).
    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let request = match &message {
            JsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        if let Some(request) = &request
            && let Err(refusal) = self.owners().begin(id, request)
        {
            return Err(LocalSessionManagerError::SessionError(
                rmcp::transport::streamable_http_server::session::local::SessionError::Io(
                    std::io::Error::other(refusal),
                ),
            ));
        }
        match self.local.create_stream(id, message).await {
            Ok(stream) => Ok(self.releasing(id, stream)),
            Err(error) => {
                if let Some(request) = &request {
                    self.owners().end(id, request);
                }
                Err(error)
            }
        }
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        // A request the client cancels is forgotten by rmcp: its answer will not come on its
        // stream, and its id may be used again.
        if let JsonRpcMessage::Notification(notification) = &message
            && let ClientNotification::CancelledNotification(cancelled) = &notification.notification
            && let Some(request) = &cancelled.params.request_id
        {
            self.owners().end(id, request);
        }
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.local.create_standalone_stream(id).await?;
        Ok(self.releasing(id, stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.local.resume(id, last_event_id).await?;
        Ok(self.releasing(id, stream))
    }
}
