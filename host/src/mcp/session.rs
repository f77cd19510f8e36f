//! One MCP session: its own registration of the catalog's tools, `tools/list` and
//! `tools/call`, cancellation and progress, and `list_changed` when the catalog changes.

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated by a draft revision
// of the protocol, but it is what released clients use for server logs.
#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, ErrorCode, GetPromptRequestParams, GetPromptResponse, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    LoggingLevel, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool,
    UnsubscribeRequestParams,
};
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::McpOptions;
use super::admission::Admission;
use super::catalog::{Caller, Origin, SessionTools, ToolCatalog};
use super::reports::{REPORTS_DRAIN, REPORTS_QUEUED, Report, forward_reports};
use crate::events::with_tool_events;
use crate::hook::{
    PostToolCallAction, PostToolCallContext, PreToolCallAction, ToolCall, ToolCallContext,
    ToolResult,
};
use crate::tool::{Content, ToolOutput};
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

/// The MCP server side of one session.
pub(crate) struct McpSession {
    tools: Arc<Mutex<SessionTools>>,
    pub(super) options: Arc<McpOptions>,
    /// The task telling the client about catalog changes: one per session, ended with it.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The least important plugin log message the client wants (`logging/setLevel`); none
    /// are sent before it asks.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    /// Its place among the server's sessions, if the server counts them.
    admission: Option<Admission>,
    /// The resource URIs the client subscribed to.
    pub(super) subscriptions: Arc<Mutex<BTreeSet<String>>>,
    /// Where the plugins' notices go for the server's subscription streams, with where each
    /// comes from (a stream passes only its own session's, or its own caller's).
    notices: tokio::sync::broadcast::Sender<(Origin, super::catalog::Notice)>,
    /// This session among the server's, for the origin of its notices.
    id: u64,
    /// Who answers the plugins' questions: the session's client (made at the first call).
    questions: std::sync::OnceLock<Arc<dyn crate::question::QuestionHandler>>,
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
            subscriptions: Arc::default(),
            notices: catalog.notices(),
            id: NEXT_SESSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            questions: std::sync::OnceLock::new(),
        }
    }

    /// Where what a request of this session makes comes from: this session, and for a
    /// stateless request, its caller too.
    pub(super) fn origin(&self, context: &RequestContext<RoleServer>) -> Origin {
        Origin {
            session: self.id,
            stateless: super::mrtr::is_stateless(&context.meta).then(|| caller(context)),
        }
    }

    /// Takes the session's place among the server's live sessions (once).
    pub(super) fn admit(&self) -> Result<(), ErrorData> {
        self.admission.as_ref().map_or(Ok(()), Admission::admit)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SessionTools> {
        lock(&self.tools)
    }

    /// The session's tools, after taking in any change of the catalog.
    fn current(&self) -> ToolServerHandle {
        let mut tools = self.lock();
        tools.refresh();
        tools.handle()
    }
}

/// The ids of sessions: each new session takes the next.
static NEXT_SESSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Who sent a request: the caller the HTTP service found (the bearer token among the
/// server's); over other transports, the one caller there is.
fn caller(context: &RequestContext<RoleServer>) -> Caller {
    #[cfg(feature = "mcp-http")]
    if let Some(parts) = context.extensions.get::<http::request::Parts>() {
        return parts
            .extensions
            .get::<Caller>()
            .copied()
            .unwrap_or_default();
    }
    let _ = context;
    Caller::default()
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

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
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
        let (page, next) = super::offerings::page(definitions, request, self.options.page_size)?;
        let mut result = ListToolsResult::with_all_items(page.into_iter().map(mcp_tool).collect())
            .with_ttl_ms(super::offerings::TTL_MS)
            .with_cache_scope(rmcp::model::CacheScope::Private);
        result.next_cursor = next;
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.current()
            .get_tool(name)
            .map(|(meta, _)| mcp_tool(LlmToolDefinition::from(&meta)))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.resources_page(request).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.templates_page(request)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.read(&request)
            .await
            .map(ReadResourceResponse::Complete)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_to(&request.uri, true)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_to(&request.uri, false)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.prompts_page(request).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.render(request, &context).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.completion(request).await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp keeps of it what the server's capabilities advertise.
        Some(requested.clone())
    }

    /// A subscription stream (revision 2026-07-28): the catalog's changes of tools, and what
    /// the plugins say changed in calls of this session — for a stateless listener, in the
    /// stateless requests of the same caller (the same bearer token) — until the client goes.
    /// Another session's or another caller's notices never reach it: they tell of instances
    /// this client cannot see.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let listener = self.origin(context.request_context());
        let mut changes = self.lock().changes();
        let mut notices = self.notices.subscribe();
        let sink = context.sink();
        loop {
            let notification = tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.changed() => match changed {
                    Ok(()) => ServerNotification::ToolListChangedNotification(Default::default()),
                    Err(_) => return Ok(()),
                },
                notice = notices.recv() => match notice {
                    Ok((origin, notice)) if origin.reaches(&listener) => {
                        super::reports::notification(notice)
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            // The sink passes what the client's filter accepted only.
            let _ = sink.send(notification).await;
        }
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
        mut request: CallToolRequestParams,
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
        let arguments = request.arguments.take().unwrap_or_default();
        // On 2026-07-28 a question is deferred to the client's retry, which brings its
        // answers and the signed state of earlier rounds.
        let replay = match super::mrtr::is_stateless(&context.meta) {
            true => self.replay(
                "tools/call",
                &request.name,
                &arguments,
                &mut request.request_state,
                &mut request.input_responses,
                &context,
            )?,
            false => None,
        };
        let call = ToolCall {
            id: context.id.to_string(),
            name: request.name.to_string(),
            input: Value::Object(match &replay {
                Some(_) => arguments.clone(),
                None => arguments,
            }),
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
        let questions: Option<Arc<dyn crate::question::QuestionHandler>> = match &replay {
            Some((replay, _)) => Some(Arc::clone(replay) as _),
            None if super::mrtr::is_stateless(&context.meta) => None,
            None => Some(Arc::clone(self.questions.get_or_init(|| {
                Arc::new(super::ask::PeerQuestions {
                    peer: context.peer.clone(),
                })
            }))),
        };
        let outcome = self.run(&call, &tool, context, questions).await?;
        if let Some((replay, arguments)) = &replay
            && let Some(codec) = self.options.request_states()
            && let Some(input_required) =
                replay.input_required(codec, "tools/call", &request.name, arguments)?
        {
            return Ok(CallToolResponse::InputRequired(input_required));
        }
        // A tool that failed after asking what the request's client cannot answer: the
        // protocol's own error, naming the capability (revision 2026-07-28).
        let failed = match &outcome {
            Ok(output) => output.is_error,
            Err(_) => true,
        };
        if failed
            && let Some((replay, _)) = &replay
            && let Some(error) = replay.missing_capability()
        {
            return Err(error);
        }
        // A plugin's result names only its own resources (or URIs no plugin serves).
        let outcome = outcome.and_then(|output| {
            // Most results name no resource: the plugins are looked at only for one that does.
            if super::offerings::named_uris(&output.content)
                .next()
                .is_none()
            {
                return Ok(output);
            }
            let plugins = self.lock().plugin_sessions();
            match plugins
                .iter()
                .find(|session| session.offers_tool(&call.name))
            {
                Some(owner) => super::offerings::speaks_for_itself(
                    &plugins,
                    owner.plugin_name(),
                    &format!("the result of tool '{}'", call.name),
                    super::offerings::named_uris(&output.content),
                )
                .map(|()| output)
                .map_err(crate::tool::ToolError::Internal),
                None => Ok(output),
            }
        });
        let (output, error) = match outcome {
            Ok(output) => (output, None),
            // A tool's failure is a result the model can read, not a protocol error.
            Err(error) => (ToolOutput::default(), Some(error.to_string())),
        };
        let ToolOutput {
            content,
            structured,
            is_error,
        } = output;
        // A plugin's structured value was checked (an object, one key once, matching its
        // schema). A native tool with an output schema returns the object's JSON as its text:
        // the operator's own code, trusted to serialise the type its schema is made of.
        let structured = structured.or_else(|| match content.as_slice() {
            [Content::Text(text)] if meta.output_schema.is_some() && error.is_none() => {
                serde_json::from_str::<Value>(text)
                    .ok()
                    .filter(Value::is_object)
            }
            _ => None,
        });
        let mut blocks: Vec<ContentBlock> = match &error {
            Some(text) => vec![ContentBlock::text(text.clone())],
            None if content.is_empty() => structured
                .iter()
                .map(|value| ContentBlock::text(value.to_string()))
                .collect(),
            None => content.into_iter().map(super::content::block).collect(),
        };
        let mut is_error = is_error || error.is_some();
        if !self.options.post_hooks.is_empty() {
            // The hooks see the text form; what they change replaces the content.
            let text = super::content::blocks_text(&blocks);
            let result = if is_error {
                ToolResult::error(&call.id, text.clone())
            } else {
                ToolResult::success(&call.id, text.clone())
            };
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
            if ctx.result.content != text {
                blocks = vec![ContentBlock::text(ctx.result.content)];
            }
            is_error = ctx.result.is_error;
        }
        Ok(if is_error {
            CallToolResult::error(blocks)
        } else {
            let mut success = CallToolResult::success(blocks);
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
    /// The questions of a 2026-07-28 request of `method` for `name` (its state verified, its
    /// answers taken), with the arguments the state is bound to; none if this server cannot
    /// sign states (its questions then fail as unanswerable).
    #[allow(clippy::type_complexity)]
    pub(super) fn replay(
        &self,
        method: &str,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
        state: &mut Option<String>,
        responses: &mut Option<rmcp::model::InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<(Arc<super::mrtr::Replay>, serde_json::Map<String, Value>)>, ErrorData> {
        let Some(codec) = self.options.request_states() else {
            return Ok(None);
        };
        let replay = super::mrtr::Replay::open(
            codec,
            method,
            name,
            arguments,
            state.take().as_deref(),
            responses.take(),
            context.client_capabilities().unwrap_or_default(),
        )?;
        Ok(Some((Arc::new(replay), arguments.clone())))
    }

    /// Runs a call with its reports (logs, progress) sent to the client, stopping it if the
    /// client cancels the request.
    async fn run(
        &self,
        call: &ToolCall,
        tool: &Arc<dyn crate::tool::Tool>,
        context: RequestContext<RoleServer>,
        questions: Option<Arc<dyn crate::question::QuestionHandler>>,
    ) -> Result<Result<crate::tool::ToolOutput, crate::tool::ToolError>, ErrorData> {
        let input = call.input.to_string();
        let (reports, receiver) = tokio::sync::mpsc::channel::<Report>(REPORTS_QUEUED);
        let forwarding = forward_reports(
            self.origin(&context),
            context.peer.clone(),
            Arc::clone(&self.log_level),
            Arc::clone(&self.subscriptions),
            self.notices.clone(),
            Arc::clone(&self.tools),
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
        let execution = with_tool_events(sink, async {
            match questions {
                Some(handler) => {
                    crate::question::with_question_handler(handler, tool.call(&input)).await
                }
                None => tool.call(&input).await,
            }
        });
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
