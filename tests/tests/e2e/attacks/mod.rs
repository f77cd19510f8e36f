//! The second security round: attacks by components written by hand in the WebAssembly text
//! format (where the Rust SDK cannot express them) and by test fixtures. Each test is one
//! attack of SECURITY.md; each asserts that the attack fails and that the host keeps serving.
//!
//! This module holds what the attacks share; the attacks are in its submodules, by what they
//! go after.

mod calls;
mod input;
mod load;
mod memory;
mod schemas;

const OBJECT: &str = r#"{"type":"object"}"#;
