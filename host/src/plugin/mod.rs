//! Wasm tool plugins: [`PluginHost`] compiles and validates components, [`LoadedPlugin`] hands
//! out [`ToolDefinition`]s whose factories create live instances at registration.

mod annotations;
mod bindings;
mod blocking;
mod cache;
mod descriptors;
#[cfg(feature = "wasi-http")]
mod http;
mod input;
mod instance;
#[cfg(feature = "wasi-http")]
mod net;
mod output;
mod validate;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use self::bindings::{PluginPre, PluginToolMeta, VERSIONS};
use self::instance::{PluginState, PluginTool, SessionOwner};
use self::validate::{PACKAGE, ToolListProblem};
use crate::policy::{Limits, PolicyError, SandboxPolicy};
use crate::tool::{ToolDefinition, ToolError, ToolMeta};

/// How often the epoch advances: the granularity of time limits, and how often a running
/// plugin yields to the async runtime.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Largest plugin file accepted by default.
const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

/// The world every plugin must be a component of, for messages.
fn world_name() -> String {
    format!(
        "{PACKAGE}/tool-plugin (@{} or @{})",
        VERSIONS[0], VERSIONS[1]
    )
}

/// Why a plugin file was refused. Every message names the file and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read plugin {}: {source}", path.display())]
    Io {
        /// The plugin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The plugin directory could not be read.
    #[error("cannot read the plugin directory {}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than the host accepts.
    #[error("plugin {} is {size} bytes, over the limit of {limit} bytes", path.display())]
    TooLarge {
        /// The plugin file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The path is not a regular file (a FIFO, a device, a socket or a directory).
    #[error(
        "plugin {} is not a regular file (a FIFO, device, socket or directory); a plugin is a \
         `.wasm` file — remove or rename it",
        path.display()
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The file is not WebAssembly.
    #[error(
        "plugin {} is not a WebAssembly file (it lacks the `\\0asm` header); a tool plugin is a \
         WebAssembly component, e.g. built with `cargo build --target wasm32-wasip2`",
        path.display()
    )]
    NotWasm {
        /// The plugin file.
        path: PathBuf,
    },
    /// The file is a core WebAssembly module, not a component.
    #[error(
        "plugin {} is a core WebAssembly module, not a component; build it for the \
         wasm32-wasip2 target, or wrap it with `wasm-tools component new`",
        path.display()
    )]
    CoreModule {
        /// The plugin file.
        path: PathBuf,
    },
    /// The component is malformed or uses features the host does not support.
    #[error("plugin {} is not a valid component: {reason}", path.display())]
    Invalid {
        /// The plugin file.
        path: PathBuf,
        /// What the compiler said.
        reason: String,
    },
    /// The component was built against an incompatible version of our WIT package.
    #[error(
        "plugin {} was built against {PACKAGE}@{found}, but this host supports \
         {PACKAGE}@{expected}; rebuild the plugin against one of them (wit/0.2.0 is the \
         current contract)",
        path.display()
    )]
    WrongVersion {
        /// The plugin file.
        path: PathBuf,
        /// The version the plugin uses.
        found: String,
        /// The versions this host implements ("0.1.0 and 0.2.0").
        expected: String,
    },
    /// The component is not of the world `tool-plugin`.
    #[error("plugin {} is not a component of the world {world}: {reason}", path.display(), world = world_name())]
    WrongWorld {
        /// The plugin file.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
    /// The component imports something the host does not provide.
    #[error(
        "plugin {} imports something this host does not provide: {reason}; tool plugins may \
         import WASI 0.2 interfaces only (including wasi:http)",
        path.display()
    )]
    UnsupportedImport {
        /// The plugin file.
        path: PathBuf,
        /// The linker's message, naming the import.
        reason: String,
    },
    /// Creating an instance or listing its tools failed.
    #[error("plugin {} failed while starting: {reason}", path.display())]
    Startup {
        /// The plugin file.
        path: PathBuf,
        /// What happened.
        reason: String,
    },
    /// The plugin lists no tools.
    #[error("plugin {} lists no tools; its `tools` export must return at least one", path.display())]
    NoTools {
        /// The plugin file.
        path: PathBuf,
    },
    /// A tool name is not allowed.
    #[error("plugin {} lists a tool named {name:?}, which is not allowed: {reason}", path.display())]
    InvalidToolName {
        /// The plugin file.
        path: PathBuf,
        /// The name.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// Two tools of the plugin share a name.
    #[error("plugin {} lists the tool '{name}' twice; tool names must be unique", path.display())]
    DuplicateToolName {
        /// The plugin file.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// The tool list is over one of the host's caps (tools, description or schema size).
    #[error(
        "plugin {} is refused: {reason}; see the caps in SECURITY.md",
        path.display()
    )]
    ToolListTooLarge {
        /// The plugin file.
        path: PathBuf,
        /// Which cap, by how much.
        reason: String,
    },
    /// A tool's title or output schema is invalid.
    #[error("plugin {} has an invalid {what} for tool '{tool}': {reason}", path.display())]
    InvalidToolMeta {
        /// The plugin file.
        path: PathBuf,
        /// The tool.
        tool: String,
        /// What: "title" or "output schema".
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool's input schema is not a JSON object schema.
    #[error("plugin {} has an invalid input schema for tool '{tool}': {reason}", path.display())]
    InvalidSchema {
        /// The plugin file.
        path: PathBuf,
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// The plugin's policy file is invalid.
    #[error("plugin {} cannot be loaded: {source}", path.display())]
    Policy {
        /// The plugin file.
        path: PathBuf,
        /// What is wrong with the policy.
        source: PolicyError,
    },
    /// The file is a symbolic link to a file outside the plugin directory.
    #[error(
        "plugin {} is a link to {}, outside the plugin directory; copy the plugin into the \
         directory instead",
        path.display(),
        target.display()
    )]
    OutsideDirectory {
        /// The link in the plugin directory.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
    /// Two plugins of one directory offer a tool of the same name; neither is loaded.
    #[error(
        "plugin {} and plugin {} both offer the tool '{tool}'; neither is loaded — remove or \
         rename one of them",
        path.display(),
        other.display()
    )]
    ToolNameClash {
        /// This plugin.
        path: PathBuf,
        /// The other plugin.
        other: PathBuf,
        /// The tool both offer.
        tool: String,
    },
    /// The directory has a lock file, and this plugin is not approved by it.
    #[error(
        "plugin {} is not approved by {}: {reason}; review it, then approve it with \
         `llm-worker lock DIR`",
        path.display(),
        lock.display()
    )]
    NotApproved {
        /// The plugin file.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The directory's lock file cannot be read.
    #[error("{0}")]
    Lock(#[from] crate::lock::LockError),
    /// The host's limits cannot be honoured (e.g. a memory limit of 0).
    #[error("invalid limits for the plugin host: {0}")]
    InvalidLimits(String),
    /// The host itself could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
}

impl PluginError {
    /// The plugin file (or directory) the error is about, if it is about one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            PluginError::Io { path, .. }
            | PluginError::Directory { path, .. }
            | PluginError::TooLarge { path, .. }
            | PluginError::NotAFile { path }
            | PluginError::NotWasm { path }
            | PluginError::CoreModule { path }
            | PluginError::Invalid { path, .. }
            | PluginError::WrongVersion { path, .. }
            | PluginError::WrongWorld { path, .. }
            | PluginError::UnsupportedImport { path, .. }
            | PluginError::Startup { path, .. }
            | PluginError::NoTools { path }
            | PluginError::InvalidToolName { path, .. }
            | PluginError::DuplicateToolName { path, .. }
            | PluginError::ToolListTooLarge { path, .. }
            | PluginError::InvalidSchema { path, .. }
            | PluginError::InvalidToolMeta { path, .. }
            | PluginError::Policy { path, .. }
            | PluginError::OutsideDirectory { path, .. }
            | PluginError::ToolNameClash { path, .. }
            | PluginError::NotApproved { path, .. } => Some(path),
            PluginError::Lock(error) => Some(error.path()),
            PluginError::InvalidLimits(_) | PluginError::Engine(_) => None,
        }
    }
}

/// Advances the engine's epoch on a timer, for time limits and cooperative yielding.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: &Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let engine = engine.weak();
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("llm-worker-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
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

struct HostInner {
    engine: Engine,
    /// WASI 0.2 without `wasi:http`.
    linker: Linker<PluginState>,
    /// WASI 0.2 with `wasi:http`, for plugins granted HTTP.
    #[cfg(feature = "wasi-http")]
    http_linker: Linker<PluginState>,
    limits: Limits,
    cache: Option<cache::CompileCache>,
    max_file_bytes: u64,
    /// The open files and directories of all instances together.
    descriptors: Arc<descriptors::HostDescriptors>,
    _ticker: EpochTicker,
}

/// Loads tool plugins: one shared wasmtime engine, a WASI linker, and the resource limits given
/// to every instance. Cheap to clone.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<HostInner>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
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
    /// one is dropped (the registration is refused with wasmtime's reason). Each slot reserves
    /// about 8 GiB of *address space* up front for its linear memories (never resident unless
    /// used), so keep pools to a few thousand slots and to one pooled host per process. A
    /// plugin's memory limit still applies inside its slot.
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
    /// together (granted directories included); default: half of the process's open-file
    /// limit (the soft `RLIMIT_NOFILE`) when the host is built, so that the host itself can
    /// always open files and accept connections. Each instance may also hold at most 256.
    /// An open over either cap fails in the plugin (`insufficient-memory`); a new instance
    /// whose granted directories do not fit is refused as a lack of host capacity, never
    /// counted against the plugin.
    pub fn max_open_files(mut self, files: usize) -> Self {
        self.max_open_files = Some(files);
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
        } = self;
        limits.check().map_err(PluginError::InvalidLimits)?;
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        config.consume_fuel(limits.fuel.is_some());
        // Plugins use the synchronous component model (the `tool-plugin` world has no async
        // functions or streams): skip the per-store state of component-model-async.
        config.concurrency_support(false);
        if let Some(max_instances) = instance_pool {
            config.allocation_strategy(pool_config(max_instances));
        }
        let engine = Engine::new(&config).map_err(engine_error)?;
        // Two linkers: WASI alone, for plugins without HTTP grants (they get no `wasi:http`
        // imports at all), and WASI with `wasi:http`, for plugins whose policy grants it.
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        // Opening and closing descriptors counted per instance and host-wide.
        descriptors::add_to_linker(&mut linker).map_err(engine_error)?;
        bindings::add_host_imports(&mut linker).map_err(engine_error)?;
        #[cfg(feature = "wasi-http")]
        let http_linker = {
            let mut http_linker = linker.clone();
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut http_linker)
                .map_err(engine_error)?;
            http_linker
        };
        // Create the cache directory now, so that policies are checked against where it is.
        let cache = cache_dir.map(cache::CompileCache::new);
        if let Some(Err(reason)) = cache.as_ref().map(cache::CompileCache::prepare_dir) {
            tracing::debug!("the compiled cache is not usable yet: {reason}");
        }
        let _ticker = EpochTicker::start(&engine).map_err(|e| {
            PluginError::Engine(format!(
                "cannot start the thread that enforces time limits: {e}"
            ))
        })?;
        Ok(PluginHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                #[cfg(feature = "wasi-http")]
                http_linker,
                limits,
                cache,
                max_file_bytes: max_plugin_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES),
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
        .total_stacks(max_instances)
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
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
        Some(base.join("llm-worker").join("compiled"))
    }

    /// The limits every instance gets.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The largest plugin file this host reads ([`PluginHostBuilder::max_plugin_bytes`]).
    pub fn max_plugin_bytes(&self) -> u64 {
        self.inner.max_file_bytes
    }

    /// Reads, compiles and validates the plugin at `path`.
    ///
    /// This compiles the component (CPU-heavy: tens to hundreds of milliseconds) and runs it
    /// once to read its tool list; from async code, call it in `spawn_blocking`. Nothing is
    /// registered: call [`LoadedPlugin::definitions`] and register those.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<LoadedPlugin, PluginError> {
        self.load_file(path.as_ref(), None)
    }

    /// Loads a plugin file with its policy file; with `approved`, only if both are the ones
    /// its lock entry names (checked before anything of them is parsed or compiled).
    fn load_file(
        &self,
        path: &Path,
        approved: Option<(&Path, &crate::lock::LockedPlugin)>,
    ) -> Result<LoadedPlugin, PluginError> {
        let policy_error = |source| PluginError::Policy {
            path: path.to_owned(),
            source,
        };
        let policy_path = SandboxPolicy::path_for(path);
        let policy_text = if policy_path.exists() {
            Some(SandboxPolicy::read_text(&policy_path).map_err(policy_error)?)
        } else {
            None
        };
        let policy_sha256 = policy_text
            .as_deref()
            .map(|text| crate::digest::sha256_hex(text.as_bytes()));
        let bytes = self.read_plugin_file(path)?;
        if let Some((dir, entry)) = approved {
            let sha256 = crate::digest::sha256_hex(&bytes);
            let policy = policy_sha256.as_deref().unwrap_or("none");
            let reason = if sha256 != entry.sha256 {
                Some(format!(
                    "it changed since it was locked (sha256 {} in the lock, {sha256} now)",
                    entry.sha256
                ))
            } else if policy != entry.policy_sha256 {
                Some(format!(
                    "its policy {} changed since it was locked (sha256 {} in the lock, {policy} \
                     now)",
                    policy_path.display(),
                    entry.policy_sha256
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(PluginError::NotApproved {
                    path: path.to_owned(),
                    lock: dir.join(crate::lock::LOCK_FILE),
                    reason,
                });
            }
        }
        let policy = match &policy_text {
            Some(text) => SandboxPolicy::parse(text, &policy_path, &self.inner.limits)
                .map_err(policy_error)?,
            None => SandboxPolicy::with_limits(self.inner.limits.clone()),
        };
        let (policy, granted_dirs) = self.resolve_dir_grants(path, policy)?;
        if let Some((dir, entry)) = approved {
            // The policy's text is approved; so must be where its directories lead now.
            let now = crate::lock::grant_paths(&policy);
            if now != entry.dirs {
                return Err(PluginError::NotApproved {
                    path: path.to_owned(),
                    lock: dir.join(crate::lock::LOCK_FILE),
                    reason: crate::lock::grants_moved(&entry.dirs, &now),
                });
            }
        }
        let mut plugin = self.load_resolved(path, &bytes, policy, granted_dirs)?;
        if let Some(image) = Arc::get_mut(&mut plugin.image) {
            image.policy_sha256 = policy_sha256;
        }
        Ok(plugin)
    }

    /// Reads a plugin file: a regular file (a FIFO or device is refused without blocking)
    /// within the size limit.
    fn read_plugin_file(&self, path: &Path) -> Result<Vec<u8>, PluginError> {
        crate::file::read_regular_file(path, self.inner.max_file_bytes).map_err(|error| match error
        {
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
        })
    }

    /// Loads every `*.wasm` file of `dir` (not its subdirectories), each with its policy file.
    ///
    /// A plugin that cannot be loaded is reported in [`PluginDir::failures`] and the others are
    /// loaded; so are links to files outside `dir` (refused) and two plugins offering the same
    /// tool name (both refused: neither silently wins). Fails only if `dir` cannot be read.
    pub fn load_dir(&self, dir: impl AsRef<Path>) -> Result<PluginDir, PluginError> {
        self.load_dir_with(dir, LoadDirOptions::default(), |_, _, _| {})
    }

    /// [`load_dir`](Self::load_dir) with options (e.g. recursive), calling
    /// `progress(index, total, path)` before each file (for a progress bar: compiling takes a
    /// while where the cache is cold).
    pub fn load_dir_with(
        &self,
        dir: impl AsRef<Path>,
        options: LoadDirOptions,
        mut progress: impl FnMut(usize, usize, &Path),
    ) -> Result<PluginDir, PluginError> {
        let dir = dir.as_ref();
        let io = |source| PluginError::Directory {
            path: dir.to_owned(),
            source,
        };
        let root = dir.canonicalize().map_err(io)?;
        let paths = options.plugin_files(dir).map_err(io)?;
        let lock = if options.ignore_lock {
            None
        } else if options.locked {
            Some(crate::lock::LockFile::read_required(dir)?)
        } else {
            crate::lock::LockFile::read(dir)?
        };
        let approved = lock.as_ref().map(crate::lock::LockFile::by_file);
        // Pulled plugins whose signer the trust policy no longer allows (host/src/lock.rs).
        let source_refusals = lock
            .as_ref()
            .map(|lock| lock.source_refusals(dir))
            .unwrap_or_default();

        let mut loaded = Vec::new();
        let mut failures = Vec::new();
        if let Some(approved) = &approved {
            // A locked plugin that is gone is reported (the directory is not what was approved).
            let present: std::collections::BTreeSet<String> = paths
                .iter()
                .map(|path| crate::lock::relative_name(dir, path))
                .collect();
            for file in approved.keys().filter(|file| !present.contains(**file)) {
                failures.push(PluginError::NotApproved {
                    path: dir.join(file),
                    lock: dir.join(crate::lock::LOCK_FILE),
                    reason: "it is locked, but the file is gone".into(),
                });
            }
        }
        let total = paths.len();
        for (index, path) in paths.into_iter().enumerate() {
            progress(index, total, &path);
            match std::fs::canonicalize(&path) {
                Ok(target) if !target.starts_with(&root) => {
                    failures.push(PluginError::OutsideDirectory { path, target });
                    continue;
                }
                Ok(target) if target.is_dir() => continue,
                Ok(_) => {}
                Err(source) => {
                    failures.push(PluginError::Io { path, source });
                    continue;
                }
            }
            if let Some(reason) = source_refusals.get(&crate::lock::relative_name(dir, &path)) {
                failures.push(PluginError::NotApproved {
                    path,
                    lock: dir.join(crate::lock::LOCK_FILE),
                    reason: reason.clone(),
                });
                continue;
            }
            let attempt = match &approved {
                None => self.load(&path),
                Some(approved) => {
                    match approved.get(crate::lock::relative_name(dir, &path).as_str()) {
                        Some(entry) => self.load_file(&path, Some((dir, entry))),
                        None => Err(PluginError::NotApproved {
                            path: path.clone(),
                            lock: dir.join(crate::lock::LOCK_FILE),
                            reason: "it is not in the lock (a plugin added since it was written)"
                                .into(),
                        }),
                    }
                }
            };
            match attempt {
                Ok(plugin) if options.recursive => match writable_grant_within(&plugin, &root) {
                    Some(error) => failures.push(error),
                    None => loaded.push(plugin),
                },
                Ok(plugin) => loaded.push(plugin),
                Err(error) => failures.push(error),
            }
        }

        // Refuse both plugins of every clash of tool names.
        let mut clashing = vec![false; loaded.len()];
        for (i, first) in loaded.iter().enumerate() {
            for (j, second) in loaded.iter().enumerate().skip(i + 1) {
                let Some(tool) = first
                    .tool_names()
                    .into_iter()
                    .find(|name| second.tool_names().contains(name))
                else {
                    continue;
                };
                for (index, this, other) in [(i, first, second), (j, second, first)] {
                    if !std::mem::replace(&mut clashing[index], true) {
                        failures.push(PluginError::ToolNameClash {
                            path: this.path().to_owned(),
                            other: other.path().to_owned(),
                            tool: tool.to_owned(),
                        });
                    }
                }
            }
        }
        let plugins = loaded
            .into_iter()
            .zip(clashing)
            .filter_map(|(plugin, clash)| (!clash).then_some(plugin))
            .collect();
        Ok(PluginDir {
            plugins,
            failures,
            warnings: options.stray_policies(dir),
        })
    }

    /// Like [`load`](Self::load), with a policy given in code instead of a policy file.
    pub fn load_with_policy(
        &self,
        path: impl AsRef<Path>,
        policy: SandboxPolicy,
    ) -> Result<LoadedPlugin, PluginError> {
        let path = path.as_ref();
        let bytes = self.read_plugin_file(path)?;
        self.load_bytes_with_policy(path, &bytes, policy)
    }

    /// Compiles and validates a plugin given as bytes, with the host's limits and no grants;
    /// `path` names it in messages and its file stem becomes the plugin's name.
    pub fn load_bytes(
        &self,
        path: impl AsRef<Path>,
        bytes: &[u8],
    ) -> Result<LoadedPlugin, PluginError> {
        let policy = SandboxPolicy::with_limits(self.inner.limits.clone());
        self.load_bytes_with_policy(path.as_ref(), bytes, policy)
    }

    fn load_bytes_with_policy(
        &self,
        path: &Path,
        bytes: &[u8],
        policy: SandboxPolicy,
    ) -> Result<LoadedPlugin, PluginError> {
        let (policy, granted_dirs) = self.resolve_dir_grants(path, policy)?;
        self.load_resolved(path, bytes, policy, granted_dirs)
    }

    /// Compiles and validates a plugin under a policy whose directory grants are resolved.
    fn load_resolved(
        &self,
        path: &Path,
        bytes: &[u8],
        policy: SandboxPolicy,
        granted_dirs: Arc<[descriptors::HeldDir]>,
    ) -> Result<LoadedPlugin, PluginError> {
        if policy.limits.fuel.is_some() && self.inner.limits.fuel.is_none() {
            return Err(PluginError::Policy {
                path: path.to_owned(),
                source: PolicyError::Invalid {
                    path: SandboxPolicy::path_for(path),
                    key: "limits.fuel".into(),
                    message: "needs a host with fuel metering (`--fuel UNITS` on the command \
                              line, or `Limits::fuel` on the host); remove it to rely on the \
                              time limit"
                        .into(),
                },
            });
        }
        policy
            .limits
            .check()
            .map_err(|message| PluginError::Policy {
                path: path.to_owned(),
                source: PolicyError::Invalid {
                    path: SandboxPolicy::path_for(path),
                    key: "limits".into(),
                    message,
                },
            })?;
        if bytes.len() as u64 > self.inner.max_file_bytes {
            return Err(PluginError::TooLarge {
                path: path.to_owned(),
                size: bytes.len() as u64,
                limit: self.inner.max_file_bytes,
            });
        }
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00]) => {}
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
                return Err(PluginError::CoreModule {
                    path: path.to_owned(),
                });
            }
            Some([0, b'a', b's', b'm', ..]) => {
                return Err(PluginError::Invalid {
                    path: path.to_owned(),
                    reason: "unknown WebAssembly version or layer in the header".into(),
                });
            }
            _ => {
                return Err(PluginError::NotWasm {
                    path: path.to_owned(),
                });
            }
        }
        let sha256 = crate::digest::sha256(bytes);
        let compiled = match &self.inner.cache {
            Some(cache) => cache
                .load_or_compile(&self.inner.engine, bytes, &sha256, path)
                .map(|(component, _)| component),
            None => Component::new(&self.inner.engine, bytes),
        };
        let component = compiled.map_err(|e| PluginError::Invalid {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        })?;
        let version = self.check_version(path, &component)?;
        let linker = self.linker_for(path, &policy)?;
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            let reason = format!("{e:#}");
            if policy.http.is_empty() && reason.contains("wasi:http/") {
                PluginError::UnsupportedImport {
                    path: path.to_owned(),
                    reason: format!(
                        "{reason}; it imports wasi:http, which is linked only for plugins whose \
                         policy grants HTTP: add the destinations it needs to [http] allow in {}",
                        SandboxPolicy::path_for(path).display()
                    ),
                }
            } else {
                PluginError::UnsupportedImport {
                    path: path.to_owned(),
                    reason,
                }
            }
        })?;
        self.check_exports(path, &component)?;
        // A component names the version in its imports (`llm-worker:tool/types@0.2.0`); one
        // that names none is tried against the newest world, then the older.
        let pre = match version {
            Some(version) => PluginPre::new(version, pre),
            None => PluginPre::new(VERSIONS[1], pre.clone())
                .or_else(|_| PluginPre::new(VERSIONS[0], pre)),
        }
        .map_err(|e| PluginError::WrongWorld {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        })?;
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".to_owned());
        let imports: Vec<String> = component
            .component_type()
            .imports(&self.inner.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let tools = self.read_tools(path, &pre, &policy)?;
        let raw: Vec<(String, String, String)> = tools
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.description.clone(),
                    t.input_schema.clone(),
                )
            })
            .collect();
        validate::check_sizes(&raw).map_err(|problem| tool_list_error(path, problem))?;
        let mut schema_budget = validate::SchemaBudget::new(policy.limits.schema_memory_bytes);
        let schemas = validate::check_tools(
            raw.iter().map(|(n, _, s)| (n.as_str(), s.as_str())),
            &mut schema_budget,
        )
        .map_err(|problem| tool_list_error(path, problem))?;
        if let Some(tool) = policy
            .tool_http
            .keys()
            .find(|tool| !raw.iter().any(|(name, _, _)| name == *tool))
        {
            return Err(PluginError::Policy {
                path: path.to_owned(),
                source: PolicyError::Invalid {
                    path: SandboxPolicy::path_for(path),
                    key: format!("tools.{tool}"),
                    message: format!(
                        "names a tool the plugin does not offer; its tools: {}",
                        raw.iter()
                            .map(|(name, _, _)| name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                },
            });
        }
        let mut metas = Vec::with_capacity(raw.len());
        let mut validators = Vec::with_capacity(raw.len());
        let mut output_validators = Vec::with_capacity(raw.len());
        let mut warnings = Vec::new();
        for (tool, checked) in tools.into_iter().zip(schemas) {
            let invalid = |what: &str, reason: String| PluginError::InvalidToolMeta {
                path: path.to_owned(),
                tool: tool.name.clone(),
                what: what.to_owned(),
                reason,
            };
            let mut meta = ToolMeta::new(&tool.name)
                .description(&tool.description)
                .input_schema(checked.schema.clone());
            if let Some(title) = &tool.title {
                validate::check_title(title).map_err(|reason| invalid("title", reason))?;
                meta = meta.title(title);
            }
            let output = match &tool.output_schema {
                Some(text) => {
                    let output =
                        validate::check_output_schema(text, &tool.name, &mut schema_budget)
                            .map_err(|problem| match problem {
                                ToolListProblem::BadSchema { reason, .. } => {
                                    invalid("output schema", reason)
                                }
                                other => tool_list_error(path, other),
                            })?;
                    meta = meta.output_schema(output.schema.clone());
                    Some(Arc::new(output))
                }
                None => None,
            };
            let (annotations, dropped) =
                annotations::vouched(&policy, &tool.name, tool.annotations);
            for warning in &dropped {
                tracing::warn!(plugin = %name, "{warning}");
            }
            warnings.extend(dropped);
            metas.push(meta.annotations(annotations));
            validators.push(Arc::new(checked));
            output_validators.push(output);
        }
        Ok(LoadedPlugin {
            image: Arc::new(PluginImage {
                sha256,
                policy_sha256: None,
                name,
                path: path.to_owned(),
                pre,
                policy,
                imports,
                granted_dirs,
                descriptors: Arc::clone(&self.inner.descriptors),
                _host: Arc::clone(&self.inner),
                metas,
                validators,
                output_validators,
                warnings,
            }),
        })
    }

    /// Resolves each directory grant to its real path and opens it there (every instance is
    /// given the directory opened, and refuses to start if the path has since been made to
    /// lead elsewhere), and refuses grants through which a plugin could
    /// change what the host runs: one that holds the plugin's own directory (it could replace
    /// itself, its policy or other plugins) or that overlaps the compiled cache (native code
    /// the host loads).
    fn resolve_dir_grants(
        &self,
        path: &Path,
        mut policy: SandboxPolicy,
    ) -> Result<(SandboxPolicy, Arc<[descriptors::HeldDir]>), PluginError> {
        let invalid = |index: usize, message: String| PluginError::Policy {
            path: path.to_owned(),
            source: PolicyError::Invalid {
                path: SandboxPolicy::path_for(path),
                key: format!("dirs[{index}].host"),
                message,
            },
        };
        for (index, grant) in policy.dirs.iter_mut().enumerate() {
            grant.host = grant.host.canonicalize().map_err(|e| {
                invalid(
                    index,
                    format!("is {}, which cannot be opened: {e}", grant.host.display()),
                )
            })?;
        }
        let plugin_dir = path
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."))
            .canonicalize()
            .ok();
        // An unusable cache is not read at all; a usable one is compared by its real path.
        let cache_dir = self
            .inner
            .cache
            .as_ref()
            .and_then(|cache| cache.prepare_dir().ok());
        for (index, grant) in policy.dirs.iter().enumerate() {
            let granted = &grant.host;
            let problem = if plugin_dir
                .as_ref()
                .is_some_and(|dir| dir.starts_with(granted))
            {
                Some(
                    "holds the plugin's own directory: the plugin could replace itself, its \
                      policy or other plugins there",
                )
            } else if cache_dir
                .as_ref()
                .is_some_and(|dir| dir.starts_with(granted) || granted.starts_with(dir))
            {
                Some("overlaps the host's compiled cache, whose native code the host runs")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(invalid(
                    index,
                    format!(
                        "is {}, which {problem}; grant a directory of its own instead",
                        granted.display()
                    ),
                ));
            }
        }
        let held = policy
            .dirs
            .iter()
            .enumerate()
            .map(|(index, grant)| {
                descriptors::HeldDir::open(&grant.host).map_err(|e| {
                    invalid(
                        index,
                        format!(
                            "is {}, which cannot be opened as a directory (not following \
                             links): {e}",
                            grant.host.display()
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((policy, held))
    }

    /// The linker for a plugin under `policy`: with `wasi:http` only if it grants HTTP.
    #[cfg_attr(feature = "wasi-http", allow(unused_variables))]
    fn linker_for(
        &self,
        path: &Path,
        policy: &SandboxPolicy,
    ) -> Result<&Linker<PluginState>, PluginError> {
        if policy.http.is_empty() {
            return Ok(&self.inner.linker);
        }
        #[cfg(feature = "wasi-http")]
        return Ok(&self.inner.http_linker);
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

    /// Refuses components built against a version of our package this host does not load,
    /// naming both; returns the version found (`None` if no name carries one).
    fn check_version(
        &self,
        path: &Path,
        component: &Component,
    ) -> Result<Option<&'static str>, PluginError> {
        let engine = &self.inner.engine;
        let ty = component.component_type();
        let names = ty
            .imports(engine)
            .map(|(name, _)| name.to_owned())
            .chain(ty.exports(engine).map(|(name, _)| name.to_owned()));
        let mut version = None;
        for name in names {
            let Some(found) = validate::package_version(&name) else {
                continue;
            };
            match validate::compatible_version(found) {
                Some(ours) if version.is_none_or(|v| v == ours) => version = Some(ours),
                _ => {
                    return Err(PluginError::WrongVersion {
                        path: path.to_owned(),
                        found: if found.is_empty() {
                            "(unversioned)".into()
                        } else {
                            found.into()
                        },
                        expected: format!("{} and {}", VERSIONS[0], VERSIONS[1]),
                    });
                }
            }
        }
        Ok(version)
    }

    /// Refuses components that do not export the world's functions, naming what they export.
    fn check_exports(&self, path: &Path, component: &Component) -> Result<(), PluginError> {
        let engine = &self.inner.engine;
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let missing: Vec<&str> = ["tools", "execute"]
            .into_iter()
            .filter(|needed| !exports.iter().any(|e| e == needed))
            .collect();
        if !missing.is_empty() {
            let exported = if exports.is_empty() {
                "nothing".to_owned()
            } else {
                exports.join(", ")
            };
            return Err(PluginError::WrongWorld {
                path: path.to_owned(),
                reason: format!(
                    "it does not export {}; it exports {exported}. Build it against wit/0.2.0/tool.wit",
                    missing.join(" and ")
                ),
            });
        }
        Ok(())
    }

    /// Runs the plugin once to read its tool list, with its limits but **none of its grants**:
    /// no directories, environment, HTTP destinations or secrets. Listing tools (for `check`,
    /// `list`, `schema` or `lock`, i.e. before anyone approved the plugin) must not hand
    /// unreviewed code what its policy grants.
    fn read_tools(
        &self,
        path: &Path,
        pre: &PluginPre<PluginState>,
        policy: &SandboxPolicy,
    ) -> Result<Vec<PluginToolMeta>, PluginError> {
        let policy = &SandboxPolicy::with_limits(policy.limits.clone());
        let startup = |reason: String| PluginError::Startup {
            path: path.to_owned(),
            reason,
        };
        let probe = PluginImage {
            sha256: [0; 32],
            policy_sha256: None,
            name: path.display().to_string(),
            path: path.to_owned(),
            pre: pre.clone(),
            policy: policy.clone(),
            imports: Vec::new(),
            granted_dirs: Arc::from([]),
            descriptors: Arc::clone(&self.inner.descriptors),
            _host: Arc::clone(&self.inner),
            metas: Vec::new(),
            validators: Vec::new(),
            output_validators: Vec::new(),
            warnings: Vec::new(),
        };
        blocking::block_on(instance::read_tools(&probe)).map_err(startup)
    }
}

/// In a directory loaded recursively, a read-write grant inside it would let a plugin add
/// plugins or policies that the next load picks up: refuse such a plugin, naming the grant.
fn writable_grant_within(plugin: &LoadedPlugin, root: &Path) -> Option<PluginError> {
    let (index, grant) = plugin
        .policy()
        .dirs
        .iter()
        .enumerate()
        .find(|(_, grant)| grant.writable && grant.host.starts_with(root))?;
    Some(PluginError::Policy {
        path: plugin.path().to_owned(),
        source: PolicyError::Invalid {
            path: SandboxPolicy::path_for(plugin.path()),
            key: format!("dirs[{index}].host"),
            message: format!(
                "is {}, a read-write directory inside {}, which is loaded recursively: the \
                 plugin could add plugins or policies there; grant a directory outside it, \
                 make it read-only, or load without --recursive",
                grant.host.display(),
                root.display()
            ),
        },
    })
}

fn tool_list_error(path: &Path, problem: ToolListProblem) -> PluginError {
    let path = path.to_owned();
    match problem {
        ToolListProblem::Empty => PluginError::NoTools { path },
        ToolListProblem::BadName { name, reason } => PluginError::InvalidToolName {
            path,
            name,
            reason: reason.to_owned(),
        },
        ToolListProblem::Duplicate(name) => PluginError::DuplicateToolName { path, name },
        ToolListProblem::BadSchema { tool, reason } => {
            PluginError::InvalidSchema { path, tool, reason }
        }
        ToolListProblem::TooLarge(reason) => PluginError::ToolListTooLarge { path, reason },
    }
}

/// How [`PluginHost::load_dir_with`] reads a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadDirOptions {
    /// Also load plugins in subdirectories (links to directories are not followed).
    pub recursive: bool,
    /// With `recursive`, also read build output directories (named `target`), which are
    /// skipped by default: they hold intermediate copies of every plugin built there.
    pub include_build_dirs: bool,
    /// Load whatever is there, even if the directory has a lock file (to write a new one).
    pub ignore_lock: bool,
    /// The directory must have a lock file: without one, loading fails
    /// ([`crate::LockError::Missing`]) instead of loading everything. `serve` sets it for every
    /// reload of a directory that was locked when it started (`--locked` sets it from the
    /// start), so that deleting the lock never unlocks it.
    pub locked: bool,
}

impl LoadDirOptions {
    /// Sets whether subdirectories are read too.
    pub fn recursive(mut self, recursive: bool) -> Self {
        self.recursive = recursive;
        self
    }

    /// Sets whether the directory's lock file is ignored (see [`crate::LockFile`]).
    pub fn ignore_lock(mut self, ignore: bool) -> Self {
        self.ignore_lock = ignore;
        self
    }

    /// Sets whether the directory must have a lock file (see [`LoadDirOptions::locked`]).
    pub fn locked(mut self, locked: bool) -> Self {
        self.locked = locked;
        self
    }

    /// Sets whether `target` directories are read when reading subdirectories.
    pub fn include_build_dirs(mut self, include: bool) -> Self {
        self.include_build_dirs = include;
        self
    }

    /// The files of `dir` these options read, sorted.
    fn files(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        let mut pending = vec![dir.to_owned()];
        while let Some(current) = pending.pop() {
            for entry in std::fs::read_dir(&current)? {
                let Ok(entry) = entry else { continue };
                let path = entry.path();
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if is_dir {
                    let build_output = entry.file_name() == "target" && !self.include_build_dirs;
                    if self.recursive && !build_output {
                        pending.push(path);
                    }
                } else {
                    files.push(path);
                }
            }
        }
        files.sort();
        Ok(files)
    }

    /// The `*.wasm` files these options take from `dir`, sorted.
    pub fn plugin_files(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut files = self.files(dir)?;
        files.retain(|path| path.extension().is_some_and(|ext| ext == "wasm"));
        Ok(files)
    }

    /// Warnings about the `*.toml` files of `dir` that are the policy of no plugin (a policy
    /// file with a typo in its name silently grants nothing, or not what was meant).
    fn stray_policies(&self, dir: &Path) -> Vec<String> {
        let Ok(files) = self.files(dir) else {
            return Vec::new();
        };
        let plugins: Vec<&PathBuf> = files
            .iter()
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        files
            .iter()
            .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
            .filter(|path| {
                let name = path.file_name().unwrap_or_default();
                name != "Cargo.toml"
                    && name != crate::lock::LOCK_FILE
                    && name != crate::trust::TRUST_FILE
            })
            .filter(|policy| {
                !plugins
                    .iter()
                    .any(|p| SandboxPolicy::path_for(p) == **policy)
            })
            .map(|policy| {
                let name = policy.file_name().unwrap_or_default().to_string_lossy();
                let stem = name
                    .strip_suffix(".wasm.policy.toml")
                    .or_else(|| name.strip_suffix(".policy.toml"))
                    .or_else(|| name.strip_suffix(".toml"))
                    .unwrap_or(&name);
                let plugin = policy.with_file_name(format!("{stem}.wasm"));
                if plugins.contains(&&plugin) {
                    format!(
                        "{} is not read: the policy of {} must be named {}",
                        policy.display(),
                        plugin.display(),
                        SandboxPolicy::path_for(&plugin).display()
                    )
                } else {
                    format!(
                        "{} is the policy of no plugin (there is no {}); a policy file is named \
                         after its plugin: NAME.policy.toml beside NAME.wasm",
                        policy.display(),
                        plugin.display()
                    )
                }
            })
            .collect()
    }
}

/// The plugins of a directory: those that loaded, and why the others did not.
#[derive(Debug)]
#[non_exhaustive]
pub struct PluginDir {
    /// The plugins that loaded, sorted by file name.
    pub plugins: Vec<LoadedPlugin>,
    /// The files that were refused, with the reasons.
    pub failures: Vec<PluginError>,
    /// Other things worth telling the operator: policy files that belong to no plugin.
    pub warnings: Vec<String>,
}

impl PluginDir {
    /// Definitions of every tool of every plugin, for one new session.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.plugins
            .iter()
            .flat_map(LoadedPlugin::definitions)
            .collect()
    }
}

/// A compiled, validated plugin, shared by every session made from it.
pub(crate) struct PluginImage {
    /// The SHA-256 of the component's bytes.
    sha256: [u8; 32],
    /// The SHA-256 of its policy file, in hex, if it was loaded with one.
    policy_sha256: Option<String>,
    name: String,
    path: PathBuf,
    pre: PluginPre<PluginState>,
    policy: SandboxPolicy,
    /// What the component imports (WASI interfaces), for operators.
    imports: Vec<String>,
    /// The granted directories, opened at load, in the order of `policy.dirs`.
    granted_dirs: Arc<[descriptors::HeldDir]>,
    /// The host's budget of open files and directories.
    descriptors: Arc<descriptors::HostDescriptors>,
    /// Keeps the host (and its epoch ticker, which enforces time limits) alive while any
    /// plugin or session made from it lives.
    _host: Arc<HostInner>,
    /// The tools as validated at load.
    metas: Vec<ToolMeta>,
    /// The compiled input schema of each tool, in the order of `metas`.
    validators: Vec<Arc<validate::CheckedSchema>>,
    /// The compiled output schema of each tool that has one, in the order of `metas`.
    output_validators: Vec<Option<Arc<validate::CheckedSchema>>>,
    /// What the host noticed at load and did about it (hints it dropped).
    warnings: Vec<String>,
}

/// A plugin that was compiled and validated. Cheap to clone.
///
/// Each call of [`definitions`](LoadedPlugin::definitions) is a new session: registering its
/// definitions creates one fresh instance shared by all of the plugin's tools.
#[derive(Clone)]
pub struct LoadedPlugin {
    image: Arc<PluginImage>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.image.name)
            .field("path", &self.image.path)
            .field("tools", &self.tool_names())
            .finish()
    }
}

impl LoadedPlugin {
    /// The plugin's name: its file name without `.wasm`.
    pub fn name(&self) -> &str {
        &self.image.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.image.path
    }

    /// The tools it offers, as validated at load.
    pub fn tools(&self) -> &[ToolMeta] {
        &self.image.metas
    }

    /// The SHA-256 of the component's bytes: what identifies this build of the plugin.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.image.sha256
    }

    /// The SHA-256 (hex) of the policy file it was loaded with, if any.
    pub fn policy_sha256(&self) -> Option<&str> {
        self.image.policy_sha256.as_deref()
    }

    /// The policy it runs under: its limits and grants.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.image.policy
    }

    /// What the component imports (e.g. `wasi:filesystem/preopens@0.2.6`): what it may ask
    /// for, compared with what its policy grants.
    pub fn imports(&self) -> &[String] {
        &self.image.imports
    }

    /// Checks `input_json` as a call of `tool` would before the plugin runs — its size
    /// against the input limit, its JSON syntax, and the tool's input schema — without calling
    /// anything. The error is the one the call would return (`InvalidArgument`, listing each
    /// schema problem with its JSON path); an unknown tool is `InvalidArgument` too.
    pub fn check_input(&self, tool: &str, input_json: &str) -> Result<(), ToolError> {
        let Some(index) = self.image.metas.iter().position(|meta| meta.name == tool) else {
            return Err(ToolError::InvalidArgument(format!(
                "plugin '{}' has no tool '{tool}'; its tools: {}",
                self.image.name,
                self.tool_names().join(", ")
            )));
        };
        instance::check_input(
            &self.image.policy.limits,
            &self.image.validators[index],
            tool,
            input_json,
        )
    }

    /// The version of the WIT contract it was built against: `"0.1.0"` or `"0.2.0"`.
    pub fn contract_version(&self) -> &'static str {
        self.image.pre.version()
    }

    /// What the host noticed when loading it and did about it, such as a tool's claim to be
    /// read-only that its policy contradicts (the claim is dropped). Also logged at load.
    pub fn warnings(&self) -> &[String] {
        &self.image.warnings
    }

    /// The names of its tools.
    pub fn tool_names(&self) -> Vec<&str> {
        self.image.metas.iter().map(|m| m.name.as_str()).collect()
    }

    /// Definitions of every tool of the plugin, for one new session. Registering them creates
    /// one instance, shared by these tools and by no one else.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        let session = Arc::new(SessionOwner::new(Arc::clone(&self.image)));
        self.image
            .metas
            .iter()
            .zip(&self.image.validators)
            .zip(&self.image.output_validators)
            .map(|((meta, validator), output)| {
                let session = Arc::clone(&session);
                let meta = meta.clone();
                let validator = Arc::clone(validator);
                let output = output.clone();
                let factory: ToolDefinition = Arc::new(move || {
                    PluginTool::create(&session, &meta, &validator, output.clone())
                });
                factory
            })
            .collect()
    }
}
