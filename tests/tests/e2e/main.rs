//! The end-to-end tests, as one test binary: every module links the whole host (wasmtime
//! included), so one binary instead of nine saves most of the link time and disk of a test run.
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

mod attacks;
mod cache;
mod concurrent;
mod contract;
mod descriptors;
mod examples;
mod fuzz;
mod hostile;
mod http;
mod native;
mod other_toolchains;
mod plugin_dir;
mod plugins;
mod policy;
mod pool;
mod questions;
mod trust;
