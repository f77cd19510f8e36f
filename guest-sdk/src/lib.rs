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
//! # fn pollster_free_block_on<F: std::future::Future>(f: F) -> F::Output
//! # where
//! #     F::Output: 'static,
//! # {
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
//! `anyhow::Result<T>` and `std::io::Result<T>` are all results). A tool answers twice over:
//! [`Tool::call`] gives content blocks (what MCP clients see; contract 0.3.0's `execute`) and
//! [`Tool::execute`] their text:
//!
//! | the method returns | `call` | `execute` |
//! |---|---|---|
//! | `Result<T, E>`, `Err(e)` | `e` itself if `E` is [`ToolError`]; otherwise [`ToolError::ExecutionFailed`] with the message and every cause (`source()`, anyhow's context chain) | the same |
//! | [`Content`], `Vec<Content>`, [`ToolOutput`] (bare or as the `T` of a `Result`) | those blocks | [`ToolOutput::to_text`]; a `ToolOutput` with `is_error` is `ExecutionFailed` with that text |
//! | `String`, `&str`, `Cow<str>`, `Box<str>`, `Arc<str>` | one text block | the text as it is |
//! | a type with `Serialize` and `JsonSchema` whose schema is an object | the structured value, and its JSON (fields in declaration order) as one text block; its schema is the tool's output schema | JSON |
//! | any other type with `Serialize` (`serde_json::Value`, `Vec<u32>`, …) | one block of JSON | JSON |
//! | anything else with `Debug` (and `()`, which is JSON `null`) | one block of `format!("{:?}", value)` | the same |
//!
//! Input that does not fit the arguments becomes [`ToolError::InvalidArgument`] with serde's
//! message.
//!
//! ```
//! use llm_worker_guest::{Content, ToolRegistry, tool, tool_registry};
//!
//! #[derive(Clone, Default)]
//! pub struct Charts;
//!
//! #[tool_registry]
//! impl Charts {
//!     /// Draws a bar chart of the values.
//!     #[tool]
//!     fn bar_chart(&self, values: Vec<u32>) -> Vec<Content> {
//!         let png = vec![0x89, b'P', b'N', b'G']; // a real plugin draws here
//!         vec![Content::text(format!("{} bars", values.len())), Content::image("image/png", png)]
//!     }
//! }
//!
//! # fn main() {
//! let (_, tool) = Charts.bar_chart_definition()();
//! let output = llm_worker_guest::block_on(tool.call(r#"{"values":[1,2]}"#)).unwrap();
//! assert!(matches!(&output.content[1], Content::Image(image) if image.mime_type == "image/png"));
//! let text = llm_worker_guest::block_on(tool.execute(r#"{"values":[1,2]}"#)).unwrap();
//! assert_eq!(text, "2 bars\n[image: image/png, 4 bytes]");
//! # }
//! ```
//!
//! **Resources and prompts** are methods of the same block, served from the same value as
//! the tools (the tools hold clones of it: share state through fields such as
//! `Arc<Mutex<…>>`). Their doc comment is their description.
//!
//! - `#[resource(uri = "…", name = "…", title = "…", mime_type = "…")]` on a method taking
//!   only `&self` is one resource (`name` defaults to the method's name; the others are
//!   optional). It returns text (`String`, `&str`, …), bytes (`Vec<u8>`), a
//!   [`ResourceContents`] or a `Vec<ResourceContents>`, bare or in a `Result<_, E>`.
//! - `#[resource(template = "notes://{day}/{id}", …)]` is a family of resources: the method
//!   takes each `{variable}` of the template as a `String` argument of that name. A variable
//!   matches a non-empty run of characters without `/` ([`llm_worker_rules::template`]).
//! - `#[prompt]` (optionally `#[prompt(title = "…")]`) on a method whose arguments are
//!   `String` (required) or `Option<String>` (optional), each with `#[description = "…"]`,
//!   returning text (one message from the user), `Vec<Message>` or a [`Prompt`], bare or in a
//!   `Result<_, E>`. The prompt's name is the method's, under the rules for tool names.
//! - `#[complete(method)]` on a prompt's argument or a template's variable names a method of
//!   the block, `fn(&self, value: &str) -> Vec<String>`, that suggests values for what the
//!   user has typed; without one, the completion is empty.
//!
//! An error becomes a [`RequestError`]: kept if it is one (pick `NotFound` or
//! `InvalidArgument` yourself), otherwise [`RequestError::InvalidArgument`] with its message
//! and causes. Natively, the [`ToolRegistry`] methods serve them for unit tests:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use llm_worker_guest::{
//!     CompletionRef, Message, RequestError, ToolRegistry, complete, description, prompt,
//!     resource, tool, tool_registry,
//! };
//!
//! #[derive(Clone, Default)]
//! pub struct Notes {
//!     notes: Arc<Mutex<Vec<String>>>,
//! }
//!
//! #[tool_registry]
//! impl Notes {
//!     /// Adds a note.
//!     #[tool]
//!     fn add(&self, text: String) -> usize {
//!         let mut notes = self.notes.lock().unwrap();
//!         notes.push(text);
//!         notes.len()
//!     }
//!
//!     /// Every note, one per line.
//!     #[resource(uri = "notes://all", mime_type = "text/plain")]
//!     fn all(&self) -> String {
//!         self.notes.lock().unwrap().join("\n")
//!     }
//!
//!     /// One note, by its number from 1.
//!     #[resource(template = "notes://note/{n}")]
//!     fn note(&self, #[complete(numbers)] n: String) -> Result<String, RequestError> {
//!         let notes = self.notes.lock().unwrap();
//!         let at = n.parse::<usize>().ok().and_then(|n| n.checked_sub(1));
//!         at.and_then(|at| notes.get(at).cloned())
//!             .ok_or_else(|| RequestError::NotFound(format!("no note {n}")))
//!     }
//!
//!     fn numbers(&self, typed: &str) -> Vec<String> {
//!         let count = self.notes.lock().unwrap().len();
//!         (1..=count).map(|n| n.to_string()).filter(|n| n.starts_with(typed)).collect()
//!     }
//!
//!     /// Asks for a summary of the notes.
//!     #[prompt(title = "Summarise")]
//!     fn summarise(&self, #[description = "How long"] length: Option<String>) -> Vec<Message> {
//!         let length = length.unwrap_or_else(|| "short".into());
//!         vec![Message::user(format!("Write a {length} summary of:\n{}", self.all()))]
//!     }
//! }
//!
//! # fn main() {
//! let notes = Notes::default();
//! let (_, add) = notes.add_definition()();
//! llm_worker_guest::block_on(add.execute(r#"{"text":"buy milk"}"#)).unwrap();
//!
//! // The resource reads the state the tool changed.
//! let all = notes.read_resource("notes://all").unwrap();
//! assert_eq!(all[0].data, llm_worker_guest::ResourceData::Text("buy milk".into()));
//! assert!(notes.read_resource("notes://note/1").is_ok());
//! assert!(matches!(notes.read_resource("notes://note/2"), Err(RequestError::NotFound(_))));
//!
//! let prompt = notes.get_prompt("summarise", &[]).unwrap();
//! assert_eq!(prompt.messages, vec![Message::user("Write a short summary of:\nbuy milk")]);
//!
//! let template = CompletionRef::ResourceTemplate("notes://note/{n}".into());
//! assert_eq!(notes.complete(&template, "n", "").unwrap().values, ["1"]);
//! # }
//! ```
//!
//! **Questions** a running tool may ask the client: [`elicit`] (a form the user fills, its
//! fields those of a struct), [`elicit_with_schema`], [`sample`] (the client's model) and
//! [`roots`]. Each question has a key, unique within the call, naming it to the client. The
//! host answers within the operator's policy; a tool that asks must ask the same questions,
//! under the same keys, for the same input and answers (over MCP 2026-07-28 it runs again with
//! the answers so far, and an unanswered question fails with [`QuestionError::Deferred`]:
//! propagate it). Natively there is no one to ask:
//!
//! ```
//! use llm_worker_guest::{Elicitation, QuestionError, elicit};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Confirm {
//!     /// Delete the files for good?
//!     really: bool,
//! }
//!
//! // The questions are `async`: while one waits, the plugin's other calls run.
//! async fn delete() -> Result<String, QuestionError> {
//!     match elicit::<Confirm>("confirm", "Delete 3 files?").await? {
//!         Elicitation::Accept(Confirm { really: true }) => Ok("deleted".into()),
//!         _ => Ok("kept the files".into()),
//!     }
//! }
//!
//! let asked = llm_worker_guest::block_on(delete());
//! assert!(matches!(asked, Err(QuestionError::Unsupported(_))));
//! ```
//!
//! A plugin tells the host that a resource changed with [`resource_updated`], and that its
//! list of resources or prompts changed with [`list_changed`].

// Lets generated code name this crate as `::llm_worker_guest` inside its own tests.
#[allow(unused_extern_crates)]
extern crate self as llm_worker_guest;

mod client;
pub mod content;
mod export;
pub mod http;
pub mod log;
#[doc(hidden)]
pub mod output;
pub mod question;
pub mod report;
pub mod task;
pub mod time;
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
    RegistryFuture, TaskSupport, Tool, ToolAnnotations, ToolDefinition, ToolError, ToolMeta,
    ToolRegistry, WorkerToolDefinition,
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
