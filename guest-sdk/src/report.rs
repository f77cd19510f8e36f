//! Logs and progress from a running tool, and notices that the plugin's resources or lists
//! changed (the contract's `host` interface).
//!
//! In a plugin they go to the host, which tags them with the plugin and the tool, logs them,
//! and passes them to the client (MCP `notifications/message` and `notifications/progress`).
//! Natively they go nowhere, unless a test collects them with [`capture`]:
//!
//! ```
//! use llm_worker_guest::{log, progress, report::{capture, Report}};
//!
//! let ((), reports) = capture(|| {
//!     log::info!("indexing {} files", 3);
//!     progress(1.0, Some(3.0), Some("a.txt"));
//! });
//! assert_eq!(reports[0], Report::Log { level: log::Level::Info, message: "indexing 3 files".into() });
//! assert!(matches!(reports[1], Report::Progress { done: 1.0, total: Some(3.0), .. }));
//! ```

use std::cell::RefCell;

use crate::log::Level;

/// The bounds the host keeps a call's reports within (the contract's, from `llm-worker-rules`).
pub use llm_worker_rules::report::{
    MAX_LOG_MESSAGE_BYTES, MAX_LOGS_PER_CALL, MAX_PROGRESS_PER_CALL, PROGRESS_INTERVAL,
};

/// One report, as [`capture`] collects it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Report {
    /// A log message.
    Log {
        /// How important it is.
        level: Level,
        /// The text.
        message: String,
    },
    /// Progress of the current call.
    Progress {
        /// Units done.
        done: f64,
        /// Units in all, when known.
        total: Option<f64>,
        /// What is happening.
        message: Option<String>,
    },
    /// The resource of this URI changed ([`resource_updated`]).
    ResourceUpdated(String),
    /// A list changed ([`list_changed`]).
    ListChanged(Listing),
}

/// Which of a plugin's lists changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Its resources.
    Resources,
    /// Its prompts.
    Prompts,
}

thread_local! {
    static CAPTURE: RefCell<Option<Vec<Report>>> = const { RefCell::new(None) };
}

/// Runs `f`, collecting the logs and progress it reports on this thread (for tests).
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Report>) {
    let outer = CAPTURE.with(|c| c.replace(Some(Vec::new())));
    let result = f();
    let reports = CAPTURE.with(|c| c.replace(outer)).unwrap_or_default();
    (result, reports)
}

fn record(report: impl FnOnce() -> Report) {
    CAPTURE.with(|c| {
        if let Some(reports) = c.borrow_mut().as_mut() {
            reports.push(report());
        }
    });
}

pub(crate) fn log(level: Level, message: &str) {
    record(|| Report::Log {
        level,
        message: message.to_owned(),
    });
    #[cfg(target_arch = "wasm32")]
    crate::export::host_log(level, message);
}

/// Reports the current call's progress: `done` of `total` (when known) units, with an optional
/// message. Keep `done` growing; the host drops reports that go back, and passes on at most one
/// every [`PROGRESS_INTERVAL`] (plus the one that reaches `total`), [`MAX_PROGRESS_PER_CALL`]
/// per call.
pub fn progress(done: f64, total: Option<f64>, message: Option<&str>) {
    record(|| Report::Progress {
        done,
        total,
        message: message.map(str::to_owned),
    });
    #[cfg(target_arch = "wasm32")]
    crate::export::host_progress(done, total, message);
}

/// Tells the host that the resource `uri` changed: clients subscribed to it are told. Call it
/// from within a call (a tool's, a resource read's, …): a plugin runs only then.
pub fn resource_updated(uri: &str) {
    record(|| Report::ResourceUpdated(uri.to_owned()));
    #[cfg(target_arch = "wasm32")]
    crate::export::host_resource_updated(uri);
}

/// Tells the host that the plugin's list of resources or prompts changed: the session reads
/// it again and its client is told.
pub fn list_changed(which: Listing) {
    record(|| Report::ListChanged(which));
    #[cfg(target_arch = "wasm32")]
    crate::export::host_list_changed(which);
}
