//! The compiled cache: precompiled components on disk, keyed by the file's content hash and the
//! engine's compatibility hash, written atomically, checked before use — a stale or corrupt
//! entry is recompiled, never trusted.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub(crate) struct CompileCache {
    dir: PathBuf,
}

/// Entries start with this, then the XXH3-128 checksum of the rest.
///
/// The checksum only guards against damage (a torn write, a bad disk): anyone who can write
/// the cache directory can write a matching checksum too, so a cryptographic hash would buy
/// nothing here, and XXH3 reads the multi-megabyte entry ~20× faster than SHA-256 (which was
/// most of a cache hit). The entry's *name* is the SHA-256 of the plugin file: that one must
/// resist collisions, or a crafted plugin could pass for a cached one.
const MAGIC: &[u8; 8] = b"llmwc002";

/// The checksum stored in an entry.
fn checksum(body: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(body).to_le_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl CompileCache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The entry of a component with these bytes, for this engine.
    fn entry(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
        engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        let content = Sha256::digest(bytes);
        self.dir.join(format!(
            "{}-{:016x}.cwasm",
            hex(&content),
            engine_hash.finish()
        ))
    }

    /// The component from the cache, or compiled (and stored) if the entry is missing, stale
    /// or damaged. Returns whether it came from the cache.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
        path: &Path,
    ) -> wasmtime::Result<(Component, bool)> {
        let entry = self.entry(engine, bytes);
        if let Some(component) = self.read(engine, &entry, path) {
            tracing::debug!(plugin = %path.display(), entry = %entry.display(), "compiled cache hit");
            return Ok((component, true));
        }
        let component = Component::new(engine, bytes)?;
        match component.serialize() {
            Ok(compiled) => {
                if let Err(error) = self.write(&entry, &compiled) {
                    tracing::warn!(
                        "cannot write the compiled cache entry {}: {error}; continuing without it",
                        entry.display()
                    );
                } else {
                    tracing::info!(plugin = %path.display(), entry = %entry.display(), "compiled and cached");
                }
            }
            Err(error) => tracing::warn!("cannot serialize {}: {error}", path.display()),
        }
        Ok((component, false))
    }

    fn read(&self, engine: &Engine, entry: &Path, path: &Path) -> Option<Component> {
        let data = std::fs::read(entry).ok()?;
        let checked = data
            .strip_prefix(MAGIC.as_slice())
            .and_then(|rest| rest.split_at_checked(16))
            .filter(|(sum, body)| checksum(body).as_slice() == *sum);
        let Some((_, body)) = checked else {
            tracing::warn!(
                plugin = %path.display(),
                "the compiled cache entry {} is damaged; recompiling",
                entry.display()
            );
            return None;
        };
        // SAFETY: `Component::deserialize` requires bytes produced by `Component::serialize` of
        // a compatible engine. The entry is ours: written by `write` below with the checksum of
        // exactly these bytes (checked above, so a damaged or foreign file is never used), and
        // its name carries the engine's compatibility hash; wasmtime checks the version and
        // configuration again and refuses a mismatch with an error, which we treat as a miss.
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

    /// Writes an entry atomically: a temporary file in the same directory, then a rename.
    fn write(&self, entry: &Path, compiled: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let temporary = entry.with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(MAGIC)?;
        file.write_all(&checksum(compiled))?;
        file.write_all(compiled)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, entry).inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })
    }
}
