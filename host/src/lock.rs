//! The lock file of a plugin directory (`llm-worker.lock`): which plugins were reviewed and
//! approved, by the SHA-256 of their bytes and of their policy. A directory with a lock file
//! loads only those plugins, unchanged.

use std::collections::BTreeMap;
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
}

/// The SHA-256 of `bytes`, in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

impl LockFile {
    /// The lock file of `dir`, if it has one.
    pub fn read(dir: &Path) -> Result<Option<Self>, LockError> {
        let path = dir.join(LOCK_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = crate::file::read_regular_file(&path, MAX_LOCK_BYTES).map_err(|error| {
            let source = match error {
                crate::file::ReadError::Io(error) => error,
                crate::file::ReadError::NotAFile => {
                    std::io::Error::other("it is not a regular file")
                }
                crate::file::ReadError::TooLarge(size) => {
                    std::io::Error::other(format!("it is {size} bytes, over {MAX_LOCK_BYTES}"))
                }
            };
            LockError::Io {
                path: path.clone(),
                source,
            }
        })?;
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

    /// The lock of `plugins` (loaded from `dir`), sorted by file.
    pub fn of(dir: &Path, plugins: &[crate::LoadedPlugin]) -> Self {
        let mut plugins: Vec<LockedPlugin> = plugins
            .iter()
            .map(|plugin| LockedPlugin {
                file: relative_name(dir, plugin.path()),
                sha256: plugin.sha256().iter().map(|b| format!("{b:02x}")).collect(),
                policy_sha256: plugin.policy_sha256().unwrap_or("none").to_owned(),
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
             # policy. A plugin that changed, or that is not listed here, is not loaded.\n\
             # Written by `llm-worker lock DIR`; review changes to it like changes to code.\n\n{body}"
        )
    }

    /// Writes the lock file of `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), LockError> {
        let path = dir.join(LOCK_FILE);
        std::fs::write(&path, self.to_toml()).map_err(|source| LockError::Io { path, source })
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
