//! The trust policy of a plugin directory (`llm-worker.trust.toml`): which signers the plugins
//! pulled from each registry and repository need, or that a repository's plugins may come
//! unsigned. `llm-worker pull` verifies against it, and loading checks that the signer a lock
//! entry records is still allowed by it (a key taken out of it stops its plugins loading).
//!
//! ```toml
//! [keys]
//! acme = """
//! -----BEGIN PUBLIC KEY-----
//! MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE…
//! -----END PUBLIC KEY-----
//! """
//!
//! [[rule]]
//! repository = "ghcr.io/acme/*"      # every repository below ghcr.io/acme/
//! signers = ["acme"]                 # signed by one of these keys, or refused
//!
//! [[rule]]
//! repository = "localhost:5000/scratch"
//! unsigned = true                    # may come without a signature
//! ```
//!
//! The first rule whose `repository` matches decides; a repository no rule matches is refused.
//! The file is a trust file like the lock: read only if it is a regular file of this user (or
//! root) that no one else may write, and pinned by the lock's `trust_sha256`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The trust policy's name, in the plugin directory.
pub const TRUST_FILE: &str = "llm-worker.trust.toml";

/// Largest trust policy read.
const MAX_TRUST_BYTES: u64 = 1 << 20;

/// The DER prefix of every P-256 public key in SubjectPublicKeyInfo form (id-ecPublicKey,
/// prime256v1, an uncompressed point of 65 bytes follows).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Why a trust policy cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// Reading failed.
    #[error("cannot read the trust policy {}: {source}", path.display())]
    Io {
        /// The trust policy.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is there, but someone other than the operator could have written it.
    #[error("the trust policy {} is not trusted: {reason}", path.display())]
    Untrusted {
        /// The trust policy.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not a valid trust policy.
    #[error("the trust policy {} is invalid: {message}", path.display())]
    Invalid {
        /// The trust policy.
        path: PathBuf,
        /// What is wrong (with the key, e.g. `rule[1].signers`).
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustFileText {
    #[serde(default)]
    keys: BTreeMap<String, String>,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleText>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleText {
    repository: String,
    #[serde(default)]
    signers: Vec<String>,
    #[serde(default)]
    unsigned: bool,
}

/// A public key the trust policy names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// Its name in the policy (`[keys] NAME = "…"`).
    pub name: String,
    /// The key in DER (SubjectPublicKeyInfo of a P-256 key).
    pub der: Vec<u8>,
    /// `sha256:` and the SHA-256 of `der` in hex: how the lock records it.
    pub fingerprint: String,
}

/// One `[[rule]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRule {
    /// `registry/repository`, or `registry/prefix/*` for every repository below the prefix;
    /// [`TrustPolicy::parse`] writes the registry canonically, as a reference names it
    /// (`LOCALHOST:05000` is `localhost:5000`, `ghcr.io:443` is `ghcr.io`).
    pub repository: String,
    /// Names of the keys that may sign (any one suffices).
    pub signers: Vec<String>,
    /// The repository's plugins may come unsigned.
    pub unsigned: bool,
}

impl TrustRule {
    /// Whether the rule covers `repository` (`registry/path`, its registry spelt any way a
    /// registry may be: it is compared in its canonical spelling). A name that is not
    /// `registry/path` is covered by no rule.
    pub fn covers(&self, repository: &str) -> bool {
        crate::registry_name::canonical_repository(repository)
            .is_ok_and(|repository| self.covers_canonical(&repository))
    }

    /// [`Self::covers`] for a repository whose registry is already canonical.
    fn covers_canonical(&self, repository: &str) -> bool {
        match self.repository.strip_suffix("/*") {
            Some(prefix) => repository
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| !rest.is_empty()),
            None => self.repository == repository,
        }
    }
}

/// What the trust policy asks of a repository's plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement<'a> {
    /// Signed by one of these keys.
    Signed(Vec<&'a TrustedKey>),
    /// Allowed without a signature.
    Unsigned,
    /// No rule covers the repository: its plugins are refused.
    NoRule,
}

/// A directory's trust policy, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustPolicy {
    /// The file it was read from.
    pub path: PathBuf,
    /// The SHA-256 of its text, in hex (what the lock pins).
    pub sha256: String,
    /// The keys by name.
    pub keys: BTreeMap<String, TrustedKey>,
    /// The rules in file order.
    pub rules: Vec<TrustRule>,
}

impl TrustPolicy {
    /// The trust policy of `dir`, if it has one (a file there that cannot be trusted or parsed
    /// is an error, not `None`).
    pub fn read(dir: &Path) -> Result<Option<Self>, TrustError> {
        let path = dir.join(TRUST_FILE);
        let file = crate::lock::open_trusted(dir, &path).map_err(|error| match error {
            crate::lock::LockError::Untrusted { reason, .. } => TrustError::Untrusted {
                path: path.clone(),
                reason,
            },
            crate::lock::LockError::Io { source, .. } => TrustError::Io {
                path: path.clone(),
                source,
            },
            other => TrustError::Invalid {
                path: path.clone(),
                message: other.to_string(),
            },
        })?;
        let Some(file) = file else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.take(MAX_TRUST_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| TrustError::Io {
                path: path.clone(),
                source,
            })?;
        if bytes.len() as u64 > MAX_TRUST_BYTES {
            return Err(TrustError::Invalid {
                path,
                message: format!("it is over {MAX_TRUST_BYTES} bytes"),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| TrustError::Invalid {
            path: path.clone(),
            message: "it is not UTF-8 text".into(),
        })?;
        Self::parse(&text, &path).map(Some)
    }

    /// Parses a trust policy's text; `path` names it in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, TrustError> {
        let invalid = |message: String| TrustError::Invalid {
            path: path.to_owned(),
            message,
        };
        let file: TrustFileText =
            toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end().to_owned()))?;
        let mut keys = BTreeMap::new();
        for (name, pem) in file.keys {
            let der = public_key_der(&pem).map_err(|why| invalid(format!("keys.{name}: {why}")))?;
            let fingerprint = format!("sha256:{}", crate::digest::sha256_hex(&der));
            keys.insert(
                name.clone(),
                TrustedKey {
                    name,
                    der,
                    fingerprint,
                },
            );
        }
        let mut rules = Vec::new();
        for (index, rule) in file.rules.into_iter().enumerate() {
            let key = |field: &str| format!("rule[{index}].{field}");
            let repository = check_pattern(&rule.repository)
                .map_err(|why| invalid(format!("{}: {why}", key("repository"))))?;
            match (rule.signers.is_empty(), rule.unsigned) {
                (true, false) => {
                    return Err(invalid(format!(
                        "{}: a rule names its `signers` (keys of [keys]) or says `unsigned = \
                         true`",
                        key("signers")
                    )));
                }
                (false, true) => {
                    return Err(invalid(format!(
                        "{}: a rule with `unsigned = true` names no signers (it would accept \
                         anything)",
                        key("unsigned")
                    )));
                }
                _ => {}
            }
            if let Some(unknown) = rule.signers.iter().find(|name| !keys.contains_key(*name)) {
                return Err(invalid(format!(
                    "{}: no key named '{unknown}' in [keys]",
                    key("signers")
                )));
            }
            rules.push(TrustRule {
                repository,
                signers: rule.signers,
                unsigned: rule.unsigned,
            });
        }
        Ok(Self {
            path: path.to_owned(),
            sha256: crate::digest::sha256_hex(text.as_bytes()),
            keys,
            rules,
        })
    }

    /// The first rule covering `repository` (`registry/path`, its registry spelt any way: it
    /// is compared in its canonical spelling), with its index.
    pub fn rule_for(&self, repository: &str) -> Option<(usize, &TrustRule)> {
        let repository = crate::registry_name::canonical_repository(repository).ok()?;
        self.rules
            .iter()
            .enumerate()
            .find(|(_, rule)| rule.covers_canonical(&repository))
    }

    /// What the policy asks of `repository`'s plugins (`registry/path`, compared as
    /// [`Self::rule_for`] does).
    pub fn requirement(&self, repository: &str) -> Requirement<'_> {
        match self.rule_for(repository) {
            None => Requirement::NoRule,
            Some((_, rule)) if rule.unsigned => Requirement::Unsigned,
            Some((_, rule)) => Requirement::Signed(
                rule.signers
                    .iter()
                    .filter_map(|name| self.keys.get(name))
                    .collect(),
            ),
        }
    }

    /// The SHA-256 of `dir`'s trust policy, in hex, for the lock to pin (`None` without one).
    pub fn pin(dir: &Path) -> Result<Option<String>, TrustError> {
        Ok(Self::read(dir)?.map(|policy| policy.sha256))
    }
}

/// Checks a rule's `repository` (`registry/path` or `registry/prefix/*`, the path lower case
/// with no empty segment) and writes its registry canonically, as references name it
/// (`LOCALHOST:05000/acme/*` is `localhost:5000/acme/*`).
fn check_pattern(pattern: &str) -> Result<String, String> {
    let wrong = |why: String| {
        format!(
            "'{pattern}' is not `registry/repository` or `registry/prefix/*` ({why}; e.g. \
             `ghcr.io/acme/greet`, `ghcr.io/acme/*`)"
        )
    };
    let (body, wildcard) = match pattern.strip_suffix("/*") {
        Some(body) => (body, "/*"),
        None => (pattern, ""),
    };
    let Some((registry, path)) = body.split_once('/') else {
        return Err(wrong("no repository after the registry".into()));
    };
    let registry = crate::registry_name::canonical_registry(registry).map_err(wrong)?;
    let valid = path.split('/').all(|segment| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_')
            })
    });
    if !valid {
        return Err(wrong(
            "a repository is lower-case letters, digits and `.`, `_`, `-` inside `/`-separated \
             parts"
                .into(),
        ));
    }
    Ok(format!("{registry}/{path}{wildcard}"))
}

/// The DER of a PEM `PUBLIC KEY` (SubjectPublicKeyInfo) holding a P-256 key.
pub(crate) fn public_key_der(pem: &str) -> Result<Vec<u8>, String> {
    let der = pem_body(pem, "PUBLIC KEY")?;
    if der.len() != P256_SPKI_PREFIX.len() + 65
        || !der.starts_with(&P256_SPKI_PREFIX)
        || der[P256_SPKI_PREFIX.len()] != 0x04
    {
        return Err(
            "not an ECDSA P-256 public key (a PEM `PUBLIC KEY` of the curve prime256v1, as \
             `cosign generate-key-pair` or `openssl ec -pubout` writes)"
                .into(),
        );
    }
    Ok(der)
}

/// The bytes of the one PEM block labelled `label` in `text`.
pub(crate) fn pem_body(text: &str, label: &str) -> Result<Vec<u8>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let Some(start) = text.find(&begin) else {
        return Err(format!("no `{begin}` block"));
    };
    let rest = &text[start + begin.len()..];
    let Some(stop) = rest.find(&end) else {
        return Err(format!("no `{end}` line"));
    };
    let body: String = rest[..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    <base64ct::Base64 as base64ct::Encoding>::decode_vec(&body)
        .map_err(|_| format!("the {label} block is not base64"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A P-256 public key in PEM, for tests.
    pub(crate) const KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFxOs0eKOpqtdY5V10jv+Ld2uTzvO
5n/cD5QmhwDWpwhm01AHGwvA3XuEGMj1Hk3WL9IWmfswgUTUYQBKxwnwcw==
-----END PUBLIC KEY-----
";

    fn policy(rules: &str) -> Result<TrustPolicy, TrustError> {
        let text = format!("[keys]\nacme = \"\"\"\n{KEY}\"\"\"\n{rules}");
        TrustPolicy::parse(&text, Path::new("/p/llm-worker.trust.toml"))
    }

    #[test]
    fn the_first_rule_that_covers_a_repository_decides() {
        let policy = policy(
            "[[rule]]\nrepository = \"r.example/acme/*\"\nsigners = [\"acme\"]\n\
             [[rule]]\nrepository = \"r.example/acme/scratch\"\nunsigned = true\n\
             [[rule]]\nrepository = \"localhost:5000/scratch\"\nunsigned = true\n",
        )
        .expect("valid");
        let key = &policy.keys["acme"];
        assert!(key.fingerprint.starts_with("sha256:"));
        assert_eq!(
            policy.requirement("r.example/acme/greet"),
            Requirement::Signed(vec![key])
        );
        assert_eq!(
            policy.requirement("r.example/acme/scratch"),
            Requirement::Signed(vec![key]),
            "the earlier rule wins"
        );
        assert_eq!(
            policy.requirement("localhost:5000/scratch"),
            Requirement::Unsigned
        );
        assert_eq!(policy.requirement("r.example/acme"), Requirement::NoRule);
        assert_eq!(policy.requirement("r.example/acmex/y"), Requirement::NoRule);
        assert_eq!(policy.requirement("other/acme/greet"), Requirement::NoRule);
    }

    #[test]
    fn rules_and_repositories_are_compared_by_their_registry_s_canonical_name() {
        let policy = policy(
            "[[rule]]\nrepository = \"localhost:5000/acme/*\"\nsigners = [\"acme\"]\n\
             [[rule]]\nrepository = \"LOCALHOST:05000/exact\"\nsigners = [\"acme\"]\n\
             [[rule]]\nrepository = \"GHCR.io:443/acme/*\"\nsigners = [\"acme\"]\n\
             [[rule]]\nrepository = \"127.1:5000/scratch/*\"\nunsigned = true\n",
        )
        .expect("valid");
        let patterns: Vec<&str> = policy.rules.iter().map(|r| r.repository.as_str()).collect();
        assert_eq!(
            patterns,
            [
                "localhost:5000/acme/*",
                "localhost:5000/exact",
                "ghcr.io/acme/*",
                "127.0.0.1:5000/scratch/*"
            ]
        );
        let key = &policy.keys["acme"];
        for spelling in [
            "localhost:5000/acme/greet",
            "LOCALHOST:5000/acme/greet",
            "localhost:05000/acme/greet",
            "LocalHost.:5000/acme/greet",
            "ｌｏｃａｌｈｏｓｔ:5000/acme/greet",
            "localhost:5000/exact",
            "ghcr.io/acme/greet",
            "GHCR.IO:0443/acme/greet",
        ] {
            assert_eq!(
                policy.requirement(spelling),
                Requirement::Signed(vec![key]),
                "{spelling}"
            );
            assert!(policy.rule_for(spelling).is_some(), "{spelling}");
        }
        for spelling in ["127.0.0.1:5000/scratch/x", "0x7f000001:05000/scratch/x"] {
            assert_eq!(
                policy.requirement(spelling),
                Requirement::Unsigned,
                "{spelling}"
            );
        }
        assert!(policy.rules[0].covers("LOCALHOST:5000/acme/greet"));
        // Other registries stay other registries (another port, the plain-HTTP port of a
        // loopback host); a name that is no registry's is covered by nothing.
        for other in [
            "localhost:5001/acme/greet",
            "localhost/acme/greet",
            "localhost:443/acme/greet",
            "ghcr.io:8443/acme/greet",
            "user@localhost:5000/acme/greet",
            "localhost:5000",
        ] {
            assert_eq!(policy.requirement(other), Requirement::NoRule, "{other}");
        }
        let bad = policy_error("[[rule]]\nrepository = \"localhost:0/acme/*\"\nunsigned = true\n");
        assert!(bad.contains("rule[0].repository"), "{bad}");
    }

    fn policy_error(rules: &str) -> String {
        policy(rules).expect_err("invalid").to_string()
    }

    #[test]
    fn bad_rules_and_keys_are_named() {
        let message = |rules: &str| policy(rules).expect_err("invalid").to_string();
        assert!(message("[[rule]]\nrepository = \"r.example/x\"\n").contains("rule[0].signers"));
        assert!(
            message("[[rule]]\nrepository = \"r.example/x\"\nsigners = [\"nobody\"]\n")
                .contains("no key named 'nobody'")
        );
        assert!(
            message(
                "[[rule]]\nrepository = \"r.example/x\"\nsigners = [\"acme\"]\nunsigned = true\n"
            )
            .contains("rule[0].unsigned")
        );
        assert!(
            message("[[rule]]\nrepository = \"greet\"\nunsigned = true\n")
                .contains("rule[0].repository")
        );
        assert!(message("[[rule]]\nrepositry = \"r/x\"\n").contains("repositry"));
        let bad_key = TrustPolicy::parse(
            "[keys]\nrsa = \"-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END PUBLIC KEY-----\"\n",
            Path::new("t.toml"),
        )
        .expect_err("not P-256")
        .to_string();
        assert!(
            bad_key.contains("keys.rsa") && bad_key.contains("P-256"),
            "{bad_key}"
        );
    }
}
