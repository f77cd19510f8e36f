//! The tool API of the spec: [`ToolMeta`], [`Tool`], [`ToolError`], [`ToolDefinition`].
//!
//! These types are defined once, in the guest SDK crate `llm-worker-guest`, and re-exported
//! here: a tool written against them runs natively in a host [`Worker`](crate::Worker) and,
//! compiled to WebAssembly, as a plugin — the very same code.

pub use llm_worker_guest::{
    Completion, CompletionRef, Content, ElicitationAnswer, Media, Message, Prompt, PromptArgument,
    PromptMeta, QuestionError, RequestError, ResourceContents, ResourceData, ResourceMeta,
    ResourceTemplate, Role, Root, SamplingAnswer, SamplingRequest, TaskSupport, Tool,
    ToolAnnotations, ToolDefinition, ToolError, ToolMeta, ToolOutput, ToolRegistry,
    WorkerToolDefinition,
};
