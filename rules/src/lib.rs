//! The rules that the llm-worker host, the guest SDK and its macros share, each in one place.
//!
//! A plugin and the host agree on these; the macros check them at compile time so that a
//! plugin the host would refuse does not build, and the host checks them again at load since
//! any toolchain can build a plugin. Each rule lives here once and every side calls it:
//!
//! - [`contract`]: the WIT package and the versions of it that exist;
//! - [`tool`]: what a valid tool name and title are, and the caps on a plugin's tool list;
//! - [`resource`]: what a valid resource URI and MIME type are, and the caps on resources and
//!   templates;
//! - [`prompt`]: the caps on prompts, their arguments and completions (names as tools');
//! - [`report`]: log levels and the bounds on what a running tool reports (logs, progress,
//!   notices);
//! - [`template`]: resource URI templates, and which URIs they match.
//!
//! The crate has no dependencies (`core` and `alloc` only), so that a proc-macro crate, a
//! `wasm32-wasip2` plugin and the host can all depend on it.
#![no_std]

extern crate alloc;

pub mod contract;
pub mod prompt;
pub mod report;
pub mod resource;
pub mod template;
pub mod tool;
