//! Opening a lock file only if it can be trusted: a regular file of this user or root that no
//! one else may write, reached by no link that leaves the plugin directory.

use std::path::Path;

use super::LockError;

/// Opens the lock file at `path` (in `dir`) for reading if it can be trusted: a regular file
/// (never blocking on a FIFO), owned by this user or root, writable by no one else, — when
/// reached through links — still inside `dir`, and in a directory no one else can replace it
/// in ([`crate::file::no_one_else_can_replace`]). `Ok(None)` if there is none.
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
        if crate::file::others_may_write(path, &metadata) {
            return Err(untrusted(format!(
                "other users may write it (mode {:o}); run `chmod go-w` on it",
                metadata.mode() & 0o7777
            )));
        }
    }
    // Where the opened file really is: links are followed only where they stay in `dir`.
    let real = crate::file::opened_path(&file, path).map_err(io)?;
    let root = dir.canonicalize().map_err(io)?;
    if !real.starts_with(&root) {
        return Err(untrusted(format!(
            "it leads to {}, outside the plugin directory; a lock file is a file of the \
             directory (a link may lead only to another place inside it)",
            real.display()
        )));
    }
    // And no one else can replace it: a directory on its way (where it really is, and the
    // plugin directory as given, through whatever links lead to it) that others may write lets
    // them swap in another file (an older lock of the operator's, approving a vulnerable
    // version) or delete it.
    if let Some(parent) = real.parent() {
        crate::file::no_one_else_can_replace(parent, "its directory").map_err(untrusted)?;
    }
    if let Some(problem) = directory_problem(dir) {
        return Err(untrusted(problem));
    }
    Ok(Some(file))
}

/// Why files in `dir` (as given, and where it really is) could be replaced by another user,
/// if they could: a lock, trust or access policy there would protect nothing.
pub(crate) fn directory_problem(dir: &Path) -> Option<String> {
    // A directory that cannot be resolved cannot be checked: refused, saying why.
    let resolved = |path: std::io::Result<std::path::PathBuf>| {
        path.map_err(|e| format!("its directory {} cannot be resolved: {e}", dir.display()))
    };
    resolved(std::path::absolute(dir))
        .and_then(|given| {
            crate::file::no_one_else_can_replace(
                &given,
                &format!("its directory {}", given.display()),
            )
        })
        .and_then(|()| resolved(dir.canonicalize()))
        .and_then(|real| {
            crate::file::no_one_else_can_replace(
                &real,
                &format!("its directory {}", real.display()),
            )
        })
        .err()
}
