//! The gate every request passes before rmcp sees it: `Host` and `Origin` validation first,
//! then (in [`super::auth`]) its token, then the session cap; each refusal a JSON-RPC error.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

use super::Body;
use crate::mcp::admission::SessionCounter;

/// A JSON-RPC error as an HTTP response (no request id: the request was not read).
pub(super) fn refusal(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": message},
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The `Host` values a server listening on loopback answers to unless told others.
pub(in crate::mcp) const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// What every request passes before rmcp sees it, in this order: its `Host`, its `Origin`
/// (so that a bad one is 403 whatever the token), then, after its token, the session cap.
pub(in crate::mcp) struct Gate {
    /// `Host` values accepted (lower-case names, or `name:port`); empty: any.
    pub(super) allowed_hosts: Vec<String>,
    /// Browser origins accepted besides the server's own.
    pub(super) allowed_origins: Vec<String>,
    pub(super) sessions: Arc<SessionCounter>,
    pub(super) max_sessions: usize,
}

/// A `Host` header or an origin's host and port, compared without case.
#[derive(Debug, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(text: &str) -> Option<Self> {
        let authority: http::uri::Authority = text.trim().parse().ok()?;
        // A user-info part has no place in a Host header or an origin.
        if authority.as_str().contains('@') {
            return None;
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        Some(Self {
            host,
            port: authority.port_u16(),
        })
    }

    /// Whether this, an origin's authority (its port filled in), is the server's own origin
    /// for a request sent to `host`: the same host and port; or, on the same port, two loopback
    /// names (`localhost`, `127.0.0.1`, `::1`), as a client that reached the server at
    /// `127.0.0.1:PORT` may name it `http://localhost:PORT`. A loopback origin is a page served
    /// by this machine on that port, never a remote one: a page of evil.example whose name
    /// resolves to 127.0.0.1 still has the origin `http://evil.example` (and sends that `Host`).
    fn is_own_origin(&self, scheme: &str, host: &Authority) -> bool {
        // A Host without a port was sent to the origin scheme's default port.
        let default = if scheme == "https" { 443 } else { 80 };
        self.port == Some(host.port.unwrap_or(default))
            && (self.host == host.host
                || (is_loopback_name(&self.host) && is_loopback_name(&host.host)))
    }

    /// Whether an entry of `--allowed-host` (`name`, `name:port`, or a bare IPv6 address such
    /// as `::1`) admits it.
    fn allowed_by(&self, entry: &str) -> bool {
        if let Ok(std::net::IpAddr::V6(address)) = entry.trim().parse::<std::net::IpAddr>() {
            return self.host == address.to_string();
        }
        match Authority::parse(entry) {
            Some(Authority { host, port: None }) => host == self.host,
            Some(allowed) => allowed == *self,
            None => false,
        }
    }
}

/// Whether `host` (lower case, an IPv6 address without brackets) is one of the names the
/// loopback interface answers to by default: `localhost` and the addresses it stands for,
/// not every loopback address (another server of this machine may listen on `127.0.0.2` at
/// the same port).
fn is_loopback_name(host: &str) -> bool {
    match crate::loopback::loopback(host) {
        Some(crate::loopback::Loopback::Localhost) => true,
        Some(crate::loopback::Loopback::Address) => matches!(host, "127.0.0.1" | "::1"),
        _ => false,
    }
}

/// The scheme and authority of an `Origin` header (`https://app.example.com:8443`).
fn parse_origin(origin: &str) -> Option<(String, Authority)> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https") || rest.contains(['/', '?', '#']) {
        return None;
    }
    let mut authority = Authority::parse(rest)?;
    authority.port = authority
        .port
        .or(Some(if scheme == "https" { 443 } else { 80 }));
    Some((scheme, authority))
}

impl Gate {
    /// A gate of `Host` and `Origin` only (no session cap), for a listener of its own.
    #[cfg(feature = "metrics")]
    pub(in crate::mcp) fn hosts(allowed_hosts: Vec<String>) -> Self {
        Self {
            allowed_hosts,
            allowed_origins: Vec::new(),
            sessions: Arc::default(),
            max_sessions: usize::MAX,
        }
    }

    /// The request's `Host`, if it is one this server answers to.
    fn host<B>(&self, request: &Request<B>) -> Result<Option<Authority>, String> {
        let Some(value) = request.headers().get(header::HOST) else {
            return if self.allowed_hosts.is_empty() {
                Ok(None)
            } else {
                Err("the request has no Host header".into())
            };
        };
        let text = value.to_str().unwrap_or_default();
        let Some(host) = Authority::parse(text) else {
            return Err(format!("the Host header {text:?} is not a host name"));
        };
        if self.allowed_hosts.is_empty()
            || self
                .allowed_hosts
                .iter()
                .any(|entry| host.allowed_by(entry))
        {
            Ok(Some(host))
        } else {
            Err(format!(
                "the Host {text:?} is not one this server answers to (DNS rebinding?); the \
                 operator can allow it with --allowed-host"
            ))
        }
    }

    /// Whether the request's `Origin`, if it has one, may call: the server's own origin (the
    /// same host and port as the `Host` it was sent to, see [`Authority::is_own_origin`]), or
    /// one the operator allowed.
    fn check_origin<B>(
        &self,
        request: &Request<B>,
        host: Option<&Authority>,
    ) -> Result<(), String> {
        let Some(value) = request.headers().get(header::ORIGIN) else {
            return Ok(());
        };
        let text = value.to_str().unwrap_or_default().trim();
        let origin = parse_origin(text);
        let allowed = self.allowed_origins.iter().any(|entry| {
            let entry = entry.trim();
            if entry.eq_ignore_ascii_case(text) {
                return true;
            }
            // `http://localhost:*`: any port of that scheme and host.
            if let Some(any_port) = entry.strip_suffix(":*") {
                return parse_origin(any_port).is_some_and(|(scheme, allowed)| {
                    origin
                        .as_ref()
                        .is_some_and(|(given, at)| *given == scheme && at.host == allowed.host)
                });
            }
            parse_origin(entry).is_some_and(|entry| origin.as_ref() == Some(&entry))
        });
        let same_origin = origin.is_some_and(|(scheme, origin)| {
            host.is_some_and(|host| origin.is_own_origin(&scheme, host))
        });
        if allowed || same_origin {
            Ok(())
        } else {
            Err(format!(
                "requests from the web origin {text:?} are not allowed; the operator can allow \
                 it with --allowed-origin"
            ))
        }
    }

    /// Refuses a request whose `Host` or `Origin` this server does not answer to.
    pub(super) fn check<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        self.refused(request)
            .map(|message| refusal(StatusCode::FORBIDDEN, &message))
    }

    /// Why a request's `Host` or `Origin` is not one this server answers to, if it is not.
    pub(in crate::mcp) fn refused<B>(&self, request: &Request<B>) -> Option<String> {
        let host = match self.host(request) {
            Ok(host) => host,
            Err(message) => return Some(message),
        };
        self.check_origin(request, host.as_ref()).err()
    }

    /// Refuses a request that would open a session past the cap.
    pub(super) fn check_capacity<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        // A POST without a session id opens a session (or is a stateless request, which is a
        // session of its own while it runs).
        let opens_session = request.method() == http::Method::POST
            && !request.headers().contains_key("mcp-session-id");
        if opens_session && self.sessions.live() >= self.max_sessions {
            let mut response = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "this MCP server has {} sessions open, its limit; try again when one ends",
                    self.max_sessions
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            return Some(response);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_are_compared_by_host_and_port() {
        let host = |text| Authority::parse(text).expect("a host");
        assert!(host("LocalHost:8080").allowed_by("localhost"));
        assert!(host("localhost:8080").allowed_by("localhost:8080"));
        assert!(!host("localhost:8081").allowed_by("localhost:8080"));
        assert!(host("[::1]:8080").allowed_by("::1"));
        assert!(!host("evil.example").allowed_by("localhost"));
        assert!(Authority::parse("user@localhost").is_none());

        let (scheme, origin) = parse_origin("https://App.Example.com").expect("an origin");
        assert_eq!(
            (scheme.as_str(), origin.host.as_str()),
            ("https", "app.example.com")
        );
        assert_eq!(origin.port, Some(443), "the scheme's default port");
        assert_eq!(
            parse_origin("http://localhost").map(|(_, o)| o.port),
            Some(Some(80))
        );
        for refused in [
            "null",
            "file://x",
            "http://a/path",
            "localhost:8080",
            "ftp://a",
        ] {
            assert!(parse_origin(refused).is_none(), "{refused}");
        }
    }

    /// The gate of a server on loopback without tokens, as `serve --http 127.0.0.1:8080
    /// --no-auth` builds it.
    fn loopback_gate() -> Gate {
        Gate {
            allowed_hosts: LOOPBACK_HOSTS.map(String::from).to_vec(),
            allowed_origins: Vec::new(),
            sessions: Arc::default(),
            max_sessions: 64,
        }
    }

    /// The status the gate answers a POST with `host` and `origin` (200: let through).
    fn status(gate: &Gate, host: &str, origin: Option<&str>) -> u16 {
        let mut request = Request::post("/").header(header::HOST, host);
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        let request = request.body(()).expect("a request");
        gate.check(&request)
            .map_or(200, |refused| refused.status().as_u16())
    }

    #[test]
    fn the_servers_own_origin_is_let_through() {
        let gate = loopback_gate();
        for (host, origin) in [
            // What the conformance suite's dns-rebinding-protection scenario sends.
            ("localhost:8080", "http://localhost:8080"),
            ("127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("[::1]:8080", "http://[::1]:8080"),
            ("LocalHost:8080", "http://localhost:8080"),
            // The loopback names of the same port are one server.
            ("127.0.0.1:8080", "http://localhost:8080"),
            ("localhost:8080", "http://127.0.0.1:8080"),
            ("localhost:8080", "http://[::1]:8080"),
            // A Host without a port is the scheme's default one.
            ("localhost", "http://127.0.0.1"),
            ("localhost:443", "https://localhost"),
        ] {
            assert_eq!(
                status(&gate, host, Some(origin)),
                200,
                "{host} from {origin}"
            );
        }
        assert_eq!(
            status(&gate, "localhost:8080", None),
            200,
            "no Origin: no browser"
        );
    }

    #[test]
    fn foreign_origins_and_rebound_hosts_are_refused() {
        let gate = loopback_gate();
        for (host, origin) in [
            // DNS rebinding: evil.example resolves to 127.0.0.1; the Host check refuses it,
            // with its own origin or a loopback one.
            ("evil.example.com", Some("http://evil.example.com")),
            (
                "evil.example.com:8080",
                Some("http://evil.example.com:8080"),
            ),
            ("evil.example.com:8080", Some("http://localhost:8080")),
            ("evil.example.com:8080", None),
            // A page of another site calling the server under its loopback name.
            ("localhost:8080", Some("http://evil.example.com")),
            ("127.0.0.1:8080", Some("https://evil.example.com:8080")),
            // Another port of the loopback interface is another server's page.
            ("localhost:8080", Some("http://localhost:8081")),
            ("127.0.0.1:8080", Some("http://localhost:8081")),
            ("127.0.0.1:8080", Some("http://localhost")),
            ("localhost:80", Some("https://127.0.0.1")),
            // Other loopback addresses are not the names this server answers to.
            ("127.0.0.1:8080", Some("http://127.0.0.2:8080")),
            // Opaque and malformed origins.
            ("localhost:8080", Some("null")),
            ("localhost:8080", Some("file://localhost:8080")),
            ("localhost:8080", Some("localhost:8080")),
        ] {
            assert_eq!(status(&gate, host, origin), 403, "{host} from {origin:?}");
        }
    }

    #[test]
    fn an_allowed_origin_is_let_through_and_the_host_check_stays() {
        let mut gate = loopback_gate();
        gate.allowed_origins = vec!["https://app.example.com".into()];
        assert_eq!(
            status(&gate, "localhost:8080", Some("https://app.example.com")),
            200
        );
        assert_eq!(
            status(&gate, "app.example.com", Some("https://app.example.com")),
            403,
            "an allowed origin does not make its name an allowed Host"
        );
    }
}
