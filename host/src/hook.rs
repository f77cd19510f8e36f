//! Hooks around tool calls: pre-call hooks may rewrite, skip or abort a call; post-call hooks
//! may rewrite its result or abort.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{Content, Tool, ToolMeta, ToolOutput};

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
///
/// `content` is the text a model reads. A tool that returns more than text (images, audio,
/// embedded resources, resource links, a structured value: [`Tool::call`]) has it in
/// [`blocks`](Self::blocks) and [`structured`](Self::structured) too, as an MCP client gets
/// it; `content` is then their text form ([`ToolOutput::to_text`](crate::content::ToolOutput::to_text)).
/// The serialised form carries the text only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub call_id: String,
    /// The tool's output, or the error's text.
    pub content: String,
    /// Whether `content` is an error.
    pub is_error: bool,
    /// The tool's content blocks, in order; empty for a result made from text alone (a tool's
    /// [`execute`](Tool::execute) text is one text block).
    ///
    /// A post-call hook that rewrites [`content`](Self::content) replaces these with that
    /// text; one that changes only these has `content` rendered from them again.
    #[serde(skip)]
    pub blocks: Vec<Content>,
    /// The tool's structured value (an object matching its output schema), if it gave one.
    /// Dropped when a post-call hook rewrites `content`; one that changes only this has
    /// `content` rendered again (for a result with no blocks, it is this value's JSON).
    #[serde(skip)]
    pub structured: Option<Value>,
}

impl ToolResult {
    /// A successful result.
    pub fn success(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::text(call_id.into(), content.into(), false)
    }

    /// An error result.
    pub fn error(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::text(call_id.into(), content.into(), true)
    }

    fn text(call_id: String, content: String, is_error: bool) -> Self {
        Self {
            call_id,
            blocks: vec![Content::Text(content.clone())],
            content,
            is_error,
            structured: None,
        }
    }

    /// The result of a tool's [`call`](Tool::call): its blocks and structured value, and their
    /// text.
    pub fn from_output(call_id: impl Into<String>, output: ToolOutput) -> Self {
        Self {
            call_id: call_id.into(),
            content: output.to_text(),
            is_error: output.is_error,
            blocks: output.content,
            structured: output.structured,
        }
    }

    /// The result of a call a pre-call hook skipped: an error (the tool did not run) that
    /// gives the hook's reason, for the model to read.
    pub fn skipped(call: &ToolCall, reason: &str) -> Self {
        Self::error(
            &call.id,
            format!(
                "the call of '{}' was not run: a hook skipped it: {reason}",
                call.name
            ),
        )
    }
}

/// What a pre-call hook sees: the call (which it may rewrite), the tool's metadata and instance.
pub struct ToolCallContext {
    /// The call; a hook may change its input.
    pub call: ToolCall,
    /// The tool's metadata, as registered: a copy to read (a change to it is not kept).
    pub meta: ToolMeta,
    /// The tool's instance, for hooks that inspect its state.
    pub tool: Arc<dyn Tool>,
    /// Who asked for the call, when the MCP HTTP service authenticated it (a static token's
    /// name, or an access token's subject and claims); `None` from a [`crate::Worker`],
    /// stdio, or a server without authentication.
    pub identity: Option<Arc<crate::Identity>>,
}

/// What a post-call hook sees: the call, its result (which it may rewrite), the tool's metadata
/// and instance.
pub struct PostToolCallContext {
    /// The call as it was run.
    pub call: ToolCall,
    /// The result; a hook may change it.
    pub result: ToolResult,
    /// The tool's metadata, as registered: a copy to read (a change to it is not kept).
    pub meta: ToolMeta,
    /// The tool's instance.
    pub tool: Arc<dyn Tool>,
    /// Who asked for the call (see [`ToolCallContext::identity`]).
    pub identity: Option<Arc<crate::Identity>>,
}

/// What happens after a pre-call hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreToolCallAction {
    /// Go on: the next hook, then the call.
    Continue,
    /// Do not run this call: its result is an error giving this reason
    /// ([`ToolResult::skipped`]), in the [`Worker`](crate::Worker) and over MCP alike. It is
    /// an error because the tool did not run: a model must not take the text for the tool's
    /// answer. Later hooks do not run for it; the other calls of a batch go on.
    Skip(String),
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
