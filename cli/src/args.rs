//! The command line: the subcommands and their options, as clap reads them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use llm_worker::Limits;
use llm_worker::provider::ProviderFormat;

/// Host LLM tools as sandboxed WebAssembly components: run, review and serve a directory's
/// plugins; write, approve and share them.
#[derive(Parser)]
#[command(name = "llm-worker", version, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// More log output on stderr (-v: debug, -vv: trace, which also logs every MCP request and
    /// answer whole: tool arguments, what users type into forms). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
}

/// How plugins are compiled and limited: the options of every command that loads plugins
/// (they decide whether a plugin loads, so `lock` and `pull` take them too).
#[derive(clap::Args)]
pub(crate) struct PluginArgs {
    /// Keep compiled plugins here (default: $XDG_CACHE_HOME/llm-worker/compiled, or
    /// ~/.cache/llm-worker/compiled without XDG_CACHE_HOME).
    #[arg(long, value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Compile every plugin afresh; read and write no cache.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// Default memory limit per instance, in MiB (a policy file may override it).
    #[arg(long, value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(Limits::MEMORY_MIB))]
    pub(crate) memory_mib: u64,
    /// Default time limit per call, in milliseconds (a policy file may override it).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(Limits::TIMEOUT_MS))]
    pub(crate) timeout_ms: u64,
    /// Meter fuel: at most this many units per call (default: no metering; the time limit
    /// applies). Lets policy files set their own fuel: without it, a plugin whose policy sets
    /// `fuel` is refused.
    #[arg(long, value_name = "UNITS",
          value_parser = clap::value_parser!(u64).range(Limits::FUEL))]
    pub(crate) fuel: Option<u64>,
    /// Largest plugin file read (and, for `pull`, downloaded), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) max_plugin_mib: u64,
}

/// Which files of DIR are plugins: the options of every command that reads a whole directory.
#[derive(clap::Args, Default)]
pub(crate) struct DirArgs {
    /// Also load plugins from subdirectories of DIR (build output directories named
    /// `target` are skipped, unless --include-target).
    #[arg(short, long)]
    pub(crate) recursive: bool,
    /// With -r: read `target` directories too.
    #[arg(long, requires = "recursive")]
    pub(crate) include_target: bool,
}

/// How plugins are loaded and limited: the options of every command that loads a directory to
/// use its tools.
#[derive(clap::Args)]
pub(crate) struct HostArgs {
    #[command(flatten)]
    pub(crate) plugins: PluginArgs,
    #[command(flatten)]
    pub(crate) dir: DirArgs,
    /// Reserve N instance slots up front and reuse them (wasmtime's pooling allocator):
    /// plugins start faster, but at most N instances live at once, and each slot reserves
    /// ~8 GiB of address space (not memory). Default: map memory per instance, no cap.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) pool: Option<u32>,
    /// Require DIR/llm-worker.lock: without it, load nothing and fail (instead of loading
    /// whatever is there). A directory that has a lock when `serve` starts stays locked.
    #[arg(long)]
    pub(crate) locked: bool,
}

// Parsed once per process: `serve`'s many options make its variant the largest, and boxing
// them would only make the match in main.rs harder to read.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum Command {
    /// List the tools of the plugins in DIR: tool, plugin file, description.
    List {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Print a JSON array, one object per tool (tool, plugin, description, input_schema),
        /// instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool of DIR with JSON input and print its output.
    ///
    /// The input is the JSON object of the tool's arguments, from the argument or, when it
    /// is absent or `-`, from stdin (`{}` for a tool without arguments).
    Call {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// The tool's name.
        tool: String,
        /// The input, a JSON object (`{}` for none); read from stdin when absent or `-`.
        json: Option<String>,
    },
    /// Review DIR: per plugin, whether it loads, its policy file, what it imports and is granted.
    ///
    /// Loads every plugin in DIR and reports, per file, whether it loads, the policy file it
    /// read (or that it runs with the defaults), what it imports and what its policy grants,
    /// and policy files that belong to no plugin. Exits non-zero where `call` would fail: a
    /// plugin is refused, or DIR holds no plugins.
    Check {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Serve the tools of DIR to MCP clients, on stdio or over HTTP.
    ///
    /// On stdio, the connection is one session; over --http, each MCP session is one. A
    /// session's plugin state is kept between its calls and seen by no other session.
    Serve {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Pick up added, changed and removed plugin files while serving, and tell the client
        /// (notifications/tools/list_changed). Unchanged plugins keep their state; a broken
        /// new version does not take the working one away, unless its policy changed.
        #[arg(long)]
        watch: bool,
        /// Serve streamable HTTP on ADDR (HOST:PORT, e.g. 127.0.0.1:8080) instead of stdio:
        /// each MCP session gets its own plugin instances. Off loopback, --token-file is
        /// required.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// With --http: bearer tokens that admit clients, one per line (`Authorization:
        /// Bearer TOKEN`), `NAME: TOKEN` to name who holds one. Without it (and without
        /// --oauth-issuer), on loopback, a token is generated once and kept in
        /// $XDG_STATE_HOME/llm-worker/http-token (readable by you alone).
        #[arg(long, value_name = "FILE", requires = "http")]
        token_file: Option<PathBuf>,
        /// With --http on a loopback address: admit clients without a token. Every user and
        /// process of this machine can then run every tool with your grants and secrets.
        #[arg(long, requires = "http", conflicts_with_all = ["token_file", "oauth_issuer"])]
        no_auth: bool,
        /// With --http: accept OAuth access tokens (JWTs) of the authorization server URL
        /// (its issuer identifier; repeatable), checked against the keys it publishes. Needs
        /// --oauth-resource.
        #[arg(long, value_name = "URL", requires_all = ["http", "oauth_resource"])]
        oauth_issuer: Vec<String>,
        /// With --oauth-issuer: this server's URL as clients reach it (e.g.
        /// https://mcp.example.com/mcp), the audience its tokens must name.
        #[arg(long, value_name = "URL", requires = "oauth_issuer")]
        oauth_resource: Option<String>,
        /// With --oauth-issuer: a scope every access token must hold (repeatable).
        #[arg(long, value_name = "SCOPE", requires = "oauth_issuer")]
        oauth_scope: Vec<String>,
        /// With one --oauth-issuer: check its opaque (non-JWT) access tokens at its introspection
        /// endpoint URL (RFC 7662), authenticating with --oauth-introspection-client and the
        /// secret in --oauth-introspection-secret-file.
        #[arg(long, value_name = "URL", requires_all = ["oauth_issuer", "oauth_introspection_client", "oauth_introspection_secret_file"])]
        oauth_introspection: Option<String>,
        /// With --oauth-introspection: this server's client id at the issuer.
        #[arg(long, value_name = "ID", requires = "oauth_introspection")]
        oauth_introspection_client: Option<String>,
        /// With --oauth-introspection: a file holding this server's client secret (readable
        /// by you alone, as a token file).
        #[arg(long, value_name = "FILE", requires = "oauth_introspection")]
        oauth_introspection_secret_file: Option<PathBuf>,
        /// With --oauth-issuer: accept JWTs not typed `at+jwt` (RFC 9068), for issuers that do
        /// not type their access tokens (then an ID token for this audience passes too).
        #[arg(long, requires = "oauth_issuer")]
        oauth_untyped_tokens: bool,
        /// With --oauth-issuer: accept tokens that name no subject (`sub`) as the client they
        /// were issued to (`client_id`), for issuers that leave the subject out of a client
        /// credentials grant's tokens (if they leave it out of users' tokens too, every user
        /// of one client app is one identity).
        #[arg(long, requires = "oauth_issuer")]
        oauth_client_identities: bool,
        /// With --http: most MCP sessions open at once; past it new ones get 503.
        #[arg(long, value_name = "N", default_value_t = 64, requires = "http",
              value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_sessions: u64,
        /// With --http: close a session (and drop its instances) after this many seconds
        /// without requests.
        #[arg(long, value_name = "SECS", default_value_t = 300, requires = "http",
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        idle_timeout: u64,
        /// With --http: the largest request body, in KiB; larger ones get 413, as does a body
        /// whose JSON would take more than 16 times the limit in memory once parsed.
        #[arg(long, value_name = "KIB", default_value_t = 4096, requires = "http",
              value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        max_body_kib: u64,
        /// With --http: the most memory, in MiB, that the requests in progress may hold
        /// together (their bodies, then their parsed JSON, until their answers end); one client
        /// may hold a quarter of it. Past either, a request gets 503. At least 4 times the body
        /// limit.
        #[arg(long, value_name = "MIB", default_value_t = 512, requires = "http",
              value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        request_memory_mib: u64,
        /// With --http: a value of the Host header to accept (repeatable; default on
        /// loopback: localhost, 127.0.0.1, ::1; elsewhere any, as tokens are required).
        #[arg(long, value_name = "HOST", requires = "http")]
        allowed_host: Vec<String>,
        /// With --http: a browser origin to accept, e.g. `https://app.example.com`
        /// (repeatable); requests from other origins get 403.
        #[arg(long, value_name = "ORIGIN", requires = "http")]
        allowed_origin: Vec<String>,
        /// How long a task (a call a client asked to run as one, for tools that declare task
        /// support) and its result are kept, in seconds: from its start while it runs, then
        /// from its end. A task still running this long after it started is stopped, whatever
        /// its plugin's `task_timeout_ms`.
        #[arg(long, value_name = "SECS", default_value_t = 3600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        task_ttl: u64,
        /// With --http: start every session id with PREFIX (this replica's name), for a load
        /// balancer to route each session to its replica (docs/deploy.md).
        #[arg(long, value_name = "PREFIX", requires = "http")]
        session_prefix: Option<String>,
        /// Serve metrics for Prometheus at http://ADDR/metrics (HOST:PORT; a private address:
        /// they name the plugins and tools served): requests, outcomes and durations by plugin
        /// and tool, refusals, reloads, sessions, instances and their memory.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
        /// Export a span of every tool call, resource read, prompt and completion over OTLP/HTTP
        /// to the collector at URL (e.g. http://127.0.0.1:4318), continuing the trace context
        /// the client sends (`_meta.traceparent`, or the `traceparent` header).
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// Append a JSON line for every tool call, resource read, prompt, completion and
        /// question to FILE (`-`: standard error): when, who, which session, plugin and tool,
        /// the input's SHA-256, the outcome and the duration.
        #[arg(long, value_name = "FILE")]
        audit_log: Option<PathBuf>,
        /// With --audit-log: write each request's input too (not only its SHA-256).
        #[arg(long, requires = "audit_log")]
        audit_inputs: bool,
        /// Sign the request states of MCP 2026-07-28 (a tool's questions to the client,
        /// answered on the client's retry) with the key in FILE (at least 32 bytes, readable
        /// by you alone), so that replicas sharing it accept each other's states. Without
        /// it, each process makes a random key.
        #[arg(long, value_name = "FILE")]
        request_state_key_file: Option<PathBuf>,
    },
    /// Create a plugin crate NAME that tests, builds and loads as it is.
    ///
    /// The crate is made in the current directory, on the guest SDK of an llm-worker checkout
    /// (by path: the SDK is not on crates.io), with a rust-toolchain.toml naming the Rust and
    /// the wasm32-wasip2 target it builds with.
    New {
        /// The crate's name.
        name: String,
        /// Build against the guest SDK at PATH: an llm-worker checkout or its guest-sdk
        /// directory (default: the checkout this llm-worker was built from, while it exists).
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
    /// Approve the plugins of DIR as they are, in DIR/llm-worker.lock.
    ///
    /// Writes DIR/llm-worker.lock with the SHA-256 of each plugin and of its policy. A
    /// directory with a lock file loads only those plugins, unchanged.
    Lock {
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        plugins: PluginArgs,
        #[command(flatten)]
        dir_args: DirArgs,
        /// Write nothing: exit 1 if the directory differs from its lock file (for CI).
        #[arg(long)]
        check: bool,
        /// Replace a lock file that cannot be read (invalid, or not trusted: someone else
        /// could have written it), approving every plugin as new; without it, `lock` refuses
        /// to write over such a file.
        #[arg(long, conflicts_with = "check")]
        replace_unreadable: bool,
    },
    /// Pull a plugin from an OCI registry into DIR, verified against DIR's trust policy.
    ///
    /// The plugin is written as DIR/NAME.wasm, verified against DIR/llm-worker.trust.toml,
    /// and its digests and signer are recorded in DIR/llm-worker.lock.
    Pull {
        /// REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST.
        reference: String,
        /// The plugin directory.
        dir: PathBuf,
        #[command(flatten)]
        plugins: PluginArgs,
        /// The plugin's name in DIR (NAME.wasm); default: the repository's last part.
        #[arg(long)]
        name: Option<String>,
        /// Move a plugin the lock records to what REFERENCE names now (verified first).
        #[arg(long)]
        update: bool,
        /// With --update: approve the tools, resources, templates and prompts the new version
        /// offers that the lock did not approve (without it, such an update is refused, naming
        /// them, so that you can review them first). REFERENCE must then name the version by
        /// its digest (REPO@sha256:…), as the refusal writes it.
        #[arg(long, requires = "update")]
        approve_names: bool,
        /// Take the artifact without a signature, this once (recorded in the lock as such),
        /// if no rule of the trust policy covers its repository (a rule is never overridden).
        #[arg(long)]
        allow_unsigned: bool,
        /// Speak plain HTTP, to a registry on this machine only (localhost, 127.0.0.1, [::1]),
        /// never through a proxy.
        #[arg(long)]
        plain_http: bool,
        /// Give up the pull (all its requests to the registry together) after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout_secs: u64,
    },
    /// Push a plugin FILE to an OCI registry as a Wasm artifact, signed as cosign signs.
    ///
    /// With --sign KEY, the signature goes under the tag sha256-<digest>.sig, as cosign puts it.
    Push {
        /// The plugin (.wasm); it must load, under the limits below. It is compiled into the
        /// cache as any command that loads it would, unless --no-cache.
        file: PathBuf,
        /// REGISTRY/REPOSITORY:TAG.
        reference: String,
        #[command(flatten)]
        plugins: PluginArgs,
        /// Sign with this key of the curve P-256: cosign's encrypted `cosign.key` (its password
        /// from COSIGN_PASSWORD, or asked on the terminal), or an unencrypted PEM key (PKCS#8
        /// `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`).
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
        /// Speak plain HTTP, to a registry on this machine only, never through a proxy.
        #[arg(long)]
        plain_http: bool,
        /// Give up a request to the registry after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout_secs: u64,
    },
    /// Make a signing key pair as cosign does: PREFIX.key (encrypted) and PREFIX.pub.
    #[command(name = "keygen")]
    ///
    /// The key is sealed as `cosign generate-key-pair` seals it, under a password from
    /// COSIGN_PASSWORD or asked twice on the terminal. cosign reads both; `push --sign PREFIX.key` signs with the key, and a trust policy's
    /// [keys] takes PREFIX.pub. An existing file is never overwritten.
    GenerateKeyPair {
        /// Where the files go, without their extensions.
        #[arg(long, value_name = "PREFIX", default_value = "cosign")]
        output_key_prefix: PathBuf,
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
