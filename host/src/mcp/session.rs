//! One MCP session: its own registration of the catalog's tools, `tools/list` and
//! `tools/call`, cancellation and progress, and `list_changed` when the catalog changes.

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated by a draft revision
// of the protocol, but it is what released clients use for server logs.
#![allow(deprecated)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, Tool, ToolAnnotations as McpAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::McpOptions;
use super::catalog::{SessionTools, ToolCatalog};
use crate::events::{LogLevel, ToolEvent, ToolEventKind, with_tool_events};
use crate::tool_server::{LlmToolDefinition, ToolServerHandle};

/// How long a call runs before it reports progress (to a client that sent a progress token).
const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

fn cancelled(tool: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the call of '{tool}' was cancelled"),
        None,
    )
}

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

    /// Counts a new session, unless `limit` sessions are live already.
    pub(crate) fn enter(self: &Arc<Self>, limit: usize) -> Option<Counted> {
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live < limit).then_some(live + 1)
            })
            .ok()
            .map(|_| Counted(Arc::clone(self)))
    }
}

/// One session's place in a [`SessionCounter`].
#[derive(Debug)]
pub(crate) struct Counted(Arc<SessionCounter>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The MCP server side of one session.
pub(crate) struct McpSession {
    tools: Arc<Mutex<SessionTools>>,
    options: Arc<McpOptions>,
    /// The task telling the client about catalog changes: one per session, ended with it.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The least important plugin log message the client wants (`logging/setLevel`); none
    /// are sent before it asks.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    _counted: Option<Counted>,
}

impl Drop for McpSession {
    fn drop(&mut self) {
        if let Some(watcher) = self
            .watcher
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            watcher.abort();
        }
    }
}

impl McpSession {
    /// A session with a fresh registration of `catalog`'s tools.
    pub(crate) fn new(
        catalog: &ToolCatalog,
        options: Arc<McpOptions>,
        counted: Option<Counted>,
    ) -> Self {
        Self {
            tools: Arc::new(Mutex::new(SessionTools::open(catalog))),
            options,
            watcher: Mutex::new(None),
            log_level: Arc::new(Mutex::new(None)),
            _counted: counted,
        }
    }

    fn lock(&self) -> MutexGuard<'_, SessionTools> {
        lock(&self.tools)
    }

    /// The session's tools, after taking in any change of the catalog.
    fn current(&self) -> ToolServerHandle {
        let mut tools = self.lock();
        tools.refresh();
        tools.handle()
    }
}

fn lock(tools: &Mutex<SessionTools>) -> MutexGuard<'_, SessionTools> {
    // Every update replaces whole values: a panic cannot leave them half-done.
    tools
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn mcp_tool(definition: LlmToolDefinition) -> Tool {
    let schema = match definition.input_schema {
        Value::Object(schema) => schema,
        _ => serde_json::Map::new(),
    };
    let mut tool = Tool::new(definition.name, definition.description, Arc::new(schema));
    if let Some(Value::Object(output)) = definition.output_schema {
        tool.output_schema = Some(Arc::new(output));
    }
    let hints = definition.annotations;
    if definition.title.is_some() || !hints.is_empty() {
        tool.annotations = Some(McpAnnotations::from_raw(
            definition.title.clone(),
            hints.read_only,
            hints.destructive,
            hints.idempotent,
            hints.open_world,
        ));
    }
    tool.title = definition.title;
    tool
}

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
enum Report {
    /// What the plugin reported.
    Plugin(ToolEvent),
    /// The host's own progress report: the call started (0 of 1) or finished (1 of 1).
    Host { done: f64, message: String },
    /// The call has ended: nothing more comes.
    End,
}

/// Most reports one call may have waiting to be sent; more are dropped (a client that does
/// not read must not make the host hold a plugin's every report).
const REPORTS_QUEUED: usize = 256;

/// How long a finished call waits for its reports to be sent before it answers.
const REPORTS_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends a call's reports to the client, in the order they were made, from one task that
/// ends at [`Report::End`]: logs at or above the client's level, and progress when the client
/// sent a token. Progress only grows; once the plugin reported progress itself, the host's own
/// reports are left out, so that the client sees one growing sequence.
fn forward_reports(
    peer: rmcp::Peer<RoleServer>,
    level: Arc<Mutex<Option<LoggingLevel>>>,
    token: Option<ProgressToken>,
) -> (
    tokio::sync::mpsc::Sender<Report>,
    tokio::task::JoinHandle<()>,
) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Report>(REPORTS_QUEUED);
    let task = tokio::spawn(async move {
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
                        let _ = peer.notify_logging_message(param).await;
                    }
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
    });
    (sender, task)
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let mut info = ServerConfig::new(capabilities);
        info.server_info = Implementation::new(&self.options.name, &self.options.version);
        info.instructions.clone_from(&self.options.instructions);
        info
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Tell the client when the catalog changes, for as long as the session lives (a
        // client may send `initialized` more than once: one watcher).
        let mut watcher = self
            .watcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if watcher.is_some() {
            return;
        }
        let tools: Weak<Mutex<SessionTools>> = Arc::downgrade(&self.tools);
        let mut changes = self.lock().changes();
        let peer = context.peer;
        *watcher = Some(tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let Some(tools) = tools.upgrade() else { return };
                let changed = {
                    let mut tools = lock(&tools);
                    tools.refresh();
                    // A request may have taken the change in first: announce it all the same.
                    tools.take_unannounced()
                };
                if changed && peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }));
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let definitions = self.current().tool_definitions_sorted();
        let total = definitions.len();
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|&at| at <= total)
                .ok_or_else(|| {
                    ErrorData::invalid_params(
                        format!("the cursor {cursor:?} is not one this server gave"),
                        None,
                    )
                })?,
        };
        let end = start
            .saturating_add(self.options.page_size.max(1))
            .min(total);
        let page = definitions
            .into_iter()
            .skip(start)
            .take(end - start)
            .map(mcp_tool)
            .collect::<Vec<_>>();
        let mut result = ListToolsResult::with_all_items(page);
        if end < total {
            result.next_cursor = Some(end.to_string());
        }
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.current()
            .get_tool(name)
            .map(|(meta, _)| mcp_tool(LlmToolDefinition::from(&meta)))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = Some(request.level);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((meta, tool)) = self.current().get_tool(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool named '{}'; call tools/list for the tools",
                    request.name
                ),
                None,
            ));
        };
        let input = Value::Object(request.arguments.unwrap_or_default()).to_string();
        let progress = context.meta.get_progress_token();
        let (reports, forwarder) =
            forward_reports(context.peer.clone(), Arc::clone(&self.log_level), progress);
        let report = |done: f64, message: String| {
            let _ = reports.try_send(Report::Host { done, message });
        };
        let plugin_reports = reports.clone();
        let sink = move |event| {
            let _ = plugin_reports.try_send(Report::Plugin(event));
        };
        // A cancelled request drops the call: the plugin's instance is reset (its state is
        // lost, and the next call says so), without counting as the plugin's failure.
        let call = with_tool_events(sink, tool.execute(&input));
        let mut call = std::pin::pin!(call);
        let started = tokio::select! {
            biased;
            outcome = &mut call => Some(outcome),
            () = tokio::time::sleep(PROGRESS_AFTER) => None,
            () = context.ct.cancelled() => return Err(cancelled(&request.name)),
        };
        // A call still running after a moment reports that it started, and then that it
        // finished; a quick call's result is all the progress there is to tell.
        let outcome = match started {
            Some(outcome) => outcome,
            None => {
                report(0.0, format!("{} is running", request.name));
                let outcome = tokio::select! {
                    biased;
                    outcome = &mut call => outcome,
                    () = context.ct.cancelled() => return Err(cancelled(&request.name)),
                };
                report(1.0, format!("{} finished", request.name));
                outcome
            }
        };
        // The call's notifications go before its result (a client drops progress for a
        // request it has its answer to), within a bound.
        let _ = tokio::time::timeout(REPORTS_DRAIN, async {
            if reports.send(Report::End).await.is_ok() {
                let _ = forwarder.await;
            }
        })
        .await;
        Ok(match outcome {
            // A tool with an output schema returned JSON matching it: the object is the
            // structured result, and its text the content, for older clients. A plugin's
            // result was checked against the schema (one key once, an object); a native tool
            // is the operator's own code, trusted to serialise the type its schema is made of.
            Ok(output) if meta.output_schema.is_some() => {
                let structured = serde_json::from_str::<Value>(&output)
                    .ok()
                    .filter(Value::is_object);
                let mut result = CallToolResult::success(vec![ContentBlock::text(output)]);
                result.structured_content = structured;
                result
            }
            Ok(output) => CallToolResult::success(vec![ContentBlock::text(output)]),
            // A tool's failure is a result the model can read, not a protocol error.
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
        }
        .into())
    }
}
