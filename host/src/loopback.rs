//! The one answer to "is this host this machine?", for every use that asks: the HTTP
//! service's origin check, the registry client's plain HTTP, the network connector of
//! plugins, and which secrets may travel without TLS.
//!
//! The answer says *how* a host is loopback, because the uses rightly differ on what they
//! accept, each failing closed for its own risk: a literal loopback address is this machine
//! whatever any resolver says; `localhost` is by every resolver's default configuration; a
//! name under `localhost` (`app.localhost`) is loopback by RFC 6761, but a resolver may
//! still send it elsewhere. So the plugin connector counts all three as loopback (and refuses
//! them as non-public addresses), while plain HTTP to a registry accepts only the first two
//! (no plaintext to a name DNS could send elsewhere), and a secret without TLS goes only to
//! the first.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How a host names this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Loopback {
    /// A loopback address written literally: `127.0.0.0/8`, `::1`, `::ffff:127.x.y.z`.
    Address,
    /// `localhost` (any case, with or without the root's trailing dot).
    Localhost,
    /// A name under `localhost`: loopback by RFC 6761, whatever a resolver says, but only
    /// for resolvers that follow it.
    UnderLocalhost,
}

impl Loopback {
    /// Whether this machine is named for certain: by an address, or by `localhost`.
    pub(crate) fn certain(self) -> bool {
        matches!(self, Self::Address | Self::Localhost)
    }
}

/// How `host` (a name, an IPv4 address, an IPv6 address with or without brackets) names
/// this machine, if it does.
pub(crate) fn loopback(host: &str) -> Option<Loopback> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(address) = bare.parse::<IpAddr>() {
        return address
            .to_canonical()
            .is_loopback()
            .then_some(Loopback::Address);
    }
    let name = bare.strip_suffix('.').unwrap_or(bare).to_ascii_lowercase();
    if name == "localhost" {
        Some(Loopback::Localhost)
    } else if name.ends_with(".localhost") && name.len() > ".localhost".len() {
        Some(Loopback::UnderLocalhost)
    } else {
        None
    }
}

/// The addresses a loopback name stands for, without asking a resolver.
#[cfg_attr(not(feature = "wasi-http"), allow(dead_code))]
pub(crate) const LOOPBACK_ADDRESSES: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_this_machine_says_how() {
        for (host, answer) in [
            ("127.0.0.1", Some(Loopback::Address)),
            ("127.0.0.2", Some(Loopback::Address)),
            ("::1", Some(Loopback::Address)),
            ("[::1]", Some(Loopback::Address)),
            ("[::ffff:127.0.0.1]", Some(Loopback::Address)),
            ("localhost", Some(Loopback::Localhost)),
            ("LocalHost.", Some(Loopback::Localhost)),
            ("app.localhost", Some(Loopback::UnderLocalhost)),
            (".localhost", None),
            ("localhost.example.com", None),
            ("128.0.0.1", None),
            ("0.0.0.0", None),
            ("::", None),
            ("example.com", None),
        ] {
            assert_eq!(loopback(host), answer, "{host}");
        }
        assert!(Loopback::Address.certain() && Loopback::Localhost.certain());
        assert!(!Loopback::UnderLocalhost.certain());
    }
}
