//! One tool call, from the hooks before it to the hooks after it: the steps the [`Worker`]
//! and MCP's `tools/call` both run, so that a hook means the same in both.
//!
//! - [`Hooks::before`]: the pre-call hooks, in order; a `Skip` ends the call with an error
//!   result giving the hook's reason (the tool did not run, so nothing it could have said is
//!   passed off as its answer), an `Abort` ends the request.
//! - [`execute`]: the tool, in the scopes of the call (where its events go, who answers its
//!   questions).
//! - [`result`]: what the tool returned as a [`ToolResult`], its content blocks and structured
//!   value beside their text ([`ToolOutput::to_text`], the one rendering of blocks to text).
//! - [`Hooks::after`]: the post-call hooks, in order, then the rule for what they rewrote.
//!
//! [`Worker`]: crate::Worker

use std::sync::Arc;

use crate::events::Sink;
use crate::hook::{
    PostToolCallAction, PostToolCallContext, PostToolCallHook, PreToolCallAction, PreToolCallHook,
    ToolCall, ToolCallContext, ToolResult,
};
use crate::question::QuestionHandler;
use crate::tool::{Tool, ToolError, ToolMeta, ToolOutput};

/// The hooks around every call.
#[derive(Clone, Copy)]
pub(crate) struct Hooks<'a> {
    pub(crate) pre: &'a [Arc<dyn PreToolCallHook>],
    pub(crate) post: &'a [Arc<dyn PostToolCallHook>],
    /// Who asked for the calls (over MCP's HTTP service), for the hooks to see.
    pub(crate) identity: Option<&'a Arc<crate::Identity>>,
}

/// A hook's `Abort`: the call and the hook's reason.
#[derive(Debug)]
pub(crate) struct Aborted {
    pub(crate) call: ToolCall,
    pub(crate) reason: String,
}

/// What the pre-call hooks decided.
pub(crate) enum Before {
    /// Run the call (as the hooks may have rewritten it) on this tool.
    Run(ToolCall, Arc<dyn Tool>),
    /// Not run: this is its result (an error saying a hook skipped it, and why).
    Skipped(ToolResult),
    /// The request ends.
    Aborted(Aborted),
}

impl Hooks<'_> {
    /// Runs the pre-call hooks on the call of `tool`, in order, until one skips or aborts it.
    ///
    /// The hooks' contexts get a copy of `meta` (theirs to read): it is made only when there
    /// are hooks, as the registered metadata (schemas included) is not copied per call.
    pub(crate) async fn before(
        &self,
        call: ToolCall,
        meta: &ToolMeta,
        tool: Arc<dyn Tool>,
    ) -> Before {
        if self.pre.is_empty() {
            return Before::Run(call, tool);
        }
        let mut ctx = ToolCallContext {
            call,
            meta: meta.clone(),
            tool,
            identity: self.identity.cloned(),
        };
        for hook in self.pre {
            match hook.pre_tool_call(&mut ctx).await {
                PreToolCallAction::Continue => {}
                PreToolCallAction::Skip(reason) => {
                    return Before::Skipped(ToolResult::skipped(&ctx.call, &reason));
                }
                PreToolCallAction::Abort(reason) => {
                    return Before::Aborted(Aborted {
                        call: ctx.call,
                        reason,
                    });
                }
            }
        }
        Before::Run(ctx.call, ctx.tool)
    }

    /// Runs the post-call hooks on `ctx`, in order, and gives the result they leave.
    ///
    /// A hook may rewrite the result's text, its blocks or its structured value: if the text
    /// is no longer the one it saw, the text wins — it becomes the only block, and the
    /// structured value is dropped (it would still hold what the hook took out of the text);
    /// otherwise, blocks or a structured value a hook changed are rendered to the text again
    /// (a result of a structured value alone is its JSON).
    pub(crate) async fn after(
        &self,
        call: ToolCall,
        result: ToolResult,
        meta: &ToolMeta,
        tool: Arc<dyn Tool>,
    ) -> Result<ToolResult, Aborted> {
        if self.post.is_empty() {
            return Ok(result);
        }
        let mut ctx = PostToolCallContext {
            call,
            result,
            meta: meta.clone(),
            tool,
            identity: self.identity.cloned(),
        };
        let text = ctx.result.content.clone();
        let blocks = ctx.result.blocks.clone();
        let structured = ctx.result.structured.clone();
        for hook in self.post {
            if let PostToolCallAction::Abort(reason) = hook.post_tool_call(&mut ctx).await {
                return Err(Aborted {
                    call: ctx.call,
                    reason,
                });
            }
        }
        let mut result = ctx.result;
        // A structured value comes with its JSON as a text block (what models and older
        // clients read): a hook that changed only the value (redacted a field) changes that
        // text too, or the model would read what the hook took out.
        // (Whatever else the hooks did to the blocks: one may redact, another add a note.)
        if result.content == text && structured.is_some() && result.structured != structured {
            // Only a text of about the value's own length, its whitespace aside (however it
            // is indented), is parsed to compare: a text block of a megabyte of tiny objects
            // would take a hundred times that once parsed. (Numbers may be written shorter,
            // strings longer, escaped.)
            let inked = |text: &str| {
                text.bytes()
                    .filter(|byte| !matches!(byte, b' ' | b'\n' | b'\r' | b'\t'))
                    .count()
            };
            let compact = structured
                .as_ref()
                .map_or(0, |value| inked(&value.to_string()));
            let could_mirror = |mirror: &str| {
                (compact / 2..=compact.saturating_mul(4).saturating_add(64))
                    .contains(&inked(mirror))
            };
            let mirrors = |block: &crate::tool::Content| {
                matches!(block, crate::tool::Content::Text(mirror)
                    if could_mirror(mirror)
                        && serde_json::from_str::<serde_json::Value>(mirror).ok() == structured)
            };
            let now = result.structured.as_ref().map(ToString::to_string);
            result.blocks = std::mem::take(&mut result.blocks)
                .into_iter()
                .filter_map(|block| match (mirrors(&block), &now) {
                    (false, _) => Some(block),
                    (true, Some(json)) => Some(crate::tool::Content::Text(json.clone())),
                    (true, None) => None,
                })
                .collect();
        }
        if result.content != text {
            result.blocks = vec![crate::tool::Content::Text(result.content.clone())];
            result.structured = None;
        } else if result.blocks != blocks || result.structured != structured {
            result.content = ToolOutput {
                content: result.blocks.clone(),
                structured: result.structured.clone(),
                is_error: result.is_error,
            }
            .to_text();
        }
        Ok(result)
    }
}

/// Where a call's events go and who answers its questions.
#[derive(Clone, Default)]
pub(crate) struct Scopes {
    /// The sink of the call's [`ToolEvent`](crate::events::ToolEvent)s.
    pub(crate) events: Option<Sink>,
    /// Who answers the call's questions to the client.
    pub(crate) questions: Option<Arc<dyn QuestionHandler>>,
}

impl Scopes {
    /// Runs `future` in these scopes.
    ///
    /// Not an `async fn`, and no `async` block: each would keep `future` twice (as it was
    /// given, and moved into the scope it is awaited in), and the future of a call is nested
    /// in several such wrappers, each doubling it.
    pub(crate) fn run<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        use futures::future::Either;
        let asked = match self.questions {
            Some(handler) => Either::Left(crate::question::with_question_handler(handler, future)),
            None => Either::Right(future),
        };
        match self.events {
            Some(sink) => Either::Left(crate::events::with_sink(sink, asked)),
            None => Either::Right(asked),
        }
    }
}

/// Runs `tool` on `input` in `scopes`.
pub(crate) async fn execute(
    tool: &dyn Tool,
    input: &str,
    scopes: Scopes,
) -> Result<ToolOutput, ToolError> {
    scopes.run(tool.call(input)).await
}

/// The result of call `call_id`: the tool's output with its text, or the error's text.
pub(crate) fn result(call_id: &str, outcome: Result<ToolOutput, ToolError>) -> ToolResult {
    match outcome {
        Ok(output) => ToolResult::from_output(call_id, output),
        Err(error) => ToolResult::error(call_id, error.to_string()),
    }
}

/// The result of a call of the tool of `meta`, as the post-call hooks see it from the `Worker`
/// and over MCP alike. A plugin's structured value was checked (an object, one key once,
/// matching its schema). A native tool with an output schema returns the object's JSON as its
/// text (the operator's own code, trusted to serialise the type its schema is made of): that
/// object is its structured value, so that a hook redacting the structured value redacts it
/// whichever way the call came.
pub(crate) fn result_of(
    call_id: &str,
    meta: &crate::ToolMeta,
    outcome: Result<ToolOutput, ToolError>,
) -> ToolResult {
    let mut result = result(call_id, outcome);
    if result.structured.is_none() && !result.is_error && meta.output_schema.is_some() {
        result.structured = match result.blocks.as_slice() {
            [crate::content::Content::Text(text)] => {
                serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .filter(serde_json::Value::is_object)
            }
            _ => None,
        };
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::Content;

    struct Nothing;

    #[async_trait::async_trait]
    impl Tool for Nothing {
        async fn execute(&self, _: &str) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }

    /// The result the post-call hooks `post` leave of `output`.
    async fn after(
        output: ToolOutput,
        post: impl Fn(&mut PostToolCallContext) -> PostToolCallAction + Send + Sync + 'static,
    ) -> ToolResult {
        let post: Vec<Arc<dyn PostToolCallHook>> = vec![Arc::new(post)];
        let hooks = Hooks {
            pre: &[],
            post: &post,
            identity: None,
        };
        let call = ToolCall {
            id: "1".into(),
            name: "t".into(),
            input: serde_json::json!({}),
        };
        hooks
            .after(
                call,
                result("1", Ok(output)),
                &ToolMeta::new("t"),
                Arc::new(Nothing),
            )
            .await
            .expect("not aborted")
    }

    /// A post-call hook redacting the structured value's `secret`.
    fn redact(ctx: &mut PostToolCallContext) -> PostToolCallAction {
        if let Some(value) = &mut ctx.result.structured {
            value["secret"] = serde_json::json!("[redacted]");
        }
        PostToolCallAction::Continue
    }

    #[tokio::test]
    async fn what_a_post_hook_rewrites_is_what_the_model_reads() {
        let structured = || ToolOutput {
            content: Vec::new(),
            structured: Some(serde_json::json!({"secret": "s3cr3t", "ok": true})),
            is_error: false,
        };
        // A structured value alone: its JSON is the text, and a redacted value is too.
        let redacted = after(structured(), redact).await;
        assert!(!redacted.content.contains("s3cr3t"), "{}", redacted.content);
        assert!(
            redacted.content.contains("[redacted]"),
            "{}",
            redacted.content
        );
        // As a plugin returns it (checked by the host): the value, and its JSON as the one
        // text block the model reads. The redaction reaches that text too.
        let mirrored = || {
            let value = serde_json::json!({"secret": "s3cr3t", "ok": true});
            ToolOutput {
                content: vec![Content::Text(value.to_string())],
                structured: Some(value),
                is_error: false,
            }
        };
        let redacted = after(mirrored(), redact).await;
        assert!(!redacted.content.contains("s3cr3t"), "{}", redacted.content);
        assert!(
            !format!("{:?}", redacted.blocks).contains("s3cr3t"),
            "{:?}",
            redacted.blocks
        );
        assert_eq!(
            redacted.structured,
            Some(serde_json::json!({"secret": "[redacted]", "ok": true}))
        );
        // Beside other blocks (a summary, an image) too.
        let beside = after(
            ToolOutput {
                content: vec![
                    Content::Text("a summary".into()),
                    mirrored().content.remove(0),
                ],
                ..mirrored()
            },
            redact,
        )
        .await;
        assert!(!beside.content.contains("s3cr3t"), "{}", beside.content);
        assert!(beside.content.contains("a summary"), "{}", beside.content);
        // Pretty-printed by the plugin, the mirror is known all the same; a large text block
        // beside it (which is not parsed to compare: see `Hooks::after`) is left as it is.
        let large = "[".to_owned() + &vec!["{\"\":0}"; 20_000].join(",") + "]";
        let pretty = after(
            ToolOutput {
                content: vec![
                    Content::Text(
                        serde_json::to_string_pretty(&mirrored().structured).expect("json"),
                    ),
                    Content::Text(large.clone()),
                ],
                ..mirrored()
            },
            redact,
        )
        .await;
        assert!(
            !pretty.content.contains("s3cr3t"),
            "{}",
            &pretty.content[..200]
        );
        assert_eq!(pretty.blocks.get(1), Some(&Content::Text(large)));
        // Redacted by one hook, a note added by another: the mirror is rewritten all the same.
        let noted = after(mirrored(), |ctx| {
            redact(ctx);
            ctx.result.blocks.push(Content::Text("a note".into()));
            PostToolCallAction::Continue
        })
        .await;
        assert!(!noted.content.contains("s3cr3t"), "{}", noted.content);
        assert!(noted.content.contains("a note"), "{}", noted.content);
        // A value added to a text result leaves the text alone.
        let text = || ToolOutput {
            content: vec![Content::Text("hello".into())],
            structured: None,
            is_error: false,
        };
        let added = after(text(), |ctx| {
            ctx.result.structured = Some(serde_json::json!({"added": true}));
            PostToolCallAction::Continue
        })
        .await;
        assert!(added.content.contains("hello"), "{}", added.content);
        // A value taken out takes its text with it.
        let removed = after(mirrored(), |ctx| {
            ctx.result.structured = None;
            PostToolCallAction::Continue
        })
        .await;
        assert!(!removed.content.contains("s3cr3t"), "{}", removed.content);
        // A rewritten text wins: it is the only block, and the structured value goes.
        let rewritten = after(structured(), |ctx| {
            ctx.result.content = "nothing to see".into();
            PostToolCallAction::Continue
        })
        .await;
        assert_eq!(rewritten.blocks, [Content::Text("nothing to see".into())]);
        assert_eq!(rewritten.structured, None);
        // Untouched, the result is the tool's.
        let untouched = after(structured(), |_| PostToolCallAction::Continue).await;
        assert_eq!(untouched, result("1", Ok(structured())));
    }
}
