//! Write [llm-worker](https://example.invalid/llm-worker) tool plugins as an ordinary Rust
//! `impl` block.
//!
//! A plugin is one crate with this single dependency, built for `wasm32-wasip2` into one
//! `.wasm` component that any llm-worker host can load:
//!
//! ```
//! use llm_worker_guest::{tool, tool_registry};
//!
//! #[derive(Clone, Default)]
//! pub struct Greeter;
//!
//! #[tool_registry]
//! impl Greeter {
//!     /// Greets someone by name.
//!     #[tool]
//!     fn greet(&self, #[description = "Who to greet"] name: String) -> Result<String, String> {
//!         if name.is_empty() {
//!             return Err("give a name".into());
//!         }
//!         Ok(format!("Hello, {name}!"))
//!     }
//! }
//!
//! // The one extra line: the whole impl becomes the component's exports.
//! llm_worker_guest::export_plugin!(Greeter);
//!
//! # fn main() {
//! // Natively, the same tools are plain Rust values you can unit-test:
//! use llm_worker_guest::ToolRegistry;
//! let (meta, tool) = Greeter.greet_definition()();
//! assert_eq!(meta.name, "greet");
//! assert_eq!(meta.description, "Greets someone by name.");
//! let out = pollster_free_block_on(tool.execute(r#"{"name":"Ada"}"#));
//! assert_eq!(out.unwrap(), "Hello, Ada!");
//! # assert_eq!(Greeter.tool_definitions().len(), 1);
//! # }
//! # fn pollster_free_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     llm_worker_guest::__private::block_on(f)
//! # }
//! ```
//!
//! What the macros generate, per `#[tool]` method `search`: `SearchArgs` (the arguments, with
//! `Deserialize` and `JsonSchema`; `#[description = "…"]` becomes the field's schema
//! description), `ToolSearch` (implements [`Tool`]), and `search_definition()` returning a
//! [`ToolDefinition`]. The tool's name is the method's name (without `r#`); its description is
//! the whole doc comment (paragraphs kept; `#[doc = include_str!("…")]` works).
//!
//! `#[tool(title = "…", read_only, destructive, idempotent, open_world)]` sets the tool's
//! title and hints (each hint may also be written `= false`).
//!
//! **Arguments.** The input must be a JSON object with the arguments as fields. Unknown fields
//! are refused (the schema says `additionalProperties: false`), so a misspelt name is an error
//! naming it. `Option<T>` arguments may be left out. Any other argument may have a default,
//! `#[default = 10]` (or serde's `#[serde(default)]`), which the schema shows. `#[serde(…)]` and
//! `#[schemars(…)]` on an argument are moved to the generated field.
//!
//! **Return values** become the output by their type, not by how the type is spelled (aliases,
//! `anyhow::Result<T>` and `std::io::Result<T>` are all results):
//!
//! | the method returns | the tool's output |
//! |---|---|
//! | `Result<T, E>`, `Err(e)` | `e` itself if `E` is [`ToolError`]; otherwise [`ToolError::ExecutionFailed`] with the message and every cause (`source()`, anyhow's context chain) |
//! | `String`, `&str`, `Cow<str>`, `Box<str>`, `Arc<str>` (bare or as the `T` of a `Result`) | the text as it is |
//! | a type with `Serialize` and `JsonSchema` | JSON; when the schema is an object, it is also the tool's output schema |
//! | a type with `Serialize` only (`serde_json::Value`, …) | JSON |
//! | anything else with `Debug` (and `()`, which is JSON `null`) | `format!("{:?}", value)` |
//!
//! Input that does not fit the arguments becomes [`ToolError::InvalidArgument`] with serde's
//! message.

// Lets generated code name this crate as `::llm_worker_guest` inside its own tests.
#[allow(unused_extern_crates)]
extern crate self as llm_worker_guest;

mod client;
pub mod content;
mod export;
pub mod log;
#[doc(hidden)]
pub mod output;
pub mod question;
pub mod report;
mod tool;

pub use client::{Elicitation, elicit, elicit_with_schema, roots, sample};
pub use content::{
    Completion, CompletionRef, Content, Media, Message, Prompt, PromptArgument, PromptMeta,
    RequestError, ResourceContents, ResourceData, ResourceMeta, ResourceTemplate, Role, ToolOutput,
};
pub use export::block_on;
pub use llm_worker_macros::{complete, description, prompt, resource, tool, tool_registry};
pub use question::{ElicitationAnswer, QuestionError, Root, SamplingAnswer, SamplingRequest};
pub use report::{Listing, list_changed, progress, resource_updated};
pub use tool::{
    Tool, ToolAnnotations, ToolDefinition, ToolError, ToolMeta, ToolRegistry, WorkerToolDefinition,
};

/// What generated code uses. Not a public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    /// The marker attributes, for a glob import that an explicit import shadows.
    pub mod markers {
        pub use llm_worker_macros::{complete, description};
    }
    pub use crate::export::{Plugin, block_on};
    pub use crate::output;
    pub use async_trait::async_trait;
    pub use schemars;
    pub use serde;
    pub use serde_json;

    #[cfg(target_arch = "wasm32")]
    pub use crate::export::{bindings, install_logger};
}
