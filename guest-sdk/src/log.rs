//! Logging from a tool: `log::info!("…")` and its siblings, formatted like `format!`.
//!
//! The host tags each message with the plugin and the tool being called, logs it, and sends it
//! to MCP clients that asked for logs. It bounds them: 100 messages per call, 4 KiB each.
//! Natively the messages go nowhere (see [`crate::report::capture`] for tests).

/// How important a message is.
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
