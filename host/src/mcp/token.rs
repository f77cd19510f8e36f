//! The bearer token of a local HTTP server, generated once and kept where only the user can
//! read it, so that clients configured with it keep working across restarts (as Jupyter does).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::McpError;

/// Bytes of randomness in a generated token (256 bits, written as 64 hex digits).
const TOKEN_BYTES: usize = 32;

/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 64 << 10;

/// Where [`persistent_token`] keeps the user's token by default:
/// `$XDG_STATE_HOME/llm-worker/http-token`, else `$HOME/.local/state/llm-worker/http-token`;
/// `None` when neither is set.
pub fn default_token_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local").join("state"))
        })?;
    Some(base.join("llm-worker").join("http-token"))
}

/// The token kept in `path`, created there (a random 256-bit token, mode 0600, in a directory
/// created with mode 0700) if the file does not exist yet.
///
/// The file is used only if it is a regular file of this user that no one else may read or
/// write (it admits callers to every tool), read without following a link; otherwise this is an
/// error saying what to fix, never a silently weaker token.
pub fn persistent_token(path: &Path) -> Result<String, McpError> {
    let error = |reason: String| McpError::TokenFile {
        path: path.to_owned(),
        reason,
    };
    match read_private(path) {
        Ok(Some(token)) => return Ok(token),
        Ok(None) => {}
        Err(reason) => return Err(error(reason)),
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(parent)
            .map_err(|e| error(format!("cannot create its directory: {e}")))?;
    }
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| error(format!("the system gave no random bytes: {e}")))?;
    let token = crate::digest::hex(&bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| error(format!("cannot write it: {e}")))?;
            Ok(token)
        }
        // Another server started at the same moment wrote it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_private(path)
            .map_err(error)?
            .ok_or_else(|| error("it vanished while it was being created".into())),
        Err(e) => Err(error(format!("cannot create it: {e}"))),
    }
}

/// The token in `path`, if the file exists and is private to this user.
fn read_private(path: &Path) -> Result<Option<String>, String> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK,
    );
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open it ({e}); is it a link?")),
    };
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    if !metadata.is_file() {
        return Err("it is not a regular file".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let us = rustix::process::geteuid().as_raw();
        if metadata.uid() != us {
            return Err(format!(
                "it belongs to user {}, not to this user ({us})",
                metadata.uid()
            ));
        }
        if metadata.mode() & 0o077 != 0 {
            return Err(format!(
                "other users may read or write it (mode {:o}); run `chmod 600` on it",
                metadata.mode() & 0o7777
            ));
        }
    }
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let token = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .ok_or("it holds no token; delete it to have a new one generated")?;
    Ok(Some(token.to_owned()))
}
