//! [`SandboxPolicy`]: what the operator grants a plugin (environment variables, directories,
//! HTTP destinations and secrets) and the [`Limits`] it runs under, read from a policy file
//! beside the plugin.
//!
//! The rooms: this file (the types and the ranges limits must be in), `http` (destinations
//! and secret headers: parsing a rule, matching a request), `client` (what a plugin may ask
//! the client), `file` (the policy file's format, read and checked into a [`SandboxPolicy`]),
//! and, among the tests, `reference` (docs/policy.md held to the parser).

mod client;
mod file;
mod http;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use self::client::ClientPolicy;
pub(crate) use self::http::is_header_value;
#[cfg(feature = "wasi-http")]
pub(crate) use self::http::literal_address;
pub(crate) use self::http::may_carry_secrets;
pub use self::http::{HttpGrant, HttpSecret};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest policy file read.
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The resources one plugin instance may use. Every limit applies per instance (per session);
/// hitting one fails that call with an error naming the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Linear memory of one instance, in bytes (all its memories together). Default 64 MiB.
    pub memory_bytes: usize,
    /// Wall-clock time of one call (and of creating an instance). Default 10 s.
    pub call_timeout: Duration,
    /// Largest input JSON accepted, in bytes. Default 1 MiB.
    pub max_input_bytes: usize,
    /// Largest output returned, in bytes. Default 1 MiB.
    pub max_output_bytes: usize,
    /// Consecutive failed calls (trap, timeout, limit) after which the instance is disabled.
    /// Default 5.
    pub max_consecutive_failures: u32,
    /// Fuel (roughly, wasm instructions) one call may use. Default `None`: time limits come
    /// from epoch interruption, which costs far less. Setting it on a host's limits turns on
    /// fuel metering for that host (every plugin pays its cost); policy files may then set
    /// their own.
    pub fuel: Option<u64>,
    /// Host memory the compiled schemas of one plugin may take, in bytes: every regular
    /// expression its input and output schemas compile (`pattern`, `patternProperties`), all
    /// its tools together. Charged while the plugin loads, before each schema is compiled; a
    /// plugin over it is refused. Default 256 MiB; 1 MiB to 4 GiB.
    pub schema_memory_bytes: usize,
    /// Calls one instance of a contract 1.0.0 plugin runs at once; further calls wait their
    /// turn, in order, within their own time limit. Older contracts run one call at a time.
    /// Default 8; 1 to 64.
    pub max_concurrent_calls: u32,
    /// Wall-clock time of one call running as a task (started with
    /// `ToolServerHandle::start_task`, or over MCP's tasks extension): the time limit such a
    /// call gets instead of `call_timeout`. `None` (the default): `call_timeout`, so that a
    /// plugin cannot give itself more time by declaring task support; the operator raises it.
    /// At most one day.
    pub task_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            call_timeout: Duration::from_secs(10),
            max_input_bytes: 1 << 20,
            max_output_bytes: 1 << 20,
            max_consecutive_failures: 5,
            fuel: None,
            schema_memory_bytes: 256 << 20,
            max_concurrent_calls: 8,
            task_timeout: None,
        }
    }
}

/// "give 1 to 4096": what a message asks for, from the range it checked.
fn give(range: &std::ops::RangeInclusive<u64>) -> String {
    format!("give {} to {}", range.start(), range.end())
}

/// The range in bytes of a range in MiB.
fn mib_to_bytes(range: &std::ops::RangeInclusive<u64>) -> std::ops::RangeInclusive<u64> {
    (range.start() << 20)..=(range.end() << 20)
}

impl Limits {
    /// The memory limits a policy file (`memory_mib`), the command line (`--memory-mib`) and
    /// a host (its limits are checked when it is built) accept, in MiB: the one home of this
    /// range.
    pub const MEMORY_MIB: std::ops::RangeInclusive<u64> = 1..=4096;
    /// The schema memory budgets accepted (`schema_memory_mib`), in MiB.
    pub const SCHEMA_MEMORY_MIB: std::ops::RangeInclusive<u64> = 1..=4096;
    /// The time limits accepted (`timeout_ms`, `--timeout-ms`), in milliseconds: up to a day.
    pub const TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=86_400_000;
    /// The fuel limits accepted (`fuel`, `--fuel`): at least 1 (none means no metering).
    pub const FUEL: std::ops::RangeFrom<u64> = 1..;
    /// The range `max_concurrent_calls` takes.
    pub const CONCURRENT_CALLS: std::ops::RangeInclusive<u32> = 1..=64;
    /// The range `max_output_bytes` takes: up to 16 MiB (a copy out of a plugin may then
    /// take three times that, a host call's arguments too).
    pub const MAX_OUTPUT_BYTES: std::ops::RangeInclusive<usize> = 1..=16 << 20;

    /// Checks that the limits can be honoured, with the ranges a policy file allows
    /// ([`Limits::MEMORY_MIB`], [`Limits::SCHEMA_MEMORY_MIB`], [`Limits::TIMEOUT_MS`],
    /// [`Limits::FUEL`]) and a failure count of at least 1.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !mib_to_bytes(&Self::MEMORY_MIB).contains(&(self.memory_bytes as u64)) {
            return Err(format!(
                "the memory limit is {} bytes; give 1 MiB to 4 GiB",
                self.memory_bytes
            ));
        }
        if !mib_to_bytes(&Self::SCHEMA_MEMORY_MIB).contains(&(self.schema_memory_bytes as u64)) {
            return Err(format!(
                "the schema memory limit is {} bytes; give 1 MiB to 4 GiB",
                self.schema_memory_bytes
            ));
        }
        let longest = Duration::from_millis(*Self::TIMEOUT_MS.end());
        if self.call_timeout.is_zero() || self.call_timeout > longest {
            return Err(format!(
                "the time limit is {:?}; give 1 ms to one day",
                self.call_timeout
            ));
        }
        if self.max_consecutive_failures == 0 {
            return Err("max_consecutive_failures is 0; give at least 1".into());
        }
        if let Some(task_timeout) = self.task_timeout
            && (task_timeout.is_zero() || task_timeout > longest)
        {
            return Err(format!(
                "the task time limit is {task_timeout:?}; give 1 ms to one day"
            ));
        }
        if !Self::CONCURRENT_CALLS.contains(&self.max_concurrent_calls) {
            return Err(format!(
                "max_concurrent_calls is {}; {}",
                self.max_concurrent_calls,
                give(&(1..=u64::from(*Self::CONCURRENT_CALLS.end())))
            ));
        }
        if !Self::MAX_OUTPUT_BYTES.contains(&self.max_output_bytes) {
            return Err(format!(
                "max_output_bytes is {}; give 1 to {} (16 MiB)",
                self.max_output_bytes,
                Self::MAX_OUTPUT_BYTES.end()
            ));
        }
        if self.fuel.is_some_and(|fuel| !Self::FUEL.contains(&fuel)) {
            return Err("the fuel limit is 0; give at least 1 or none".into());
        }
        Ok(())
    }

    /// Sets the memory limit in bytes.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets the host memory one plugin's compiled schemas may take, in bytes.
    pub fn schema_memory_bytes(mut self, bytes: usize) -> Self {
        self.schema_memory_bytes = bytes;
        self
    }

    /// Sets the time limit of one call.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the largest input in bytes.
    pub fn max_input_bytes(mut self, bytes: usize) -> Self {
        self.max_input_bytes = bytes;
        self
    }

    /// Sets the largest output in bytes.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets the fuel one call may use (`None`: no fuel metering).
    pub fn fuel(mut self, fuel: Option<u64>) -> Self {
        self.fuel = fuel;
        self
    }

    /// Sets the time limit of one call running as a task.
    pub fn task_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.task_timeout = timeout;
        self
    }

    /// Sets how many calls one instance of a contract 1.0.0 plugin runs at once.
    pub fn max_concurrent_calls(mut self, calls: u32) -> Self {
        self.max_concurrent_calls = calls;
        self
    }

    /// Sets how many consecutive failures disable an instance.
    pub fn max_consecutive_failures(mut self, failures: u32) -> Self {
        self.max_consecutive_failures = failures;
        self
    }
}

/// What the operator grants one plugin, and the limits it runs under. Everything not granted
/// is denied.
///
/// Usually read from a policy file beside the plugin (`weather.wasm` + `weather.policy.toml`):
///
/// ```toml
/// [limits]                   # each key optional; the host's defaults fill the rest
/// memory_mib = 64
/// timeout_ms = 10000
/// max_input_bytes = 1048576
/// max_output_bytes = 1048576
/// max_consecutive_failures = 5
/// max_concurrent_calls = 8   # calls one instance runs at once (contract 1.0.0), 1-64
/// task_timeout_ms = 600000   # a call running as a task (default: timeout_ms)
/// fuel = 100000000           # only on hosts with fuel metering
/// schema_memory_mib = 256    # host memory for the plugin's compiled schemas, 1-4096
///
/// [env]
/// inherit = ["WEATHER_API_KEY"]  # copied from the host's environment (must be set)
/// set = { UNITS = "metric" }     # fixed values
///
/// [[dirs]]
/// host = "data"          # relative to the policy file's directory
/// guest = "/data"        # where the plugin sees it
/// mode = "ro"            # "ro" (default) or "rw"
///
/// [http]                 # outbound requests through wasi:http
/// allow = ["https://api.example.com", "*.example.org", "http://127.0.0.1:8080"]
/// allow_private = ["http://wiki.intranet.example"]  # granted, and may resolve to any address
///
/// [[http.secrets]]       # a header the host sets; the plugin never sees its value
/// host = "https://api.example.com"  # one of the rules; https, or http to a loopback address
/// header = "Authorization"          # named literally such as http://127.0.0.1:8080
/// value = "Bearer ${API_TOKEN}"     # ${VAR}s from the host's environment, at load
///
/// [tools.forecast.http]  # a narrower list for the calls of one tool
/// allow = ["https://api.example.com"]
///
/// [resources.http]       # what resource reads and lists may reach (default: nothing)
/// allow = ["https://api.example.com"]
/// # [prompts.http] and [completion.http] likewise, for prompt renderings and completions
///
/// [client]               # questions to the client (see `ClientPolicy`)
/// elicitation = true
/// sampling = false
/// roots = false
/// ```
///
/// # Network grants and private networks
///
/// A request's host name is resolved once, when the request is sent, and the connection goes
/// to an address that was checked (never to one a second lookup returns). A name that
/// resolves to an address that is not public is refused before any connection, with
/// `destination-IP-prohibited`: loopback (127.0.0.0/8, `::1`, and the names `localhost` and
/// `*.localhost`), unspecified (0.0.0.0/8, `::`), private (10.0.0.0/8, 172.16.0.0/12,
/// 192.168.0.0/16, fc00::/7), shared (100.64.0.0/10), link-local and cloud metadata
/// (169.254.0.0/16, fe80::/10), multicast and reserved ranges — including the IPv6 forms that
/// carry such an IPv4 address (`::ffff:127.0.0.1`, NAT64, 6to4). So a grant by name cannot be
/// turned toward the host's own network by DNS rebinding or a poisoned resolver. Two ways to
/// reach such an address on purpose:
///
/// - name the address literally in the rule: `http://127.0.0.1:8080`, `http://[::1]:8080`
///   (a wildcard such as `*.0.0.1` names no address);
/// - put the rule in `[http] allow_private` (it is then granted: there is no need to repeat
///   it in `allow`); a name it allows may resolve to any address. A tool's list narrows the
///   destinations and keeps their opt-in.
///
/// Secrets go only over `https`, or over `http` to a loopback address the rule names
/// literally: a secret on any other rule that allows `http` (`http://…`, or no scheme) is a
/// load error. Requests with the `TRACE` method are refused (`HTTP-request-denied`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxPolicy {
    /// The resource limits.
    pub limits: Limits,
    /// Environment variables the plugin sees, as name and value.
    pub env: Vec<(String, String)>,
    /// Directories the plugin may open.
    pub dirs: Vec<DirGrant>,
    /// Where the plugin may send HTTP requests.
    pub http: Vec<HttpGrant>,
    /// Headers the host sets on requests to granted destinations (API keys the plugin never
    /// sees).
    pub http_secrets: Vec<HttpSecret>,
    /// Per tool, a narrower list of destinations than `http` for that tool's calls.
    pub tool_http: BTreeMap<String, Vec<HttpGrant>>,
    /// The destinations of the plugin's answers to requests other than tool calls (resource
    /// reads, prompt renderings, completions): none unless granted here.
    pub request_http: RequestHttp,
    /// What the plugin may ask the client.
    pub client: ClientPolicy,
    /// Each directory grant as it was given (by index: the path a policy file wrote, made
    /// absolute, `..` kept; a grant built in code, its path before it was resolved), beside
    /// where it resolved ([`DirGrant::host`]): whether another plugin could redirect a grant is
    /// decided on the path the operator meant, not only on where a link put in it leads now.
    pub(crate) written_dirs: Vec<PathBuf>,
}

impl SandboxPolicy {
    /// The paths of grant `index`: where it resolved and, if it differs, as it was given.
    pub(crate) fn grant_paths(&self, index: usize) -> Vec<&Path> {
        let mut paths: Vec<&Path> = self
            .dirs
            .get(index)
            .map(|grant| grant.host.as_path())
            .into_iter()
            .collect();
        paths.extend(
            self.written_dirs
                .get(index)
                .map(PathBuf::as_path)
                .filter(|written| !paths.contains(written)),
        );
        paths
    }
}

/// Where a plugin may send HTTP requests while it answers a request that is not a tool call.
///
/// Such requests come from the client without any tool call or model involved: a client sends
/// `completion/complete` while its user types, and reads resources or renders prompts to show
/// them. So they get **no** HTTP by default, whatever `[http] allow` grants the plugin's tools;
/// each list here must be within `[http] allow`, and a secret of `[http.secrets]` goes along
/// only to a destination the list allows. The start of an instance gets none either.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestHttp {
    /// For `resources/list` and `resources/read` (`[resources.http] allow`).
    pub resources: Vec<HttpGrant>,
    /// For `prompts/list` and `prompts/get` (`[prompts.http] allow`).
    pub prompts: Vec<HttpGrant>,
    /// For `completion/complete` (`[completion.http] allow`).
    pub completion: Vec<HttpGrant>,
}

impl RequestHttp {
    /// Whether any request other than a tool call may send HTTP.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.prompts.is_empty() && self.completion.is_empty()
    }
}

/// A host directory granted to a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// The directory on the host (absolute).
    pub host: PathBuf,
    /// The path under which the plugin sees it.
    pub guest: String,
    /// Whether the plugin may create, change and delete files in it.
    pub writable: bool,
}

/// Why a policy file was refused. Every message names the file and, where it applies, the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {}: {source}", path.display())]
    Io {
        /// The policy file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or has unknown keys or values of the wrong type.
    #[error("policy file {} is invalid: {message}", path.display())]
    Parse {
        /// The policy file.
        path: PathBuf,
        /// The parser's message, with the line and key.
        message: String,
    },
    /// A value is out of range or a grant cannot be honoured.
    #[error("policy file {}: `{key}` {message}", path.display())]
    Invalid {
        /// The policy file.
        path: PathBuf,
        /// The key, e.g. `dirs[0].host`.
        key: String,
        /// What is wrong and what to do.
        message: String,
    },
}
