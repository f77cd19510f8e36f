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
    ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::McpOptions;
use super::catalog::{SessionTools, ToolCatalog};
use crate::events::{LogLevel, ToolEvent, ToolEventKind, with_tool_events};
use crate::hook::{
    PostToolCallAction, PostToolCallContext, PreToolCallAction, ToolCall, ToolCallContext,
    ToolResult,
};
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
    fn admit(&self) -> Result<(), ErrorData> {
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

/// The MCP server side of one session.
pub(crate) struct McpSession {
    tools: Arc<Mutex<SessionTools>>,
    options: Arc<McpOptions>,
    /// The task telling the client about catalog changes: one per session, ended with it.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The least important plugin log message the client wants (`logging/setLevel`); none
    /// are sent before it asks.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    /// Its place among the server's sessions, if the server counts them.
    admission: Option<Admission>,
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
    /// A session of `catalog`'s tools. Cheap: nothing is created until the session is
    /// initialised or calls a tool, so rmcp may build one to look up a schema.
    pub(crate) fn new(
        catalog: &ToolCatalog,
        options: Arc<McpOptions>,
        admission: Option<Admission>,
    ) -> Self {
        Self {
            tools: Arc::new(Mutex::new(SessionTools::open(catalog))),
            options,
            watcher: Mutex::new(None),
            log_level: Arc::new(Mutex::new(None)),
            admission,
        }
    }

    /// Takes the session's place among the server's live sessions (once).
    fn admit(&self) -> Result<(), ErrorData> {
        self.admission.as_ref().map_or(Ok(()), Admission::admit)
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
    let shape = crate::provider::mcp_tool(&definition);
    serde_json::from_value(shape).unwrap_or_else(|error| {
        // The shape is ours and rmcp's `Tool` reads it; should they ever disagree, the tool is
        // still listed, by the parts that cannot fail.
        tracing::error!(tool = %definition.name, "cannot describe the tool to MCP: {error}");
        let schema = match definition.input_schema {
            Value::Object(schema) => schema,
            _ => serde_json::Map::new(),
        };
        Tool::new(definition.name, definition.description, Arc::new(schema))
    })
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

/// Sends a call's reports to the client, in the order they were made, until
/// [`Report::End`]: logs at or above the client's level, and progress when the client sent a
/// token. Progress only grows; once the plugin reported progress itself, the host's own
/// reports are left out, so that the client sees one growing sequence.
///
/// A future polled beside the call in the call's own task, not a task of its own: a quick
/// call that reports nothing then costs no task, no wake-up of another thread and no timer
/// (over stdio, `serve` went from 1.25× to 1.12× a bare rmcp server's p50 when the forwarder
/// stopped being a spawned task; BENCHMARKS.md).
async fn forward_reports(
    peer: rmcp::Peer<RoleServer>,
    level: Arc<Mutex<Option<LoggingLevel>>>,
    token: Option<ProgressToken>,
    mut receiver: tokio::sync::mpsc::Receiver<Report>,
) {
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
        // The session is set up for calls: every plugin's instance starts now, in the
        // background (a slow plugin delays neither this nor the others' calls).
        match self.admit() {
            Ok(()) => self.lock().create_all(),
            Err(error) => tracing::warn!("{}", error.message),
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
        self.admit()?;
        let call = ToolCall {
            id: context.id.to_string(),
            name: request.name.to_string(),
            input: Value::Object(request.arguments.unwrap_or_default()),
        };
        // The operator's hooks see every call, whatever the front end.
        let mut ctx = ToolCallContext { call, meta, tool };
        for hook in &self.options.pre_hooks {
            match hook.pre_tool_call(&mut ctx).await {
                PreToolCallAction::Continue => {}
                PreToolCallAction::Skip => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "the call of '{}' was skipped by a hook of this server",
                        ctx.call.name
                    ))])
                    .into());
                }
                PreToolCallAction::Abort(reason) => {
                    return Err(refused_by_hook(&ctx.call, &reason));
                }
            }
        }
        let ToolCallContext { call, meta, tool } = ctx;
        let outcome = self.run(&call, &tool, context).await?;
        // A tool with an output schema returned JSON matching it: the object is the structured
        // result, and its text the content, for older clients. A plugin's result was checked
        // against the schema (one key once, an object); a native tool is the operator's own
        // code, trusted to serialise the type its schema is made of.
        let structured = match &outcome {
            Ok(output) if meta.output_schema.is_some() => serde_json::from_str::<Value>(output)
                .ok()
                .filter(Value::is_object),
            _ => None,
        };
        let mut result = match outcome {
            Ok(output) => ToolResult::success(&call.id, output),
            // A tool's failure is a result the model can read, not a protocol error.
            Err(error) => ToolResult::error(&call.id, error.to_string()),
        };
        if !self.options.post_hooks.is_empty() {
            let mut ctx = PostToolCallContext {
                call,
                result,
                meta,
                tool,
            };
            for hook in &self.options.post_hooks {
                if let PostToolCallAction::Abort(reason) = hook.post_tool_call(&mut ctx).await {
                    return Err(refused_by_hook(&ctx.call, &reason));
                }
            }
            result = ctx.result;
        }
        let content = vec![ContentBlock::text(result.content)];
        Ok(if result.is_error {
            CallToolResult::error(content)
        } else {
            let mut success = CallToolResult::success(content);
            success.structured_content = structured;
            success
        }
        .into())
    }
}

/// A request failed by a hook's `Abort`.
fn refused_by_hook(call: &ToolCall, reason: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "the call of '{}' was refused by a hook of this server: {reason}",
            call.name
        ),
        None,
    )
}

impl McpSession {
    /// Runs a call with its reports (logs, progress) sent to the client, stopping it if the
    /// client cancels the request.
    async fn run(
        &self,
        call: &ToolCall,
        tool: &Arc<dyn crate::tool::Tool>,
        context: RequestContext<RoleServer>,
    ) -> Result<Result<String, crate::tool::ToolError>, ErrorData> {
        let input = call.input.to_string();
        let (reports, receiver) = tokio::sync::mpsc::channel::<Report>(REPORTS_QUEUED);
        let forwarding = forward_reports(
            context.peer.clone(),
            Arc::clone(&self.log_level),
            context.meta.get_progress_token(),
            receiver,
        );
        // Fused: polled again after it ended, it waits instead of panicking.
        let mut forwarding = std::pin::pin!(futures::FutureExt::fuse(forwarding));
        let report = |done: f64, message: String| {
            let _ = reports.try_send(Report::Host { done, message });
        };
        let plugin_reports = reports.clone();
        let sink = move |event| {
            let _ = plugin_reports.try_send(Report::Plugin(event));
        };
        // A cancelled request drops the call: the plugin's instance is reset (its state is
        // lost, and the next call says so), without counting as the plugin's failure.
        let execution = with_tool_events(sink, tool.execute(&input));
        let mut execution = std::pin::pin!(execution);
        // The reports are sent while the call runs, from this task: `forwarding` is polled
        // beside the call (it only ends at `Report::End`, sent below).
        let started = tokio::select! {
            biased;
            outcome = &mut execution => Some(outcome),
            () = tokio::time::sleep(PROGRESS_AFTER) => None,
            () = context.ct.cancelled() => return Err(cancelled(&call.name)),
            // Not before `Report::End`, which comes after the call: this function holds a
            // sender, so the channel stays open.
            () = &mut forwarding => Some((&mut execution).await),
        };
        // A call still running after a moment reports that it started, and then that it
        // finished; a quick call's result is all the progress there is to tell.
        let outcome = match started {
            Some(outcome) => outcome,
            None => {
                report(0.0, format!("{} is running", call.name));
                let outcome = tokio::select! {
                    biased;
                    outcome = &mut execution => outcome,
                    () = context.ct.cancelled() => return Err(cancelled(&call.name)),
                    () = &mut forwarding => (&mut execution).await,
                };
                report(1.0, format!("{} finished", call.name));
                outcome
            }
        };
        // The call's notifications go before its result (a client drops progress for a
        // request it has its answer to), within a bound.
        let _ = tokio::time::timeout(REPORTS_DRAIN, async {
            let end = async {
                let _ = reports.send(Report::End).await;
            };
            tokio::join!(end, &mut forwarding);
        })
        .await;
        Ok(outcome)
    }
}
