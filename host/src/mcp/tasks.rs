//! MCP's tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over the library's
//! [`TaskStore`](crate::task::TaskStore): a tool that declares it may run as a task
//! (`TaskSupport::Optional` or `Required`) answers a client that declared the extension with a
//! task (`resultType: "task"`), runs the call in the background, and serves `tasks/get` and
//! `tasks/cancel`. A client that did not declare the extension calls an optional tool as any
//! other, and is refused a required one (`-32021`).
//!
//! The tasks of a server are kept in one store (shared by its sessions: a stateless client's
//! `tasks/get` is a request of its own) under their owner: the caller (its bearer token or
//! identity, as the HTTP service found it) and, for a stateful session, the session. Another
//! owner's task id is unknown (`-32602`) to a request. Tasks of an anonymous stateless client (a
//! server without tokens) are guarded by their 128-bit ids alone.

// Sampling and roots are deprecated by SEP-2577 but still asked of the clients that offer them
// (contract 0.3.0's `client` interface), as by the rest of the server.
#![allow(deprecated)]

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use async_trait::async_trait;
use rmcp::model::{
    CallToolResponse, CancelTaskParams, ClientCapabilities, CreateMessageRequest,
    CreateMessageResult, CreateTaskResult, DetailedTask, ElicitRequest, ElicitResult, ErrorCode,
    GetTaskParams, GetTaskResult, InputRequest, JsonObject, ListRootsRequest, ListRootsResult,
    Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::reports::{Report, ReportsTo};
use super::request::Asking;
use super::session::McpServer;
use super::tools::Ended;
use crate::TaskSupport;
use crate::events::Sink;
use crate::question::answer::{check_elicitation, check_roots, check_sampling};
use crate::question::form::Form;
use crate::question::{Asker, QuestionError, QuestionHandler};
use crate::task::{Handoff, HandoffState, TaskError, TaskHandle, TaskSnapshot};
use crate::tool::{Content, ToolError, ToolMeta, ToolOutput};
use crate::tool::{ElicitationAnswer, Root, SamplingAnswer, SamplingRequest};

impl McpServer {
    /// Whose tasks a request sees: a stateless request's caller's (over HTTP: any replica or
    /// request of that caller may ask for them), otherwise its session's, ending with it (over
    /// other transports the connection is the session: [`Self::origin`]).
    pub(super) fn task_owner(&self, context: &RequestContext<RoleServer>) -> String {
        let origin = self.origin(context);
        let caller = super::session::caller_tag(context);
        match origin.stateless {
            Some(_) => format!("{caller}/stateless"),
            None => format!("{caller}{}", session_owner_suffix(origin.session)),
        }
    }

    /// Whether the client of this request takes tasks (it declared the extension).
    pub(super) fn takes_tasks(context: &RequestContext<RoleServer>) -> bool {
        context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks())
    }

    /// Refuses a call of a tool that must run as a task when the client cannot take one.
    pub(super) fn check_task_support(
        meta: &ToolMeta,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if meta.task_support == TaskSupport::Required && !Self::takes_tasks(context) {
            return Err(ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        Ok(())
    }

    /// Whether a call of the tool may become a task: the tool may run as one, and the client
    /// takes tasks.
    pub(super) fn runs_as_task(meta: &ToolMeta, context: &RequestContext<RoleServer>) -> bool {
        meta.task_support != TaskSupport::Forbidden && Self::takes_tasks(context)
    }

    /// Runs `call` as one that may become a task. It starts inside its request, its questions
    /// asked as the request's (on 2026-07-28, deferred to the client's retry), until it says
    /// it becomes a task (`crate::task::start`, a plugin's `host.start-task`): the client is
    /// then answered with the task, and the call goes on in the background, its questions the
    /// task's input requests. A call that ends first is answered as any call (the request's
    /// `input_required` for the questions it deferred), but for a tool that requires tasks,
    /// whose ended call is handed over as a task that ended. The call has the task's time
    /// limit from its start.
    pub(super) async fn call_as_task(
        &self,
        called: Ended<'_>,
        asking: &Asking,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Ended {
            call,
            meta,
            tool,
            asked_as,
            serving,
        } = called;
        let owner = self.task_owner(&context);
        // Whose budget its task draws on besides its owner's: its identity's, whatever the
        // session or the token's grants (none without authentication: each owner its own).
        let account = super::session::identity(&context.extensions).map_or_else(
            || owner.clone(),
            |identity| crate::digest::hex(&identity.key()),
        );
        let (handoff, handed_off) = Handoff::new();
        let in_request = self.audited(asking.questions(), &context);
        // The task's own questions (after the hand-off) are recorded as the request's were.
        let audited = self.question_auditor(&context);
        let replay = asking.replay();
        // Where the call's reports (logs, progress) go before its hand-off: its request's
        // client, as any call's; set before the call starts.
        let request_reports: Arc<OnceLock<Sink>> = Arc::default();
        // After it, a stateful session's client still hears the task's logs (with the task's
        // id) and notices, on the session's own stream, while the task runs; a stateless
        // client has no stream to hear them on.
        let session_reports = self.task_reports(&context);
        // A task outlives its request, not the session's service of its plugin (the revision
        // its call looked up, whatever the catalog did since).
        let withdrawn = self.lock().withdrawal(&serving);
        // A call that ends in its request gives its outcome to the request directly: the
        // store's budgets for kept results are not its (it is never kept), so another client's
        // results filling them cannot take this one's answer.
        let (settled, settled_outcome) = tokio::sync::oneshot::channel();
        let work = {
            let request_reports = Arc::clone(&request_reports);
            let options = Arc::clone(&self.options);
            let identity = super::session::identity(&context.extensions);
            let capabilities = context.client_capabilities().unwrap_or_default();
            let plugins = self.plugin_sessions_later();
            let (call, meta, tool) = (call.clone(), Arc::clone(&meta), Arc::clone(&tool));
            let serving = serving.clone();
            // The request's count against its identity's quota and its CPU counter: the call
            // counts as running, and its code's CPU time as the request's, until it ends.
            #[cfg(feature = "mcp-http")]
            let held = super::quota::held();
            // The request's share of the server's memory for requests: the task keeps its
            // arguments (for its hooks) as long as it runs, so they stay counted against its
            // client's part, not only until the client is handed the task.
            #[cfg(feature = "mcp-http")]
            let share = super::http::request_share(&context.extensions);
            let spent = crate::cpu::current();
            move |task: TaskHandle| async move {
                let task_status = crate::task::status_from_progress(task.clone());
                // A forwarder of their own, running until the call (which holds the sender) ends.
                let session_reports = session_reports.map(|mut to| {
                    to.task = Some(task.id().to_owned());
                    let (sender, receiver) =
                        tokio::sync::mpsc::channel(super::reports::REPORTS_QUEUED);
                    tokio::spawn(super::reports::forward_reports(to, receiver));
                    sender
                });
                #[cfg(feature = "mcp-http")]
                let _held = (held, share);
                let input = call.input.to_string();
                let questions: Arc<dyn QuestionHandler> = Arc::new(HandedOver {
                    handoff: handoff.clone(),
                    request: in_request,
                    task: audited(Arc::new(TaskQuestions { task, capabilities })),
                });
                // Its reports: the request's until the hand-off; then its progress is the
                // task's status message.
                let reports: Sink = {
                    let handoff = handoff.clone();
                    Arc::new(move |event| {
                        if handoff.started() {
                            if let Some(session) = &session_reports {
                                let _ = session.try_send(Report::Plugin(event.clone()));
                            }
                            task_status(event);
                        } else if let Some(sink) = request_reports.get() {
                            sink(event);
                        }
                    })
                };
                let called = tool.call(&input);
                let called = async {
                    // The withdrawal first: a revision gone before the call starts never runs.
                    tokio::select! {
                        biased;
                        () = withdrawn => Err(super::catalog::no_longer_served(&meta.name)),
                        outcome = called => outcome,
                    }
                };
                let running = crate::events::with_sink(
                    reports,
                    handoff.clone().scope(crate::cpu::measured(
                        crate::question::with_question_handler(questions, called),
                    )),
                );
                let outcome = match &spent {
                    Some(spent) => crate::cpu::counted(spent, running).await,
                    None => running.await,
                };
                // Not handed off: answered by its request, as it ended (or `input_required`),
                // but for a tool that requires tasks, handed off now as a task that ended.
                let deferred = replay.as_ref().is_some_and(|replay| replay.deferred_any());
                if deferred || meta.task_support != TaskSupport::Required {
                    if handoff.settle() {
                        return match settled.send(outcome) {
                            // What the store records of a call it never hands out.
                            Ok(()) => Err(ToolError::Internal("answered in its request".into())),
                            Err(outcome) => outcome,
                        };
                    }
                } else {
                    handoff.start();
                }
                // A call that could not run to an answer is the task's failure, as the
                // protocol has it; the operator's hooks see it all the same.
                let failed = matches!(outcome, Err(ToolError::Internal(_)));
                // Whose result it is: the tool looked up, whatever a hook renamed the call to.
                let outcome = super::tools::own_uris(plugins, &serving, &meta.name, outcome);
                let result = super::tools::call_result(&call, &meta, outcome);
                let hooks = options.hooks(identity.as_ref());
                let result = hooks
                    .after(call, result, &meta, tool)
                    .await
                    .map_err(|aborted| {
                        ToolError::Internal(format!(
                            "the call of '{}' was refused by a hook of this server: {}",
                            aborted.call.name, aborted.reason
                        ))
                    })?;
                if failed {
                    return Err(ToolError::Internal(result.content));
                }
                let content = if result.blocks.is_empty() && !result.content.is_empty() {
                    vec![Content::Text(result.content)]
                } else {
                    result.blocks
                };
                Ok(ToolOutput {
                    content,
                    structured: result.structured,
                    is_error: result.is_error,
                })
            }
        };
        let store = &self.options.tasks;
        // In the request: its reports are forwarded to the client and its cancellation stops
        // it (dropping the call, whose task is forgotten), until the hand-off or the end.
        let in_request = async {
            if let Some(sink) = crate::events::current_sink() {
                let _ = request_reports.set(sink);
            }
            let settled = (handed_off, settled_outcome);
            self.until_handed_off(store, (&owner, &account), work, settled, &call.name)
                .await
        };
        let outcome = match self
            .run(&call.name, context.clone(), None, in_request)
            .await??
        {
            InRequest::HandedOff(created) => return Ok(CallToolResponse::Task(created)),
            InRequest::Ended(outcome) => outcome,
        };
        let identity = super::session::identity(&context.extensions);
        let hooks = self.options.hooks(identity.as_ref());
        let ended = Ended {
            call,
            meta,
            tool,
            asked_as,
            serving,
        };
        self.answer(ended, &hooks, asking, outcome).await
    }

    /// Where a task's reports go after its hand-off, in a stateful session: the session's
    /// client, not the request's progress token (the request is answered).
    fn task_reports(&self, context: &RequestContext<RoleServer>) -> Option<ReportsTo> {
        if super::input_required::is_stateless(context) {
            return None;
        }
        let mut to = self.reports_to(context);
        to.token = None;
        Some(to)
    }

    /// Starts the task of a call that may become one, and waits until it does (the task, for
    /// the client) or its call ends first (its outcome, for the request to answer).
    async fn until_handed_off<W, F>(
        &self,
        store: &crate::task::TaskStore,
        (owner, account): (&str, &str),
        work: W,
        (mut handed_off, mut settled): (
            tokio::sync::watch::Receiver<HandoffState>,
            tokio::sync::oneshot::Receiver<Result<ToolOutput, ToolError>>,
        ),
        name: &str,
    ) -> Result<InRequest, ErrorData>
    where
        W: FnOnce(TaskHandle) -> F + Send + 'static,
        F: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        let task = store
            .start_for(owner, account, work)
            .map_err(|error| match error {
                TaskError::TooMany(_) | TaskError::Full(_) => {
                    ErrorData::new(ErrorCode::INVALID_REQUEST, error.to_string(), None)
                }
                other => ErrorData::internal_error(other.to_string(), None),
            })?;
        // Until the client is handed the task, the task is the request's: it ends with it.
        let mut unclaimed = Unclaimed {
            store,
            owner,
            id: &task.id,
            armed: true,
        };
        // Its call holds the sender: one that ended without a hand-off drops it.
        let handed = async {
            let started = |state: &HandoffState| *state == HandoffState::Started;
            if handed_off.wait_for(started).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let ended = tokio::select! {
            biased;
            () = handed => None,
            ended = store.wait(owner, &task.id) => Some(ended),
        };
        if ended.is_none() || *handed_off.borrow() == HandoffState::Started {
            let task = store.get(owner, &task.id).map_err(unknown)?;
            unclaimed.armed = false;
            return Ok(InRequest::HandedOff(CreateTaskResult::new(wire_task(
                &task,
            ))));
        }
        unclaimed.armed = false;
        let outcome = match store.forget(owner, &task.id).and_then(|task| task.outcome) {
            // Settled in the request: its outcome came straight here.
            Some(recorded) => settled
                .try_recv()
                .unwrap_or_else(|_| Arc::unwrap_or_clone(recorded)),
            None => Err(ToolError::Internal(format!(
                "the call of '{name}' ended without a result: it was cancelled"
            ))),
        };
        Ok(InRequest::Ended(outcome))
    }

    /// `tasks/get`.
    pub(super) fn get_task_of(
        &self,
        request: &GetTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let task = self
            .options
            .tasks
            .get(&self.task_owner(context), &request.task_id)
            .map_err(unknown)?;
        // Each poll copies the task's result (once completed) or the questions it waits on
        // (meanwhile) into the answer, then into the answer's text: counted (twice what is
        // copied, for the copy and its text) against the client's memory for requests first,
        // so that a flood of polls (each a few bytes, running no plugin code) cannot hold many
        // copies.
        #[cfg(feature = "mcp-http")]
        {
            let copied = task.outcome.as_deref().map_or(0, crate::task::kept_bytes)
                + crate::task::asked_bytes(&task.input_requests);
            let copies = copied.saturating_mul(2);
            super::http::charge_answer(&context.extensions, copies).map_err(|why| {
                ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("task '{}' cannot be sent now: {why}", request.task_id),
                    None,
                )
            })?;
        }
        Ok(GetTaskResult::new(detailed(&task)))
    }

    /// `tasks/cancel`: an empty acknowledgement, for a task that ended already too.
    pub(super) fn cancel_task_of(
        &self,
        request: &CancelTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.options
            .tasks
            .cancel(&self.task_owner(context), &request.task_id)
            .map(drop)
            .map_err(unknown)
    }

    /// `tasks/update`: answers to the questions a task waits on (some of them, or all).
    pub(super) fn update_task_of(
        &self,
        request: UpdateTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let ignored = self
            .options
            .tasks
            .answer(
                &self.task_owner(context),
                &request.task_id,
                request.input_responses,
            )
            .map_err(unknown)?;
        if !ignored.is_empty() {
            // A few of the keys (a client may send any number).
            let shown: Vec<_> = ignored.iter().take(8).collect();
            tracing::debug!(
                task = %request.task_id,
                "tasks/update answered {} question(s) the task does not wait on: {shown:?}",
                ignored.len()
            );
        }
        Ok(())
    }
}

/// How a call that may become a task stood when its request stopped waiting for it.
enum InRequest {
    /// It became a task: the client is answered with it.
    HandedOff(CreateTaskResult),
    /// It ended inside its request, which answers it.
    Ended(Result<ToolOutput, ToolError>),
}

/// Forgets a task its request has not handed to the client, when the request ends first.
struct Unclaimed<'a> {
    store: &'a crate::task::TaskStore,
    owner: &'a str,
    id: &'a str,
    armed: bool,
}

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.store.forget(self.owner, self.id);
        }
    }
}

/// The questions of a call that may become a task: its request's until it does, the task's
/// from then on.
struct HandedOver {
    handoff: Handoff,
    request: Option<Arc<dyn QuestionHandler>>,
    task: Arc<dyn QuestionHandler>,
}

/// Who answers no question.
struct Nobody;

impl QuestionHandler for Nobody {}

impl HandedOver {
    fn now(&self) -> &dyn QuestionHandler {
        match (&self.request, self.handoff.started()) {
            (_, true) => self.task.as_ref(),
            (Some(request), false) => request.as_ref(),
            (None, false) => &Nobody,
        }
    }
}

#[async_trait]
impl QuestionHandler for HandedOver {
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        self.now().elicit(asker, message, schema).await
    }

    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        self.now().sample(asker, request).await
    }

    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        self.now().roots(asker).await
    }
}

/// The questions of a task's call: each becomes one of the task's input requests (under the
/// question's key), within what the client declared it can answer; the answer that
/// `tasks/update` brings passes the checks every answer passes.
struct TaskQuestions {
    task: TaskHandle,
    capabilities: ClientCapabilities,
}

impl TaskQuestions {
    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        asker: &Asker,
        request: InputRequest,
    ) -> Result<T, QuestionError> {
        let request = serde_json::to_value(request)
            .map_err(|error| QuestionError::Failed(error.to_string()))?;
        let answer = self
            .task
            .ask(&asker.key, request)
            .await
            .map_err(|error| QuestionError::Failed(error.to_string()))?;
        serde_json::from_value(answer).map_err(|error| {
            QuestionError::Failed(format!(
                "the answer to question '{}' is not of the shape asked: {error}",
                asker.key
            ))
        })
    }
}

#[async_trait]
impl QuestionHandler for TaskQuestions {
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        if self.capabilities.elicitation.is_none() {
            return Err(super::ask::undeclared(asker, "elicitation"));
        }
        let params = super::ask::elicitation_params(message, schema, asker)?;
        let form = Form::parse(schema).map_err(QuestionError::Denied)?;
        let result: ElicitResult = self
            .ask(asker, InputRequest::Elicitation(ElicitRequest::new(params)))
            .await?;
        let answer = super::ask::elicitation_answer(result)?;
        check_elicitation(&answer, &form, asker)?;
        Ok(answer)
    }

    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        if self.capabilities.sampling.is_none() {
            return Err(super::ask::undeclared(asker, "sampling"));
        }
        let params = super::input_required::sampling_params(request, asker);
        let result: CreateMessageResult = self
            .ask(
                asker,
                InputRequest::CreateMessage(CreateMessageRequest::new(params)),
            )
            .await?;
        let answer = super::ask::sampling_answer(result)?;
        check_sampling(&answer, asker)?;
        Ok(answer)
    }

    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        if self.capabilities.roots.is_none() {
            return Err(super::ask::undeclared(asker, "roots"));
        }
        let result: ListRootsResult = self
            .ask(asker, InputRequest::ListRoots(ListRootsRequest::default()))
            .await?;
        let roots = super::ask::roots_answer(result);
        check_roots(&roots, asker)?;
        Ok(roots)
    }
}

/// How the owner of a stateful session's tasks ends.
pub(super) fn session_owner_suffix(session: u64) -> String {
    format!("/session-{session}")
}

fn unknown(error: TaskError) -> ErrorData {
    ErrorData::invalid_params(error.to_string(), None)
}

/// ISO 8601, as the protocol writes times.
fn iso8601(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A task's base fields, as the protocol has them.
fn wire_task(task: &TaskSnapshot) -> Task {
    let status = match task.status {
        crate::task::TaskStatus::Completed => TaskStatus::Completed,
        crate::task::TaskStatus::Failed => TaskStatus::Failed,
        crate::task::TaskStatus::Cancelled => TaskStatus::Cancelled,
        crate::task::TaskStatus::InputRequired => TaskStatus::InputRequired,
        _ => TaskStatus::Working,
    };
    let mut wire = Task::new(
        &task.id,
        status,
        iso8601(task.created_at),
        iso8601(task.last_updated_at),
    )
    .with_ttl_ms(millis(task.ttl))
    .with_poll_interval_ms(millis(task.poll_interval));
    if let Some(message) = &task.status_message {
        wire = wire.with_status_message(message);
    }
    wire
}

/// The message of a failed task's protocol error: the failure as its call's result said it (a
/// plugin's own words, up to its output limit: an `Internal` error holds that text whole,
/// prefix and all), cut as a log message is and shown plainly — clients show and servers log
/// an error's message whole.
fn failure_message(error: &ToolError) -> String {
    let whole = match error {
        ToolError::Internal(text) => std::borrow::Cow::Borrowed(text.as_str()),
        other => std::borrow::Cow::Owned(other.to_string()),
    };
    // Cut before it is copied (it may be a megabyte), and again once shown plainly (a
    // character replaced takes three bytes).
    let cap = crate::events::MAX_LOG_MESSAGE_BYTES;
    let mut message = whole[..whole.floor_char_boundary(cap)].to_owned();
    crate::events::shown_plainly(&mut message, true);
    if crate::events::cut(&mut message) || whole.len() > cap {
        message.push_str(" [cut]");
    }
    message
}

/// A task with what its status carries: the call's result, or its error.
fn detailed(task: &TaskSnapshot) -> DetailedTask {
    let payload = match (&task.status, task.outcome.as_deref()) {
        (crate::task::TaskStatus::Completed, Some(outcome)) => TaskPayload::Completed {
            result: call_result(outcome),
        },
        (crate::task::TaskStatus::Failed, Some(Err(error))) => TaskPayload::Failed {
            error: json_object(serde_json::json!({
                "code": ErrorCode::INTERNAL_ERROR.0,
                "message": failure_message(error),
            })),
        },
        (crate::task::TaskStatus::Failed, _) => TaskPayload::Failed {
            error: json_object(serde_json::json!({
                "code": ErrorCode::INTERNAL_ERROR.0,
                "message": "the task failed",
            })),
        },
        (crate::task::TaskStatus::Cancelled, _) => TaskPayload::Cancelled,
        (crate::task::TaskStatus::InputRequired, _) => TaskPayload::InputRequired {
            input_requests: task
                .input_requests
                .iter()
                .filter_map(|(key, request)| {
                    serde_json::from_value::<InputRequest>(request.clone())
                        .ok()
                        .map(|request| (key.clone(), request))
                })
                .collect(),
        },
        _ => TaskPayload::Working,
    };
    DetailedTask::new(wire_task(task), payload)
}

/// A completed task's result: the `CallToolResult` the call would have answered. Its structured
/// value, the part that may take tens of times its text in memory, is copied once into it.
fn call_result(outcome: &Result<ToolOutput, ToolError>) -> JsonObject {
    let (result, structured) = match outcome {
        Ok(output) => {
            let blocks = output
                .content
                .iter()
                .cloned()
                .map(super::content::block)
                .collect();
            if output.is_error {
                (rmcp::model::CallToolResult::error(blocks), None)
            } else {
                (
                    rmcp::model::CallToolResult::success(blocks),
                    output.structured.as_ref(),
                )
            }
        }
        Err(error) => (
            rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                error.to_string(),
            )]),
            None,
        ),
    };
    let mut result = json_object(serde_json::to_value(result).unwrap_or(Value::Null));
    if let Some(structured) = structured {
        result.insert("structuredContent".to_owned(), structured.clone());
    }
    result
}

fn json_object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}
