//! Wasm tool plugins: [`PluginHost`] compiles and validates components, [`LoadedPlugin`] hands
//! out [`ToolDefinition`](crate::ToolDefinition)s whose factories create live instances at
//! registration.
//!
//! The rooms: `error` (why a plugin is refused), `host` (the engine, linkers and builder),
//! `load` (one plugin's load pipeline), `dir` (a directory: lock, clashes, stray policies),
//! `structure` (the instances a component makes, counted before compiling),
//! `loaded` (a loaded plugin and its definitions), `instance` (live instances and calls),
//! `bindings` (the WIT worlds of each contract version), `validate` and `input` (tool lists,
//! schemas and arguments), `descriptors`, `net`, `http` and `output` (what an instance may
//! hold, reach and print), `cache` (compiled components on disk), `annotations` (hints the
//! host vouches for).

mod annotations;
mod bindings;
mod bindings_v3;
mod blocking;
mod cache;
mod descriptors;
pub(crate) mod dir;
mod error;
mod host;
#[cfg(feature = "wasi-http")]
mod http;
mod input;
mod instance;
mod load;
#[cfg(feature = "registry")]
pub(crate) use load::owned_policy_text;
mod loaded;
#[cfg(feature = "wasi-http")]
mod net;
mod output;
mod session;
mod structure;
mod validate;

pub use self::dir::{LoadDirOptions, PluginDir};
pub use self::error::PluginError;
pub use self::host::{HostUsage, PluginHost, PluginHostBuilder};
pub use self::loaded::LoadedPlugin;
pub(crate) use self::loaded::PluginImage;
#[cfg(feature = "mcp-http")]
pub(crate) use self::session::last_lists_only;
pub use self::session::{MAX_COMPLETION_VALUES, PluginSession};
#[cfg(feature = "mcp")]
pub(crate) use self::session::{ResourceOwner, resource_owner};

/// What an output limit charges for `items` blocks (content, messages, resource contents,
/// completion values) carrying `bytes` in all: each block also costs the host its own
/// bookkeeping, so a million empty blocks are not free.
pub(crate) fn charged(bytes: usize, items: usize) -> usize {
    /// Bytes charged per block besides what it carries.
    const PER_ITEM: usize = 64;
    bytes.saturating_add(items.saturating_mul(PER_ITEM))
}
