//! [`LoadedPlugin`]: a compiled, validated plugin (its `PluginImage`, shared by every session
//! made from it), what it offers and runs under, and the [`ToolDefinition`]s whose factories
//! start its instances.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bindings::PluginPre;
use super::host::HostInner;
use super::instance::{self, PluginState, StartSpec};
use super::session::PluginSession;
use super::{descriptors, validate};
use crate::policy::SandboxPolicy;
use crate::tool::{
    PromptMeta, ResourceMeta, ResourceTemplate, ToolDefinition, ToolError, ToolMeta,
};

/// A compiled, validated plugin, shared by every session made from it.
pub(crate) struct PluginImage {
    /// The SHA-256 of the component's bytes.
    pub(super) sha256: [u8; 32],
    /// The SHA-256 of its policy file, in hex, if it was loaded with one.
    pub(super) policy_sha256: Option<String>,
    /// Whether a lock approved what it offered at load (its resources, templates and prompts):
    /// then a list it gives while serving is held to that.
    pub(super) listing_locked: bool,
    pub(super) name: String,
    pub(super) path: PathBuf,
    pub(super) pre: PluginPre<PluginState>,
    pub(super) policy: SandboxPolicy,
    /// What the component imports (WASI interfaces), for operators.
    pub(super) imports: Vec<String>,
    /// The granted directories, opened at load, in the order of `policy.dirs`.
    pub(super) granted_dirs: Arc<[descriptors::HeldDir]>,
    /// The host's budget of open files and directories.
    pub(super) descriptors: Arc<descriptors::HostDescriptors>,
    /// The places for name lookups of all its instances together (every session's).
    pub(super) lookups: Arc<tokio::sync::Semaphore>,
    /// Keeps the host (and its epoch ticker, which enforces time limits) alive while any
    /// plugin or session made from it lives.
    pub(super) _host: Arc<HostInner>,
    /// Its tools, as validated at load.
    pub(super) tools: ValidTools,
    /// Its resources, templates and prompts as listed at load (contract 0.3.0).
    pub(super) offerings: Offerings,
}

/// What a plugin offers besides tools, as validated at load.
#[derive(Default)]
pub(crate) struct Offerings {
    pub(crate) resources: Vec<ResourceMeta>,
    /// The resources' URIs as [`super::validate::offerings::comparable_uri`] spells them: who
    /// serves a URI is asked for each URI of each result, notice and listing.
    pub(crate) comparable: std::collections::HashSet<String>,
    pub(crate) templates: Vec<ResourceTemplate>,
    pub(crate) prompts: Vec<PromptMeta>,
}

impl PluginImage {
    /// What starting one of its instances needs.
    pub(super) fn start_spec(&self) -> StartSpec<'_> {
        StartSpec {
            name: &self.name,
            pre: &self.pre,
            policy: &self.policy,
            granted_dirs: &self.granted_dirs,
            descriptors: &self.descriptors,
            lookups: &self.lookups,
            changed: None,
        }
    }
}

/// A plugin's tools as validated at load.
#[derive(Default)]
pub(super) struct ValidTools {
    /// What each tool is.
    pub(super) metas: Vec<ToolMeta>,
    /// The same, shared by every session's tools (a session holds no copy of the schemas).
    pub(super) shared: Vec<Arc<ToolMeta>>,
    /// The compiled input schema of each tool, in the order of `metas`.
    pub(super) validators: Vec<Arc<validate::CheckedSchema>>,
    /// The compiled output schema of each tool that has one, in the order of `metas`.
    pub(super) output_validators: Vec<Option<Arc<validate::CheckedSchema>>>,
    /// What the host noticed at load and did about it (hints it dropped).
    pub(super) warnings: Vec<String>,
}

/// A plugin that was compiled and validated. Cheap to clone.
///
/// Each call of [`definitions`](LoadedPlugin::definitions) is a new session: registering its
/// definitions creates one fresh instance shared by all of the plugin's tools.
#[derive(Clone)]
pub struct LoadedPlugin {
    pub(super) image: Arc<PluginImage>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.image.name)
            .field("path", &self.image.path)
            .field("tools", &self.tool_names())
            .finish()
    }
}

impl LoadedPlugin {
    /// The plugin's name: its file name without `.wasm`.
    pub fn name(&self) -> &str {
        &self.image.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.image.path
    }

    /// The tools it offers, as validated at load.
    pub fn tools(&self) -> &[ToolMeta] {
        &self.image.tools.metas
    }

    /// The same, shared: what every session's tools point to.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn shared_tools(&self) -> &[Arc<ToolMeta>] {
        &self.image.tools.shared
    }

    /// The SHA-256 of the component's bytes: what identifies this build of the plugin.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.image.sha256
    }

    /// The SHA-256 (hex) of the policy file it was loaded with, if any.
    pub fn policy_sha256(&self) -> Option<&str> {
        self.image.policy_sha256.as_deref()
    }

    /// Whether a granted directory was replaced since the plugin was loaded: its path now
    /// names another directory (the old one moved away or removed, another made in its
    /// place), or none.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn grants_replaced(&self) -> bool {
        self.image
            .policy
            .dirs
            .iter()
            .zip(self.image.granted_dirs.iter())
            .any(|(grant, held)| !held.is_at(&grant.host))
    }

    /// The device and inode of each granted directory, as held since the load (`None` where
    /// they cannot be read): a directory made anew in a grant's place is another revision.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn grant_identities(&self) -> Vec<Option<(u64, u64)>> {
        self.image
            .granted_dirs
            .iter()
            .map(super::descriptors::HeldDir::identity)
            .collect()
    }

    /// The policy it runs under: its limits and grants.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.image.policy
    }

    /// What the component imports (e.g. `wasi:filesystem/preopens@0.2.6`): what it may ask
    /// for, compared with what its policy grants.
    pub fn imports(&self) -> &[String] {
        &self.image.imports
    }

    /// Checks `input_json` as a call of `tool` would before the plugin runs — its size
    /// against the input limit, its JSON syntax, and the tool's input schema — without calling
    /// anything. The error is the one the call would return (`InvalidArgument`, listing each
    /// schema problem with its JSON path); an unknown tool is `InvalidArgument` too.
    pub fn check_input(&self, tool: &str, input_json: &str) -> Result<(), ToolError> {
        let Some(index) = self
            .image
            .tools
            .metas
            .iter()
            .position(|meta| meta.name == tool)
        else {
            return Err(ToolError::InvalidArgument(format!(
                "plugin '{}' has no tool '{tool}'; its tools: {}",
                self.image.name,
                self.tool_names().join(", ")
            )));
        };
        instance::check_input(
            &self.image.policy.limits,
            &self.image.tools.validators[index],
            tool,
            input_json,
        )
    }

    /// The version of the WIT contract it was built against: `"0.1.0"` or `"0.2.0"`.
    pub fn contract_version(&self) -> &'static str {
        self.image.pre.version()
    }

    /// What the host noticed when loading it and did about it, such as a tool's claim to be
    /// read-only that its policy contradicts (the claim is dropped). Also logged at load.
    pub fn warnings(&self) -> &[String] {
        &self.image.tools.warnings
    }

    /// The names of its tools.
    pub fn tool_names(&self) -> Vec<&str> {
        self.image
            .tools
            .metas
            .iter()
            .map(|m| m.name.as_str())
            .collect()
    }

    /// Definitions of every tool of the plugin, for one new session. Registering them creates
    /// one instance, shared by these tools and by no one else.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.open().definitions()
    }

    /// The resources the plugin listed at load (contract 0.3.0; empty for older plugins).
    pub fn resources(&self) -> &[ResourceMeta] {
        &self.image.offerings.resources
    }

    /// The plugin's resource templates.
    pub fn resource_templates(&self) -> &[ResourceTemplate] {
        &self.image.offerings.templates
    }

    /// The prompts the plugin listed at load.
    pub fn prompts(&self) -> &[PromptMeta] {
        &self.image.offerings.prompts
    }

    /// Everything the plugin offers that must be unique among the plugins served together,
    /// as (kind, name): its name, tools, resource URIs, resource templates and prompts.
    pub(crate) fn offered(&self) -> Vec<(&'static str, String)> {
        let offerings = &self.image.offerings;
        let tools = self.tools().iter().map(|t| ("tool", t.name.clone()));
        let resources = offerings
            .resources
            .iter()
            .map(|r| ("resource", r.uri.clone()));
        // Templates that differ only in their variables' names match the same URIs.
        let templates = offerings.templates.iter().map(|t| {
            (
                "resource template",
                validate::offerings::template_shape(&t.uri_template),
            )
        });
        let prompts = offerings.prompts.iter().map(|p| ("prompt", p.name.clone()));
        // Its name too: policies, grants, audit records and whose resource a content names all
        // go by it (two `notes.wasm` in the subdirectories of a recursive load).
        std::iter::once(("plugin name", self.name().to_owned()))
            .chain(tools)
            .chain(resources)
            .chain(templates)
            .chain(prompts)
            .collect()
    }

    /// What the plugin offers besides tools, as a lock records it (sorted): `resource URI`,
    /// `resource template TEMPLATE`, `prompt NAME`.
    pub(crate) fn offers(&self) -> Vec<String> {
        let offerings = &self.image.offerings;
        let mut offers: Vec<String> = offerings
            .resources
            .iter()
            .map(|r| format!("resource {}", r.uri))
            .chain(
                offerings
                    .templates
                    .iter()
                    .map(|t| format!("resource template {}", t.uri_template)),
            )
            .chain(
                offerings
                    .prompts
                    .iter()
                    .map(|p| format!("prompt {}", p.name)),
            )
            .collect();
        offers.sort();
        offers
    }

    /// The first of this plugin's fixed resource URIs that one of `other`'s templates
    /// matches: the two would both answer a read of it.
    pub(crate) fn resource_claimed_by(&self, other: &LoadedPlugin) -> Option<&str> {
        let templates = &other.image.offerings.templates;
        if templates.is_empty() {
            return None;
        }
        self.image
            .offerings
            .resources
            .iter()
            .map(|resource| resource.uri.as_str())
            .find(|uri| {
                templates
                    .iter()
                    .any(|t| validate::offerings::template_matches(&t.uri_template, uri))
            })
    }

    /// The first of this plugin's URI templates that some URI could match together with one
    /// of `other`'s ([`llm_worker_rules::template::may_overlap`]): the two would both answer a
    /// read of it.
    pub(crate) fn template_overlapping(&self, other: &LoadedPlugin) -> Option<&str> {
        let theirs = &other.image.offerings.templates;
        self.image
            .offerings
            .templates
            .iter()
            .map(|template| template.uri_template.as_str())
            .find(|mine| {
                theirs
                    .iter()
                    .any(|their| llm_worker_rules::template::may_overlap(mine, &their.uri_template))
            })
    }

    /// Opens a session of the plugin: its tool definitions and its resources, prompts and
    /// completions, served by one instance (see [`PluginSession`]).
    pub fn open(&self) -> PluginSession {
        PluginSession::new(Arc::clone(&self.image))
    }
}
