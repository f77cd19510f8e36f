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
    /// A request of `identity` opening a session ends.
    fn leave_opening(&mut self, identity: Caller) {
        if let Some(count) = self.opening.get_mut(&identity) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.opening.remove(&identity);
            }
        }
    }

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
    /// Who sends the request (the identity with its grants): the session's owner.
    caller: Caller,
    /// Whether the place is still held: it becomes the session's when rmcp creates one.
    held: std::sync::atomic::AtomicBool,
}

impl Opening {
    /// The place becomes the session `id`'s, recorded in `owners` (the lock the session's
    /// insertion holds): owned by the caller and counted against its identity from the moment
    /// it exists, whatever becomes of the request then.
    fn becomes(&self, owners: &mut Owners, id: &str) {
        owners
            .sessions
            .insert(id.to_owned(), (self.caller, self.identity));
        if self.held.swap(false, std::sync::atomic::Ordering::AcqRel) {
            owners.leave_opening(self.identity);
        }
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if *self.held.get_mut() {
            self.sessions.owners().leave_opening(self.identity);
        }
    }
}

tokio::task_local! {
    /// The place of the request rmcp is handling, if it may open a session: the session
    /// [`PrefixedSessions::create_session`] makes for it takes it.
    pub(super) static OPENING: Arc<Opening>;
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

    /// Takes a place among `identity`'s sessions for a request that may open one, if it has
    /// fewer than `limit` open or being opened (counted together, so that requests sent at
    /// once cannot all pass); `None` at the limit. An identity's tokens with other grants
    /// (other scopes or groups) are other callers with sessions of their own, counted against
    /// the one quota of the identity.
    pub(super) async fn reserve(
        self: &Arc<Self>,
        identity: Caller,
        caller: Caller,
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
            caller,
            held: std::sync::atomic::AtomicBool::new(true),
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
            // Owned and counted as it is made: a client that leaves before the answer to its
            // `initialize` came back through the service (the session made, its answer sent
            // on) leaves a session that is its own and counts against its quota until it
            // expires, not one no one's quota counts. Without a request's place (no HTTP
            // service made it), the session is no one's, and no request may use it.
            let Ok(()) = OPENING.try_with(|opening| opening.becomes(&mut owners, id.as_ref()))
            else {
                return Err(LocalSessionManagerError::SessionError(
                    rmcp::transport::streamable_http_server::session::local::SessionError::Io(
                        std::io::Error::other("a session opened outside a request's place"),
                    ),
                ));
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that leaves as its `initialize` is answered (the session made, the answer
    /// on its way back through the service) left a session whose owner was to be recorded
    /// once the answer came back: no one's, and counted against no quota, for as long as
    /// rmcp kept it. The session is its opener's, and counted, from the moment it is made.
    #[tokio::test]
    async fn a_session_is_its_openers_and_counted_as_soon_as_it_is_made() {
        let sessions = Arc::new(PrefixedSessions::new(
            LocalSessionManager::default(),
            "r1-".into(),
            8,
        ));
        let (identity, caller) = (Caller(Some([1; 16])), Caller(Some([2; 16])));
        let opening = sessions
            .reserve(identity, caller, Some(1))
            .await
            .map(Arc::new)
            .expect("a place");
        let (id, _transport) = OPENING
            .scope(Arc::clone(&opening), sessions.create_session())
            .await
            .expect("a session");
        // The request goes, its answer never seen.
        drop(opening);
        assert!(sessions.belongs_to(id.as_ref(), caller));
        assert!(!sessions.belongs_to(id.as_ref(), identity));
        assert!(sessions.counted_against(id.as_ref(), identity));
        assert!(
            sessions.reserve(identity, caller, Some(1)).await.is_none(),
            "a second session within a quota of one"
        );
        // Its place was given to the session, not given back as well.
        assert!(sessions.owners().opening.is_empty());
        // A session made with no request's place is refused: it would be no one's.
        assert!(sessions.create_session().await.is_err());
    }
}
