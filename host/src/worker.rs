//! [`Worker`]: registers tools (only while [`Mutable`]), runs hooks and tool calls.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::question::QuestionHandler;

use crate::call::{self, Aborted, Before, Hooks, Scopes};
use crate::events::{Sink, ToolEvent};
use crate::hook::{PostToolCallHook, PreToolCallHook, ToolCall, ToolResult};
use crate::tool::{Tool, ToolMeta, WorkerToolDefinition};
use crate::tool_server::{ToolServer, ToolServerError, ToolServerHandle};

/// The state in which tools can be registered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mutable;

/// The locked state: the tool set is fixed (so a model's cached prompt stays valid).
///
/// A locked worker has no way to register a tool: this does not compile (`E0599`, no method
/// `register_tool` on `Worker<CacheLocked>`), while the same call before `lock()` does.
///
/// ```compile_fail,E0599
/// # use std::sync::Arc;
/// # use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta, Worker};
/// # struct Nop;
/// # #[async_trait::async_trait]
/// # impl Tool for Nop {
/// #     async fn execute(&self, _: &str) -> Result<String, ToolError> {
/// #         Ok(String::new())
/// #     }
/// # }
/// # let def: ToolDefinition =
/// #     Arc::new(|| (ToolMeta::new("nop"), Arc::new(Nop) as Arc<dyn Tool>));
/// let mut locked = Worker::new().lock();
/// locked.register_tool(def).unwrap();
/// ```
///
/// ```
/// # use std::sync::Arc;
/// # use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta, Worker};
/// # struct Nop;
/// # #[async_trait::async_trait]
/// # impl Tool for Nop {
/// #     async fn execute(&self, _: &str) -> Result<String, ToolError> {
/// #         Ok(String::new())
/// #     }
/// # }
/// # let def: ToolDefinition =
/// #     Arc::new(|| (ToolMeta::new("nop"), Arc::new(Nop) as Arc<dyn Tool>));
/// let mut worker = Worker::new();
/// worker.register_tool(def).unwrap();
/// let _locked = worker.lock();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheLocked;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Mutable {}
    impl Sealed for super::CacheLocked {}
}

/// The states of a [`Worker`]: [`Mutable`] or [`CacheLocked`].
pub trait WorkerState: sealed::Sealed + Send + Sync + 'static {}
impl WorkerState for Mutable {}
impl WorkerState for CacheLocked {}

/// Errors of tool registration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolRegistryError {
    /// A tool of this name is registered already (native or plugin alike).
    #[error(
        "Tool with name '{0}' already registered; rename one of the tools or register only one of them"
    )]
    DuplicateName(String),
}

/// Errors of running a batch of tool calls.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerError {
    /// A hook aborted the batch.
    #[error("tool call '{call_id}' to '{tool}' was aborted by a hook: {reason}")]
    HookAborted {
        /// The call's id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// The hook's reason.
        reason: String,
    },
}

/// Registers tools and runs a model's tool calls through hooks.
///
/// Tools can be registered only in the [`Mutable`] state; [`lock`](Worker::lock) fixes the tool
/// set, [`unlock`](Worker::unlock) opens it again.
pub struct Worker<S: WorkerState = Mutable> {
    tool_server: ToolServer,
    pre_hooks: Vec<Arc<dyn PreToolCallHook>>,
    post_hooks: Vec<Arc<dyn PostToolCallHook>>,
    event_hooks: Vec<EventHook>,
    /// Who answers the questions tools ask (elicitation, sampling, roots).
    questions: Option<Arc<dyn QuestionHandler>>,
    _state: PhantomData<S>,
}

/// A hook seeing what tools report while they run.
type EventHook = Arc<dyn Fn(&ToolEvent) + Send + Sync>;

impl Default for Worker<Mutable> {
    fn default() -> Self {
        Self::new()
    }
}

impl Worker<Mutable> {
    /// A worker with no tools, in the [`Mutable`] state.
    pub fn new() -> Self {
        Self {
            tool_server: ToolServer::new(),
            pre_hooks: Vec::new(),
            post_hooks: Vec::new(),
            event_hooks: Vec::new(),
            questions: None,
            _state: PhantomData,
        }
    }

    /// Runs `factory` now and registers the tool it creates.
    pub fn register_tool(
        &mut self,
        factory: WorkerToolDefinition,
    ) -> Result<(), ToolRegistryError> {
        self.tool_server
            .handle()
            .register_tool(factory)
            .map_err(registry_error)
    }

    /// Runs every factory now and registers all the tools, or none if a name clashes.
    pub fn register_tools(
        &mut self,
        factories: impl IntoIterator<Item = WorkerToolDefinition>,
    ) -> Result<(), ToolRegistryError> {
        self.tool_server
            .handle()
            .register_tools(factories)
            .map_err(registry_error)
    }

    /// Fixes the tool set.
    pub fn lock(self) -> Worker<CacheLocked> {
        self.into_state()
    }
}

impl Worker<CacheLocked> {
    /// Opens the tool set for registration again.
    pub fn unlock(self) -> Worker<Mutable> {
        self.into_state()
    }
}

fn registry_error(error: ToolServerError) -> ToolRegistryError {
    match error {
        ToolServerError::DuplicateName(name) => ToolRegistryError::DuplicateName(name),
        // Registration fails only on a duplicate name (the other variants belong to lookups
        // and calls); map them anyway rather than panic.
        ToolServerError::ToolNotFound(name) | ToolServerError::ToolExecution(name) => {
            ToolRegistryError::DuplicateName(name)
        }
        ToolServerError::Task(error) => ToolRegistryError::DuplicateName(error.to_string()),
    }
}

impl<S: WorkerState> Worker<S> {
    fn into_state<T: WorkerState>(self) -> Worker<T> {
        Worker {
            tool_server: self.tool_server,
            pre_hooks: self.pre_hooks,
            post_hooks: self.post_hooks,
            event_hooks: self.event_hooks,
            questions: self.questions,
            _state: PhantomData,
        }
    }

    /// A handle to this worker's tools: look up, call, list.
    pub fn tool_server_handle(&self) -> ToolServerHandle {
        self.tool_server.handle()
    }

    /// Adds a hook run before every tool call, after the hooks added before it.
    pub fn add_pre_tool_call_hook(&mut self, hook: impl PreToolCallHook + 'static) {
        self.pre_hooks.push(Arc::new(hook));
    }

    /// Adds a hook run after every tool call, after the hooks added before it.
    pub fn add_post_tool_call_hook(&mut self, hook: impl PostToolCallHook + 'static) {
        self.post_hooks.push(Arc::new(hook));
    }

    /// Adds a hook that sees what the tools report while
    /// [`execute_tool_calls`](Self::execute_tool_calls) runs them: plugin logs and progress,
    /// each tagged with the plugin, the tool and the call's id. It is called on the thread
    /// running the plugin, while the plugin waits: keep it quick.
    pub fn add_tool_event_hook(&mut self, hook: impl Fn(&ToolEvent) + Send + Sync + 'static) {
        self.event_hooks.push(Arc::new(hook));
    }

    /// Sets who answers the questions the tools of this worker's calls ask the user or a model
    /// (contract 0.3.0: elicitation, sampling, roots): the embedder's own UI or model. Without
    /// one, the handler of the caller's
    /// [`with_question_handler`](crate::question::with_question_handler) scope answers, if
    /// any; otherwise a question fails and the tool reports it. The plugin's policy (`[client]`)
    /// decides first what it may ask.
    pub fn set_question_handler(&mut self, handler: Arc<dyn QuestionHandler>) {
        self.questions = Some(handler);
    }

    /// Where the events of this worker's calls go: its event hooks, then the caller's
    /// [`with_tool_events`](crate::events::with_tool_events) scope.
    fn event_sink(&self) -> Option<Sink> {
        let outer = crate::events::current_sink();
        if self.event_hooks.is_empty() {
            return outer;
        }
        let hooks = self.event_hooks.clone();
        Some(Arc::new(move |event: ToolEvent| {
            for hook in &hooks {
                hook(&event);
            }
            if let Some(outer) = &outer {
                outer(event);
            }
        }))
    }

    /// Runs a model's tool calls: the pre-call hooks one call at a time, then the calls in
    /// parallel, then the post-call hooks one call at a time. The results come back in the
    /// calls' order. An unknown tool or a failed call gives an error result; only a hook's
    /// `Abort` fails the whole batch. Each call's events and questions name it by its id
    /// ([`ToolEvent::call_id`], [`Asker::call_id`](crate::question::Asker::call_id)): give
    /// each call of a batch an id of its own (for a provider whose calls have none, such as
    /// Gemini's, make one up per call), or calls of one tool running at once cannot be told
    /// apart.
    pub async fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> Result<Vec<ToolResult>, WorkerError> {
        let handle = self.tool_server.handle();
        let hooks = self.hooks();
        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        let mut pending: Vec<Pending> = Vec::new();

        for (index, call) in calls.into_iter().enumerate() {
            let Some((meta, tool)) = handle.lookup(&call.name) else {
                let known = handle.tool_names().join(", ");
                results[index] = Some(ToolResult::error(
                    &call.id,
                    format!("Tool '{}' not found; the tools are: {known}", call.name),
                ));
                continue;
            };
            match hooks.before(call, &meta, tool).await {
                Before::Run(call, tool) => pending.push(Pending {
                    index,
                    call,
                    meta,
                    tool,
                }),
                Before::Skipped(result) => results[index] = Some(result),
                Before::Aborted(aborted) => return Err(hook_aborted(aborted)),
            }
        }

        let questions = self
            .questions
            .clone()
            .or_else(crate::question::current_handler);
        let outcomes = run_in_parallel(&pending, self.event_sink(), questions).await;

        for (pending, result) in pending.into_iter().zip(outcomes) {
            let Pending {
                index,
                call,
                meta,
                tool,
            } = pending;
            let result = hooks.after(call, result, &meta, tool).await;
            results[index] = Some(result.map_err(hook_aborted)?);
        }

        Ok(results.into_iter().flatten().collect())
    }

    fn hooks(&self) -> Hooks<'_> {
        Hooks {
            pre: &self.pre_hooks,
            post: &self.post_hooks,
            identity: None,
        }
    }
}

fn hook_aborted(aborted: Aborted) -> WorkerError {
    WorkerError::HookAborted {
        call_id: aborted.call.id,
        tool: aborted.call.name,
        reason: aborted.reason,
    }
}

/// Spawned calls, aborted when dropped (those that ended are not affected).
struct AbortOnDrop<T>(Vec<tokio::task::JoinHandle<T>>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// A call the pre-call hooks let through: where its result goes, the call as they left it,
/// the tool's metadata and the tool to run.
struct Pending {
    index: usize,
    call: ToolCall,
    meta: Arc<ToolMeta>,
    tool: Arc<dyn Tool>,
}

/// Runs the calls concurrently: on tokio worker threads when inside a tokio runtime, otherwise
/// interleaved on the calling task. Each call's events go to `sink` tagged with its id.
async fn run_in_parallel(
    pending: &[Pending],
    sink: Option<Sink>,
    questions: Option<Arc<dyn QuestionHandler>>,
) -> Vec<ToolResult> {
    let jobs = pending.iter().map(|pending| {
        let tool = Arc::clone(&pending.tool);
        let meta = Arc::clone(&pending.meta);
        let input = pending.call.input.to_string();
        let id = pending.call.id.clone();
        let scopes = Scopes {
            events: sink
                .clone()
                .map(|sink| crate::events::tagged(sink, id.clone())),
            questions: questions
                .clone()
                .map(|questions| crate::question::for_call(questions, id.clone())),
        };
        async move {
            let outcome = call::execute(tool.as_ref(), &input, scopes).await;
            call::result_of(&id, &meta, outcome)
        }
    });
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            // Dropped with the batch (a caller's timeout, a user's stop), its calls end with
            // it, as a dropped `call_tool` does: none keeps running, asking or reporting.
            let mut tasks = AbortOnDrop(jobs.map(|job| runtime.spawn(job)).collect());
            let mut results = Vec::with_capacity(tasks.0.len());
            for (task, pending) in tasks.0.iter_mut().zip(pending) {
                results.push(task.await.unwrap_or_else(|join_error| {
                    ToolResult::error(
                        &pending.call.id,
                        format!("Tool '{}' panicked: {join_error}", pending.call.name),
                    )
                }));
            }
            results
        }
        Err(_) => futures::future::join_all(jobs).await,
    }
}
