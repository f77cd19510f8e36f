//! A plugin session: one live wasm instance serving the calls of one registration, one call at
//! a time, restarted after a trap and disabled after repeated failures.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use async_trait::async_trait;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginImage;
use super::bindings::{ToolPlugin, WitToolMeta};
use super::http::HttpGate;
use super::input::InputValidator;
use super::output::{PluginOutput, stderr_tail};
use crate::policy::Limits;
use crate::tool::{Tool, ToolError, ToolMeta};

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
    http: WasiHttpCtx,
    http_gate: HttpGate,
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_gate,
        }
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

/// Bounds the memory of an instance: all its linear memories together.
struct InstanceLimiter {
    memory_limit: usize,
    memory_used: usize,
}

/// Most host resources (streams, pollables, files …) one instance may hold at once.
const MAX_HOST_RESOURCES: usize = 10_000;

/// Most bytes one host call may take from the guest (DoS mitigation; wasmtime's default is
/// 128 MiB).
const HOSTCALL_FUEL: usize = 4 << 20;

/// Most random bytes one call to `wasi:random` may ask for.
const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Largest number of table elements of one instance.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

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
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_used - current.min(self.memory_used) + desired;
        if total > self.memory_limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded));
        }
        self.memory_used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        100
    }

    fn tables(&self) -> usize {
        100
    }

    fn memories(&self) -> usize {
        100
    }
}

/// A live instance and its store.
struct LiveInstance {
    store: Store<PluginState>,
    bindings: ToolPlugin,
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
}

/// The tools of one plugin registered together: they share one instance, as the methods of
/// one `impl` share `self`.
pub(crate) struct PluginSession {
    image: Arc<PluginImage>,
    slot: futures::lock::Mutex<Slot>,
}

impl PluginSession {
    pub(crate) fn new(image: Arc<PluginImage>) -> Self {
        Self {
            image,
            slot: futures::lock::Mutex::new(Slot::default()),
        }
    }

    /// Creates the live instance now unless it exists (the factory's job at registration).
    /// A failure is logged and counted; the next call tries again and reports it.
    pub(crate) fn start_now(&self) {
        super::blocking::block_on(async {
            let mut slot = self.slot.lock().await;
            if slot.live.is_none()
                && let Err(error) = self.start(&mut slot).await
            {
                tracing::warn!(plugin = %self.image.name, "{error}");
            }
        });
    }

    /// Creates a live instance and checks that it lists the tools validated at load.
    async fn start(&self, slot: &mut Slot) -> Result<(), ToolError> {
        match instantiate(&self.image).await {
            Ok((live, tools)) if self.image.same_tools(&tools) => {
                slot.live = Some(live);
                Ok(())
            }
            Ok(_) => {
                slot.consecutive_failures += 1;
                Err(ToolError::Internal(format!(
                    "plugin '{}' listed other tools than when it was loaded; a plugin must \
                     list the same tools in every instance",
                    self.image.name
                )))
            }
            Err(reason) => {
                slot.consecutive_failures += 1;
                Err(ToolError::Internal(format!(
                    "plugin '{}' failed while starting: {reason}",
                    self.image.name
                )))
            }
        }
    }

    async fn call(
        &self,
        tool: &str,
        validator: &InputValidator,
        input_json: &str,
    ) -> Result<String, ToolError> {
        let image = &self.image;
        let limits = &image.policy.limits;
        check_input(limits, validator, tool, input_json)?;

        let mut slot = self.slot.lock().await;
        if slot.consecutive_failures >= limits.max_consecutive_failures {
            return Err(ToolError::Internal(format!(
                "plugin '{}' is disabled for this session after {} consecutive failures; \
                 check the log for their causes, fix the plugin or its limits, and start a \
                 new session",
                image.name, slot.consecutive_failures
            )));
        }
        if slot.live.is_none() {
            self.start(&mut slot).await?;
        }
        let Some(live) = slot.live.as_mut() else {
            return Err(ToolError::Internal(format!(
                "plugin '{}' has no running instance",
                image.name
            )));
        };
        let deadline = Instant::now() + limits.call_timeout;
        live.store.data_mut().deadline = deadline;
        if live.metered {
            refuel(&mut live.store, limits);
        }
        let outcome = within(
            deadline + TIMEOUT_GRACE,
            live.bindings
                .call_execute(&mut live.store, tool, input_json),
        )
        .await;
        let stderr = live.store.data().output.flush_to_log(&image.name);
        let failure = match outcome {
            Ok(Ok(result)) => {
                slot.consecutive_failures = 0;
                let output = result.map_err(ToolError::from)?;
                if output.len() > limits.max_output_bytes {
                    return Err(ToolError::ExecutionFailed(format!(
                        "tool '{tool}' of plugin '{}' returned {} bytes, over the output \
                         limit of {} bytes",
                        image.name,
                        output.len(),
                        limits.max_output_bytes
                    )));
                }
                return Ok(output);
            }
            Ok(Err(error)) => describe(limits, &error),
            Err(_) => describe(limits, &wasmtime::Error::new(TimedOut)),
        };
        // A trap leaves the store unusable: drop it, and start afresh on the next call.
        slot.live = None;
        slot.consecutive_failures += 1;
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

/// Checks a call's input before any plugin code runs: its size, JSON syntax, and the tool's
/// input schema.
pub(crate) fn check_input(
    limits: &Limits,
    validator: &InputValidator,
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
    super::validate::check_schema(validator, tool, &input).map_err(ToolError::InvalidArgument)
}

/// One tool of a plugin session, as a [`Tool`].
pub(crate) struct PluginTool {
    session: Arc<PluginSession>,
    name: String,
    validator: Arc<InputValidator>,
}

#[async_trait]
impl Tool for PluginTool {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        self.session
            .call(&self.name, &self.validator, input_json)
            .await
    }
}

impl PluginTool {
    /// The definition's factory: start the session's instance, return the meta and the tool.
    pub(crate) fn create(
        session: &Arc<PluginSession>,
        meta: &ToolMeta,
        validator: &Arc<InputValidator>,
    ) -> (ToolMeta, Arc<dyn Tool>) {
        session.start_now();
        let tool = PluginTool {
            session: Arc::clone(session),
            name: meta.name.clone(),
            validator: Arc::clone(validator),
        };
        (meta.clone(), Arc::new(tool))
    }
}

fn new_store(image: &PluginImage) -> Result<Store<PluginState>, String> {
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
    for dir in &policy.dirs {
        let perms = if dir.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        wasi.preopened_dir(&dir.host, &dir.guest, perms)
            .map_err(|e| {
                format!(
                    "cannot open the granted directory {}: {e}",
                    dir.host.display()
                )
            })?;
    }
    let wasi = wasi.build();
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_HOST_RESOURCES);
    let state = PluginState {
        wasi,
        output,
        table,
        http: WasiHttpCtx::new(),
        http_gate: HttpGate {
            plugin: Arc::from(image.name.as_str()),
            grants: Arc::from(policy.http.as_slice()),
        },
        limiter: InstanceLimiter {
            memory_limit: limits.memory_bytes,
            memory_used: 0,
        },
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

/// Creates an instance of the plugin and reads its tool list, within the time limit.
/// The error describes what went wrong.
async fn instantiate(image: &PluginImage) -> Result<(LiveInstance, Vec<WitToolMeta>), String> {
    let limits = &image.policy.limits;
    let mut store = new_store(image)?;
    let output = store.data().output.clone();
    let started = within(
        Instant::now() + limits.call_timeout + TIMEOUT_GRACE,
        async {
            let bindings = image.pre.instantiate_async(&mut store).await?;
            let tools = bindings.call_tools(&mut store).await?;
            wasmtime::Result::Ok((bindings, tools))
        },
    )
    .await;
    let stderr = output.flush_to_log(&image.name);
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
        Ok(Err(error)) => Err(with_stderr(describe(limits, &error), &stderr)),
        Err(_) => Err(describe(limits, &wasmtime::Error::new(TimedOut))),
    }
}

/// Creates a throwaway instance to read the plugin's tool list (used at load).
pub(crate) async fn read_tools(image: &PluginImage) -> Result<Vec<WitToolMeta>, String> {
    instantiate(image).await.map(|(_, tools)| tools)
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
