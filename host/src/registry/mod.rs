//! Plugins from an OCI registry (cargo feature `registry`): pull a component stored as a CNCF
//! Wasm OCI artifact, verify its cosign-compatible signature in process against the
//! directory's trust policy ([`crate::TrustPolicy`]), write it into a plugin directory and
//! record in the lock what was verified ([`pull_into`]); and push a plugin, signed, in the
//! same format ([`push`]).
//!
//! ```rust,no_run
//! # async fn run() -> Result<(), llm_worker::registry::RegistryError> {
//! use llm_worker::PluginHost;
//! use llm_worker::registry::{PullOptions, Reference, pull_into};
//!
//! let host = PluginHost::new()?;
//! let reference = Reference::parse("ghcr.io/acme/greet:1.0").map_err(llm_worker::registry::RegistryError::Usage)?;
//! let pulled = pull_into(&host, "plugins".as_ref(), &reference, &PullOptions::default()).await?;
//! println!("{} is {}", pulled.path.display(), pulled.verified);
//! # Ok(())
//! # }
//! ```

mod artifact;
mod client;
mod credentials;
mod reference;
mod signature;

use std::path::{Path, PathBuf};

pub use artifact::{
    Descriptor, Manifest, OCI_INDEX_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE, wasm_config,
};
pub use client::{ClientOptions, MAX_MANIFEST_BYTES, RegistryClient};
pub use credentials::{Credentials, PASSWORD_VARIABLE, USERNAME_VARIABLE};
pub use reference::Reference;
pub use signature::{
    SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, SigningKey, payload, signature_tag,
};

use crate::lock::{LockedPlugin, PluginSource, UNSIGNED_BY_FLAG, UNSIGNED_BY_POLICY};
use crate::trust::{Requirement, TRUST_FILE, TrustPolicy};
use crate::{LockFile, PluginError, PluginHost};

/// Most signature layers looked at for one artifact.
const MAX_SIGNATURES: usize = 16;

/// Why pulling or pushing failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The request cannot be made as asked (a bad reference or name, plain HTTP to a remote
    /// registry, a directory not ready for it).
    #[error("{0}")]
    Usage(String),
    /// The registry could not be reached, or the connection failed.
    #[error("cannot reach {url}: {message}")]
    Transport {
        /// What was asked for.
        url: String,
        /// What happened.
        message: String,
    },
    /// The registry answered with an error.
    #[error("{url}: the registry answered {status}{detail}")]
    Status {
        /// What was asked for.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The registry's own message, if any.
        detail: String,
    },
    /// Something was larger than its cap.
    #[error("{what} is {size} bytes, over the cap of {limit} bytes{hint}")]
    TooLarge {
        /// What it was.
        what: String,
        /// Its size (declared or read so far).
        size: u64,
        /// The cap.
        limit: u64,
        /// What sets the cap.
        hint: String,
    },
    /// The registry sent other bytes than the digest names (tampered with, or broken).
    #[error(
        "{what}: the registry sent bytes whose digest is {actual}, not {expected}; they were \
         tampered with or damaged, and nothing was written"
    )]
    DigestMismatch {
        /// What it was.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// The artifact is not a Wasm component.
    #[error("{reference} is not a Wasm component artifact: {reason}")]
    NotWasm {
        /// The reference.
        reference: String,
        /// What it is instead (with its media type).
        reason: String,
    },
    /// The artifact's signature was not verified against the trust policy.
    #[error("{reference} is not verified: {reason}; nothing was written")]
    NotVerified {
        /// The reference.
        reference: String,
        /// What failed.
        reason: String,
    },
    /// The tag points to another manifest than the one the lock approved.
    #[error(
        "{reference} now points to the manifest {now}, and the lock approved {locked} for {file}; \
         nothing changed: review the new version, then move the lock to it with `llm-worker \
         pull --update`"
    )]
    TagMoved {
        /// The reference.
        reference: String,
        /// The plugin file.
        file: String,
        /// The manifest the lock records.
        locked: String,
        /// The manifest the tag names now.
        now: String,
    },
    /// The trust policy cannot be used.
    #[error(transparent)]
    Trust(#[from] crate::TrustError),
    /// The lock file cannot be used.
    #[error(transparent)]
    Lock(#[from] crate::LockError),
    /// The pulled component is not a plugin this host loads (or a file cannot be loaded).
    #[error(transparent)]
    Plugin(Box<PluginError>),
    /// Writing into the plugin directory failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl From<PluginError> for RegistryError {
    fn from(error: PluginError) -> Self {
        RegistryError::Plugin(Box::new(error))
    }
}

/// What verified a pulled artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// A signature by this key of the trust policy.
    Signed {
        /// The key's name in the trust policy.
        signer: String,
        /// `sha256:` and the hex SHA-256 of the key's DER.
        key: String,
    },
    /// Taken unsigned: [`UNSIGNED_BY_FLAG`] or [`UNSIGNED_BY_POLICY`].
    Unsigned(&'static str),
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verification::Signed { signer, key } => write!(f, "signed by {signer} ({key})"),
            Verification::Unsigned(how) => write!(f, "unsigned, allowed by {how}"),
        }
    }
}

/// A Wasm artifact fetched and verified.
#[derive(Debug, Clone)]
pub struct PulledArtifact {
    /// The digest of its manifest.
    pub manifest_digest: String,
    /// The digest of its layer (the component).
    pub layer_digest: String,
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// What verified it.
    pub verified: Verification,
}

/// What [`pull`] asks of an artifact.
#[derive(Debug, Clone, Copy)]
pub enum Demand<'a> {
    /// What this trust policy asks of the repository (`None`: there is none, so a signature
    /// cannot be verified and the artifact is refused).
    Policy(Option<&'a TrustPolicy>),
    /// Nothing: take it unsigned (`pull --allow-unsigned`).
    AllowUnsigned,
}

/// Fetches the manifest `reference` names: its digest (computed, and checked against the
/// reference's digest if it has one) and the manifest.
pub async fn resolve(
    client: &RegistryClient,
    reference: &Reference,
) -> Result<(String, Manifest), RegistryError> {
    let name = reference.to_string();
    let fetched = client
        .manifest(reference.manifest_reference(), artifact::ACCEPT_MANIFESTS)
        .await?
        .ok_or_else(|| {
            RegistryError::Usage(format!(
                "{name}: the registry has no such manifest (no such repository, tag or digest)"
            ))
        })?;
    let digest = format!("sha256:{}", crate::digest::sha256_hex(&fetched.bytes));
    if let Some(expected) = &reference.digest
        && expected != &digest
    {
        return Err(RegistryError::DigestMismatch {
            what: format!("the manifest {name}"),
            expected: expected.clone(),
            actual: digest,
        });
    }
    let manifest =
        Manifest::parse(&fetched.bytes, fetched.content_type.as_deref()).map_err(|reason| {
            RegistryError::NotWasm {
                reference: name.clone(),
                reason,
            }
        })?;
    Ok((digest, manifest))
}

/// Pulls the Wasm artifact `reference` names: its manifest (at most [`MAX_MANIFEST_BYTES`]),
/// refused unless it is a Wasm component artifact; its signature, verified as `demand` asks
/// before anything large is fetched; then its layer, at most `max_bytes` (the host's
/// `max_plugin_bytes`), checked against its digest.
pub async fn pull(
    client: &RegistryClient,
    reference: &Reference,
    demand: Demand<'_>,
    max_bytes: u64,
) -> Result<PulledArtifact, RegistryError> {
    let name = reference.to_string();
    let (manifest_digest, manifest) = resolve(client, reference).await?;
    let layer = manifest
        .wasm_layer()
        .map_err(|reason| RegistryError::NotWasm {
            reference: name.clone(),
            reason,
        })?
        .clone();
    let verified = verify(client, reference, &manifest_digest, demand).await?;
    let cap_hint = " (the host's plugin size cap, max_plugin_bytes); nothing was fetched";
    if layer.size > max_bytes {
        return Err(RegistryError::TooLarge {
            what: format!("the component of {name}"),
            size: layer.size,
            limit: max_bytes,
            hint: cap_hint.to_owned(),
        });
    }
    let bytes = client
        .blob(
            &layer.digest,
            layer.size,
            &format!("the component of {name} ({})", layer.digest),
            " (the size its manifest declares)",
        )
        .await?;
    Ok(PulledArtifact {
        manifest_digest,
        layer_digest: layer.digest,
        bytes,
        verified,
    })
}

/// Verifies the signatures of `manifest_digest` as `demand` asks.
async fn verify(
    client: &RegistryClient,
    reference: &Reference,
    manifest_digest: &str,
    demand: Demand<'_>,
) -> Result<Verification, RegistryError> {
    let repository = reference.name();
    let refuse = |reason: String| RegistryError::NotVerified {
        reference: reference.to_string(),
        reason,
    };
    let policy = match demand {
        Demand::AllowUnsigned => return Ok(Verification::Unsigned(UNSIGNED_BY_FLAG)),
        Demand::Policy(None) => {
            return Err(refuse(format!(
                "the directory has no trust policy ({TRUST_FILE}) saying which keys sign \
                 {repository}; write one (see the README), or take this artifact unsigned with \
                 --allow-unsigned"
            )));
        }
        Demand::Policy(Some(policy)) => policy,
    };
    let keys = match policy.requirement(&repository) {
        Requirement::NoRule => {
            return Err(refuse(format!(
                "no rule of the trust policy {} covers {repository}; add one naming its \
                 signers, or take this artifact unsigned with --allow-unsigned",
                policy.path.display()
            )));
        }
        Requirement::Unsigned => return Ok(Verification::Unsigned(UNSIGNED_BY_POLICY)),
        Requirement::Signed(keys) => keys,
    };
    let names: Vec<&str> = keys.iter().map(|key| key.name.as_str()).collect();
    let tag = signature_tag(manifest_digest);
    let Some(fetched) = client.manifest(&tag, OCI_MANIFEST_MEDIA_TYPE).await? else {
        return Err(refuse(format!(
            "no signature: {repository} has no {tag} (where cosign and `llm-worker push --sign` \
             put the signatures of {manifest_digest}); the trust policy wants it signed by {}",
            names.join(", ")
        )));
    };
    let signatures = Manifest::parse(&fetched.bytes, fetched.content_type.as_deref())
        .map_err(|why| refuse(format!("its signature manifest {tag} is unreadable: {why}")))?;
    let mut reasons = Vec::new();
    // Only layers that carry a signature count towards the cap, so that anyone who can push
    // to the repository cannot hide a valid signature behind unsigned junk layers.
    let layers = signatures
        .layers
        .iter()
        .filter(|layer| layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
        .filter(|layer| {
            layer
                .annotations
                .as_ref()
                .is_some_and(|annotations| annotations.contains_key(SIGNATURE_ANNOTATION))
        })
        .take(MAX_SIGNATURES);
    for (index, layer) in layers.enumerate() {
        let number = index + 1;
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        if artifact::check_digest(&layer.digest).is_err() {
            reasons.push(format!("signature {number} names no sha256 payload"));
            continue;
        }
        // A payload that cannot be fetched is that signature's failure, not the pull's: another
        // signature of the list may still verify.
        let payload = match client
            .blob(
                &layer.digest,
                signature::MAX_PAYLOAD_BYTES,
                &format!("the payload of signature {number} of {repository}"),
                "",
            )
            .await
        {
            Ok(payload) => payload,
            Err(error) => {
                reasons.push(format!("signature {number}: {error}"));
                continue;
            }
        };
        let Some(key) = keys
            .iter()
            .find(|key| signature::verify(&key.der, &payload, signature).is_ok())
        else {
            reasons.push(format!(
                "signature {number} does not verify with {} (signed by another key, or altered)",
                names.join(" or ")
            ));
            continue;
        };
        match signature::check_payload(&payload, &repository, manifest_digest) {
            Ok(()) => {
                return Ok(Verification::Signed {
                    signer: key.name.clone(),
                    key: key.fingerprint.clone(),
                });
            }
            Err(why) => reasons.push(format!("signature {number} is by {}, but {why}", key.name)),
        }
    }
    if reasons.is_empty() {
        reasons.push(format!("{tag} holds no cosign signature layer"));
    }
    Err(refuse(format!(
        "no valid signature by a key the trust policy accepts for {repository} ({}): {}",
        names.join(", "),
        reasons.join("; ")
    )))
}

/// What [`push`] did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The digest of the manifest pushed.
    pub manifest_digest: String,
    /// The tag the signature was stored under, if signed.
    pub signature_tag: Option<String>,
}

/// Pushes `component` (a plugin's bytes) to `reference` (which needs a tag) as a Wasm
/// artifact whose config lists `imports`, and with `key` signs it as cosign does (appending
/// to the signatures already there).
pub async fn push(
    client: &RegistryClient,
    reference: &Reference,
    component: &[u8],
    imports: &[String],
    key: Option<&SigningKey>,
) -> Result<Pushed, RegistryError> {
    let Some(tag) = reference
        .tag
        .as_deref()
        .filter(|_| reference.digest.is_none())
    else {
        return Err(RegistryError::Usage(format!(
            "{reference}: a push needs a tag (REGISTRY/REPOSITORY:TAG), not a digest"
        )));
    };
    let layer = Descriptor::of(WASM_LAYER_MEDIA_TYPE, component);
    let config = wasm_config(&layer.digest, imports);
    client.put_blob(component).await?;
    client.put_blob(&config).await?;
    let mut manifest = Manifest::new(Descriptor::of(WASM_CONFIG_MEDIA_TYPE, &config), vec![layer]);
    manifest.artifact_type = Some(WASM_CONFIG_MEDIA_TYPE.to_owned());
    let manifest_digest = client
        .put_manifest(tag, OCI_MANIFEST_MEDIA_TYPE, manifest.to_bytes())
        .await?;
    let Some(key) = key else {
        return Ok(Pushed {
            manifest_digest,
            signature_tag: None,
        });
    };
    let payload = payload(&reference.name(), &manifest_digest);
    let signature = key.sign(&payload);
    client.put_blob(&payload).await?;
    let mut layer = Descriptor::of(SIMPLE_SIGNING_MEDIA_TYPE, &payload);
    layer.annotations = Some([(SIGNATURE_ANNOTATION.to_owned(), signature)].into());
    let signature_tag = signature_tag(&manifest_digest);
    // Signatures already there (other signers) are kept, as cosign keeps them.
    let mut layers: Vec<Descriptor> = match client
        .manifest(&signature_tag, OCI_MANIFEST_MEDIA_TYPE)
        .await?
    {
        Some(fetched) => Manifest::parse(&fetched.bytes, fetched.content_type.as_deref())
            .map(|existing| existing.layers)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    layers.retain(|existing| existing.digest != layer.digest);
    layers.push(layer);
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    })
    .to_string()
    .into_bytes();
    client.put_blob(&config).await?;
    let signatures = Manifest::new(
        Descriptor::of(artifact::OCI_CONFIG_MEDIA_TYPE, &config),
        layers,
    );
    client
        .put_manifest(
            &signature_tag,
            OCI_MANIFEST_MEDIA_TYPE,
            signatures.to_bytes(),
        )
        .await?;
    Ok(Pushed {
        manifest_digest,
        signature_tag: Some(signature_tag),
    })
}

/// How [`pull_into`] pulls.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PullOptions {
    /// The plugin's name in the directory (`NAME.wasm`); default: the repository's last part.
    pub name: Option<String>,
    /// Move a plugin the lock already records to what the reference names now.
    pub update: bool,
    /// Take the artifact without a signature (recorded in the lock as such).
    pub allow_unsigned: bool,
    /// How the registry is reached.
    pub client: ClientOptions,
}

impl PullOptions {
    /// Sets the plugin's name.
    pub fn name(mut self, name: Option<String>) -> Self {
        self.name = name;
        self
    }

    /// Sets whether a recorded plugin may be moved to a new version.
    pub fn update(mut self, update: bool) -> Self {
        self.update = update;
        self
    }

    /// Sets whether the artifact may come unsigned.
    pub fn allow_unsigned(mut self, allow: bool) -> Self {
        self.allow_unsigned = allow;
        self
    }

    /// Sets how the registry is reached.
    pub fn client(mut self, client: ClientOptions) -> Self {
        self.client = client;
        self
    }
}

/// What [`pull_into`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PullOutcome {
    /// The plugin file.
    pub path: PathBuf,
    /// Its lock entry.
    pub entry: LockedPlugin,
    /// What verified it.
    pub verified: String,
    /// The manifest the lock recorded before, when this moved it.
    pub previous_manifest: Option<String>,
    /// `false` when the directory already held exactly this version (nothing written).
    pub changed: bool,
}

/// A plugin name that stays in its directory: letters, digits, `_`, `-` and inner `.`.
fn check_name(name: &str) -> Result<String, RegistryError> {
    let name = name.strip_suffix(".wasm").unwrap_or(name);
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && !name.ends_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(name.to_owned())
    } else {
        Err(RegistryError::Usage(format!(
            "'{name}' cannot name a plugin file: use up to 64 letters, digits, `_`, `-` and \
             inner `.` (the file is NAME.wasm in the directory)"
        )))
    }
}

/// Pulls `reference` into the plugin directory `dir` as `NAME.wasm`, verified against the
/// directory's trust policy, and records it in the lock (created if the directory has none
/// and holds no other plugin).
///
/// A plugin the lock already records from a registry is moved to another manifest only with
/// [`PullOptions::update`] (a tag that now names another manifest is refused otherwise); a
/// file of that name that did not come from a registry is never replaced. The new component
/// is verified, written under a temporary name, loaded with its policy (`NAME.policy.toml`)
/// like any plugin, renamed into place, and only then is the lock written.
pub async fn pull_into(
    host: &PluginHost,
    dir: &Path,
    reference: &Reference,
    options: &PullOptions,
) -> Result<PullOutcome, RegistryError> {
    let name = check_name(options.name.as_deref().unwrap_or(reference.short_name()))?;
    let file = format!("{name}.wasm");
    let path = dir.join(&file);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| RegistryError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut lock = match LockFile::read(dir)? {
        Some(lock) => lock,
        None => {
            let others = crate::LoadDirOptions::default()
                .plugin_files(dir)
                .map_err(io(dir))?;
            if !others.is_empty() {
                return Err(RegistryError::Usage(format!(
                    "{} holds plugins but no lock file: review them and approve them with \
                     `llm-worker lock {}` first, so that the lock `pull` adds to covers the \
                     whole directory",
                    dir.display(),
                    dir.display()
                )));
            }
            LockFile {
                version: 2,
                ..LockFile::default()
            }
        }
    };
    let trust = TrustPolicy::read(dir)?;
    let pinned_before =
        lock.trust_sha256.is_some() || lock.plugins.iter().any(|p| p.source.is_some());
    let now = trust.as_ref().map(|policy| policy.sha256.clone());
    // A trust policy changed since the lock approved it is not used (nor approved by a pull).
    let pin_ok = !pinned_before || lock.trust_sha256 == now;
    if !pin_ok && !options.allow_unsigned {
        return Err(RegistryError::Usage(format!(
            "the trust policy {} is not the one the lock approved (sha256 {} in the lock, {} \
             now); review it, then approve it with `llm-worker lock {}` before pulling with it",
            dir.join(TRUST_FILE).display(),
            lock.trust_sha256.as_deref().unwrap_or("none"),
            now.as_deref().unwrap_or("none"),
            dir.display()
        )));
    }
    let existing = lock
        .by_file()
        .get(file.as_str())
        .map(|entry| (*entry).clone());
    let on_disk = std::fs::symlink_metadata(&path).is_ok();
    let previous = match &existing {
        Some(entry) => match &entry.source {
            Some(source) => Some(source.clone()),
            None => {
                return Err(RegistryError::Usage(format!(
                    "{} is approved by the lock as a local file, not pulled from a registry: \
                     pull under another --name, or remove it and its lock entry first",
                    path.display()
                )));
            }
        },
        None if on_disk => {
            return Err(RegistryError::Usage(format!(
                "{} is already there and not in the lock: pull under another --name, or remove \
                 it first",
                path.display()
            )));
        }
        None => None,
    };

    let client = RegistryClient::new(reference, &options.client)?;
    if let (Some(source), Some(entry)) = (&previous, &existing) {
        let (now, _) = resolve(&client, reference).await?;
        let moved = now != source.manifest || source.repository != reference.name();
        if !moved {
            return Ok(PullOutcome {
                path,
                verified: source.verified(),
                entry: entry.clone(),
                previous_manifest: None,
                changed: false,
            });
        }
        if !options.update {
            return Err(RegistryError::TagMoved {
                reference: reference.to_string(),
                file,
                locked: format!("{} ({})", source.manifest, source.reference),
                now,
            });
        }
    }
    let demand = if options.allow_unsigned {
        Demand::AllowUnsigned
    } else {
        Demand::Policy(trust.as_ref())
    };
    let pulled = pull(&client, reference, demand, host.max_plugin_bytes()).await?;

    // Written under a name no loader reads, loaded with the plugin's policy, then renamed.
    let temporary = dir.join(format!(".{file}.{}.pulling", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
        let mut out = options.open(&temporary)?;
        out.write_all(&pulled.bytes)?;
        out.sync_all()
    };
    let _ = std::fs::remove_file(&temporary);
    write().map_err(io(&temporary))?;
    let entry = entry_for(host, &path, &temporary, &file).and_then(|entry| {
        // What is locked is what was verified: the bytes loaded are the layer's.
        if Some(entry.sha256.as_str()) != pulled.layer_digest.strip_prefix("sha256:") {
            return Err(RegistryError::Usage(format!(
                "{} changed while it was being written (sha256 {} loaded, {} verified); \
                 nothing was approved: pull again",
                temporary.display(),
                entry.sha256,
                pulled.layer_digest
            )));
        }
        // A pull approves new bytes, never a policy nobody reviewed: the policy file and where
        // its grants lead must be the ones the lock approved for this plugin.
        if let Some(locked) = &existing
            && (locked.policy_sha256 != entry.policy_sha256 || locked.dirs != entry.dirs)
        {
            return Err(RegistryError::Usage(format!(
                "the policy of {} (or where its directory grants lead) changed since it was \
                 locked; nothing was written: review it, approve it with `llm-worker lock {}`, \
                 then pull again",
                path.display(),
                dir.display()
            )));
        }
        Ok(entry)
    });
    let entry = match entry {
        Ok(entry) => entry,
        Err(error) => {
            let _ = std::fs::remove_file(&temporary);
            return Err(error);
        }
    };
    let (signer, key, unsigned) = match &pulled.verified {
        Verification::Signed { signer, key } => (Some(signer.clone()), Some(key.clone()), None),
        Verification::Unsigned(how) => (None, None, Some((*how).to_owned())),
    };
    let entry = LockedPlugin {
        source: Some(PluginSource {
            reference: reference.to_string(),
            repository: reference.name(),
            manifest: pulled.manifest_digest.clone(),
            layer: pulled.layer_digest.clone(),
            signer,
            key,
            unsigned,
        }),
        ..entry
    };
    if let Err(source) = std::fs::rename(&temporary, &path) {
        let _ = std::fs::remove_file(&temporary);
        return Err(RegistryError::Io { path, source });
    }
    lock.upsert(entry.clone());
    if pin_ok && (trust.is_some() || lock.trust_sha256.is_some()) {
        lock.trust_sha256 = now;
    }
    lock.write(dir)?;
    Ok(PullOutcome {
        path,
        entry,
        verified: pulled.verified.to_string(),
        previous_manifest: previous.map(|source| source.manifest),
        changed: true,
    })
}

/// Loads the component written at `temporary` as the plugin `path` (with `path`'s policy) and
/// makes its lock entry.
fn entry_for(
    host: &PluginHost,
    path: &Path,
    temporary: &Path,
    file: &str,
) -> Result<LockedPlugin, RegistryError> {
    let policy_path = crate::SandboxPolicy::path_for(path);
    let policy_text = if policy_path.exists() {
        Some(
            crate::SandboxPolicy::read_text(&policy_path).map_err(|source| {
                PluginError::Policy {
                    path: path.to_owned(),
                    source,
                }
            })?,
        )
    } else {
        None
    };
    let policy =
        match &policy_text {
            Some(text) => crate::SandboxPolicy::parse(text, &policy_path, host.limits()).map_err(
                |source| PluginError::Policy {
                    path: path.to_owned(),
                    source,
                },
            )?,
            None => crate::SandboxPolicy::with_limits(host.limits().clone()),
        };
    let plugin = host.load_with_policy(temporary, policy)?;
    Ok(LockedPlugin {
        file: file.to_owned(),
        sha256: crate::digest::hex(plugin.sha256()),
        policy_sha256: policy_text
            .map(|text| crate::digest::sha256_hex(text.as_bytes()))
            .unwrap_or_else(|| "none".to_owned()),
        dirs: crate::lock::grant_paths(plugin.policy()),
        tools: plugin.tool_names().into_iter().map(str::to_owned).collect(),
        imports: plugin.imports().to_vec(),
        source: None,
    })
}
