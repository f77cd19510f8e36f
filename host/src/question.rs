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

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub use crate::tool::{ElicitationAnswer, QuestionError, Root, SamplingAnswer, SamplingRequest};

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
}

impl Asker {
    /// Question `key` of the tool `tool` of plugin `plugin`.
    pub fn new(plugin: impl Into<String>, tool: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            tool: tool.into(),
            key: key.into(),
        }
    }
}

/// Answers the questions tools ask. Each method has a default that says it cannot answer
/// ([`QuestionError::Unsupported`]): implement those you can.
#[async_trait]
pub trait QuestionHandler: Send + Sync {
    /// Asks the user `message`, with a form of the fields of `schema` (a flat JSON object
    /// schema); returns what they did.
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
pub async fn with_question_handler<F: Future>(
    handler: Arc<dyn QuestionHandler>,
    future: F,
) -> F::Output {
    HANDLER.scope(handler, future).await
}

/// The handler of the current scope, if any.
pub(crate) fn current_handler() -> Option<Arc<dyn QuestionHandler>> {
    HANDLER.try_with(Arc::clone).ok()
}
