//! Answering the questions tools ask (contract 0.3.0's interface `client`): a person's input
//! (elicitation), the client's model (sampling), the client's roots.
//!
//! Over MCP the server asks the session's client. An embedder that does not speak MCP answers
//! through a [`QuestionHandler`] of its own (its UI, its model), registered on the
//! [`Worker`](crate::Worker) with
//! [`set_question_handler`](crate::Worker::set_question_handler), or around any call with
//! [`with_question_handler`]. Without one, a question fails with
//! [`QuestionError::Unsupported`], which the plugin turns into a tool error.
//!
//! Whatever answers, the plugin's policy (`[client]`, [`ClientPolicy`](crate::ClientPolicy))
//! decides first whether the question may be asked at all, how many per call, how large the
//! question and its answer may be, and how long the call waits for the answer.
//!
//! Whatever answers, the host also checks both sides, in one place for every handler:
//!
//! - a form's message is at most [`MAX_MESSAGE_CHARS`] characters and [`MAX_MESSAGE_LINES`]
//!   lines, holds no control character (but newline and tab), no bidirectional formatting
//!   character and no imitation of the host's attribution; its schema is one MCP's form
//!   schema allows (a flat object of string, number, integer, boolean and enum fields);
//!   either refused is the plugin's error, [`QuestionError::Denied`];
//! - a question's size counts a fixed overhead for every entry of every list it holds
//!   (messages and their blocks, stop sequences, model hints, a form's fields and choices),
//!   as tool output does;
//! - an answer must fit its question before the plugin sees it: accepted content only the
//!   form's fields, each of its type and within its bounds, the required ones given; a
//!   model's answer the assistant's text, image or audio; at most [`MAX_ROOTS`] roots, each a
//!   `file://` URI. One that does not is refused, [`QuestionError::Failed`] (over MCP
//!   revision 2026-07-28, a retry's misfitting answer asks the question again).

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub use self::answer::MAX_ROOTS;
pub use self::message::{MAX_MESSAGE_CHARS, MAX_MESSAGE_LINES};
pub use crate::tool::{ElicitationAnswer, QuestionError, Root, SamplingAnswer, SamplingRequest};

pub(crate) mod answer;
pub(crate) mod cost;
pub(crate) mod form;
pub(crate) mod message;

/// Who is asking, and the question's key: the plugin, the tool being called (or the request,
/// such as `prompts/get`), and the key the plugin gave the question (unique within the call).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Asker {
    /// The plugin (its file stem).
    pub plugin: String,
    /// The tool being called.
    pub tool: String,
    /// The question's key.
    pub key: String,
    /// The call asking, by the id its caller gave it (a [`Worker`](crate::Worker) batch's
    /// [`ToolCall::id`](crate::ToolCall::id)), where the host knows it: calls of one tool
    /// running at once ask with the same plugin, tool and key.
    pub call_id: Option<String>,
    /// The most bytes an answer may be (the plugin's `[client] max_question_bytes`, as
    /// [`cost`] counts them): the host refuses a larger one, and a handler that keeps answers
    /// (a retry's, a task's) checks before it keeps one.
    pub(crate) max_answer_bytes: usize,
}

impl Asker {
    /// Question `key` of the tool `tool` of plugin `plugin`.
    pub fn new(plugin: impl Into<String>, tool: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            tool: tool.into(),
            key: key.into(),
            call_id: None,
            max_answer_bytes: usize::MAX,
        }
    }

    /// The same asker, its answers limited to `bytes`.
    pub(crate) fn with_max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// What asks, in words: `tool 'T'`, or for a request other than a tool call (whose
    /// `tool` is its method), `a prompt rendering` and the like.
    pub fn subject(&self) -> String {
        match self.tool.as_str() {
            "prompts/get" => "a prompt rendering".to_owned(),
            "prompts/list" => "the prompt list".to_owned(),
            "resources/read" => "a resource read".to_owned(),
            "resources/list" => "the resource list".to_owned(),
            "completion/complete" => "a completion".to_owned(),
            tool => format!("tool '{tool}'"),
        }
    }
}

/// Answers the questions tools ask. Each method has a default that says it cannot answer
/// ([`QuestionError::Unsupported`]): implement those you can.
#[async_trait]
pub trait QuestionHandler: Send + Sync {
    /// Asks the user `message`, with a form of the fields of `schema` (a flat JSON object
    /// schema, one MCP's elicitation allows); returns what they did. Show `asker` (the plugin
    /// and the tool) where the message cannot bury or imitate it, as the MCP server does with
    /// a first line of its own. The host checked the message and the schema, and checks the
    /// answer against the schema before the plugin sees it.
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        let _ = (message, schema);
        Err(unsupported(asker, "ask the user"))
    }

    /// Asks a model.
    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        let _ = request;
        Err(unsupported(asker, "ask a model"))
    }

    /// The directories the user works in.
    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        Err(unsupported(asker, "list roots"))
    }
}

/// `handler`, answering for the call `call_id`: the askers it is given name the call.
pub(crate) fn for_call(
    handler: Arc<dyn QuestionHandler>,
    call_id: String,
) -> Arc<dyn QuestionHandler> {
    Arc::new(ForCall { handler, call_id })
}

/// Forwards every method of [`QuestionHandler`]: one added to the trait must be forwarded
/// here too (its default would answer for the embedder's handler).
struct ForCall {
    handler: Arc<dyn QuestionHandler>,
    call_id: String,
}

impl ForCall {
    fn asker(&self, asker: &Asker) -> Asker {
        Asker {
            call_id: Some(self.call_id.clone()),
            ..asker.clone()
        }
    }
}

#[async_trait]
impl QuestionHandler for ForCall {
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        self.handler
            .elicit(&self.asker(asker), message, schema)
            .await
    }

    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        self.handler.sample(&self.asker(asker), request).await
    }

    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        self.handler.roots(&self.asker(asker)).await
    }
}

fn unsupported(asker: &Asker, what: &str) -> QuestionError {
    QuestionError::Unsupported(format!(
        "tool '{}' of plugin '{}' cannot {what}: this host's handler does not answer such \
         questions",
        asker.tool, asker.plugin
    ))
}

tokio::task_local! {
    static HANDLER: Arc<dyn QuestionHandler>;
}

/// Runs `future` with `handler` answering the questions of every tool call awaited inside it
/// (on the same task).
// Not an `async fn`: one would hold `future` twice (its argument and the scope made of it).
pub fn with_question_handler<F: Future>(
    handler: Arc<dyn QuestionHandler>,
    future: F,
) -> impl Future<Output = F::Output> {
    HANDLER.scope(handler, future)
}

/// The handler of the current scope, if any.
pub(crate) fn current_handler() -> Option<Arc<dyn QuestionHandler>> {
    HANDLER.try_with(Arc::clone).ok()
}
