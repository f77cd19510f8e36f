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

mod approval;
mod file;
mod source;
#[cfg(test)]
mod tests;
mod trusted;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[cfg(feature = "mcp-http")]
pub(crate) use source::MAX_ACCESS_BYTES;
pub use source::{ACCESS_FILE, PluginSource, Unsigned};
pub(crate) use trusted::{directory_problem, open_trusted};

/// The lock file's name, in the plugin directory.
pub const LOCK_FILE: &str = "llm-worker.lock";

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
    /// Its tools: what the reviewer approved, and what it must offer when it is loaded (a
    /// plugin listing other tools than it did, at another time or at random, is not approved:
    /// a tool of a new name would get the plugin's grants without a `[tools.NAME]` narrowing
    /// the operator wrote for it).
    pub tools: Vec<String>,
    /// What it offers besides tools (contract 0.3.0 and later), one line each:
    /// `resource URI`, `resource template TEMPLATE`, `prompt NAME`. As for tools, a plugin
    /// offering other resources, templates or prompts than approved is not approved (a
    /// resource or prompt that appears later could take another plugin's name, and the clash
    /// take both plugins offline). A lock written before this was recorded approves none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offers: Vec<String>,
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
    /// The SHA-256 of the directory's trust policy ([`crate::trust::TRUST_FILE`]) when it was locked
    /// (version 2): a trust policy changed since is not used until it is approved again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_sha256: Option<String>,
    /// The SHA-256 of the directory's access policy (`llm-worker.access.toml`: which
    /// identities of an HTTP server may use which tools) when it was locked (version 2): a
    /// policy changed since is not used, and the server does not start, until it is approved
    /// again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_sha256: Option<String>,
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
        "the lock file {} is invalid: {message}; fix it (or restore it from version control), \
         or review every plugin and approve the directory anew with `llm-worker lock \
         --replace-unreadable DIR`",
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
         is fixed. Someone else may have changed it and the plugins: restore both from version \
         control, or review every plugin and approve the directory anew with `llm-worker lock \
         --replace-unreadable DIR`",
        path.display()
    )]
    Untrusted {
        /// The lock file.
        path: PathBuf,
        /// Why it is not trusted.
        reason: String,
    },
    /// The directory must be locked (`--locked`, [`crate::LoadDirOptions::locked`], a trust
    /// policy beside its plugins, or it was locked when serving started), and its lock file is
    /// gone.
    #[error(
        "the lock file {} is missing, and this directory must be locked (by --locked, by the \
         trust policy beside its plugins, or because it was locked when serving started): \
         nothing in it is loaded; restore the lock file (from version control: it records \
         where pulled plugins came from and who signed them), or review the plugins and \
         approve them as they are now with `llm-worker lock DIR`",
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
