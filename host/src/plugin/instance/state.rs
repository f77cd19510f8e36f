//! What one store holds while a plugin runs: [`PluginState`] (WASI, its output, the host
//! imports it reaches, the current call's deadline) and the [`InstanceLimiter`] that bounds its
//! memories, tables and instances.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
#[cfg(feature = "wasi-http")]
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::super::bindings::v3::llm_worker::tool::client::{
    ElicitationAnswer as WitElicitation, QuestionError as WitQuestionError, Root as WitRoot,
    SamplingAnswer as WitSamplingAnswer, SamplingRequest as WitSamplingRequest,
};
use super::super::bindings::v3::llm_worker::tool::host::{
    Level as WitLevelV3, Listing as WitListing,
};
use super::super::bindings::{
    LogLevel as WitLevel, PluginClientImports, PluginHostImports, PluginHostImportsV3,
};
use super::super::descriptors::InstanceDescriptors;
#[cfg(feature = "wasi-http")]
use super::super::http::HttpGate;
use super::super::output::PluginOutput;
use super::ask::{Kind, Questions};
use crate::events::{CallReports, Listing, LogLevel, ToolEventKind};
use crate::question;

/// The data of one store: WASI state, resource limits, and the current call's deadline.
pub(crate) struct PluginState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: InstanceLimiter,
    pub(crate) deadline: Instant,
    pub(crate) output: PluginOutput,
    pub(crate) reports: CallReports,
    /// Who answers the current call's questions to the client, and how many it asked.
    pub(crate) questions: Questions,
    /// Where to mark the lists the plugin says changed (a session's instance).
    pub(crate) changed: Option<Arc<super::ChangedLists>>,
    /// The files and directories it holds open.
    pub(crate) descriptors: InstanceDescriptors,
    #[cfg(feature = "wasi-http")]
    pub(crate) http: WasiHttpCtx,
    #[cfg(feature = "wasi-http")]
    pub(crate) http_gate: HttpGate,
    /// Its requests and responses holding a body not sent.
    #[cfg(feature = "wasi-http")]
    pub(crate) unsent_bodies: super::super::http::UnsentBodies,
    /// The plugin's name, for messages.
    pub(crate) plugin: Arc<str>,
    /// What the plugin may ask the client (each 1.0.0 call's questions start from it).
    pub(crate) client_policy: crate::policy::ClientPolicy,
    /// The plugin's limits, for messages.
    pub(crate) limits: crate::policy::Limits,
    /// Contract 1.0.0: the calls running at once (`None` for older contracts, one call at a
    /// time).
    pub(crate) calls: Option<Box<super::concurrent::Calls>>,
}

impl PluginState {
    /// A call of `tool` (or the start of the instance) begins, to end by `deadline`; what the
    /// plugin reports goes to the caller's event scope, if any.
    pub(crate) fn begin_call(
        &mut self,
        deadline: Instant,
        tool: Option<&Arc<str>>,
        scope: super::HttpScope<'_>,
    ) {
        self.deadline = deadline;
        // A reference count, not a copy of the name: this runs on every call.
        self.reports
            .begin(tool.map(Arc::clone), crate::events::current_sink());
        self.questions.begin(tool);
        #[cfg(feature = "wasi-http")]
        self.http_gate
            .begin_call(deadline, Some(Arc::clone(&self.questions.waited)), scope);
        #[cfg(not(feature = "wasi-http"))]
        let _ = scope;
    }

    /// The file system of WASI and the count of open descriptors, side by side.
    pub(crate) fn files(&mut self) -> (WasiFilesystemCtxView<'_>, &mut InstanceDescriptors) {
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
    pub(crate) fn end_call(&mut self) -> String {
        let stderr = self.output.drain_into(&mut self.reports);
        self.reports.end();
        self.questions.end();
        #[cfg(feature = "wasi-http")]
        self.http_gate.end_call();
        stderr
    }
}

#[cfg(feature = "wasi-http")]
impl WasiHttpView for PluginState {
    /// The gate of the call running now: the instance's own for an older contract (one call
    /// at a time); for 1.0.0, that call's, or the instance's closed one for code running for
    /// no call.
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let hooks = match self.calls.as_deref_mut().and_then(|calls| calls.running()) {
            Some(call) => &mut call.http_gate,
            None => &mut self.http_gate,
        };
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks,
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

/// The host interface of contract 0.3.0: 0.2.0's, plus notices of changed resources and lists.
impl PluginHostImportsV3 for PluginState {
    fn log(&mut self, level: WitLevelV3, message: String) {
        let level = match level {
            WitLevelV3::Trace => LogLevel::Trace,
            WitLevelV3::Debug => LogLevel::Debug,
            WitLevelV3::Info => LogLevel::Info,
            WitLevelV3::Warn => LogLevel::Warn,
            WitLevelV3::Error => LogLevel::Error,
        };
        self.reports.log(level, message);
    }

    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        self.reports.progress(done, total, message);
    }

    fn resource_updated(&mut self, uri: String) {
        self.reports.notice(ToolEventKind::ResourceUpdated { uri });
    }

    fn list_changed(&mut self, which: WitListing) {
        if let Some(changed) = &self.changed {
            let flag = match which {
                WitListing::Resources => &changed.resources,
                WitListing::Prompts => &changed.prompts,
            };
            flag.store(true, std::sync::atomic::Ordering::Release);
        }
        self.reports.notice(ToolEventKind::ListChanged(match which {
            WitListing::Resources => Listing::Resources,
            WitListing::Prompts => Listing::Prompts,
        }));
    }
}

/// The questions of contract 0.3.0, within the plugin's `[client]` policy. Every answer,
/// whoever gives it (an MCP client, a retry's answers, an embedder's handler), passes the
/// checks of [`question::answer`] here, before the plugin sees it.
impl PluginClientImports for PluginState {
    async fn elicit(
        &mut self,
        key: String,
        message: String,
        requested_schema: String,
    ) -> Result<WitElicitation, WitQuestionError> {
        let (form, bytes) = super::ask::elicitation(
            &message,
            &requested_schema,
            self.questions.max_question_bytes(),
        );
        let answer = self
            .questions
            .ask(
                &mut self.deadline,
                &key,
                Kind::Elicitation,
                bytes,
                |handler, asker| super::ask::elicit(handler, asker, message, form),
                question::cost::elicitation_answer,
            )
            .await?;
        Ok(answer.into())
    }

    async fn sample(
        &mut self,
        key: String,
        request: WitSamplingRequest,
    ) -> Result<WitSamplingAnswer, WitQuestionError> {
        let request: crate::tool::SamplingRequest = request.into();
        let bytes = question::cost::sampling(&request);
        let answer = self
            .questions
            .ask(
                &mut self.deadline,
                &key,
                Kind::Sampling,
                bytes,
                |handler, asker| super::ask::sample(handler, asker, request),
                question::cost::sampling_answer,
            )
            .await?;
        Ok(answer.into())
    }

    async fn roots(&mut self, key: String) -> Result<Vec<WitRoot>, WitQuestionError> {
        let roots = self
            .questions
            .ask(
                &mut self.deadline,
                &key,
                Kind::Roots,
                question::cost::roots_question(),
                super::ask::roots,
                |roots| question::cost::roots_answer(roots),
            )
            .await?;
        Ok(roots.into_iter().map(Into::into).collect())
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
    /// The host's count of what its instances use, kept up to date with this one's.
    usage: Arc<Usage>,
    pub(crate) limit: usize,
    /// Bytes of all linear memories, as last allowed.
    pub(crate) memory_bytes: usize,
    /// Bytes charged for all table elements ([`TABLE_ELEMENT_BYTES`] each).
    pub(crate) table_bytes: usize,
    /// The memory count before the growth allowed last, to restore if the system refuses it.
    pub(crate) undo_memory: Option<usize>,
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

/// What the live instances of one host use: how many there are, and the bytes of their linear
/// memories and tables as their limiters allowed them.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    pub(crate) instances: std::sync::atomic::AtomicUsize,
    pub(crate) bytes: std::sync::atomic::AtomicUsize,
}

impl InstanceLimiter {
    /// The limiter of a new instance, counted in `usage` until it is dropped.
    pub(crate) fn new(limit: usize, usage: &Arc<Usage>) -> Self {
        usage
            .instances
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            usage: Arc::clone(usage),
            limit,
            memory_bytes: 0,
            table_bytes: 0,
            undo_memory: None,
        }
    }

    /// Tells the host's count that this instance's bytes went from `before` to `after`.
    fn recount(&self, before: usize, after: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        if after >= before {
            self.usage.bytes.fetch_add(after - before, Relaxed);
        } else {
            self.usage.bytes.fetch_sub(before - after, Relaxed);
        }
    }

    /// The new total of a resource growing from `current` to `desired` bytes, if it keeps
    /// memory plus tables within the limit.
    pub(crate) fn grown(
        &self,
        used: usize,
        other: usize,
        current: usize,
        desired: usize,
    ) -> Option<usize> {
        if desired > self.limit {
            return None;
        }
        let total = used.checked_sub(current.min(used))?.checked_add(desired)?;
        (total.checked_add(other)? <= self.limit).then_some(total)
    }
}

/// Most host resources (streams, pollables, files, HTTP requests …) one instance may hold at
/// once. Each costs host memory the plugin's memory limit does not see, so keep it low.
pub(crate) const MAX_HOST_RESOURCES: usize = 1_000;

/// Most bytes of header fields one `fields` resource a plugin builds may hold (as wasmtime
/// counts them: names, values and their entries); past it the plugin traps. A plugin may hold
/// up to [`MAX_HOST_RESOURCES`] of them, in host memory the memory limit does not see, so
/// wasmtime's default (128 KiB) let one instance hold 128 MiB. Headers received are not
/// counted against it.
#[cfg(feature = "wasi-http")]
pub(crate) const MAX_FIELDS_BYTES: usize = 16 << 10;

/// Most component-model handles live at once in one instance's store: the plugin's own
/// resources (`resource.new`), futures, streams and the host's resources it holds. A guest
/// makes them without host code in the loop, and each takes host memory the memory limit does
/// not see (wasmtime's default is 100,000 per store); the host's own resources stay capped at
/// [`MAX_HOST_RESOURCES`] within this.
pub(crate) const MAX_COMPONENT_HANDLES: usize = 4_096;

/// Most bytes one host call may take from the guest (DoS mitigation; wasmtime's default is
/// 128 MiB), unless the output limit needs more ([`hostcall_fuel`]).
pub(crate) const HOSTCALL_FUEL: usize = 4 << 20;

/// What one copy out of the plugin may take under `limits`: wasmtime holds every lift to it,
/// an export's result too, so an output limit above a third of [`HOSTCALL_FUEL`] would trap
/// the instance for a result within the limit instead of refusing one over it. Three times
/// the output limit covers a result of many small blocks (wasmtime counts each lifted block
/// at its size on the host, some 140 bytes, the output limit 64) or messages. It is one limit
/// for every copy, a host call's arguments too: [`Limits::MAX_OUTPUT_BYTES`](crate::Limits)
/// bounds it at 48 MiB.
pub(crate) fn hostcall_fuel(limits: &crate::Limits) -> usize {
    HOSTCALL_FUEL.max(limits.max_output_bytes.saturating_mul(3))
}

/// Most random bytes one call to `wasi:random` may ask for.
pub(crate) const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// A call went past its time limit.
#[derive(Debug, thiserror::Error)]
#[error("timed out")]
pub(crate) struct TimedOut;

/// An instance asked for more memory than its limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded")]
pub(crate) struct MemoryLimitExceeded;

impl Drop for InstanceLimiter {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.usage.instances.fetch_sub(1, Relaxed);
        self.usage
            .bytes
            .fetch_sub(self.memory_bytes + self.table_bytes, Relaxed);
    }
}

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
        self.recount(self.memory_bytes, total);
        self.memory_bytes = total;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        let refused_by_the_system = error.chain().any(|cause| cause.is::<std::io::Error>());
        if let Some(previous) = self.undo_memory.take()
            && refused_by_the_system
        {
            self.recount(self.memory_bytes, previous);
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
        self.recount(self.table_bytes, total);
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
