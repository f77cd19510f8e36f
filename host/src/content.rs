//! What tools, resources and prompts say beyond plain text (contract 0.3.0's types, shared
//! with the guest SDK): a tool's [`ToolOutput`] of [`Content`] blocks, resources
//! ([`ResourceMeta`], [`ResourceTemplate`], [`ResourceContents`]), prompts ([`PromptMeta`],
//! [`Prompt`], [`Message`]) and [`Completion`]s, and the [`RequestError`] of a request that is
//! not a tool call.

pub use crate::plugin::MAX_COMPLETION_VALUES;
pub use llm_worker_guest::{
    Completion, CompletionRef, Content, Media, Message, Prompt, PromptArgument, PromptMeta,
    RequestError, ResourceContents, ResourceData, ResourceMeta, ResourceTemplate, Role, ToolOutput,
};
