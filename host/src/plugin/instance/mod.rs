//! A plugin session: one live wasm instance serving the calls of one registration, one call at
//! a time, restarted after a trap and disabled after repeated failures. What a store holds is
//! in `state`, how an instance starts in `start`.

mod ask;
mod concurrent;
mod driver;
mod output;
mod start;
mod state;

#[cfg(feature = "wasi-http")]
pub(crate) use self::ask::Waited;
pub(crate) use self::concurrent::Concurrent;
pub(crate) use self::output::check_input;
use self::output::checked_output;
pub(crate) use self::start::within_moving;
pub(crate) use self::start::{PluginListing, StartCause, StartSpec, read_tools};
use self::start::{describe, instantiate, refuel, within};
use self::state::TimedOut;
pub(crate) use self::state::{MAX_CORE_INSTANCES, MAX_MEMORIES, MAX_TABLES, PluginState, Usage};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use wasmtime::Store;

use super::PluginImage;
use super::bindings::{PluginBindings, Request, Response};
use super::bindings_v3::RawOutput;
use super::output::stderr_tail;
use super::validate::CheckedSchema;
use crate::tool::{RequestError, Tool, ToolError, ToolMeta, ToolOutput};

/// Extra time given to a call stuck in a host call before its future is dropped; a call
/// running wasm code is stopped by the epoch deadline at the limit itself.
const TIMEOUT_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// A live instance and its store.
struct LiveInstance {
    store: Store<PluginState>,
    bindings: PluginBindings,
    /// Whether the engine meters fuel (then each call is given its fuel).
    metered: bool,
    /// The time the current call waited for answers from the client (the store's too).
    waited: Arc<ask::Waited>,
}

/// A failure message with the end of the plugin's stderr, where it said something.
fn with_stderr(message: String, stderr: &str) -> String {
    match stderr_tail(stderr) {
        Some(tail) => format!("{message} (its stderr: {tail})"),
        None => message,
    }
}

/// The instance slot of a session: the live instance (if any) and the failure count.
#[derive(Default)]
struct Slot {
    live: Option<LiveInstance>,
    /// A contract 1.0.0 instance's event loop, once it serves calls.
    concurrent: Option<Arc<concurrent::Concurrency>>,
    consecutive_failures: u32,
    /// Whether an instance was ever started (or tried) for this session: a start begun at
    /// registration that runs only after a call tried has nothing left to do.
    tried: bool,
    /// Why the last instance was dropped with no caller left to tell (its call was dropped):
    /// the next call reports it.
    lost: Option<String>,
}

/// The slot, held for one call. If the call's future is dropped before the call finished (a
/// timeout around `call_tool`, a cancelled request), the instance may be stopped half-way
/// through plugin code: it is dropped, without counting a failure, and the next call says so.
struct CallInProgress<'a> {
    slot: futures::lock::MutexGuard<'a, Slot>,
    plugin: &'a str,
    /// What is running, while plugin code may be running.
    running: Option<Subject<'a>>,
}

impl Drop for CallInProgress<'_> {
    fn drop(&mut self) {
        if let Some(subject) = self.running.take() {
            self.slot.live = None;
            self.slot.lost = Some(format!(
                "a call of {subject} of plugin '{}' was abandoned by its caller before it \
                 finished (cancelled, or timed out around the call); the instance was \
                 restarted and its state was lost",
                self.plugin
            ));
            tracing::info!(plugin = %self.plugin, "a call was dropped by its caller ({subject}); the instance was reset");
        }
    }
}

/// The tools of one plugin registered together: they share one instance, as the methods of
/// one `impl` share `self`.
pub(crate) struct SessionCore {
    pub(crate) image: Arc<PluginImage>,
    slot: futures::lock::Mutex<Slot>,
    /// Whether registration has started the instance: once per session, however many tools
    /// the plugin has.
    started: AtomicBool,
    /// Whether the start begun at registration is still running (for the message of a call
    /// that waited for it in vain).
    starting: AtomicBool,
    /// The task starting the instance in the background, aborted if the session ends first.
    start_task: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
    /// Which of its lists the plugin said changed in this session.
    pub(crate) changed: Arc<ChangedLists>,
}

/// Which lists a plugin said changed (`host.list-changed`), until the session reads them
/// again.
#[derive(Debug, Default)]
pub(crate) struct ChangedLists {
    pub(crate) resources: AtomicBool,
    pub(crate) prompts: AtomicBool,
}

/// What the tools of one session hold of it: when the last of them (and of the session's
/// definitions) is dropped, a start still running in the background is stopped.
pub(crate) struct SessionOwner(pub(crate) Arc<SessionCore>);

impl SessionOwner {
    pub(crate) fn new(image: Arc<PluginImage>) -> Self {
        Self(Arc::new(SessionCore {
            image,
            slot: futures::lock::Mutex::new(Slot::default()),
            started: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            start_task: std::sync::Mutex::new(None),
            changed: Arc::default(),
        }))
    }
}

impl Drop for SessionOwner {
    fn drop(&mut self) {
        let task = self
            .0
            .start_task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(task) = task {
            task.abort();
        }
    }
}

impl SessionCore {
    /// Creates the live instance at registration (the factory's job), once per session: the
    /// factories of the plugin's other tools find it started.
    ///
    /// The factory must not wait for the plugin: a component's start code may run for as long
    /// as its time limit, and neither the registration (an MCP session's opening) nor the
    /// runtime's threads may wait for it. So on a Tokio runtime the instance is created by a
    /// task of its own, holding the session's slot while it runs: the first call waits for it
    /// within its own time limit. Outside any runtime (nothing to block but the caller) it is
    /// created before the factory returns. A failure is logged and counted once; the first call
    /// tries again and reports it.
    pub(crate) fn start_now(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // Until it runs, the task holds the session weakly: a session dropped before
                // then (its instance, its pool slot) is freed at once, not when the runtime
                // gets round to the aborted task.
                let session = Arc::downgrade(self);
                // The start's CPU time counts where the registration's work does (an MCP
                // session's opening counts against its identity's CPU quota).
                let spent = crate::cpu::current();
                // Held until the start has ended: while it runs, the identity's other sessions
                // do not start their instances at their opening.
                #[cfg(feature = "mcp-http")]
                let starting = crate::mcp::quota::starting();
                let task = runtime.spawn(async move {
                    #[cfg(feature = "mcp-http")]
                    let _starting = starting;
                    if let Some(session) = session.upgrade() {
                        // Boxed: the task's memory (which the abort handle keeps for the
                        // session's life) is then a few words, and the start's state (some
                        // 6 KB) is freed when it ends.
                        let start = Box::pin(session.start_at_registration());
                        #[cfg(feature = "mcp")]
                        crate::cpu::counted_if(spent, start).await;
                        #[cfg(not(feature = "mcp"))]
                        {
                            let _ = spent;
                            start.await;
                        }
                    }
                });
                *self
                    .start_task
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(task.abort_handle());
            }
            Err(_) => super::blocking::block_on(self.start_at_registration()),
        }
    }

    async fn start_at_registration(&self) {
        // A call holding the slot starts the instance itself: never wait for it here (a
        // waiting task would keep the session, its instance and its pool slot, alive).
        let Some(mut slot) = self.slot.try_lock() else {
            return;
        };
        // A call may have come first and started it, or tried to.
        if slot.tried {
            return;
        }
        self.starting.store(true, Ordering::Release);
        let deadline = Instant::now() + self.image.policy.limits.call_timeout;
        // Its code's CPU time measured for whoever counts it (see `cpu::counted_if` above).
        #[cfg(feature = "mcp")]
        let started = crate::cpu::measured(self.start(&mut slot, deadline)).await;
        #[cfg(not(feature = "mcp"))]
        let started = self.start(&mut slot, deadline).await;
        self.starting.store(false, Ordering::Release);
        if let Err(error) = started {
            tracing::warn!(plugin = %self.image.name, "{error}");
        }
    }

    /// Creates a live instance. A failure counts against the plugin, unless the host lacked
    /// capacity (a full pool).
    ///
    /// The instance's tool list is not read again: the tools, descriptions and schemas are
    /// those validated at load, and the plugin's own initialisation (a Rust plugin builds its
    /// tools on its first export call) runs at the session's first call, in that call's time
    /// limit. A session that never calls a plugin pays for its instance only.
    async fn start(&self, slot: &mut Slot, deadline: Instant) -> Result<(), ToolError> {
        if slot.tried {
            // A restart: the lists the old instance gave may not be the new one's.
            self.changed.resources.store(true, Ordering::Release);
            self.changed.prompts.store(true, Ordering::Release);
        }
        slot.tried = true;
        let mut spec = self.image.start_spec();
        spec.changed = Some(&self.changed);
        match instantiate(&spec, deadline, false).await {
            Ok((live, _)) => {
                slot.live = Some(live);
                Ok(())
            }
            Err(failure) => {
                if failure.counts_against_plugin() {
                    slot.consecutive_failures += 1;
                }
                Err(ToolError::Internal(format!(
                    "plugin '{}' failed while starting: {}",
                    self.image.name, failure.reason
                )))
            }
        }
    }

    async fn call(
        &self,
        tool_name: &Arc<str>,
        validator: &CheckedSchema,
        output_schema: Option<&CheckedSchema>,
        input_json: &str,
    ) -> Result<ToolOutput, ToolError> {
        let tool: &str = tool_name;
        let limits = &self.image.policy.limits;
        check_input(limits, validator, tool, input_json)?;
        match self
            .run(
                tool_name,
                Subject::Tool(tool),
                Work::Execute(input_json),
                true,
            )
            .await?
        {
            Done::Executed(result) => {
                checked_output(&self.image, limits, tool, output_schema, result)
            }
            Done::Answered(_) => Err(ToolError::Internal(
                "a tool call got a request's answer".into(),
            )),
        }
    }

    /// Runs a request other than a tool call in the session's instance, under the same limits.
    pub(crate) async fn request(&self, request: &Request) -> Result<Response, RequestError> {
        self.request_waiting(request, true).await
    }

    /// Runs a request in the session's instance only if the instance is idle now: a list read
    /// again must not wait behind another call (which may be waiting for a person's answer)
    /// while the client waits for every plugin's lists. `Err` when busy, as a busy call's.
    pub(crate) async fn request_if_idle(
        &self,
        request: &Request,
    ) -> Result<Response, RequestError> {
        self.request_waiting(request, false).await
    }

    async fn request_waiting(
        &self,
        request: &Request,
        wait: bool,
    ) -> Result<Response, RequestError> {
        let label: Arc<str> = Arc::from(request.label());
        match self
            .run(
                &label,
                Subject::Request(request),
                Work::Request(request),
                wait,
            )
            .await
        {
            // The plugin's own error text, bounded (it becomes a protocol error's message).
            Ok(Done::Answered(answer)) => answer.map_err(output::cut_request_error),
            Ok(Done::Executed(_)) => Err(RequestError::Internal(
                "a request got a tool's answer".into(),
            )),
            Err(error) => Err(match error {
                ToolError::InvalidArgument(text) => RequestError::InvalidArgument(text),
                ToolError::ExecutionFailed(text) | ToolError::Internal(text) => {
                    RequestError::Internal(text)
                }
            }),
        }
    }

    /// Runs `work` in the session's instance (starting it if need be) within the time limit;
    /// a trap or a limit hit drops the instance and counts as the plugin's failure.
    /// `wait`: whether to wait for a busy instance (up to the time limit) rather than fail at
    /// once.
    async fn run(
        &self,
        label: &Arc<str>,
        subject: Subject<'_>,
        work: Work<'_>,
        wait: bool,
    ) -> Result<Done, ToolError> {
        let image = &self.image;
        // A call running as a task has the task's time limit.
        let task_limits;
        let limits = if crate::task::in_task() {
            task_limits = crate::policy::Limits {
                call_timeout: image
                    .policy
                    .limits
                    .task_timeout
                    .unwrap_or(image.policy.limits.call_timeout),
                ..image.policy.limits.clone()
            };
            &task_limits
        } else {
            &image.policy.limits
        };
        // The time limit covers waiting for the instance too: a call queued behind others
        // fails as busy rather than waiting for all of them.
        let arrived = Instant::now();
        let deadline = arrived + limits.call_timeout;
        if image.pre.is_concurrent() {
            // On the heap: every caller's future would hold both paths otherwise.
            return Box::pin(self.run_concurrent(label, subject, work, (deadline, limits), wait))
                .await;
        }
        // Whether the call found the instance running another: one that then runs out of
        // time had less than its limit to run in, so it is not the plugin's failure
        // (overlapping calls must not be a way to disable a slow plugin).
        let (slot, queued) = match self.slot.try_lock() {
            Some(slot) => (Some(slot), false),
            None if wait => (within(deadline, self.slot.lock()).await.ok(), true),
            None => (None, false),
        };
        let Some(slot) = slot else {
            if !wait {
                return Err(ToolError::ExecutionFailed(format!(
                    "{subject} of plugin '{}' is busy: this session's instance of the plugin \
                     is running another call",
                    image.name
                )));
            }
            if self.starting.load(Ordering::Acquire) {
                return Err(ToolError::ExecutionFailed(format!(
                    "{subject} of plugin '{}' is not ready: the plugin's instance for this \
                     session was still starting after the call's time limit of {:?}; its start \
                     code is slow (it is stopped at the same limit); try again later",
                    image.name, limits.call_timeout
                )));
            }
            return Err(ToolError::ExecutionFailed(format!(
                "{subject} of plugin '{}' is busy: this session's instance of the plugin \
                 was running other calls for the whole time limit of {:?}; try again later",
                image.name, limits.call_timeout
            )));
        };
        let queued = queued.then(|| arrived.elapsed());
        let mut call = CallInProgress {
            slot,
            plugin: &image.name,
            running: None,
        };
        if !wait && call.slot.live.is_none() {
            return Err(not_running(&subject, &image.name));
        }
        if let Some(lost) = call.slot.lost.take() {
            return Err(ToolError::Internal(format!("{lost}; call again")));
        }
        if call.slot.consecutive_failures >= limits.max_consecutive_failures {
            return Err(ToolError::Internal(format!(
                "plugin '{}' is disabled for this session after {} consecutive failures; \
                 check the log for their causes, fix the plugin or its limits, and start a \
                 new session",
                image.name, call.slot.consecutive_failures
            )));
        }
        call.running = Some(subject);
        if call.slot.live.is_none() {
            // On the heap: starting an instance is rare, and its future would otherwise make
            // every call's future larger (by 1.7 KB of the 6.3 KB `Tool::execute` boxes and
            // copies on each call).
            // A start has the plugin's call time limit, in a task too (whose limit is a
            // call's, not its instance's).
            let start_by = deadline.min(Instant::now() + image.policy.limits.call_timeout);
            let started = Box::pin(self.start(&mut call.slot, start_by)).await;
            if started.is_err() {
                call.running = None;
            }
            started?;
        }
        let Some(live) = call.slot.live.as_mut() else {
            call.running = None;
            return Err(ToolError::Internal(format!(
                "plugin '{}' has no running instance",
                image.name
            )));
        };
        live.store
            .data_mut()
            .begin_call(deadline, Some(label), subject.http_scope());
        live.store.set_epoch_deadline(1);
        if live.metered {
            refuel(&mut live.store, limits);
        }
        // Time spent waiting for the client's answers moves the deadline (the store's epoch
        // deadline moves with it).
        let outcome = within_moving(deadline + TIMEOUT_GRACE, &live.waited, async {
            Ok(match work {
                Work::Execute(input_json) => Done::Executed(
                    live.bindings
                        .call_execute(&mut live.store, label, input_json)
                        .await?,
                ),
                // On the heap: the tool call is the hot path, and its future should not be
                // the size of this one.
                Work::Request(request) => Done::Answered(
                    Box::pin(live.bindings.call_request(&mut live.store, request)).await?,
                ),
            })
        })
        .await;
        let stderr = live.store.data_mut().end_call();
        call.running = None;
        let (failure, timed_out) = match outcome {
            Ok(Ok(done)) => {
                call.slot.consecutive_failures = 0;
                return Ok(done);
            }
            Ok(Err(error)) => (
                describe(limits, &error),
                error.downcast_ref::<TimedOut>().is_some(),
            ),
            Err(_) => (describe(limits, &wasmtime::Error::new(TimedOut)), true),
        };
        // A trap leaves the store unusable: drop it, and start afresh on the next call.
        call.slot.live = None;
        let failure = match queued {
            Some(queued) if timed_out => {
                format!("{failure}, {queued:?} of it waiting for other calls to finish")
            }
            _ => {
                call.slot.consecutive_failures += 1;
                failure
            }
        };
        let message = with_stderr(
            format!(
                "{subject} of plugin '{}' failed: {failure}; the instance was restarted \
                 and its state was lost",
                image.name
            ),
            &stderr,
        );
        tracing::warn!(plugin = %image.name, "{message}");
        Err(ToolError::Internal(message))
    }

    /// Runs `work` in the session's contract 1.0.0 instance, beside its other calls (without
    /// `wait`, only if the instance is running and has room now): the slot
    /// is held only to find the instance (or start it).
    async fn run_concurrent(
        &self,
        label: &Arc<str>,
        subject: Subject<'_>,
        work: Work<'_>,
        (deadline, limits): (Instant, &crate::policy::Limits),
        wait: bool,
    ) -> Result<Done, ToolError> {
        let image = &self.image;
        let instance = {
            let slot = if wait {
                within(deadline, self.slot.lock()).await.ok()
            } else {
                // Not behind a start, a restart or a death being counted.
                match self.slot.try_lock() {
                    Some(slot) => Some(slot),
                    None => return Err(not_running(&subject, &image.name)),
                }
            };
            let Some(mut slot) = slot else {
                return Err(ToolError::ExecutionFailed(format!(
                    "{subject} of plugin '{}' is not ready: the plugin's instance for this \
                     session was still starting after the call's time limit of {:?}; its start \
                     code is slow (it is stopped at the same limit); try again later",
                    image.name, limits.call_timeout
                )));
            };
            if !wait
                && slot
                    .concurrent
                    .as_ref()
                    .is_none_or(|live| live.dead().is_some())
            {
                return Err(not_running(&subject, &image.name));
            }
            if let Some(lost) = slot.lost.take() {
                return Err(ToolError::Internal(format!("{lost}; call again")));
            }
            if let Some(death) = slot.concurrent.as_ref().and_then(|live| live.dead()) {
                // It ended with no caller to see it (a cancelled call that would not return).
                if let Some(dead) = slot.concurrent.take() {
                    self.count_death(&mut slot, &dead);
                }
                return Err(ToolError::Internal(format!(
                    "plugin '{}' lost its instance for this session ({}); it was restarted and \
                     its state was lost; call again",
                    image.name, death.reason
                )));
            }
            if slot.consecutive_failures >= limits.max_consecutive_failures {
                return Err(ToolError::Internal(format!(
                    "plugin '{}' is disabled for this session after {} consecutive failures; \
                     check the log for their causes, fix the plugin or its limits, and start a \
                     new session",
                    image.name, slot.consecutive_failures
                )));
            }
            if slot.concurrent.is_none() {
                if slot.live.is_none() {
                    // A start has the plugin's call time limit, in a task too.
                    let start_by = deadline.min(Instant::now() + image.policy.limits.call_timeout);
                    self.start(&mut slot, start_by).await?;
                }
                let Some(live) = slot.live.take() else {
                    return Err(ToolError::Internal(format!(
                        "plugin '{}' has no running instance",
                        image.name
                    )));
                };
                let PluginBindings::V10(bindings) = live.bindings else {
                    return Err(ToolError::Internal(format!(
                        "plugin '{}' is not of contract 1.0.0",
                        image.name
                    )));
                };
                slot.concurrent = Some(Arc::new(concurrent::Concurrency::start(
                    live.store,
                    bindings,
                    limits.max_concurrent_calls as usize,
                )));
            }
            match &slot.concurrent {
                Some(instance) => Arc::clone(instance),
                None => {
                    return Err(ToolError::Internal(format!(
                        "plugin '{}' has no running instance",
                        image.name
                    )));
                }
            }
        };
        let owned = match work {
            Work::Execute(input) => concurrent::OwnedWork::Execute(input.to_owned()),
            Work::Request(request) => concurrent::OwnedWork::Request(request.clone()),
        };
        let outcome = instance.call(label, owned, deadline, wait, &subject).await;
        let failed = |failure: String, stderr: &str| {
            let message = with_stderr(
                format!("{subject} of plugin '{}' failed: {failure}", image.name),
                stderr,
            );
            tracing::warn!(plugin = %image.name, "{message}");
            ToolError::Internal(message)
        };
        match outcome {
            concurrent::Outcome::Returned {
                result: Ok(done), ..
            } => {
                if let Some(mut slot) = self.slot.try_lock() {
                    slot.consecutive_failures = 0;
                }
                Ok(done)
            }
            concurrent::Outcome::Returned {
                result: Err(error),
                stderr,
            } => {
                self.drop_instance(&instance).await;
                Err(failed(
                    format!(
                        "{}; the instance was restarted and its state was lost, with every \
                         call it was running",
                        describe(limits, &error)
                    ),
                    &stderr,
                ))
            }
            concurrent::Outcome::Lost { death, mine } => {
                self.drop_instance(&instance).await;
                Err(failed(
                    if mine {
                        format!(
                            "{}; the instance was restarted and its state was lost, with every \
                             call it was running",
                            death.reason
                        )
                    } else {
                        format!(
                            "its instance ended while the call ran (one of its calls: {}); it \
                             was restarted and its state was lost",
                            death.reason
                        )
                    },
                    "",
                ))
            }
            concurrent::Outcome::TimedOut { queued } => {
                let mut failure = format!(
                    "it ran longer than its time limit of {:?} while it waited, and was \
                     cancelled (the instance and its other calls go on)",
                    limits.call_timeout
                );
                match queued {
                    Some(queued) => failure.push_str(&format!(
                        ", {queued:?} of it waiting for other calls to finish"
                    )),
                    None => {
                        let mut slot = self.slot.lock().await;
                        slot.consecutive_failures += 1;
                    }
                }
                Err(failed(failure, ""))
            }
            concurrent::Outcome::Busy => Err(ToolError::ExecutionFailed(if wait {
                format!(
                    "{subject} of plugin '{}' is busy: this session's instance of the plugin \
                     was running {} calls (its `max_concurrent_calls`) for the whole time \
                     limit of {:?}; try again later",
                    image.name,
                    instance.max_calls(),
                    limits.call_timeout
                )
            } else {
                format!(
                    "{subject} of plugin '{}' is busy: this session's instance of the plugin \
                     is running {} calls, its `max_concurrent_calls`",
                    image.name,
                    instance.max_calls()
                )
            })),
        }
    }

    /// Drops the session's 1.0.0 instance if it is still `instance` (it ended), counting its
    /// end as one failure of the plugin.
    async fn drop_instance(&self, instance: &Arc<concurrent::Concurrency>) {
        let mut slot = self.slot.lock().await;
        if slot
            .concurrent
            .as_ref()
            .is_some_and(|live| Arc::ptr_eq(live, instance))
        {
            slot.concurrent = None;
        }
        self.count_death(&mut slot, instance);
    }

    /// An instance's end counts once against the plugin, whichever of its calls sees it;
    /// not when the host lacked capacity (its pool's stacks ran out), nor when a call its
    /// caller gave up would not return.
    fn count_death(&self, slot: &mut Slot, instance: &concurrent::Concurrency) {
        let not_its_failure = instance
            .dead()
            .is_some_and(|death| death.host_capacity || death.caller_gave_up);
        if !instance.counted.swap(true, Ordering::AcqRel) && !not_its_failure {
            slot.consecutive_failures += 1;
        }
    }
}

/// What a session's instance is asked to do.
enum Work<'a> {
    /// Run the tool (the label) with this input.
    Execute(&'a str),
    Request(&'a Request),
}

/// What runs in an instance, as far as its HTTP grants go.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "wasi-http"), allow(dead_code))]
pub(crate) enum HttpScope<'a> {
    /// The instance's start code.
    Start,
    /// A call of this tool.
    Tool(&'a str),
    /// A resource list or read.
    Resources,
    /// A prompt list or rendering.
    Prompts,
    /// A completion.
    Completion,
}

impl<'a> Subject<'a> {
    /// What its HTTP grants are.
    fn http_scope(self) -> HttpScope<'a> {
        match self {
            Self::Tool(tool) => HttpScope::Tool(tool),
            Self::Request(Request::Resources | Request::ReadResource(_)) => HttpScope::Resources,
            Self::Request(Request::Prompts | Request::GetPrompt(..)) => HttpScope::Prompts,
            Self::Request(Request::Complete { .. }) => HttpScope::Completion,
        }
    }
}

/// What it did.
enum Done {
    Executed(Result<RawOutput, ToolError>),
    Answered(Result<Response, RequestError>),
}

/// What a call is, in messages: "tool 'search'", "the read of resource 'notes://today'".
#[derive(Clone, Copy)]
enum Subject<'a> {
    Tool(&'a str),
    Request(&'a Request),
}

impl std::fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tool(tool) => write!(f, "tool '{tool}'"),
            Self::Request(Request::Resources) => f.write_str("the resource list"),
            Self::Request(Request::ReadResource(uri)) => write!(f, "the read of resource '{uri}'"),
            Self::Request(Request::Prompts) => f.write_str("the prompt list"),
            Self::Request(Request::GetPrompt(name, _)) => write!(f, "prompt '{name}'"),
            Self::Request(Request::Complete { argument, .. }) => {
                write!(f, "the completion of '{argument}'")
            }
        }
    }
}

/// One tool of a plugin session, as a [`Tool`].
pub(crate) struct PluginTool {
    session: Arc<SessionOwner>,
    name: Arc<str>,
    validator: Arc<CheckedSchema>,
    output_schema: Option<Arc<CheckedSchema>>,
}

#[async_trait]
impl Tool for PluginTool {
    /// The text form of [`call`](Tool::call)'s output; a failure told with content is an
    /// [`ToolError::ExecutionFailed`] with its text.
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        // The session's call itself, not `Tool::call`: one boxed future per call, not two.
        let output = self.run(input_json).await?;
        if output.is_error {
            return Err(ToolError::ExecutionFailed(output.into_text()));
        }
        Ok(output.into_text())
    }

    async fn call(&self, input_json: &str) -> Result<ToolOutput, ToolError> {
        self.run(input_json).await
    }
}

impl PluginTool {
    /// The call, in the session's instance.
    async fn run(&self, input_json: &str) -> Result<ToolOutput, ToolError> {
        self.session
            .0
            .call(
                &self.name,
                &self.validator,
                self.output_schema.as_deref(),
                input_json,
            )
            .await
    }

    /// The definition's factory: start the session's instance, return the meta and the tool.
    pub(crate) fn create(
        session: &Arc<SessionOwner>,
        meta: &ToolMeta,
        validator: &Arc<CheckedSchema>,
        output_schema: Option<Arc<CheckedSchema>>,
    ) -> (ToolMeta, Arc<dyn Tool>) {
        let tool = Self::created(session, &meta.name, validator, output_schema);
        (meta.clone(), tool)
    }

    /// The tool `name` of the session, its instance started in the background.
    pub(crate) fn created(
        session: &Arc<SessionOwner>,
        name: &str,
        validator: &Arc<CheckedSchema>,
        output_schema: Option<Arc<CheckedSchema>>,
    ) -> Arc<dyn Tool> {
        session.0.start_now();
        Arc::new(PluginTool {
            session: Arc::clone(session),
            name: Arc::from(name),
            validator: Arc::clone(validator),
            output_schema,
        })
    }
}

/// The refusal of work that may run only in a running instance that is free now (`wait`
/// false: a list read again), when the instance is not running or is being started: it is
/// never started (or waited for) for that.
fn not_running(subject: &Subject<'_>, plugin: &str) -> ToolError {
    ToolError::ExecutionFailed(format!(
        "{subject} of plugin '{plugin}' is not run now: this session's instance of the plugin \
         is not running (or is starting), and this is read only from a running, idle instance"
    ))
}
