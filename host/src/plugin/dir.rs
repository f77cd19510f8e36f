//! Loading a directory of plugins: which files are read ([`LoadDirOptions`]: recursion, build
//! output, the lock), each plugin loaded (and approved by the lock, where there is one),
//! clashing tool names refused on both sides, and policy files that belong to no plugin
//! reported; the result is a [`PluginDir`].

use std::path::{Path, PathBuf};

use super::{LoadedPlugin, PluginError, PluginHost};
use crate::policy::{PolicyError, SandboxPolicy};
use crate::tool::ToolDefinition;

impl PluginHost {
    /// Loads every `*.wasm` file of `dir` (not its subdirectories), each with its policy file.
    ///
    /// A plugin that cannot be loaded is reported in [`PluginDir::failures`] and the others are
    /// loaded; so are links to files outside `dir` (refused) and two plugins offering the same
    /// tool name (both refused: neither silently wins). Fails only if `dir` cannot be read.
    pub fn load_dir(&self, dir: impl AsRef<Path>) -> Result<PluginDir, PluginError> {
        self.load_dir_with(dir, LoadDirOptions::default(), |_, _, _| {})
    }

    /// [`load_dir`](Self::load_dir) with options (e.g. recursive), calling
    /// `progress(index, total, path)` before each file (for a progress bar: compiling takes a
    /// while where the cache is cold).
    pub fn load_dir_with(
        &self,
        dir: impl AsRef<Path>,
        options: LoadDirOptions,
        mut progress: impl FnMut(usize, usize, &Path),
    ) -> Result<PluginDir, PluginError> {
        let dir = dir.as_ref();
        let io = |source| PluginError::Directory {
            path: dir.to_owned(),
            source,
        };
        let root = dir.canonicalize().map_err(io)?;
        let walk = options.walk(dir).map_err(io)?;
        let mut paths = walk.files;
        paths.retain(|path| path.extension().is_some_and(|ext| ext == "wasm"));
        // A trust policy beside the plugins says they are verified: that is done through the
        // lock (pulled plugins' provenance), so without one nothing would be checked.
        let trusting = dir
            .join(crate::trust::TRUST_FILE)
            .symlink_metadata()
            .is_ok();
        let lock = if options.ignore_lock {
            None
        } else if options.locked || trusting {
            Some(crate::lock::LockFile::read_required(dir)?)
        } else {
            crate::lock::LockFile::read(dir)?
        };

        // Pulled plugins whose signer the trust policy no longer allows (host/src/lock/source.rs).
        let source_refusals = lock
            .as_ref()
            .map(|lock| lock.source_refusals(dir))
            .unwrap_or_default();

        let mut loaded = Vec::new();
        let mut failures: Vec<PluginError> = walk
            .unreadable
            .into_iter()
            .map(|(path, source)| PluginError::Directory { path, source })
            .collect();
        if let Some(lock) = &lock {
            // A locked plugin that is gone is reported (the directory is not what was approved).
            for gone in lock.gone(dir, &paths) {
                let reason = "it is locked, but the file is gone".to_owned();
                failures.push(PluginError::not_approved(dir, &gone, reason));
            }
        }
        let total = paths.len();
        for (index, path) in paths.into_iter().enumerate() {
            progress(index, total, &path);
            match std::fs::canonicalize(&path) {
                Ok(target) if !target.starts_with(&root) => {
                    failures.push(PluginError::OutsideDirectory { path, target });
                    continue;
                }
                Ok(target) if target.is_dir() => continue,
                Ok(_) => {}
                Err(source) => {
                    failures.push(PluginError::Io { path, source });
                    continue;
                }
            }
            if let Some(reason) = source_refusals.get(&crate::lock::relative_name(dir, &path)) {
                failures.push(PluginError::not_approved(dir, &path, reason.clone()));
                continue;
            }
            // The plugin and its policy are read only from inside the directory, checked on the
            // files opened: a link out of it could lead to a file some plugin may write (and so
            // grant itself more at the next reload), and one swapped after a check by path
            // would pass it.
            let attempt = match &lock {
                None => self.load_file(&path, None, Some(&root)),
                Some(lock) => lock
                    .approval(dir, &path)
                    .map_err(|reason| PluginError::not_approved(dir, &path, reason))
                    .and_then(|entry| self.load_file(&path, Some((dir, entry)), Some(&root))),
            };
            match attempt {
                Ok(plugin) if options.recursive => match writable_grant_within(&plugin, &root) {
                    Some(error) => failures.push(error),
                    None => loaded.push(plugin),
                },
                Ok(plugin) => loaded.push(plugin),
                Err(error) => failures.push(error),
            }
        }

        // A plugin or policy file (reached through a link inside the directory) in a
        // read-write grant of a plugin: that plugin could rewrite it, and with it what the
        // plugin it belongs to is, or is granted, at the next load. That plugin is refused (its
        // files are not what the operator can vouch for); the one with the grant is not.
        let writable = writable_grants(loaded.iter());
        if !writable.is_empty() {
            let mut kept = Vec::with_capacity(loaded.len());
            for plugin in loaded {
                match held_by_a_grant(&plugin, &writable) {
                    Some(error) => failures.push(error),
                    None => kept.push(plugin),
                }
            }
            loaded = kept;
        }

        // Refuse both plugins of every clash of tool names, resource URIs, resource templates
        // or prompt names.
        let names: Vec<Vec<(&str, String)>> = loaded.iter().map(LoadedPlugin::offered).collect();
        let clashes = crate::clash::mutual(&names);
        for (plugin, clash) in loaded.iter().zip(&clashes) {
            if let Some(((kind, name), other)) = clash {
                let path = plugin.path().to_owned();
                let other = loaded[*other].path().to_owned();
                failures.push(if *kind == "tool" {
                    PluginError::ToolNameClash {
                        path,
                        other,
                        tool: name.clone(),
                    }
                } else {
                    PluginError::OfferingClash {
                        path,
                        other,
                        kind,
                        name: name.clone(),
                    }
                });
            }
        }
        let mut clashing: Vec<bool> = clashes.iter().map(Option::is_some).collect();
        // A fixed resource URI of one plugin that a template of another matches, or templates
        // of two that some URI could match both: a read of it would have two answers. Both are
        // refused, like any clash.
        for (at, plugin) in loaded.iter().enumerate() {
            for (other_at, other) in loaded.iter().enumerate().skip(at + 1) {
                if let Some(uri) = crate::clash::uri_clash(plugin, other) {
                    for (this, that) in [(at, other_at), (other_at, at)] {
                        if clashing[this] {
                            continue;
                        }
                        clashing[this] = true;
                        failures.push(PluginError::OfferingClash {
                            path: loaded[this].path().to_owned(),
                            other: loaded[that].path().to_owned(),
                            kind: "resource",
                            name: uri.to_owned(),
                        });
                    }
                }
            }
        }
        // A grant of one plugin that another's read-write grant could redirect (a link put in
        // its way): the one whose grant it is is refused.
        let writes =
            |plugin: &LoadedPlugin| plugin.policy().dirs.iter().any(|grant| grant.writable);
        let ways: Vec<crate::clash::GrantWays> = if loaded.iter().any(writes) {
            loaded.iter().map(crate::clash::GrantWays::of).collect()
        } else {
            Vec::new()
        };
        for (at, plugin) in loaded.iter().enumerate().filter(|_| !ways.is_empty()) {
            let redirectable = loaded
                .iter()
                .enumerate()
                .filter(|&(other_at, _)| other_at != at)
                .find_map(|(_, other)| crate::clash::grant_clash(&ways[at], other));
            if let Some((index, message)) = redirectable {
                if !clashing[at] {
                    failures.push(PluginError::Policy {
                        path: plugin.path().to_owned(),
                        source: PolicyError::Invalid {
                            path: SandboxPolicy::path_for(plugin.path()),
                            key: format!("dirs[{index}].host"),
                            message,
                        },
                    });
                }
                clashing[at] = true;
            }
        }
        let plugins = loaded
            .into_iter()
            .zip(clashing)
            .filter_map(|(plugin, clash)| (!clash).then_some(plugin))
            .collect();
        Ok(PluginDir {
            plugins,
            failures,
            warnings: options.stray_policies(dir),
            locked: lock.is_some(),
        })
    }
}

/// In a directory loaded recursively, a read-write grant inside it would let a plugin add
/// plugins or policies that the next load picks up: refuse such a plugin, naming the grant.
fn writable_grant_within(plugin: &LoadedPlugin, root: &Path) -> Option<PluginError> {
    let (index, grant) = plugin
        .policy()
        .dirs
        .iter()
        .enumerate()
        .find(|(_, grant)| grant.writable && grant.host.starts_with(root))?;
    Some(PluginError::Policy {
        path: plugin.path().to_owned(),
        source: PolicyError::Invalid {
            path: SandboxPolicy::path_for(plugin.path()),
            key: format!("dirs[{index}].host"),
            message: format!(
                "is {}, a read-write directory inside {}, which is loaded recursively: the \
                 plugin could add plugins or policies there; grant a directory outside it, \
                 make it read-only, or load without --recursive",
                grant.host.display(),
                root.display()
            ),
        },
    })
}

/// The read-write grants of `plugins`: the directory, and the plugin holding it.
pub(crate) fn writable_grants<'a>(
    plugins: impl Iterator<Item = &'a LoadedPlugin>,
) -> Vec<(PathBuf, PathBuf)> {
    plugins
        .flat_map(|plugin| {
            plugin
                .policy()
                .dirs
                .iter()
                .filter(|grant| grant.writable)
                .map(|grant| (grant.host.clone(), plugin.path().to_owned()))
        })
        .collect()
}

/// Why `plugin` is refused, if its file or its policy file really is (links followed) in one
/// of the `writable` grants.
pub(crate) fn held_by_a_grant(
    plugin: &LoadedPlugin,
    writable: &[(PathBuf, PathBuf)],
) -> Option<PluginError> {
    let policy = SandboxPolicy::path_for(plugin.path());
    for file in [plugin.path(), policy.as_path()] {
        let Ok(real) = std::fs::canonicalize(file) else {
            continue;
        };
        let Some((grant, holder)) = writable.iter().find(|(grant, _)| real.starts_with(grant))
        else {
            continue;
        };
        let why = std::io::Error::other(format!(
            "it is a link to {}, in {}, a read-write directory of plugin {}, which could rewrite \
             it; keep plugins and policies out of read-write grants (or make the grant \
             read-only)",
            real.display(),
            grant.display(),
            holder.display()
        ));
        return Some(if file == plugin.path() {
            PluginError::Io {
                path: plugin.path().to_owned(),
                source: why,
            }
        } else {
            PluginError::Policy {
                path: plugin.path().to_owned(),
                source: PolicyError::Io {
                    path: policy.clone(),
                    source: why,
                },
            }
        });
    }
    None
}

/// How [`PluginHost::load_dir_with`] reads a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadDirOptions {
    /// Also load plugins in subdirectories (links to directories are not followed).
    pub recursive: bool,
    /// With `recursive`, also read build output directories (named `target`), which are
    /// skipped by default: they hold intermediate copies of every plugin built there.
    pub include_build_dirs: bool,
    /// Load whatever is there, even if the directory has a lock file (to write a new one).
    pub ignore_lock: bool,
    /// The directory must have a lock file: without one, loading fails
    /// ([`crate::lock::LockError::Missing`]) instead of loading everything. `serve` sets it for every
    /// reload of a directory that was locked when it started (`--locked` sets it from the
    /// start), so that deleting the lock never unlocks it.
    pub locked: bool,
}

impl LoadDirOptions {
    /// Sets whether subdirectories are read too.
    pub fn recursive(mut self, recursive: bool) -> Self {
        self.recursive = recursive;
        self
    }

    /// Sets whether the directory's lock file is ignored (see [`crate::lock::LockFile`]).
    pub fn ignore_lock(mut self, ignore: bool) -> Self {
        self.ignore_lock = ignore;
        self
    }

    /// Sets whether the directory must have a lock file (see [`LoadDirOptions::locked`]).
    pub fn locked(mut self, locked: bool) -> Self {
        self.locked = locked;
        self
    }

    /// Sets whether `target` directories are read when reading subdirectories.
    pub fn include_build_dirs(mut self, include: bool) -> Self {
        self.include_build_dirs = include;
        self
    }

    /// The files of `dir` these options read, sorted, and the subdirectories that could not
    /// be read (with why). `dir` itself unreadable, or more than [`MAX_DIR_ENTRIES`] entries,
    /// is an error.
    fn walk(&self, dir: &Path) -> std::io::Result<Walk> {
        let mut walk = Walk::default();
        let mut entries = 0usize;
        let mut pending = vec![dir.to_owned()];
        while let Some(current) = pending.pop() {
            let listing = match std::fs::read_dir(&current) {
                Ok(listing) => listing,
                Err(error) if current == dir => return Err(error),
                // One subdirectory that cannot be read is a failure of its own, not of the
                // whole directory (which would keep a reload from removing anything).
                Err(error) => {
                    walk.unreadable.push((current, error));
                    continue;
                }
            };
            for entry in listing {
                entries += 1;
                if entries > MAX_DIR_ENTRIES {
                    return Err(std::io::Error::other(format!(
                        "it holds more than {MAX_DIR_ENTRIES} entries{}; keep plugins in a \
                         directory of their own",
                        if self.recursive {
                            " with its subdirectories"
                        } else {
                            ""
                        }
                    )));
                }
                let Ok(entry) = entry else { continue };
                let path = entry.path();
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if is_dir {
                    let build_output = entry.file_name() == "target" && !self.include_build_dirs;
                    if self.recursive && !build_output {
                        pending.push(path);
                    }
                } else {
                    walk.files.push(path);
                }
            }
        }
        walk.files.sort();
        walk.unreadable.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(walk)
    }

    /// The files of `dir` these options read, sorted (subdirectories that cannot be read left
    /// out).
    fn files(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        Ok(self.walk(dir)?.files)
    }

    /// The `*.wasm` files these options take from `dir`, sorted (those of subdirectories that
    /// cannot be read left out: loading the directory reports each such subdirectory).
    pub fn plugin_files(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut files = self.files(dir)?;
        files.retain(|path| path.extension().is_some_and(|ext| ext == "wasm"));
        Ok(files)
    }

    /// Warnings about the `*.toml` files of `dir` that are the policy of no plugin (a policy
    /// file with a typo in its name silently grants nothing, or not what was meant).
    fn stray_policies(&self, dir: &Path) -> Vec<String> {
        let Ok(files) = self.files(dir) else {
            return Vec::new();
        };
        let plugins: Vec<&PathBuf> = files
            .iter()
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        files
            .iter()
            .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
            .filter(|path| {
                let name = path.file_name().unwrap_or_default();
                // The files beside the plugins that are not their policies: a crate's, the
                // lock, the trust policy, and the access policy (renaming it on this warning's
                // word would give every identity every tool).
                name != "Cargo.toml"
                    && name != "rust-toolchain.toml"
                    && name != crate::lock::LOCK_FILE
                    && name != crate::trust::TRUST_FILE
                    && name != crate::lock::ACCESS_FILE
            })
            .filter(|policy| {
                !plugins
                    .iter()
                    .any(|p| SandboxPolicy::path_for(p) == **policy)
            })
            .map(|policy| {
                let name = policy.file_name().unwrap_or_default().to_string_lossy();
                let stem = name
                    .strip_suffix(".wasm.policy.toml")
                    .or_else(|| name.strip_suffix(".policy.toml"))
                    .or_else(|| name.strip_suffix(".toml"))
                    .unwrap_or(&name);
                let plugin = policy.with_file_name(format!("{stem}.wasm"));
                if plugins.contains(&&plugin) {
                    format!(
                        "{} is not read: the policy of {} must be named {}",
                        policy.display(),
                        plugin.display(),
                        SandboxPolicy::path_for(&plugin).display()
                    )
                } else {
                    format!(
                        "{} is the policy of no plugin (there is no {}); a policy file is named \
                         after its plugin: NAME.policy.toml beside NAME.wasm",
                        policy.display(),
                        plugin.display()
                    )
                }
            })
            .collect()
    }
}

/// The plugins of a directory: those that loaded, and why the others did not.
#[derive(Debug)]
#[non_exhaustive]
pub struct PluginDir {
    /// The plugins that loaded, sorted by file name.
    pub plugins: Vec<LoadedPlugin>,
    /// The files that were refused, with the reasons.
    pub failures: Vec<PluginError>,
    /// Other things worth telling the operator: policy files that belong to no plugin.
    pub warnings: Vec<String>,
    /// Whether the directory's lock was read and every plugin that loaded checked against it
    /// (`false` without a lock, or with the lock ignored).
    pub locked: bool,
}

impl PluginDir {
    /// Definitions of every tool of every plugin, for one new session.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.plugins
            .iter()
            .flat_map(LoadedPlugin::definitions)
            .collect()
    }
}

/// The most entries (files and directories) a plugin directory may hold, its subdirectories
/// included when they are read: a directory is listed on every rescan of `serve --watch`.
pub(crate) const MAX_DIR_ENTRIES: usize = 10_000;

/// What reading a plugin directory found.
#[derive(Default)]
struct Walk {
    files: Vec<PathBuf>,
    /// Subdirectories that could not be read, and why.
    unreadable: Vec<(PathBuf, std::io::Error)>,
}
