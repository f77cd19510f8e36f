//! Lock version 2: where a pulled plugin came from and what was verified ([`PluginSource`]),
//! the pinned trust policy, and whether the directory's trust policy still lets each pulled
//! plugin load.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{LockError, LockFile, LockedPlugin};

/// How a plugin pulled without a signature was let in, as the lock records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Unsigned {
    /// `llm-worker pull --allow-unsigned`: a one-off exception of the operator's for a
    /// repository no rule of the trust policy covers. It needs no trust policy, but loading
    /// refuses it once a rule covers its repository and wants it signed. Recorded as
    /// `"pull --allow-unsigned"`.
    #[serde(rename = "pull --allow-unsigned")]
    ByFlag,
    /// A rule of the trust policy saying `unsigned = true`, which loading checks again.
    /// Recorded as `"trust policy"`.
    #[serde(rename = "trust policy")]
    ByTrustPolicy,
}

impl std::fmt::Display for Unsigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ByFlag => "pull --allow-unsigned",
            Self::ByTrustPolicy => "trust policy",
        })
    }
}

/// The way out of a refusal by the trust policy: the plugin file goes, `lock` then approves
/// the directory with its trust policy, and `pull` takes a version the policy accepts (`pull
/// --update` cannot: it uses only an approved trust policy, and `lock` approves none while a
/// plugin is refused).
const REPLACE: &str = "delete its file, approve the directory and its trust policy with \
                       `llm-worker lock DIR`, then `llm-worker pull` a version signed by a key \
                       the rule accepts";

/// Where a pulled plugin came from and what `llm-worker pull` verified (lock version 2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSource {
    /// The reference pulled (`registry/repository:tag` or `…@sha256:…`), its registry in
    /// canonical spelling as `registry::Reference` writes it.
    pub reference: String,
    /// `registry/repository`, which the trust policy's rules match. Judged by its registry's
    /// canonical name ([`Self::canonical_repository`]): an entry an earlier version recorded
    /// as `LOCALHOST:05000/acme/greet` is bound by the rules for `localhost:5000/acme/*`.
    pub repository: String,
    /// The digest of the manifest pulled: a tag that later points elsewhere is refused until
    /// `pull --update`.
    pub manifest: String,
    /// The digest of its one layer: `sha256:` and the plugin's `sha256`.
    pub layer: String,
    /// The name of the key whose signature was verified, in the trust policy then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// That key's SHA-256 (`sha256:` and the hex of its DER): loading refuses the plugin once
    /// the trust policy no longer lists this key for its repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Why it was taken without a signature, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsigned: Option<Unsigned>,
    /// For a keyless signature (`signer` then names an identity rule): the certificate's
    /// subject that was verified. Loading refuses the plugin once no identity rule of its
    /// repository's rule accepts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The OIDC issuer of the keyless signer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The signature's entry in the transparency log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_index: Option<u64>,
    /// The certificate's source repository claim, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_repository: Option<String>,
    /// The certificate's source ref claim, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
    /// The certificate's build trigger claim, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// The certificate's source repository identifier claim, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_repository_id: Option<String>,
    /// The certificate's source repository owner identifier claim, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

impl PluginSource {
    /// What was verified, in words: `signed by acme (sha256:…)` or `unsigned (…)`.
    pub fn verified(&self) -> String {
        if let (Some(signer), Some(identity), Some(issuer)) =
            (&self.signer, &self.identity, &self.issuer)
        {
            let entry = self
                .log_index
                .map(|index| format!(", log index {index}"))
                .unwrap_or_default();
            return format!("signed keylessly by {signer} ({identity}, issuer {issuer}{entry})");
        }
        match (&self.signer, &self.key, &self.unsigned) {
            (Some(signer), Some(key), _) => format!("signed by {signer} ({key})"),
            (_, _, Some(how)) => format!("unsigned, allowed by {how}"),
            _ => "nothing".to_owned(),
        }
    }

    /// The keyless signer's claims, if the entry records a keyless signature.
    pub fn keyless_claims(&self) -> Option<crate::trust::SignerClaims<'_>> {
        Some(crate::trust::SignerClaims {
            identity: self.identity.as_deref()?,
            issuer: self.issuer.as_deref()?,
            source_repository: self.source_repository.as_deref(),
            source_ref: self.source_ref.as_deref(),
            trigger: self.trigger.as_deref(),
            source_repository_id: self.source_repository_id.as_deref(),
            owner_id: self.owner_id.as_deref(),
        })
    }

    /// [`Self::repository`] with its registry in its canonical spelling (lower case, port as a
    /// number, `:443` dropped for a remote host …), as trust rules and references name it; an
    /// error if it is not `registry/path`.
    pub fn canonical_repository(&self) -> Result<String, String> {
        crate::registry_name::canonical_repository(&self.repository)
    }

    /// Why the current trust policy (`None`: there is none) does not allow this plugin to load.
    fn refusal(&self, policy: Option<&crate::trust::TrustPolicy>) -> Option<String> {
        use crate::trust::Requirement;
        let trust = crate::trust::TRUST_FILE;
        // Judged by its registry's canonical name, however the entry spells it (an entry
        // written as `LOCALHOST:05000/acme/greet` is bound by a rule for
        // `localhost:5000/acme/*`); a name that is no registry's binds nothing, so it loads
        // nothing.
        let repository = match self.canonical_repository() {
            Ok(repository) => repository,
            Err(why) => {
                return Some(format!(
                    "its source names the repository '{}', which is not a registry's \
                     repository ({why}), so no rule of {trust} can be told to bind it; {REPLACE}",
                    self.repository
                ));
            }
        };
        let repository = &repository;
        if self.unsigned == Some(Unsigned::ByFlag) {
            // The operator's exception stands where no rule speaks, never against one.
            let Requirement::Signed { keys, identities } = policy?.requirement(repository) else {
                return None;
            };
            let names = signer_names(&keys, &identities);
            return Some(format!(
                "it was pulled unsigned with `pull --allow-unsigned`, and a rule of {trust} now \
                 wants {repository} signed by {}; {REPLACE}",
                names
            ));
        }
        let Some(policy) = policy else {
            return Some(format!(
                "it was pulled from {repository} and verified against the trust policy, and \
                 {trust} is gone; restore it"
            ));
        };
        match policy.requirement(repository) {
            Requirement::NoRule => Some(format!(
                "no rule of {trust} covers {repository} any more, so its signer is no longer \
                 trusted; remove the plugin, or add a rule for {repository}"
            )),
            Requirement::Unsigned => None,
            Requirement::Signed { keys, identities } => {
                let names = signer_names(&keys, &identities);
                // Why each identity rule refuses a keyless signer's recorded claims.
                let mut reasons = Vec::new();
                let trusted = match self.keyless_claims() {
                    Some(claims) => identities.iter().any(|identity| {
                        identity
                            .accepts(&claims)
                            .map_err(|why| reasons.push(format!("{}: {why}", identity.name)))
                            .is_ok()
                    }),
                    None => keys
                        .iter()
                        .any(|key| Some(&key.fingerprint) == self.key.as_ref()),
                };
                let names = if reasons.is_empty() {
                    names
                } else {
                    format!("{names}; {}", reasons.join("; "))
                };
                let identity = self.identity.as_ref().map(|identity| {
                    let issuer = self.issuer.as_deref().unwrap_or("?");
                    format!("{identity}, issuer {issuer}")
                });
                match (&self.signer, self.key.as_ref().or(identity.as_ref())) {
                    _ if trusted => None,
                    (Some(signer), Some(key)) => Some(format!(
                        "its signer '{signer}' ({key}) is no longer trusted for {repository} by \
                         {trust} (its rule accepts {}); {REPLACE}",
                        names
                    )),
                    _ => Some(format!(
                        "it was pulled unsigned as the trust policy then allowed, and {trust} \
                         now wants {repository} signed by {}; {REPLACE}",
                        names
                    )),
                }
            }
        }
    }
}

/// The names of a rule's signers, keys and identities.
fn signer_names(
    keys: &[&crate::trust::TrustedKey],
    identities: &[&crate::trust::TrustedIdentity],
) -> String {
    keys.iter()
        .map(|key| key.name.as_str())
        .chain(identities.iter().map(|identity| identity.name.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The access policy's file name (as `llm_worker::mcp::ACCESS_FILE`).
pub const ACCESS_FILE: &str = "llm-worker.access.toml";

/// Largest access policy read (as the MCP server reads it).
pub(crate) const MAX_ACCESS_BYTES: u64 = 256 << 10;

impl LockFile {
    /// Whether the lock needs version 2 (pulled plugins, a pinned trust policy).
    fn needs_version_2(&self) -> bool {
        self.trust_sha256.is_some()
            || self.access_sha256.is_some()
            || self.plugins.iter().any(|p| p.source.is_some())
    }

    /// This lock with the lowest version that holds it (older readers keep reading plain
    /// directories' locks).
    pub(super) fn versioned(&self) -> Self {
        let mut lock = self.clone();
        lock.version = if self.needs_version_2() { 2 } else { 1 };
        lock
    }

    /// Checks the version and what version 2 adds.
    pub(super) fn check_version(&self) -> Result<(), String> {
        match self.version {
            1 if self.needs_version_2() => {
                return Err(
                    "it says version 1 but has `trust_sha256`, `access_sha256` or a \
                     `[plugin.source]`, which only version 2 has"
                        .into(),
                );
            }
            1 | 2 => {}
            version => {
                return Err(format!(
                    "its version is {version}; this llm-worker reads versions 1 and 2"
                ));
            }
        }
        for plugin in &self.plugins {
            let Some(source) = &plugin.source else {
                continue;
            };
            let file = &plugin.file;
            if source.layer != format!("sha256:{}", plugin.sha256) {
                return Err(format!(
                    "{file}: its source's layer is {}, and its sha256 {}: they must be the same \
                     bytes",
                    source.layer, plugin.sha256
                ));
            }
            let keyless = source.identity.is_some() && source.issuer.is_some();
            let signed = source.signer.is_some() && (source.key.is_some() != keyless);
            let unsigned = source.unsigned.is_some();
            let half_keyless = source.identity.is_some() != source.issuer.is_some();
            if signed == unsigned
                || half_keyless
                || source.signer.is_some() != (source.key.is_some() || keyless)
            {
                return Err(format!(
                    "{file}: its source names a `signer` and its `key` (or, signed keylessly, \
                     its `identity` and `issuer`), or says `unsigned = \"{}\"` (or \"{}\"), not \
                     both",
                    Unsigned::ByFlag,
                    Unsigned::ByTrustPolicy
                ));
            }
        }
        Ok(())
    }

    /// Adds `entry` to the lock, replacing the entry of the same file.
    pub fn upsert(&mut self, entry: LockedPlugin) {
        self.plugins.retain(|plugin| plugin.file != entry.file);
        self.plugins.push(entry);
        self.plugins.sort_by(|a, b| a.file.cmp(&b.file));
    }

    /// Keeps the provenance that `previous` recorded for plugins whose bytes are unchanged (a
    /// lock written afresh with [`LockFile::of`] knows nothing of registries); one note for
    /// each pulled plugin whose bytes changed, whose provenance is dropped.
    pub fn keep_sources(&mut self, previous: &LockFile) -> Vec<String> {
        let before = previous.by_file();
        let mut notes = Vec::new();
        for plugin in &mut self.plugins {
            let Some(old) = before.get(plugin.file.as_str()) else {
                continue;
            };
            let Some(source) = &old.source else {
                continue;
            };
            if old.sha256 == plugin.sha256 {
                plugin.source = Some(source.clone());
            } else {
                notes.push(format!(
                    "{}: changed since it was pulled from {} ({}); it is now approved as a \
                     local file, without its provenance",
                    plugin.file, source.reference, source.manifest
                ));
            }
        }
        notes
    }

    /// Says how the access policy's pin differs between this lock and `now`, if it does.
    pub fn access_difference(&self, now: &LockFile) -> Option<String> {
        let show = |pin: &Option<String>| pin.clone().unwrap_or_else(|| "none".into());
        (self.access_sha256 != now.access_sha256).then(|| {
            format!(
                "{ACCESS_FILE}: changed (sha256 {} in the lock, {} now)",
                show(&self.access_sha256),
                show(&now.access_sha256)
            )
        })
    }

    /// The pin of the directory `dir`'s access policy as it stands: the SHA-256 of
    /// `llm-worker.access.toml`, `None` if there is none. The file must be trusted as the lock
    /// file is.
    pub fn access_pin(dir: &Path) -> Result<Option<String>, LockError> {
        use std::io::Read;
        let path = dir.join(ACCESS_FILE);
        let Some(file) = super::open_trusted(dir, &path)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.take(MAX_ACCESS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| LockError::Io {
                path: path.clone(),
                source,
            })?;
        if bytes.len() as u64 > MAX_ACCESS_BYTES {
            return Err(LockError::Invalid {
                path,
                message: format!("it is over {MAX_ACCESS_BYTES} bytes"),
            });
        }
        Ok(Some(crate::digest::sha256_hex(&bytes)))
    }

    /// Why the access policy (pinned as `now`, `None`: there is none) may not be used with
    /// this lock, if it may not: the lock pins another, or none.
    pub fn access_refusal(&self, now: Option<&str>) -> Option<String> {
        match (self.access_sha256.as_deref(), now) {
            (old, new) if old == new => None,
            (Some(old), Some(new)) => Some(format!(
                "the access policy {ACCESS_FILE} changed since it was locked (sha256 {old} in \
                 the lock, {new} now); review it, then approve it with `llm-worker lock DIR`"
            )),
            (Some(old), None) => Some(format!(
                "the access policy {ACCESS_FILE} that the lock pinned (sha256 {old}) is gone; \
                 restore it, or approve its removal with `llm-worker lock DIR`"
            )),
            (None, Some(_)) => Some(format!(
                "the lock does not pin the access policy {ACCESS_FILE}; review it, then approve \
                 it with `llm-worker lock DIR`"
            )),
            (None, None) => None,
        }
    }

    /// Says how the trust policy's pin differs between this lock and `now`, if it does.
    pub fn trust_difference(&self, now: &LockFile) -> Option<String> {
        let trust = crate::trust::TRUST_FILE;
        let show = |pin: &Option<String>| pin.clone().unwrap_or_else(|| "none".into());
        (self.trust_sha256 != now.trust_sha256).then(|| {
            format!(
                "{trust}: changed (sha256 {} in the lock, {} now)",
                show(&self.trust_sha256),
                show(&now.trust_sha256)
            )
        })
    }

    /// Why each plugin of this lock that was pulled from a registry may not load now, by file:
    /// its signer is no longer allowed by the directory's trust policy, or the trust policy is
    /// not the one the lock pinned. Empty when every one may (and always for a lock without
    /// pulled plugins, which reads no trust policy).
    pub fn source_refusals(&self, dir: &Path) -> BTreeMap<String, String> {
        let pulled: Vec<(&str, &PluginSource)> = self
            .plugins
            .iter()
            .filter_map(|plugin| Some((plugin.file.as_str(), plugin.source.as_ref()?)))
            .collect();
        if pulled.is_empty() {
            return BTreeMap::new();
        }
        let trust = crate::trust::TRUST_FILE;
        let policy = match crate::trust::TrustPolicy::read(dir) {
            Ok(policy) => policy,
            // Not even a one-off exception loads when no one can tell whether a rule binds it.
            Err(error) => {
                let reason = format!("it was pulled from a registry, and {error}");
                return pulled
                    .into_iter()
                    .map(|(file, _)| (file.to_owned(), reason.clone()))
                    .collect();
            }
        };
        let now = policy.as_ref().map(|policy| policy.sha256.clone());
        let pin = match (&self.trust_sha256, &now) {
            (old, new) if old == new => None,
            (Some(old), Some(new)) => Some(format!(
                "the trust policy {trust} changed since it was locked (sha256 {old} in the lock, \
                 {new} now); review it, then approve it with `llm-worker lock DIR`"
            )),
            (Some(old), None) => Some(format!(
                "the trust policy {trust} that the lock pinned (sha256 {old}) is gone; restore it"
            )),
            (None, _) => Some(format!(
                "the lock does not pin the trust policy {trust}; review it, then approve it with \
                 `llm-worker lock DIR`"
            )),
        };
        // A trust policy the lock did not approve decides nothing, for a one-off exception
        // either: whether a rule covers its repository is that policy's to say.
        pulled
            .into_iter()
            .filter_map(|(file, source)| {
                let reason = source.refusal(policy.as_ref()).or_else(|| pin.clone())?;
                Some((file.to_owned(), reason))
            })
            .collect()
    }
}
