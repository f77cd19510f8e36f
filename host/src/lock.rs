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
}

/// The contents of a lock file, plugins in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// The format's version (1).
    pub version: u32,
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
fn open_trusted(dir: &Path, path: &Path) -> Result<Option<std::fs::File>, LockError> {
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
        if lock.version != 1 {
            return Err(LockError::Invalid {
                path,
                message: format!(
                    "its version is {}; this llm-worker reads version 1",
                    lock.version
                ),
            });
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
            })
            .collect();
        plugins.sort_by(|a, b| a.file.cmp(&b.file));
        Self {
            version: 1,
            plugins,
        }
    }

    /// The file's text: stable order, one table per plugin, reviewable in a diff.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).unwrap_or_default();
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
