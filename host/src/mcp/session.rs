//! One MCP session: its own registration of the catalog's tools, `tools/list` and
//! `tools/call`, cancellation and progress, and `list_changed` when the catalog changes.

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated by a draft revision
// of the protocol, but it is what released clients use for server logs.
#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::admission::Admission;
use super::catalog::{Caller, Notice, Origin, SessionTools, ToolCatalog};
use super::reports::ReportsTo;
use super::{McpError, McpOptions};
use crate::tool_server::ToolServerHandle;

/// The MCP server of one session: what [`serve_stdio`](super::serve_stdio) and
/// [`serve_http`](super::serve_http) run for each client, for an embedder to serve over a
/// transport of its own ([`McpServer::serve`]).
pub struct McpServer {
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
    notices: super::notices::Notices,
    /// The catalog, kept as long as a session of it lives: what watches it for a plugin's
    /// withdrawal (a call, a task) takes the end of every handle of it for the server's.
    _catalog: ToolCatalog,
    /// This session among the server's, for the origin of its notices.
    id: u64,
    /// Who answers the plugins' questions: the session's client (made at the first call).
    questions: std::sync::OnceLock<Arc<dyn crate::question::QuestionHandler>>,
    /// The tools as last listed, and the version of the session's tools they are of.
    pub(super) listed: Mutex<Option<(u64, Arc<[Tool]>)>>,
    /// Whether the session answered its `initialize`: a second is refused (it would change
    /// the protocol version the session negotiated, and with it what the session may do).
    initialized: std::sync::atomic::AtomicBool,
    /// Under an access policy: the identity whose tools the session holds, once its first
    /// request came (a session is its opener's), and what that request was granted.
    #[cfg(feature = "mcp-http")]
    bound: Mutex<Option<(Caller, Arc<super::access::Allowed>)>>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if let Some(watcher) = self
            .watcher
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            watcher.abort();
        }
        // A stateful session's tasks end with it (their instances are the session's), and
        // are forgotten: no one can ask for them again.
        let owner = super::tasks::session_owner_suffix(self.id);
        self.options
            .tasks
            .remove_owned_by(|task_owner| task_owner.ends_with(&owner));
    }
}

impl McpServer {
    /// The server of one MCP session of `catalog`'s tools, with `options`: an rmcp
    /// [`ServerHandler`] to serve over any rmcp transport ([`serve`](Self::serve), or rmcp's
    /// own `ServiceExt::serve`). Cheap: nothing is created until the session is initialised
    /// or calls a tool; each session registers the catalog's tools afresh (new plugin
    /// instances), and drops them when it ends.
    pub fn new(catalog: &ToolCatalog, options: McpOptions) -> Self {
        Self::open(catalog, Arc::new(options), None)
    }

    /// Serves this session over `transport` (any rmcp transport: a socket, a child
    /// process's pipes, an in-memory duplex …) until the client disconnects or `shutdown`
    /// completes; either way the session ends (its plugin instances are dropped) before this
    /// returns.
    ///
    /// The transport is rmcp's as given: rmcp's own transports over a byte stream bound a
    /// line at 16 MiB and nothing else (not what a line takes once parsed, nor the answers
    /// waiting for a client that does not read them). For a client that is not trusted on
    /// such a stream, serve it with [`serve_lines`](Self::serve_lines), which holds it to
    /// the bounds of [`serve_stdio`](super::serve_stdio).
    ///
    /// The connection is the session, whatever protocol its client speaks: a stateless
    /// (2026-07-28) client's tasks, notices and request states are this connection's, not
    /// shared with other connections served from the same options, and its tasks end when it
    /// closes. A client that opens a connection per request cannot poll a task on the next
    /// one: serve such clients over HTTP ([`crate::mcp::serve_http`]).
    pub async fn serve<T, E, A>(
        self,
        transport: T,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), McpError>
    where
        T: rmcp::transport::IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        // Shutdown is watched from the start: a client that never initializes (or keeps
        // sending what is not `initialize`) would otherwise hold the server past it.
        let mut shutdown = std::pin::pin!(shutdown);
        let stop = tokio_util::sync::CancellationToken::new();
        let mut starting = std::pin::pin!(rmcp::ServiceExt::serve_with_ct(
            self,
            transport,
            stop.clone()
        ));
        let running = tokio::select! {
            running = &mut starting => running,
            () = &mut shutdown => {
                stop.cancel();
                let _ = (&mut starting).await;
                return Ok(());
            }
        }
        .map_err(|e| McpError::Session(e.to_string()))?;
        let mut waiting = std::pin::pin!(running.waiting());
        let ended = tokio::select! {
            ended = &mut waiting => ended,
            () = &mut shutdown => {
                stop.cancel();
                (&mut waiting).await
            }
        };
        ended
            .map(|_| ())
            .map_err(|e| McpError::Session(e.to_string()))
    }

    /// Serves this session over a byte stream of newline-delimited JSON-RPC messages (MCP's
    /// stdio framing: a Unix socket, a child process's pipes, a TCP connection …) read from
    /// `input` and written to `output`, until the client disconnects or `shutdown` completes,
    /// with the bounds [`serve_stdio`](super::serve_stdio) holds its client to: a line too
    /// heavy once parsed is refused unparsed, one over 16 MiB ends the session, at most 64
    /// requests (or 256 MiB of them) are in progress, and a client that reads none of the
    /// answers waiting for it while it goes on writing is disconnected. The bounds are this
    /// connection's: an embedder accepting many connections caps how many it serves at once.
    pub async fn serve_lines<R, W>(
        self,
        input: R,
        output: W,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), McpError>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.serve(super::stdio::LineTransport::new(input, output), shutdown)
            .await
    }

    /// A session of `catalog`'s tools, counted by `admission` if the server counts them.
    pub(crate) fn open(
        catalog: &ToolCatalog,
        options: Arc<McpOptions>,
        admission: Option<Admission>,
    ) -> Self {
        Self {
            tools: Arc::new(Mutex::new(SessionTools::open(
                catalog,
                options_access(&options),
            ))),
            options,
            watcher: Mutex::new(None),
            log_level: Arc::new(Mutex::new(None)),
            admission,
            subscriptions: Arc::default(),
            notices: catalog.notices(),
            _catalog: catalog.clone(),
            id: NEXT_SESSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            questions: std::sync::OnceLock::new(),
            listed: Mutex::new(None),
            initialized: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "mcp-http")]
            bound: Mutex::new(None),
        }
    }

    /// Sets the session up for calls ([`SessionTools::create_all`]): its plugins' instances
    /// start, their start code's CPU time counted against the identity's CPU quota (opening
    /// and closing sessions in a loop would otherwise run plugin code outside it). An identity
    /// whose CPU quota is spent has its session's instances started by its calls instead, as
    /// each call comes (counted then).
    fn create_all_counted(&self, extensions: &rmcp::model::Extensions) {
        #[cfg(feature = "mcp-http")]
        if let Some(policy) = &self.options.access
            && let Some(identity) = identity(extensions)
        {
            let quota = policy.quota(Some(&identity));
            if quota.cpu_seconds_per_minute.is_some() {
                let counted = super::catalog::StartsCounted {
                    ledger: Arc::clone(&self.options.quotas),
                    key: identity.key(),
                    who: identity.name.clone(),
                    quota,
                };
                let mut tools = self.lock();
                counted.run(|| tools.create_all());
                // Instances of groups added later count too.
                tools.starts_counted = Some(counted);
                return;
            }
        }
        let _ = extensions;
        self.lock().create_all();
    }

    /// Counts a request that runs plugin code against its identity's quota (under an access
    /// policy), until the returned guard is dropped; an error if it is over its quota.
    fn quota_begin(
        &self,
        extensions: &rmcp::model::Extensions,
        spent: Option<&Arc<std::sync::atomic::AtomicU64>>,
    ) -> Result<Option<QuotaGuard>, ErrorData> {
        #[cfg(feature = "mcp-http")]
        if let Some(policy) = &self.options.access {
            let identity = identity(extensions);
            let Some(identity) = identity else {
                return Ok(None);
            };
            let quota = policy.quota(Some(&identity));
            if quota == super::Quota::default() {
                return Ok(None);
            }
            let spent = spent.map_or_else(Arc::default, Arc::clone);
            let begun = self
                .options
                .quotas
                .begin(identity.key(), &identity.name, quota, spent);
            #[cfg(feature = "metrics")]
            if begun.is_err()
                && let Some(metrics) = &self.options.metrics
            {
                metrics.refused("quota");
            }
            return begun.map(Some);
        }
        let _ = (extensions, spent);
        Ok(None)
    }

    /// Runs `request` (a list of resources or prompts, which runs plugin code when a plugin
    /// said its list changed) with that code's CPU time counted against its identity's CPU
    /// quota (under an access policy); once the quota is spent, the lists as last read are
    /// served (no plugin code runs).
    async fn listing<T>(
        &self,
        extensions: &rmcp::model::Extensions,
        request: impl Future<Output = T>,
    ) -> T {
        #[cfg(feature = "mcp-http")]
        if let Some(policy) = &self.options.access
            && let Some(identity) = identity(extensions)
            && let quota = policy.quota(Some(&identity))
            && quota.cpu_seconds_per_minute.is_some()
        {
            return match self.options.quotas.begin_as(
                identity.key(),
                &identity.name,
                quota,
                Arc::default(),
                super::quota::Kind::Listing,
            ) {
                Ok(running) => crate::cpu::counted(running.spent(), request).await,
                Err(_) => crate::plugin::last_lists_only(request).await,
            };
        }
        let _ = extensions;
        request.await
    }

    /// Runs `request` (the handler's work) counted against its identity's quota, its plugin
    /// code's CPU time measured when the request is observed or counted.
    async fn metered<T>(
        &self,
        extensions: &rmcp::model::Extensions,
        observed: Option<&Observed>,
        request: impl Future<Output = Result<T, ErrorData>>,
    ) -> Result<T, ErrorData> {
        // On the heap: the handler's future is large, and this one would hold it twice.
        let request = Box::pin(request);
        let spent = observed.map(|observed| &observed.spent);
        // Counted until the request ends, or the task it became (which holds it) ends.
        let running = self.quota_begin(extensions, spent)?.map(Arc::new);
        #[cfg(feature = "mcp-http")]
        let spent = spent.or_else(|| running.as_deref().map(super::quota::Running::spent));
        let verdict = observed.map(|observed| Arc::clone(&observed.verdict));
        let request = async {
            let request = async {
                match spent {
                    Some(spent) => crate::cpu::counted(spent, request).await,
                    None => request.await,
                }
            };
            match verdict {
                Some(verdict) => VERDICT.scope(verdict, request).await,
                None => request.await,
            }
        };
        // `running` is dropped (the call's end counted) when the answer is there, unless a
        // task holds it.
        #[cfg(feature = "mcp-http")]
        if let Some(running) = &running {
            return super::quota::holding(Arc::clone(running), request).await;
        }
        #[cfg(not(feature = "mcp-http"))]
        let _ = &running;
        request.await
    }

    /// The plugin a request for the prompt `name` goes to, as far as known without asking one
    /// ([`super::offerings::known_prompt_owner`]): what its audit record and metrics name.
    fn prompt_owner_name(&self, name: &str) -> Option<String> {
        let plugins = self.lock().plugin_sessions();
        super::offerings::known_prompt_owner(&plugins, name).map(|p| p.plugin_name().to_owned())
    }

    /// What is observed of a request of `event` for `target` (served by the plugin that
    /// `serves`) — its audit record, its metrics, its span — from now on; `None` when nothing
    /// is (no audit log, metrics or traces).
    fn observe_begin(
        &self,
        event: &'static str,
        target: &str,
        context: &RequestContext<RoleServer>,
        serves: impl Fn(&crate::PluginSession) -> bool,
    ) -> Option<Observed> {
        #[cfg(feature = "metrics")]
        let metered = self.options.metrics.is_some();
        #[cfg(not(feature = "metrics"))]
        let metered = false;
        #[cfg(feature = "otel")]
        let traced = self.options.traces;
        #[cfg(not(feature = "otel"))]
        let traced = false;
        if self.options.audit.is_none() && !metered && !traced {
            return None;
        }
        let plugins = self.lock().plugin_sessions();
        let plugin = plugins.iter().find(|plugin| serves(plugin));
        let mut record = super::audit::Record::new(event, target)
            .asked_by(&context.extensions)
            .plugin(plugin);
        record.known_target = match (event, plugin) {
            ("resources/read", Some(plugin)) => plugin.resource_family(target),
            ("tools/call", _) => self.current().lookup(target).map(|_| target.to_owned()),
            // Only what the plugin offered at load names a series or a span: lists given while
            // serving may hold what clients chose.
            (_, Some(plugin))
                if plugin.offered_prompt_at_load(target)
                    || plugin
                        .resource_templates()
                        .iter()
                        .any(|template| template.uri_template == target) =>
            {
                Some(target.to_owned())
            }
            (_, _) => None,
        };
        #[cfg(feature = "otel")]
        let span = traced.then(|| {
            super::trace::begin(
                event,
                record.known_target.as_deref(),
                record.session.as_deref(),
                context,
            )
        });
        Some(Observed {
            record,
            started: std::time::Instant::now(),
            spent: Arc::default(),
            verdict: Arc::default(),
            #[cfg(feature = "otel")]
            span,
        })
    }

    /// What the audit log will say of the input of a request [`observe_begin`](Self::observe_begin)
    /// began to observe (`None` if it observes nothing, or without an audit log).
    fn audit_input(
        &self,
        begun: Option<&Observed>,
        input: &impl serde::Serialize,
    ) -> Option<super::audit::AuditInput> {
        begun?;
        self.options.audit.as_ref().map(|log| log.input(input))
    }

    /// Ends what [`observe_begin`](Self::observe_begin) began: the request, with `input`
    /// ([`audit_input`](Self::audit_input)), ended so.
    fn observe_end(
        &self,
        begun: Option<Observed>,
        input: Option<super::audit::AuditInput>,
        outcome: &'static str,
    ) {
        let Some(observed) = begun else {
            return;
        };
        let took = observed.started.elapsed();
        let outcome = observed.verdict.get().copied().unwrap_or(outcome);
        let mut record = observed.record.ended(outcome, took);
        record.cpu_ms = crate::cpu::spent(&observed.spent).as_secs_f64() * 1000.0;
        #[cfg(feature = "otel")]
        if let Some(span) = observed.span {
            span.end(record.plugin.as_deref(), outcome);
        }
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.options.metrics {
            // A target the client made up is not a label (it would add a series per name).
            let target = record.known_target.as_deref().unwrap_or("");
            metrics.request(
                record.event,
                record.plugin.as_deref(),
                target,
                outcome,
                took,
                crate::cpu::spent(&observed.spent),
            );
        }
        if let (Some(log), Some(input)) = (&self.options.audit, input) {
            log.write(record, input);
        }
    }

    /// Observes the task a call observed as `observed` became (owned by `owner`) when it ends:
    /// its record (`event: "task"`) and metrics say how the call ended, how long it took from
    /// its start and the CPU time of all its plugin code, the part after the hand-off included.
    fn follow_task(
        &self,
        observed: &Observed,
        owner: String,
        input: Option<super::audit::AuditInput>,
    ) {
        let Some(id) = observed.record.task.clone() else {
            return;
        };
        let options = Arc::clone(&self.options);
        let mut record = observed.record.clone();
        record.event = "task";
        let started = observed.started;
        let spent = Arc::clone(&observed.spent);
        tokio::spawn(async move {
            let outcome = match options.tasks.wait(&owner, &id).await {
                Ok(task) => match (task.status, task.outcome.as_deref()) {
                    (crate::task::TaskStatus::Cancelled, _) => "cancelled",
                    (crate::task::TaskStatus::Failed, _) => "error",
                    (_, Some(Ok(output))) if !output.is_error => "ok",
                    _ => "tool_error",
                },
                // Forgotten before it ended: its session ended, or its time to live ran out.
                Err(_) => "cancelled",
            };
            let took = started.elapsed();
            let cpu = crate::cpu::spent(&spent);
            let mut record = record.ended(outcome, took);
            record.cpu_ms = cpu.as_secs_f64() * 1000.0;
            #[cfg(feature = "metrics")]
            if let Some(metrics) = &options.metrics {
                let target = record.known_target.as_deref().unwrap_or("");
                metrics.request("task", record.plugin.as_deref(), target, outcome, took, cpu);
            }
            if let (Some(log), Some(input)) = (&options.audit, input) {
                log.write(record, input);
            }
        });
    }

    /// `questions`, recorded in the audit log if there is one.
    pub(super) fn audited(
        &self,
        questions: Option<Arc<dyn crate::question::QuestionHandler>>,
        context: &RequestContext<RoleServer>,
    ) -> Option<Arc<dyn crate::question::QuestionHandler>> {
        questions.map(self.question_auditor(context))
    }

    /// What records a question handler's questions in the audit log, as asked by this
    /// request's caller (a handler made later, a task's, is recorded too).
    pub(super) fn question_auditor(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> impl Fn(
        Arc<dyn crate::question::QuestionHandler>,
    ) -> Arc<dyn crate::question::QuestionHandler>
    + Send
    + Sync
    + 'static {
        let audit = self.options.audit.clone().map(|log| {
            let base = super::audit::Record::new("question", "").asked_by(&context.extensions);
            (log, base)
        });
        move |inner| match &audit {
            Some((log, base)) => Arc::new(super::audit::AuditedQuestions {
                inner,
                log: log.clone(),
                base: base.clone(),
            }),
            None => inner,
        }
    }

    /// Under the operator's access policy, keeps of the session's tools what the identity of
    /// its first request may use; a later request of another identity is refused (the HTTP
    /// service never lets one reach another's session: this holds for any transport).
    ///
    /// A request that names a session (`Mcp-Session-Id`) and carries the stateless revision's
    /// `_meta` (a protocol version or client capabilities, of any version) is refused: rmcp
    /// would serve it as a stateless request (it does for any version once both are there),
    /// outside the session and outside the place among its identity's sessions that a
    /// stateless request holds.
    fn bind(&self, context: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
        let extensions = &context.extensions;
        if names_session(extensions) == Some(true)
            && (context.meta.protocol_version().is_some()
                || context.meta.client_capabilities().is_some())
        {
            return Err(ErrorData::invalid_request(
                "a request of a session (Mcp-Session-Id) cannot carry the stateless revision's \
                 _meta (io.modelcontextprotocol/protocolVersion or clientCapabilities): send it \
                 without the session id, or without that _meta",
                None,
            ));
        }
        self.bind_identity(extensions)
    }

    /// [`bind`](Self::bind)'s part that any message (a notification too) goes through.
    fn bind_identity(&self, extensions: &rmcp::model::Extensions) -> Result<(), ErrorData> {
        self.bind_caller(identity(extensions))
    }

    /// Binds the session to `identity` (the first to use it), or checks that it is the one
    /// bound, with the same grants.
    fn bind_caller(&self, identity: Option<Arc<crate::Identity>>) -> Result<(), ErrorData> {
        #[cfg(feature = "mcp-http")]
        if let Some(policy) = &self.options.access {
            let caller = Caller(identity.as_ref().map(|identity| identity.key()));
            let allowed = policy.allowed(identity.as_deref());
            let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
            match &*bound {
                // The same identity, with the same grants: a token of it with other scopes or
                // groups (narrower, or from a group it left) does not use what the session's
                // first token was granted.
                Some((owner, granted)) if *owner == caller && **granted == allowed => {}
                Some((owner, _)) if *owner == caller => {
                    return Err(ErrorData::invalid_request(
                        "this session was opened with other grants (the token's scopes or \
                         groups differ from those of the session's first request); open a new \
                         session with this token",
                        None,
                    ));
                }
                Some(_) => {
                    return Err(ErrorData::invalid_request(
                        "this session belongs to another identity",
                        None,
                    ));
                }
                None => {
                    let allowed = Arc::new(allowed);
                    self.lock().restrict(Arc::clone(&allowed));
                    *bound = Some((caller, allowed));
                }
            }
        }
        let _ = identity;
        Ok(())
    }

    /// Where what a request of this session makes comes from: this session, and for a
    /// stateless request over HTTP, its caller too (any request of that caller, on any replica,
    /// may hear of it and ask for its tasks). Over other transports (stdio, an embedder's
    /// connections) the connection is the session, stateless or not: every connection there is
    /// the same anonymous caller, and one must not hear of another's calls or see its tasks.
    pub(super) fn origin(&self, context: &RequestContext<RoleServer>) -> Origin {
        let over_http = names_session(&context.extensions).is_some();
        Origin {
            session: self.id,
            stateless: (over_http && super::input_required::is_stateless(context))
                .then(|| caller(context)),
        }
    }

    /// Where the reports of a request of this session go.
    pub(super) fn reports_to(&self, context: &RequestContext<RoleServer>) -> ReportsTo {
        ReportsTo {
            origin: self.origin(context),
            peer: context.peer.clone(),
            level: Arc::clone(&self.log_level),
            subscriptions: Arc::clone(&self.subscriptions),
            notices: self.notices.clone(),
            tools: Arc::clone(&self.tools),
            // A string token is echoed in every progress report of the request: one over the
            // length of an id this server takes is not used (progress is the client's to ask
            // for; a client not reading would have each report hold megabytes).
            token: context
                .meta
                .get_progress_token()
                .filter(|token| !super::is_long_id(&token.0)),
            task: None,
        }
    }

    /// Who answers the plugins' questions in a stateful session: its client.
    pub(super) fn client_questions(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Arc<dyn crate::question::QuestionHandler> {
        Arc::clone(self.questions.get_or_init(|| {
            Arc::new(super::ask::PeerQuestions {
                peer: context.peer.clone(),
            })
        }))
    }

    /// Takes the session's place among the server's live sessions (once).
    pub(super) fn admit(&self) -> Result<(), ErrorData> {
        self.admission.as_ref().map_or(Ok(()), Admission::admit)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SessionTools> {
        lock(&self.tools)
    }

    /// The plugins' sessions as they stand when asked (a task's call ends after its request).
    pub(super) fn plugin_sessions_later(
        &self,
    ) -> impl FnOnce() -> Vec<crate::plugin::PluginSession> + Send + 'static {
        let tools = Arc::clone(&self.tools);
        move || lock(&tools).plugin_sessions()
    }

    /// The session's tool `name`, after taking in any change of the catalog, with the group
    /// (and plugin) that serves it, read together.
    pub(super) fn found(&self, name: &str) -> Option<Found> {
        let mut tools = self.lock();
        tools.refresh();
        let (meta, tool) = tools.handle().lookup(name)?;
        let serving = tools.serving(name)?;
        Some((meta, tool, serving))
    }

    /// The session's tools, after taking in any change of the catalog.
    pub(super) fn current(&self) -> ToolServerHandle {
        let mut tools = self.lock();
        tools.refresh();
        tools.handle()
    }
}

/// A tool as a call finds it: its meta, the tool, and the group (and plugin) serving it.
pub(super) type Found = (
    Arc<crate::ToolMeta>,
    Arc<dyn crate::tool::Tool>,
    super::catalog::Serving,
);

/// The ids of sessions: each new session takes the next.
static NEXT_SESSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What is observed of one request while it runs.
struct Observed {
    record: super::audit::Record,
    started: std::time::Instant,
    /// The CPU time of its plugin code, in nanoseconds.
    spent: Arc<std::sync::atomic::AtomicU64>,
    /// How it ended, when the code that ended it said so ([`ended_as`]): not read from an
    /// error's text, which quotes what clients and plugins wrote.
    verdict: Arc<std::sync::OnceLock<&'static str>>,
    #[cfg(feature = "otel")]
    span: Option<super::trace::RequestSpan>,
}

tokio::task_local! {
    /// Where the request being handled records how it ended ([`ended_as`]), while it is
    /// observed.
    static VERDICT: Arc<std::sync::OnceLock<&'static str>>;
}

/// Records that the request being handled ended as `verdict` (`"cancelled"`, `"refused"`):
/// what its audit record, metrics and span say, whatever its error's text.
pub(super) fn ended_as(verdict: &'static str) {
    let _ = VERDICT.try_with(|cell| cell.set(verdict));
}

/// Whether sessions of `options` wait for their identity before taking any tool in (an access
/// policy is set).
fn options_access(options: &McpOptions) -> bool {
    #[cfg(feature = "mcp-http")]
    return options.access.is_some();
    #[cfg(not(feature = "mcp-http"))]
    {
        let _ = options;
        false
    }
}

/// A request counted against its identity's quota while it runs.
#[cfg(feature = "mcp-http")]
type QuotaGuard = super::quota::Running;
/// Nothing to count, in a build without identities.
#[cfg(not(feature = "mcp-http"))]
struct QuotaGuard;

/// How a request ended, for its audit record (unless [`ended_as`] said).
fn outcome<T>(
    response: &Result<T, ErrorData>,
    ok: impl FnOnce(&T) -> &'static str,
) -> &'static str {
    match response {
        Ok(response) => ok(response),
        #[cfg(feature = "mcp-http")]
        Err(error) if error.code.0 == super::QUOTA_EXCEEDED => "quota",
        // Cancelled and refused requests are told by `ended_as`.
        Err(_) => "error",
    }
}

#[cfg(feature = "mcp-http")]
tokio::task_local! {
    /// Who sent the HTTP request rmcp is handling, as the HTTP service authenticated it: what
    /// a handler rmcp makes to look a tool up before the request's own handler runs is bound
    /// to ([`ServerHandler::get_tool`]).
    pub(in crate::mcp) static ASKING: Option<Arc<crate::Identity>>;
}

/// Who sent a request, as the HTTP service authenticated it (`None` over other transports,
/// or on a server without authentication).
pub(super) fn identity(extensions: &rmcp::model::Extensions) -> Option<Arc<crate::Identity>> {
    #[cfg(feature = "mcp-http")]
    if let Some(parts) = extensions.get::<http::request::Parts>() {
        return parts.extensions.get::<Arc<crate::Identity>>().cloned();
    }
    let _ = extensions;
    None
}

/// The caller of a request as text: its digest in hex, or `-` for the one caller of a server
/// without authentication (what task owners and request states are bound to).
pub(super) fn caller_tag(context: &RequestContext<RoleServer>) -> String {
    caller(context)
        .0
        .map_or_else(|| "-".to_owned(), |digest| crate::digest::hex(&digest))
}

/// Whether a request names an MCP session (`Mcp-Session-Id`): `None` outside HTTP, where the
/// transport's connection is the session.
pub(super) fn names_session(extensions: &rmcp::model::Extensions) -> Option<bool> {
    #[cfg(feature = "mcp-http")]
    if let Some(parts) = extensions.get::<http::request::Parts>() {
        return Some(parts.headers.contains_key("mcp-session-id"));
    }
    let _ = extensions;
    None
}

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

impl ServerHandler for McpServer {
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
            .enable_tasks()
            .build();
        let mut info = ServerConfig::new(capabilities);
        info.server_info = Implementation::new(&self.options.name, &self.options.version);
        info.instructions.clone_from(&self.options.instructions);
        info
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        self.bind(&context)?;
        // rmcp records the client's information around the handshake, with the version it
        // negotiated: not set again here, where it would be the version the client asked for.
        if self
            .initialized
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(ErrorData::invalid_request(
                "this session is initialized already; open a new session to initialize again",
                None,
            ));
        }
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Err(error) = self.bind_identity(&context.extensions) {
            tracing::warn!("{}", error.message);
            return;
        }
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
            Ok(()) => self.create_all_counted(&context.extensions),
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            self.tools_page(request)
        })
        .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Under an access policy, a session no identity has used yet shows no tool. rmcp asks
        // before the request's own handler runs, on a handler made for the lookup (the one
        // that then serves a stateless request), to check the request's `Mcp-Param-*` headers
        // against the tool's schema: without a schema it checks none. That handler is bound to
        // the identity of the HTTP request being handled, as the request's own handler would
        // bind it, so that it finds the tools that identity is granted.
        #[cfg(feature = "mcp-http")]
        if self.options.access.is_some()
            && self
                .bound
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
        {
            let asking = ASKING.try_with(Clone::clone).ok().flatten()?;
            self.bind_caller(Some(asking)).ok()?;
        }
        self.listed_tool(name)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            let listed = self.listing(&context.extensions, self.resources_page(request));
            // Reading changed lists runs plugin code: a cancelled request stops waiting.
            tokio::select! {
                biased;
                () = context.ct.cancelled() => Err(super::request::cancelled("the list")),
                listed = listed => listed,
            }
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            self.templates_page(request)
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            let audit = self.observe_begin("resources/read", &request.uri, &context, |plugin| {
                crate::plugin::resource_owner(&self.lock().plugin_sessions(), &request.uri)
                    .is(plugin.plugin_name())
            });
            let extensions = context.extensions.clone();
            let response = self
                .metered(&extensions, audit.as_ref(), self.read(request, context))
                .await;
            let input = self.audit_input(audit.as_ref(), &Value::Null);
            self.observe_end(
                audit,
                input,
                outcome(&response, |response| match response {
                    ReadResourceResponse::InputRequired(_) => "input_required",
                    _ => "ok",
                }),
            );
            response
        })
        .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.bind(&context)?;
        self.subscribe_to(&request.uri, true)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.bind(&context)?;
        self.subscribe_to(&request.uri, false)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            let listed = self.listing(&context.extensions, self.prompts_page(request));
            // Reading changed lists runs plugin code: a cancelled request stops waiting.
            tokio::select! {
                biased;
                () = context.ct.cancelled() => Err(super::request::cancelled("the list")),
                listed = listed => listed,
            }
        })
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            let owner = self.prompt_owner_name(&request.name);
            let audit = self.observe_begin("prompts/get", &request.name, &context, |plugin| {
                owner.as_deref() == Some(plugin.plugin_name())
            });
            let input = self.audit_input(audit.as_ref(), &request.arguments);
            let extensions = context.extensions.clone();
            let response = self
                .metered(&extensions, audit.as_ref(), self.render(request, &context))
                .await;
            self.observe_end(
                audit,
                input,
                outcome(&response, |response| match response {
                    GetPromptResponse::InputRequired(_) => "input_required",
                    _ => "ok",
                }),
            );
            response
        })
        .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            let target = match &request.r#ref {
                rmcp::model::Reference::Prompt(prompt) => prompt.name.clone(),
                rmcp::model::Reference::Resource(template) => template.uri.clone(),
                _ => String::new(),
            };
            let owner = match &request.r#ref {
                rmcp::model::Reference::Prompt(_) => self.prompt_owner_name(&target),
                _ => None,
            };
            let audit = self.observe_begin("completion/complete", &target, &context, |plugin| {
                owner.as_deref() == Some(plugin.plugin_name())
                    || plugin
                        .resource_templates()
                        .iter()
                        .any(|template| template.uri_template == target)
            });
            let input = self.audit_input(audit.as_ref(), &request.argument);
            let extensions = context.extensions.clone();
            let response = self
                .metered(
                    &extensions,
                    audit.as_ref(),
                    self.completion(request, context),
                )
                .await;
            self.observe_end(audit, input, outcome(&response, |_| "ok"));
            response
        })
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp keeps of it what the server's capabilities advertise, for the stream's life:
        // the resources are bounded as a session's subscriptions are (a URI no plugin could
        // offer is dropped, and at most `MAX_SUBSCRIPTIONS` are kept).
        let mut accepted = requested.clone();
        if let Some(uris) = &mut accepted.resource_subscriptions {
            uris.retain(|uri| llm_worker_rules::resource::check_uri(uri).is_ok());
            uris.truncate(super::MAX_SUBSCRIPTIONS);
        }
        Some(accepted)
    }

    /// A subscription stream (revision 2026-07-28): the catalog's changes of tools, and what
    /// the plugins say changed in calls of this session — for a stateless listener, in the
    /// stateless requests of the same caller (the same identity with the same grants) — until
    /// the client goes.
    /// Another session's or another caller's notices never reach it: they tell of instances
    /// this client cannot see.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // Under an access policy, what it hears of is what its identity may use.
        self.bind(context.request_context())?;
        let listener = self.origin(context.request_context());
        let (mut changes, mut seen) = {
            let mut tools = self.lock();
            tools.refresh();
            (tools.changes(), tools.generation())
        };
        let mut notices = self.notices.listen(&listener);
        let sink = context.sink();
        loop {
            let notification = tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.changed() => match changed {
                    Ok(()) => {
                        // Only a change of the tools this listener's session may use.
                        let now = {
                            let mut tools = self.lock();
                            tools.refresh();
                            tools.generation()
                        };
                        if now == seen {
                            continue;
                        }
                        seen = now;
                        ServerNotification::ToolListChangedNotification(Default::default())
                    }
                    Err(_) => return Ok(()),
                },
                notice = notices.next() => match notice {
                    // A change of a resource this listener may read: one served by a plugin
                    // its identity may use whole (a plugin granted in part speaks of its
                    // resources during the calls it was granted, but they are not shown).
                    Some(Notice::ResourceUpdated(uri))
                        if !matches!(self.resource_owner(&uri), Ok(Some(_))) =>
                    {
                        continue;
                    }
                    Some(notice) => super::reports::notification(notice),
                    None => return Ok(()),
                },
            };
            // The sink passes what the client's filter accepted only.
            let _ = sink.send(notification).await;
        }
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.bind(&context)?;
        *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = Some(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.bind(&context)?;
        self.get_task_of(&request, &context)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.bind(&context)?;
        self.update_task_of(request, &context)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.bind(&context)?;
        self.cancel_task_of(&request, &context)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // On the heap: rmcp's dispatch holds every handler's future in one frame, which
        // unoptimised builds lay out whole on the stack.
        Box::pin(async move {
            self.bind(&context)?;
            let audit = self.observe_begin("tools/call", &request.name, &context, |plugin| {
                plugin.offers_tool(&request.name)
            });
            let input = self.audit_input(
                audit.as_ref(),
                request
                    .arguments
                    .as_ref()
                    .unwrap_or(&rmcp::model::JsonObject::new()),
            );
            let extensions = context.extensions.clone();
            // A call that becomes a task is observed again when the task ends.
            let owner = audit.as_ref().map(|_| self.task_owner(&context));
            #[cfg(feature = "mcp-http")]
            let name = audit.as_ref().map(|_| request.name.clone());
            let response = self
                .metered(&extensions, audit.as_ref(), self.call(request, context))
                .await;
            let mut audit = audit;
            // A tool outside the identity's grants: the client was told there is no such tool,
            // the operator is told whose it is.
            #[cfg(feature = "mcp-http")]
            let denied = match (&mut audit, &name, &response) {
                (Some(observed), Some(name), Err(error))
                    if error.code.0 != super::QUOTA_EXCEEDED =>
                {
                    let withheld = self.lock().withheld_tool(name);
                    if let Some(plugin) = withheld
                        .as_ref()
                        .and_then(super::catalog::ToolGroup::loaded)
                    {
                        observed.record.denied_by(plugin);
                    }
                    withheld.is_some()
                }
                _ => false,
            };
            #[cfg(not(feature = "mcp-http"))]
            let denied = false;
            if let (Some(observed), Some(owner), Ok(CallToolResponse::Task(created))) =
                (&mut audit, owner, &response)
            {
                observed.record.task = Some(created.task.task_id.clone());
                self.follow_task(observed, owner, input.clone());
            }
            let outcome = if denied {
                "denied"
            } else {
                outcome(&response, |response| match response {
                    CallToolResponse::Complete(result) if result.is_error == Some(true) => {
                        "tool_error"
                    }
                    CallToolResponse::InputRequired(_) => "input_required",
                    CallToolResponse::Task(_) => "task",
                    _ => "ok",
                })
            };
            self.observe_end(audit, input, outcome);
            response
        })
        .await
    }
}
