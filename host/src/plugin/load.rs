//! The load pipeline of one plugin, as named steps: read the file and its policy (checked
//! against the directory's lock, if any, before either is parsed), resolve and open the
//! directory grants, check the header, compile (or take from the cache), check the contract
//! version, link, check the exports, run it once with no grants to read its tool list, and
//! validate that list into the [`ToolMeta`]s, compiled schemas and vouched hints of a
//! [`LoadedPlugin`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{Component, InstancePre};

use llm_worker_rules::contract::CURRENT;

use super::bindings::{PluginPre, PluginToolMeta, VERSIONS, is_concurrent_version};
use super::host::Runtime;
use super::instance::{PluginListing, PluginState, StartSpec};
use super::loaded::{Offerings, PluginImage, ValidTools};
use super::validate::{self, ToolListProblem};
use super::{LoadedPlugin, PluginError, PluginHost, annotations, blocking, descriptors, instance};
use crate::lock::LockedPlugin;
use crate::policy::{PolicyError, SandboxPolicy};
use crate::tool::ToolMeta;

/// Name lookups all the instances of one plugin (every session's) may have running at once,
/// their ended requests' included: a plugin whose names' nameserver hangs, started in many
/// sessions (each stateless request's, each instance restarted after a dropped call), holds at
/// most these of the host's places.
pub(crate) const MAX_LOOKUPS_PER_PLUGIN: usize = 8;

impl PluginHost {
    /// Reads, compiles and validates the plugin at `path`.
    ///
    /// This compiles the component (CPU-heavy: tens to hundreds of milliseconds) and runs it
    /// once to read its tool list; from async code, call it in `spawn_blocking`. Nothing is
    /// registered: call [`LoadedPlugin::definitions`] and register those.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<LoadedPlugin, PluginError> {
        self.load_file(path.as_ref(), None, None)
    }

    /// Loads a plugin file with its policy file; with `approved` (the directory and its lock
    /// entry), only if both are the ones the entry names (checked before anything of them is
    /// parsed or compiled) and its directory grants lead where the entry says; with `within`
    /// (its directory's real path), only if the files opened, links followed, are inside it.
    pub(super) fn load_file(
        &self,
        path: &Path,
        approved: Option<(&Path, &LockedPlugin)>,
        within: Option<&Path>,
    ) -> Result<LoadedPlugin, PluginError> {
        let policy_error = |source| PluginError::Policy {
            path: path.to_owned(),
            source,
        };
        let policy_path = SandboxPolicy::path_for(path);
        // Approved by a lock, the lock's own checks covered the directory (it is refused in one
        // others may write) and the bytes. Without one, whatever is there runs: the files and
        // their directory must be ones only this user (or root) can change, checked before
        // they are read.
        // A policy that was not there when checked is not read, whatever appears later.
        let policy_checked = approved.is_some() || shared(path, Some(&policy_path))?;
        // A name that is there, a link leading nowhere included, is a policy to read: a
        // dangling link is refused, not taken for "no policy".
        let policy_text = if policy_checked && policy_path.symlink_metadata().is_ok() {
            Some(SandboxPolicy::read_text_within(&policy_path, within).map_err(policy_error)?)
        } else {
            None
        };
        let policy_sha256 = policy_text
            .as_deref()
            .map(|text| crate::digest::sha256_hex(text.as_bytes()));
        let bytes = self.read_plugin_file(path, within)?;
        if let Some((dir, entry)) = approved {
            entry
                .approves_files(
                    &crate::digest::sha256_hex(&bytes),
                    policy_sha256.as_deref(),
                    &policy_path,
                )
                .map_err(|reason| PluginError::not_approved(dir, path, reason))?;
        }
        let policy = match &policy_text {
            Some(text) => SandboxPolicy::parse(text, &policy_path, &self.inner.limits)
                .map_err(policy_error)?,
            None => SandboxPolicy::with_limits(self.inner.limits.clone()),
        };
        let (policy, granted_dirs) = self.resolve_dir_grants(path, policy)?;
        if let Some((dir, entry)) = approved {
            entry
                .approves_grants(&policy)
                .map_err(|reason| PluginError::not_approved(dir, path, reason))?;
        }
        let mut plugin = self.load_resolved(path, &bytes, policy, granted_dirs)?;
        if let Some((dir, entry)) = approved {
            entry
                .approves_listing(&plugin)
                .map_err(|reason| PluginError::not_approved(dir, path, reason))?;
        }
        if let Some(image) = Arc::get_mut(&mut plugin.image) {
            image.policy_sha256 = policy_sha256;
            image.listing_locked = approved.is_some();
        }
        Ok(plugin)
    }

    /// Like [`load`](Self::load), with a policy given in code instead of a policy file.
    pub fn load_with_policy(
        &self,
        path: impl AsRef<Path>,
        policy: SandboxPolicy,
    ) -> Result<LoadedPlugin, PluginError> {
        let path = path.as_ref();
        shared(path, None)?;
        let bytes = self.read_plugin_file(path, None)?;
        self.load_bytes_with_policy(path, &bytes, policy)
    }

    /// Compiles and validates a plugin given as bytes, with the host's limits and no grants;
    /// `path` names it in messages and its file stem becomes the plugin's name.
    pub fn load_bytes(
        &self,
        path: impl AsRef<Path>,
        bytes: &[u8],
    ) -> Result<LoadedPlugin, PluginError> {
        let policy = SandboxPolicy::with_limits(self.inner.limits.clone());
        self.load_bytes_with_policy(path.as_ref(), bytes, policy)
    }

    fn load_bytes_with_policy(
        &self,
        path: &Path,
        bytes: &[u8],
        policy: SandboxPolicy,
    ) -> Result<LoadedPlugin, PluginError> {
        let (policy, granted_dirs) = self.resolve_dir_grants(path, policy)?;
        self.load_resolved(path, bytes, policy, granted_dirs)
    }

    /// Compiles and validates a plugin under a policy whose directory grants are resolved.
    fn load_resolved(
        &self,
        path: &Path,
        bytes: &[u8],
        policy: SandboxPolicy,
        granted_dirs: Arc<[descriptors::HeldDir]>,
    ) -> Result<LoadedPlugin, PluginError> {
        self.check_policy_limits(path, &policy)?;
        self.check_header(path, bytes)?;
        let sha256 = crate::digest::sha256(bytes);
        let (component, runtime) = self.compile(path, bytes, &sha256)?;
        let version = self.check_version(path, &component)?;
        if version.is_some_and(is_concurrent_version) && !std::ptr::eq(runtime, self.runtime(true))
        {
            // Not expected: `needs_concurrency` reads the names `check_version` does.
            return Err(PluginError::Invalid {
                path: path.to_owned(),
                reason: "its contract needs the component model's concurrency, which its \
                         imports and exports did not show before it was compiled"
                    .into(),
            });
        }
        let pre = self.link(runtime, path, &component, &policy)?;
        self.check_exports(path, &component)?;
        let pre = world(path, version, pre)?;
        if pre.is_concurrent() != std::ptr::eq(runtime, self.runtime(true)) {
            // Not expected: the engine is chosen by the names the world is.
            return Err(PluginError::Invalid {
                path: path.to_owned(),
                reason: "its contract and the engine it was compiled for disagree about the \
                         component model's concurrency; report this as a bug of the host"
                    .into(),
            });
        }
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".to_owned());
        let imports: Vec<String> = component
            .component_type()
            .imports(component.engine())
            .map(|(name, _)| name.to_owned())
            .collect();
        let listing = self.read_tools(path, &pre, &policy)?;
        let offerings = validated_offerings(path, &listing)?;
        let offers_more = !(offerings.resources.is_empty()
            && offerings.templates.is_empty()
            && offerings.prompts.is_empty());
        let tools = validated_tools(path, &name, &policy, listing.tools, offers_more)?;
        Ok(LoadedPlugin {
            image: Arc::new(PluginImage {
                sha256,
                policy_sha256: None,
                listing_locked: false,
                name,
                path: path.to_owned(),
                pre,
                policy,
                imports,
                granted_dirs,
                descriptors: Arc::clone(&self.inner.descriptors),
                lookups: Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS_PER_PLUGIN)),
                _host: Arc::clone(&self.inner),
                tools,
                offerings,
            }),
        })
    }

    /// Refuses a policy whose limits this host cannot honour (fuel on a host that does not
    /// meter it, or limits out of range).
    fn check_policy_limits(&self, path: &Path, policy: &SandboxPolicy) -> Result<(), PluginError> {
        let invalid = |key: &str, message: String| PluginError::Policy {
            path: path.to_owned(),
            source: PolicyError::Invalid {
                path: SandboxPolicy::path_for(path),
                key: key.into(),
                message,
            },
        };
        if policy.limits.fuel.is_some() && self.inner.limits.fuel.is_none() {
            return Err(invalid(
                "limits.fuel",
                "needs a host with fuel metering (`--fuel UNITS` on the command line, or \
                 `Limits::fuel` on the host); remove it to rely on the time limit"
                    .into(),
            ));
        }
        policy
            .limits
            .check()
            .map_err(|message| invalid("limits", message))
    }

    /// Refuses bytes over the size cap, and anything but a WebAssembly component by its
    /// header (a core module and other files each with their own message).
    fn check_header(&self, path: &Path, bytes: &[u8]) -> Result<(), PluginError> {
        if bytes.len() as u64 > self.inner.max_file_bytes {
            return Err(PluginError::TooLarge {
                path: path.to_owned(),
                size: bytes.len() as u64,
                limit: self.inner.max_file_bytes,
            });
        }
        let path = path.to_owned();
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00]) => Ok(()),
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Err(PluginError::CoreModule { path }),
            Some([0, b'a', b's', b'm', ..]) => Err(PluginError::Invalid {
                path,
                reason: "unknown WebAssembly version or layer in the header".into(),
            }),
            _ => Err(PluginError::NotWasm { path }),
        }
    }

    /// Compiles the component, or deserializes it from the compiled cache, for the engine its
    /// contract needs ([`needs_concurrency`]); returns it with that engine's runtime.
    fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
        sha256: &[u8; 32],
    ) -> Result<(Component, &Runtime), PluginError> {
        let compile_for = |runtime: &Runtime| match &self.inner.cache {
            Some(cache) => cache
                .load_or_compile(&runtime.engine, bytes, sha256, path)
                .map(|(component, _)| component),
            None => Component::new(&runtime.engine, bytes),
        };
        // Counted before compiling: wasmtime lays out every nested instance as it compiles.
        if let Some(reason) = super::structure::refusal_of(bytes) {
            return Err(PluginError::Invalid {
                path: path.to_owned(),
                reason,
            });
        }
        let concurrent = needs_concurrency(bytes);
        let runtime = self.runtime(concurrent);
        // A component of an older contract is compiled once, without the component model's
        // concurrency: one made with its asynchronous calling convention is refused, not
        // served elsewhere. Those contracts run one call at a time, and code an async export
        // left running after it returned would run for no call, outside the bounds a contract
        // 1.0.0 instance keeps on such code.
        compile_for(runtime)
            .map(|component| (component, runtime))
            .map_err(|e| PluginError::Invalid {
                path: path.to_owned(),
                reason: if concurrent || !mentions_async(&format!("{e:#}")) {
                    format!("{e:#}")
                } else {
                    format!(
                        "{e:#}; it names no interface of contract 1.0.0, so it was compiled as \
                         a plugin of contracts 0.1.0-0.3.0, which may not use the component \
                         model's asynchronous calling convention (async functions, streams, \
                         futures): build it against wit/1.0.0 if it needs that"
                    )
                },
            })
    }

    /// Links the component's imports: WASI, and `wasi:http` only where the policy grants it
    /// (a plugin importing it without a grant is told which grant it lacks).
    fn link(
        &self,
        runtime: &Runtime,
        path: &Path,
        component: &Component,
        policy: &SandboxPolicy,
    ) -> Result<InstancePre<PluginState>, PluginError> {
        let linker = self.linker_for(runtime, path, policy)?;
        linker.instantiate_pre(component).map_err(|e| {
            let reason = format!("{e:#}");
            let reason = if policy.http.is_empty() && reason.contains("wasi:http/") {
                format!(
                    "{reason}; it imports wasi:http, which is linked only for plugins whose \
                     policy grants HTTP: add the destinations it needs to [http] allow in {}",
                    SandboxPolicy::path_for(path).display()
                )
            } else {
                reason
            };
            PluginError::UnsupportedImport {
                path: path.to_owned(),
                reason,
            }
        })
    }

    /// Resolves each directory grant to its real path and opens it there (every instance is
    /// given the directory opened, and refuses to start if the path has since been made to
    /// lead elsewhere), and refuses grants through which a plugin could
    /// change what the host runs: one that holds the plugin's own directory (it could replace
    /// itself, its policy or other plugins) or that overlaps the compiled cache (native code
    /// the host loads); and grants holding a path the embedder protects (its secrets).
    pub(super) fn resolve_dir_grants(
        &self,
        path: &Path,
        mut policy: SandboxPolicy,
    ) -> Result<(SandboxPolicy, Arc<[descriptors::HeldDir]>), PluginError> {
        let invalid = |index: usize, message: String| PluginError::Policy {
            path: path.to_owned(),
            source: PolicyError::Invalid {
                path: SandboxPolicy::path_for(path),
                key: format!("dirs[{index}].host"),
                message,
            },
        };
        for (index, grant) in policy.dirs.iter_mut().enumerate() {
            // A grant built in code: as given, before it is resolved.
            if policy.written_dirs.len() == index {
                policy
                    .written_dirs
                    .push(std::path::absolute(&grant.host).unwrap_or_else(|_| grant.host.clone()));
            }
            grant.host = grant.host.canonicalize().map_err(|e| {
                invalid(
                    index,
                    format!("is {}, which cannot be opened: {e}", grant.host.display()),
                )
            })?;
        }
        // The plugin's own directory and every compiled cache a host of this user may read —
        // this host's (even if it is not usable now: it may be later) and the default ones
        // (where a host without settings reads, by `XDG_CACHE_HOME` or by `HOME`) — each with
        // every directory on the way to it, as written and resolved: a grant holding one
        // could replace the entry after it (a link) and so what the path leads to.
        let plugin_dir = path
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."));
        // Nothing to compare without grants; and a path that cannot be resolved (no current
        // directory) fails closed.
        let unresolved = || {
            invalid(
                0,
                "cannot be checked: where the plugin's directory or a compiled cache is cannot \
                 be resolved (is the current directory gone?); start the host from an \
                 existing directory"
                    .to_owned(),
            )
        };
        let (plugin_dirs, caches, protected) = if policy.dirs.is_empty() {
            (Vec::new(), Vec::new(), Vec::new())
        } else {
            let plugin_dirs = crate::file::deciding_dirs(plugin_dir).ok_or_else(unresolved)?;
            let caches: Vec<(PathBuf, Vec<PathBuf>)> = self
                .inner
                .cache
                .as_ref()
                .map(|cache| cache.dir().to_owned())
                .into_iter()
                .chain(crate::PluginHost::default_cache_dirs())
                .map(|dir| {
                    Some((
                        crate::file::real_path_of(&dir)?,
                        crate::file::deciding_dirs(&dir)?,
                    ))
                })
                .collect::<Option<_>>()
                .ok_or_else(unresolved)?;
            let protected: Vec<(&Path, PathBuf, Vec<PathBuf>)> = self
                .inner
                .protected
                .iter()
                .map(|path| {
                    Some((
                        path.as_path(),
                        crate::file::real_path_of(path)?,
                        crate::file::deciding_dirs(path)?,
                    ))
                })
                .collect::<Option<_>>()
                .ok_or_else(unresolved)?;
            (plugin_dirs, caches, protected)
        };
        for (index, grant) in policy.dirs.iter().enumerate() {
            let granted = &grant.host;
            let problem = if plugin_dirs.iter().any(|dir| dir.starts_with(granted)) {
                Some(
                    "holds the plugin's own directory or a directory on the way to it: the \
                     plugin could replace itself, its policy or other plugins there",
                )
            } else if caches.iter().any(|(cache, way)| {
                granted.starts_with(cache) || way.iter().any(|dir| dir.starts_with(granted))
            }) {
                Some(
                    "overlaps a compiled cache (this host's or a default one) or holds a \
                     directory on the way to one, whose native code hosts run",
                )
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(invalid(
                    index,
                    format!(
                        "is {}, which {problem}; grant a directory of its own instead",
                        granted.display()
                    ),
                ));
            }
            if let Some((secret, _, _)) = protected.iter().find(|(_, real, way)| {
                granted.starts_with(real) || way.iter().any(|dir| dir.starts_with(granted))
            }) {
                return Err(invalid(
                    index,
                    format!(
                        "is {}, which holds {} (or a directory on the way to it) or lies inside \
                         it, a path of the host's that no plugin may read or replace; grant a \
                         directory of its own instead",
                        granted.display(),
                        secret.display()
                    ),
                ));
            }
        }
        let held = policy
            .dirs
            .iter()
            .enumerate()
            .map(|(index, grant)| {
                descriptors::HeldDir::open(&grant.host).map_err(|e| {
                    invalid(
                        index,
                        format!(
                            "is {}, which cannot be opened as a directory (not following \
                             links): {e}",
                            grant.host.display()
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((policy, held))
    }

    /// Refuses components built against a version of our package this host does not load,
    /// naming both; returns the version found (`None` if no name carries one).
    fn check_version(
        &self,
        path: &Path,
        component: &Component,
    ) -> Result<Option<&'static str>, PluginError> {
        let engine = component.engine();
        let ty = component.component_type();
        let names = ty
            .imports(engine)
            .map(|(name, _)| name.to_owned())
            .chain(ty.exports(engine).map(|(name, _)| name.to_owned()));
        let mut version = None;
        for name in names {
            let Some(found) = validate::package_version(&name) else {
                continue;
            };
            match validate::compatible_version(found) {
                Some(ours) if version.is_none_or(|v| v == ours) => version = Some(ours),
                _ => {
                    return Err(PluginError::WrongVersion {
                        path: path.to_owned(),
                        found: if found.is_empty() {
                            "(unversioned)".into()
                        } else {
                            found.into()
                        },
                        expected: super::error::versions_text(),
                    });
                }
            }
        }
        Ok(version)
    }

    /// Refuses components that do not export the world's functions, naming what they export.
    fn check_exports(&self, path: &Path, component: &Component) -> Result<(), PluginError> {
        let engine = component.engine();
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let missing: Vec<&str> = ["tools", "execute"]
            .into_iter()
            .filter(|needed| !exports.iter().any(|e| e == needed))
            .collect();
        if !missing.is_empty() {
            // Named within bounds: a component may export thousands of long names.
            const SHOWN: usize = 20;
            let exported = if exports.is_empty() {
                "nothing".to_owned()
            } else {
                let mut shown: Vec<String> = exports
                    .iter()
                    .take(SHOWN)
                    .map(|name| llm_worker_rules::tool::VisibleCut(name, 64).to_string())
                    .collect();
                if exports.len() > SHOWN {
                    shown.push(format!("and {} more", exports.len() - SHOWN));
                }
                shown.join(", ")
            };
            return Err(PluginError::WrongWorld {
                path: path.to_owned(),
                reason: format!(
                    "it does not export {}; it exports {exported}. Build it against \
                     wit/{CURRENT}/tool.wit",
                    missing.join(" and ")
                ),
            });
        }
        Ok(())
    }

    /// Runs the plugin once to read its tool list, with its limits but **none of its grants**:
    /// no directories, environment, HTTP destinations or secrets. Listing tools (for `check`,
    /// `list`, `schema` or `lock`, i.e. before anyone approved the plugin) must not hand
    /// unreviewed code what its policy grants.
    fn read_tools(
        &self,
        path: &Path,
        pre: &PluginPre<PluginState>,
        policy: &SandboxPolicy,
    ) -> Result<PluginListing, PluginError> {
        let name = path.display().to_string();
        let spec = StartSpec {
            name: &name,
            pre,
            policy: &SandboxPolicy::with_limits(policy.limits.clone()),
            granted_dirs: &[],
            descriptors: &self.inner.descriptors,
            // Its grants are not given to this instance: it looks nothing up.
            lookups: &Arc::new(tokio::sync::Semaphore::new(0)),
            changed: None,
        };
        blocking::block_on(instance::read_tools(&spec)).map_err(|failure| {
            if failure.cause == instance::StartCause::HostCapacity {
                PluginError::HostBusy {
                    path: path.to_owned(),
                    reason: failure.reason,
                }
            } else {
                PluginError::Startup {
                    path: path.to_owned(),
                    reason: failure.reason,
                }
            }
        })
    }
}

/// The component as an instance of the `tool-plugin` world of its contract version. A
/// component names the version in its imports (`llm-worker:tool/types@0.2.0`); one that names
/// none is tried against the newest world, then the older.
fn world(
    path: &Path,
    version: Option<&'static str>,
    pre: InstancePre<PluginState>,
) -> Result<PluginPre<PluginState>, PluginError> {
    match version {
        Some(version) => PluginPre::new(version, pre),
        // Newest first.
        None => PluginPre::new(VERSIONS[2], pre.clone())
            .or_else(|_| PluginPre::new(VERSIONS[1], pre.clone()))
            .or_else(|_| PluginPre::new(VERSIONS[0], pre)),
    }
    .map_err(|e| PluginError::WrongWorld {
        path: path.to_owned(),
        reason: format!("{e:#}"),
    })
}

/// Whether a compiler's refusal is about the component model's asynchronous features (what the
/// engine of the older contracts lacks), so that the refusal says which contract has them.
fn mentions_async(refusal: &str) -> bool {
    let refusal = refusal.to_ascii_lowercase();
    refusal.contains("async") || refusal.contains("concurren")
}

/// Whether the component at `bytes` needs an engine with the component model's concurrency:
/// whether the names it imports and exports (at its top level, as [`PluginHost::check_version`]
/// reads them once compiled) name a contract whose instances serve several calls at once. A
/// component this cannot read goes to that engine too, which says what is wrong with it.
fn needs_concurrency(bytes: &[u8]) -> bool {
    use wasmtime::wasmparser::{Parser, Payload};
    let concurrent_name = |name: &str| {
        validate::package_version(name)
            .and_then(validate::compatible_version)
            .is_some_and(is_concurrent_version)
    };
    // Nested modules and components have sections of their own: only the outermost count.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            return true;
        };
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(imports) if depth == 0 => {
                for import in imports {
                    match import {
                        Ok(import) if !concurrent_name(&import.name.full_name()) => {}
                        _ => return true,
                    }
                }
            }
            Payload::ComponentExportSection(exports) if depth == 0 => {
                for export in exports {
                    match export {
                        Ok(export) if !concurrent_name(&export.name.full_name()) => {}
                        _ => return true,
                    }
                }
            }
            _ => {}
        }
    }
    false
}

/// Validates the resources, templates and prompts a plugin listed (contract 0.3.0).
fn validated_offerings(path: &Path, listing: &PluginListing) -> Result<Offerings, PluginError> {
    use validate::offerings;
    let refused = |reason: String| PluginError::WrongWorld {
        path: path.to_owned(),
        reason: format!("what it offers is refused: {reason}"),
    };
    offerings::check_resources(&listing.resources).map_err(refused)?;
    offerings::check_templates(&listing.templates).map_err(refused)?;
    offerings::check_prompts(&listing.prompts).map_err(refused)?;
    Ok(Offerings {
        comparable: listing
            .resources
            .iter()
            .map(|resource| offerings::comparable_uri(&resource.uri))
            .collect(),
        resources: listing.resources.clone(),
        templates: listing.templates.clone(),
        prompts: listing.prompts.clone(),
    })
}

/// Validates the tool list a plugin gave: the caps on its size, each name, title, input and
/// output schema (compiled within the policy's schema memory budget), the policy's per-tool
/// keys naming tools that exist, and the hints the policy lets the host vouch for (those it
/// contradicts are dropped, with a warning). An empty list is refused unless the plugin
/// offers resources, templates or prompts (`offers_more`), as an MCP server may.
fn validated_tools(
    path: &Path,
    name: &str,
    policy: &SandboxPolicy,
    tools: Vec<PluginToolMeta>,
    offers_more: bool,
) -> Result<ValidTools, PluginError> {
    let raw: Vec<(String, String, String)> = tools
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.description.clone(),
                t.input_schema.clone(),
            )
        })
        .collect();
    validate::check_sizes(&raw).map_err(|problem| PluginError::tool_list(path, problem))?;
    let mut schema_budget = validate::SchemaBudget::new(policy.limits.schema_memory_bytes);
    let schemas = match validate::check_tools(
        raw.iter().map(|(n, _, s)| (n.as_str(), s.as_str())),
        &mut schema_budget,
    ) {
        Err(ToolListProblem::Empty) if offers_more => Vec::new(),
        checked => checked.map_err(|problem| PluginError::tool_list(path, problem))?,
    };
    if let Some(tool) = policy
        .tool_http
        .keys()
        .find(|tool| !raw.iter().any(|(name, _, _)| name == *tool))
    {
        return Err(PluginError::Policy {
            path: path.to_owned(),
            source: PolicyError::Invalid {
                path: SandboxPolicy::path_for(path),
                key: format!("tools.{tool}"),
                message: format!(
                    "names a tool the plugin does not offer; its tools: {}",
                    raw.iter()
                        .map(|(name, _, _)| name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        });
    }
    let mut valid = ValidTools::default();
    for (tool, checked) in tools.into_iter().zip(schemas) {
        let invalid = |what: &str, reason: String| PluginError::InvalidToolMeta {
            path: path.to_owned(),
            tool: tool.name.clone(),
            what: what.to_owned(),
            reason,
        };
        let mut meta = ToolMeta::new(&tool.name)
            .description(&tool.description)
            .input_schema(checked.schema.clone());
        validate::check_description(&tool.description)
            .map_err(|reason| invalid("description", reason))?;
        if let Some(title) = &tool.title {
            validate::check_title(title).map_err(|reason| invalid("title", reason))?;
            meta = meta.title(title);
        }
        let output = match &tool.output_schema {
            Some(text) => {
                let output = validate::check_output_schema(text, &tool.name, &mut schema_budget)
                    .map_err(|problem| match problem {
                        ToolListProblem::BadSchema { reason, .. } => {
                            invalid("output schema", reason)
                        }
                        other => PluginError::tool_list(path, other),
                    })?;
                meta = meta.output_schema(output.schema.clone());
                Some(Arc::new(output))
            }
            None => None,
        };
        let (annotations, dropped) = annotations::vouched(policy, &tool.name, tool.annotations);
        for warning in &dropped {
            tracing::warn!(plugin = %name, "{warning}");
        }
        valid.warnings.extend(dropped);
        valid.metas.push(
            meta.annotations(annotations)
                .task_support(tool.task_support),
        );
        valid.validators.push(Arc::new(checked));
        valid.output_validators.push(output);
    }
    valid.shared = valid.metas.iter().cloned().map(Arc::new).collect();
    Ok(valid)
}

/// Refuses a plugin file (and its policy file) loaded without a lock when another user could
/// change them: their directory (as given, and where each really is) or the files themselves.
///
/// Returns whether the policy file was there (and checked): one that was not is not read.
/// The text of the policy file of the plugin that will be at `path`, if there is one, held to
/// the checks of a load without a lock: it and its directory must be ones only this user (or
/// root) can change, and the file (links followed) must be inside the directory. For a plugin
/// a lock is about to approve (`pull`): what the lock pins must be the operator's own.
#[cfg(feature = "registry")]
pub(crate) fn owned_policy_text(path: &Path) -> Result<Option<String>, PluginError> {
    let policy_path = SandboxPolicy::path_for(path);
    if !shared(path, Some(&policy_path))? {
        return Ok(None);
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let within = dir.canonicalize().map_err(|source| PluginError::Io {
        path: path.to_owned(),
        source,
    })?;
    SandboxPolicy::read_text_within(&policy_path, Some(&within))
        .map(Some)
        .map_err(|source| PluginError::Policy {
            path: path.to_owned(),
            source,
        })
}

fn shared(path: &Path, policy: Option<&Path>) -> Result<bool, PluginError> {
    let refused = |reason: String| PluginError::SharedDirectory {
        path: path.to_owned(),
        reason,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // The directory, whatever is in it now (what is there can change, but only by those who
    // may write it). One that is not there is the plugin's absence (it is not read: a
    // directory that appears before the read would be unchecked).
    if let Err(source) = dir.symlink_metadata() {
        return Err(PluginError::Io {
            path: path.to_owned(),
            source,
        });
    }
    if let Some(reason) = crate::lock::directory_problem(dir) {
        return Err(refused(reason));
    }
    // Each name that is there (a link leading nowhere too: what appears there would be read),
    // links, directory and all. A name that is not there is nothing to read: the plugin's read
    // says it is missing, and a policy that is not there is no policy (one that appears later
    // is read, and checked, by a later load).
    let mut policy_there = false;
    for file in std::iter::once(path).chain(policy) {
        if file.symlink_metadata().is_err() {
            continue;
        }
        if let Some(reason) = crate::file::file_problem(file) {
            return Err(refused(reason));
        }
        policy_there = file != path;
    }
    Ok(policy_there)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin may offer no tools when it offers resources or prompts (an MCP server may; the
    /// macros build such a registry); with nothing at all it is refused, saying so.
    #[test]
    fn no_tools_are_refused_only_with_nothing_else_offered() {
        let path = Path::new("prompts-only.wasm");
        let policy = SandboxPolicy::default();
        let valid = validated_tools(path, "prompts-only", &policy, Vec::new(), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(valid.metas.is_empty());
        let refused = validated_tools(path, "nothing", &policy, Vec::new(), false)
            .map(|_| ())
            .expect_err("nothing offered");
        assert!(
            matches!(refused, PluginError::NoTools { .. })
                && refused.to_string().contains("offers nothing"),
            "{refused}"
        );
    }

    /// The engine a component gets is decided by its own top-level names: a nested component or
    /// module naming contract 1.0.0 does not count, an unreadable component goes to the engine
    /// that says what is wrong with it.
    #[test]
    fn the_contract_is_read_from_the_outermost_names() {
        let component = |wat: &str| wat::parse_str(wat).unwrap_or_else(|e| panic!("{e}"));
        let v10 = component(r#"(component (import "llm-worker:tool/host@1.0.0" (instance)))"#);
        let v03 = component(r#"(component (import "llm-worker:tool/host@0.3.0" (instance)))"#);
        let nested = component(
            r#"(component
                (import "llm-worker:tool/host@0.3.0" (instance))
                (component (import "llm-worker:tool/host@1.0.0" (instance))))"#,
        );
        let exported = component(
            r#"(component
                (component $inner)
                (instance $i (instantiate $inner))
                (export "llm-worker:tool/tools@1.0.0" (instance $i)))"#,
        );
        assert!(needs_concurrency(&v10));
        assert!(!needs_concurrency(&v03));
        assert!(!needs_concurrency(&nested));
        assert!(needs_concurrency(&exported));
        assert!(needs_concurrency(b"\0asm\x0d\0\x01\0\xff\xff"));
    }

    /// A plugin of an older contract runs in the engine without the component model's
    /// concurrency support (its calls cost less there), one of 1.0.0 in the other.
    #[test]
    fn each_contract_is_compiled_for_its_engine() {
        let host = PluginHost::new().expect("host");
        let old = llm_worker_tests::wat::WatComponent::new(&[("clock", "Says the time.", "{}")])
            .output("noon")
            .build();
        let old = host
            .load_bytes("/plugins/old.wasm", &old)
            .expect("0.1.0 loads");
        assert_eq!(old.contract_version(), "0.1.0");
        assert!(wasmtime::Engine::same(
            old.image.pre.engine(),
            &host.runtime(false).engine
        ));
        let new = host
            .load(llm_worker_tests::plugin_path("echo"))
            .expect("1.0.0 loads");
        assert_eq!(new.contract_version(), "1.0.0");
        assert!(wasmtime::Engine::same(
            new.image.pre.engine(),
            &host.runtime(true).engine
        ));
    }
}
