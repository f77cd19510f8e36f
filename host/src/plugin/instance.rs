//! A plugin session: one live wasm instance serving the calls of one registration, one call at
//! a time, restarted after a trap and disabled after repeated failures.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Instant;

use async_trait::async_trait;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
#[cfg(feature = "wasi-http")]
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginImage;
use super::bindings::{
    LogLevel as WitLevel, PluginBindings, PluginHostImports, PluginPre, PluginToolMeta,
};
use super::descriptors::{HeldDir, HostDescriptors, InstanceDescriptors, Refused};
#[cfg(feature = "wasi-http")]
use super::http::HttpGate;
use super::output::{PluginOutput, stderr_tail};
use super::validate::CheckedSchema;
use crate::events::{CallReports, LogLevel};
use crate::policy::{Limits, SandboxPolicy};
use crate::tool::{Tool, ToolError, ToolMeta};

/// A call that waited this long for its instance and then ran out of time is not counted as
/// the plugin's failure.
const QUEUED_LONG_ENOUGH: std::time::Duration = std::time::Duration::from_millis(1);

/// Extra time given to a call stuck in a host call before its future is dropped; a call
/// running wasm code is stopped by the epoch deadline at the limit itself.
const TIMEOUT_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// The data of one store: WASI state, resource limits, and the current call's deadline.
pub(crate) struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: InstanceLimiter,
    deadline: Instant,
    output: PluginOutput,
    reports: CallReports,
    /// The files and directories it holds open.
    descriptors: InstanceDescriptors,
    #[cfg(feature = "wasi-http")]
    http: WasiHttpCtx,
    #[cfg(feature = "wasi-http")]
    http_gate: HttpGate,
}

impl PluginState {
    /// A call of `tool` (or the start of the instance) begins, to end by `deadline`; what the
    /// plugin reports goes to the caller's event scope, if any.
    fn begin_call(&mut self, deadline: Instant, tool: Option<&Arc<str>>) {
        self.deadline = deadline;
        // A reference count, not a copy of the name: this runs on every call.
        self.reports
            .begin(tool.map(Arc::clone), crate::events::current_sink());
        let tool = tool.map(|tool| &**tool);
        #[cfg(feature = "wasi-http")]
        self.http_gate.begin_call(deadline, tool);
        #[cfg(not(feature = "wasi-http"))]
        let _ = tool;
    }

    /// The file system of WASI and the count of open descriptors, side by side.
    pub(super) fn files(&mut self) -> (WasiFilesystemCtxView<'_>, &mut InstanceDescriptors) {
        (
            WasiFilesystemCtxView {
                ctx: self.wasi.filesystem(),
                table: &mut self.table,
            },
            &mut self.descriptors,
        )
    }

    /// The call ended: pass on what it wrote to stdout and stderr (bounded like its logs),
    /// cancel what it left running; returns its stderr, for quoting in an error.
    fn end_call(&mut self) -> String {
        let stderr = self.output.drain_into(&mut self.reports);
        self.reports.end();
        #[cfg(feature = "wasi-http")]
        self.http_gate.end_call();
        stderr
    }
}

#[cfg(feature = "wasi-http")]
impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_gate,
        }
    }
}

/// The host interface of contract 0.2.0: logs and progress of the current call.
impl PluginHostImports for PluginState {
    fn log(&mut self, level: WitLevel, message: String) {
        let level = match level {
            WitLevel::Trace => LogLevel::Trace,
            WitLevel::Debug => LogLevel::Debug,
            WitLevel::Info => LogLevel::Info,
            WitLevel::Warn => LogLevel::Warn,
            WitLevel::Error => LogLevel::Error,
        };
        self.reports.log(level, message);
    }

    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        self.reports.progress(done, total, message);
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Bounds what an instance allocates: its linear memories and tables together stay within the
/// plugin's memory limit, and it may create only as many core instances, memories and tables as
/// real toolchains need.
///
/// Every size comes from the plugin (a `memory.grow` delta, a table's initial size), so all
/// arithmetic is checked, a request above the limit is refused before anything is counted, and
/// a growth above the memory's or table's own maximum is refused here (it could only fail).
/// wasmtime also reports failures of growths it never asked about (an overflowing delta), so
/// a failure is rolled back only when it is the operating system refusing the growth just
/// allowed; any other failure leaves the count as it is, which can only err on the safe side.
#[derive(Debug)]
pub(crate) struct InstanceLimiter {
    limit: usize,
    /// Bytes of all linear memories, as last allowed.
    memory_bytes: usize,
    /// Bytes charged for all table elements ([`TABLE_ELEMENT_BYTES`] each).
    table_bytes: usize,
    /// The memory count before the growth allowed last, to restore if the system refuses it.
    undo_memory: Option<usize>,
}

/// Most core instances one plugin may create. A Rust `wasm32-wasip2` plugin has four (the
/// program, the WASI adapter and two shims); other toolchains link a few more modules.
pub(crate) const MAX_CORE_INSTANCES: usize = 16;

/// Most linear memories one plugin may create. Toolchains use one memory, plus one for the
/// preview-1 adapter where they use it (shared-everything linking shares one memory).
pub(crate) const MAX_MEMORIES: usize = 2;

/// Most tables one plugin may create (one per core module is the usual case).
pub(crate) const MAX_TABLES: usize = 16;

/// What one table element costs, for the memory limit: wasmtime keeps a pointer per element
/// (8 bytes); charging 16 covers the larger elements of other table types too.
pub(crate) const TABLE_ELEMENT_BYTES: usize = 16;

impl InstanceLimiter {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            memory_bytes: 0,
            table_bytes: 0,
            undo_memory: None,
        }
    }

    /// The new total of a resource growing from `current` to `desired` bytes, if it keeps
    /// memory plus tables within the limit.
    fn grown(&self, used: usize, other: usize, current: usize, desired: usize) -> Option<usize> {
        if desired > self.limit {
            return None;
        }
        let total = used.checked_sub(current.min(used))?.checked_add(desired)?;
        (total.checked_add(other)? <= self.limit).then_some(total)
    }
}

/// Most host resources (streams, pollables, files, HTTP requests …) one instance may hold at
/// once. Each costs host memory the plugin's memory limit does not see, so keep it low.
const MAX_HOST_RESOURCES: usize = 1_000;

/// Most bytes one host call may take from the guest (DoS mitigation; wasmtime's default is
/// 128 MiB).
const HOSTCALL_FUEL: usize = 4 << 20;

/// Most random bytes one call to `wasi:random` may ask for.
const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// A call went past its time limit.
#[derive(Debug, thiserror::Error)]
#[error("timed out")]
struct TimedOut;

/// An instance asked for more memory than its limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded")]
struct MemoryLimitExceeded;

impl ResourceLimiter for InstanceLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let Some(total) = self.grown(self.memory_bytes, self.table_bytes, current, desired) else {
            return Err(wasmtime::Error::new(MemoryLimitExceeded));
        };
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        self.undo_memory = Some(self.memory_bytes);
        self.memory_bytes = total;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        let refused_by_the_system = error.chain().any(|cause| cause.is::<std::io::Error>());
        if let Some(previous) = self.undo_memory.take()
            && refused_by_the_system
        {
            self.memory_bytes = previous;
        }
        Ok(())
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let bytes = |elements: usize| elements.checked_mul(TABLE_ELEMENT_BYTES);
        let grown = bytes(current)
            .zip(bytes(desired))
            .and_then(|(current, desired)| {
                self.grown(self.table_bytes, self.memory_bytes, current, desired)
            });
        let Some(total) = grown else {
            return Err(wasmtime::Error::new(MemoryLimitExceeded));
        };
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        // Once allowed (and within the table's maximum), a table growth cannot fail: nothing to
        // roll back in `table_grow_failed`, whose calls are all for growths never allowed.
        self.table_bytes = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// A live instance and its store.
struct LiveInstance {
    store: Store<PluginState>,
    bindings: PluginBindings,
    /// Whether the engine meters fuel (then each call is given its fuel).
    metered: bool,
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
    /// The tool running, while plugin code may be running.
    running: Option<&'a str>,
}

impl Drop for CallInProgress<'_> {
    fn drop(&mut self) {
        if let Some(tool) = self.running.take() {
            self.slot.live = None;
            self.slot.lost = Some(format!(
                "a call of tool '{tool}' of plugin '{}' was abandoned by its caller before it \
                 finished (cancelled, or timed out around the call); the instance was \
                 restarted and its state was lost",
                self.plugin
            ));
            tracing::info!(plugin = %self.plugin, tool, "a call was dropped by its caller; the instance was reset");
        }
    }
}

/// The tools of one plugin registered together: they share one instance, as the methods of
/// one `impl` share `self`.
pub(crate) struct PluginSession {
    image: Arc<PluginImage>,
    slot: futures::lock::Mutex<Slot>,
    /// Whether registration has started the instance: once per session, however many tools
    /// the plugin has.
    started: AtomicBool,
    /// Whether the start begun at registration is still running (for the message of a call
    /// that waited for it in vain).
    starting: AtomicBool,
    /// The task starting the instance in the background, aborted if the session ends first.
    start_task: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
}

/// What the tools of one session hold of it: when the last of them (and of the session's
/// definitions) is dropped, a start still running in the background is stopped.
pub(crate) struct SessionOwner(Arc<PluginSession>);

impl SessionOwner {
    pub(crate) fn new(image: Arc<PluginImage>) -> Self {
        Self(Arc::new(PluginSession {
            image,
            slot: futures::lock::Mutex::new(Slot::default()),
            started: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            start_task: std::sync::Mutex::new(None),
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

impl PluginSession {
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
                let task = runtime.spawn(async move {
                    if let Some(session) = session.upgrade() {
                        session.start_at_registration().await;
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
        slot.tried = true;
        match instantiate(&self.image.start_spec(), deadline, false).await {
            Ok((live, _)) => {
                slot.live = Some(live);
                Ok(())
            }
            Err(failure) => {
                if !failure.host_capacity {
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
    ) -> Result<String, ToolError> {
        let tool: &str = tool_name;
        let image = &self.image;
        let limits = &image.policy.limits;
        check_input(limits, validator, tool, input_json)?;

        // The time limit covers waiting for the instance too: a call queued behind others
        // fails as busy rather than waiting for all of them.
        let arrived = Instant::now();
        let deadline = arrived + limits.call_timeout;
        let Ok(slot) = within(deadline, self.slot.lock()).await else {
            if self.starting.load(Ordering::Acquire) {
                return Err(ToolError::ExecutionFailed(format!(
                    "tool '{tool}' of plugin '{}' is not ready: the plugin's instance for this \
                     session was still starting after the call's time limit of {:?}; its start \
                     code is slow (it is stopped at the same limit); try again later",
                    image.name, limits.call_timeout
                )));
            }
            return Err(ToolError::ExecutionFailed(format!(
                "tool '{tool}' of plugin '{}' is busy: this session's instance of the plugin \
                 was running other calls for the whole time limit of {:?}; try again later",
                image.name, limits.call_timeout
            )));
        };
        // Time spent behind other calls: a call that then runs out of time is not the
        // plugin's failure (overlapping calls must not be a way to disable a slow plugin).
        let queued = arrived.elapsed();
        let mut call = CallInProgress {
            slot,
            plugin: &image.name,
            running: None,
        };
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
        call.running = Some(tool);
        if call.slot.live.is_none() {
            let started = self.start(&mut call.slot, deadline).await;
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
        live.store.data_mut().begin_call(deadline, Some(tool_name));
        live.store.set_epoch_deadline(1);
        if live.metered {
            refuel(&mut live.store, limits);
        }
        let outcome = within(
            deadline + TIMEOUT_GRACE,
            live.bindings
                .call_execute(&mut live.store, tool, input_json),
        )
        .await;
        let stderr = live.store.data_mut().end_call();
        call.running = None;
        let (failure, timed_out) = match outcome {
            Ok(Ok(result)) => {
                call.slot.consecutive_failures = 0;
                return checked_output(image, limits, tool, output_schema, result);
            }
            Ok(Err(error)) => (
                describe(limits, &error),
                error.downcast_ref::<TimedOut>().is_some(),
            ),
            Err(_) => (describe(limits, &wasmtime::Error::new(TimedOut)), true),
        };
        // A trap leaves the store unusable: drop it, and start afresh on the next call.
        call.slot.live = None;
        let failure = if timed_out && queued >= QUEUED_LONG_ENOUGH {
            format!("{failure}, {queued:?} of it waiting for other calls to finish")
        } else {
            call.slot.consecutive_failures += 1;
            failure
        };
        let message = with_stderr(
            format!(
                "tool '{tool}' of plugin '{}' failed: {failure}; the instance was restarted \
                 and its state was lost",
                image.name
            ),
            &stderr,
        );
        tracing::warn!(plugin = %image.name, tool, "{message}");
        Err(ToolError::Internal(message))
    }
}

/// A finished call's result, within the output limit: an output over it is refused, an error
/// text over it is cut (the plugin's errors are bounded like its outputs). A tool with an
/// output schema must return JSON matching it: a mismatch is the plugin breaking its own
/// contract, an internal error naming the tool.
fn checked_output(
    image: &PluginImage,
    limits: &Limits,
    tool: &str,
    output_schema: Option<&CheckedSchema>,
    result: Result<String, ToolError>,
) -> Result<String, ToolError> {
    let cap = limits.max_output_bytes;
    match result {
        Ok(output) if output.len() > cap => Err(ToolError::ExecutionFailed(format!(
            "tool '{tool}' of plugin '{}' returned {} bytes, over the output limit of {cap} \
             bytes",
            image.name,
            output.len(),
        ))),
        Ok(output) => {
            match output_schema.map(|schema| super::validate::check_output(schema, &output)) {
                Some(Err(problem)) => {
                    let message = format!(
                        "tool '{tool}' of plugin '{}' broke its own contract: {problem}; this is a \
                     bug in the plugin",
                        image.name
                    );
                    tracing::warn!(plugin = %image.name, tool, "{message}");
                    Err(ToolError::Internal(message))
                }
                _ => Ok(output),
            }
        }
        Err(error) => Err(match error {
            ToolError::InvalidArgument(text) => ToolError::InvalidArgument(cut(text, cap)),
            ToolError::ExecutionFailed(text) => ToolError::ExecutionFailed(cut(text, cap)),
            ToolError::Internal(text) => ToolError::Internal(cut(text, cap)),
        }),
    }
}

/// `text` cut to at most `cap` bytes (at a character boundary), saying how much was cut.
fn cut(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    text.truncate(text.floor_char_boundary(cap));
    text.push_str(&format!(
        " … [cut: the plugin's error text was {total} bytes, over the output limit of {cap}]"
    ));
    text
}

/// Checks a call's input before any plugin code runs: its size, JSON syntax, and the tool's
/// input schema.
pub(crate) fn check_input(
    limits: &Limits,
    validator: &CheckedSchema,
    tool: &str,
    input_json: &str,
) -> Result<(), ToolError> {
    if input_json.len() > limits.max_input_bytes {
        return Err(ToolError::InvalidArgument(format!(
            "the input of tool '{tool}' is {} bytes, over the limit of {} bytes",
            input_json.len(),
            limits.max_input_bytes
        )));
    }
    let input = super::input::parse(input_json).map_err(|error| {
        ToolError::InvalidArgument(format!(
            "the input of tool '{tool}' is not valid JSON: {error}"
        ))
    })?;
    if let Some((path, problem)) = input.key_problem() {
        return Err(ToolError::InvalidArgument(format!(
            "the input of tool '{tool}' {problem} in the object at {path}; give each key once, \
             spelled one way"
        )));
    }
    super::validate::check_schema(validator, tool, &input).map_err(ToolError::InvalidArgument)
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
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
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
}

impl PluginTool {
    /// The definition's factory: start the session's instance, return the meta and the tool.
    pub(crate) fn create(
        session: &Arc<SessionOwner>,
        meta: &ToolMeta,
        validator: &Arc<CheckedSchema>,
        output_schema: Option<Arc<CheckedSchema>>,
    ) -> (ToolMeta, Arc<dyn Tool>) {
        session.0.start_now();
        let tool = PluginTool {
            session: Arc::clone(session),
            name: Arc::from(meta.name.as_str()),
            validator: Arc::clone(validator),
            output_schema,
        };
        (meta.clone(), Arc::new(tool))
    }
}

fn new_store(image: &StartSpec<'_>) -> Result<Store<PluginState>, StartFailure> {
    let plugin_failure = |reason| StartFailure {
        reason,
        host_capacity: false,
    };
    let policy = &image.policy;
    let limits = &policy.limits;
    // Deny by default: no arguments, environment, directories or sockets; stdin is closed;
    // stdout and stderr go to bounded buffers drained to the log.
    let output = PluginOutput::default();
    let mut wasi = WasiCtx::builder();
    wasi.stdout(output.stdout.clone())
        .stderr(output.stderr.clone())
        .max_random_size(MAX_RANDOM_BYTES);
    for (name, value) in &policy.env {
        wasi.env(name, value);
    }
    let mut descriptors = InstanceDescriptors::new(image.descriptors, image.name);
    for (dir, held) in policy.dirs.iter().zip(image.granted_dirs.iter()) {
        // The grant was resolved when the plugin was loaded; a link put in its path since
        // (by this or another plugin that may write a directory above it) would move it.
        match dir.host.canonicalize() {
            Ok(now) if now == dir.host => {}
            Ok(now) => {
                return Err(plugin_failure(format!(
                    "the granted directory {} now leads to {} (a link was put in its path); \
                     refusing to open it",
                    dir.host.display(),
                    now.display()
                )));
            }
            Err(e) => {
                return Err(plugin_failure(format!(
                    "cannot open the granted directory {}: {e}",
                    dir.host.display()
                )));
            }
        }
        // Each granted directory is held open by the instance for its whole life.
        if let Err(why) = descriptors.reserve() {
            return Err(StartFailure {
                reason: why.describe(image.name, image.descriptors.max()),
                host_capacity: why == Refused::Host,
            });
        }
        let perms = if dir.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        // The directory opened at load (through its descriptor where the system allows),
        // not whatever the path leads to by now.
        wasi.preopened_dir(held.path(), &dir.guest, perms)
            .map_err(|e| {
                plugin_failure(format!(
                    "cannot open the granted directory {}: {e}",
                    dir.host.display()
                ))
            })?;
    }
    let wasi = wasi.build();
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_HOST_RESOURCES);
    let state = PluginState {
        wasi,
        output,
        table,
        #[cfg(feature = "wasi-http")]
        http: WasiHttpCtx::new(),
        #[cfg(feature = "wasi-http")]
        http_gate: HttpGate::new(image.name, policy),
        limiter: InstanceLimiter::new(limits.memory_bytes),
        descriptors,
        reports: CallReports::new(image.name),
        deadline: Instant::now() + limits.call_timeout,
    };
    let mut store = Store::new(image.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_hostcall_fuel(HOSTCALL_FUEL);
    refuel(&mut store, limits);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        if Instant::now() >= ctx.data().deadline {
            Err(wasmtime::Error::new(TimedOut))
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    Ok(store)
}

/// Runs `call` until it finishes or `deadline` passes.
///
/// The timer is armed only once the call waits: a call that runs to completion when first
/// polled (the common case: no host call that blocks, and shorter than one epoch tick, after
/// which wasm code yields) never touches Tokio's timer wheel. Wasm code itself is stopped at
/// the limit by the epoch deadline; this timer ends calls stuck in a host call.
async fn within<F: Future>(deadline: Instant, call: F) -> Result<F::Output, TimedOut> {
    let mut call = std::pin::pin!(call);
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = call.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let timer =
            timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        timer.as_mut().poll(cx).map(|()| Err(TimedOut))
    })
    .await
}

/// Gives a store the fuel of one call, where the engine meters fuel (unlimited for plugins
/// without a fuel limit).
fn refuel(store: &mut Store<PluginState>, limits: &Limits) {
    if store.get_fuel().is_ok() {
        let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
    }
}

/// Why an instance could not be started.
pub(crate) struct StartFailure {
    /// What went wrong, for messages.
    pub(crate) reason: String,
    /// Whether the host lacked capacity (a full instance pool): not the plugin's fault.
    pub(crate) host_capacity: bool,
}

/// Creates an instance of the plugin by `deadline`, and reads its tool list if `list_tools`.
async fn instantiate(
    image: &StartSpec<'_>,
    deadline: Instant,
    list_tools: bool,
) -> Result<(LiveInstance, Vec<PluginToolMeta>), StartFailure> {
    let limits = &image.policy.limits;
    let plugin_failure = |reason| StartFailure {
        reason,
        host_capacity: false,
    };
    let mut store = new_store(image)?;
    store.data_mut().begin_call(deadline, None);
    let started = within(deadline + TIMEOUT_GRACE, async {
        let bindings = image.pre.instantiate_async(&mut store).await?;
        let tools = if list_tools {
            bindings.call_tools(&mut store).await?
        } else {
            Vec::new()
        };
        wasmtime::Result::Ok((bindings, tools))
    })
    .await;
    let stderr = store.data_mut().end_call();
    match started {
        Ok(Ok((bindings, tools))) => {
            let metered = store.get_fuel().is_ok();
            Ok((
                LiveInstance {
                    store,
                    bindings,
                    metered,
                },
                tools,
            ))
        }
        Ok(Err(error)) => Err(StartFailure {
            host_capacity: wasmtime::Error::is::<wasmtime::PoolConcurrencyLimitError>(&error),
            reason: with_stderr(describe(limits, &error), &stderr),
        }),
        Err(_) => Err(plugin_failure(describe(
            limits,
            &wasmtime::Error::new(TimedOut),
        ))),
    }
}

/// What starting an instance needs: a loaded plugin's, or at load, before there is one, the
/// component with its limits and none of its grants (to read its tool list).
pub(crate) struct StartSpec<'a> {
    /// The plugin's name, for messages.
    pub(crate) name: &'a str,
    pub(crate) pre: &'a PluginPre<PluginState>,
    pub(crate) policy: &'a SandboxPolicy,
    /// The granted directories, opened at load, in the order of `policy.dirs`.
    pub(crate) granted_dirs: &'a [HeldDir],
    /// The host's budget of open files and directories.
    pub(crate) descriptors: &'a Arc<HostDescriptors>,
}

/// Creates a throwaway instance to read the plugin's tool list (used at load).
pub(crate) async fn read_tools(image: &StartSpec<'_>) -> Result<Vec<PluginToolMeta>, String> {
    let deadline = Instant::now() + image.policy.limits.call_timeout;
    instantiate(image, deadline, true)
        .await
        .map(|(_, tools)| tools)
        .map_err(|failure| failure.reason)
}

/// Says which limit a failed call hit, or how it trapped.
fn describe(limits: &Limits, error: &wasmtime::Error) -> String {
    if error.downcast_ref::<TimedOut>().is_some() {
        format!(
            "it ran longer than its time limit of {:?}",
            limits.call_timeout
        )
    } else if error.downcast_ref::<MemoryLimitExceeded>().is_some() {
        format!(
            "it needed more memory than its limit of {} MiB",
            limits.memory_bytes >> 20
        )
    } else if error.is::<wasmtime::PoolConcurrencyLimitError>() {
        format!(
            "the host's pool of instance slots is full ({error}); end other sessions, or give \
             the host a larger pool (`PluginHostBuilder::instance_pool`, `--pool`)"
        )
    } else if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        tracing::debug!("plugin trap: {error:?}");
        match trap {
            wasmtime::Trap::StackOverflow => {
                "it overflowed its stack (unbounded recursion?)".to_owned()
            }
            wasmtime::Trap::UnreachableCodeReached => {
                "it trapped: it panicked or aborted (wasm `unreachable` executed)".to_owned()
            }
            wasmtime::Trap::OutOfFuel => format!(
                "it used up its fuel of {} units",
                limits.fuel.unwrap_or_default()
            ),
            wasmtime::Trap::MemoryOutOfBounds => "it trapped: out-of-bounds memory access \
                                                  (a bug, or an overflow of its shadow stack)"
                .to_owned(),
            other => format!("it trapped: {other}"),
        }
    } else {
        format!("it failed: {error:?}")
    }
}
