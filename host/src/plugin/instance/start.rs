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

use super::super::bindings::{PluginPre, PluginToolMeta, Request, Response};
use super::super::descriptors::{HeldDir, HostDescriptors, InstanceDescriptors, Refused};
#[cfg(feature = "wasi-http")]
use super::super::http::HttpGate;
use super::super::output::PluginOutput;
use crate::events::CallReports;
use crate::policy::{Limits, SandboxPolicy};
use crate::tool::{PromptMeta, ResourceMeta, ResourceTemplate};

use super::state::{
    InstanceLimiter, MAX_COMPONENT_HANDLES, MAX_HOST_RESOURCES, MAX_RANDOM_BYTES,
    MemoryLimitExceeded, PluginState, TimedOut,
};
use super::{LiveInstance, TIMEOUT_GRACE, with_stderr};

pub(super) fn new_store(image: &StartSpec<'_>) -> Result<Store<PluginState>, StartFailure> {
    let plugin_failure = |reason| StartFailure {
        reason,
        cause: StartCause::Plugin,
    };
    // A granted directory changed on the host (replaced, a link put in its path, gone): the
    // host's business, not counted against the plugin (whose instances, in every session,
    // another plugin that may write above the directory could otherwise get disabled).
    let host_failure = |reason| StartFailure {
        reason,
        cause: StartCause::HostFiles,
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
        // The host's paths go to its log; the failure (which a client may read) names the
        // directory as the plugin sees it.
        match dir.host.canonicalize() {
            Ok(now) if now == dir.host && !held.is_at(&dir.host) => {
                tracing::warn!(
                    plugin = image.name,
                    "the granted directory {} is not the directory it was when the plugin \
                     was loaded (moved away or removed, and another made in its place); \
                     refusing to open the old one (with --watch the plugin is loaded again \
                     with the new one; otherwise restart)",
                    dir.host.display()
                );
                return Err(host_failure(format!(
                    "its granted directory {} was replaced on the host since the plugin was \
                     loaded; refusing to open the old one (the host's log says more)",
                    dir.guest
                )));
            }
            Ok(now) if now == dir.host => {}
            Ok(now) => {
                tracing::warn!(
                    plugin = image.name,
                    "the granted directory {} now leads to {} (a link was put in its path); \
                     refusing to open it",
                    dir.host.display(),
                    now.display()
                );
                return Err(host_failure(format!(
                    "its granted directory {} now leads elsewhere on the host (a link was put \
                     in its path); refusing to open it (the host's log says where)",
                    dir.guest
                )));
            }
            Err(e) => {
                tracing::warn!(
                    plugin = image.name,
                    "cannot open the granted directory {}: {e}",
                    dir.host.display()
                );
                return Err(host_failure(format!(
                    "cannot open its granted directory {}: {} (the host's log says where)",
                    dir.guest,
                    e.kind()
                )));
            }
        }
        // Each granted directory is held open by the instance for its whole life.
        if let Err(why) = descriptors.reserve() {
            return Err(StartFailure {
                reason: why.describe(image.name, image.descriptors.max()),
                cause: if why == Refused::Host {
                    StartCause::HostCapacity
                } else {
                    StartCause::Plugin
                },
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
    let plugin: Arc<str> = Arc::from(image.name);
    let state = PluginState {
        wasi,
        output,
        table,
        #[cfg(feature = "wasi-http")]
        http: {
            let mut http = WasiHttpCtx::new();
            http.set_field_size_limit(super::state::MAX_FIELDS_BYTES);
            http
        },
        #[cfg(feature = "wasi-http")]
        http_gate: HttpGate::new(image.name, policy)
            .counting(image.descriptors)
            .looking_up(image.lookups),
        #[cfg(feature = "wasi-http")]
        unsent_bodies: Default::default(),
        limiter: InstanceLimiter::new(limits.memory_bytes, &image.descriptors.usage),
        descriptors,
        reports: CallReports::new(&plugin),
        questions: super::ask::Questions::new(&plugin, &policy.client),
        changed: image.changed.map(Arc::clone),
        deadline: Instant::now() + limits.call_timeout,
        plugin,
        client_policy: policy.client.clone(),
        limits: limits.clone(),
        calls: None,
    };
    let mut store = Store::new(image.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_hostcall_fuel(super::state::hostcall_fuel(limits));
    store.set_max_component_handles(MAX_COMPONENT_HANDLES);
    refuel(&mut store, limits);
    store.set_epoch_deadline(1);
    if matches!(image.pre, PluginPre::V10(_)) {
        let (calls, hook) = super::concurrent::Calls::new();
        store.data_mut().calls = Some(Box::new(calls));
        store.task_group_hook(hook);
    }
    store.epoch_deadline_callback(|mut ctx| {
        if !ctx.data_mut().in_time() {
            ctx.data_mut().note_timed_out();
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

/// How far ahead [`within_moving`] sets its timer while a question is open (its deadline then
/// moves on with the clock); the deadline is checked again whenever the call wakes.
const REARM_WHILE_ASKING: std::time::Duration = std::time::Duration::from_millis(50);

/// Like [`within`], for a call whose deadline moves on by the time it `waited` for answers
/// from the client.
pub(crate) async fn within_moving<F: Future>(
    deadline: Instant,
    waited: &super::ask::Waited,
    call: F,
) -> Result<F::Output, TimedOut> {
    let mut call = std::pin::pin!(call);
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        loop {
            if let Poll::Ready(output) = call.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            let mut now_due = deadline + waited.get();
            // While a question is open the deadline moves on as fast as the clock: the timer
            // is set a while ahead rather than at an instant that is always about to pass.
            if waited.asking() {
                now_due = now_due.max(Instant::now() + REARM_WHILE_ASKING);
            }
            let timer =
                timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(now_due.into())));
            if timer.deadline() < now_due.into() {
                timer.as_mut().reset(now_due.into());
            }
            match timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // Fired: unless the call waited for an answer meanwhile, it is out of time.
                Poll::Ready(()) if deadline + waited.get() <= Instant::now() => {
                    return Poll::Ready(Err(TimedOut));
                }
                Poll::Ready(()) => {}
            }
        }
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
    /// Whose it was.
    pub(crate) cause: StartCause,
}

/// Why an instance could not be started, as far as whose fault it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartCause {
    /// The plugin's: counted against it.
    Plugin,
    /// The host lacked capacity (a full instance pool): not counted; trying later may do.
    HostCapacity,
    /// A granted directory changed on the host since the load: not counted.
    HostFiles,
}

impl StartFailure {
    /// Whether it counts against the plugin (towards `max_consecutive_failures`).
    pub(crate) fn counts_against_plugin(&self) -> bool {
        self.cause == StartCause::Plugin
    }
}

/// What a plugin offers, read at load: its tools and, from contract 0.3.0, its resources,
/// resource templates and prompts.
#[derive(Default)]
pub(crate) struct PluginListing {
    pub(crate) tools: Vec<PluginToolMeta>,
    pub(crate) resources: Vec<ResourceMeta>,
    pub(crate) templates: Vec<ResourceTemplate>,
    pub(crate) prompts: Vec<PromptMeta>,
}

/// Creates an instance of the plugin by `deadline`, and reads what it offers if `list`.
pub(super) async fn instantiate(
    image: &StartSpec<'_>,
    deadline: Instant,
    list_tools: bool,
) -> Result<(LiveInstance, PluginListing), StartFailure> {
    let limits = &image.policy.limits;
    let plugin_failure = |reason| StartFailure {
        reason,
        cause: StartCause::Plugin,
    };
    let mut store = new_store(image)?;
    store
        .data_mut()
        .begin_call(deadline, None, super::HttpScope::Start);
    let started = within(deadline + TIMEOUT_GRACE, async {
        let bindings = image.pre.instantiate_async(&mut store).await?;
        let mut listing = PluginListing::default();
        if list_tools {
            listing.tools = bindings.call_tools(&mut store).await?;
            listing.templates = bindings.call_resource_templates(&mut store).await?;
            for request in [Request::Resources, Request::Prompts] {
                match bindings.call_request(&mut store, &request).await? {
                    Ok(Response::Resources(resources)) => listing.resources = resources,
                    Ok(Response::Prompts(prompts)) => listing.prompts = prompts,
                    Ok(_) => {}
                    Err(error) => {
                        return Err(wasmtime::Error::msg(format!(
                            "{} failed: {error}",
                            request.label()
                        )));
                    }
                }
            }
        }
        wasmtime::Result::Ok((bindings, listing))
    })
    .await;
    let stderr = store.data_mut().end_call();
    match started {
        Ok(Ok((bindings, tools))) => {
            let metered = store.get_fuel().is_ok();
            let waited = std::sync::Arc::clone(&store.data().questions.waited);
            Ok((
                LiveInstance {
                    store,
                    bindings,
                    metered,
                    waited,
                },
                tools,
            ))
        }
        Ok(Err(error)) => Err(StartFailure {
            cause: if wasmtime::Error::is::<wasmtime::PoolConcurrencyLimitError>(&error) {
                StartCause::HostCapacity
            } else {
                StartCause::Plugin
            },
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
    /// The plugin's places for name lookups (all its instances').
    #[cfg_attr(not(feature = "wasi-http"), allow(dead_code))]
    pub(crate) lookups: &'a Arc<tokio::sync::Semaphore>,
    /// Where the instance says its lists changed (a session's; none at load).
    pub(crate) changed: Option<&'a Arc<super::ChangedLists>>,
}

/// Creates a throwaway instance to read what the plugin offers (used at load).
pub(crate) async fn read_tools(image: &StartSpec<'_>) -> Result<PluginListing, StartFailure> {
    let deadline = Instant::now() + image.policy.limits.call_timeout;
    instantiate(image, deadline, true)
        .await
        .map(|(_, tools)| tools)
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
        // What failed and why, short, without wasmtime's backtrace: it names the plugin's
        // functions as the plugin's own name section spells them (any text, of any length),
        // which a report would print. The whole at debug level.
        tracing::debug!("plugin failure: {error:?}");
        // (Escaped where it is shown: a report on one line, a log as its lines.)
        let mut causes: Vec<String> = error
            .chain()
            .map(ToString::to_string)
            .filter(|text| !text.starts_with("error while executing at wasm backtrace"))
            .collect();
        causes.dedup();
        let cause = causes.join(": ");
        let shown: String = cause.chars().take(MAX_CAUSE_CHARS).collect();
        let cut = if shown.len() < cause.len() { "…" } else { "" };
        format!("it failed: {shown}{cut}")
    }
}

/// The most characters of a failure's cause a message quotes.
const MAX_CAUSE_CHARS: usize = 400;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// While a question is open a call's deadline moves on with the clock: the timer that
    /// watches it is set a while ahead, not at an instant always about to pass (which woke the
    /// caller about once a millisecond for as long as the question waited).
    #[tokio::test]
    async fn a_call_waiting_for_an_answer_is_not_woken_every_millisecond() {
        let waited = super::super::ask::Waited::default();
        waited.begin();
        let polls = AtomicUsize::new(0);
        // A call that never ends, counting the times it is polled (each a wake-up of its
        // caller's timer).
        let call = std::future::poll_fn(|_| {
            polls.fetch_add(1, Ordering::Relaxed);
            Poll::<()>::Pending
        });
        let deadline = Instant::now();
        let watched = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            within_moving(deadline, &waited, call),
        )
        .await;
        assert!(watched.is_err(), "the call cannot time out while it asks");
        let polls = polls.load(Ordering::Relaxed);
        assert!(polls < 30, "polled {polls} times in 300 ms");
    }
}
