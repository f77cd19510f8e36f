//! How many MCP sessions a server holds: the [`SessionCounter`] of a server and each
//! session's [`Admission`] among them, taken when the session first creates plugin instances.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::ErrorCode;

/// Counts the live sessions of a server; each session holds one count until it is dropped.
#[derive(Debug, Default)]
pub(crate) struct SessionCounter {
    live: AtomicUsize,
}

#[cfg(feature = "mcp-http")]
impl SessionCounter {
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

/// One session's place in a [`SessionCounter`].
#[derive(Debug)]
pub(crate) struct Counted(Arc<SessionCounter>);

/// How a session takes its place among a server's live sessions: when it first creates plugin
/// instances, not when rmcp builds it (rmcp builds a handler for a schema lookup too).
#[derive(Debug)]
pub(crate) struct Admission {
    counter: Arc<SessionCounter>,
    limit: usize,
    counted: Mutex<Option<Counted>>,
}

#[cfg(feature = "mcp-http")]
impl Admission {
    pub(crate) fn new(counter: Arc<SessionCounter>, limit: usize) -> Self {
        Self {
            counter,
            limit,
            counted: Mutex::new(None),
        }
    }
}

impl Admission {
    /// Takes the session's place, once; an error if the server has `limit` sessions live.
    pub(crate) fn admit(&self) -> Result<(), ErrorData> {
        // Held across the check and the count: two first calls of one session count it once.
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        if counted.is_some() {
            return Ok(());
        }
        let taken = self
            .counter
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live < self.limit).then_some(live + 1)
            })
            .map(|_| Counted(Arc::clone(&self.counter)))
            .map_err(|_| {
                ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "this MCP server has {} sessions open, its limit; try again when one ends",
                        self.limit
                    ),
                    None,
                )
            })?;
        *counted = Some(taken);
        Ok(())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let live = self.0.live.fetch_sub(1, Ordering::AcqRel).saturating_sub(1);
        // What a test of the session cap and the idle timeout waits for.
        tracing::debug!("an MCP session ended ({live} open)");
    }
}
