//! The memory file: where it is, reading it, and changing it safely while other sessions (each
//! its own instance, maybe in another process) change it too.
//!
//! A change holds the lock file `FILE.lock`, created with create-new semantics (so one holder
//! at a time), re-reads the file under it, writes the new graph to a fresh temporary file
//! beside it and renames that over the file. Readers take no lock: a rename replaces the file
//! whole, so they see the old graph or the new one, never part of one. A lock older than
//! [`STALE_LOCK`] was left by a holder that died (a call cut short): it is taken over.

use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::graph::Graph;

/// Where the plugin sees its granted directory (the policy's `dirs[].guest`).
pub const GRANT: &str = "/memory";
/// The file's name in [`GRANT`] when `MEMORY_FILE_PATH` is not set.
pub const DEFAULT_FILE: &str = "memory.jsonl";
/// The largest memory file read or written, unless `MEMORY_FILE_MAX_BYTES` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// How long a change waits for another session's lock before it gives up.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);
/// A lock file older than this was left behind, and is taken over.
pub const STALE_LOCK: Duration = Duration::from_secs(30);

/// The memory file and its limit.
#[derive(Clone, Debug)]
pub struct Store {
    path: PathBuf,
    max_bytes: u64,
    /// How long a change waits for another session's lock ([`LOCK_WAIT`]).
    lock_wait: Duration,
}

impl Store {
    /// The memory file at `path`, of at most `max_bytes`.
    #[must_use]
    pub fn new(path: PathBuf, max_bytes: u64) -> Self {
        Self {
            path,
            max_bytes,
            lock_wait: LOCK_WAIT,
        }
    }

    /// The same store, waiting `lock_wait` for another session's lock instead of
    /// [`LOCK_WAIT`].
    #[must_use]
    pub fn lock_wait(self, lock_wait: Duration) -> Self {
        Self { lock_wait, ..self }
    }

    /// The store the environment names: `MEMORY_FILE_PATH` (absolute, or relative to
    /// [`GRANT`]; unset or empty: [`DEFAULT_FILE`] in it) and `MEMORY_FILE_MAX_BYTES`.
    ///
    /// # Errors
    /// A path outside [`GRANT`] (or with `..` in it), or a limit that is not a positive whole
    /// number.
    pub fn from_env() -> Result<Self, String> {
        let setting = std::env::var("MEMORY_FILE_PATH").unwrap_or_default();
        let path = if setting.is_empty() {
            Path::new(GRANT).join(DEFAULT_FILE)
        } else {
            Path::new(GRANT).join(&setting)
        };
        // The sandbox would refuse anything else anyway; saying so here is clearer than a
        // file that is not found.
        let inside = path.strip_prefix(GRANT).is_ok_and(|rest| {
            rest.components()
                .all(|part| matches!(part, std::path::Component::Normal(_)))
                && rest.file_name().is_some()
        });
        if !inside {
            return Err(format!(
                "MEMORY_FILE_PATH is {setting:?}, which is not a file inside the directory the \
                 plugin is granted ({GRANT}); give a file name relative to it, or an absolute \
                 path inside it, in the plugin's policy ([env] set)"
            ));
        }
        let max_bytes = match std::env::var("MEMORY_FILE_MAX_BYTES") {
            Err(_) => DEFAULT_MAX_BYTES,
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!(
                        "MEMORY_FILE_MAX_BYTES is {text:?}; give the memory file's largest size \
                     in bytes, a whole number above 0, in the plugin's policy ([env] set)"
                    )
                })?,
        };
        Ok(Self::new(path, max_bytes))
    }

    /// The memory file's path, as the plugin sees it.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The graph as the file holds it now; no file is an empty graph.
    ///
    /// # Errors
    /// A file that cannot be read, is too large or is not a memory file.
    pub fn load(&self) -> Result<Graph, String> {
        let text = match self.read()? {
            Some(text) => text,
            None => return Ok(Graph::default()),
        };
        let graph = Graph::parse(&text).map_err(|problem| {
            format!(
                "the memory file {} is damaged: {problem}; fix or remove that line (nothing was \
                 changed)",
                self.path.display()
            )
        })?;
        if graph.items() > crate::graph::MAX_ITEMS {
            return Err(format!(
                "the memory file {} holds {} entities, relations and observations, more than \
                 the {} this plugin reads; delete some with another tool, or use another file",
                self.path.display(),
                graph.items(),
                crate::graph::MAX_ITEMS
            ));
        }
        Ok(graph)
    }

    /// Changes the graph with `change`, under the lock, and saves it: `change` sees the file
    /// as it is now, whatever other sessions saved before. When `change` fails nothing is
    /// written.
    ///
    /// # Errors
    /// `change`'s error; or the lock, the file or its limit's.
    pub fn update<T>(
        &self,
        change: impl FnOnce(&mut Graph) -> Result<T, String>,
    ) -> Result<T, String> {
        let lock = Lock::acquire(lock_path(&self.path), &self.path, self.lock_wait)?;
        let mut graph = self.load()?;
        let answer = change(&mut graph)?;
        if graph.items() > crate::graph::MAX_ITEMS {
            return Err(format!(
                "the change would make the memory graph hold {} entities, relations and \
                 observations, over the {} this plugin keeps; delete some first; nothing was \
                 changed",
                graph.items(),
                crate::graph::MAX_ITEMS
            ));
        }
        let text = graph.to_jsonl();
        let size = u64::try_from(text.len()).unwrap_or(u64::MAX);
        if size > self.max_bytes {
            return Err(format!(
                "the change would make the memory file {} {size} bytes, over its limit of {} \
                 bytes; delete entities, relations or observations first, or raise the limit \
                 (MEMORY_FILE_MAX_BYTES in the plugin's policy); nothing was changed",
                self.path.display(),
                self.max_bytes
            ));
        }
        self.write(&text, &lock)?;
        Ok(answer)
    }

    /// The file's text, or `None` if there is no file.
    fn read(&self) -> Result<Option<String>, String> {
        let cannot = |error: io::Error| {
            format!(
                "cannot read the memory file {}: {error}; it must be a file in the directory \
                 the plugin's policy grants ({GRANT}), not a link out of it",
                self.path.display()
            )
        };
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(cannot(error)),
        };
        let metadata = file.metadata().map_err(cannot)?;
        if !metadata.is_file() {
            return Err(format!(
                "the memory file {} is not a regular file; point MEMORY_FILE_PATH at a file",
                self.path.display()
            ));
        }
        let too_large = |size: u64| {
            format!(
                "the memory file {} is {size} bytes, over the limit of {} bytes; raise the \
                 limit (MEMORY_FILE_MAX_BYTES in the plugin's policy) or use another file",
                self.path.display(),
                self.max_bytes
            )
        };
        if metadata.len() > self.max_bytes {
            return Err(too_large(metadata.len()));
        }
        // Read at most one byte past the limit, in case the file grew since.
        let mut bytes = Vec::new();
        file.take(self.max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > self.max_bytes {
            return Err(too_large(size));
        }
        String::from_utf8(bytes).map(Some).map_err(|error| {
            format!(
                "the memory file {} is not UTF-8 text (at byte {}); fix or remove it",
                self.path.display(),
                error.utf8_error().valid_up_to()
            )
        })
    }

    /// Replaces the file with `text`: a new temporary file beside it, renamed over it, while
    /// `lock` is still ours.
    fn write(&self, text: &str, lock: &Lock) -> Result<(), String> {
        let name = self
            .path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .ok_or_else(|| format!("the memory file {} has no file name", self.path.display()))?;
        let temp = self
            .path
            .with_file_name(format!("{name}.{:016x}.tmp", unique()));
        let cannot = |error: io::Error| {
            format!(
                "cannot write the memory file {} (through {}): {error}; nothing was changed",
                self.path.display(),
                temp.display()
            )
        };
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })();
        if let Err(error) = written {
            let _ = fs::remove_file(&temp);
            return Err(cannot(error));
        }
        if !lock.is_ours() {
            let _ = fs::remove_file(&temp);
            return Err(format!(
                "another session took over the lock {} while this change was being made \
                 (its holder looked stuck); nothing was changed: try again",
                lock.path.display()
            ));
        }
        fs::rename(&temp, &self.path).map_err(|error| {
            let _ = fs::remove_file(&temp);
            cannot(error)
        })
    }
}

/// `FILE.lock` beside `FILE`.
fn lock_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// A number no other session picks: the process's random hash keys, and the time.
fn unique() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish()
}

/// The lock on a memory file, held until dropped.
struct Lock {
    path: PathBuf,
    token: String,
}

impl Lock {
    /// Creates the lock file, waiting up to `wait` while another session holds it,
    /// and taking over one older than [`STALE_LOCK`].
    fn acquire(path: PathBuf, file: &Path, wait: Duration) -> Result<Self, String> {
        let token = format!("{:016x}", unique());
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut created) => {
                    if let Err(error) = created.write_all(token.as_bytes()) {
                        let _ = fs::remove_file(&path);
                        return Err(format!(
                            "cannot write the lock file {}: {error}",
                            path.display()
                        ));
                    }
                    return Ok(Self { path, token });
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    return Err(format!(
                        "cannot create the lock file {} for the memory file {}: {error}; the \
                         plugin's policy must grant its directory read-write",
                        path.display(),
                        file.display()
                    ));
                }
            }
            match held(&path) {
                Held::Stale => {
                    llm_worker_guest::log::warn!(
                        "taking over the stale lock file {}",
                        path.display()
                    );
                    // Not removable (another plugin sharing the directory made it so, or a
                    // user): said at once, not tried again until the call's time runs out.
                    if let Err(error) = fs::remove_file(&path)
                        && error.kind() != io::ErrorKind::NotFound
                    {
                        return Err(format!(
                            "the memory file {} has a stale lock file {} that cannot be \
                                 removed ({error}); remove it",
                            file.display(),
                            path.display()
                        ));
                    }
                    continue;
                }
                Held::Foreign(what) => {
                    return Err(format!(
                        "the memory file {} cannot be locked: its lock file's place {} holds \
                         {what}, which this plugin did not make; remove it",
                        file.display(),
                        path.display()
                    ));
                }
                Held::Unreadable(error) => {
                    return Err(format!(
                        "the memory file {} cannot be locked: its lock file {} cannot be looked \
                         at ({error}); remove it or fix its permissions",
                        file.display(),
                        path.display()
                    ));
                }
                Held::Fresh => {}
            }
            if started.elapsed() >= wait {
                return Err(format!(
                    "the memory file {} is locked by another session, which has been changing \
                     it for over {:?}; try again. If no other session is running, remove the \
                     lock file {} (one older than {} s is taken over)",
                    file.display(),
                    wait,
                    path.display(),
                    STALE_LOCK.as_secs()
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Whether the lock file still holds this lock's token.
    fn is_ours(&self) -> bool {
        fs::read(&self.path).is_ok_and(|held| held == self.token.as_bytes())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.is_ours() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// What is found at a lock file's place.
enum Held {
    /// A lock file changed within [`STALE_LOCK`] (or gone since): another session's.
    Fresh,
    /// A lock file last changed longer than [`STALE_LOCK`] ago: a session that died left it.
    Stale,
    /// Not a file (a directory, a link, a FIFO): no lock a session of this plugin made, and
    /// nothing to take over or wait for.
    Foreign(&'static str),
    /// Something is there that cannot be looked at: nothing to wait for either.
    Unreadable(io::Error),
}

/// What is at the lock file's place `path` (not following a link there).
fn held(path: &Path) -> Held {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        // Gone since it was found: tried again.
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Held::Fresh,
        Err(error) => return Held::Unreadable(error),
    };
    let kind = metadata.file_type();
    if kind.is_dir() {
        return Held::Foreign("a directory");
    }
    if kind.is_symlink() {
        return Held::Foreign("a symbolic link");
    }
    if !kind.is_file() {
        return Held::Foreign("a special file");
    }
    let stale = metadata
        .modified()
        .ok()
        .and_then(|changed| SystemTime::now().duration_since(changed).ok())
        .is_some_and(|age| age > STALE_LOCK);
    if stale { Held::Stale } else { Held::Fresh }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Entity;

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("memory-{name}-{:016x}", unique()));
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn entity(name: &str) -> Entity {
        Entity {
            name: name.into(),
            entity_type: "t".into(),
            observations: vec![],
        }
    }

    #[test]
    fn concurrent_changes_are_neither_lost_nor_torn() {
        let dir = TempDir::new("concurrent");
        let store = Store::new(dir.0.join("m.jsonl"), DEFAULT_MAX_BYTES);
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for n in 0..25 {
                        store
                            .update(|graph| {
                                Ok(graph.create_entities(vec![entity(&format!("{writer}-{n}"))]))
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        assert_eq!(store.load().unwrap().entities.len(), 100);
        let left: Vec<_> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("m.jsonl")],
            "no lock or temporary left"
        );
    }

    #[test]
    fn a_failed_change_writes_nothing_and_a_held_lock_is_waited_for_then_refused() {
        let dir = TempDir::new("held");
        let path = dir.0.join("m.jsonl");
        // Waiting 200 ms rather than the 5 s a session waits: what is tested is that it waits,
        // then refuses.
        let store =
            Store::new(path.clone(), DEFAULT_MAX_BYTES).lock_wait(Duration::from_millis(200));
        let error = store.update(|_| Err::<(), _>("no".into())).unwrap_err();
        assert_eq!(error, "no");
        assert!(!path.exists());

        fs::write(lock_path(&path), "someone else").unwrap();
        let error = store
            .update(|graph| Ok(graph.create_entities(vec![entity("A")])))
            .unwrap_err();
        assert!(error.contains("is locked by another session"), "{error}");
        assert_eq!(
            fs::read_to_string(lock_path(&path)).unwrap(),
            "someone else"
        );
        assert!(!path.exists());
    }

    #[test]
    fn a_stale_lock_is_taken_over() {
        let dir = TempDir::new("stale");
        let path = dir.0.join("m.jsonl");
        let lock = lock_path(&path);
        fs::write(&lock, "dead").unwrap();
        let old = SystemTime::now() - STALE_LOCK - Duration::from_secs(5);
        File::options()
            .write(true)
            .open(&lock)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let store = Store::new(path, DEFAULT_MAX_BYTES);
        store
            .update(|graph| Ok(graph.create_entities(vec![entity("A")])))
            .unwrap();
        assert_eq!(store.load().unwrap().entities, vec![entity("A")]);
        assert!(!lock.exists());
    }

    /// The attack: something at the lock file's place that is no lock and cannot be removed as
    /// one (a directory, made by another plugin sharing the grant). Every change spun until
    /// the call's time ran out, failing as the plugin's timeout; it is refused at once, naming
    /// what to remove. A link there is not followed nor taken over either.
    #[test]
    fn what_is_no_lock_at_the_locks_place_is_named_not_waited_for() {
        let dir = TempDir::new("foreign");
        let path = dir.0.join("m.jsonl");
        let lock = lock_path(&path);
        let store = Store::new(path.clone(), DEFAULT_MAX_BYTES);
        fs::create_dir(&lock).unwrap();
        let error = store
            .update(|graph| Ok(graph.create_entities(vec![entity("A")])))
            .unwrap_err();
        // Not "locked by another session", after the wait for one.
        assert!(
            error.contains("holds a directory") && error.contains(&lock.display().to_string()),
            "{error}"
        );
        assert!(lock.is_dir() && !path.exists());
        fs::remove_dir(&lock).unwrap();
        #[cfg(unix)]
        {
            let target = dir.0.join("elsewhere");
            fs::write(&target, "kept").unwrap();
            std::os::unix::fs::symlink(&target, &lock).unwrap();
            let error = store
                .update(|graph| Ok(graph.create_entities(vec![entity("A")])))
                .unwrap_err();
            assert!(error.contains("holds a symbolic link"), "{error}");
            assert_eq!(fs::read_to_string(&target).unwrap(), "kept");
            fs::remove_file(&lock).unwrap();
        }
        store
            .update(|graph| Ok(graph.create_entities(vec![entity("A")])))
            .unwrap();
        assert_eq!(store.load().unwrap().entities, vec![entity("A")]);
    }

    #[test]
    fn the_size_limit_holds_for_reading_and_writing() {
        let dir = TempDir::new("limit");
        let path = dir.0.join("m.jsonl");
        let store = Store::new(path.clone(), 200);
        store
            .update(|graph| Ok(graph.create_entities(vec![entity("A")])))
            .unwrap();
        let before = fs::read_to_string(&path).unwrap();
        let error = store
            .update(|graph| Ok(graph.create_entities(vec![entity(&"B".repeat(300))])))
            .unwrap_err();
        assert!(error.contains("over its limit of 200 bytes"), "{error}");
        assert_eq!(fs::read_to_string(&path).unwrap(), before);

        fs::write(&path, "x".repeat(201)).unwrap();
        let error = store.load().unwrap_err();
        assert!(
            error.contains("is 201 bytes, over the limit of 200"),
            "{error}"
        );
    }

    /// Many small items take far more memory than their bytes in the file: a graph may hold
    /// `MAX_ITEMS` of them, whether a change would pass it or a file written elsewhere does.
    #[test]
    fn the_graph_is_held_to_a_number_of_items() {
        let dir = TempDir::new("items");
        let path = dir.0.join("m.jsonl");
        let store = Store::new(path.clone(), DEFAULT_MAX_BYTES);
        let many = |count: usize| Entity {
            name: "A".into(),
            entity_type: "t".into(),
            observations: vec![String::new(); count],
        };
        let error = store
            .update(|graph| Ok(graph.create_entities(vec![many(crate::graph::MAX_ITEMS)])))
            .unwrap_err();
        assert!(
            error.contains(&format!("over the {}", crate::graph::MAX_ITEMS)),
            "{error}"
        );
        assert!(!path.exists(), "nothing was written");
        store
            .update(|graph| Ok(graph.create_entities(vec![many(1_000)])))
            .unwrap();
        assert_eq!(store.load().unwrap().items(), 1_001);
        let mut graph = Graph::default();
        graph.create_entities(vec![many(crate::graph::MAX_ITEMS)]);
        fs::write(&path, graph.to_jsonl()).unwrap();
        let error = store.load().unwrap_err();
        assert!(
            error.contains(&format!("more than the {}", crate::graph::MAX_ITEMS)),
            "{error}"
        );
    }

    #[test]
    fn a_damaged_file_is_reported_and_kept() {
        let dir = TempDir::new("damaged");
        let path = dir.0.join("m.jsonl");
        fs::write(&path, "{\"type\":\"entity\",\"name\":\"A\"}").unwrap();
        let store = Store::new(path.clone(), DEFAULT_MAX_BYTES);
        let error = store
            .update(|graph| Ok(graph.create_entities(vec![entity("B")])))
            .unwrap_err();
        assert!(
            error.contains("is damaged: line 1 is not an entity"),
            "{error}"
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "{\"type\":\"entity\",\"name\":\"A\"}"
        );
    }
}
