//! Pulling a plugin into a plugin directory: checking it against the lock and the trust
//! policy, writing it under a temporary name, loading it, renaming it into place and recording
//! in the lock what was verified.

use std::path::{Path, PathBuf};

use super::fetch::{Demand, Verification, pull, resolve};
use super::{ClientOptions, Reference, RegistryClient, RegistryError};
use crate::lock::LockFile;
use crate::lock::{LockedPlugin, PluginSource};
use crate::trust::{TRUST_FILE, TrustPolicy};
use crate::{PluginError, PluginHost};
use llm_worker_rules::tool::Visible;

/// How [`pull_into`] pulls.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PullOptions {
    /// The plugin's name in the directory (`NAME.wasm`); default: the repository's last part.
    pub name: Option<String>,
    /// Move a plugin the lock already records to what the reference names now.
    pub update: bool,
    /// With `update`, approve the tools, resources, templates and prompts the new version
    /// offers though the lock approved others; without it such an update is refused, naming
    /// them.
    pub approve_names: bool,
    /// Take the artifact without a signature (recorded in the lock as such) if no rule of the
    /// trust policy covers its repository: the flag never overrides a rule.
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

    /// Sets whether an update may approve other names than the lock did.
    pub fn approve_names(mut self, approve: bool) -> Self {
        self.approve_names = approve;
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
    /// The SHA-256 of the trust policy when this pull was the first to pin it in the lock (it
    /// was used as it stood: say so, so that the operator reviews what was trusted).
    pub trust_pinned: Option<String>,
    /// The plugin's policy file (`NAME.policy.toml`) and the SHA-256 the lock now approves it
    /// by, when this pull was the first to approve it: it lay beside the plugin and was taken
    /// as it stood (it decides what the plugin may reach: say so, so that the operator reviews
    /// it). `None` without a policy file, or when the lock had approved it before.
    pub policy_pinned: Option<(String, String)>,
    /// The SHA-256 of the access policy (`llm-worker.access.toml`: which callers may use
    /// which tools over HTTP) when this pull made the directory's first lock and so approved
    /// it as it stood: say so, as for the trust policy.
    pub access_pinned: Option<String>,
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
    // The names approved are those of the version reviewed: named by its digest, since a tag
    // can name another version by the time it is approved.
    if options.approve_names && reference.digest.is_none() {
        return Err(RegistryError::Usage(format!(
            "`--approve-names` approves the names of one version, named by its digest (a tag \
             can move between the review and the approval); nothing was pulled: pull \
             {}@sha256:… with the digest the refusal of the update named",
            reference.name()
        )));
    }
    let file = format!("{name}.wasm");
    let path = dir.join(&file);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| RegistryError::Io { path, source }
    };
    // Writable by its user alone (a lock in a directory others may write protects nothing,
    // and is refused just below), and made through no link another user put on the way: such
    // a link is refused before anything is made where it leads.
    let given = std::path::absolute(dir).map_err(io(dir))?;
    crate::file::links_on_the_way_are_ours(&given).map_err(|problem| {
        RegistryError::Usage(format!(
            "{} cannot be made safely: {problem}; nothing was pulled: pull into a directory \
             whose path only you (or root) can change",
            dir.display()
        ))
    })?;
    crate::file::create_dir_all_through_own_links(&given, 0o755).map_err(io(dir))?;
    // Before anything is fetched or written: a directory whose lock would protect nothing
    // would get a plugin it cannot approve (the lock is refused only after the rename).
    if let Some(problem) = LockFile::unsafe_directory(dir) {
        return Err(RegistryError::Usage(format!(
            "{} cannot hold a lock file anyone could trust: {problem}; nothing was pulled",
            dir.display()
        )));
    }
    let mut access_pinned = None;
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
            // A first lock approves the access policy as it stands, as it does the trust
            // policy (and says so).
            access_pinned = LockFile::access_pin(dir)?;
            LockFile {
                version: 2,
                access_sha256: access_pinned.clone(),
                ..LockFile::default()
            }
        }
    };
    let trust = TrustPolicy::read(dir)?;
    let pinned_before =
        lock.trust_sha256.is_some() || lock.plugins.iter().any(|p| p.source.is_some());
    let now = trust.as_ref().map(|policy| policy.sha256.clone());
    // A trust policy changed since the lock approved it is not used (nor approved by a pull),
    // not even to learn that no rule covers the repository for `--allow-unsigned`.
    let pin_ok = !pinned_before || lock.trust_sha256 == now;
    if !pin_ok {
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
    // The requests of one pull (a manifest, referrers, signatures, the layer: dozens) share one
    // time limit, so that a registry answering each slowly cannot hold a pull for hours.
    let budget = options.client.request_timeout;
    let deadline = tokio::time::Instant::now() + budget;
    let in_time = |what: &str| RegistryError::Transport {
        url: reference.to_string(),
        message: format!(
            "the registry did not {what} within {}s, the time limit of one pull (--timeout-secs); \
             nothing was written",
            budget.as_secs()
        ),
    };
    // Where the lock has an entry: the manifest the reference names now, and the only one
    // pulled (a second look at the tag could be answered with another manifest).
    let resolved = if let (Some(source), Some(entry)) = (&previous, &existing) {
        // The entry's repository as the reference names it, however the entry spells it.
        let same_repository = source
            .canonical_repository()
            .is_ok_and(|repository| repository == reference.name());
        // Another repository is another publisher: it would inherit the policy approved for
        // this one (its grants, the secrets the host adds to its requests), so `--update` does
        // not take it.
        if !same_repository {
            return Err(RegistryError::Usage(format!(
                "{} was pulled from {}, and {} is another repository: the policy approved for \
                 the first ({}, its grants and secrets) would pass to it unreviewed. Pull it \
                 under another --name, or remove {} and its lock entry (`llm-worker lock {}` \
                 after removing the file), review the policy, then pull",
                path.display(),
                source.repository,
                reference.name(),
                crate::SandboxPolicy::path_for(&path).display(),
                path.display(),
                dir.display()
            )));
        }
        let (now, _) = tokio::time::timeout_at(deadline, resolve(&client, reference))
            .await
            .map_err(|_| in_time("name the manifest"))??;
        let moved = now != source.manifest;
        // Up to date only if the file is still the bytes the lock approved: one damaged or
        // replaced since (which loading refuses) is pulled again from the same manifest.
        let intact = dir.canonicalize().is_ok_and(|root| {
            crate::file::read_regular_file_within(&path, host.max_plugin_bytes(), Some(&root))
                .is_ok_and(|bytes| crate::digest::sha256_hex(&bytes) == entry.sha256)
        });
        if !moved && intact {
            return Ok(PullOutcome {
                path,
                verified: source.verified(),
                entry: entry.clone(),
                previous_manifest: None,
                changed: false,
                trust_pinned: None,
                policy_pinned: None,
                access_pinned: None,
            });
        }
        if moved && !options.update {
            return Err(RegistryError::TagMoved {
                reference: reference.to_string(),
                file,
                locked: format!("{} ({})", source.manifest, source.reference),
                now,
            });
        }
        Some(now)
    } else {
        None
    };
    let demand = if options.allow_unsigned {
        Demand::AllowUnsigned(trust.as_ref())
    } else {
        Demand::Policy(trust.as_ref())
    };
    let fetched = match resolved {
        Some(digest) => Reference {
            digest: Some(digest),
            ..reference.clone()
        },
        None => reference.clone(),
    };
    let pulled = tokio::time::timeout_at(
        deadline,
        pull(&client, &fetched, demand, host.max_plugin_bytes()),
    )
    .await
    .map_err(|_| in_time("send the artifact and its signatures"))??;

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
        // Nor names nobody reviewed: a new version offering other tools (which get the
        // plugin's grants, and which access rules naming the plugin cover), resources,
        // templates or prompts is approved only when the operator says so, as `lock` would.
        // `--approve-names` comes with a digest (checked first), so what it approves is the
        // version the refusal named.
        if let Some(locked) = &existing
            && !options.approve_names
            && let Some(moved) = locked.listing_moved(&entry)
        {
            return Err(RegistryError::Usage(format!(
                "the new version of {} ({}) offers other names than the lock approved \
                 ({moved}); nothing was written: review them, then approve exactly this \
                 version with `llm-worker pull {}@{} {} --name {name} --update \
                 --approve-names`",
                path.display(),
                pulled.manifest_digest,
                reference.name(),
                pulled.manifest_digest,
                dir.display()
            )));
        }
        // Nor names another plugin of the directory offers: a load refuses both plugins of a
        // clash, so the approved one would go offline with the new one.
        if let Some((other, name)) = clashing_entry(&lock, &entry) {
            return Err(RegistryError::Usage(format!(
                "{} offers {name}, as {other} in {} does (the lock approved it there); a \
                 directory cannot serve both, and loading it would refuse both; nothing was \
                 written: pull it into another directory, or remove {other} first",
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
    let (signer, key, unsigned, keyless) = match &pulled.verified {
        Verification::Signed { signer, key } => {
            (Some(signer.clone()), Some(key.clone()), None, None)
        }
        Verification::Keyless { signer, identity } => {
            (Some(signer.clone()), None, None, Some(identity))
        }
        Verification::Unsigned(how) => (None, None, Some(*how), None),
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
            identity: keyless.map(|k| k.identity.clone()),
            issuer: keyless.map(|k| k.issuer.clone()),
            log_index: keyless.and_then(|k| k.log_index),
            source_repository: keyless.and_then(|k| k.source_repository.clone()),
            source_ref: keyless.and_then(|k| k.source_ref.clone()),
            trigger: keyless.and_then(|k| k.trigger.clone()),
            source_repository_id: keyless.and_then(|k| k.source_repository_id.clone()),
            owner_id: keyless.and_then(|k| k.owner_id.clone()),
        }),
        ..entry
    };
    if let Err(source) = std::fs::rename(&temporary, &path) {
        let _ = std::fs::remove_file(&temporary);
        return Err(RegistryError::Io { path, source });
    }
    lock.upsert(entry.clone());
    let mut trust_pinned = None;
    if trust.is_some() || lock.trust_sha256.is_some() {
        if lock.trust_sha256.is_none() {
            trust_pinned.clone_from(&now);
        }
        lock.trust_sha256 = now;
    }
    // A policy file beside a plugin the lock did not record yet is approved by this pull as
    // it stands; an update keeps the policy the lock approved (checked above).
    let policy_pinned = (existing.is_none() && entry.policy_sha256 != "none").then(|| {
        (
            crate::lock::relative_name(dir, &crate::SandboxPolicy::path_for(&path)),
            entry.policy_sha256.clone(),
        )
    });
    lock.write(dir)?;
    Ok(PullOutcome {
        path,
        entry,
        verified: pulled.verified.to_string(),
        previous_manifest: previous.map(|source| source.manifest),
        changed: true,
        trust_pinned,
        policy_pinned,
        access_pinned,
    })
}

/// Another plugin of `lock` (not `entry`'s own file) approved to offer a name `entry` offers
/// (a tool, a prompt, a resource URI or template), and that name: both would be refused at the
/// next load. (Overlaps a load finds beyond equal names, a template of one matching a URI of
/// the other, or a grant of one inside the other's, refuse both plugins there.)
fn clashing_entry<'l>(lock: &'l LockFile, entry: &LockedPlugin) -> Option<(&'l str, String)> {
    lock.plugins
        .iter()
        .filter(|other| other.file != entry.file)
        .find_map(|other| {
            let tool = entry
                .tools
                .iter()
                .find(|name| other.tools.contains(name))
                .map(|name| format!("the tool '{}'", Visible(name)));
            let offer = || {
                entry
                    .offers
                    .iter()
                    .find(|offer| other.offers.contains(offer))
                    .map(|offer| format!("the {}", Visible(offer)))
            };
            tool.or_else(offer).map(|name| (other.file.as_str(), name))
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
    // The lock pins what is read here: it must be the operator's own (as `lock` and a load
    // without a lock require), not a file another user may write or a link out of the
    // directory.
    let policy_text = crate::plugin::owned_policy_text(path)?;
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
        offers: plugin.offers(),
        imports: plugin.imports().to_vec(),
        source: None,
    })
}
