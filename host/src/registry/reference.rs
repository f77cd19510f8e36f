//! References to artifacts in a registry: `registry/repository:tag`,
//! `registry/repository@sha256:…`, or both.

use std::fmt;

pub(crate) use crate::registry_name::is_loopback_host;
use crate::registry_name::{DOCKER_HUB, canonical_registry};

/// Where Docker Hub's repositories are served (they are named `docker.io/library/x`).
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// A parsed reference to an artifact in a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The registry, `host[:port]`, in its canonical spelling (`docker.io` for Docker Hub):
    /// lower case, punycode, IPv4 as four decimal numbers, the port a number and `:443`
    /// dropped for a remote host, as trust rules, lock entries and credentials compare it.
    pub registry: String,
    /// The repository's path within the registry (`acme/greet`).
    pub repository: String,
    /// The tag, if one was given.
    pub tag: Option<String>,
    /// The manifest's digest (`sha256:…`), if one was given.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses `registry/repository[:tag][@sha256:hex]`. Without a tag or digest the tag is
    /// `latest`. The registry is the first component when it has a `.` or a `:` or is
    /// `localhost`, as Docker reads names; otherwise the name is Docker Hub's. The registry is
    /// made canonical (`LOCALHOST:05000` is `localhost:5000`), so `registry`, [`Self::name`]
    /// and the text shown are the same for every spelling of it.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let bad = |why: Malformed| ReferenceError {
            text: text.to_owned(),
            why,
        };
        if text.is_empty() || text.len() > 1024 || text.chars().any(|c| c.is_whitespace()) {
            return Err(bad(Malformed::Text));
        }
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => {
                let hex = digest
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad(Malformed::Digest))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(Malformed::Digest));
                }
                (name, Some(format!("sha256:{}", hex.to_ascii_lowercase())))
            }
            None => (text, None),
        };
        // A tag follows the last `:` after the last `/` (a port's `:` comes before it).
        let last_slash = name.rfind('/').unwrap_or(0);
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(at) => {
                let at = last_slash + at;
                (&name[..at], Some(name[at + 1..].to_owned()))
            }
            None => (name, None),
        };
        if let Some(tag) = &tag {
            let valid = !tag.is_empty()
                && tag.len() <= 128
                && !tag.starts_with(['.', '-'])
                && tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !valid {
                return Err(bad(Malformed::Tag));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest)) if crate::registry_name::names_a_registry(first) => {
                (first.to_owned(), rest.to_owned())
            }
            _ => (DOCKER_HUB.to_owned(), name.to_owned()),
        };
        let registry =
            canonical_registry(&registry).map_err(|why| bad(Malformed::Registry(why)))?;
        let repository = crate::registry_name::hub_path(&registry, &repository).into_owned();
        if !crate::registry_name::is_repository_path(&repository) {
            return Err(bad(Malformed::Repository));
        }
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_owned())
        } else {
            tag
        };
        Ok(Self {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository`: what trust rules match and what a signature names.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The host (and port) the registry's API is served from.
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// What to ask the registry for: the digest if there is one, else the tag.
    pub fn manifest_reference(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The same repository at another tag (for a signature's `sha256-….sig`).
    pub fn with_tag(&self, tag: &str) -> Self {
        Self {
            tag: Some(tag.to_owned()),
            digest: None,
            ..self.clone()
        }
    }

    /// The same repository at a digest.
    pub fn with_digest(&self, digest: &str) -> Self {
        Self {
            tag: None,
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }

    /// Whether the registry is on this machine (`localhost`, `127.0.0.0/8`, `::1`): the only
    /// registries that may be spoken to over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.registry)
    }

    /// The last part of the repository (`greet` for `acme/greet`): the default plugin name.
    pub fn short_name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }
}

impl std::str::FromStr for Reference {
    type Err = ReferenceError;

    /// [`Reference::parse`].
    fn from_str(text: &str) -> Result<Self, ReferenceError> {
        Self::parse(text)
    }
}

/// Text that is not a registry reference, and which part of it is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{text}' is not a registry reference ({why}); write REGISTRY/REPOSITORY:TAG or \
     REGISTRY/REPOSITORY@sha256:DIGEST, e.g. ghcr.io/acme/greet:1.0"
)]
pub struct ReferenceError {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub why: Malformed,
}

/// What is wrong with a [`ReferenceError`]'s text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// Empty, over 1024 bytes, or with white space.
    #[error("empty, too long or with spaces")]
    Text,
    /// A digest that is not `sha256:` and 64 hex digits.
    #[error("only sha256 digests of 64 hex digits are supported")]
    Digest,
    /// A tag that is not up to 128 letters, digits, `_`, `.` and `-` (not first).
    #[error("a tag is up to 128 letters, digits, `_`, `.` and `-`")]
    Tag,
    /// A registry name that is not a host with an optional port.
    #[error("{0}")]
    Registry(String),
    /// A repository path of other characters.
    #[error(
        "a repository is lower-case letters, digits and `.`, `_`, `-` inside `/`-separated parts"
    )]
    Repository,
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_read_as_docker_reads_them() {
        let r = Reference::parse("127.0.0.1:5000/acme/greet:1.0").expect("valid");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "acme/greet", Some("1.0"))
        );
        assert!(r.is_loopback());
        assert_eq!(r.short_name(), "greet");
        let hex = "a".repeat(64);
        let r = Reference::parse(&format!("ghcr.io/acme/greet@sha256:{hex}")).expect("valid");
        assert_eq!(r.tag, None);
        assert_eq!(r.manifest_reference(), format!("sha256:{hex}"));
        assert!(!r.is_loopback());
        let r = Reference::parse("greet").expect("valid");
        assert_eq!(r.name(), "docker.io/library/greet");
        assert_eq!(r.api_host(), "registry-1.docker.io");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let r = Reference::parse("localhost/x/y:v").expect("valid");
        assert_eq!(r.registry, "localhost");
        assert!(
            Reference::parse("[::1]:5000/x:v")
                .expect("valid")
                .is_loopback()
        );
        assert_eq!(
            Reference::parse(&format!("r.example/a/b:t@sha256:{hex}"))
                .expect("valid")
                .to_string(),
            format!("r.example/a/b:t@sha256:{hex}")
        );
    }

    #[test]
    fn a_registry_has_one_name_however_it_is_spelt() {
        for typed in [
            "LOCALHOST:5000/acme/greet:1",
            "localhost:05000/acme/greet:1",
            "LocalHost.:005000/acme/greet:1",
            "ｌｏｃａｌｈｏｓｔ:5000/acme/greet:1",
        ] {
            let r = Reference::parse(typed).expect(typed);
            assert_eq!(r.registry, "localhost:5000", "{typed}");
            assert_eq!(r.name(), "localhost:5000/acme/greet", "{typed}");
            assert_eq!(r.to_string(), "localhost:5000/acme/greet:1", "{typed}");
            assert!(r.is_loopback(), "{typed}");
        }
        for (typed, name) in [
            ("127.1:5000/a/b", "127.0.0.1:5000/a/b"),
            ("0x7f.0.0.1:5000/a/b", "127.0.0.1:5000/a/b"),
            ("[0:0:0:0:0:0:0:1]:5000/a/b", "[::1]:5000/a/b"),
            ("GHCR.IO/acme/greet", "ghcr.io/acme/greet"),
            ("ghcr.io:443/acme/greet", "ghcr.io/acme/greet"),
            ("ghcr.io:8443/acme/greet", "ghcr.io:8443/acme/greet"),
            (
                "bücher.example/acme/greet",
                "xn--bcher-kva.example/acme/greet",
            ),
            ("index.docker.io/greet", "docker.io/library/greet"),
            (
                "registry-1.docker.io:443/acme/greet",
                "docker.io/acme/greet",
            ),
            ("localhost:443/a/b", "localhost:443/a/b"),
        ] {
            assert_eq!(
                Reference::parse(typed).expect(typed).name(),
                name,
                "{typed}"
            );
        }
        assert_eq!(
            Reference::parse("registry-1.docker.io:443/acme/greet")
                .expect("hub")
                .api_host(),
            "registry-1.docker.io"
        );
    }

    #[test]
    fn bad_references_are_refused() {
        for bad in [
            "",
            "r.example/Acme/greet",
            "r.example/a//b",
            "r.example/../b",
            "r.example/a:b:c",
            "r.example/a@sha512:00",
            "r.example/a@sha256:zz",
            "r.example:99999/a",
            "r.example/a:-x",
            "r e/a",
            "localhost:0/a",
            "localhost:/a",
            "loc%61lhost:5000/a",
            "a_b.example/a",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }
}
