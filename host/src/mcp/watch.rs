//! Keeping an MCP server's [`ToolCatalog`] in step with a plugin directory (`serve --watch`):
//! plugins added, changed or removed are picked up, a broken new version keeps the working
//! one serving, and a directory that was locked stays locked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{ToolCatalog, ToolGroup};
use crate::lock::{LOCK_FILE, LockFile};
use crate::plugin::{LoadDirOptions, PluginDir, PluginError, PluginHost};
use crate::policy::SandboxPolicy;

/// How often [`DirWatcher::run`] looks at the directory.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(300);

/// How long after a reload that found the host busy (its instance pool full) the directory is
/// reloaded again though nothing changed; doubled while it stays busy, up to
/// [`MAX_BUSY_RETRY`]. Each reload lists every plugin, each in a slot of the pool.
const FIRST_BUSY_RETRY: Duration = Duration::from_secs(1);

/// The longest wait between reloads while the host stays busy.
const MAX_BUSY_RETRY: Duration = Duration::from_secs(60);

/// What a file looked like at the last scan: size, modification time and identity, to notice
/// that something may have changed (what changed is decided by content).
/// With its mode, owner and group, and the time of its last change of any kind (`ctime`): a
/// `chmod`, `chown`, `chgrp` or `setfacl` (which change neither its size, its modification
/// time nor its inode) can make a refused plugin loadable, or a loaded one refused.
type Stat = (u64, Option<SystemTime>, u64, u64, i128);

/// A plugin file and its policy at the last scan.
type Fingerprint = [Stat; 2];

fn stat(path: &Path) -> Stat {
    #[cfg(unix)]
    let identity = |m: &std::fs::Metadata| {
        use std::os::unix::fs::MetadataExt;
        (
            m.ino(),
            u64::from(m.mode()) ^ u64::from(m.uid()) << 16 ^ u64::from(m.gid()) << 40,
            i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        )
    };
    #[cfg(not(unix))]
    let identity = |_: &std::fs::Metadata| (0, 0, 0);
    std::fs::metadata(path)
        .map(|m| {
            let (inode, access, changed) = identity(&m);
            (m.len(), m.modified().ok(), inode, access, changed)
        })
        .unwrap_or((0, None, 0, 0, 0))
}

/// The plugin files of `dir` with their policies, and its lock file (an update written by
/// `llm-worker lock`, or a lock that is removed or replaced, is a change to act on too).
#[derive(PartialEq)]
struct Scan {
    plugins: BTreeMap<PathBuf, Fingerprint>,
    /// The directory itself (its mode and owner decide whether anything in it loads).
    dir: Stat,
    lock: Option<Stat>,
    /// The trust policy of pulled plugins: a key revoked there stops their serving.
    trust: Option<Stat>,
    /// The trusted root file the trust policy names for keyless signers (its bytes are part of
    /// the trust policy's pin).
    sigstore_root: Option<Stat>,
}

fn scan(dir: &Path, options: LoadDirOptions) -> Scan {
    let lock = dir.join(LOCK_FILE);
    let trust = dir.join(crate::trust::TRUST_FILE);
    Scan {
        plugins: options
            .plugin_files(dir)
            .unwrap_or_default()
            .into_iter()
            .map(|path| {
                let print = [stat(&path), stat(&SandboxPolicy::path_for(&path))];
                (path, print)
            })
            .collect(),
        dir: stat(dir),
        lock: std::fs::symlink_metadata(&lock)
            .is_ok()
            .then(|| stat(&lock)),
        trust: std::fs::symlink_metadata(&trust)
            .is_ok()
            .then(|| stat(&trust)),
        sigstore_root: sigstore_root(dir, &trust).map(|root| stat(&root)),
    }
}

/// The trusted root file `dir`'s trust policy names, if it names one.
fn sigstore_root(dir: &Path, trust: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut text = String::new();
    // As the policy itself is read: a regular file that can be trusted, opened without
    // blocking (a FIFO planted under the name would hang the rescan, or the start).
    crate::lock::open_trusted(dir, trust)
        .ok()??
        .take(1 << 20)
        .read_to_string(&mut text)
        .ok()?;
    let name = crate::trust::TrustPolicy::parse(&text, trust)
        .ok()?
        .sigstore_root_file?;
    Some(dir.join(name))
}

/// The SHA-256 of `plugin`'s policy file as loaded ("none" without one).
fn policy_sha256(plugin: &crate::LoadedPlugin) -> &str {
    plugin.policy_sha256().unwrap_or("none")
}

/// What a plugin directory looked like at one moment (its plugin files, their policies and
/// its lock file), to notice later changes: take it *before* loading the directory, so that a
/// change made while it loads is picked up by the first rescan.
#[derive(PartialEq)]
pub struct DirSnapshot(Scan);

impl std::fmt::Debug for DirSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirSnapshot")
            .field("plugins", &self.0.plugins.len())
            .field("lock", &self.0.lock.is_some())
            .finish()
    }
}

impl DirSnapshot {
    /// The files of `dir` that `options` read, as they are now.
    pub fn take(dir: &Path, options: LoadDirOptions) -> Self {
        Self(scan(dir, options))
    }
}

/// The SHA-256 (hex) of the policy file of the plugin at `path` as it is now: "none" without
/// one, "unreadable" where it cannot be read (as [`LoadedPlugin::policy_sha256`] has it).
///
/// [`LoadedPlugin::policy_sha256`]: crate::LoadedPlugin::policy_sha256
fn policy_sha256_now(path: &Path) -> String {
    let policy = crate::SandboxPolicy::path_for(path);
    if !policy.exists() {
        return "none".to_owned();
    }
    match crate::SandboxPolicy::read_text(&policy) {
        Ok(text) => crate::digest::sha256_hex(text.as_bytes()),
        Err(_) => "unreadable".to_owned(),
    }
}

/// Warns if `plugin` has tools that run as tasks for longer (its policy's task time limit)
/// than tasks are kept (`ttl`): such a task is stopped at `ttl`, before its own limit.
fn warn_of_tasks_outliving_their_record(plugin: &crate::LoadedPlugin, ttl: Duration) {
    let runs_tasks = plugin
        .tools()
        .iter()
        .any(|tool| tool.task_support != crate::TaskSupport::Forbidden);
    // Without a task time limit of its own, a task runs under the call's.
    let limits = &plugin.policy().limits;
    let limit = limits.task_timeout.unwrap_or(limits.call_timeout);
    if runs_tasks && limit > ttl {
        tracing::warn!(
            "plugin '{}' may run a task for {} s (its task time limit: limits.task_timeout_ms, \
             else timeout_ms), but tasks are kept for {} s (--task-ttl): its tasks still \
             running then are stopped; raise --task-ttl",
            plugin.name(),
            limit.as_secs(),
            ttl.as_secs()
        );
    }
}

/// The served plugins, by file: a plugin whose new version fails to load keeps its working
/// version (unless its policy changed); a removed file goes.
#[derive(Default)]
struct Served {
    /// Each served plugin's group (a group of the watcher is always a plugin's: what a lock
    /// must approve for it to keep serving is read from the plugin it holds).
    groups: BTreeMap<PathBuf, ToolGroup>,
    /// The problems reported at the last load, so that a rescan does not repeat them.
    reported: std::collections::BTreeSet<String>,
}

/// Whether a directory grant of `plugin` (as loaded) now resolves elsewhere than it did at
/// load (a link re-pointed), or no longer resolves.
fn grants_lead_elsewhere(plugin: &crate::LoadedPlugin) -> bool {
    let policy = plugin.policy();
    plugin.grants_replaced()
        || policy
            .written_dirs
            .iter()
            .zip(&policy.dirs)
            .any(|(written, grant)| leads_elsewhere(written, &grant.host))
}

/// Whether `written` (a grant's path) no longer resolves to `resolved`.
fn leads_elsewhere(written: &Path, resolved: &Path) -> bool {
    written.canonicalize().map_or(true, |now| now != resolved)
}

impl Served {
    /// Takes in a reload: `loaded`, the files `present`, and (in a locked directory) the lock
    /// that must approve what keeps serving.
    fn update(&mut self, loaded: PluginDir, present: &Scan, approved: Option<(&Path, &LockFile)>) {
        self.groups
            .retain(|path, _| present.plugins.contains_key(path));
        let mut problems = std::collections::BTreeSet::new();
        // What stops serving goes first, so that a newcomer is not refused for a clash with a
        // plugin this very reload takes out. A plugin whose policy changed and no longer loads
        // is not kept under the policy it was served with: that policy is what the operator
        // withdrew (an HTTP grant taken out, so that the plugin now fails to link). Only a new
        // version of the plugin itself that fails keeps the working one serving.
        let mut withdrawn = std::collections::BTreeSet::new();
        for failure in &loaded.failures {
            if let Some(path) = failure
                .path()
                .filter(|path| self.groups.contains_key(*path))
            {
                let served = self.plugin(path);
                let served_policy = served.map(policy_sha256);
                if served.is_some_and(grants_lead_elsewhere) {
                    self.groups.remove(path);
                    withdrawn.insert(path.to_owned());
                    problems.insert(format!(
                        "plugin {} is no longer served: it does not load ({failure}), and a \
                         directory its policy grants now leads elsewhere; it is not kept with \
                         the directory it was served with",
                        path.display()
                    ));
                } else if served_policy != Some(policy_sha256_now(path).as_str()) {
                    self.groups.remove(path);
                    withdrawn.insert(path.to_owned());
                    problems.insert(format!(
                        "plugin {} is no longer served: its policy changed, and it does not load \
                         with the new one ({failure}); it is not kept under the policy it was \
                         served with",
                        path.display()
                    ));
                }
            }
        }
        if let Some((dir, lock)) = approved {
            self.keep_approved(dir, lock);
        }
        let fresh: Vec<(PathBuf, ToolGroup, &crate::LoadedPlugin)> = loaded
            .plugins
            .iter()
            .map(|plugin| (plugin.path().to_owned(), ToolGroup::plugin(plugin), plugin))
            .collect();
        let changed = |groups: &BTreeMap<PathBuf, ToolGroup>, path: &Path, group: &ToolGroup| {
            groups
                .get(path)
                .is_none_or(|old| old.generation() != group.generation())
        };
        // The read-write grants of the versions kept serving although their new version failed
        // to load: the load did not see them, so it could not refuse a plugin whose file or
        // policy such a version can rewrite.
        let kept_writable = crate::plugin::dir::writable_grants(
            self.groups
                .iter()
                .filter(|(path, _)| !fresh.iter().any(|(fresh, ..)| fresh == *path))
                .filter_map(|(_, group)| group.loaded()),
        );
        // What is served already comes first: a new or changed plugin offering what another
        // served one offers is not served, whichever name sorts first. (A fresh load refuses
        // both sides of a clash, but it sees only the plugins that load: one served whose new
        // version fails keeps serving, and a newcomer must not take its names meanwhile.)
        let mut accepted: Vec<ToolGroup> = self
            .groups
            .iter()
            .filter(|(path, _)| {
                !fresh
                    .iter()
                    .any(|(fresh, group, _)| fresh == *path && changed(&self.groups, path, group))
            })
            .map(|(_, group)| group.clone())
            .collect();
        let mut newly_served: Vec<&crate::LoadedPlugin> = Vec::new();
        for (path, group, plugin) in fresh {
            if !changed(&self.groups, &path, &group) {
                continue;
            }
            let refusal = crate::plugin::dir::held_by_a_grant(plugin, &kept_writable)
                .map(|held| held.to_string())
                .or_else(|| group.clash_with(&accepted));
            if let Some(refusal) = refusal {
                problems.insert(format!(
                    "plugin {} is not served: {refusal}",
                    path.display()
                ));
                // The version served before keeps serving, unless its policy is what changed
                // (then it is not kept under the policy withdrawn) or it clashes too.
                let keep_old = self.groups.get(&path).is_some_and(|old| {
                    self.plugin(&path).map(policy_sha256) == Some(policy_sha256(plugin))
                        && !self.plugin(&path).is_some_and(grants_lead_elsewhere)
                        && old.clash_with(&accepted).is_none()
                });
                match self.groups.get(&path) {
                    Some(old) if keep_old => accepted.push(old.clone()),
                    _ => {
                        self.groups.remove(&path);
                    }
                }
                continue;
            }
            tracing::info!(plugin = %path.display(), "serving plugin");
            accepted.push(group.clone());
            newly_served.push(plugin);
            self.groups.insert(path, group);
        }
        // A version kept serving (its new reading failed) whose file or policy a read-write
        // grant of a plugin now served holds (a newcomer's grant, or one widened) could be
        // rewritten by that plugin: it is not kept (the load refused its new reading for that
        // very reason). Decided once the newcomers are accepted: one refused withdraws nothing.
        let newly_writable = crate::plugin::dir::writable_grants(newly_served.into_iter());
        if !newly_writable.is_empty() {
            let held: Vec<(PathBuf, String)> = self
                .groups
                .iter()
                .filter_map(|(path, group)| {
                    let plugin = group.loaded()?;
                    let held = crate::plugin::dir::held_by_a_grant(plugin, &newly_writable)?;
                    Some((path.clone(), held.to_string()))
                })
                .collect();
            for (path, held) in held {
                self.groups.remove(&path);
                problems.insert(format!(
                    "plugin {} is no longer served: {held}",
                    path.display()
                ));
                withdrawn.insert(path);
            }
        }
        for failure in &loaded.failures {
            if failure.path().is_some_and(|path| withdrawn.contains(path)) {
                continue;
            }
            let problem = match failure {
                // Two plugins offering one tool are both refused by a fresh load; while
                // serving, the one served already keeps serving, and only the other is out.
                PluginError::ToolNameClash {
                    path, other, tool, ..
                } if self.groups.contains_key(path) && self.groups.contains_key(other) => {
                    format!(
                        "plugins {} and {} both offer the tool '{tool}' now: the versions served \
                         before keep serving until one is renamed or removed",
                        path.min(other).display(),
                        path.max(other).display()
                    )
                }
                PluginError::ToolNameClash { path, .. } if self.groups.contains_key(path) => {
                    continue;
                }
                PluginError::ToolNameClash {
                    path, other, tool, ..
                } if self.groups.contains_key(other) => {
                    format!(
                        "plugin {} is not served: its tool '{tool}' is served by {} already; \
                         rename or remove one of them",
                        path.display(),
                        other.display()
                    )
                }
                failure => failure.to_string(),
            };
            problems.insert(problem);
        }
        for problem in problems.difference(&self.reported) {
            tracing::warn!("{problem}");
        }
        self.reported = problems;
    }

    /// Stops serving every plugin the lock of `dir` does not approve as it is served (its
    /// entry withdrawn, or moved on to other bytes while the old file stayed), and every
    /// pulled plugin whose signer the trust policy no longer allows (a revoked key).
    fn keep_approved(&mut self, dir: &Path, lock: &LockFile) {
        let approved = lock.by_file();
        let refused = lock.source_refusals(dir);
        self.groups.retain(|path, group| {
            let name = crate::lock::relative_name(dir, path);
            if let Some(reason) = refused.get(&name) {
                tracing::warn!(plugin = %path.display(), "no longer served: {reason}");
                return false;
            }
            // The checks loading makes: its bytes, its policy and where its grants lead.
            let keep =
                approved
                    .get(name.as_str())
                    .zip(group.loaded())
                    .is_some_and(|(entry, plugin)| {
                        entry
                            .approves_files(
                                &crate::digest::hex(plugin.sha256()),
                                plugin.policy_sha256(),
                                &SandboxPolicy::path_for(path),
                            )
                            .and_then(|()| entry.approves_grants(plugin.policy()))
                            .and_then(|()| entry.approves_listing(plugin))
                            .is_ok()
                    });
            if !keep {
                tracing::warn!(
                    plugin = %path.display(),
                    "no longer served: the lock file does not approve the version served"
                );
            }
            keep
        });
    }

    /// The plugin served from `path`, if one is.
    fn plugin(&self, path: &Path) -> Option<&crate::LoadedPlugin> {
        self.groups.get(path)?.loaded()
    }

    /// The served plugins' directory grants, as written and as resolved at load: a link
    /// re-pointed since is a change no file of the directory shows ([`grants_lead_elsewhere`]).
    fn grants(&self) -> Vec<(PathBuf, PathBuf)> {
        self.groups
            .values()
            .filter_map(ToolGroup::loaded)
            .flat_map(|plugin| {
                let policy = plugin.policy();
                policy
                    .written_dirs
                    .iter()
                    .cloned()
                    .zip(policy.dirs.iter().map(|grant| grant.host.clone()))
            })
            .collect()
    }

    /// Each group's name and generation: what a catalog's sessions compare.
    fn revisions(&self) -> Vec<(String, super::catalog::Generation)> {
        self.groups
            .values()
            .map(|group| (group.name().to_owned(), group.generation()))
            .collect()
    }

    fn groups(&self) -> Vec<ToolGroup> {
        self.groups.values().cloned().collect()
    }
}

/// The served state of a plugin directory, and how to keep a catalog in step with it.
///
/// ```no_run
/// use llm_worker::mcp::{DirWatcher, McpOptions, ToolCatalog, serve_stdio};
/// use llm_worker::{LoadDirOptions, PluginHost};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let host = PluginHost::new()?;
/// let watcher = DirWatcher::load(host, "plugins", LoadDirOptions::default())?;
/// let catalog = ToolCatalog::new(watcher.groups());
/// tokio::spawn(watcher.run(catalog.clone()));
/// serve_stdio(catalog, McpOptions::new("my-tools", "1.0.0")).await?;
/// # Ok(())
/// # }
/// ```
pub struct DirWatcher {
    host: PluginHost,
    dir: PathBuf,
    options: LoadDirOptions,
    served: Served,
    present: Scan,
    /// The last reload's error, said once (until the directory changes again).
    refused: Option<String>,
    /// Where the served plugins' grants led when a reload was last tried for them leading
    /// elsewhere: a reload that changed nothing (it failed) is not tried again every rescan
    /// for the same moves.
    grants_tried: Vec<Option<PathBuf>>,
    /// When the last reload found the host without room to list a plugin (its instance pool
    /// full): a rescan from then reloads even if nothing changed, and how long after the
    /// reload before that (doubling while the host stays busy, up to [`MAX_BUSY_RETRY`]).
    host_was_busy: Option<(std::time::Instant, Duration)>,
    /// Where reloads are counted.
    #[cfg(feature = "metrics")]
    metrics: Option<super::Metrics>,
    /// How long the server keeps tasks: a plugin served anew whose tasks may run longer is
    /// warned of ([`task_ttl`](Self::task_ttl)).
    task_ttl: Option<Duration>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .field("served", &self.served.groups.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl DirWatcher {
    /// Loads `dir` (see [`PluginHost::load_dir_with`]) and keeps what loaded. A directory that
    /// has a lock file now stays locked for every reload ([`LoadDirOptions::locked`]): a lock
    /// deleted later refuses every change rather than loading whatever is there.
    pub fn load(
        host: PluginHost,
        dir: impl Into<PathBuf>,
        options: LoadDirOptions,
    ) -> Result<Self, PluginError> {
        let dir = dir.into();
        let before = DirSnapshot::take(&dir, options);
        let loaded = host.load_dir_with(&dir, options, |_, _, _| {})?;
        Ok(Self::from_loaded(host, dir, options, before, loaded))
    }

    /// Like [`load`](Self::load), from a load of `dir` made already (with a progress bar,
    /// say), and the snapshot taken just before it.
    pub fn from_loaded(
        host: PluginHost,
        dir: impl Into<PathBuf>,
        options: LoadDirOptions,
        before: DirSnapshot,
        loaded: PluginDir,
    ) -> Self {
        let dir = dir.into();
        let present = before.0;
        // Decided from what was there before the load, not from a second read of the lock.
        let options = if present.lock.is_some() && !options.ignore_lock {
            options.locked(true)
        } else {
            options
        };
        let mut served = Served::default();
        served.update(loaded, &present, None);
        Self {
            host,
            dir,
            options,
            served,
            present,
            refused: None,
            grants_tried: Vec::new(),
            host_was_busy: None,
            #[cfg(feature = "metrics")]
            metrics: None,
            task_ttl: None,
        }
    }

    /// Warns of each plugin served now, and of each a reload serves anew, whose tools run as
    /// tasks for longer (its policy's `task_timeout_ms`) than the server keeps tasks (`ttl`):
    /// such a task would be stopped when it is no longer kept.
    #[must_use]
    pub fn task_ttl(mut self, ttl: Duration) -> Self {
        for plugin in self.served.groups.values().filter_map(ToolGroup::loaded) {
            warn_of_tasks_outliving_their_record(plugin, ttl);
        }
        self.task_ttl = Some(ttl);
        self
    }

    /// Counts every reload in `metrics` (`llm_worker_reloads_total`, by outcome: `changed`,
    /// `unchanged`, `refused`).
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics(mut self, metrics: super::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Counts a reload that ended so.
    fn reloaded(&self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.metrics {
            metrics.reloaded(outcome);
        }
        let _ = outcome;
    }

    /// The groups served now, one per plugin: what a [`ToolCatalog`] is made of.
    pub fn groups(&self) -> Vec<ToolGroup> {
        self.served.groups()
    }

    /// How the directory is read (`locked` once it had a lock).
    pub fn options(&self) -> LoadDirOptions {
        self.options
    }

    /// Looks at the directory once: if a plugin, a policy or the lock file changed, or a
    /// served plugin's granted directory now leads elsewhere (a link re-pointed), loads it
    /// again (on a blocking thread: compiling takes a while) and takes in what changed.
    /// Returns whether the served plugins changed. A reload that fails as a whole (the lock is
    /// gone, untrusted or unreadable; the directory is unreadable) changes nothing and is
    /// logged once.
    pub async fn rescan(&mut self) -> bool {
        // Listing and stating the directory is blocking work (a slow or large file system).
        let (dir, options, grants) = (self.dir.clone(), self.options, self.served.grants());
        let plugins: Vec<crate::LoadedPlugin> = self
            .served
            .groups
            .values()
            .filter_map(ToolGroup::loaded)
            .cloned()
            .collect();
        let Ok((now, grants_now, grants_moved)) = tokio::task::spawn_blocking(move || {
            let mut now: Vec<Option<PathBuf>> = grants
                .iter()
                .map(|(written, _)| written.canonicalize().ok())
                .collect();
            let mut moved = grants
                .iter()
                .zip(&now)
                .any(|((_, resolved), now)| now.as_ref() != Some(resolved));
            // A directory moved away and another made at its path resolves as before: told by
            // the directory itself. Marked in what was tried, so that it is tried once.
            if plugins.iter().any(crate::LoadedPlugin::grants_replaced) {
                moved = true;
                now.push(None);
            }
            (scan(&dir, options), now, moved)
        })
        .await
        else {
            return false;
        };
        let grants_changed = grants_moved && grants_now != self.grants_tried;
        // Tried once for these moves; moved back, a later move is new again.
        if !grants_moved {
            self.grants_tried.clear();
        }
        let retry = self
            .host_was_busy
            .is_some_and(|(at, after)| at.elapsed() >= after);
        if now == self.present && !grants_changed && !retry {
            return false;
        }
        if grants_moved {
            self.grants_tried = grants_now;
        }
        let (host, options, path) = (self.host.clone(), self.options, self.dir.clone());
        let loaded = match tokio::task::spawn_blocking(move || {
            host.load_dir_with(path, options, |_, _, _| {})
        })
        .await
        {
            Ok(Ok(loaded)) => loaded,
            Ok(Err(error)) => {
                let message = format!("{error}; still serving the plugins loaded before");
                if self.refused.as_ref() != Some(&message) {
                    tracing::warn!("{message}");
                }
                self.refused = Some(message);
                self.present = now;
                self.reloaded("refused");
                return false;
            }
            Err(_) => return false,
        };
        // A directory locked since (`llm-worker lock` while serving) stays locked from now on.
        if now.lock.is_some() && !self.options.ignore_lock {
            self.options = self.options.locked(true);
        }
        // What was approved before may not be any more: the lock is the list. A lock that
        // cannot be read again now (gone or untrusted since the load) applies nothing of this
        // reload, and the next rescan tries again: what is served stays what the last lock read
        // approved, never what no lock was read for.
        let lock = match self.options.locked.then(|| LockFile::read(&self.dir)) {
            None => None,
            Some(Ok(Some(lock))) => Some(lock),
            Some(read) => {
                let why = match read {
                    Err(error) => error.to_string(),
                    _ => "it is gone".to_owned(),
                };
                let message = format!(
                    "the lock file could not be read again after a reload ({why}); nothing of \
                     the reload is applied, and the next rescan tries again"
                );
                // Said once, as a refused reload is.
                if self.refused.as_ref() != Some(&message) {
                    tracing::warn!(dir = %self.dir.display(), "{message}");
                    self.refused = Some(message);
                }
                return false;
            }
        };
        self.refused = None;
        self.present = now;
        // A plugin the host had no room to list (a full instance pool) is not the plugin's
        // failure: tried again at the next rescan, its old version served meanwhile.
        let busy = loaded
            .failures
            .iter()
            .any(|failure| matches!(failure, PluginError::HostBusy { .. }));
        self.host_was_busy = busy.then(|| {
            let after = self.host_was_busy.map_or(FIRST_BUSY_RETRY, |(_, after)| {
                (after * 2).min(MAX_BUSY_RETRY)
            });
            (std::time::Instant::now(), after)
        });
        let before = self.served.revisions();
        self.served.update(
            loaded,
            &self.present,
            lock.as_ref().map(|lock| (self.dir.as_path(), lock)),
        );
        if let Some(lock) = &lock {
            self.served.keep_approved(&self.dir, lock);
        }
        let after = self.served.revisions();
        let changed = after != before;
        if let Some(ttl) = self.task_ttl {
            for group in self.served.groups.values() {
                let anew = !before.contains(&(group.name().to_owned(), group.generation()));
                if let Some(plugin) = group.loaded().filter(|_| anew) {
                    warn_of_tasks_outliving_their_record(plugin, ttl);
                }
            }
        }
        self.reloaded(if changed { "changed" } else { "unchanged" });
        // What a test of `serve --watch` waits for (rather than guessing how long a rescan takes).
        tracing::debug!(
            "reloaded {}: the served plugins {}",
            self.dir.display(),
            if changed { "changed" } else { "are unchanged" }
        );
        changed
    }

    /// Rescans every [`WATCH_INTERVAL`] and replaces `catalog`'s groups when the plugins
    /// change (every open session takes the change in and tells its client); runs until the
    /// task is dropped.
    pub async fn run(mut self, catalog: ToolCatalog) {
        loop {
            tokio::time::sleep(WATCH_INTERVAL).await;
            if self.rescan().await {
                // Sessions keep the instances of groups whose revision (content) is unchanged,
                // and tell their clients only if their tools changed.
                catalog.replace(self.groups());
            }
        }
    }
}
