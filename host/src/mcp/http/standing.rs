//! The standing streams each client holds open: a session's `GET` streams and stateless
//! `subscriptions/listen` answers, which stay open for as long as the client stays (with a
//! static token, without end). Each holds a connection; a client may hold a quarter of the
//! connections [`serve_http`](super::serve_http) accepts, so that one client, however many
//! sessions it opens, cannot take them all from the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::mcp::catalog::Caller;

/// Most standing streams one identified client holds open at once: a quarter of the
/// connections `serve_http` accepts. A server without authentication, where every client is
/// one, has no such bound (its connections are bound by the listener's cap alone).
pub(super) const MAX_STANDING_PER_CLIENT: usize = super::serve::MAX_CONNECTIONS / 4;

/// The count of standing streams open, by client.
#[derive(Default)]
pub(super) struct Standing(Mutex<HashMap<Caller, usize>>);

/// A standing stream's place among its client's: given back when dropped (with the stream's
/// response body).
pub(super) struct Place {
    standing: Arc<Standing>,
    who: Caller,
}

impl Standing {
    /// A place for a standing stream of `who`, or `None` if it holds
    /// [`MAX_STANDING_PER_CLIENT`] already.
    pub(super) fn take(self: &Arc<Self>, who: Caller) -> Option<Place> {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(who).or_default();
        if who.0.is_some() && *count >= MAX_STANDING_PER_CLIENT {
            return None;
        }
        *count += 1;
        Some(Place {
            standing: Arc::clone(self),
            who,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self
            .standing
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.who) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.who);
            }
        }
    }
}
