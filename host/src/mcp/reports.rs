//! What one tool call tells its client besides its result, in order: the plugin's logs (at
//! or above the client's level), progress (the plugin's, or the host's own when it says none),
//! and its notices — a subscribed resource changed, a list changed.

#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    ResourceUpdatedNotificationParam,
};
use serde_json::Value;

use super::catalog::{Notice, Origin, SessionTools};
use crate::events::{Listing, LogLevel, ToolEvent, ToolEventKind};

/// MCP's severity ranks, least important first, for comparing with the client's level.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Trace | LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warn => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// What one call tells its client besides the result, in order.
pub(super) enum Report {
    /// What the plugin reported.
    Plugin(ToolEvent),
    /// The host's own progress report: the call started (0 of 1) or finished (1 of 1).
    Host { done: f64, message: String },
    /// The call has ended: nothing more comes.
    End,
}

/// Most reports one call may have waiting to be sent; more are dropped (a client that does
/// not read must not make the host hold a plugin's every report).
pub(super) const REPORTS_QUEUED: usize = 256;

/// How long a finished call waits for its reports to be sent before it answers.
pub(super) const REPORTS_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Where one request's reports go: its client, as far as it asked, and the server's
/// subscription streams.
pub(super) struct ReportsTo {
    /// Where the request comes from (a stream passes only its own session's notices).
    pub(super) origin: Origin,
    pub(super) peer: rmcp::Peer<RoleServer>,
    /// The least important log message the client wants.
    pub(super) level: Arc<Mutex<Option<LoggingLevel>>>,
    /// The resources the client subscribed to.
    pub(super) subscriptions: Arc<Mutex<BTreeSet<String>>>,
    /// The server's subscription streams.
    pub(super) notices: super::notices::Notices,
    /// The session's plugins, to check that a plugin speaks only of its own resources.
    pub(super) tools: Arc<Mutex<SessionTools>>,
    /// The request's progress token, if the client sent one.
    pub(super) token: Option<ProgressToken>,
    /// The task the reports are of, after its request was answered with it: its logs name it
    /// (`_meta`'s `io.modelcontextprotocol/related-task`).
    pub(super) task: Option<String>,
}

/// Sends a call's reports to the client, in the order they were made, until
/// [`Report::End`]: logs at or above the client's level, and progress when the client sent a
/// token. Progress only grows; once the plugin reported progress itself, the host's own
/// reports are left out, so that the client sees one growing sequence.
///
/// A future polled beside the call in the call's own task, not a task of its own: a quick
/// call that reports nothing then costs no task, no wake-up of another thread and no timer
/// (over stdio, `serve` went from 1.25× to 1.12× a bare rmcp server's p50 when the forwarder
/// stopped being a spawned task; BENCHMARKS.md).
pub(super) async fn forward_reports(
    to: ReportsTo,
    mut receiver: tokio::sync::mpsc::Receiver<Report>,
) {
    let ReportsTo {
        origin,
        peer,
        level,
        subscriptions,
        notices,
        tools,
        token,
        task,
    } = to;
    let mut plugin_reported = false;
    let mut last = f64::NEG_INFINITY;
    while let Some(report) = receiver.recv().await {
        let (done, total, message) = match report {
            Report::End => break,
            Report::Plugin(ToolEvent {
                kind: ToolEventKind::Log { level: at, message },
                plugin,
                tool,
                ..
            }) => {
                let wanted = *level.lock().unwrap_or_else(|p| p.into_inner());
                let at = mcp_level(at);
                if wanted.is_some_and(|wanted| rank(at) >= rank(wanted)) {
                    let mut param =
                        LoggingMessageNotificationParam::new(at, Value::String(message));
                    param.logger = Some(format!("{plugin}/{tool}"));
                    match &task {
                        None => {
                            let _ = peer.notify_logging_message(param).await;
                        }
                        Some(task) => {
                            let _ = peer.send_notification(task_log(param, task)).await;
                        }
                    }
                }
                continue;
            }
            Report::Plugin(ToolEvent {
                kind: ToolEventKind::ResourceUpdated { uri },
                plugin,
                ..
            }) => {
                // A URI a client may be shown (as a listed one), of a resource the plugin
                // serves: a plugin speaks for its own resources only.
                if llm_worker_rules::resource::check_uri(&uri)
                    .and_then(|()| llm_worker_rules::resource::check_ascii(&uri))
                    .is_err()
                {
                    tracing::debug!(%plugin, "a notice of a URI that is no one word was dropped: {}", uri.escape_debug());
                    continue;
                }
                // The session's tools are not held while their owner is looked up.
                let sessions = tools
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .plugin_sessions();
                let owned = crate::plugin::resource_owner(&sessions, &uri).is(&plugin);
                if !owned {
                    tracing::debug!(%plugin, "a notice of a resource the plugin does not offer was dropped: {}", uri.escape_debug());
                    continue;
                }
                notices.send(origin, Notice::ResourceUpdated(uri.clone()));
                let subscribed = subscriptions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&llm_worker_rules::resource::comparable_uri(&uri));
                if subscribed {
                    let _ = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await;
                }
                continue;
            }
            Report::Plugin(ToolEvent {
                kind: ToolEventKind::ListChanged(which),
                ..
            }) => {
                notices.send(origin, Notice::ListChanged(which));
                let _ = match which {
                    Listing::Resources => peer.notify_resource_list_changed().await,
                    Listing::Prompts => peer.notify_prompt_list_changed().await,
                };
                continue;
            }
            Report::Plugin(ToolEvent {
                kind:
                    ToolEventKind::Progress {
                        done,
                        total,
                        message,
                    },
                ..
            }) => {
                plugin_reported = true;
                (done, total, message)
            }
            Report::Host { .. } if plugin_reported => continue,
            Report::Host { done, message } => (done, Some(1.0), Some(message)),
        };
        let Some(token) = &token else { continue };
        if done <= last {
            continue;
        }
        last = done;
        let mut param = ProgressNotificationParam::new(token.clone(), done);
        param.total = total;
        param.message = message;
        let _ = peer.notify_progress(param).await;
    }
}

/// A task's log message, naming the task in its `_meta` (MCP's related-task key).
fn task_log(param: LoggingMessageNotificationParam, task: &str) -> rmcp::model::ServerNotification {
    let mut notification = rmcp::model::ServerNotification::LoggingMessageNotification(
        rmcp::model::Notification::new(param),
    );
    rmcp::model::GetMeta::get_meta_mut(&mut notification)
        .0
        .insert(
            "io.modelcontextprotocol/related-task".into(),
            serde_json::json!({ "taskId": task }),
        );
    notification
}

/// A plugin's notice as MCP's notification.
pub(super) fn notification(notice: Notice) -> rmcp::model::ServerNotification {
    use rmcp::model::{ResourceUpdatedNotification, ServerNotification};
    match notice {
        Notice::ListChanged(Listing::Resources) => {
            ServerNotification::ResourceListChangedNotification(Default::default())
        }
        Notice::ListChanged(Listing::Prompts) => {
            ServerNotification::PromptListChangedNotification(Default::default())
        }
        Notice::ResourceUpdated(uri) => ServerNotification::ResourceUpdatedNotification(
            ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(uri)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's log, sent after its request was answered, says which task it is of.
    #[test]
    fn a_tasks_log_names_its_task_on_the_wire() {
        let mut param =
            LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::String("hi".into()));
        param.logger = Some("plugin/tool".into());
        let wire = serde_json::to_value(task_log(param, "task-1")).expect("JSON");
        assert_eq!(wire["method"], "notifications/message");
        assert_eq!(wire["params"]["data"], "hi");
        assert_eq!(
            wire["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            "task-1"
        );
    }
}
