//! [`PluginHost`] and its builder: the two wasmtime engines plugins are compiled for (one
//! without the component model's concurrency for contracts 0.1.0–0.3.0, one with it for
//! 1.0.0), each with two linkers (WASI alone, and WASI with `wasi:http` for plugins granted
//! HTTP), the thread that advances their epochs (time limits), the compiled cache, the pools of
//! instance slots and the host-wide budget of open files. Loading is in `load.rs` and `dir.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine};

use super::instance::{self, PluginState};
use super::{PluginError, bindings, cache, descriptors};
#[cfg(not(feature = "wasi-http"))]
use crate::policy::PolicyError;
use crate::policy::{Limits, SandboxPolicy};

/// How often the epoch advances: the granularity of time limits, and how often a running
/// plugin yields to the async runtime.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Largest plugin file accepted by default.
const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

/// Advances the engines' epochs on a timer, for time limits and cooperative yielding.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engines: [&Engine; 2]) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let engines = engines.map(Engine::weak);
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("llm-worker-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    for engine in &engines {
                        match engine.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => return,
                        }
                    }
                }
            })?;
        Ok(Self { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// An engine and its two linkers.
pub(super) struct Runtime {
    pub(super) engine: Engine,
    /// WASI without `wasi:http`.
    linker: Linker<PluginState>,
    /// WASI with `wasi:http`, for plugins granted HTTP.
    #[cfg(feature = "wasi-http")]
    http_linker: Linker<PluginState>,
}

impl Runtime {
    /// An engine of `config` with the concurrency support `concurrent` says, and its linkers:
    /// WASI 0.2 and the host's imports of contracts 0.2.0 and 0.3.0 in both; with
    /// `concurrent`, WASI 0.3's clocks and random, `wasi:http@0.3.0` and contract 1.0.0's
    /// imports too, which need the engine's concurrency support.
    fn new(mut config: Config, concurrent: bool) -> wasmtime::Result<Self> {
        config.concurrency_support(concurrent);
        let engine = Engine::new(&config)?;
        // Two linkers: WASI alone, for plugins without HTTP grants (they get no `wasi:http`
        // imports at all), and WASI with `wasi:http`, for plugins whose policy grants it.
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        if concurrent {
            // WASI 0.3's clocks and random, for contract 1.0.0 plugins that wait on timers:
            // their file system, sockets and command line stay WASI 0.2's (as the standard
            // library of a `wasm32-wasip2` program uses them), under the same policy.
            wasmtime_wasi::p3::clocks::add_to_linker(&mut linker)?;
            wasmtime_wasi::p3::random::add_to_linker(&mut linker)?;
        }
        // Opening and closing descriptors counted per instance and host-wide.
        descriptors::add_to_linker(&mut linker)?;
        bindings::add_host_imports(&mut linker, concurrent)?;
        #[cfg(feature = "wasi-http")]
        let http_linker = {
            let mut http_linker = linker.clone();
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut http_linker)?;
            if concurrent {
                // `wasi:http@0.3.0` for contract 1.0.0, through the same gate.
                wasmtime_wasi_http::p3::add_to_linker(&mut http_linker)?;
            }
            // A request's authority, method and scheme bounded in size.
            super::http::bound_request_setters(&mut http_linker, concurrent)?;
            http_linker
        };
        Ok(Self {
            engine,
            linker,
            #[cfg(feature = "wasi-http")]
            http_linker,
        })
    }
}

pub(super) struct HostInner {
    /// Contracts 0.1.0–0.3.0, which run one call at a time: an engine without the component
    /// model's concurrency support, whose bookkeeping would cost each call about a
    /// microsecond (BENCHMARKS.md).
    pub(super) serial: Runtime,
    /// Contract 1.0.0 (one instance serves several calls at once), and any component that
    /// needs the component model's concurrency to compile.
    pub(super) concurrent: Runtime,
    pub(super) limits: Limits,
    pub(super) cache: Option<cache::CompileCache>,
    pub(super) max_file_bytes: u64,
    /// Files and directories no plugin may be granted, nor a directory holding them.
    pub(super) protected: Vec<PathBuf>,
    /// The open files and directories of all instances together.
    pub(super) descriptors: Arc<descriptors::HostDescriptors>,
    _ticker: EpochTicker,
}

/// Loads tool plugins: the wasmtime engines (one for contracts 0.1.0–0.3.0, one with the
/// component model's concurrency for 1.0.0), their WASI linkers, and the resource limits given
/// to every instance. Cheap to clone.
#[derive(Clone)]
pub struct PluginHost {
    pub(super) inner: Arc<HostInner>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

/// What the live instances of a [`PluginHost`] use ([`PluginHost::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HostUsage {
    /// Live instances (of every session and plugin, load-time ones included).
    pub instances: usize,
    /// Bytes of their linear memories and tables, as their memory limits count them.
    pub memory_bytes: usize,
}

/// Settings of a [`PluginHost`]: start from [`PluginHost::builder`].
///
/// ```no_run
/// use llm_worker::{Limits, PluginHost};
///
/// let host = PluginHost::builder()
///     .limits(Limits::default().memory_bytes(32 << 20))
///     .cache_dir(PluginHost::default_cache_dir().expect("a home directory"))
///     .instance_pool(256)
///     .build()?;
/// # Ok::<(), llm_worker::PluginError>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct PluginHostBuilder {
    limits: Limits,
    cache_dir: Option<PathBuf>,
    instance_pool: Option<u32>,
    max_plugin_bytes: Option<u64>,
    max_open_files: Option<usize>,
    protected: Vec<PathBuf>,
}

impl PluginHostBuilder {
    /// The limits every plugin instance gets (a plugin's policy file may change its own).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Keep compiled components in `dir` (see [`PluginHost::with_options`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Reserve slots for up to `max_instances` live plugin instances when the host is created,
    /// and reuse them, instead of mapping memory and stacks for each instance as it starts
    /// (the default).
    ///
    /// A pooled host starts instances (that is, registers plugins) faster, but it has a hard
    /// capacity: once `max_instances` instances are alive, registering another one fails until
    /// one is dropped (the registration is refused with wasmtime's reason). The host has two
    /// engines, one for plugins of contracts 0.1.0–0.3.0 and one for 1.0.0, and each has a
    /// pool of `max_instances` slots. Each slot reserves about 8 GiB of *address space* up
    /// front for its linear memories (never resident unless used), so keep pools to a few
    /// thousand slots and to one pooled host per process. A plugin's memory limit still
    /// applies inside its slot.
    pub fn instance_pool(mut self, max_instances: u32) -> Self {
        self.instance_pool = Some(max_instances.max(1));
        self
    }

    /// The largest plugin accepted, in bytes, on every load path (files and bytes); default
    /// 256 MiB. Compiling takes time in proportion to the size: a lower cap bounds how long a
    /// hostile plugin can keep the loader busy.
    pub fn max_plugin_bytes(mut self, bytes: u64) -> Self {
        self.max_plugin_bytes = Some(bytes);
        self
    }

    /// The most files and directories the plugin instances of this host may hold open
    /// together (granted directories included), and the connections their HTTP requests hold
    /// (each is a socket of the host's); default: half of the process's open-file
    /// limit (the soft `RLIMIT_NOFILE`) when the host is built, so that the host itself can
    /// always open files and accept connections. Each instance may also hold at most 256.
    /// An open over either cap fails in the plugin (`insufficient-memory`); a new instance
    /// whose granted directories do not fit is refused as a lack of host capacity, never
    /// counted against the plugin.
    pub fn max_open_files(mut self, files: usize) -> Self {
        self.max_open_files = Some(files);
        self
    }

    /// A file or directory of the embedder's that no plugin may reach: a plugin whose policy
    /// grants a directory holding it, or holding a directory on the way to it (whose entry a
    /// plugin able to write there could replace with a link), or (for a directory) one inside
    /// it, is refused at load, as one granting the compiled cache is. For the host's own secrets (the command protects its
    /// token file, the OAuth client secret, the request-state key and the audit log). May be
    /// called more than once; a path that does not exist yet is protected where it would be.
    pub fn protect(mut self, path: impl Into<PathBuf>) -> Self {
        self.protected.push(path.into());
        self
    }

    /// Creates the host.
    pub fn build(self) -> Result<PluginHost, PluginError> {
        let engine_error = |e: wasmtime::Error| PluginError::Engine(format!("{e:?}"));
        let PluginHostBuilder {
            limits,
            cache_dir,
            instance_pool,
            max_plugin_bytes,
            max_open_files,
            protected,
        } = self;
        limits.check().map_err(PluginError::InvalidLimits)?;
        let mut config = Config::new();
        config.wasm_component_model(true);
        // No part of the GC proposal: wasmtime is built without its `gc` feature (no GC heap),
        // which left only function subtypes, checked at run time by code the build stubs out
        // (before 50.0.2 that stub aborted the process). No toolchain we know of emits them
        // for components; a plugin that uses them is refused at load.
        config.wasm_gc(false);
        config.epoch_interruption(true);
        config.consume_fuel(limits.fuel.is_some());
        if let Some(max_instances) = instance_pool {
            config.allocation_strategy(pool_config(max_instances));
        }
        // Contract 1.0.0 is asynchronous (the component model's concurrency, WASI 0.3): one
        // instance serves several calls at once. Older contracts run one call at a time, in
        // an engine without that support.
        let serial = Runtime::new(config.clone(), false).map_err(engine_error)?;
        let concurrent = Runtime::new(config, true).map_err(engine_error)?;
        // Create the cache directory now, so that policies are checked against where it is.
        let cache = cache_dir.map(cache::CompileCache::new);
        if let Some(Err(reason)) = cache.as_ref().map(cache::CompileCache::prepare_dir) {
            tracing::debug!("the compiled cache is not usable yet: {reason}");
        }
        let _ticker = EpochTicker::start([&serial.engine, &concurrent.engine]).map_err(|e| {
            PluginError::Engine(format!(
                "cannot start the thread that enforces time limits: {e}"
            ))
        })?;
        Ok(PluginHost {
            inner: Arc::new(HostInner {
                serial,
                concurrent,
                limits,
                cache,
                max_file_bytes: max_plugin_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES),
                protected,
                descriptors: Arc::new(descriptors::HostDescriptors::new(max_open_files)),
                _ticker,
            }),
        })
    }
}

/// The pool's per-plugin counts: the same as the limiter's for unpooled hosts.
const POOL_CORE_INSTANCES_PER_PLUGIN: u32 = instance::MAX_CORE_INSTANCES as u32;
const POOL_MEMORIES_PER_PLUGIN: u32 = instance::MAX_MEMORIES as u32;
const POOL_TABLES_PER_PLUGIN: u32 = instance::MAX_TABLES as u32;

/// The pooling allocator's configuration for `max_instances` plugin instances.
/// Stacks of the instance pool per plugin instance: one for its start and one per call it
/// runs at once by default.
const POOL_STACKS_PER_PLUGIN: u32 = 1 + 8;

fn pool_config(max_instances: u32) -> wasmtime::InstanceAllocationStrategy {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(max_instances)
        // A count, not a reservation: each core instance's metadata is allocated as it starts.
        .total_core_instances(max_instances.saturating_mul(POOL_CORE_INSTANCES_PER_PLUGIN))
        .max_core_instances_per_component(POOL_CORE_INSTANCES_PER_PLUGIN)
        .max_memories_per_component(POOL_MEMORIES_PER_PLUGIN)
        .max_memories_per_module(POOL_MEMORIES_PER_PLUGIN)
        .total_memories(max_instances.saturating_mul(POOL_MEMORIES_PER_PLUGIN))
        .max_tables_per_component(POOL_TABLES_PER_PLUGIN)
        .max_tables_per_module(POOL_TABLES_PER_PLUGIN)
        .total_tables(max_instances.saturating_mul(POOL_TABLES_PER_PLUGIN))
        // An instance of contract 1.0.0 holds a stack for each call waiting synchronously
        // (a WASI 0.2 read, `pollable.block`) and for work a call left behind; its calls keep
        // their places meanwhile, so `max_concurrent_calls` (by default 8) bounds them. A
        // plugin whose policy allows more may find the stacks run out: a lack of the host's
        // capacity, not counted against the plugin.
        .total_stacks(max_instances.saturating_mul(POOL_STACKS_PER_PLUGIN))
        // 4 GiB: the whole 32-bit space, so any plugin's own memory limit fits in its slot.
        .max_memory_size(1 << 32);
    wasmtime::InstanceAllocationStrategy::Pooling(pool)
}

impl PluginHost {
    /// A host with the default [`Limits`].
    pub fn new() -> Result<Self, PluginError> {
        Self::with_limits(Limits::default())
    }

    /// A host whose plugin instances get `limits`.
    pub fn with_limits(limits: Limits) -> Result<Self, PluginError> {
        Self::with_options(limits, None)
    }

    /// A host whose plugin instances get `limits` and which keeps compiled components in
    /// `cache_dir` (see [`PluginHost::default_cache_dir`]): a second load of the same file
    /// deserializes instead of compiling. Entries are keyed by the file's SHA-256 and the
    /// engine's compatibility hash, written atomically, and checked before use.
    ///
    /// Shorthand for [`PluginHost::builder`] with these two settings.
    pub fn with_options(limits: Limits, cache_dir: Option<PathBuf>) -> Result<Self, PluginError> {
        let builder = Self::builder().limits(limits);
        match cache_dir {
            Some(dir) => builder.cache_dir(dir),
            None => builder,
        }
        .build()
    }

    /// A builder for a host with more settings than [`with_options`](Self::with_options):
    /// limits, compiled cache, and a pool of instance slots.
    pub fn builder() -> PluginHostBuilder {
        PluginHostBuilder::default()
    }

    /// The default compiled-cache directory: `$XDG_CACHE_HOME/llm-worker/compiled`, else
    /// `$HOME/.cache/llm-worker/compiled`; `None` when neither is set.
    pub fn default_cache_dir() -> Option<PathBuf> {
        Self::default_cache_dirs().into_iter().next()
    }

    /// Every compiled-cache directory a host without settings may use, the one it picks first:
    /// under `XDG_CACHE_HOME`, then under `HOME` (a host started with another environment, as
    /// by an MCP client, picks the other).
    pub(crate) fn default_cache_dirs() -> Vec<PathBuf> {
        let xdg = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let home = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache"));
        xdg.into_iter()
            .chain(home)
            .map(|base| base.join("llm-worker").join("compiled"))
            .collect()
    }

    /// Whether `dir` can hold the compiled cache: creates it (private to the user) if it is
    /// missing, and checks that only the user can change what it holds — the rule a host
    /// applies before using its cache directory (a host given a directory that fails it
    /// compiles instead, and says why). Returns the directory with links resolved, or why it
    /// would not be used.
    ///
    /// ```
    /// # fn main() -> Result<(), String> {
    /// let dir = std::env::temp_dir().join(format!("llm-worker-doc-{}", std::process::id()));
    /// let resolved = llm_worker::PluginHost::check_cache_dir(&dir)?;
    /// assert!(resolved.is_dir());
    /// # std::fs::remove_dir(&resolved).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn check_cache_dir(dir: impl AsRef<Path>) -> Result<PathBuf, String> {
        cache::CompileCache::new(dir.as_ref().to_owned()).prepare_dir()
    }

    /// The limits every instance gets.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// What the live plugin instances of this host use now: for an operator's metrics.
    pub fn usage(&self) -> HostUsage {
        use std::sync::atomic::Ordering::Relaxed;
        let usage = &self.inner.descriptors.usage;
        HostUsage {
            instances: usage.instances.load(Relaxed),
            memory_bytes: usage.bytes.load(Relaxed),
        }
    }

    /// The largest plugin file this host reads ([`PluginHostBuilder::max_plugin_bytes`]).
    pub fn max_plugin_bytes(&self) -> u64 {
        self.inner.max_file_bytes
    }

    /// Reads a plugin file: a regular file (a FIFO or device is refused without blocking)
    /// within the size limit, and with `within` (a real path), inside that directory.
    pub(super) fn read_plugin_file(
        &self,
        path: &Path,
        within: Option<&Path>,
    ) -> Result<Vec<u8>, PluginError> {
        crate::file::read_regular_file_within(path, self.inner.max_file_bytes, within).map_err(
            |error| match error {
                crate::file::ReadError::Io(source) => PluginError::Io {
                    path: path.to_owned(),
                    source,
                },
                crate::file::ReadError::NotAFile => PluginError::NotAFile {
                    path: path.to_owned(),
                },
                crate::file::ReadError::TooLarge(size) => PluginError::TooLarge {
                    path: path.to_owned(),
                    size,
                    limit: self.inner.max_file_bytes,
                },
                crate::file::ReadError::Outside(target) => PluginError::OutsideDirectory {
                    path: path.to_owned(),
                    target,
                },
            },
        )
    }

    /// The engine and linkers of a component that needs the component model's concurrency
    /// (`concurrent`), or of one that does not.
    pub(super) fn runtime(&self, concurrent: bool) -> &Runtime {
        if concurrent {
            &self.inner.concurrent
        } else {
            &self.inner.serial
        }
    }

    /// The linker of `runtime` for a plugin under `policy`: with `wasi:http` only if it grants
    /// HTTP.
    #[cfg_attr(feature = "wasi-http", allow(unused_variables))]
    pub(super) fn linker_for<'a>(
        &self,
        runtime: &'a Runtime,
        path: &Path,
        policy: &SandboxPolicy,
    ) -> Result<&'a Linker<PluginState>, PluginError> {
        if policy.http.is_empty() {
            return Ok(&runtime.linker);
        }
        #[cfg(feature = "wasi-http")]
        return Ok(&runtime.http_linker);
        #[cfg(not(feature = "wasi-http"))]
        Err(PluginError::Policy {
            path: path.to_owned(),
            source: PolicyError::Invalid {
                path: SandboxPolicy::path_for(path),
                key: "http.allow".into(),
                message: "grants HTTP, but this host was built without `wasi:http` (the \
                          `wasi-http` feature of llm-worker); remove the grant or rebuild"
                    .into(),
            },
        })
    }
}
