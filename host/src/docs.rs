//! The guides of the repository's `docs/` that hold Rust code, included so that
//! `cargo test --doc` compiles every Rust block of them (and runs those not marked `no_run`):
//! a guide's code cannot fall behind the API. Only built for doctests.

/// `docs/embedding.md`: embedding the library in an agent.
#[doc = include_str!("../../docs/embedding.md")]
pub struct EmbeddingGuide;
