//! Hooks around tool calls: pre-call hooks may rewrite, skip or abort a call; post-call hooks
//! may rewrite its result or abort.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{Tool, ToolMeta};

/// One tool call requested by a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, echoed in its [`ToolResult`].
    pub id: String,
    /// The tool to call.
    pub name: String,
    /// The tool's input, a JSON object.
    pub input: Value,
}

/// The outcome of one tool call, as sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub call_id: String,
    /// The tool's output, or the error's text.
    pub content: String,
    /// Whether `content` is an error.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result.
    pub fn success(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        }
    }

    /// An error result.
    pub fn error(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            content: content.into(),
            is_error: true,
        }
    }
}

/// What a pre-call hook sees: the call (which it may rewrite), the tool's metadata and instance.
pub struct ToolCallContext {
    /// The call; a hook may change its input.
    pub call: ToolCall,
    /// The tool's metadata (read only).
    pub meta: ToolMeta,
    /// The tool's instance, for hooks that inspect its state.
    pub tool: Arc<dyn Tool>,
}

/// What a post-call hook sees: the call, its result (which it may rewrite), the tool's metadata
/// and instance.
pub struct PostToolCallContext {
    /// The call as it was run.
    pub call: ToolCall,
    /// The result; a hook may change it.
    pub result: ToolResult,
    /// The tool's metadata (read only).
    pub meta: ToolMeta,
    /// The tool's instance.
    pub tool: Arc<dyn Tool>,
}

/// What happens after a pre-call hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreToolCallAction {
    /// Go on: the next hook, then the call.
    Continue,
    /// Do not run this call; its result says it was skipped. Later hooks do not run for it.
    Skip,
    /// Fail the whole batch of calls with this reason.
    Abort(String),
}

/// What happens after a post-call hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostToolCallAction {
    /// Go on with the next hook.
    Continue,
    /// Fail the whole batch of calls with this reason.
    Abort(String),
}

/// Runs before a tool call. Closures `Fn(&mut ToolCallContext) -> PreToolCallAction` are hooks.
#[async_trait]
pub trait PreToolCallHook: Send + Sync {
    /// Inspects or rewrites the call before it runs.
    async fn pre_tool_call(&self, ctx: &mut ToolCallContext) -> PreToolCallAction;
}

/// Runs after a tool call. Closures `Fn(&mut PostToolCallContext) -> PostToolCallAction` are
/// hooks.
#[async_trait]
pub trait PostToolCallHook: Send + Sync {
    /// Inspects or rewrites the result after the call ran.
    async fn post_tool_call(&self, ctx: &mut PostToolCallContext) -> PostToolCallAction;
}

#[async_trait]
impl<F> PreToolCallHook for F
where
    F: Fn(&mut ToolCallContext) -> PreToolCallAction + Send + Sync,
{
    async fn pre_tool_call(&self, ctx: &mut ToolCallContext) -> PreToolCallAction {
        self(ctx)
    }
}

#[async_trait]
impl<F> PostToolCallHook for F
where
    F: Fn(&mut PostToolCallContext) -> PostToolCallAction + Send + Sync,
{
    async fn post_tool_call(&self, ctx: &mut PostToolCallContext) -> PostToolCallAction {
        self(ctx)
    }
}
