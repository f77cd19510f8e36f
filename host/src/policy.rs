//! [`SandboxPolicy`]: what the operator grants a plugin (environment variables, directories)
//! and the [`Limits`] it runs under, read from a policy file beside the plugin.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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
    /// [`Limits::check`] accept, in MiB: the one home of this range.
    pub const MEMORY_MIB: std::ops::RangeInclusive<u64> = 1..=4096;
    /// The schema memory budgets accepted (`schema_memory_mib`), in MiB.
    pub const SCHEMA_MEMORY_MIB: std::ops::RangeInclusive<u64> = 1..=4096;
    /// The time limits accepted (`timeout_ms`, `--timeout-ms`), in milliseconds: up to a day.
    pub const TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=86_400_000;
    /// The fuel limits accepted (`fuel`, `--fuel`): at least 1 (none means no metering).
    pub const FUEL: std::ops::RangeFrom<u64> = 1..;

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
}

/// A header the host sets on every request to one granted destination, replacing any value the
/// plugin set: how a plugin uses an API key without ever holding it. Its value is redacted
/// from `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSecret {
    /// The destination: one of the plugin's `[http] allow` rules.
    pub grant: HttpGrant,
    /// The header's name, e.g. `Authorization`.
    pub header: String,
    value: String,
}

impl HttpSecret {
    /// A secret header for requests `grant` allows.
    pub fn new(grant: HttpGrant, header: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            grant,
            header: header.into(),
            value: value.into(),
        }
    }

    /// The header's value (for the request, and hashed for a revision: never log it).
    #[cfg_attr(not(any(feature = "wasi-http", feature = "mcp")), allow(dead_code))]
    pub(crate) fn value(&self) -> &str {
        &self.value
    }
}

impl std::fmt::Debug for HttpSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSecret")
            .field("grant", &self.grant)
            .field("header", &self.header)
            .field("value", &"[redacted]")
            .finish()
    }
}

/// `text` with each `${NAME}` replaced by the host's environment variable NAME.
fn expand(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "has a `${` without its `}`".to_owned())?;
        let name = &after[..end];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "names the variable {name:?}; use ${{NAME}} with letters, digits and '_'"
            ));
        }
        let value = std::env::var(name).map_err(|_| {
            format!("names ${{{name}}}, which is not set in the host's environment; set it")
        })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl HttpGrant {
    /// Whether every request this grant allows is allowed by `wider` too.
    pub fn within(&self, wider: &HttpGrant) -> bool {
        let schemes: Vec<&str> = match &self.scheme {
            Some(scheme) => vec![scheme.as_str()],
            None => vec!["http", "https"],
        };
        schemes.into_iter().all(|scheme| {
            let port = self.port.or(match scheme {
                "http" => Some(80),
                _ => Some(443),
            });
            match (self.host.strip_prefix("*."), wider.host.starts_with("*.")) {
                (None, _) => wider.allows(scheme, &self.host, port),
                // Any name under this suffix is under the wider one, if a sample is.
                (Some(suffix), true) => wider.allows(scheme, &format!("a.{suffix}"), port),
                (Some(_), false) => false,
            }
        })
    }
}

/// A destination a plugin may send HTTP requests to: `[scheme://]host[:port]`, where the host
/// is a name (which may start with `*.` for any subdomain), an IPv4 address or an IPv6
/// address in brackets. Without a port, the scheme's default port (80 or 443); without a
/// scheme, `http` and `https` both.
///
/// A name the grant allows must resolve to public addresses only, unless the grant opts in
/// to the others ([`HttpGrant::with_private_addresses`], `[http] allow_private` in a policy
/// file); an address the grant names literally is reached whatever its range. See
/// [`SandboxPolicy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    scheme: Option<String>,
    host: String,
    port: Option<u16>,
    private: bool,
}

/// The address a literal host names: `127.0.0.1`, `[::1]` (the form of a URI's host); `None`
/// for a name, including numeric forms such as `127.1` that only a resolver reads as an
/// address.
pub(crate) fn literal_address(host: &str) -> Option<IpAddr> {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

/// Whether a request to `scheme://host` may carry a secret: over https, or to a loopback
/// address named literally.
pub(crate) fn may_carry_secrets(scheme: Option<&str>, host: &str) -> bool {
    scheme == Some("https")
        || literal_address(host).is_some_and(|ip| ip.to_canonical().is_loopback())
}

impl HttpGrant {
    /// Parses `https://api.example.com`, `*.example.com`, `http://127.0.0.1:8080` …
    pub fn parse(rule: &str) -> Result<Self, String> {
        let (scheme, rest) = match rule.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => (Some(scheme.to_owned()), rest),
            Some((other, _)) => {
                return Err(format!("has the scheme {other:?}; use http or https"));
            }
            None => (None, rule),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('@') || rest.contains('?') {
            return Err("must be [scheme://]host[:port], without a path or user".into());
        }
        let parse_port = |port: &str| {
            port.parse::<u16>()
                .ok()
                .filter(|&port| port != 0)
                .ok_or_else(|| format!("has the port {port:?}; give a number 1-65535"))
        };
        if let Some(bracketed) = rest.strip_prefix('[') {
            let (address, after) = bracketed
                .split_once(']')
                .ok_or("has a '[' without its ']'; write an IPv6 address as [::1]")?;
            let address: Ipv6Addr = address.parse().map_err(|_| {
                format!("has {address:?} in brackets, which is not an IPv6 address")
            })?;
            let port = match after {
                "" => None,
                _ => Some(parse_port(after.strip_prefix(':').ok_or_else(|| {
                    format!("has {after:?} after the address; give :port or nothing")
                })?)?),
            };
            return Ok(Self {
                scheme,
                host: format!("[{address}]"),
                port,
                private: false,
            });
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(parse_port(port)?)),
            None => (rest, None),
        };
        let bare = host.strip_prefix("*.").unwrap_or(host);
        if bare.is_empty()
            || !bare
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        {
            return Err(format!(
                "has the host {host:?}; give a name or address such as api.example.com"
            ));
        }
        Ok(Self {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            private: false,
        })
    }

    /// This grant, opted in to addresses that are not public: a name it allows may resolve to
    /// a loopback, private, link-local … address (`[http] allow_private` in a policy file).
    pub fn with_private_addresses(mut self) -> Self {
        self.private = true;
        self
    }

    /// Whether a name this grant allows may resolve to an address that is not public.
    pub fn allows_private_addresses(&self) -> bool {
        self.private
    }

    /// The address the grant names literally (`http://127.0.0.1:8080`, `http://[::1]`); `None`
    /// for a name or a wildcard.
    #[cfg_attr(not(feature = "wasi-http"), allow(dead_code))]
    pub(crate) fn address(&self) -> Option<IpAddr> {
        literal_address(&self.host)
    }

    /// Whether both allow the same requests (whatever their opt-in to private addresses).
    fn same_destination(&self, other: &Self) -> bool {
        (&self.scheme, &self.host, self.port) == (&other.scheme, &other.host, other.port)
    }

    /// Whether a request to `scheme://host:port` is allowed by this grant.
    pub fn allows(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme) {
            return false;
        }
        let default_port = match scheme {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        if port.unwrap_or(default_port) != self.port.unwrap_or(default_port) {
            return false;
        }
        let host = match literal_address(host) {
            // `[0::1]` is `[::1]`.
            Some(IpAddr::V6(address)) => format!("[{address}]"),
            _ => host.to_ascii_lowercase(),
        };
        match self.host.strip_prefix("*.") {
            Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
            None => host == self.host,
        }
    }
}

impl std::fmt::Display for HttpGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(scheme) = &self.scheme {
            write!(f, "{scheme}://")?;
        }
        f.write_str(&self.host)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    limits: LimitsFile,
    #[serde(default)]
    env: EnvFile,
    #[serde(default)]
    dirs: Vec<DirFile>,
    #[serde(default)]
    http: HttpFile,
    #[serde(default)]
    tools: BTreeMap<String, ToolFile>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    #[serde(default)]
    allow: Vec<String>,
    /// Rules granted like `allow`'s, whose names may resolve to non-public addresses.
    #[serde(default)]
    allow_private: Vec<String>,
    #[serde(default)]
    secrets: Vec<SecretFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretFile {
    host: String,
    header: String,
    value: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    #[serde(default)]
    http: ToolHttpFile,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolHttpFile {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    max_input_bytes: Option<usize>,
    max_output_bytes: Option<usize>,
    max_consecutive_failures: Option<u32>,
    fuel: Option<u64>,
    schema_memory_mib: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    #[serde(default)]
    inherit: Vec<String>,
    #[serde(default)]
    set: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirFile {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    mode: DirMode,
}

#[derive(Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum DirMode {
    #[default]
    Ro,
    Rw,
}

impl SandboxPolicy {
    /// The policy with these limits and no grants.
    pub fn with_limits(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The policy file of a plugin: `weather.wasm` → `weather.policy.toml`, beside it.
    pub fn path_for(plugin: &Path) -> PathBuf {
        let stem = plugin.file_stem().unwrap_or_default().to_string_lossy();
        plugin.with_file_name(format!("{stem}.policy.toml"))
    }

    /// Reads a policy file; limits it does not set come from `defaults`.
    pub fn from_file(path: &Path, defaults: &Limits) -> Result<Self, PolicyError> {
        let text = Self::read_text(path)?;
        Self::parse(&text, path, defaults)
    }

    /// The text of a policy file: a regular file, within the size limit, UTF-8.
    pub(crate) fn read_text(path: &Path) -> Result<String, PolicyError> {
        let io = |source| PolicyError::Io {
            path: path.to_owned(),
            source,
        };
        let bytes = crate::file::read_regular_file(path, MAX_POLICY_BYTES).map_err(|error| {
            io(match error {
                crate::file::ReadError::Io(error) => error,
                crate::file::ReadError::NotAFile => std::io::Error::other(
                    "it is not a regular file (a FIFO, device, socket or directory)",
                ),
                crate::file::ReadError::TooLarge(size) => std::io::Error::other(format!(
                    "it is {size} bytes, over the limit of {MAX_POLICY_BYTES} bytes for a policy"
                )),
            })
        })?;
        String::from_utf8(bytes).map_err(|_| io(std::io::Error::other("it is not UTF-8 text")))
    }

    /// Parses a policy; `path` names it in messages, and relative directories are resolved
    /// against its directory.
    pub fn parse(text: &str, path: &Path, defaults: &Limits) -> Result<Self, PolicyError> {
        // The parser's message keeps its excerpt of the file, over several lines.
        let file: PolicyFile = toml::from_str(text).map_err(|e| PolicyError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let invalid = |key: &str, message: String| PolicyError::Invalid {
            path: path.to_owned(),
            key: key.to_owned(),
            message,
        };

        let mut limits = defaults.clone();
        let l = &file.limits;
        if let Some(mib) = l.memory_mib {
            if !Limits::MEMORY_MIB.contains(&mib) {
                return Err(invalid(
                    "limits.memory_mib",
                    format!("is {mib}; {}", give(&Limits::MEMORY_MIB)),
                ));
            }
            limits.memory_bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        }
        if let Some(ms) = l.timeout_ms {
            if !Limits::TIMEOUT_MS.contains(&ms) {
                return Err(invalid(
                    "limits.timeout_ms",
                    format!("is {ms}; {} (one day)", give(&Limits::TIMEOUT_MS)),
                ));
            }
            limits.call_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = l.max_input_bytes {
            limits.max_input_bytes = bytes;
        }
        if let Some(bytes) = l.max_output_bytes {
            limits.max_output_bytes = bytes;
        }
        if let Some(failures) = l.max_consecutive_failures {
            if failures == 0 {
                return Err(invalid(
                    "limits.max_consecutive_failures",
                    "is 0; give at least 1".into(),
                ));
            }
            limits.max_consecutive_failures = failures;
        }
        if let Some(fuel) = l.fuel {
            if !Limits::FUEL.contains(&fuel) {
                return Err(invalid("limits.fuel", "is 0; give at least 1".into()));
            }
            limits.fuel = Some(fuel);
        }
        if let Some(mib) = l.schema_memory_mib {
            if !Limits::SCHEMA_MEMORY_MIB.contains(&mib) {
                return Err(invalid(
                    "limits.schema_memory_mib",
                    format!("is {mib}; {}", give(&Limits::SCHEMA_MEMORY_MIB)),
                ));
            }
            limits.schema_memory_bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        }

        let mut env = Vec::new();
        for (index, name) in file.env.inherit.iter().enumerate() {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(invalid(
                    &format!("env.inherit[{index}]"),
                    format!(
                        "is {name:?}, not a valid environment variable name (it is empty or has \
                         '=' or NUL in it)"
                    ),
                ));
            }
            let value = std::env::var(name).map_err(|_| {
                invalid(
                    &format!("env.inherit[{index}]"),
                    format!("names {name}, which is not set in the host's environment; set it or remove the grant"),
                )
            })?;
            env.push((name.clone(), value));
        }
        for name in file.env.set.keys() {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(invalid(
                    &format!("env.set.{name}"),
                    "is not a valid environment variable name (it is empty or has '=' or NUL \
                     in it)"
                        .into(),
                ));
            }
        }
        env.extend(file.env.set);

        let base = path.parent().unwrap_or_else(|| Path::new("."));
        let mut dirs = Vec::new();
        for (index, dir) in file.dirs.into_iter().enumerate() {
            let host = base.join(&dir.host);
            let host = host.canonicalize().map_err(|e| {
                invalid(
                    &format!("dirs[{index}].host"),
                    format!("is {}, which cannot be opened: {e}", host.display()),
                )
            })?;
            if !host.is_dir() {
                return Err(invalid(
                    &format!("dirs[{index}].host"),
                    format!("is {}, which is not a directory", host.display()),
                ));
            }
            if dirs
                .iter()
                .any(|granted: &DirGrant| granted.guest == dir.guest)
            {
                return Err(invalid(
                    &format!("dirs[{index}].guest"),
                    format!(
                        "is {:?}, which an earlier grant uses already; give each directory its \
                         own guest path",
                        dir.guest
                    ),
                ));
            }
            if !dir.guest.starts_with('/') {
                return Err(invalid(
                    &format!("dirs[{index}].guest"),
                    format!(
                        "is {:?}; give an absolute path such as \"/data\"",
                        dir.guest
                    ),
                ));
            }
            dirs.push(DirGrant {
                host,
                guest: dir.guest,
                writable: dir.mode == DirMode::Rw,
            });
        }
        let grants = |key: &str, rules: &[String]| -> Result<Vec<HttpGrant>, PolicyError> {
            rules
                .iter()
                .enumerate()
                .map(|(index, rule)| {
                    HttpGrant::parse(rule).map_err(|message| {
                        invalid(&format!("{key}[{index}]"), format!("({rule:?}) {message}"))
                    })
                })
                .collect()
        };
        let mut http = grants("http.allow", &file.http.allow)?;
        for grant in grants("http.allow_private", &file.http.allow_private)? {
            let grant = grant.with_private_addresses();
            match http.iter_mut().find(|rule| rule.same_destination(&grant)) {
                Some(rule) => *rule = grant,
                None => http.push(grant),
            }
        }
        let mut http_secrets = Vec::new();
        for (index, secret) in file.http.secrets.iter().enumerate() {
            let key = |field: &str| format!("http.secrets[{index}].{field}");
            let grant = HttpGrant::parse(&secret.host)
                .ok()
                .filter(|grant| http.iter().any(|rule| rule.same_destination(grant)))
                .ok_or_else(|| {
                    invalid(
                        &key("host"),
                        format!(
                            "is {:?}, which is not one of the rules of [http] allow; a secret \
                             goes only to a granted destination",
                            secret.host
                        ),
                    )
                })?;
            if !may_carry_secrets(grant.scheme.as_deref(), &grant.host) {
                let https = HttpGrant {
                    scheme: Some("https".into()),
                    ..grant.clone()
                };
                return Err(invalid(
                    &key("host"),
                    format!(
                        "is {:?}, a rule that allows plain http, which would send the secret \
                         unencrypted: a secret goes only over https, or over http to a loopback \
                         address the rule names literally (such as http://127.0.0.1:8080); \
                         grant and name \"{https}\" instead",
                        secret.host
                    ),
                ));
            }
            let header_ok = !secret.header.is_empty()
                && secret
                    .header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !header_ok {
                return Err(invalid(
                    &key("header"),
                    format!("is {:?}, not an HTTP header name", secret.header),
                ));
            }
            let value = expand(&secret.value).map_err(|message| invalid(&key("value"), message))?;
            // Never quote the value: it is the secret.
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid(
                    &key("value"),
                    "holds a line break or NUL once expanded, which no header may".into(),
                ));
            }
            http_secrets.push(HttpSecret::new(grant, secret.header.clone(), value));
        }
        let mut tool_http = BTreeMap::new();
        for (tool, rules) in &file.tools {
            let key = format!("tools.{tool}.http.allow");
            let narrowed = grants(&key, &rules.http.allow)?;
            for (index, grant) in narrowed.iter().enumerate() {
                if !http.iter().any(|wider| grant.within(wider)) {
                    return Err(invalid(
                        &format!("{key}[{index}]"),
                        format!(
                            "({grant}) is wider than the plugin's [http] allow; a tool's list \
                             may only narrow the plugin's"
                        ),
                    ));
                }
            }
            tool_http.insert(tool.clone(), narrowed);
        }
        Ok(Self {
            limits,
            env,
            dirs,
            http,
            http_secrets,
            tool_http,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SandboxPolicy, PolicyError> {
        SandboxPolicy::parse(
            text,
            Path::new("/plugins/w.policy.toml"),
            &Limits::default(),
        )
    }

    #[test]
    fn an_empty_policy_grants_nothing() {
        assert_eq!(parse("").ok(), Some(SandboxPolicy::default()));
    }

    #[test]
    fn limits_override_the_defaults_key_by_key() {
        let policy =
            parse("[limits]\nmemory_mib = 8\ntimeout_ms = 250\nschema_memory_mib = 1024\n")
                .expect("valid");
        assert_eq!(policy.limits.memory_bytes, 8 << 20);
        assert_eq!(policy.limits.schema_memory_bytes, 1 << 30);
        assert_eq!(policy.limits.call_timeout, Duration::from_millis(250));
        assert_eq!(
            policy.limits.max_output_bytes,
            Limits::default().max_output_bytes
        );
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        assert_eq!(
            parse("[limits]\nfuel = 7\n")
                .ok()
                .and_then(|p| p.limits.fuel),
            Some(7)
        );
        let message = parse("[limits]\nmemory = 8\n")
            .expect_err("unknown")
            .to_string();
        assert!(
            message.contains("/plugins/w.policy.toml") && message.contains("memory"),
            "{message}"
        );
        let message = parse("[limits]\nmemory_mib = 0\n")
            .expect_err("range")
            .to_string();
        assert!(message.contains("limits.memory_mib"), "{message}");
        for bad in ["0", "4097"] {
            let message = parse(&format!("[limits]\nschema_memory_mib = {bad}\n"))
                .expect_err("range")
                .to_string();
            assert!(
                message.contains("limits.schema_memory_mib") && message.contains("1 to 4096"),
                "{message}"
            );
        }
        assert!(
            Limits::default()
                .schema_memory_bytes(1 << 19)
                .check()
                .is_err_and(|message| message.contains("schema memory"))
        );
        let message = parse("[limits]\ntimeout_ms = \"soon\"\n")
            .expect_err("type")
            .to_string();
        assert!(message.contains("timeout_ms"), "{message}");
        let message = parse("[[dirs]]\nhost = \"/no/such/dir\"\nguest = \"/d\"\n")
            .expect_err("missing dir")
            .to_string();
        assert!(message.contains("dirs[0].host"), "{message}");
        let message = parse("[[dirs]]\nhost = \"/\"\nguest = \"d\"\nmode = \"ro\"\n")
            .expect_err("relative guest")
            .to_string();
        assert!(message.contains("dirs[0].guest"), "{message}");
        let message = parse("[[dirs]]\nhost = \"/\"\nguest = \"/d\"\nmode = \"rwx\"\n")
            .expect_err("bad mode")
            .to_string();
        assert!(message.contains("rwx"), "{message}");
        let message = parse("[env]\ninherit = [\"LLM_WORKER_SURELY_UNSET\"]\n")
            .expect_err("unset")
            .to_string();
        assert!(message.contains("env.inherit[0]"), "{message}");
        let message = parse("[env]\nset = { \"A=B\" = \"c\" }\n")
            .expect_err("= in a name")
            .to_string();
        assert!(message.contains("env.set.A=B"), "{message}");
        let message = parse("[env]\ninherit = [\"A=B\"]\n")
            .expect_err("= in a name")
            .to_string();
        assert!(
            message.contains("not a valid environment variable name"),
            "{message}"
        );
        let message = parse(
            "[[dirs]]\nhost = \"/tmp\"\nguest = \"/d\"\n[[dirs]]\nhost = \"/\"\nguest = \"/d\"\n",
        )
        .expect_err("the same guest path twice")
        .to_string();
        assert!(message.contains("dirs[1].guest"), "{message}");
        // TOML errors keep the parser's excerpt of the file, line by line.
        let message = parse("[limits]\nmemory_mib = \n")
            .expect_err("bad toml")
            .to_string();
        assert!(message.lines().count() > 1, "{message}");
    }

    #[test]
    fn grants_are_resolved() {
        let policy = parse(
            "[env]\ninherit = [\"PATH\"]\nset = { MODE = \"test\" }\n\
             [[dirs]]\nhost = \"/tmp\"\nguest = \"/scratch\"\nmode = \"rw\"\n",
        )
        .expect("valid");
        assert_eq!(policy.env[0].0, "PATH");
        assert_eq!(policy.env[1], ("MODE".to_owned(), "test".to_owned()));
        assert_eq!(policy.dirs[0].guest, "/scratch");
        assert!(policy.dirs[0].writable);
        assert!(policy.dirs[0].host.is_absolute());
    }

    #[test]
    fn http_grants_match_scheme_host_and_port() {
        let grant = |rule: &str| HttpGrant::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
        let api = grant("https://api.example.com");
        assert!(api.allows("https", "api.example.com", None));
        assert!(api.allows("https", "API.example.com", Some(443)));
        assert!(!api.allows("http", "api.example.com", None));
        assert!(!api.allows("https", "api.example.com", Some(8443)));
        assert!(!api.allows("https", "evil.com", None));
        let wild = grant("*.example.org");
        assert!(wild.allows("https", "a.example.org", None));
        assert!(wild.allows("http", "a.b.example.org", Some(80)));
        assert!(!wild.allows("https", "example.org", None));
        assert!(!wild.allows("https", "evilexample.org", None));
        let local = grant("http://127.0.0.1:8080");
        assert!(local.allows("http", "127.0.0.1", Some(8080)));
        assert!(!local.allows("http", "127.0.0.1", None));
        for bad in [
            "ftp://x",
            "https://x/path",
            "x:notaport",
            "",
            "https://user@x",
            "*.",
            "http://127.0.0.1:0",
            "localhost:65536",
        ] {
            assert!(HttpGrant::parse(bad).is_err(), "{bad}");
        }
        let message = parse("[http]\nallow = [\"https://ok.com\", \"gopher://x\"]\n")
            .expect_err("bad scheme")
            .to_string();
        assert!(message.contains("http.allow[1]"), "{message}");
    }

    #[test]
    fn ipv6_addresses_are_granted_in_brackets() {
        let grant = |rule: &str| HttpGrant::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
        let v6 = grant("http://[0:0::1]:8080");
        assert_eq!(v6.to_string(), "http://[::1]:8080");
        assert_eq!(v6.address(), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(v6.allows("http", "[::1]", Some(8080)));
        assert!(v6.allows("http", "[0::1]", Some(8080)));
        assert!(!v6.allows("http", "[::2]", Some(8080)));
        assert!(!v6.allows("http", "::1", Some(8080)));
        assert!(grant("[2001:DB8::1]").allows("https", "[2001:db8::1]", None));
        assert_eq!(
            grant("http://127.0.0.1").address(),
            Some([127, 0, 0, 1].into())
        );
        for not_an_address in ["localhost", "*.0.0.1", "127.1", "2130706433"] {
            assert_eq!(grant(not_an_address).address(), None, "{not_an_address}");
        }
        for bad in [
            "http://[::1",
            "http://[x]:80",
            "http://[::1]80",
            "http://[::1]:0",
            "::1",
        ] {
            assert!(HttpGrant::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_private_grants_its_rules_with_the_opt_in() {
        let policy = parse(
            "[http]\nallow = [\"https://api.example.com\", \"http://intranet:8080\"]\n\
             allow_private = [\"http://intranet:8080\", \"http://wiki.intranet\"]\n",
        )
        .expect("valid");
        let rules: Vec<(String, bool)> = policy
            .http
            .iter()
            .map(|grant| (grant.to_string(), grant.allows_private_addresses()))
            .collect();
        assert_eq!(
            rules,
            [
                ("https://api.example.com".to_owned(), false),
                ("http://intranet:8080".to_owned(), true),
                ("http://wiki.intranet".to_owned(), true),
            ]
        );
        let message = parse("[http]\nallow_private = [\"ftp://x\"]\n")
            .expect_err("bad rule")
            .to_string();
        assert!(message.contains("http.allow_private[0]"), "{message}");
        // A tool's list may narrow to an opted-in rule.
        assert!(
            parse(
                "[http]\nallow_private = [\"http://wiki.intranet\"]\n\
                 [tools.t.http]\nallow = [\"http://wiki.intranet\"]\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn secrets_go_over_https_or_to_a_loopback_address_named_literally() {
        let secret = |allow: &str, rule: &str| {
            parse(&format!(
                "[http]\n{allow} = [\"{rule}\"]\n[[http.secrets]]\nhost = \"{rule}\"\n\
                 header = \"Authorization\"\nvalue = \"x\"\n"
            ))
        };
        for rule in [
            "https://api.example.com",
            "https://10.0.0.1:8443",
            "http://127.0.0.1:8080",
            "127.0.0.2",
            "http://[::1]:8080",
            "http://[::ffff:127.0.0.1]",
        ] {
            assert!(secret("allow", rule).is_ok(), "{rule}");
        }
        for (allow, rule) in [
            ("allow", "http://api.example.com"),
            ("allow", "api.example.com"),
            ("allow", "http://localhost:8080"),
            ("allow", "http://10.0.0.1"),
            ("allow", "http://*.example.com"),
            ("allow_private", "http://localhost:8080"),
        ] {
            let message = secret(allow, rule).expect_err(rule).to_string();
            assert!(
                message.contains("http.secrets[0].host") && message.contains("https://"),
                "{rule}: {message}"
            );
        }
        // The message names the rule to write.
        let message = secret("allow", "api.example.com:8443")
            .expect_err("plain http")
            .to_string();
        assert!(
            message.contains("\"https://api.example.com:8443\""),
            "{message}"
        );
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// Policy-shaped text: known and unknown keys, values of every type and range.
        fn policy_text() -> impl Strategy<Value = String> {
            let value = prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                Just("0".to_owned()),
                Just("4097".to_owned()),
                "\"[a-z0-9:/.*@?-]{0,24}\"",
                Just("[\"PATH\"]".to_owned()),
                Just("{ A = \"b\" }".to_owned()),
                Just("true".to_owned()),
                Just("1.5".to_owned()),
            ];
            let line = (
                prop_oneof![
                    Just("[limits]"),
                    Just("[env]"),
                    Just("[http]"),
                    Just("[[dirs]]"),
                    Just("")
                ],
                prop_oneof![
                    Just("memory_mib"),
                    Just("timeout_ms"),
                    Just("max_input_bytes"),
                    Just("max_output_bytes"),
                    Just("max_consecutive_failures"),
                    Just("fuel"),
                    Just("schema_memory_mib"),
                    Just("inherit"),
                    Just("set"),
                    Just("allow"),
                    Just("allow_private"),
                    Just("host"),
                    Just("guest"),
                    Just("mode"),
                    Just("other"),
                ],
                value,
            )
                .prop_map(|(table, key, value)| format!("{table}\n{key} = {value}\n"));
            prop::collection::vec(line, 0..6).prop_map(|lines| lines.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

            /// Any text: an error or a policy, never a panic.
            #[test]
            fn any_text_is_a_policy_or_an_error(text in "(?s).{0,200}") {
                let _ = SandboxPolicy::parse(&text, Path::new("/p/x.policy.toml"), &Limits::default());
            }

            /// Policy-shaped text: whatever is accepted is within the documented ranges, and
            /// every HTTP grant has a port from 1 to 65535.
            #[test]
            fn accepted_policies_are_within_range(text in policy_text()) {
                if let Ok(policy) = SandboxPolicy::parse(&text, Path::new("/p/x.policy.toml"), &Limits::default()) {
                    prop_assert!(policy.limits.check().is_ok(), "{:?}", policy.limits);
                    for grant in &policy.http {
                        prop_assert!(grant.port != Some(0), "{}", grant);
                    }
                }
            }

            /// HTTP rules: parsed or refused, never a panic; an accepted rule allows its own
            /// host and never a host outside it.
            #[test]
            fn http_rules_allow_only_their_host(rule in "[a-z*.:/0-9@-]{0,30}", other in "[a-z]{1,8}") {
                if let Ok(grant) = HttpGrant::parse(&rule) {
                    let host = grant.host.trim_start_matches("*.").to_owned();
                    let outside = format!("{other}x.invalid");
                    prop_assert!(!grant.allows("https", &outside, None) || host == outside);
                }
            }
        }
    }

    #[test]
    fn policy_files_sit_beside_plugins() {
        assert_eq!(
            SandboxPolicy::path_for(Path::new("/p/weather.wasm")),
            Path::new("/p/weather.policy.toml")
        );
    }
}
