//! Starting an instance: a store built from the policy (deny by default: no arguments,
//! environment, directories or sockets but those granted), its time and fuel limits armed, the
//! component instantiated within its deadline, and a failure described by the limit it hit.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx};
#[cfg(feature = "wasi-http")]
use wasmtime_wasi_http::WasiHttpCtx;

use super::super::bindings::{PluginPre, PluginToolMeta};
use super::super::descriptors::{HeldDir, HostDescriptors, InstanceDescriptors, Refused};
#[cfg(feature = "wasi-http")]
use super::super::http::HttpGate;
use super::super::output::PluginOutput;
use crate::events::CallReports;
use crate::policy::{Limits, SandboxPolicy};

use super::state::{
    HOSTCALL_FUEL, InstanceLimiter, MAX_HOST_RESOURCES, MAX_RANDOM_BYTES, MemoryLimitExceeded,
    PluginState, TimedOut,
};
use super::{LiveInstance, TIMEOUT_GRACE, with_stderr};

pub(super) fn new_store(image: &StartSpec<'_>) -> Result<Store<PluginState>, StartFailure> {
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
pub(super) async fn within<F: Future>(deadline: Instant, call: F) -> Result<F::Output, TimedOut> {
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
pub(super) fn refuel(store: &mut Store<PluginState>, limits: &Limits) {
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
pub(super) async fn instantiate(
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
pub(super) fn describe(limits: &Limits, error: &wasmtime::Error) -> String {
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
