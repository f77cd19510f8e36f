//! The lock file of a plugin directory (`llm-worker.lock`): which plugins were reviewed and
//! approved, by the SHA-256 of their bytes and of their policy, and where their directory
//! grants lead. A directory with a lock file loads only those plugins, unchanged.
//!
//! The lock is a trust file, so it fails closed: it is read only if it is a regular file owned
//! by this user or root that no one else may write, reached by no link that leaves the
//! directory (a Kubernetes ConfigMap's links into `..data/` stay inside it); a lock that is
//! there but cannot be trusted is an error, never "no lock". It is written to a temporary file
//! created new, then renamed into place, so a link planted under its name is replaced, not
//! written through.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The lock file's name, in the plugin directory.
pub const LOCK_FILE: &str = "llm-worker.lock";

/// Largest lock file read.
const MAX_LOCK_BYTES: u64 = 4 << 20;

/// One approved plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPlugin {
    /// The plugin file, relative to the directory (`/`-separated).
    pub file: String,
    /// The SHA-256 of the plugin file, in hex.
    pub sha256: String,
    /// The SHA-256 of its policy file, in hex, or `"none"` without one.
    pub policy_sha256: String,
    /// Where each directory grant of its policy resolves (its canonical path), in the policy's
    /// order: a grant whose path has since been made to lead elsewhere (`data/` replaced by a
    /// link to `~/.ssh`) is not approved, although the policy's text is unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<String>,
    /// Its tools, for the reviewer.
    pub tools: Vec<String>,
    /// What it imports, for the reviewer.
    pub imports: Vec<String>,
    /// Where it was pulled from and what was verified then (lock version 2; `None` for a
    /// plugin put in the directory by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PluginSource>,
}

/// The contents of a lock file, plugins in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// The format's version: 1, or 2 once it records pulled plugins or pins a trust policy.
    pub version: u32,
    /// The SHA-256 of the directory's trust policy ([`crate::TRUST_FILE`]) when it was locked
    /// (version 2): a trust policy changed since is not used until it is approved again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_sha256: Option<String>,
    /// The approved plugins.
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<LockedPlugin>,
}

/// Why a lock file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Reading or writing failed.
    #[error("cannot use the lock file {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a lock file of this format.
    #[error(
        "the lock file {} is invalid: {message}; fix it, or write it again with `llm-worker \
         lock DIR`",
        path.display()
    )]
    Invalid {
        /// The lock file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The lock file is there, but someone other than the operator could have written it.
    #[error(
        "the lock file {} is not trusted: {reason}; nothing in the directory is loaded until it \
         is fixed (or approve the directory again with `llm-worker lock DIR`)",
        path.display()
    )]
    Untrusted {
        /// The lock file.
        path: PathBuf,
        /// Why it is not trusted.
        reason: String,
    },
    /// The directory must be locked (`--locked`, [`crate::LoadDirOptions::locked`], or it was
    /// locked when serving started), and its lock file is gone.
    #[error(
        "the lock file {} is missing, and this directory must be locked: nothing in it is \
         loaded; restore the lock file, or review the plugins and approve them with \
         `llm-worker lock DIR`",
        path.display()
    )]
    Missing {
        /// The lock file that should be there.
        path: PathBuf,
    },
}

impl LockError {
    /// The lock file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            LockError::Io { path, .. }
            | LockError::Invalid { path, .. }
            | LockError::Untrusted { path, .. }
            | LockError::Missing { path } => path,
        }
    }
}

/// A path within `dir` as the lock file names it.
pub(crate) fn relative_name(dir: &Path, path: &Path) -> String {
    path.strip_prefix(dir)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The canonical paths of a policy's directory grants, as the lock records them.
pub(crate) fn grant_paths(policy: &crate::SandboxPolicy) -> Vec<String> {
    policy
        .dirs
        .iter()
        .map(|grant| grant.host.display().to_string())
        .collect()
}

// Approval: what loading a plugin of a locked directory checks against its entry. The files
// are checked before anything of them is parsed or compiled; the directory grants once they
// are resolved, because the policy's text may be unchanged while a path in it was made to lead
// elsewhere.

impl LockFile {
    /// The entry approving the plugin at `path` of `dir`, or why there is none.
    pub(crate) fn approval(&self, dir: &Path, path: &Path) -> Result<&LockedPlugin, String> {
        let name = relative_name(dir, path);
        self.plugins
            .iter()
            .find(|entry| entry.file == name)
            .ok_or_else(|| "it is not in the lock (a plugin added since it was written)".into())
    }

    /// The plugins this lock approves in `dir` that are not among `present` (the directory is
    /// not what was approved).
    pub(crate) fn gone(&self, dir: &Path, present: &[PathBuf]) -> Vec<PathBuf> {
        let present: std::collections::BTreeSet<String> = present
            .iter()
            .map(|path| relative_name(dir, path))
            .collect();
        self.plugins
            .iter()
            .filter(|entry| !present.contains(&entry.file))
            .map(|entry| dir.join(&entry.file))
            .collect()
    }
}

impl LockedPlugin {
    /// Whether the plugin's bytes and policy text (their SHA-256 in hex; no policy file is
    /// `None`) are the approved ones; if not, why.
    pub(crate) fn approves_files(
        &self,
        sha256: &str,
        policy_sha256: Option<&str>,
        policy_path: &Path,
    ) -> Result<(), String> {
        let policy = policy_sha256.unwrap_or("none");
        if sha256 != self.sha256 {
            Err(format!(
                "it changed since it was locked (sha256 {} in the lock, {sha256} now)",
                self.sha256
            ))
        } else if policy != self.policy_sha256 {
            Err(format!(
                "its policy {} changed since it was locked (sha256 {} in the lock, {policy} now)",
                policy_path.display(),
                self.policy_sha256
            ))
        } else {
            Ok(())
        }
    }

    /// Whether the directory grants of `policy`, resolved, lead where they were approved to;
    /// if not, where they lead now.
    pub(crate) fn approves_grants(&self, policy: &crate::SandboxPolicy) -> Result<(), String> {
        let now = grant_paths(policy);
        if now == self.dirs {
            return Ok(());
        }
        Err(grants_moved(&self.dirs, &now))
    }
}

/// Says where a plugin's directory grants lead now, against where the lock approved.
fn grants_moved(locked: &[String], now: &[String]) -> String {
    let list = |dirs: &[String]| {
        if dirs.is_empty() {
            "none".to_owned()
        } else {
            dirs.join(", ")
        }
    };
    format!(
        "its directory grants lead to {} now, and the lock approved {}",
        list(now),
        list(locked)
    )
}

/// Opens the lock file at `path` (in `dir`) for reading if it can be trusted: a regular file
/// (never blocking on a FIFO), owned by this user or root, writable by no one else, and — when
/// reached through links — still inside `dir`. `Ok(None)` if there is none.
pub(crate) fn open_trusted(dir: &Path, path: &Path) -> Result<Option<std::fs::File>, LockError> {
    let untrusted = |reason: String| LockError::Untrusted {
        path: path.to_owned(),
        reason,
    };
    let io = |source| LockError::Io {
        path: path.to_owned(),
        source,
    };
    // A dangling link is not "no lock": someone put it there.
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io(error)),
        Ok(_) => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            untrusted("it is a link to a file that does not exist".into())
        } else {
            io(error)
        }
    })?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(untrusted(
            "it is not a regular file (a FIFO, device or directory)".into(),
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let us = rustix::process::geteuid().as_raw();
        if metadata.uid() != us && metadata.uid() != 0 {
            return Err(untrusted(format!(
                "it belongs to user {}, neither this user ({us}) nor root, who could approve \
                 any plugin with it",
                metadata.uid()
            )));
        }
        if metadata.mode() & 0o022 != 0 {
            return Err(untrusted(format!(
                "other users may write it (mode {:o}); run `chmod go-w` on it",
                metadata.mode() & 0o7777
            )));
        }
    }
    // Where the opened file really is: links are followed only where they stay in `dir`.
    let real = opened_path(&file, path).map_err(io)?;
    let root = dir.canonicalize().map_err(io)?;
    if !real.starts_with(&root) {
        return Err(untrusted(format!(
            "it leads to {}, outside the plugin directory; a lock file is a file of the \
             directory (a link may lead only to another place inside it)",
            real.display()
        )));
    }
    Ok(Some(file))
}

/// The real path of an open file: on Linux, of the descriptor itself (so a link swapped after
/// opening changes nothing); elsewhere, of the path.
fn opened_path(file: &std::fs::File, path: &Path) -> std::io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let _ = path;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        path.canonicalize()
    }
}

impl LockFile {
    /// The lock file of `dir`, if it has one.
    ///
    /// A lock file that is there but cannot be trusted (a link leaving the directory, someone
    /// else's, writable by others, not a regular file) is an error, not `None`.
    pub fn read(dir: &Path) -> Result<Option<Self>, LockError> {
        let path = dir.join(LOCK_FILE);
        let Some(file) = open_trusted(dir, &path)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        // The file may grow after it was checked: never read past the limit.
        file.take(MAX_LOCK_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| LockError::Io {
                path: path.clone(),
                source,
            })?;
        if bytes.len() as u64 > MAX_LOCK_BYTES {
            return Err(LockError::Invalid {
                path,
                message: format!("it is over {MAX_LOCK_BYTES} bytes"),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| LockError::Invalid {
            path: path.clone(),
            message: "it is not UTF-8 text".into(),
        })?;
        let lock: LockFile = toml::from_str(&text).map_err(|e| LockError::Invalid {
            path: path.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        // Version 2 (pulled plugins' provenance, the trust policy's pin) is checked apart.
        if let Err(message) = lock.check_version() {
            return Err(LockError::Invalid { path, message });
        }
        Ok(Some(lock))
    }

    /// The lock file of `dir`, which must have one: a missing lock is [`LockError::Missing`].
    pub fn read_required(dir: &Path) -> Result<Self, LockError> {
        Self::read(dir)?.ok_or_else(|| LockError::Missing {
            path: dir.join(LOCK_FILE),
        })
    }

    /// The lock of `plugins` (loaded from `dir`), sorted by file.
    pub fn of(dir: &Path, plugins: &[crate::LoadedPlugin]) -> Self {
        let mut plugins: Vec<LockedPlugin> = plugins
            .iter()
            .map(|plugin| LockedPlugin {
                file: relative_name(dir, plugin.path()),
                sha256: crate::digest::hex(plugin.sha256()),
                policy_sha256: plugin.policy_sha256().unwrap_or("none").to_owned(),
                dirs: grant_paths(plugin.policy()),
                tools: plugin.tool_names().into_iter().map(str::to_owned).collect(),
                imports: plugin.imports().to_vec(),
                source: None,
            })
            .collect();
        plugins.sort_by(|a, b| a.file.cmp(&b.file));
        Self {
            version: 1,
            trust_sha256: None,
            plugins,
        }
    }

    /// The file's text: stable order, one table per plugin, reviewable in a diff.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(&self.versioned()).unwrap_or_default();
        format!(
            "# The plugins approved for this directory, by the SHA-256 of each plugin and of its\n\
             # policy, and where its directory grants lead. A plugin that changed, or that is\n\
             # not listed here, is not loaded.\n\
             # Written by `llm-worker lock DIR`; review changes to it like changes to code.\n\n{body}"
        )
    }

    /// Writes the lock file of `dir`: to a temporary file created new in `dir` (never through
    /// a link), then renamed over the lock file, so that a reader sees the old or the new lock
    /// and a link planted under its name is replaced rather than written through.
    pub fn write(&self, dir: &Path) -> Result<(), LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let temporary = dir.join(format!(".{LOCK_FILE}.{}-{nonce}.tmp", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        // `create_new` fails on anything already there, a link included.
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
        let written = options.open(&temporary).and_then(|mut file| {
            file.write_all(self.to_toml().as_bytes())?;
            file.sync_all()
        });
        let renamed = written.and_then(|()| std::fs::rename(&temporary, &path));
        if let Err(error) = renamed {
            let _ = std::fs::remove_file(&temporary);
            return Err(io(error));
        }
        Ok(())
    }

    /// The entries by file.
    pub(crate) fn by_file(&self) -> BTreeMap<&str, &LockedPlugin> {
        self.plugins.iter().map(|p| (p.file.as_str(), p)).collect()
    }

    /// What differs between this lock (the approved one) and `now` (what the directory holds),
    /// one line each; empty when they agree.
    pub fn differences(&self, now: &LockFile) -> Vec<String> {
        let (old, new) = (self.by_file(), now.by_file());
        let mut lines = Vec::new();
        for (file, locked) in &old {
            match new.get(file) {
                None => lines.push(format!("{file}: locked, but gone")),
                Some(current) if current.sha256 != locked.sha256 => lines.push(format!(
                    "{file}: changed (sha256 {} in the lock, {} now)",
                    locked.sha256, current.sha256
                )),
                Some(current) if current.policy_sha256 != locked.policy_sha256 => {
                    lines.push(format!(
                        "{file}: its policy changed (sha256 {} in the lock, {} now)",
                        locked.policy_sha256, current.policy_sha256
                    ));
                }
                Some(current) if current.dirs != locked.dirs => lines.push(format!(
                    "{file}: {}",
                    grants_moved(&locked.dirs, &current.dirs)
                )),
                Some(_) => {}
            }
        }
        for file in new.keys() {
            if !old.contains_key(file) {
                lines.push(format!("{file}: not in the lock"));
            }
        }
        lines
    }
}

/// How a plugin pulled without a signature was let in: `llm-worker pull --allow-unsigned`, a
/// one-off exception of the operator's that loading does not question again.
pub const UNSIGNED_BY_FLAG: &str = "pull --allow-unsigned";
/// ... or a rule of the trust policy saying `unsigned = true`, which loading checks again.
pub const UNSIGNED_BY_POLICY: &str = "trust policy";

/// Where a pulled plugin came from and what `llm-worker pull` verified (lock version 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSource {
    /// The reference pulled, as given (`registry/repository:tag` or `…@sha256:…`).
    pub reference: String,
    /// `registry/repository`, which the trust policy's rules match.
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
    /// Why it was taken without a signature: [`UNSIGNED_BY_FLAG`] or [`UNSIGNED_BY_POLICY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsigned: Option<String>,
}

impl PluginSource {
    /// What was verified, in words: `signed by acme (sha256:…)` or `unsigned (…)`.
    pub fn verified(&self) -> String {
        match (&self.signer, &self.key, &self.unsigned) {
            (Some(signer), Some(key), _) => format!("signed by {signer} ({key})"),
            (_, _, Some(how)) => format!("unsigned, allowed by {how}"),
            _ => "nothing".to_owned(),
        }
    }

    /// Why the current trust policy (`None`: there is none) does not allow this plugin to load.
    fn refusal(&self, policy: Option<&crate::TrustPolicy>) -> Option<String> {
        use crate::trust::Requirement;
        let trust = crate::trust::TRUST_FILE;
        if self.unsigned.as_deref() == Some(UNSIGNED_BY_FLAG) {
            return None;
        }
        let repository = &self.repository;
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
            Requirement::Signed(keys) => {
                let names: Vec<&str> = keys.iter().map(|key| key.name.as_str()).collect();
                let trusted = keys
                    .iter()
                    .any(|key| Some(&key.fingerprint) == self.key.as_ref());
                match (&self.signer, &self.key) {
                    _ if trusted => None,
                    (Some(signer), Some(key)) => Some(format!(
                        "its signer '{signer}' ({key}) is no longer trusted for {repository} by \
                         {trust} (its rule accepts {}); remove the plugin, or pull a version \
                         signed by a trusted key with `llm-worker pull --update`",
                        names.join(", ")
                    )),
                    _ => Some(format!(
                        "it was pulled unsigned as the trust policy then allowed, and {trust} \
                         now wants {repository} signed by {}; remove the plugin, or pull a \
                         signed version with `llm-worker pull --update`",
                        names.join(", ")
                    )),
                }
            }
        }
    }
}

impl LockFile {
    /// Whether the lock needs version 2 (pulled plugins, a pinned trust policy).
    fn needs_version_2(&self) -> bool {
        self.trust_sha256.is_some() || self.plugins.iter().any(|p| p.source.is_some())
    }

    /// This lock with the lowest version that holds it (older readers keep reading plain
    /// directories' locks).
    fn versioned(&self) -> Self {
        let mut lock = self.clone();
        lock.version = if self.needs_version_2() { 2 } else { 1 };
        lock
    }

    /// Checks the version and what version 2 adds.
    fn check_version(&self) -> Result<(), String> {
        match self.version {
            1 if self.needs_version_2() => {
                return Err(
                    "it says version 1 but has `trust_sha256` or a `[plugin.source]`, which \
                     only version 2 has"
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
            let signed = source.signer.is_some() && source.key.is_some();
            let unsigned = matches!(
                source.unsigned.as_deref(),
                Some(UNSIGNED_BY_FLAG | UNSIGNED_BY_POLICY)
            );
            if signed == unsigned || source.signer.is_some() != source.key.is_some() {
                return Err(format!(
                    "{file}: its source names a `signer` and its `key`, or says `unsigned = \
                     \"{UNSIGNED_BY_FLAG}\"` (or \"{UNSIGNED_BY_POLICY}\"), not both"
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
        let policy = match crate::TrustPolicy::read(dir) {
            Ok(policy) => policy,
            Err(error) => {
                let reason = format!("it was pulled from a registry, and {error}");
                return pulled
                    .into_iter()
                    .filter(|(_, source)| source.unsigned.as_deref() != Some(UNSIGNED_BY_FLAG))
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
        pulled
            .into_iter()
            .filter_map(|(file, source)| {
                let reason = source.refusal(policy.as_ref()).or_else(|| {
                    (source.unsigned.as_deref() != Some(UNSIGNED_BY_FLAG))
                        .then(|| pin.clone())
                        .flatten()
                })?;
                Some((file.to_owned(), reason))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pulled(unsigned: Option<&str>) -> LockFile {
        let sha = "ab".repeat(32);
        LockFile {
            version: 2,
            trust_sha256: None,
            plugins: vec![LockedPlugin {
                file: "greet.wasm".into(),
                sha256: sha.clone(),
                policy_sha256: "none".into(),
                dirs: Vec::new(),
                tools: vec!["greet".into()],
                imports: Vec::new(),
                source: Some(PluginSource {
                    reference: "r.example/acme/greet:1".into(),
                    repository: "r.example/acme/greet".into(),
                    manifest: format!("sha256:{}", "cd".repeat(32)),
                    layer: format!("sha256:{sha}"),
                    signer: unsigned.is_none().then(|| "acme".into()),
                    key: unsigned
                        .is_none()
                        .then(|| format!("sha256:{}", "ef".repeat(32))),
                    unsigned: unsigned.map(str::to_owned),
                }),
            }],
        }
    }

    #[test]
    fn version_2_is_written_only_when_needed_and_checked_when_read() {
        let lock = pulled(None);
        let text = lock.to_toml();
        assert!(
            text.contains("version = 2") && text.contains("[plugin.source]"),
            "{text}"
        );
        let read: LockFile = toml::from_str(&text).expect("toml");
        assert_eq!(read.check_version(), Ok(()));
        assert_eq!(read.plugins, lock.plugins);

        let mut plain = lock.clone();
        plain.plugins[0].source = None;
        assert!(plain.to_toml().contains("version = 1"));

        let mut old = read.clone();
        old.version = 1;
        assert!(old.check_version().is_err(), "version 1 has no sources");
        let mut future = read.clone();
        future.version = 3;
        assert!(future.check_version().expect_err("3").contains("1 and 2"));
        let mut moved = read.clone();
        moved.plugins[0].sha256 = "00".repeat(32);
        assert!(
            moved
                .check_version()
                .expect_err("layer")
                .contains("same bytes")
        );
        let mut both = pulled(Some(UNSIGNED_BY_FLAG));
        assert_eq!(both.check_version(), Ok(()));
        if let Some(source) = &mut both.plugins[0].source {
            source.signer = Some("acme".into());
            source.key = Some("sha256:00".into());
        }
        assert!(both.check_version().is_err(), "signed and unsigned at once");
    }

    #[test]
    fn a_one_off_unsigned_pull_needs_no_trust_policy_and_a_signed_one_does() {
        let dir = std::env::temp_dir().join(format!("llm-worker-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert!(
            pulled(Some(UNSIGNED_BY_FLAG))
                .source_refusals(&dir)
                .is_empty()
        );
        let refusals = pulled(None).source_refusals(&dir);
        assert!(refusals["greet.wasm"].contains("is gone"), "{refusals:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
