//! The `llm-worker` command: list, call, check and describe the tool plugins of a directory.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

mod new;
mod serve;
use llm_worker::{
    LOCK_FILE, Limits, LoadDirOptions, LoadedPlugin, LockFile, PluginDir, PluginHost,
    ProviderFormat, ProviderOptions, ToolServerError, Worker, provider_json_with,
};
use serde_json::json;

/// Appends a line to the command's output (written to stdout once, at the end).
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

mod registry;

/// Host LLM tools as sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "llm-worker", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output on stderr (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
}

/// How plugins are loaded and limited: the options of every command that loads a directory.
#[derive(clap::Args)]
struct HostArgs {
    /// Keep compiled plugins here (default: $XDG_CACHE_HOME/llm-worker/compiled).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every plugin afresh; read and write no cache.
    #[arg(long)]
    no_cache: bool,
    /// Default memory limit per instance, in MiB (a policy file may override it).
    #[arg(long, value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(Limits::MEMORY_MIB))]
    memory_mib: u64,
    /// Default time limit per call, in milliseconds (a policy file may override it).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(Limits::TIMEOUT_MS))]
    timeout_ms: u64,
    /// Meter fuel: at most this many units per call (default: no metering; the time limit
    /// applies). Lets policy files set their own fuel.
    #[arg(long, value_name = "UNITS",
          value_parser = clap::value_parser!(u64).range(Limits::FUEL))]
    fuel: Option<u64>,
    /// Reserve N instance slots up front and reuse them (wasmtime's pooling allocator):
    /// plugins start faster, but at most N instances live at once, and each slot reserves
    /// ~8 GiB of address space (not memory). Default: map memory per instance, no cap.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pool: Option<u32>,
    /// Also load plugins from subdirectories of DIR (build output directories named
    /// `target` are skipped, unless --include-target).
    #[arg(short, long)]
    recursive: bool,
    /// With -r: read `target` directories too.
    #[arg(long, requires = "recursive")]
    include_target: bool,
    /// Require DIR/llm-worker.lock: without it, load nothing and fail (instead of loading
    /// whatever is there). A directory that has a lock when `serve` starts stays locked.
    #[arg(long)]
    locked: bool,
    /// Largest plugin file read (and, for `pull`, downloaded), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_plugin_mib: u64,
}

#[derive(Subcommand)]
enum Command {
    /// List the tools of every plugin in DIR: tool, plugin file, description.
    List {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON (one object per tool) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call TOOL with JSON input (from the argument, or stdin if absent) and print its output.
    Call {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// The tool's name.
        tool: String,
        /// The input, a JSON object; read from stdin when absent or `-`.
        json: Option<String>,
    },
    /// Load every plugin in DIR and report, per file, whether it loads, what it imports and
    /// what its policy grants. Exits non-zero if any plugin is refused.
    Check {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Serve the tools of DIR over MCP (tools/list, tools/call): on stdio, the connection is
    /// one session; over --http, each MCP session is one. A session's plugin state is kept
    /// between its calls and seen by no other session.
    Serve {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Pick up added, changed and removed plugin files while serving, and tell the client
        /// (notifications/tools/list_changed). Unchanged plugins keep their state; a broken
        /// new version does not take the working one away.
        #[arg(long)]
        watch: bool,
        /// Serve streamable HTTP on ADDR (HOST:PORT, e.g. 127.0.0.1:8080) instead of stdio:
        /// each MCP session gets its own plugin instances. Off loopback, --token-file is
        /// required.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// With --http: bearer tokens that admit clients, one per line (`Authorization:
        /// Bearer TOKEN`). Without it, on loopback, a token is generated once and kept in
        /// $XDG_STATE_HOME/llm-worker/http-token (readable by you alone).
        #[arg(long, value_name = "FILE", requires = "http")]
        token_file: Option<PathBuf>,
        /// With --http on a loopback address: admit clients without a token. Every user and
        /// process of this machine can then run every tool with your grants and secrets.
        #[arg(long, requires = "http", conflicts_with = "token_file")]
        no_auth: bool,
        /// With --http: most MCP sessions open at once; past it new ones get 503.
        #[arg(long, value_name = "N", default_value_t = 64, requires = "http",
              value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_sessions: u64,
        /// With --http: close a session (and drop its instances) after this many seconds
        /// without requests.
        #[arg(long, value_name = "SECS", default_value_t = 300, requires = "http",
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        idle_timeout: u64,
        /// With --http: a value of the Host header to accept (repeatable; default on
        /// loopback: localhost, 127.0.0.1, ::1; elsewhere any, as tokens are required).
        #[arg(long, value_name = "HOST", requires = "http")]
        allowed_host: Vec<String>,
        /// With --http: a browser origin to accept, e.g. `https://app.example.com`
        /// (repeatable); requests from other origins get 403.
        #[arg(long, value_name = "ORIGIN", requires = "http")]
        allowed_origin: Vec<String>,
        /// With --http: start every session id with PREFIX (this replica's name), for a load
        /// balancer to route each session to its replica (docs/deploy.md).
        #[arg(long, value_name = "PREFIX", requires = "http")]
        session_prefix: Option<String>,
    },
    /// Create a new plugin crate NAME (in the current directory) that builds and loads as
    /// it is.
    New {
        /// The crate's name.
        name: String,
        /// Use the guest SDK at this path (default: the one this llm-worker was built from).
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
    /// Approve the plugins of DIR as they are: write DIR/llm-worker.lock with the SHA-256 of
    /// each plugin and of its policy. A directory with a lock file loads only those plugins,
    /// unchanged.
    Lock {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Write nothing: exit 1 if the directory differs from its lock file (for CI).
        #[arg(long)]
        check: bool,
    },
    /// Pull a plugin from an OCI registry into DIR (as NAME.wasm), verified against
    /// DIR/llm-worker.trust.toml, and record its digests and signer in DIR/llm-worker.lock.
    Pull {
        /// REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST.
        reference: String,
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// The plugin's name in DIR (NAME.wasm); default: the repository's last part.
        #[arg(long)]
        name: Option<String>,
        /// Move a plugin the lock records to what REFERENCE names now (verified first).
        #[arg(long)]
        update: bool,
        /// Take the artifact without a signature, this once (recorded in the lock as such).
        #[arg(long)]
        allow_unsigned: bool,
        /// Speak plain HTTP, to a registry on this machine only (localhost, 127.0.0.1, [::1]).
        #[arg(long)]
        plain_http: bool,
        /// Give up a request to the registry after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout_secs: u64,
    },
    /// Push a plugin FILE to an OCI registry as a Wasm artifact, signed with --sign KEY as
    /// cosign signs (the signature under the tag sha256-<digest>.sig).
    Push {
        /// The plugin (.wasm); it must load.
        file: PathBuf,
        /// REGISTRY/REPOSITORY:TAG.
        reference: String,
        /// Sign with this unencrypted PEM key of the curve P-256 (PKCS#8 `PRIVATE KEY` or
        /// SEC1 `EC PRIVATE KEY`).
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
        /// Speak plain HTTP, to a registry on this machine only.
        #[arg(long)]
        plain_http: bool,
        /// Give up a request to the registry after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout_secs: u64,
    },
    /// Print the tool definitions of DIR in a provider's JSON shape, sorted by name.
    Schema {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// openai, anthropic, gemini or mcp.
        #[arg(long, default_value = "openai")]
        format: ProviderFormat,
        /// With --format openai: declare every function with OpenAI's strict mode (all
        /// properties required, optional ones nullable, no unnamed keys); a tool whose schema
        /// strict mode cannot express is an error.
        #[arg(long)]
        strict: bool,
    },
}

fn init_logging(cli: &Cli) {
    // `call` prints a failure as its error: a warning logging the same would say it twice.
    let quiet = cli.quiet || (cli.verbose == 0 && matches!(cli.command, Command::Call { .. }));
    let level = match (quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let mut invalid = None;
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&value)
            .unwrap_or_else(|error| {
                invalid = Some((value, error));
                tracing_subscriber::EnvFilter::new(level)
            }),
        _ => tracing_subscriber::EnvFilter::new(level),
    };
    // Colours only for a person at a terminal: MCP clients and log files capture stderr.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    if let Some((value, error)) = invalid {
        tracing::error!("RUST_LOG={value:?} is not a valid filter ({error}); logging at {level}");
    }
}

/// The host and how it reads plugin directories.
pub(crate) struct Loader {
    pub(crate) host: PluginHost,
    pub(crate) options: LoadDirOptions,
}

fn loader(cli: &HostArgs) -> anyhow::Result<Loader> {
    let limits = Limits::default()
        // Within Limits::MEMORY_MIB (checked by clap): fits any usize of a 64-bit host.
        .memory_bytes(usize::try_from(cli.memory_mib << 20).unwrap_or(usize::MAX))
        .call_timeout(Duration::from_millis(cli.timeout_ms))
        .fuel(cli.fuel);
    let cache = if cli.no_cache {
        None
    } else {
        cli.cache_dir.clone().or_else(PluginHost::default_cache_dir)
    };
    let mut builder = PluginHost::builder()
        .limits(limits)
        .max_plugin_bytes(cli.max_plugin_mib << 20);
    if let Some(dir) = cache {
        builder = builder.cache_dir(dir);
    }
    if let Some(slots) = cli.pool.filter(|&slots| slots > 0) {
        builder = builder.instance_pool(slots);
    }
    let host = builder.build()?;
    Ok(Loader {
        host,
        options: LoadDirOptions::default()
            .recursive(cli.recursive)
            .include_build_dirs(cli.include_target)
            .locked(cli.locked),
    })
}

/// Loads a directory (with a progress bar when stderr is a terminal), warning about refused
/// plugins, stray policy files and a directory without plugins.
fn load(loader: &Loader, dir: &Path) -> anyhow::Result<PluginDir> {
    let loaded = load_with_progress(loader, dir)?;
    for failure in &loaded.failures {
        tracing::warn!("{failure}");
    }
    warn_about(&loaded, dir, loader.options);
    Ok(loaded)
}

/// What a directory without `.wasm` files needs, for messages.
pub(crate) fn no_plugins(dir: &Path, options: LoadDirOptions) -> String {
    format!(
        "{} holds no plugins (no `.wasm` files{}); build plugins with `cargo build --release \
         --target wasm32-wasip2` and copy their `.wasm` files there (./scripts/demo.sh fills \
         target/demo-plugins with the examples)",
        dir.display(),
        if options.recursive {
            ", also in its subdirectories"
        } else {
            "; -r reads subdirectories"
        }
    )
}

/// Warns about policy files that belong to no plugin and about a directory without plugins.
pub(crate) fn warn_about(loaded: &PluginDir, dir: &Path, options: LoadDirOptions) {
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    if loaded.plugins.is_empty() && loaded.failures.is_empty() {
        tracing::warn!("{}", no_plugins(dir, options));
    }
}

/// Prints `message` as the command's error; the exit code.
fn exit_with(message: String) -> u8 {
    eprintln!("error: {message}");
    1
}

/// An error's message followed by its causes, `"outer: cause: root"`. A library error often
/// says its cause in its own message already (`cannot read plugin x.wasm: permission
/// denied`); a cause whose text the message so far ends with is not repeated.
fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let line = cause.to_string();
        if text.is_empty() {
            text = line;
        } else if !line.is_empty() && !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
    }
    text
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// A plugin's file as the user knows it: its path within the directory (`sub/counter.wasm`).
fn file_name(plugin: &LoadedPlugin, dir: &Path) -> String {
    let path = plugin.path();
    path.strip_prefix(dir)
        .ok()
        .or_else(|| path.file_name().map(Path::new))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn list(out: &mut String, loader: &Loader, dir: &Path, as_json: bool) -> anyhow::Result<ExitCode> {
    let loaded = load(loader, dir)?;
    let mut rows: Vec<(&str, String, &llm_worker::ToolMeta)> = loaded
        .plugins
        .iter()
        .flat_map(|p| {
            p.tools()
                .iter()
                .map(move |m| (m.name.as_str(), file_name(p, dir), m))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    if as_json {
        let tools: Vec<_> = rows
            .iter()
            .map(|(name, file, meta)| {
                json!({"tool": name, "plugin": file, "description": meta.description,
                    "input_schema": meta.input_schema})
            })
            .collect();
        outln!(out, "{}", serde_json::Value::from(tools));
        return Ok(ExitCode::SUCCESS);
    }
    let tool_width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(4);
    let file_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(6);
    outln!(
        out,
        "{:tool_width$}  {:file_width$}  DESCRIPTION",
        "TOOL",
        "PLUGIN"
    );
    for (name, file, meta) in &rows {
        outln!(
            out,
            "{name:tool_width$}  {file:file_width$}  {}",
            first_line(&meta.description)
        );
    }
    // Plugins that failed are listed as such, not left out (the reasons are on stderr).
    for failure in &loaded.failures {
        let file = failure
            .path()
            .map(|path| path.strip_prefix(dir).unwrap_or(path).display().to_string())
            .unwrap_or_default();
        outln!(
            out,
            "{:tool_width$}  {file:file_width$}  failed to load: see the warning above",
            "-"
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn call(
    out: &mut String,
    loader: &Loader,
    dir: &Path,
    tool: &str,
    input: Option<String>,
) -> anyhow::Result<ExitCode> {
    let input = match input.as_deref() {
        Some("-") | None => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                eprintln!(
                    "reading the input of '{tool}' (a JSON object) from stdin; end it with \
                     Ctrl-D, or give it as an argument"
                );
            }
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("cannot read the input from stdin")?;
            // Editors on some systems start a file with a byte-order mark.
            input
                .strip_prefix('\u{feff}')
                .map(str::to_owned)
                .unwrap_or(input)
        }
        Some(input) => input.to_owned(),
    };
    let loaded = load(loader, dir)?;
    if loaded.plugins.is_empty() && loaded.failures.is_empty() {
        bail!(no_plugins(dir, loader.options));
    }
    // Only the plugin offering the tool is registered (and started): a call needs no other.
    let mut worker = Worker::new();
    worker.register_tools(
        loaded
            .plugins
            .iter()
            .filter(|plugin| plugin.tool_names().contains(&tool))
            .flat_map(LoadedPlugin::definitions),
    )?;
    let tools = worker.tool_server_handle();
    // No input at all means no arguments.
    let input = match input.trim() {
        "" => "{}",
        input => input,
    };
    match tools.call_tool(tool, input).await {
        Ok(output) => {
            outln!(out, "{output}");
            Ok(ExitCode::SUCCESS)
        }
        Err(ToolServerError::ToolNotFound(name)) => {
            let mut names: Vec<&str> = loaded
                .plugins
                .iter()
                .flat_map(|plugin| plugin.tool_names())
                .collect();
            names.sort_unstable();
            if loaded.failures.is_empty() {
                eprintln!(
                    "error: no tool '{name}' in {}; the tools are: {}",
                    dir.display(),
                    names.join(", ")
                );
                return Ok(ExitCode::from(2));
            }
            // A plugin that failed may be the one offering it: say so, and why it failed.
            let failed: Vec<String> = loaded.failures.iter().map(ToString::to_string).collect();
            eprintln!(
                "error: no tool '{name}' among the plugins that loaded in {}, but {} plugin(s) \
                 failed to load or start and may offer it: {}",
                dir.display(),
                failed.len(),
                failed.join("; ")
            );
            Ok(ExitCode::FAILURE)
        }
        // The tool's own message ("Execution failed: …"), without the tool server's prefix.
        Err(ToolServerError::ToolExecution(message)) => {
            eprintln!("error: tool '{tool}': {message}");
            Ok(ExitCode::FAILURE)
        }
        Err(error) => {
            eprintln!("error: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn check(out: &mut String, loader: &Loader, dir: &Path) -> anyhow::Result<ExitCode> {
    let loaded = load_with_progress(loader, dir)?;
    let locked = dir.join(LOCK_FILE).exists() && !loader.options.ignore_lock;
    // What `pull` verified, by file (the lock was read and checked by the load above).
    let lock = LockFile::read(dir).ok().flatten().filter(|_| locked);
    for plugin in &loaded.plugins {
        let policy = plugin.policy();
        outln!(
            out,
            "ok       {}  tools: {}",
            file_name(plugin, dir),
            plugin.tool_names().join(", ")
        );
        // What it asks of the sandbox: the contract's own interfaces are not asks.
        let contract = format!("{}/", llm_worker_rules::contract::PACKAGE);
        let asks: Vec<&str> = plugin
            .imports()
            .iter()
            .map(|i| i.split('@').next().unwrap_or(i))
            .filter(|i| !i.starts_with(&contract))
            .collect();
        outln!(out, "         imports: {}", asks.join(", "));
        let env: Vec<&str> = policy.env.iter().map(|(name, _)| name.as_str()).collect();
        let dirs: Vec<String> = policy
            .dirs
            .iter()
            .map(|d| {
                format!(
                    "{} -> {} ({})",
                    d.host.display(),
                    d.guest,
                    if d.writable { "rw" } else { "ro" }
                )
            })
            .collect();
        let http: Vec<String> = policy.http.iter().map(ToString::to_string).collect();
        outln!(
            out,
            "         grants: env [{}], dirs [{}], http [{}]; limits: {} MiB, {:?}",
            env.join(", "),
            dirs.join(", "),
            http.join(", "),
            policy.limits.memory_bytes >> 20,
            policy.limits.call_timeout
        );
        for (tool, grants) in &policy.tool_http {
            let grants: Vec<String> = grants.iter().map(ToString::to_string).collect();
            outln!(out, "         tool {tool}: http [{}]", grants.join(", "));
        }
        for secret in &policy.http_secrets {
            outln!(
                out,
                "         secret: header {} set by the host on requests to {}",
                secret.header,
                secret.grant
            );
        }
        outln!(
            out,
            "         contract: llm-worker:tool@{}",
            plugin.contract_version()
        );
        for meta in plugin.tools() {
            let hints = hint_words(&meta.annotations);
            if !hints.is_empty() || meta.output_schema.is_some() {
                outln!(
                    out,
                    "         tool {}: {}{}",
                    meta.name,
                    if meta.output_schema.is_some() {
                        "structured result; "
                    } else {
                        ""
                    },
                    if hints.is_empty() {
                        "no hints".to_owned()
                    } else {
                        hints.join(", ")
                    }
                );
            }
        }
        for warning in plugin.warnings() {
            outln!(out, "         warning: {warning}");
        }
        if locked {
            outln!(out, "         lock: approved by {LOCK_FILE}");
        }
        let file = file_name(plugin, dir);
        if let Some(source) = lock
            .iter()
            .flat_map(|lock| &lock.plugins)
            .find(|entry| entry.file == file)
            .and_then(|entry| entry.source.as_ref())
        {
            outln!(
                out,
                "         source: {} (manifest {}, component sha256:{})",
                source.reference,
                source.manifest,
                file_sha256(source)
            );
            outln!(
                out,
                "         verified: {} at pull; bytes match the lock; {}",
                source.verified(),
                if source.unsigned.as_deref() == Some(llm_worker::UNSIGNED_BY_FLAG) {
                    "not checked against the trust policy (a one-off exception)".to_owned()
                } else {
                    format!("still allowed by {}", llm_worker::TRUST_FILE)
                }
            );
        }
    }
    for failure in &loaded.failures {
        outln!(out, "refused  {failure}");
    }
    if !locked {
        outln!(
            out,
            "(no {LOCK_FILE}: any plugin put in {} is loaded; `llm-worker lock` approves \
             these, and `--locked` then refuses to load without the lock)",
            dir.display()
        );
    }
    Ok(if loaded.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The hex SHA-256 of a pulled plugin's component, from its layer digest.
fn file_sha256(source: &llm_worker::PluginSource) -> &str {
    source
        .layer
        .strip_prefix("sha256:")
        .unwrap_or(&source.layer)
}

/// The hints a client is shown, in words: `read-only`, `not open-world`, ….
fn hint_words(hints: &llm_worker::ToolAnnotations) -> Vec<String> {
    [
        (hints.read_only, "read-only"),
        (hints.destructive, "destructive"),
        (hints.idempotent, "idempotent"),
        (hints.open_world, "open-world"),
    ]
    .into_iter()
    .filter_map(|(value, word)| match value {
        Some(true) => Some(word.to_owned()),
        Some(false) => Some(format!("not {word}")),
        None => None,
    })
    .collect()
}

fn lock(out: &mut String, loader: &Loader, dir: &Path, check: bool) -> anyhow::Result<ExitCode> {
    let options = loader.options.ignore_lock(true);
    let loaded = loader.host.load_dir_with(dir, options, |_, _, _| {})?;
    let mut now = LockFile::of(dir, &loaded.plugins);
    // Pulled plugins keep their provenance; the trust policy is pinned (and must allow them).
    match LockFile::read(dir) {
        Ok(Some(previous)) => {
            for note in now.keep_sources(&previous) {
                tracing::warn!("{note}");
            }
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(
            "the current lock cannot be read, so pulled plugins lose their provenance: {error}"
        ),
    }
    now.trust_sha256 = llm_worker::TrustPolicy::pin(dir)?;
    let refusals = now.source_refusals(dir);
    if check {
        let Some(approved) = LockFile::read(dir)? else {
            eprintln!(
                "error: {} has no {LOCK_FILE}; write one with `llm-worker lock {}`",
                dir.display(),
                dir.display()
            );
            return Ok(ExitCode::FAILURE);
        };
        let mut differences = approved.differences(&now);
        differences.extend(approved.trust_difference(&now));
        differences.extend(
            refusals
                .iter()
                .map(|(file, reason)| format!("refused: {file}: {reason}")),
        );
        differences.extend(
            loaded
                .failures
                .iter()
                .map(|failure| format!("refused: {failure}")),
        );
        if differences.is_empty() {
            outln!(out, "{} matches its {LOCK_FILE}", dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        for difference in &differences {
            outln!(out, "{difference}");
        }
        eprintln!(
            "error: {} differs from its {LOCK_FILE} ({} difference(s)); review, then approve \
             with `llm-worker lock {}`",
            dir.display(),
            differences.len(),
            dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    if !loaded.failures.is_empty() || !refusals.is_empty() {
        for failure in &loaded.failures {
            eprintln!("refused: {failure}");
        }
        for (file, reason) in &refusals {
            eprintln!("refused: {file}: {reason}");
        }
        eprintln!(
            "error: nothing written: fix or remove the refused plugins first, so that the lock \
             approves the whole directory"
        );
        return Ok(ExitCode::FAILURE);
    }
    now.write(dir)?;
    outln!(
        out,
        "wrote {} ({} plugin(s)); commit it beside the plugins",
        dir.join(LOCK_FILE).display(),
        now.plugins.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Loads a directory, showing a progress bar on stderr when it is a terminal.
pub(crate) fn load_with_progress(loader: &Loader, dir: &Path) -> anyhow::Result<PluginDir> {
    use std::io::IsTerminal;
    let (host, options) = (&loader.host, loader.options);
    if !std::io::stderr().is_terminal() {
        return Ok(host.load_dir_with(dir, options, |_, _, _| {})?);
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}") {
        bar.set_style(style);
    }
    let loaded = host.load_dir_with(dir, options, |index, total, path| {
        bar.set_length(total as u64);
        bar.set_position(index as u64);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        bar.set_message(format!("loading {name}"));
    });
    bar.finish_and_clear();
    Ok(loaded?)
}

fn schema(
    out: &mut String,
    loader: &Loader,
    dir: &Path,
    format: ProviderFormat,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    if strict && format != ProviderFormat::OpenAi {
        bail!(
            "--strict is OpenAI's strict mode and applies to --format openai only, not \
             --format {format}; drop --strict, or use --format openai"
        );
    }
    let loaded = load(loader, dir)?;
    let mut definitions: Vec<llm_worker::LlmToolDefinition> = loaded
        .plugins
        .iter()
        .flat_map(|p| p.tools())
        .map(llm_worker::LlmToolDefinition::from)
        .collect();
    definitions.sort_by(|a, b| a.name.cmp(&b.name));
    let options = ProviderOptions::default().strict(strict);
    let json = provider_json_with(&definitions, format, &options)?;
    let text = serde_json::to_string_pretty(&json)?;
    outln!(out, "{text}");
    Ok(ExitCode::SUCCESS)
}

/// Raises the soft limit of open files to the hard limit, where the system allows: the host
/// lets its plugins hold half of the soft limit (`PluginHostBuilder::max_open_files`), and the
/// usual soft default (1,024) would leave them little. A library leaves this to its program.
#[cfg(unix)]
fn raise_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        ..limit
    };
    if let Err(error) = setrlimit(Resource::Nofile, raised) {
        tracing::debug!(
            "cannot raise the open-file limit from {:?} to {:?}: {error}",
            limit.current,
            limit.maximum
        );
    }
}

#[cfg(not(unix))]
fn raise_open_file_limit() {}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    raise_open_file_limit();
    let mut out = String::new();
    if let Command::New { name, sdk } = &cli.command {
        return match new::scaffold(Path::new("."), name, sdk.as_deref()) {
            Ok(dir) => {
                println!(
                    "created {}
build it with: cd {} && cargo build --release --target wasm32-wasip2",
                    dir.display(),
                    dir.display()
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {}", error_text(&error));
                ExitCode::FAILURE
            }
        };
    }
    let host = match &cli.command {
        Command::List { host, .. }
        | Command::Call { host, .. }
        | Command::Check { host, .. }
        | Command::Serve { host, .. }
        | Command::Lock { host, .. }
        | Command::Pull { host, .. }
        | Command::Schema { host, .. } => Some(host),
        Command::New { .. } | Command::Push { .. } => None,
    };
    if let Command::Push {
        file,
        reference,
        sign,
        plain_http,
        timeout_secs,
    } = &cli.command
    {
        let result = registry::push_file(
            &mut out,
            file,
            reference,
            sign.as_deref(),
            *plain_http,
            *timeout_secs,
        )
        .await;
        print!("{out}");
        return result.unwrap_or_else(|error| {
            eprintln!("error: {}", error_text(&error));
            ExitCode::FAILURE
        });
    }
    let result = match host
        .map(loader)
        .unwrap_or_else(|| Err(anyhow::anyhow!("nothing to load")))
    {
        Err(error) => Err(error),
        Ok(loader) => match &cli.command {
            Command::List { dir, json, .. } => list(&mut out, &loader, dir, *json),
            Command::Call {
                dir, tool, json, ..
            } => call(&mut out, &loader, dir, tool, json.clone()).await,
            Command::Check { dir, .. } => check(&mut out, &loader, dir),
            Command::Lock { dir, check, .. } => lock(&mut out, &loader, dir, *check),
            Command::Pull {
                reference,
                dir,
                name,
                update,
                allow_unsigned,
                plain_http,
                timeout_secs,
                ..
            } => {
                let args = registry::PullArgs {
                    reference,
                    dir,
                    name: name.clone(),
                    update: *update,
                    allow_unsigned: *allow_unsigned,
                    plain_http: *plain_http,
                    timeout_secs: *timeout_secs,
                };
                registry::pull(&mut out, &loader, args).await
            }
            Command::Schema {
                dir,
                format,
                strict,
                ..
            } => schema(&mut out, &loader, dir, *format, *strict),
            Command::Serve {
                dir,
                watch,
                http,
                token_file,
                no_auth,
                max_sessions,
                idle_timeout,
                allowed_host,
                allowed_origin,
                session_prefix,
                host: serve_host,
            } => {
                if http.is_some() && idle_timeout.saturating_mul(1000) < serve_host.timeout_ms {
                    return ExitCode::from(exit_with(format!(
                        "--idle-timeout {idle_timeout} s is shorter than --timeout-ms {} ms: a \
                         session would expire during a long call; raise --idle-timeout",
                        serve_host.timeout_ms
                    )));
                }
                let options = serve::ServeOptions {
                    watch: *watch,
                    http: http.clone(),
                    token_file: token_file.clone(),
                    no_auth: *no_auth,
                    max_sessions: usize::try_from(*max_sessions).unwrap_or(usize::MAX),
                    idle_timeout: Duration::from_secs(*idle_timeout),
                    allowed_hosts: allowed_host.clone(),
                    allowed_origins: allowed_origin.clone(),
                    session_prefix: session_prefix.clone(),
                };
                serve::serve(loader, dir.clone(), options)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::New { .. } | Command::Push { .. } => Ok(ExitCode::SUCCESS),
        },
    };
    // A reader that stops early (`| head`) is not an error.
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: cannot write to stdout: {error}");
        return ExitCode::FAILURE;
    }
    result.unwrap_or_else(|error| {
        eprintln!("error: {}", error_text(&error));
        ExitCode::FAILURE
    })
}
