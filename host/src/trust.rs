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
//! Keyless signers (Sigstore: a short-lived certificate for an OIDC identity, logged in Rekor)
//! are named by identity rules, verified against the trusted root file `[sigstore]` names:
//!
//! ```toml
//! [sigstore]
//! trusted_root = "trusted_root.json"   # beside this file; Sigstore's trusted_root.json format
//!
//! [identities.acme-release]
//! issuer = "https://token.actions.githubusercontent.com"
//! subject = "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v*"
//! source_repository = "https://github.com/acme/greet"   # optional certificate claims
//! source_ref = "refs/tags/v*"
//! trigger = "push"
//! source_repository_id = "123456789"   # GitHub's numeric ids: they do not pass to whoever
//! owner_id = "987654321"               # takes the name after a rename or deletion
//!
//! [[rule]]
//! repository = "ghcr.io/acme/greet"
//! signers = ["acme-release"]         # keys and identities alike
//! ```
//!
//! `issuer`, `source_repository_id` and `owner_id` are matched exactly; `subject` and the other
//! claims exactly, or as a pattern where `*` matches any run of characters other than `/` and
//! `**` any run at all.
//!
//! The first rule whose `repository` matches decides; a repository no rule matches is refused.
//! The file is a trust file like the lock: read only if it is a regular file of this user (or
//! root) that no one else may write, and pinned by the lock's `trust_sha256`; so is the trusted
//! root file it names, whose bytes the pin covers too.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The trust policy's name, in the plugin directory.
pub const TRUST_FILE: &str = "llm-worker.trust.toml";

/// Largest trust policy read.
const MAX_TRUST_BYTES: u64 = 1 << 20;

/// Largest trusted root file read.
const MAX_SIGSTORE_ROOT_BYTES: u64 = 4 << 20;

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
    #[serde(default)]
    identities: BTreeMap<String, IdentityText>,
    #[serde(default)]
    sigstore: Option<SigstoreText>,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityText {
    issuer: String,
    subject: String,
    #[serde(default)]
    source_repository: Option<String>,
    #[serde(default)]
    source_ref: Option<String>,
    #[serde(default)]
    trigger: Option<String>,
    #[serde(default)]
    source_repository_id: Option<String>,
    #[serde(default)]
    owner_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SigstoreText {
    trusted_root: String,
}

/// A keyless signer the trust policy names (`[identities.NAME]`): an OIDC identity vouched
/// for by an issuer, with the certificate claims it must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedIdentity {
    /// Its name in the policy.
    pub name: String,
    /// The OIDC issuer, exactly.
    pub issuer: String,
    /// The certificate's subject (e-mail or URI): exact, or a [`Pattern`].
    pub subject: Pattern,
    /// The source repository claim it must carry, if any.
    pub source_repository: Option<Pattern>,
    /// The source ref claim it must carry, if any.
    pub source_ref: Option<Pattern>,
    /// The build trigger claim it must carry, if any.
    pub trigger: Option<Pattern>,
    /// The source repository's immutable identifier it must carry, if any: unlike its name,
    /// it does not pass to whoever registers the name after the repository is renamed or
    /// deleted.
    pub source_repository_id: Option<String>,
    /// The repository owner's immutable identifier it must carry, if any.
    pub owner_id: Option<String>,
}

/// What a verified keyless signature says about its signer, as far as identity rules look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignerClaims<'a> {
    /// The certificate's subject.
    pub identity: &'a str,
    /// The OIDC issuer.
    pub issuer: &'a str,
    /// The source repository claim.
    pub source_repository: Option<&'a str>,
    /// The source ref claim.
    pub source_ref: Option<&'a str>,
    /// The build trigger claim.
    pub trigger: Option<&'a str>,
    /// The source repository identifier claim.
    pub source_repository_id: Option<&'a str>,
    /// The source repository owner identifier claim.
    pub owner_id: Option<&'a str>,
}

impl TrustedIdentity {
    /// Whether this rule accepts a signer with `claims`; `Err` says what differs.
    pub fn accepts(&self, claims: &SignerClaims<'_>) -> Result<(), String> {
        if claims.issuer != self.issuer {
            return Err(format!(
                "its issuer is {}, not {}",
                claims.issuer.escape_debug(),
                self.issuer
            ));
        }
        if !self.subject.matches(claims.identity) {
            return Err(format!(
                "its identity is {}, which is not {}",
                claims.identity.escape_debug(),
                self.subject
            ));
        }
        let wanted = [
            (
                "source repository",
                &self.source_repository,
                claims.source_repository,
            ),
            ("source ref", &self.source_ref, claims.source_ref),
            ("trigger", &self.trigger, claims.trigger),
        ];
        for (what, pattern, actual) in wanted {
            if let Some(pattern) = pattern
                && !actual.is_some_and(|actual| pattern.matches(actual))
            {
                return Err(format!(
                    "its {what} claim is {}, not {pattern}",
                    actual.unwrap_or("missing").escape_debug()
                ));
            }
        }
        let ids = [
            (
                "source repository identifier",
                &self.source_repository_id,
                claims.source_repository_id,
            ),
            ("owner identifier", &self.owner_id, claims.owner_id),
        ];
        for (what, wanted, actual) in ids {
            if let Some(wanted) = wanted
                && actual != Some(wanted.as_str())
            {
                return Err(format!(
                    "its {what} claim is {}, not {wanted}",
                    actual.unwrap_or("missing").escape_debug()
                ));
            }
        }
        Ok(())
    }
}

/// A value an identity rule matches: exact text, or a pattern where `*` stands for any run of
/// characters other than `/` and `**` for any run at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    /// The pattern `text`.
    pub fn new(text: &str) -> Self {
        Self(text.to_owned())
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        glob(self.0.as_bytes(), value.as_bytes())
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `value` matches `pattern` (`*`: any run without `/`; `**`: any run), in O(n·m)
/// time and without recursion: `matched[j]` says whether the pattern read so far matches
/// `value[..j]`.
fn glob(pattern: &[u8], value: &[u8]) -> bool {
    let mut matched = vec![false; value.len() + 1];
    matched[0] = true;
    let mut i = 0;
    while i < pattern.len() {
        let mut next = vec![false; value.len() + 1];
        if pattern[i] == b'*' {
            let any = pattern.get(i + 1) == Some(&b'*');
            // A star carries a match forward over what it may cover.
            let mut carried = false;
            for j in 0..=value.len() {
                if j > 0 && !any && value[j - 1] == b'/' {
                    carried = false;
                }
                carried |= matched[j];
                next[j] = carried;
            }
            i += if any { 2 } else { 1 };
        } else {
            for j in 1..=value.len() {
                next[j] = matched[j - 1] && value[j - 1] == pattern[i];
            }
            i += 1;
        }
        matched = next;
    }
    matched[value.len()]
}

/// Checks an identity rule's `subject`: exact, or a URI whose wildcards come after its owner
/// and repository (`https://github.com/ORG/REPO/…`), never `**`: a subject pattern names one
/// signer's workflows, not anyone's.
fn check_subject(subject: &str) -> Result<(), String> {
    let Some(star) = subject.find('*') else {
        return if subject.trim().is_empty() {
            Err("a subject names an identity (an e-mail address or a workflow URI)".into())
        } else {
            Ok(())
        };
    };
    if subject.contains("**") {
        return Err(
            "`**` is not allowed in a subject (it would reach across owners, repositories and \
             refs); use `*` within one part, e.g. `…/release.yml@refs/tags/v*`"
                .into(),
        );
    }
    let fixed = &subject[..star];
    let is_uri = fixed.starts_with("https://") || fixed.starts_with("http://");
    if !is_uri || fixed.matches('/').count() < 5 {
        return Err(format!(
            "a subject's wildcards come after the owner and repository it names (e.g. \
             `https://github.com/ORG/REPO/.github/workflows/release.yml@refs/tags/v*`), not \
             matching anyone at `{}`; an e-mail address is exact",
            fixed.escape_debug()
        ));
    }
    Ok(())
}

/// The trusted root file `[sigstore] trusted_root` names.
#[derive(Debug, Clone)]
pub struct SigstoreRoot {
    /// The file.
    pub path: PathBuf,
    /// The SHA-256 of its bytes, in hex.
    pub sha256: String,
    /// Its text (checked as a trusted root by `pull`).
    pub json: std::sync::Arc<str>,
}

impl PartialEq for SigstoreRoot {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.sha256 == other.sha256
    }
}

impl Eq for SigstoreRoot {}

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
    ///
    /// A rule that wants a signature covers the repository under another certain name of this
    /// machine at the same port too (`127.0.0.1:5000` for `localhost:5000`); an `unsigned`
    /// one only under the name it was written with. See [`TrustPolicy::rule_for`].
    pub fn covers(&self, repository: &str) -> bool {
        crate::registry_name::canonical_repository(repository).is_ok_and(|repository| {
            self.covers_as(&repository, Naming::AsWritten)
                || (!self.unsigned && self.covers_as(&repository, Naming::ThisMachineOtherwise))
        })
    }

    /// Whether the rule covers `repository` (its registry already canonical), its registry
    /// named as `naming` says; the paths compare as text.
    fn covers_as(&self, repository: &str, naming: Naming) -> bool {
        let (Some((rule_registry, rule_path)), Some((registry, path))) =
            (self.repository.split_once('/'), repository.split_once('/'))
        else {
            return false;
        };
        let named = match naming {
            Naming::AsWritten => rule_registry == registry,
            Naming::ThisMachineOtherwise => {
                rule_registry != registry
                    && crate::registry_name::this_machine_at_one_port(rule_registry, registry)
            }
        };
        if !named {
            return false;
        }
        match rule_path.strip_suffix("/*") {
            Some(prefix) => path
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| !rest.is_empty()),
            None => rule_path == path,
        }
    }
}

/// How a rule's registry names a repository's: as its canonical name, or as another certain
/// name of this machine at the same port ([`crate::registry_name::this_machine_at_one_port`]).
#[derive(Clone, Copy)]
enum Naming {
    AsWritten,
    ThisMachineOtherwise,
}

/// What the trust policy asks of a repository's plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Requirement<'a> {
    /// Signed by one of these keys or keyless signers.
    Signed {
        /// The keys.
        keys: Vec<&'a TrustedKey>,
        /// The keyless signers.
        identities: Vec<&'a TrustedIdentity>,
    },
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
    /// The keyless signers by name.
    pub identities: BTreeMap<String, TrustedIdentity>,
    /// The trusted root for keyless signatures (`None` until [`Self::read`] reads it, or
    /// without `[sigstore]`).
    pub sigstore_root: Option<SigstoreRoot>,
    /// The file `[sigstore] trusted_root` names, relative to the policy's directory.
    pub sigstore_root_file: Option<String>,
    /// The rules in file order.
    pub rules: Vec<TrustRule>,
}

impl TrustPolicy {
    /// The trust policy of `dir`, if it has one (a file there that cannot be trusted or parsed
    /// is an error, not `None`).
    pub fn read(dir: &Path) -> Result<Option<Self>, TrustError> {
        let path = dir.join(TRUST_FILE);
        let Some(text) = read_trusted_text(dir, &path, MAX_TRUST_BYTES)? else {
            return Ok(None);
        };
        let mut policy = Self::parse(&text, &path)?;
        if let Some(name) = policy.sigstore_root_file.clone() {
            policy.read_sigstore_root(dir, &name)?;
        }
        Ok(Some(policy))
    }

    /// Reads the trusted root file `name` of `dir` as a trust file, and folds its bytes into
    /// the pin.
    fn read_sigstore_root(&mut self, dir: &Path, name: &str) -> Result<(), TrustError> {
        let path = dir.join(name);
        let Some(json) = read_trusted_text(dir, &path, MAX_SIGSTORE_ROOT_BYTES)? else {
            return Err(TrustError::Invalid {
                path: self.path.clone(),
                message: format!(
                    "sigstore.trusted_root: {} does not exist (Sigstore's trusted_root.json for \
                     the instance that signs, from its TUF repository; see docs/registry.md)",
                    path.display()
                ),
            });
        };
        // Parsed by `pull` only: a root this version cannot read (a new key type) fails the
        // pulls that need it, never the loading of plugins verified before.
        let sha256 = crate::digest::sha256_hex(json.as_bytes());
        // The pin covers the policy and the root it names.
        self.sha256 = crate::digest::sha256_hex(format!("{}\n{sha256}", self.sha256).as_bytes());
        self.sigstore_root = Some(SigstoreRoot {
            path,
            sha256,
            json: json.into(),
        });
        Ok(())
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
        let mut identities = BTreeMap::new();
        for (name, identity) in file.identities {
            let key = |field: &str| format!("identities.{name}.{field}");
            if keys.contains_key(&name) {
                return Err(invalid(format!(
                    "identities.{name}: '{name}' also names a key of [keys]; give them different \
                     names"
                )));
            }
            if !identity.issuer.starts_with("https://") {
                return Err(invalid(format!(
                    "{}: '{}' is not an OIDC issuer URL (https://…, e.g. \
                     https://token.actions.githubusercontent.com)",
                    key("issuer"),
                    identity.issuer
                )));
            }
            check_subject(&identity.subject)
                .map_err(|why| invalid(format!("{}: {why}", key("subject"))))?;
            let optional = |text: Option<String>| text.as_deref().map(Pattern::new);
            identities.insert(
                name.clone(),
                TrustedIdentity {
                    name,
                    issuer: identity.issuer,
                    subject: Pattern::new(&identity.subject),
                    source_repository: optional(identity.source_repository),
                    source_ref: optional(identity.source_ref),
                    trigger: optional(identity.trigger),
                    source_repository_id: identity.source_repository_id,
                    owner_id: identity.owner_id,
                },
            );
        }
        let sigstore_root_file = match file.sigstore {
            Some(sigstore) => {
                let name = sigstore.trusted_root;
                if name.is_empty() || name.contains('/') || name.starts_with('.') {
                    return Err(invalid(format!(
                        "sigstore.trusted_root: '{name}' is not a file name beside the trust \
                         policy (e.g. \"trusted_root.json\")"
                    )));
                }
                Some(name)
            }
            None if !identities.is_empty() => {
                return Err(invalid(
                    "identities: keyless signers need a trusted root; add `[sigstore]` with \
                     `trusted_root = \"trusted_root.json\"`"
                        .into(),
                ));
            }
            None => None,
        };
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
            if let Some(unknown) = rule
                .signers
                .iter()
                .find(|name| !keys.contains_key(*name) && !identities.contains_key(*name))
            {
                return Err(invalid(format!(
                    "{}: no key named '{unknown}' in [keys], nor an identity in [identities]",
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
            identities,
            sigstore_root: None,
            sigstore_root_file,
            rules,
        })
    }

    /// The first rule covering `repository` (`registry/path`, its registry spelt any way: it
    /// is compared in its canonical spelling), with its index.
    ///
    /// A rule naming the repository's registry as it is named wins; failing one, a rule naming
    /// this machine otherwise at the same port applies only if it wants a signature: another
    /// name of this machine may only ever be held to more, never let in unsigned (the rule
    /// writer's `unsigned = true` for `127.0.0.1:5000/scratch` is for that address's server).
    pub fn rule_for(&self, repository: &str) -> Option<(usize, &TrustRule)> {
        let repository = crate::registry_name::canonical_repository(repository).ok()?;
        let rules = || self.rules.iter().enumerate();
        rules()
            .find(|(_, rule)| rule.covers_as(&repository, Naming::AsWritten))
            .or_else(|| {
                rules().find(|(_, rule)| {
                    !rule.unsigned && rule.covers_as(&repository, Naming::ThisMachineOtherwise)
                })
            })
    }

    /// What the policy asks of `repository`'s plugins (`registry/path`, compared as
    /// [`Self::rule_for`] does).
    pub fn requirement(&self, repository: &str) -> Requirement<'_> {
        match self.rule_for(repository) {
            None => Requirement::NoRule,
            Some((_, rule)) if rule.unsigned => Requirement::Unsigned,
            Some((_, rule)) => Requirement::Signed {
                keys: rule
                    .signers
                    .iter()
                    .filter_map(|name| self.keys.get(name))
                    .collect(),
                identities: rule
                    .signers
                    .iter()
                    .filter_map(|name| self.identities.get(name))
                    .collect(),
            },
        }
    }

    /// The SHA-256 of `dir`'s trust policy, in hex, for the lock to pin (`None` without one).
    pub fn pin(dir: &Path) -> Result<Option<String>, TrustError> {
        Ok(Self::read(dir)?.map(|policy| policy.sha256))
    }
}

/// The text of the trust file `path` in `dir`, read only if it is the operator's (or root's),
/// a regular file no one else may write ([`crate::lock::open_trusted`]), at most `cap` bytes of
/// UTF-8; `None` if there is none.
fn read_trusted_text(dir: &Path, path: &Path, cap: u64) -> Result<Option<String>, TrustError> {
    let file = crate::lock::open_trusted(dir, path).map_err(|error| match error {
        crate::lock::LockError::Untrusted { reason, .. } => TrustError::Untrusted {
            path: path.to_owned(),
            reason,
        },
        crate::lock::LockError::Io { source, .. } => TrustError::Io {
            path: path.to_owned(),
            source,
        },
        other => TrustError::Invalid {
            path: path.to_owned(),
            message: other.to_string(),
        },
    })?;
    let Some(file) = file else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| TrustError::Io {
            path: path.to_owned(),
            source,
        })?;
    let invalid = |message: String| TrustError::Invalid {
        path: path.to_owned(),
        message,
    };
    if bytes.len() as u64 > cap {
        return Err(invalid(format!("it is over {cap} bytes")));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| invalid("it is not UTF-8 text".into()))
}

/// Checks a rule's `repository` (`registry/path` or `registry/prefix/*`, the path lower case
/// with no empty segment) and writes it canonically, as references name it
/// (`LOCALHOST:05000/acme/*` is `localhost:5000/acme/*`; Docker Hub's `index.docker.io/greet`
/// is `docker.io/library/greet`, an official image's repository).
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
    // As a reference reads it, `acme/greet` is Docker Hub's: a rule naming a registry `acme`
    // would cover no reference anyone can pull.
    if !crate::registry_name::names_a_registry(registry) {
        return Err(wrong(format!(
            "`{registry}` is not a registry name (one has a `.` or a `:`, or is `localhost`): \
             `pull` reads `{body}` as Docker Hub's `docker.io/{body}`; write that"
        )));
    }
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
    // Docker Hub's official images: `greet` is `library/greet`, as a reference reads it; a
    // rule for `docker.io/greet` would otherwise cover nothing.
    if wildcard.is_empty() {
        let path = crate::registry_name::hub_path(&registry, path);
        return Ok(format!("{registry}/{path}"));
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

    /// A rule naming this machine one way applies to its other names only to want more: the
    /// rule naming the registry as the repository does wins, whatever the order, and an
    /// `unsigned` rule never lets another name in.
    #[test]
    fn another_name_of_this_machine_is_held_to_more_never_less() {
        fn signed(policy: &TrustPolicy) -> Requirement<'_> {
            Requirement::Signed {
                keys: vec![&policy.keys["acme"]],
                identities: vec![],
            }
        }
        let forward = policy(
            "[[rule]]\nrepository = \"127.0.0.1:5000/acme/*\"\nunsigned = true\n\
             [[rule]]\nrepository = \"localhost:5000/acme/*\"\nsigners = [\"acme\"]\n",
        )
        .expect("valid");
        assert_eq!(
            forward.requirement("localhost:5000/acme/greet"),
            signed(&forward)
        );
        assert_eq!(
            forward.requirement("127.0.0.1:5000/acme/greet"),
            Requirement::Unsigned
        );
        assert_eq!(
            forward.requirement("127.0.0.2:5000/acme/greet"),
            signed(&forward)
        );
        assert!(!forward.rules[0].covers("127.0.0.2:5000/acme/greet"));
        assert!(forward.rules[1].covers("127.0.0.2:5000/acme/greet"));
        let reversed = policy(
            "[[rule]]\nrepository = \"localhost:5000/acme/*\"\nsigners = [\"acme\"]\n\
             [[rule]]\nrepository = \"127.0.0.1:5000/acme/*\"\nunsigned = true\n",
        )
        .expect("valid");
        assert_eq!(
            reversed.requirement("127.0.0.1:5000/acme/greet"),
            Requirement::Unsigned
        );
        assert_eq!(
            reversed.rule_for("[::1]:5000/acme/greet").map(|(at, _)| at),
            Some(0)
        );
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
            Requirement::Signed {
                keys: vec![key],
                identities: vec![]
            }
        );
        assert_eq!(
            policy.requirement("r.example/acme/scratch"),
            Requirement::Signed {
                keys: vec![key],
                identities: vec![]
            },
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
             [[rule]]\nrepository = \"127.1:5000/scratch/*\"\nunsigned = true\n\
             [[rule]]\nrepository = \"index.docker.io/greet\"\nsigners = [\"acme\"]\n",
        )
        .expect("valid");
        let patterns: Vec<&str> = policy.rules.iter().map(|r| r.repository.as_str()).collect();
        assert_eq!(
            patterns,
            [
                "localhost:5000/acme/*",
                "localhost:5000/exact",
                "ghcr.io/acme/*",
                "127.0.0.1:5000/scratch/*",
                "docker.io/library/greet"
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
            // An official image, as a reference names it (`greet` alone).
            "docker.io/library/greet",
            // This machine at the same port, however named: one server listening on every
            // address answers them all.
            "127.0.0.1:5000/acme/greet",
            "127.0.0.2:5000/acme/greet",
            "[::1]:5000/acme/greet",
            "[::ffff:127.0.0.1]:5000/acme/greet",
            "[::ffff:7f00:2]:5000/acme/greet",
        ] {
            assert_eq!(
                policy.requirement(spelling),
                Requirement::Signed {
                    keys: vec![key],
                    identities: vec![]
                },
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
            "127.0.0.1:5001/acme/greet",
            "[::ffff:10.0.0.1]:5000/acme/greet",
            // A rule letting a repository in unsigned does so only under its own name.
            "localhost:5000/scratch/x",
            "[::1]:5000/scratch/x",
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
        // `pull acme/greet` is Docker Hub's `docker.io/acme/greet`: a rule for a registry
        // `acme` would cover nothing anyone can pull.
        let hub = message("[[rule]]\nrepository = \"acme/greet\"\nsigners = [\"acme\"]\n");
        assert!(
            hub.contains("rule[0].repository") && hub.contains("`docker.io/acme/greet`"),
            "{hub}"
        );
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

    #[test]
    fn patterns_match_within_a_path_segment_unless_doubled() {
        let tag = Pattern::new(
            "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v*",
        );
        assert!(tag.matches(
            "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v1.2.0"
        ));
        assert!(!tag.matches(
            "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v1/evil"
        ));
        assert!(!tag.matches(
            "https://github.com/acme/greet/.github/workflows/release.yml@refs/heads/main"
        ));
        assert!(
            !tag.matches(
                "https://github.com/acme/greetx/.github/workflows/release.yml@refs/tags/v1"
            )
        );
        let any = Pattern::new("https://github.com/acme/**");
        assert!(any.matches("https://github.com/acme/a/b@c"));
        assert!(!any.matches("https://github.com/acmex/a"));
        assert!(Pattern::new("a*b*c").matches("axxbyyc"));
        assert!(!Pattern::new("a*b*c").matches("axxbyy"));
        assert!(Pattern::new("**").matches(""));
        // Long hostile values with many stars stay quick (no backtracking).
        let long = format!("{}x", "/a".repeat(5_000));
        assert!(!Pattern::new("**a**a**a**a**a**a**b").matches(&long));
        assert!(Pattern::new("dev@acme.example").matches("dev@acme.example"));
        assert!(!Pattern::new("dev@acme.example").matches("dev@acme.example.evil"));
    }

    #[test]
    fn identity_rules_name_an_issuer_a_subject_and_the_claims_they_need() {
        let text = "[sigstore]\ntrusted_root = \"trusted_root.json\"\n\
                    [identities.release]\nissuer = \"https://token.actions.githubusercontent.com\"\n\
                    subject = \"https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v*\"\n\
                    source_ref = \"refs/tags/v*\"\ntrigger = \"push\"\n\
                    source_repository_id = \"123\"\nowner_id = \"45\"\n\
                    [[rule]]\nrepository = \"r.example/acme/*\"\nsigners = [\"release\"]\n";
        let policy = TrustPolicy::parse(text, Path::new("/p/t.toml")).expect("valid");
        let Requirement::Signed { keys, identities } = policy.requirement("r.example/acme/greet")
        else {
            panic!("signed");
        };
        assert!(keys.is_empty());
        let rule = identities[0];
        let mut claims = SignerClaims {
            identity: "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v1.0.0",
            issuer: "https://token.actions.githubusercontent.com",
            source_repository: Some("https://github.com/acme/greet"),
            source_ref: Some("refs/tags/v1.0.0"),
            trigger: Some("push"),
            source_repository_id: Some("123"),
            owner_id: Some("45"),
        };
        rule.accepts(&claims).expect("accepted");
        // The same names, after the repository was deleted and its name registered again:
        // other ids.
        for (repository, owner) in [(Some("124"), Some("45")), (Some("123"), Some("46"))] {
            let reused = SignerClaims {
                source_repository_id: repository,
                owner_id: owner,
                ..claims
            };
            assert!(
                rule.accepts(&reused)
                    .expect_err("another repository or owner")
                    .contains("identifier claim is"),
            );
        }
        let unnamed = SignerClaims {
            owner_id: None,
            ..claims
        };
        assert!(
            rule.accepts(&unnamed)
                .expect_err("no owner id")
                .contains("missing")
        );
        claims.trigger = Some("workflow_dispatch");
        assert!(
            rule.accepts(&claims)
                .expect_err("trigger")
                .contains("trigger")
        );
        claims.trigger = None;
        assert!(
            rule.accepts(&claims)
                .expect_err("no trigger")
                .contains("missing")
        );
        claims.trigger = Some("push");
        claims.issuer = "https://accounts.google.com";
        assert!(
            rule.accepts(&claims)
                .expect_err("issuer")
                .contains("issuer")
        );
        for (bad, why) in [
            (
                "[identities.x]\nissuer = \"https://i\"\nsubject = \"a\"\n",
                "trusted root",
            ),
            (
                "[sigstore]\ntrusted_root = \"../root.json\"\n",
                "file name beside",
            ),
            (
                "[sigstore]\ntrusted_root = \"r.json\"\n[identities.x]\nissuer = \"https://i\"\nsubject = \"**\"\n",
                "`**` is not allowed",
            ),
            (
                "[sigstore]\ntrusted_root = \"r.json\"\n[identities.x]\nissuer = \"https://i\"\nsubject = \"https://github.com/*/x\"\n",
                "after the owner and repository",
            ),
            (
                "[sigstore]\ntrusted_root = \"r.json\"\n[identities.x]\nissuer = \"https://i\"\nsubject = \"*@acme.example\"\n",
                "e-mail address is exact",
            ),
            (
                "[sigstore]\ntrusted_root = \"r.json\"\n[identities.x]\nissuer = \"i\"\nsubject = \"a\"\n",
                "not an OIDC issuer",
            ),
        ] {
            let error = TrustPolicy::parse(bad, Path::new("/p/t.toml")).expect_err(bad);
            assert!(error.to_string().contains(why), "{error}");
        }
    }
}
