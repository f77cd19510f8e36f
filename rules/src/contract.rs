//! The WIT contract: its package, its world and the versions that exist.
//!
//! `wit-bindgen` and `wasmtime::component::bindgen!` take the path of a contract as a string
//! literal (`"../wit/0.2.0"`), which a constant cannot fill; `tests/contract.rs` checks that
//! those literals and the `wit/` directory match the versions named here.

/// The WIT package of the contract.
pub const PACKAGE: &str = "llm-worker:tool";

/// The world every plugin is a component of.
pub const WORLD: &str = "tool-plugin";

/// The versions of the contract, oldest first: hosts load components of every one of them.
pub const VERSIONS: [&str; 4] = ["0.1.0", "0.2.0", "0.3.0", "1.0.0"];

/// The newest version: the one the guest SDK builds plugins against.
pub const CURRENT: &str = VERSIONS[VERSIONS.len() - 1];
