//! Reading, writing and comparing lock files: the lock of loaded plugins, its TOML text, the
//! atomic write, and the differences between an approved lock and the directory now.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use super::approval::{grants_moved, names_moved};
use super::{
    LOCK_FILE, LockError, LockFile, LockedPlugin, grant_paths, open_trusted, relative_name,
};

/// Largest lock file read.
const MAX_LOCK_BYTES: u64 = 4 << 20;

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
        // A file is approved once: with two entries, what was reviewed and what is enforced
        // could differ (readers taking the first and readers taking the last).
        let mut files = std::collections::HashSet::new();
        if let Some(file) = lock
            .plugins
            .iter()
            .map(|plugin| plugin.file.as_str())
            .find(|file| !files.insert(*file))
        {
            return Err(LockError::Invalid {
                path,
                message: format!(
                    "{file} has more than one entry (a merge of two locks?); keep the one you \
                     reviewed"
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
                offers: plugin.offers(),
                imports: plugin.imports().to_vec(),
                source: None,
            })
            .collect();
        plugins.sort_by(|a, b| a.file.cmp(&b.file));
        Self {
            version: 1,
            trust_sha256: None,
            access_sha256: None,
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
        // A lock that would not be trusted when read is not written.
        if let Some(reason) = Self::unsafe_directory(dir) {
            return Err(LockError::Untrusted { path, reason });
        }
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        crate::file::write_atomically(&path, 0o644, |file| {
            file.write_all(self.to_toml().as_bytes())
        })
        .map_err(io)?;
        Ok(())
    }

    /// Why a lock in `dir` would protect nothing — another user could replace it or put one
    /// there first (`dir` may be written by others, or a directory on the way to it may be and
    /// is not sticky, or is theirs) — if so. Loading refuses such a lock, and [`Self::write`] does not write one.
    pub fn unsafe_directory(dir: &Path) -> Option<String> {
        super::directory_problem(dir)
    }

    /// Why another user could change the file at `path` (links followed), if they could: a
    /// link on its way or the file not this user's or root's, or in a directory others may
    /// write, or writable by others.
    pub fn unsafe_file(path: &Path) -> Option<String> {
        crate::file::file_problem(path)
    }

    /// Why another user could change what is built from the source tree `dir` (a crate that
    /// build scripts and procedural macros run from), if they could: `dir` and the directories
    /// on the way to it as [`Self::unsafe_directory`], and every file and directory below it
    /// but its build output (`dir/target`) and hidden ones (`.git`): each this user's or
    /// root's, in a directory no one else may write. A link to a directory in it is refused
    /// (it is not walked). At most 10,000 entries are looked at; a larger tree is refused,
    /// saying so.
    pub fn unsafe_tree(dir: &Path) -> Option<String> {
        const MAX_ENTRIES: usize = 10_000;
        if let Some(problem) = super::directory_problem(dir) {
            return Some(problem);
        }
        let mut pending = vec![(dir.to_owned(), 0)];
        let mut seen = 0;
        while let Some((at, depth)) = pending.pop() {
            let entries = match std::fs::read_dir(&at) {
                Ok(entries) => entries,
                Err(e) => return Some(format!("{} cannot be read: {e}", at.display())),
            };
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => return Some(format!("{} cannot be read: {e}", at.display())),
                };
                seen += 1;
                if seen > MAX_ENTRIES {
                    return Some(format!(
                        "{} holds more than {MAX_ENTRIES} entries, too many to check",
                        dir.display()
                    ));
                }
                let name = entry.file_name();
                if name.to_string_lossy().starts_with('.') || (depth == 0 && name == "target") {
                    continue;
                }
                let path = entry.path();
                if entry.file_type().is_ok_and(|kind| kind.is_symlink()) && path.is_dir() {
                    return Some(format!(
                        "{} is a link to a directory, which is not checked; replace it with \
                         the directory itself",
                        path.display()
                    ));
                }
                // Each entry's own owner and mode, and that its directory cannot be replaced.
                if let Some(problem) = crate::file::file_problem(&path) {
                    return Some(problem);
                }
                // Directories are walked where they are, not through links (a link's target
                // was checked as a file's would be, and is not entered).
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    if let Some(problem) = super::directory_problem(&path) {
                        return Some(problem);
                    }
                    pending.push((path, depth + 1));
                }
            }
        }
        None
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
                // The same file offering other tools (it lists them differently at another
                // time): the lock approves names, which `[tools.NAME]` narrowings rely on.
                Some(current) => {
                    if let Some(moved) = names_moved(&locked.tools, &current.tools) {
                        lines.push(format!("{file}: its tools changed ({moved})"));
                    }
                    if let Some(moved) = names_moved(&locked.offers, &current.offers) {
                        lines.push(format!(
                            "{file}: its resources, templates or prompts changed ({moved})"
                        ));
                    }
                }
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
