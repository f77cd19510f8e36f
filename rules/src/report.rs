//! What a running tool reports besides its result (contract 0.2.0's `host` interface): log
//! messages at a [`Level`], and progress; and the bounds the host keeps them within.
//!
//! The guest SDK sends them; the host tags them with the plugin and the tool, logs them, and
//! passes them on within these bounds.

use core::fmt;
use core::time::Duration;

/// How important a log message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the tool handled.
    Warn,
    /// A failure.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        })
    }
}

/// Longest log message kept, in bytes; the rest is cut.
pub const MAX_LOG_MESSAGE_BYTES: usize = 4 << 10;
/// Most log messages one call may emit; later ones are counted and dropped.
pub const MAX_LOGS_PER_CALL: u32 = 100;
/// Shortest time between two progress reports of one call that are both passed on.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);
/// Most progress reports one call may pass on; later ones are dropped.
pub const MAX_PROGRESS_PER_CALL: u32 = 1000;
/// Most notices (resource updates, list changes) one call passes on; more are dropped, and a
/// notice repeated within a call is passed on once.
pub const MAX_NOTICES_PER_CALL: u32 = 100;

#[cfg(test)]
mod tests {
    extern crate std;
    use super::Level;
    use std::string::ToString;

    #[test]
    fn levels_are_ordered_and_named() {
        assert!(Level::Trace < Level::Debug && Level::Warn < Level::Error);
        assert_eq!(Level::Warn.to_string(), "warn");
    }
}
