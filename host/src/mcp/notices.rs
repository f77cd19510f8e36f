//! Where plugins' notices go for the server's subscription streams: each to the queues of the
//! listeners that may hear it, never through one queue all sessions share — where a busy
//! client's notices would push out another's, and every listener would wake for every notice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::catalog::{Caller, Notice, Origin};

/// Notices a slow subscription stream may fall behind by before it misses some (of its own
/// route only).
const NOTICES_QUEUED: usize = 64;

/// Whom a listener may hear: its own session's requests, or — a stateless listener, whose
/// session ends with its request — the stateless requests of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Route {
    Session(u64),
    Caller(Caller),
}

impl Route {
    fn of_listener(listener: &Origin) -> Self {
        match listener.stateless {
            Some(caller) => Route::Caller(caller),
            None => Route::Session(listener.session),
        }
    }
}

/// The routes with a listener, each with its own queue. Cheap to clone: clones share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Notices {
    routes: Arc<Mutex<HashMap<Route, broadcast::Sender<Notice>>>>,
}

impl Notices {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Route, broadcast::Sender<Notice>>> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Passes `notice`, made by a request from `origin`, to the listeners that may hear it:
    /// those of its session, and for a stateless request those of its caller.
    pub(crate) fn send(&self, origin: Origin, notice: Notice) {
        let routes = [
            Some(Route::Session(origin.session)),
            origin.stateless.map(Route::Caller),
        ];
        let routes_held = self.lock();
        for route in routes.into_iter().flatten() {
            if let Some(sender) = routes_held.get(&route) {
                let _ = sender.send(notice.clone());
            }
        }
    }

    /// Starts listening as `listener`: the notices it may hear, from now on.
    pub(crate) fn listen(&self, listener: &Origin) -> Listening {
        let route = Route::of_listener(listener);
        let receiver = self
            .lock()
            .entry(route)
            .or_insert_with(|| broadcast::Sender::new(NOTICES_QUEUED))
            .subscribe();
        Listening {
            receiver: Some(receiver),
            route,
            notices: self.clone(),
        }
    }
}

/// One listener's notices; its route's queue goes when its last listener does.
pub(crate) struct Listening {
    receiver: Option<broadcast::Receiver<Notice>>,
    route: Route,
    notices: Notices,
}

impl Listening {
    /// The next notice; `None` once none can come. A listener that fell behind its own
    /// route's queue skips what it missed.
    pub(crate) async fn next(&mut self) -> Option<Notice> {
        let receiver = self.receiver.as_mut()?;
        loop {
            match receiver.recv().await {
                Ok(notice) => return Some(notice),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut routes = self.notices.lock();
        if routes
            .get(&self.route)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            routes.remove(&self.route);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(session: u64) -> Origin {
        Origin {
            session,
            stateless: None,
        }
    }

    fn stateless(session: u64, caller: u8) -> Origin {
        Origin {
            session,
            stateless: Some(Caller(Some([caller; 16]))),
        }
    }

    fn updated(uri: &str) -> Notice {
        Notice::ResourceUpdated(uri.to_owned())
    }

    #[tokio::test]
    async fn a_busy_client_does_not_push_out_another_clients_notices() {
        let notices = Notices::default();
        let mut alice = notices.listen(&session(1));
        let mut bob = notices.listen(&session(2));
        // Alice's session says far more than a queue holds, before anyone reads.
        for n in 0..(NOTICES_QUEUED * 4) {
            notices.send(session(1), updated(&format!("alice://{n}")));
        }
        notices.send(session(2), updated("bob://mine"));
        // Bob hears his own notice (with one queue for all, it was pushed out).
        assert!(
            matches!(bob.next().await, Some(Notice::ResourceUpdated(uri)) if uri == "bob://mine")
        );
        // Alice, behind her own queue, skips to what it still holds.
        assert!(
            matches!(alice.next().await, Some(Notice::ResourceUpdated(uri)) if uri.starts_with("alice://"))
        );
    }

    #[tokio::test]
    async fn notices_reach_only_their_session_or_stateless_caller() {
        let notices = Notices::default();
        let mut carol = notices.listen(&stateless(7, 3));
        let mut dave = notices.listen(&session(8));
        // Another caller's stateless request, another session, then Carol's own request.
        notices.send(stateless(9, 4), updated("other-caller"));
        notices.send(session(10), updated("other-session"));
        notices.send(stateless(11, 3), updated("carols"));
        notices.send(session(8), updated("daves"));
        assert!(
            matches!(carol.next().await, Some(Notice::ResourceUpdated(uri)) if uri == "carols")
        );
        assert!(matches!(dave.next().await, Some(Notice::ResourceUpdated(uri)) if uri == "daves"));
        // The queues go with their last listener.
        drop(carol);
        drop(dave);
        assert!(notices.lock().is_empty());
    }
}
