//! Logging from a tool: `log::info!("…")` and its siblings, formatted like `format!`.
//!
//! The host tags each message with the plugin and the tool being called, logs it, and sends it
//! to MCP clients that asked for logs. It bounds them: [`MAX_LOGS_PER_CALL`] messages per
//! call, each cut at [`MAX_LOG_MESSAGE_BYTES`] bytes. Natively the messages go nowhere (see
//! [`crate::report::capture`] for tests).
//!
//! In a plugin, the records of the [`log`](https://docs.rs/log) crate, through which most
//! libraries log, go to the host the same way: the plugin's first call installs a logger that
//! forwards them (unless the plugin installed one of its own). Natively nothing is installed:
//! logging is the program's to set up.
//!
//! [`MAX_LOGS_PER_CALL`]: crate::report::MAX_LOGS_PER_CALL
//! [`MAX_LOG_MESSAGE_BYTES`]: crate::report::MAX_LOG_MESSAGE_BYTES

/// How important a message is (the host's `LogLevel`: one type, from `llm-worker-rules`).
pub use llm_worker_rules::report::Level;

/// Logs `message` at `level`.
pub fn log(level: Level, message: &str) {
    crate::report::log(level, message);
}

#[doc(hidden)]
#[macro_export]
macro_rules! __log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::log($crate::log::Level::$level, &::std::format!($($arg)+))
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __log_trace {
    ($($arg:tt)+) => { $crate::__log!(Trace, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __log_debug {
    ($($arg:tt)+) => { $crate::__log!(Debug, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __log_info {
    ($($arg:tt)+) => { $crate::__log!(Info, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __log_warn {
    ($($arg:tt)+) => { $crate::__log!(Warn, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __log_error {
    ($($arg:tt)+) => { $crate::__log!(Error, $($arg)+) };
}

#[doc(inline)]
pub use crate::__log_debug as debug;
#[doc(inline)]
pub use crate::__log_error as error;
#[doc(inline)]
pub use crate::__log_info as info;
#[doc(inline)]
pub use crate::__log_trace as trace;
#[doc(inline)]
pub use crate::__log_warn as warn;
