//! What a running tool reports besides its result: log messages and progress.
//!
//! Plugins built against contract 0.2.0 report through the imported interface `host`. Every
//! report is logged with `tracing` (target `llm_worker::plugin`, fields `plugin` and `tool`);
//! a caller that wants them as values runs its call inside [`with_tool_events`]:
//!
//! ```no_run
//! # async fn run(tools: llm_worker::ToolServerHandle) {
//! use llm_worker::events::{ToolEvent, ToolEventKind, with_tool_events};
//!
//! let result = with_tool_events(
//!     |event: ToolEvent| match event.kind {
//!         ToolEventKind::Progress { done, total, .. } => eprintln!("{done} of {total:?}"),
//!         // A plugin's own text: escaped before a terminal shows it (a line break or an
//!         // escape sequence in it would forge lines or move the cursor).
//!         ToolEventKind::Log { level, message } => {
//!             eprintln!("[{level}] {}", message.escape_debug())
//!         }
//!         _ => {}
//!     },
//!     tools.call_tool("index", r#"{"path":"docs"}"#),
//! )
//! .await;
//! # }
//! ```
//!
//! The scope covers every call awaited inside it, on the same task;
//! [`Worker::execute_tool_calls`](crate::Worker::execute_tool_calls) carries it into the tasks
//! it spawns and tags each event with the call's id. A worker's own
//! [`add_tool_event_hook`](crate::Worker::add_tool_event_hook)s get the events of the calls it
//! runs, also tagged, with or without a scope.
//!
//! Reports are bounded: a message is cut at [`MAX_LOG_MESSAGE_BYTES`]; a call may log
//! [`MAX_LOGS_PER_CALL`] messages (one more says how many were dropped; an instance's start,
//! when a call starts it, counts apart from the call); progress must grow, and reports
//! closer than [`PROGRESS_INTERVAL`] to the last one are dropped unless they complete the work
//! (once), at most [`MAX_PROGRESS_PER_CALL`] per call.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

// The bounds and the levels are the contract's, shared with the guest SDK.
pub use llm_worker_rules::report::{
    Level as LogLevel, MAX_LOG_MESSAGE_BYTES, MAX_LOGS_PER_CALL, MAX_PROGRESS_PER_CALL,
    PROGRESS_INTERVAL,
};

/// A report from a running tool.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolEvent {
    /// The plugin that reported (its file stem).
    pub plugin: String,
    /// The tool being called.
    pub tool: String,
    /// The id of the model's tool call, when the call came through
    /// [`Worker::execute_tool_calls`](crate::Worker::execute_tool_calls).
    pub call_id: Option<String>,
    /// What was reported.
    pub kind: ToolEventKind,
}

/// What a tool reported.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolEventKind {
    /// A log message.
    Log {
        /// How important it is.
        level: LogLevel,
        /// The text (cut at [`MAX_LOG_MESSAGE_BYTES`]).
        message: String,
    },
    /// The plugin says the resource `uri` changed (MCP clients subscribed to it are told).
    ResourceUpdated {
        /// The resource's URI.
        uri: String,
    },
    /// The plugin says its list of resources or prompts changed.
    ListChanged(Listing),
    /// Progress of the current call.
    Progress {
        /// Units done so far.
        done: f64,
        /// Units in all, when known.
        total: Option<f64>,
        /// What is happening.
        message: Option<String>,
    },
}

/// Which list of a plugin changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Listing {
    /// Its resources.
    Resources,
    /// Its prompts.
    Prompts,
}

/// Most notices (resource updates, list changes) one call passes on; more are dropped, and a
/// notice repeated within a call is passed on once.
pub use llm_worker_rules::report::MAX_NOTICES_PER_CALL;

/// Longest resource URI a notice may name, in bytes; a longer one is dropped.
pub use llm_worker_rules::template::MAX_URI_BYTES;

pub(crate) type Sink = Arc<dyn Fn(ToolEvent) + Send + Sync>;

tokio::task_local! {
    static SINK: Sink;
}

/// Runs `future` with `sink` receiving the [`ToolEvent`]s of every tool call awaited inside it.
///
/// The sink is called on the thread running the plugin, while the plugin waits: keep it quick
/// (send to a channel rather than do I/O).
pub async fn with_tool_events<F: Future>(
    sink: impl Fn(ToolEvent) + Send + Sync + 'static,
    future: F,
) -> F::Output {
    SINK.scope(Arc::new(sink), future).await
}

/// The sink of the current scope, if any.
pub(crate) fn current_sink() -> Option<Sink> {
    SINK.try_with(Arc::clone).ok()
}

/// Runs `future` with `sink` receiving its events.
// Not an `async fn`: one would hold `future` twice (its argument and the scope made of it).
pub(crate) fn with_sink<F: Future>(sink: Sink, future: F) -> impl Future<Output = F::Output> {
    SINK.scope(sink, future)
}

/// `sink`, tagging the events it gets with `call_id` (unless they have one).
pub(crate) fn tagged(sink: Sink, call_id: String) -> Sink {
    Arc::new(move |mut event: ToolEvent| {
        event.call_id.get_or_insert_with(|| call_id.clone());
        sink(event);
    })
}

/// Cuts `text` to [`MAX_LOG_MESSAGE_BYTES`] at a character boundary; whether it was longer.
pub(crate) fn cut(text: &mut String) -> bool {
    if text.len() <= MAX_LOG_MESSAGE_BYTES {
        return false;
    }
    text.truncate(text.floor_char_boundary(MAX_LOG_MESSAGE_BYTES));
    true
}

/// Whether `c` may not reach a person as a plugin wrote it: a control character (a terminal's
/// escape sequences start with one; a line break would start a line of its own) or one that
/// hides or reorders text (`llm_worker_rules::tool::is_hidden_char`).
pub(crate) fn unshowable(c: char) -> bool {
    c.is_control() || llm_worker_rules::tool::is_hidden_char(c)
}

/// `text` (a plugin's progress or status message, a prompt's description) with each
/// [`unshowable`] character replaced by U+FFFD; with `lines`, line breaks and tabs are kept.
pub(crate) fn shown_plainly(text: &mut String, lines: bool) {
    let keep = |c: char| lines && matches!(c, '\n' | '\t');
    if text.chars().any(|c| unshowable(c) && !keep(c)) {
        *text = text
            .chars()
            .map(|c| {
                if unshowable(c) && !keep(c) {
                    '\u{FFFD}'
                } else {
                    c
                }
            })
            .collect();
    }
}

/// The reporting state of one plugin call: where events go, and the bounds.
pub(crate) struct CallReports {
    plugin: Arc<str>,
    tool: Option<Arc<str>>,
    sink: Option<Sink>,
    logs: u32,
    dropped_logs: u32,
    last_progress: Option<(Instant, f64)>,
    progress_reports: u32,
    completed: bool,
    /// The notices this call passed on: each is passed on once.
    notices: Vec<ToolEventKind>,
}

impl CallReports {
    pub(crate) fn new(plugin: &Arc<str>) -> Self {
        Self {
            plugin: Arc::clone(plugin),
            tool: None,
            sink: None,
            logs: 0,
            dropped_logs: 0,
            last_progress: None,
            progress_reports: 0,
            completed: false,
            notices: Vec::new(),
        }
    }

    /// A call of `tool` (`None`: the instance starting) begins, reporting to `sink`.
    pub(crate) fn begin(&mut self, tool: Option<Arc<str>>, sink: Option<Sink>) {
        self.tool = tool;
        self.sink = sink;
        self.logs = 0;
        self.dropped_logs = 0;
        self.last_progress = None;
        self.progress_reports = 0;
        self.completed = false;
        self.notices.clear();
    }

    /// A notice from the plugin (a resource changed, a list changed), within the call's
    /// bound; a URI over [`MAX_URI_BYTES`] is dropped.
    pub(crate) fn notice(&mut self, mut kind: ToolEventKind) {
        // One resource, however the plugin spells its URI (`NOTES://all`, `notes://%61ll`):
        // one notice, not one per spelling until the call's bound is spent.
        if let ToolEventKind::ResourceUpdated { uri } = &mut kind
            && uri.len() <= MAX_URI_BYTES
        {
            let comparable = llm_worker_rules::resource::comparable_uri(uri);
            if comparable != *uri {
                *uri = comparable;
            }
        }
        if self.notices.len() >= MAX_NOTICES_PER_CALL as usize || self.notices.contains(&kind) {
            return;
        }
        // A URI as a listed one must be (no character that hides text or moves a terminal's
        // cursor), whoever hears of it: an embedder's event sink as much as an MCP client.
        if let ToolEventKind::ResourceUpdated { uri } = &kind
            && (uri.len() > MAX_URI_BYTES || llm_worker_rules::resource::check_uri(uri).is_err())
        {
            return;
        }
        self.notices.push(kind.clone());
        tracing::debug!(target: "llm_worker::plugin", plugin = %self.plugin, tool = %self.tool(), "notice: {kind:?}");
        self.send(kind);
    }

    /// The call ended: say how many messages were dropped, and let the sink go.
    pub(crate) fn end(&mut self) {
        if self.dropped_logs > 0 {
            let message = format!(
                "{} more log messages of this call were dropped (the limit is \
                 {MAX_LOGS_PER_CALL} per call)",
                self.dropped_logs
            );
            self.dropped_logs = 0;
            self.emit_log(LogLevel::Warn, message);
        }
        self.sink = None;
        self.tool = None;
    }

    fn tool(&self) -> &str {
        self.tool.as_deref().unwrap_or("(starting)")
    }

    pub(crate) fn log(&mut self, level: LogLevel, mut message: String) {
        if self.logs >= MAX_LOGS_PER_CALL {
            self.dropped_logs = self.dropped_logs.saturating_add(1);
            return;
        }
        self.logs += 1;
        if cut(&mut message) {
            message.push_str(" … [cut]");
        }
        // It reaches clients (a terminal, a log viewer) with its lines, but nothing in it that
        // acts on a terminal or hides text.
        shown_plainly(&mut message, true);
        self.emit_log(level, message);
    }

    fn emit_log(&self, level: LogLevel, message: String) {
        let (plugin, tool) = (&*self.plugin, self.tool());
        // The host's own log: one line each, nothing in it acting on a terminal.
        let line = llm_worker_rules::tool::Visible(&message.replace('\n', "\\n")).to_string();
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: "llm_worker::plugin", plugin = %plugin, tool = %tool, "{line}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "llm_worker::plugin", plugin = %plugin, tool = %tool, "{line}")
            }
            LogLevel::Info => {
                tracing::info!(target: "llm_worker::plugin", plugin = %plugin, tool = %tool, "{line}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "llm_worker::plugin", plugin = %plugin, tool = %tool, "{line}")
            }
            LogLevel::Error => {
                tracing::error!(target: "llm_worker::plugin", plugin = %plugin, tool = %tool, "{line}")
            }
        }
        self.send(ToolEventKind::Log { level, message });
    }

    pub(crate) fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        if !done.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            return;
        }
        if self.completed || self.progress_reports >= MAX_PROGRESS_PER_CALL {
            return;
        }
        let now = Instant::now();
        let completes = total.is_some_and(|total| done >= total);
        if let Some((at, last)) = self.last_progress {
            // Progress grows, and not faster than the interval (the report that completes
            // the work passes, once).
            if done <= last || (!completes && now.duration_since(at) < PROGRESS_INTERVAL) {
                return;
            }
        }
        self.last_progress = Some((now, done));
        self.progress_reports += 1;
        self.completed = completes;
        let message = message.map(|mut text| {
            cut(&mut text);
            shown_plainly(&mut text, false);
            text
        });
        tracing::debug!(target: "llm_worker::plugin", plugin = %self.plugin, tool = %self.tool(), done, total, "progress");
        self.send(ToolEventKind::Progress {
            done,
            total,
            message,
        });
    }

    fn send(&self, kind: ToolEventKind) {
        if let Some(sink) = &self.sink {
            sink(ToolEvent {
                plugin: self.plugin.to_string(),
                tool: self.tool().to_owned(),
                call_id: None,
                kind,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn collecting() -> (Sink, Arc<Mutex<Vec<ToolEvent>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&events);
        let sink: Sink = Arc::new(move |event| {
            if let Ok(mut events) = into.lock() {
                events.push(event);
            }
        });
        (sink, events)
    }

    #[test]
    fn logs_are_bounded_per_call() {
        let (sink, events) = collecting();
        let mut reports = CallReports::new(&Arc::from("p"));
        reports.begin(Some(Arc::from("t")), Some(sink));
        for i in 0..(MAX_LOGS_PER_CALL + 5) {
            reports.log(LogLevel::Info, format!("line {i}"));
        }
        reports.log(LogLevel::Info, "x".repeat(MAX_LOG_MESSAGE_BYTES * 2));
        reports.end();
        let events = events.lock().map(|e| e.clone()).unwrap_or_default();
        assert_eq!(events.len(), MAX_LOGS_PER_CALL as usize + 1);
        let ToolEventKind::Log { level, message } = &events[events.len() - 1].kind else {
            panic!("not a log: {events:?}");
        };
        assert_eq!(*level, LogLevel::Warn);
        assert!(message.starts_with("6 more log messages"), "{message}");
        assert_eq!(events[0].tool, "t");
        assert_eq!(events[0].plugin, "p");
    }

    #[test]
    fn progress_grows_and_is_throttled_but_completion_passes() {
        let (sink, events) = collecting();
        let mut reports = CallReports::new(&Arc::from("p"));
        reports.begin(Some(Arc::from("t")), Some(sink));
        reports.progress(1.0, Some(4.0), None);
        reports.progress(2.0, Some(4.0), None); // too soon
        reports.progress(0.5, Some(4.0), None); // goes back
        reports.progress(f64::NAN, None, None);
        reports.progress(4.0, Some(4.0), Some("done".into())); // completes
        reports.progress(5.0, Some(4.0), None); // after completing
        reports.progress(4.0, Some(0.0), None); // completes again
        let done: Vec<f64> = events
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| match e.kind {
                ToolEventKind::Progress { done, .. } => Some(done),
                _ => None,
            })
            .collect();
        assert_eq!(done, vec![1.0, 4.0]);
    }

    #[test]
    fn a_call_passes_on_a_bounded_number_of_reports() {
        let (sink, events) = collecting();
        let mut reports = CallReports::new(&Arc::from("p"));
        reports.begin(Some(Arc::from("t")), Some(sink));
        for done in 0..5000 {
            // Growing, each one far enough from the last (the clock is not waited on: the
            // interval is measured from the previous report, so backdate it).
            reports.last_progress = reports
                .last_progress
                .map(|(at, last)| (at.checked_sub(PROGRESS_INTERVAL).unwrap_or(at), last));
            reports.progress(f64::from(done), None, Some("x".repeat(10_000)));
        }
        let events = events.lock().map(|e| e.clone()).unwrap_or_default();
        assert_eq!(events.len(), MAX_PROGRESS_PER_CALL as usize);
        assert!(events.iter().all(|e| matches!(&e.kind,
            ToolEventKind::Progress { message: Some(m), .. } if m.len() <= MAX_LOG_MESSAGE_BYTES)));
    }
}
