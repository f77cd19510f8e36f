//! The MCP reference servers beside our plugins that offer the same tools: the same MCP calls
//! are sent to the original (a Node or Python process, installed pinned from npm or PyPI) and
//! to `llm-worker serve` with our plugin, and the answers compared.
//!
//! The originals are installed once per target directory, under `CARGO_TARGET_TMPDIR`
//! (`target/tmp/reference-servers/`), so a second run (and CI on a warm cache) installs
//! nothing. Without Node/npm or Python 3 with `venv` these tests say they are skipped, except
//! under CI (`CI` set), where that is a failure.
//!
//! This module holds the installer, the two kinds of server and the comparisons; each
//! plugin's tests are in its submodule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use llm_worker_tests::{ScratchDir, plugin_path, scratch_dir};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};

mod fetch;
mod filesystem;
mod memory;
mod time;

/// A reference server, pinned.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Original {
    /// An npm package whose `bin` is the server.
    Npm {
        package: &'static str,
        version: &'static str,
        bin: &'static str,
    },
    /// A PyPI package whose console script `script` is the server.
    PyPi {
        package: &'static str,
        version: &'static str,
        script: &'static str,
    },
}

impl Original {
    /// The program that runs the server, installed on first use; `None` (the test is
    /// skipped, see [`skip`]) where npm or Python cannot install it.
    pub(crate) fn program(self) -> Option<PathBuf> {
        // One install at a time: tests of one package run in parallel.
        static INSTALLING: Mutex<()> = Mutex::new(());
        let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reference-servers");
        let (package, version) = match self {
            Self::Npm {
                package, version, ..
            }
            | Self::PyPi {
                package, version, ..
            } => (package, version),
        };
        let home = root.join(format!("{}@{version}", package.replace('/', "+")));
        let program = match self {
            Self::Npm { bin, .. } => home.join("node_modules/.bin").join(bin),
            Self::PyPi { script, .. } => home.join("bin").join(script),
        };
        // A finished install is marked; one cut short is started over.
        let done = home.join(".installed");
        if done.is_file() && program.is_file() {
            return Some(program);
        }
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", home.display()));
        let installed = match self {
            Self::Npm { .. } => run_installer(
                Command::new("npm")
                    .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                    .arg("--prefix")
                    .arg(&home)
                    .arg(format!("{package}@{version}")),
                "npm",
            ),
            Self::PyPi { .. } => {
                run_installer(
                    Command::new("python3").args(["-m", "venv"]).arg(&home),
                    "python3 -m venv",
                ) && run_installer(
                    Command::new(home.join("bin/pip"))
                        .args(["install", "--quiet", "--disable-pip-version-check"])
                        .arg(format!("{package}=={version}")),
                    "pip",
                )
            }
        };
        if !installed || !program.is_file() {
            skip(&format!(
                "the reference server {package} {version} could not be installed (no {}, or \
                 no access to its registry)",
                match self {
                    Self::Npm { .. } => "Node/npm",
                    Self::PyPi { .. } => "Python 3 with venv",
                }
            ));
            return None;
        }
        std::fs::write(&done, "").expect("mark the install done");
        Some(program)
    }
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

/// Says that a test cannot run here; fails under CI, where everything must be installed.
pub(crate) fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{why}, and CI is set");
    }
    eprintln!("SKIPPED: {why}");
}

/// An MCP client session with a server run as a child process.
pub(crate) type Session = RunningService<RoleClient, ()>;

/// Connects rmcp's client to `command` over its stdio (its stderr is the test's).
pub(crate) async fn connect(command: tokio::process::Command) -> Session {
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
pub(crate) async fn original(
    program: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
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
pub(crate) fn plugin_dir(plugin: &str, beside: &[(&str, &str)]) -> (PathBuf, ScratchDir) {
    let root = scratch_dir(&format!("reference-{plugin}"));
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    for (name, text) in beside {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    (dir, root)
}

/// `llm-worker serve` of a directory made by [`plugin_dir`], connected.
pub(crate) async fn ours(dir: &Path) -> Session {
    let cache = dir.parent().expect("the scratch directory").join("cache");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .arg("serve")
        .arg("--cache-dir")
        .arg(cache)
        .arg(dir)
        .env_remove("RUST_LOG");
    connect(command).await
}

/// What an agent sees of a server's tools: each tool's input properties, and which of them
/// are required.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) properties: BTreeSet<String>,
    pub(crate) required: BTreeSet<String>,
}

/// The shapes of the tools `session` lists, by name.
pub(crate) async fn shapes(session: &Session) -> BTreeMap<String, Shape> {
    let tools = session.list_all_tools().await.expect("tools/list");
    tools
        .into_iter()
        .map(|tool| {
            let names = |key: &str| -> BTreeSet<String> {
                match tool.input_schema.get(key) {
                    Some(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
                    Some(serde_json::Value::Array(items)) => items
                        .iter()
                        .filter_map(|item| item.as_str().map(str::to_owned))
                        .collect(),
                    _ => BTreeSet::new(),
                }
            };
            let shape = Shape {
                properties: names("properties"),
                required: names("required"),
            };
            (tool.name.into_owned(), shape)
        })
        .collect()
}

/// Calls `tool` with `arguments` (an object) on `session`: the result's text blocks joined,
/// and whether it is an error result. A protocol error is returned as `Err` with its text.
pub(crate) async fn call_text(
    session: &Session,
    tool: &'static str,
    arguments: serde_json::Value,
) -> Result<(String, bool), String> {
    let result = session
        .call_tool(super::mcp::call(tool, arguments))
        .await
        .map_err(|e| e.to_string())?;
    Ok((super::mcp::text(&result), result.is_error == Some(true)))
}
