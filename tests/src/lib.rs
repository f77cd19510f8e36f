//! Helpers for the end-to-end tests: build the plugins in `plugins/` for `wasm32-wasip2` once,
//! and load them into one shared [`PluginHost`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use llm_worker::{LoadedPlugin, PluginHost};

pub mod bench;
pub mod wat;

/// The repository's root directory.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new(".."))
}

/// Builds every crate of `plugins/` (release, `wasm32-wasip2`) once per process, installing the
/// target with rustup if needed, and returns the directory holding the `.wasm` files.
///
/// # Panics
///
/// If the build fails: the tests cannot run without the plugins.
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let plugins = repo_root().join("plugins");
        let target_dir = plugins.join("target");
        // Installing the target is quick when it is there already; without rustup (another
        // toolchain manager) the build below says what is missing.
        let _ = Command::new("rustup")
            .args(["target", "add", "wasm32-wasip2"])
            .status();
        build_for_wasm(&plugins, &target_dir)
    })
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

/// One host shared by the tests of a process, with the default limits.
pub fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| PluginHost::new().unwrap_or_else(|e| panic!("{e}")))
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

/// A fresh, empty directory for one test (under the system's temporary directory).
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llm-worker-tests-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
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
/// listing tools runs a plugin with no grants). Loaded with the shared host.
///
/// # Panics
///
/// If a file cannot be written or a plugin does not load.
pub fn greet_beside_a_slow_starter(name: &str, timeout_ms: u64) -> llm_worker::PluginDir {
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
    loaded
}
