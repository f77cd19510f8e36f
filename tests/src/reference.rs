//! The MCP reference servers beside our plugins that offer the same tools, for the
//! side-by-side tests (`cli/tests/command/reference/`) and the benchmark
//! (`cli/benches/reference.rs`): each original pinned, its installer, how it is started, and
//! how our plugin is served by `llm-worker serve` in its place, both connected with rmcp's
//! client over stdio.
//!
//! The originals are installed once per target directory, under the `CARGO_TARGET_TMPDIR` of
//! the caller (`target/tmp/reference-servers/`), so a second run (and CI on a warm cache)
//! installs nothing. Without Node/npm or Python 3 with `venv` their callers say they are
//! skipped ([`skip`]), except under CI (`CI` set), where that is a failure.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};

use crate::{ScratchDir, plugin_path, scratch_dir};

pub mod site;

/// A reference server, pinned.
#[derive(Clone, Copy, Debug)]
pub enum Original {
    /// An npm package whose `bin` is the server.
    Npm {
        /// The package's name.
        package: &'static str,
        /// Its version, exactly.
        version: &'static str,
        /// The name of the server's executable.
        bin: &'static str,
    },
    /// A PyPI package whose console script `script` is the server.
    PyPi {
        /// The package's name.
        package: &'static str,
        /// Its version, exactly.
        version: &'static str,
        /// The name of the server's console script.
        script: &'static str,
    },
}

/// `mcp-server-time`, beside our `time` plugin.
pub const TIME: Original = Original::PyPi {
    package: "mcp-server-time",
    version: "2026.10.19",
    script: "mcp-server-time",
};

/// `mcp-server-fetch`, beside our `fetch` plugin.
pub const FETCH: Original = Original::PyPi {
    package: "mcp-server-fetch",
    version: "2026.10.24",
    script: "mcp-server-fetch",
};

/// Not a server: PyNaCl (libsodium), for the independent check of cosign's key files
/// (`cli/tests/command/cosign_key.py`); see [`python_with`].
pub const PYNACL: Original = Original::PyPi {
    package: "PyNaCl",
    version: "1.6.2",
    script: "python",
};

/// Not a server: Python's `cryptography`, for the test Sigstore authority
/// (`cli/tests/command/sigstore_sign.py`) and the key checks; see [`python_with`].
pub const CRYPTOGRAPHY: Original = Original::PyPi {
    package: "cryptography",
    version: "48.0.0",
    script: "python",
};

/// `python3` with `packages` (PyPI ones, each installed in its venv on first use, as the
/// reference servers are) importable through `PYTHONPATH`; `None` (the caller is skipped, see
/// [`skip`]) where one cannot be installed.
pub fn python_with(target_tmp: &Path, packages: &[Original]) -> Option<Command> {
    let mut paths = Vec::new();
    for package in packages {
        let python = package.program(target_tmp)?;
        let lib = python.parent()?.parent()?.join("lib");
        let site = std::fs::read_dir(&lib)
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("site-packages"))
            .find(|path| path.is_dir())?;
        paths.push(site);
    }
    let mut command = Command::new("python3");
    command.env(
        "PYTHONPATH",
        std::env::join_paths(paths).expect("site-packages paths"),
    );
    Some(command)
}

/// `@modelcontextprotocol/server-memory`, beside our `memory` plugin.
pub const MEMORY: Original = Original::Npm {
    package: "@modelcontextprotocol/server-memory",
    version: "2026.8.31",
    bin: "mcp-server-memory",
};

/// `@modelcontextprotocol/server-filesystem`, beside our `filesystem` plugin.
pub const FILESYSTEM: Original = Original::Npm {
    package: "@modelcontextprotocol/server-filesystem",
    version: "2026.8.31",
    bin: "mcp-server-filesystem",
};

impl Original {
    /// Its package's name and version.
    pub fn pin(self) -> (&'static str, &'static str) {
        match self {
            Self::Npm {
                package, version, ..
            }
            | Self::PyPi {
                package, version, ..
            } => (package, version),
        }
    }

    /// The program that runs the server, installed on first use under
    /// `target_tmp/reference-servers/` (pass `env!("CARGO_TARGET_TMPDIR")`); `None` (the
    /// caller is skipped, see [`skip`]) where npm or Python cannot install it.
    ///
    /// # Panics
    ///
    /// If the install directory cannot be made or marked.
    pub fn program(self, target_tmp: &Path) -> Option<PathBuf> {
        let (package, version) = self.pin();
        match self.install(target_tmp) {
            Some(program) => Some(program),
            None => {
                skip(&format!(
                    "the reference server {package} {version} could not be installed (no {}, \
                     or no access to its registry)",
                    match self {
                        Self::Npm { .. } => "Node/npm",
                        Self::PyPi { .. } => "Python 3 with venv",
                    }
                ));
                None
            }
        }
    }

    /// Installs the server (once: a finished install is marked) and gives its program, or
    /// `None` where it cannot be installed.
    fn install(self, target_tmp: &Path) -> Option<PathBuf> {
        // One install of a package at a time (its tests run in parallel); other packages'
        // installs go on meanwhile.
        static INSTALLING: Mutex<BTreeMap<&'static str, Arc<Mutex<()>>>> =
            Mutex::new(BTreeMap::new());
        let lock = Arc::clone(
            INSTALLING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(self.pin().0)
                .or_default(),
        );
        let _one = lock.lock().unwrap_or_else(|p| p.into_inner());
        let root = target_tmp.join("reference-servers");
        let (package, version) = self.pin();
        let home = root.join(format!("{}@{version}", package.replace('/', "+")));
        let program = match self {
            Self::Npm { bin, .. } => home.join("node_modules/.bin").join(bin),
            Self::PyPi { script, .. } => home.join("bin").join(script),
        };
        // A finished install is marked; one cut short is started over.
        let done = home.join(".installed");
        if done.is_file() && program.is_file() && interpreter_exists(&program) {
            return Some(program);
        }
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", home.display()));
        let installed = match self {
            Self::Npm { .. } => run_installer(
                Command::new("npm")
                    // No package's install scripts run (the servers have none).
                    .args(["install", "--ignore-scripts", "--no-audit", "--no-fund"])
                    .arg("--loglevel=error")
                    .arg("--prefix")
                    .arg(&home)
                    .arg(format!("{package}@{version}")),
                "npm",
            ),
            Self::PyPi { .. } => {
                let requirement = format!("{package}=={version}");
                // A venv without a pip of its own, filled by the system's pip (`--python`, pip
                // 22.3 and later): making the venv's own pip was a third of the install's time.
                // Where the system's pip cannot do that, the venv gets its own.
                let python = home.join("bin/python");
                let system_pip = || {
                    let mut command = Command::new("python3");
                    command
                        .args(["-m", "pip", "--python"])
                        .arg(&python)
                        .arg("--disable-pip-version-check");
                    command
                };
                let bare_venv = run_installer(
                    Command::new("python3")
                        .args(["-m", "venv", "--without-pip"])
                        .arg(&home),
                    "python3 -m venv --without-pip",
                );
                let system_pip_works = bare_venv
                    && system_pip()
                        .arg("--version")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|status| status.success());
                if system_pip_works {
                    run_installer(
                        system_pip().args(["install", "--quiet"]).arg(&requirement),
                        "pip --python",
                    )
                } else {
                    run_installer(
                        Command::new("python3")
                            .args(["-m", "venv", "--clear"])
                            .arg(&home),
                        "python3 -m venv",
                    ) && run_installer(
                        Command::new(home.join("bin/pip"))
                            .args(["install", "--quiet", "--disable-pip-version-check"])
                            .arg(&requirement),
                        "pip",
                    )
                }
            }
        };
        if !installed || !program.is_file() {
            return None;
        }
        std::fs::write(&done, "").expect("mark the install done");
        Some(program)
    }
}

/// Whether the interpreter a script names on its `#!` line exists (a program that is no script
/// has none to miss). A venv's scripts name its Python by absolute path: a target directory
/// copied or moved elsewhere keeps scripts naming where it was, which cannot be run ("No such
/// file or directory"), so such an install is made again.
fn interpreter_exists(program: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 512];
    let read = std::fs::File::open(program).and_then(|mut file| file.read(&mut head));
    let Ok(read) = read else {
        return false;
    };
    let Some(line) = head[..read].strip_prefix(b"#!") else {
        return true;
    };
    let line = line.split(|byte| *byte == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    line.split_whitespace()
        .next()
        .is_some_and(|interpreter| Path::new(interpreter).exists())
}

/// Starts installing every original in the background (a thread each, once per process), so
/// that the installs (most of a minute of a first test run) overlap the tests that come before
/// those that need them. [`Original::program`] waits for its package's install, or does it.
pub fn install_in_background(target_tmp: &Path) {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        for original in [FETCH, FILESYSTEM, MEMORY, TIME] {
            let target_tmp = target_tmp.to_owned();
            std::thread::spawn(move || original.install(&target_tmp));
        }
    });
}

/// Runs an installer, its output on stderr; whether it succeeded.
fn run_installer(command: &mut Command, what: &str) -> bool {
    match command.stdout(Stdio::null()).status() {
        Ok(status) if status.success() => true,
        Ok(status) => {
            eprintln!("{what} failed: {status}");
            false
        }
        Err(error) => {
            eprintln!("cannot run {what}: {error}");
            false
        }
    }
}

/// Says that a test (or a benchmark's row) cannot run here; fails under CI, where everything
/// must be installed.
///
/// # Panics
///
/// Under CI.
pub fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{why}, and CI is set");
    }
    eprintln!("SKIPPED: {why}");
}

/// An MCP client session with a server run as a child process.
pub type Session = RunningService<RoleClient, ()>;

/// Connects rmcp's client to `command` over its stdio (its stderr is the caller's).
///
/// # Panics
///
/// If the command cannot start or does not initialize.
pub async fn connect(command: tokio::process::Command) -> Session {
    let program = format!("{:?}", command.as_std().get_program());
    let transport = TokioChildProcess::builder(command)
        .stderr(Stdio::inherit())
        .spawn()
        .map(|(transport, _)| transport)
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    ().serve(transport)
        .await
        .unwrap_or_else(|e| panic!("{program} did not initialize: {e}"))
}

/// The original, run with `args` (and `env`) in `dir`, connected.
pub async fn original(
    program: &Path,
    args: &[&OsStr],
    env: &[(&str, &OsStr)],
    dir: &Path,
) -> Session {
    let mut command = tokio::process::Command::new(program);
    command.args(args).current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    connect(command).await
}

/// A plugin directory holding our plugin `plugin` and the files `beside` it (its policy,
/// usually: `("fetch.policy.toml", "…")`), under a scratch directory that also holds the
/// cache; the scratch directory is removed when the second value is dropped.
///
/// # Panics
///
/// If a file cannot be written.
pub fn plugin_dir(plugin: &str, beside: &[(&str, &str)]) -> (PathBuf, ScratchDir) {
    let root = scratch_dir(&format!("reference-{plugin}"));
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    for (name, text) in beside {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    (dir, root)
}

/// `llm-worker serve` (the command at `cli`: pass `env!("CARGO_BIN_EXE_llm-worker")`) of a
/// directory made by [`plugin_dir`], connected.
///
/// # Panics
///
/// If it does not start.
pub async fn ours(cli: &Path, dir: &Path) -> Session {
    let cache = crate::compiled_cache();
    let mut command = tokio::process::Command::new(cli);
    command
        .arg("serve")
        .arg("--cache-dir")
        .arg(cache)
        .arg(dir)
        .env_remove("RUST_LOG");
    connect(command).await
}

/// The local timezone the time original is told (ours names UTC always: the host reads a
/// plugin's tool list without its grants, so no environment can name another).
pub const TIME_LOCAL: &str = "UTC";

/// The time original, told that the local timezone is [`TIME_LOCAL`], run in `dir`.
pub async fn time_original(program: &Path, dir: &Path) -> Session {
    let args = [OsStr::new("--local-timezone"), OsStr::new(TIME_LOCAL)];
    original(program, &args, &[], dir).await
}

/// The policy shipped beside our time plugin.
pub const TIME_POLICY: &str = include_str!("../../plugins/time/time.policy.toml");

/// The fetch original, with `--allow-private-ips` if `private` (it refuses loopback
/// addresses without), in a scratch directory of its own (removed when the second value is
/// dropped).
///
/// It is run with its own bin directory as its `PATH`, without Node, so readabilipy takes its
/// pure-Python path: with Node it would install Readability.js from npm on its first call
/// (racing when tests call it at once) and extract the article with it.
pub async fn fetch_original(program: &Path, private: bool) -> (Session, ScratchDir) {
    let scratch = scratch_dir("reference-fetch-original");
    let args: &[&OsStr] = if private {
        &[OsStr::new("--allow-private-ips")]
    } else {
        &[]
    };
    let bin = program.parent().expect("the venv's bin").as_os_str();
    let session = original(program, args, &[("PATH", bin)], &scratch).await;
    (session, scratch)
}

/// A policy for our fetch plugin granting exactly `grants` (and the fetch prompt the same),
/// and `more` (TOML tables: `[limits]`, `[env]`).
pub fn fetch_policy(grants: &[String], more: &str) -> String {
    let list = grants
        .iter()
        .map(|grant| format!("{grant:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("[http]\nallow = [{list}]\n\n[prompts.http]\nallow = [{list}]\n\n{more}\n")
}

/// The memory original, keeping its graph in `file` (run in its directory).
pub async fn memory_original(program: &Path, file: &Path) -> Session {
    let dir = file.parent().expect("the file's directory");
    original(program, &[], &[("MEMORY_FILE_PATH", file.as_os_str())], dir).await
}

/// The policy shipped beside our memory plugin: `../memory-data`, read-write, as `/memory`.
pub const MEMORY_POLICY: &str = include_str!("../../plugins/memory/memory.policy.toml");

/// A plugin directory ([`plugin_dir`]) of our memory plugin under the shipped policy, with
/// `extra` appended to it; its data directory (made here, where the policy says), its plugin
/// directory and the scratch directory holding both.
///
/// # Panics
///
/// If a file or directory cannot be made.
pub fn memory_dir(extra: &str) -> (PathBuf, PathBuf, ScratchDir) {
    let (dir, scratch) = plugin_dir(
        "memory",
        &[("memory.policy.toml", &format!("{MEMORY_POLICY}{extra}"))],
    );
    let data = scratch.join("memory-data");
    std::fs::create_dir(&data).expect("mkdir memory-data");
    (dir, data, scratch)
}
