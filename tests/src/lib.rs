//! Helpers for the end-to-end tests: build the plugins in `plugins/` for `wasm32-wasip2` once
//! per test run, load them into one shared [`PluginHost`], give each test a scratch directory
//! that goes with it, an HTTP server ([`http_server`]), ways to wait ([`wait`]) and the MCP
//! reference servers beside our plugins ([`reference`](mod@reference)).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use llm_worker::events::{ToolEvent, ToolEventKind};
use llm_worker::{DirGrant, Limits, LoadedPlugin, PluginHost, SandboxPolicy};

pub mod bench;
pub mod http_server;
pub mod logs;
pub mod reference;
pub mod wait;
pub mod wat;

/// The value of the header `name` (any case) in an HTTP answer's `head` as it was read, if
/// it has one.
pub fn header_in<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (found, value) = line.split_once(':')?;
        found.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// The repository's root directory.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new(".."))
}

/// Builds every crate of `plugins/` (release, `wasm32-wasip2`) once per test run, installing
/// the target with rustup if needed, and returns the directory holding the `.wasm` files.
///
/// Every test binary calls this; the first to get here builds, under a lock that the others
/// wait on, and leaves a stamp of what it built from (the sources of the plugins and of the
/// SDK they use, the toolchain) and what it built. A process that finds the stamp matching
/// builds nothing: a test run builds the plugins once, however many binaries it has.
///
/// # Panics
///
/// If the build fails: the tests cannot run without the plugins.
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let plugins = repo_root().join("plugins");
        let target_dir = plugins.join("target");
        let out = target_dir.join("wasm32-wasip2").join("release");
        std::fs::create_dir_all(&target_dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", target_dir.display()));
        let lock_path = target_dir.join("llm-worker-tests.lock");
        let lock = std::fs::File::create(&lock_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
        // Held until the build is done and stamped: another test binary waits here.
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
        let stamp = target_dir.join("llm-worker-tests.stamp");
        if std::fs::read_to_string(&stamp).ok() == Some(build_fingerprint(&plugins, &out)) {
            return out;
        }
        // Installing the target is quick when it is there already; without rustup (another
        // toolchain manager) the build below says what is missing.
        let _ = Command::new("rustup")
            .args(["target", "add", "wasm32-wasip2"])
            .status();
        let built = build_for_wasm(&plugins, &target_dir);
        std::fs::write(&stamp, build_fingerprint(&plugins, &built))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", stamp.display()));
        built
    })
}

/// What the plugins of `plugins/` are built from and into: each source file of the plugins,
/// the SDK, its macros and the WIT (path, size, modification time), the cargo that builds
/// them, and each plugin's `.wasm` in `out`. Text, one line per file.
fn build_fingerprint(plugins: &Path, out: &Path) -> String {
    fn line(fingerprint: &mut String, path: &Path) {
        let (size, modified) = std::fs::metadata(path)
            .map(|m| (m.len(), m.modified().ok()))
            .unwrap_or((0, None));
        let modified = modified
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos());
        fingerprint.push_str(&format!("{} {size} {modified}\n", path.display()));
    }
    fn walk(fingerprint: &mut String, dir: &Path) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "target") {
                    walk(fingerprint, &path);
                }
            } else {
                line(fingerprint, &path);
            }
        }
    }
    let root = repo_root();
    let mut fingerprint = String::new();
    // The root manifest: the SDK takes its version and edition from it.
    line(&mut fingerprint, &root.join("Cargo.toml"));
    for dir in [
        plugins,
        &root.join("guest-sdk"),
        &root.join("guest-macros"),
        // The macros check what a plugin declares by its rules.
        &root.join("rules"),
        &root.join("wit"),
    ] {
        walk(&mut fingerprint, dir);
    }
    if let Some(cargo) = std::env::var_os("CARGO") {
        line(&mut fingerprint, Path::new(&cargo));
    }
    for crate_name in plugin_crates(plugins) {
        line(
            &mut fingerprint,
            &out.join(format!("{}.wasm", crate_name.replace('-', "_"))),
        );
    }
    fingerprint
}

/// The names of the crates of the plugins' workspace (`plugins/*` and `plugins/fixtures/*`).
fn plugin_crates(plugins: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for dir in [plugins.to_owned(), plugins.join("fixtures")] {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml"));
            let name = manifest.ok().and_then(|text| {
                text.lines().find_map(|line| {
                    let value = line.strip_prefix("name")?.trim_start().strip_prefix('=')?;
                    Some(value.trim().trim_matches('"').to_owned())
                })
            });
            names.extend(name);
        }
    }
    names.sort();
    names
}

/// Builds the crate or workspace in `dir` (release, `wasm32-wasip2`) into `target_dir` and
/// returns the directory holding the `.wasm` files.
///
/// # Panics
///
/// If cargo cannot run or the build fails.
pub fn build_for_wasm(dir: &Path, target_dir: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(target_dir)
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {}: {e}", dir.display()));
    assert!(
        status.success(),
        "building {} for wasm32-wasip2 failed",
        dir.display()
    );
    target_dir.join("wasm32-wasip2").join("release")
}

/// The path of the built plugin `name` (e.g. `"counter"`).
pub fn plugin_path(name: &str) -> PathBuf {
    plugin_dir().join(format!("{name}.wasm"))
}

/// The path of the plugin `name` as the guest SDK built it for contract 0.3.0 (one call at a
/// time per instance), kept in `tests/fixtures/contract-0.3/` to show that such plugins load
/// and behave as before: `counter`, `sleeper`, `trapper`, `holder`, `text`, `greet`.
pub fn plugin_v03_path(name: &str) -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    // Every crate of the workspace is one level below its root (this one is `tests/`).
    crate_dir
        .join("..")
        .join("tests")
        .join("fixtures")
        .join("contract-0.3")
        .join(format!("{name}.wasm"))
}

/// One host shared by the tests of a process, with the default limits and the shared
/// [`compiled_cache`].
pub fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| {
        PluginHost::builder()
            .cache_dir(compiled_cache())
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The compiled cache the tests share (`--cache-dir` of the command, `cache_dir` of a host):
/// the default cache directory under [`cache_home`].
///
/// Compiling a plugin is most of what a test that starts `llm-worker` spends; with a cache of
/// its own, every test compiled the same plugins again (most of a test run's CPU time went
/// there). Sharing one is sound because an entry is bound to the SHA-256 of the plugin's bytes
/// and to the engine's settings, written atomically and checked before use (`cache.rs`); the
/// tests of the cache itself keep directories of their own.
pub fn compiled_cache() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| cache_home().join("llm-worker").join("compiled"))
}

/// The `XDG_CACHE_HOME` of the tests that run the command as a user does (without
/// `--cache-dir`): `<target>/tmp/llm-worker-cache-home`, beside the test binaries, where
/// `./scripts/demo.sh` compiles the plugins too and later runs find what earlier ones compiled
/// (entries of plugins changed since are never read again; `cargo clean` removes them).
///
/// Where the host would not trust that directory ([`PluginHost::check_cache_dir`]: a checkout
/// others may write, made under umask 002, or owned by another user), a directory private to
/// this process instead, so that no test sees the host refuse its cache.
pub fn cache_home() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // A test binary is `<target>/<profile>/deps/NAME-HASH` (`<target>/<triple>/…` with
        // `--target`: then this cache is not the demo's, which costs only compiling again).
        let beside_the_binaries = std::env::current_exe().ok().and_then(|exe| {
            let deps = exe.parent()?;
            let target = (deps.file_name()? == "deps").then(|| deps.parent()?.parent())??;
            Some(target.join("tmp").join("llm-worker-cache-home"))
        });
        if let Some(home) = beside_the_binaries
            && PluginHost::check_cache_dir(home.join("llm-worker").join("compiled")).is_ok()
        {
            return home;
        }
        // Private to this process (0700, a fresh name), removed by nobody: a few megabytes in
        // the system's temporary directory, on machines where the first choice is refused.
        tempfile::Builder::new()
            .prefix("llm-worker-tests-cache-")
            .tempdir()
            .map(tempfile::TempDir::keep)
            .unwrap_or_else(|e| panic!("cannot create a cache directory for the tests: {e}"))
    })
}

/// Approves every plugin of `dir` as it is now: writes `dir`'s lock file, as `llm-worker lock
/// DIR` does (the test fails if a plugin does not load).
pub fn lock_dir(dir: &Path) {
    let loaded = host()
        .load_dir_with(
            dir,
            llm_worker::LoadDirOptions::default().ignore_lock(true),
            |_, _, _| {},
        )
        .expect("load");
    assert!(loaded.failures.is_empty(), "{:?}", loaded.failures);
    llm_worker::lock::LockFile::of(dir, &loaded.plugins)
        .write(dir)
        .expect("write the lock");
}

/// The plugin `name`, built and loaded once per process.
pub fn plugin(name: &str) -> LoadedPlugin {
    static LOADED: OnceLock<Mutex<HashMap<String, LoadedPlugin>>> = OnceLock::new();
    let loaded = LOADED.get_or_init(Default::default);
    let mut loaded = loaded.lock().unwrap_or_else(|p| p.into_inner());
    loaded
        .entry(name.to_owned())
        .or_insert_with(|| {
            host()
                .load(plugin_path(name))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .clone()
}

/// The example plugins of `plugins/` (not the fixtures).
pub const EXAMPLE_PLUGINS: [&str; 6] = ["greet", "counter", "notes", "calc", "text", "search"];

/// Every tool of the example plugins, sorted by name.
pub const EXAMPLE_TOOLS: [&str; 12] = [
    "add",
    "add_note",
    "convert_case",
    "count",
    "divide",
    "greet",
    "isqrt",
    "join",
    "list_notes",
    "peek",
    "search",
    "stats",
];

/// A session of `plugin` alone: its tools registered in a new worker.
///
/// # Panics
///
/// If registering fails.
pub fn session(plugin: &LoadedPlugin) -> llm_worker::ToolServerHandle {
    let mut worker = llm_worker::Worker::new();
    worker
        .register_tools(plugin.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    worker.tool_server_handle()
}

/// A fresh, empty directory for one test (under the system's temporary directory), removed
/// with everything in it when dropped: keep it for as long as the test uses what is in it.
#[derive(Debug)]
pub struct ScratchDir(tempfile::TempDir);

impl ScratchDir {
    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// A [`ScratchDir`] named after `name` (`llm-worker-tests-NAME-XXXXXX`).
///
/// # Panics
///
/// If it cannot be created.
pub fn scratch_dir(name: &str) -> ScratchDir {
    tempfile::Builder::new()
        .prefix(&format!("llm-worker-tests-{name}-"))
        .tempdir()
        .map(ScratchDir)
        .unwrap_or_else(|e| panic!("cannot create a scratch directory for {name}: {e}"))
}

/// The message of a failed tool call; panics if the call succeeded or failed otherwise.
pub fn error_message(result: Result<String, llm_worker::ToolServerError>) -> String {
    match result {
        Err(llm_worker::ToolServerError::ToolExecution(message)) => message,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

/// A fresh directory holding greet and `slow.wasm` ([`wat::start_gated_on_environment`]) with
/// a policy granting it an environment variable, so that every instance made for a session
/// spins in its start code for as long as `timeout_ms` lets it (loading it stays quick:
/// listing tools runs a plugin with no grants). Loaded with the shared host; the directory
/// goes when the returned [`ScratchDir`] is dropped.
///
/// # Panics
///
/// If a file cannot be written or a plugin does not load.
pub fn greet_beside_a_slow_starter(
    name: &str,
    timeout_ms: u64,
) -> (llm_worker::PluginDir, ScratchDir) {
    let dir = scratch_dir(name);
    let write = |file: &str, bytes: &[u8]| {
        std::fs::write(dir.join(file), bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
    };
    write("slow.wasm", &wat::start_gated_on_environment());
    write(
        "slow.policy.toml",
        format!("[env]\nset = {{ SPIN = \"1\" }}\n\n[limits]\ntimeout_ms = {timeout_ms}\n")
            .as_bytes(),
    );
    std::fs::copy(plugin_path("greet"), dir.join("greet.wasm")).unwrap_or_else(|e| panic!("{e}"));
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.failures.is_empty(), "{:?}", loaded.failures);
    (loaded, dir)
}

/// The sleeper fixture loaded with `limits` and a fresh directory granted as `/control`, for
/// its `hold` tool: each call logs `holding` as it begins and holds its instance until the
/// test calls [`Release::release`] (or the call's time limit ends it). A barrier the test
/// releases, so that a test shows two calls inside at once, or one waiting behind another,
/// without a sleep standing in for either.
///
/// # Panics
///
/// If the directory cannot be made or the plugin does not load.
pub fn held_sleeper(name: &str, limits: Limits) -> (LoadedPlugin, Release) {
    let dir = scratch_dir(name);
    let control = dir
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut policy = SandboxPolicy::with_limits(limits);
    policy.dirs.push(DirGrant {
        host: control,
        guest: "/control".into(),
        writable: false,
    });
    let sleeper = host()
        .load_with_policy(plugin_v03_path("sleeper"), policy)
        .unwrap_or_else(|e| panic!("{e}"));
    (sleeper, Release(dir))
}

/// Ends the `hold` calls of a [`held_sleeper`], those running and those to come.
#[derive(Debug)]
pub struct Release(ScratchDir);

impl Release {
    /// Lets every `hold` call return.
    ///
    /// # Panics
    ///
    /// If the file that releases them cannot be written.
    pub fn release(&self) {
        let path = self.0.join("release");
        std::fs::write(&path, "").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// A sink for [`llm_worker::events::with_tool_events`] that wakes the returned `Notify` when a plugin
/// logs a message containing `needle`: the fixtures log as a slow call begins (the sleeper
/// `sleeping`, `spinning`, `holding`; the trapper `spinning forever`), so a test can await that the call
/// holds its instance instead of sleeping and hoping it does.
pub fn when_logged(
    needle: &'static str,
) -> (
    impl Fn(ToolEvent) + Send + Sync + 'static,
    Arc<tokio::sync::Notify>,
) {
    let logged = Arc::new(tokio::sync::Notify::new());
    let wake = Arc::clone(&logged);
    let sink = move |event: ToolEvent| {
        if let ToolEventKind::Log { message, .. } = &event.kind
            && message.contains(needle)
        {
            // A permit is kept if nobody waits yet: the signal is not lost.
            wake.notify_one();
        }
    };
    (sink, logged)
}
