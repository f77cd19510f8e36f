//! [`PluginError`]: why a plugin file was refused. Every message names the file and says what
//! to do; [`PluginError::path`] gives the file to programs.

use std::path::{Path, PathBuf};

use super::validate::{PACKAGE, ToolListProblem};
use crate::policy::PolicyError;
use llm_worker_rules::contract::{CURRENT, VERSIONS, WORLD};

/// The versions this host loads, for messages: "0.1.0, 0.2.0 and 0.3.0".
pub(super) fn versions_text() -> String {
    match VERSIONS.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The world every plugin must be a component of, for messages.
fn world_name() -> String {
    let versions: Vec<String> = VERSIONS.iter().map(|v| format!("@{v}")).collect();
    format!("{PACKAGE}/{WORLD} ({})", versions.join(" or "))
}

/// Why a plugin file was refused. Every message names the file and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read plugin {}: {source}", path.display())]
    Io {
        /// The plugin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The plugin directory could not be read.
    #[error("cannot read the plugin directory {}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than the host accepts.
    #[error("plugin {} is {size} bytes, over the limit of {limit} bytes", path.display())]
    TooLarge {
        /// The plugin file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The path is not a regular file (a FIFO, a device, a socket or a directory).
    #[error(
        "plugin {} is not a regular file (a FIFO, device, socket or directory); a plugin is a \
         `.wasm` file — remove or rename it",
        path.display()
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The file is not WebAssembly.
    #[error(
        "plugin {} is not a WebAssembly file (it lacks the `\\0asm` header); a tool plugin is a \
         WebAssembly component, e.g. built with `cargo build --target wasm32-wasip2`",
        path.display()
    )]
    NotWasm {
        /// The plugin file.
        path: PathBuf,
    },
    /// The file is a core WebAssembly module, not a component.
    #[error(
        "plugin {} is a core WebAssembly module, not a component; build it for the \
         wasm32-wasip2 target, or wrap it with `wasm-tools component new`",
        path.display()
    )]
    CoreModule {
        /// The plugin file.
        path: PathBuf,
    },
    /// The component is malformed or uses features the host does not support.
    #[error("plugin {} is not a valid component: {reason}", path.display())]
    Invalid {
        /// The plugin file.
        path: PathBuf,
        /// What the compiler said.
        reason: String,
    },
    /// The component was built against an incompatible version of our WIT package.
    #[error(
        "plugin {} was built against {PACKAGE}@{found}, but this host supports \
         {PACKAGE}@{expected}; rebuild the plugin against one of them (wit/{CURRENT} is the \
         current contract)",
        path.display()
    )]
    WrongVersion {
        /// The plugin file.
        path: PathBuf,
        /// The version the plugin uses.
        found: String,
        /// The versions this host implements ("0.1.0 and 0.2.0").
        expected: String,
    },
    /// The component is not of the world `tool-plugin`.
    #[error("plugin {} is not a component of the world {world}: {reason}", path.display(), world = world_name())]
    WrongWorld {
        /// The plugin file.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
    /// The component imports something the host does not provide.
    #[error(
        "plugin {} imports something this host does not provide: {reason}; plugins of \
         contracts 0.1.0-0.3.0 may import WASI 0.2 interfaces (wasi:http among them), plugins \
         of contract 1.0.0 those and WASI 0.3's clocks, random and wasi:http; no filesystem, \
         sockets or command line of WASI 0.3",
        path.display()
    )]
    UnsupportedImport {
        /// The plugin file.
        path: PathBuf,
        /// The linker's message, naming the import.
        reason: String,
    },
    /// Creating an instance or listing its tools failed.
    #[error("plugin {} failed while starting: {reason}", path.display())]
    Startup {
        /// The plugin file.
        path: PathBuf,
        /// What happened.
        reason: String,
    },
    /// The host had no room for an instance to list the plugin's tools (its instance pool
    /// was full): not the plugin's failure; load it again once instances are freed.
    #[error(
        "plugin {} could not be listed now: {reason}; this is the host's capacity, not the \
         plugin: load it again once sessions have ended (`serve --watch` tries again at its \
         next rescan), or give the pool more room (`--pool`)",
        path.display()
    )]
    HostBusy {
        /// The plugin file.
        path: PathBuf,
        /// What the host ran out of.
        reason: String,
    },
    /// The plugin offers nothing: no tools, resources, templates or prompts.
    #[error(
        "plugin {} offers nothing: no tools, resources or prompts; its `tools` export must \
         return at least one tool unless it offers resources or prompts",
        path.display()
    )]
    NoTools {
        /// The plugin file.
        path: PathBuf,
    },
    /// A tool name is not allowed.
    #[error(
        "plugin {} lists a tool named '{}', which is not allowed: {reason}",
        path.display(),
        llm_worker_rules::tool::VisibleCut(name, 200)
    )]
    InvalidToolName {
        /// The plugin file.
        path: PathBuf,
        /// The name.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// Two tools of the plugin share a name.
    #[error("plugin {} lists the tool '{name}' twice; tool names must be unique", path.display())]
    DuplicateToolName {
        /// The plugin file.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// The tool list is over one of the host's caps (tools, description or schema size).
    #[error(
        "plugin {} is refused: {reason}; see the caps in SECURITY.md",
        path.display()
    )]
    ToolListTooLarge {
        /// The plugin file.
        path: PathBuf,
        /// Which cap, by how much.
        reason: String,
    },
    /// A tool's title or output schema is invalid.
    #[error("plugin {} has an invalid {what} for tool '{tool}': {reason}", path.display())]
    InvalidToolMeta {
        /// The plugin file.
        path: PathBuf,
        /// The tool.
        tool: String,
        /// What: "description", "title" or "output schema".
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool's input schema is not a JSON object schema, or a text in it is refused.
    #[error("plugin {} has an invalid input schema for tool '{tool}': {reason}", path.display())]
    InvalidSchema {
        /// The plugin file.
        path: PathBuf,
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// The plugin's policy file is invalid.
    #[error("plugin {} cannot be loaded: {source}", path.display())]
    Policy {
        /// The plugin file.
        path: PathBuf,
        /// What is wrong with the policy.
        source: PolicyError,
    },
    /// The file is a symbolic link to a file outside the plugin directory.
    #[error(
        "plugin {} is a link to {}, outside the plugin directory; copy the plugin into the \
         directory instead",
        path.display(),
        target.display()
    )]
    OutsideDirectory {
        /// The link in the plugin directory.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
    /// Two plugins of one directory offer a tool of the same name; neither is loaded.
    #[error(
        "plugin {} and plugin {} both offer the tool '{tool}'; neither is loaded — remove or \
         rename one of them",
        path.display(),
        other.display()
    )]
    ToolNameClash {
        /// This plugin.
        path: PathBuf,
        /// The other plugin.
        other: PathBuf,
        /// The tool both offer.
        tool: String,
    },
    /// Two plugins of one directory have the same name (in two subdirectories), or offer the
    /// same resource URI, resource template or prompt name; neither is loaded.
    #[error(
        "plugin {} and plugin {} both offer the {kind} '{name}'; neither is loaded — remove or \
         rename one of them",
        path.display(),
        other.display()
    )]
    OfferingClash {
        /// This plugin.
        path: PathBuf,
        /// The other plugin.
        other: PathBuf,
        /// What both offer: "plugin name", "resource", "resource template" or "prompt".
        kind: &'static str,
        /// Its URI, template or name.
        name: String,
    },
    /// The directory has a lock file, and this plugin is not approved by it.
    #[error(
        "plugin {} is not approved by {}: {reason}; review it, then approve it with \
         `llm-worker lock DIR`",
        path.display(),
        lock.display()
    )]
    NotApproved {
        /// The plugin file.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The plugin, its policy or their directory may be changed by other users (and no lock
    /// approved them): they could put a plugin there, or a policy beside one (granting what
    /// they choose), for this user to run.
    #[error(
        "plugin {} is not loaded: {reason}; others could change the plugin or put a policy \
         file beside it, for you to run with your rights. Keep plugins and their policies in \
         a directory only you can write, as files only you can write (or, in such a directory, \
         approve them with `llm-worker lock`)",
        path.display()
    )]
    SharedDirectory {
        /// The plugin file.
        path: PathBuf,
        /// Who else may change the directory, and how.
        reason: String,
    },
    /// The directory's lock file cannot be read.
    #[error("{0}")]
    Lock(#[from] crate::lock::LockError),
    /// The host's limits cannot be honoured (e.g. a memory limit of 0).
    #[error("invalid limits for the plugin host: {0}")]
    InvalidLimits(String),
    /// The host itself could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
}

impl PluginError {
    /// The plugin file (or directory) the error is about, if it is about one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            PluginError::Io { path, .. }
            | PluginError::Directory { path, .. }
            | PluginError::TooLarge { path, .. }
            | PluginError::NotAFile { path }
            | PluginError::NotWasm { path }
            | PluginError::CoreModule { path }
            | PluginError::Invalid { path, .. }
            | PluginError::WrongVersion { path, .. }
            | PluginError::WrongWorld { path, .. }
            | PluginError::UnsupportedImport { path, .. }
            | PluginError::Startup { path, .. }
            | PluginError::HostBusy { path, .. }
            | PluginError::NoTools { path }
            | PluginError::InvalidToolName { path, .. }
            | PluginError::DuplicateToolName { path, .. }
            | PluginError::ToolListTooLarge { path, .. }
            | PluginError::InvalidSchema { path, .. }
            | PluginError::InvalidToolMeta { path, .. }
            | PluginError::Policy { path, .. }
            | PluginError::OutsideDirectory { path, .. }
            | PluginError::ToolNameClash { path, .. }
            | PluginError::OfferingClash { path, .. }
            | PluginError::NotApproved { path, .. }
            | PluginError::SharedDirectory { path, .. } => Some(path),
            PluginError::Lock(error) => Some(error.path()),
            PluginError::InvalidLimits(_) | PluginError::Engine(_) => None,
        }
    }
}

impl PluginError {
    /// The plugin at `path` is not approved by the lock of `dir`, for `reason`.
    pub(super) fn not_approved(dir: &Path, path: &Path, reason: String) -> Self {
        PluginError::NotApproved {
            path: path.to_owned(),
            lock: dir.join(crate::lock::LOCK_FILE),
            reason,
        }
    }

    /// The plugin at `path` lists tools the host refuses.
    pub(super) fn tool_list(path: &Path, problem: ToolListProblem) -> Self {
        let path = path.to_owned();
        match problem {
            ToolListProblem::Empty => PluginError::NoTools { path },
            ToolListProblem::BadName { name, reason } => PluginError::InvalidToolName {
                path,
                name,
                reason: reason.to_owned(),
            },
            ToolListProblem::Duplicate(name) => PluginError::DuplicateToolName { path, name },
            ToolListProblem::BadSchema { tool, reason } => {
                PluginError::InvalidSchema { path, tool, reason }
            }
            ToolListProblem::TooLarge(reason) => PluginError::ToolListTooLarge { path, reason },
        }
    }
}
