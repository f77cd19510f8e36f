//! The compiled cache: precompiled components on disk, so that a second start compiles nothing.
//!
//! Loading an entry runs native code that wasmtime produced earlier, so the cache must only
//! ever hold what this user's host compiled, from the very bytes being loaded:
//!
//! - the directory is created private to the user (0700); a directory that another user owns
//!   or that others can write, or below a directory that someone else could replace, is not
//!   used at all (plugins are compiled instead, and the host says why once);
//! - each entry must be a regular file owned by the user and writable by no one else, opened
//!   without following links;
//! - each entry names the SHA-256 of the plugin it was compiled from and is used only for a
//!   plugin with that hash (so a legitimate entry renamed to another plugin's name is refused);
//! - entries are written to a temporary file created new, without following links, then
//!   renamed into place; a damaged or stale entry is recompiled, never trusted.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components are kept.
#[derive(Debug)]
pub(crate) struct CompileCache {
    dir: PathBuf,
    /// Whether the host already said why the directory is not used.
    warned: AtomicBool,
}

/// Entries start with this, then the SHA-256 of the plugin they were compiled from, then the
/// XXH3-128 checksum of that hash and the body, then the body (wasmtime's serialized form).
///
/// The checksum guards against damage (a torn write, a bad disk), not against an attacker:
/// anyone who could write an entry could write a matching checksum too. What keeps attackers
/// out is that only the user can write the directory and its entries (checked before every
/// read), and the hash binds an entry to one plugin's bytes.
const MAGIC: &[u8; 8] = b"llmwc003";
const HASH_BYTES: usize = 32;
const CHECKSUM_BYTES: usize = 16;

/// The checksum stored in an entry, over the plugin's hash and the body.
fn checksum(hash: &[u8], body: &[u8]) -> [u8; CHECKSUM_BYTES] {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(hash);
    hasher.update(body);
    hasher.digest128().to_le_bytes()
}

/// The entry in `dir` of a component whose bytes hash to `hash`, for this engine.
fn entry_path(dir: &Path, engine: &Engine, hash: &[u8]) -> PathBuf {
    let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
    engine
        .precompile_compatibility_hash()
        .hash(&mut engine_hash);
    dir.join(format!(
        "{}-{:016x}.cwasm",
        crate::digest::hex(hash),
        engine_hash.finish()
    ))
}

impl CompileCache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            warned: AtomicBool::new(false),
        }
    }

    /// The directory as configured.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The component from the cache, or compiled (and stored) if the entry is missing, stale
    /// or damaged, or the directory cannot be trusted; `hash` is the SHA-256 of `bytes`.
    /// Returns whether it came from the cache.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
        hash: &[u8; 32],
        path: &Path,
    ) -> wasmtime::Result<(Component, bool)> {
        let dir = match self.prepare_dir() {
            Ok(dir) => dir,
            Err(reason) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "not using the compiled cache {}: {reason}; plugins are compiled at \
                         every start",
                        self.dir.display()
                    );
                }
                return Ok((Component::new(engine, bytes)?, false));
            }
        };
        let entry = entry_path(&dir, engine, hash);
        if let Some(component) = self.read(engine, &entry, hash, path) {
            tracing::debug!(plugin = %path.display(), entry = %entry.display(), "compiled cache hit");
            return Ok((component, true));
        }
        let component = Component::new(engine, bytes)?;
        match component.serialize() {
            Ok(compiled) => match self.write(&entry, hash, &compiled) {
                Ok(()) => {
                    tracing::info!(plugin = %path.display(), entry = %entry.display(), "compiled and cached");
                }
                Err(error) => tracing::warn!(
                    "cannot write the compiled cache entry {}: {error}; continuing without it",
                    entry.display()
                ),
            },
            Err(error) => tracing::warn!("cannot serialize {}: {error}", path.display()),
        }
        Ok((component, false))
    }

    /// Creates the directory (private to the user) if it is missing, and checks that only the
    /// user can change what it holds: the directory itself is the user's and writable by no one
    /// else, and so is every directory above it, except that root may own them and a shared
    /// one (like `/tmp`) must have the sticky bit. Returns its path with links resolved: the
    /// path entries are then read and written through.
    pub(crate) fn prepare_dir(&self) -> Result<PathBuf, String> {
        // Nothing is made through another user's link (`--cache-dir /tmp/c`, made a link to
        // a place of ours beforehand).
        let given =
            std::path::absolute(&self.dir).map_err(|e| format!("it cannot be resolved: {e}"))?;
        crate::file::links_on_the_way_are_ours(&given)?;
        // Made a directory at a time from `/`: another user's link (or one in a directory
        // others may change) planted on the way after that check is refused, not followed.
        crate::file::create_dir_all_through_own_links(&given, 0o700)
            .map_err(|e| format!("it cannot be created: {e}"))?;
        // The path as given, links and all (another user's link on the way could lead
        // elsewhere at the next load), then where it leads now.
        crate::file::no_one_else_can_replace(&given, "it")?;
        let dir = self
            .dir
            .canonicalize()
            .map_err(|e| format!("it cannot be resolved: {e}"))?;
        let metadata = std::fs::metadata(&dir).map_err(|e| format!("it cannot be read: {e}"))?;
        if !metadata.is_dir() {
            return Err("it is not a directory".into());
        }
        only_ours(&metadata, "it")?;
        crate::file::no_one_else_can_replace(&dir, "it")?;
        Ok(dir)
    }

    fn read(&self, engine: &Engine, entry: &Path, hash: &[u8], path: &Path) -> Option<Component> {
        let data = match read_private_file(entry) {
            Ok(Some(data)) => data,
            Ok(None) => return None,
            Err(reason) => {
                tracing::warn!(
                    plugin = %path.display(),
                    "not using the compiled cache entry {}: {reason}; recompiling",
                    entry.display()
                );
                return None;
            }
        };
        let checked = data
            .strip_prefix(MAGIC.as_slice())
            .and_then(|rest| rest.split_at_checked(HASH_BYTES))
            .and_then(|(stored_hash, rest)| {
                let (sum, body) = rest.split_at_checked(CHECKSUM_BYTES)?;
                (checksum(stored_hash, body).as_slice() == sum).then_some((stored_hash, body))
            });
        let Some((stored_hash, body)) = checked else {
            tracing::warn!(
                plugin = %path.display(),
                "the compiled cache entry {} is damaged; recompiling",
                entry.display()
            );
            return None;
        };
        if stored_hash != hash {
            tracing::warn!(
                plugin = %path.display(),
                "the compiled cache entry {} was compiled from another plugin; recompiling",
                entry.display()
            );
            return None;
        }
        // SAFETY: `Component::deserialize` requires bytes produced by `Component::serialize` of
        // a compatible engine. The entry is ours: a regular file owned by this user and
        // writable by no one else, in a directory only this user can write (both checked
        // above), written by `write` below for a plugin with exactly these bytes (the hash),
        // and undamaged (the checksum). wasmtime checks the version and configuration again
        // and refuses a mismatch with an error, which we treat as a miss.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, body) };
        match component {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(
                    plugin = %path.display(),
                    "the compiled cache entry {} is stale ({error}); recompiling",
                    entry.display()
                );
                None
            }
        }
    }

    /// Writes an entry atomically: a new temporary file in the same directory (created new,
    /// readable by the user only, not through a link), then a rename.
    fn write(&self, entry: &Path, hash: &[u8], compiled: &[u8]) -> std::io::Result<()> {
        crate::file::write_atomically(entry, 0o600, |file| {
            file.write_all(MAGIC)?;
            file.write_all(hash)?;
            file.write_all(&checksum(hash, compiled))?;
            file.write_all(compiled)
        })
    }
}

/// Reads a cache entry: `None` if there is none; an error if it is not a regular file that only
/// this user can write.
fn read_private_file(entry: &Path) -> Result<Option<Vec<u8>>, String> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link, and never block on a FIFO planted under an entry's name.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let mut file = match options.open(entry) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("it cannot be opened ({error}); is it a link?")),
    };
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    if !metadata.is_file() {
        return Err("it is not a regular file".into());
    }
    only_ours(&metadata, "it")?;
    let mut data = Vec::new();
    file.read_to_end(&mut data).map_err(|e| e.to_string())?;
    Ok(Some(data))
}

/// Checks that a file or directory belongs to this user and that no one else may write it.
#[cfg(unix)]
fn only_ours(metadata: &std::fs::Metadata, what: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let us = rustix::process::geteuid().as_raw();
    if metadata.uid() != us {
        return Err(format!(
            "{what} belongs to user {}, not to this user ({us})",
            metadata.uid()
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(format!(
            "{what} may be written by other users (mode {:o}); run `chmod go-w` on it or \
             choose another directory",
            metadata.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Elsewhere, ownership is not checked (see SECURITY.md).
#[cfg(not(unix))]
fn only_ours(_metadata: &std::fs::Metadata, _what: &str) -> Result<(), String> {
    Ok(())
}
