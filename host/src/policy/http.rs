//! Network grants: [`HttpGrant`] (a destination a plugin may reach: scheme, host pattern,
//! port) and [`HttpSecret`] (a header the host sets for one destination, its value never shown
//! to the plugin or in `Debug` output).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A header the host sets on every request to one granted destination, replacing any value the
/// plugin set: how a plugin uses an API key without ever holding it. Its value is redacted
/// from `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSecret {
    /// The destination: one of the plugin's `[http] allow` rules.
    pub grant: HttpGrant,
    /// The header's name, e.g. `Authorization`.
    pub header: String,
    pub(super) value: String,
    /// The host's environment variables the value was made of, by name.
    pub(super) variables: Vec<String>,
}

impl HttpSecret {
    /// A secret header for requests `grant` allows.
    pub fn new(grant: HttpGrant, header: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            grant,
            header: header.into(),
            value: value.into(),
            variables: Vec::new(),
        }
    }

    /// The names of the host's environment variables its value was made of (`${NAME}` in a
    /// policy file), in order, each once: what an operator sets for it. Never their values.
    pub fn variables(&self) -> &[String] {
        &self.variables
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
            .field("variables", &self.variables)
            .finish()
    }
}

/// `text` with each `${NAME}` replaced by the host's environment variable NAME.
pub(super) fn expand(text: &str) -> Result<String, String> {
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
/// [`SandboxPolicy`](super::SandboxPolicy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    pub(super) scheme: Option<String>,
    pub(super) host: String,
    pub(super) port: Option<u16>,
    pub(super) private: bool,
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
        || crate::loopback::loopback(host) == Some(crate::loopback::Loopback::Address)
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
    pub(super) fn same_destination(&self, other: &Self) -> bool {
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

/// Whether `value` may be an HTTP header's value as the host sends it: visible ASCII, spaces
/// and tabs only (what `http::HeaderValue::from_str` takes; a secret that is not is refused
/// when its policy is read, never skipped when a request leaves).
pub(crate) fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}
