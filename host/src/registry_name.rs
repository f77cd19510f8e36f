//! The one canonical text of a registry's name (`host[:port]`), so that a reference, a trust
//! rule, a lock entry and a credential entry that name the same registry compare equal
//! however each was typed.
//!
//! The host is read as the HTTP client reads it (the WHATWG URL standard, through the `url`
//! crate that reqwest uses): letters lower-cased, Unicode mapped and written as punycode
//! (IDNA), IPv4 addresses in any of their forms (`127.1`, `0x7f.0.0.1`, `2130706433`) written
//! as four decimal numbers, IPv6 addresses compressed, one trailing `.` dropped. The port is
//! written as a number (`05000` is `5000`), and `:443`, the https default, is dropped except
//! for a loopback host. Docker Hub's other names (`index.docker.io`, `registry-1.docker.io`,
//! `registry.docker.io`, `registry.hub.docker.com`) are `docker.io` (its official images'
//! one-part names, `docker.io/greet`, are `docker.io/library/greet` in references and trust
//! rules, which write them so where they are read).
//!
//! Compiled without the `registry` feature too: loading checks pulled plugins' lock entries
//! against the trust policy whether or not this build can pull.

/// Docker Hub's name in references and trust rules.
pub(crate) const DOCKER_HUB: &str = "docker.io";

/// The https default port, which a name without a port means.
const HTTPS_PORT: u16 = 443;

/// Whether the first part of a name is a registry, as Docker reads names: it has a `.` or a
/// `:`, or is `localhost`; otherwise the name is Docker Hub's (`acme/greet` is
/// `docker.io/acme/greet`).
pub(crate) fn names_a_registry(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost"
}

/// The canonical text of the registry `text` (`host[:port]`, an IPv6 address in brackets), or
/// why it is not one.
pub(crate) fn canonical_registry(text: &str) -> Result<String, String> {
    // What would make the URL below mean something else than a host and a port (user
    // information, a path, a query), or be decoded into another host (`%`).
    if text.is_empty()
        || text.len() > 255
        || text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "@/\\?#%".contains(c))
    {
        return Err(format!("'{text}' is not a registry's host[:port]"));
    }
    // Nothing but a port may follow an IPv6 address (`[::1]5000` is no name of `[::1]`).
    if let Some(end) = text.find(']')
        && !text[end + 1..].is_empty()
        && !text[end + 1..].starts_with(':')
    {
        return Err(format!("'{text}' is not a registry's host[:port]"));
    }
    let (host, port) = split_host_port(text);
    let port = match port {
        None => None,
        Some(digits) => {
            let number = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse::<u16>().ok())
                .flatten()
                .filter(|port| *port != 0)
                .ok_or_else(|| format!("'{digits}' is not a port"))?;
            Some(number)
        }
    };
    let not_a_host = || format!("'{host}' is not a host name");
    // A `:` outside brackets would be read as a port by the URL parser below.
    if !host.starts_with('[') && host.contains(':') {
        return Err(not_a_host());
    }
    let url = url::Url::parse(&format!("https://{host}/")).map_err(|_| not_a_host())?;
    let only_a_host = url.username().is_empty()
        && url.password().is_none()
        && url.port().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    // What the client connects to: the host as the URL holds it.
    let parsed = match (url.host(), url.host_str()) {
        (Some(url::Host::Domain(_)), Some(domain)) if only_a_host => {
            let domain = domain.strip_suffix('.').unwrap_or(domain);
            let labels_ok = !domain.is_empty()
                && domain.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                });
            if !labels_ok {
                return Err(not_a_host());
            }
            domain.to_owned()
        }
        (Some(url::Host::Ipv4(_)), Some(address)) if only_a_host => address.to_owned(),
        // An IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) is where the IPv4 address is: a
        // connection to one reaches the other, so they are one registry, written as IPv4.
        (Some(url::Host::Ipv6(v6)), Some(address)) if only_a_host => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => address.to_owned(),
        },
        _ => return Err(not_a_host()),
    };
    // A remote registry is only ever spoken to over https, where `:443` is what no port means.
    // A loopback one may be spoken to over plain HTTP (`--plain-http`), where no port means 80
    // and `:443` is another server, so its port stays as written.
    let port = port.filter(|port| *port != HTTPS_PORT || is_loopback_host(&parsed));
    Ok(match (parsed.as_str(), port) {
        (
            "index.docker.io"
            | "registry-1.docker.io"
            | "registry.docker.io"
            | "registry.hub.docker.com",
            None,
        ) => DOCKER_HUB.to_owned(),
        (_, Some(port)) => format!("{parsed}:{port}"),
        (_, None) => parsed,
    })
}

/// `registry/path` with its registry made canonical ([`canonical_registry`]) and a Docker Hub
/// path as [`hub_path`] writes it. The path must be a repository's as the OCI distribution
/// specification writes them ([`is_repository_path`]): it has one spelling, compared as text,
/// so `acme/greet/`, `Acme/greet` or `acme/./greet` is no repository, not another one.
pub(crate) fn canonical_repository(name: &str) -> Result<String, String> {
    let (registry, path) = name
        .split_once('/')
        .filter(|(_, path)| !path.is_empty())
        .ok_or_else(|| format!("'{name}' is not `registry/repository`"))?;
    let registry = canonical_registry(registry)?;
    let path = hub_path(&registry, path);
    if !is_repository_path(&path) {
        return Err(format!(
            "'{path}' is not a repository's path: parts of lower-case letters and digits, \
             joined within by `.`, `_` or `-`, separated by `/`"
        ));
    }
    Ok(format!("{registry}/{path}"))
}

/// Whether `path` is a repository's path in a registry, as the OCI distribution
/// specification writes them: at most 255 bytes of `/`-separated parts, each of lower-case
/// letters and digits, beginning and ending with one, `.`, `_` and `-` only between.
pub(crate) fn is_repository_path(path: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    path.len() <= 255
        && path.split('/').all(|part| {
            part.starts_with(alphanumeric)
                && part.ends_with(alphanumeric)
                && part
                    .chars()
                    .all(|c| alphanumeric(c) || matches!(c, '.' | '_' | '-'))
        })
}

/// A repository's path in the canonical `registry`: Docker Hub's official images, named with
/// one part (`greet`), are `library/greet` there, as Docker reads them.
pub(crate) fn hub_path<'a>(registry: &str, path: &'a str) -> std::borrow::Cow<'a, str> {
    if registry == DOCKER_HUB && !path.contains('/') {
        format!("library/{path}").into()
    } else {
        path.into()
    }
}

/// `host` and `port` of `host[:port]` / `[v6]:port`.
pub(crate) fn split_host_port(registry: &str) -> (&str, Option<&str>) {
    if registry.starts_with('[') {
        match registry.find(']') {
            Some(end) => (&registry[..=end], registry[end + 1..].strip_prefix(':')),
            None => (registry, None),
        }
    } else {
        match registry.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (registry, None),
        }
    }
}

/// Whether the canonical registry names `a` and `b` both name this machine for certain
/// ([`is_loopback_host`]) at one port. A server listening on every address (`0.0.0.0`)
/// answers at `localhost:5000`, `127.0.0.1:5000`, `127.0.0.2:5000` and `[::1]:5000` alike, so
/// a trust rule wanting a signature for one of them binds them all (see
/// [`crate::trust::TrustPolicy::rule_for`]): otherwise another spelling of the port escaped it.
pub(crate) fn this_machine_at_one_port(a: &str, b: &str) -> bool {
    is_loopback_host(a) && is_loopback_host(b) && split_host_port(a).1 == split_host_port(b).1
}

/// Whether `host[:port]` names this machine for certain (`localhost`, `127.0.0.0/8`, `::1`;
/// not a name under `localhost`, which a resolver could send elsewhere).
pub(crate) fn is_loopback_host(registry: &str) -> bool {
    let (host, _) = split_host_port(registry);
    crate::loopback::loopback(host).is_some_and(crate::loopback::Loopback::certain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_registry_have_one_name() {
        for (typed, canonical) in [
            ("localhost:5000", "localhost:5000"),
            ("LOCALHOST:5000", "localhost:5000"),
            ("localhost:05000", "localhost:5000"),
            ("LocalHost.:0005000", "localhost:5000"),
            // Fullwidth letters, as IDNA maps them.
            ("ｌｏｃａｌｈｏｓｔ:5000", "localhost:5000"),
            ("127.0.0.1:5000", "127.0.0.1:5000"),
            ("127.1:5000", "127.0.0.1:5000"),
            ("0x7f.0.0.1:5000", "127.0.0.1:5000"),
            ("2130706433:5000", "127.0.0.1:5000"),
            ("0177.0.0.01:5000", "127.0.0.1:5000"),
            ("[::1]:5000", "[::1]:5000"),
            ("[0:0:0:0:0:0:0:1]:05000", "[::1]:5000"),
            ("[::FFFF:127.0.0.1]", "127.0.0.1"),
            ("[::ffff:7f00:1]:5000", "127.0.0.1:5000"),
            ("[::ffff:140.82.112.33]", "140.82.112.33"),
            ("GHCR.io", "ghcr.io"),
            ("ghcr.io:443", "ghcr.io"),
            ("ghcr.io:0443", "ghcr.io"),
            ("ghcr.io.", "ghcr.io"),
            ("ghcr.io:80", "ghcr.io:80"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.example:8443", "xn--bcher-kva.example:8443"),
            ("index.docker.io", "docker.io"),
            ("registry-1.docker.io:443", "docker.io"),
            ("registry.hub.docker.com", "docker.io"),
            ("Registry.Docker.io", "docker.io"),
            ("docker.io:443", "docker.io"),
            // Over plain HTTP, a loopback registry's :443 is not what no port means.
            ("localhost:443", "localhost:443"),
            ("127.0.0.1:0443", "127.0.0.1:443"),
        ] {
            assert_eq!(
                canonical_registry(typed).as_deref(),
                Ok(canonical),
                "{typed}"
            );
            // The canonical name is its own canonical name.
            assert_eq!(
                canonical_registry(canonical).as_deref(),
                Ok(canonical),
                "{canonical}"
            );
        }
    }

    #[test]
    fn what_is_not_a_registry_is_refused() {
        for bad in [
            "",
            "user@localhost:5000",
            "localhost:5000/x",
            "localhost:",
            "localhost:0",
            "localhost:65536",
            "localhost:+80",
            "localhost:5000:5000",
            "localhost:443:5000",
            "loc%61lhost",
            "a..b",
            "-a.example",
            "a_b.example",
            "[::1",
            "[::1]5000",
            "[::1]x:5000",
            "[fe80::1%25eth0]",
            "::1",
            "r e",
            ".",
        ] {
            assert!(canonical_registry(bad).is_err(), "{bad}");
        }
        assert!(canonical_repository("localhost:5000").is_err());
        assert!(canonical_repository("localhost:5000/").is_err());
    }

    /// A lock entry's repository is compared as a reference's and a rule's are: the registry
    /// canonical, and Docker Hub's official images under `library/` (an entry naming
    /// `docker.io/greet` escaped a rule for it, which reads `docker.io/library/greet`).
    #[test]
    fn repositories_are_compared_in_one_spelling() {
        assert_eq!(
            canonical_repository("LOCALHOST:05000/acme/greet").as_deref(),
            Ok("localhost:5000/acme/greet")
        );
        for name in [
            "docker.io/greet",
            "index.docker.io/greet",
            "docker.io/library/greet",
        ] {
            assert_eq!(
                canonical_repository(name).as_deref(),
                Ok("docker.io/library/greet"),
                "{name}"
            );
        }
        assert_eq!(
            canonical_repository("ghcr.io/greet").as_deref(),
            Ok("ghcr.io/greet")
        );
    }
}
