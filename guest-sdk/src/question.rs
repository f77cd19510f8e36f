//! Questions a running tool asks the client (contract 0.3.0's interface `client`): a person,
//! through elicitation; the client's model, through sampling; the client's roots. The types
//! are shared by plugins and the host, which answers through MCP or an embedder's own
//! handler.

use serde_json::Value;

use crate::content::{Content, Message, Role};

/// What the user did with an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationAnswer {
    /// Submitted the form: its content, an object matching the requested schema.
    Accept(serde_json::Map<String, Value>),
    /// Said no.
    Decline,
    /// Dismissed it without choosing.
    Cancel,
}

/// A request for the client's model to say something.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplingRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// A system prompt, which the client may change or leave out.
    pub system_prompt: Option<String>,
    /// The most tokens to sample.
    pub max_tokens: u32,
    /// The sampling temperature, if one matters.
    pub temperature: Option<f64>,
    /// Where to stop.
    pub stop_sequences: Vec<String>,
    /// Names of preferred models, best first (hints: the client decides).
    pub model_hints: Vec<String>,
}

/// What the client's model said.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingAnswer {
    /// Who said it (the assistant, normally).
    pub role: Role,
    /// What it said.
    pub content: Content,
    /// The model that said it.
    pub model: String,
    /// Why sampling stopped (`endTurn`, `stopSequence`, `maxTokens`, …), when said.
    pub stop_reason: Option<String>,
}

/// A directory or file the client works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// Its URI (`file:///…`).
    pub uri: String,
    /// A name for it.
    pub name: Option<String>,
}

/// Why a question got no answer.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum QuestionError {
    /// The client cannot be asked this (it did not declare the capability), or there is no
    /// one to ask.
    #[error("cannot ask the client: {0}")]
    Unsupported(String),
    /// The operator's policy does not allow the question, or it is over a limit.
    #[error("not allowed to ask the client: {0}")]
    Denied(String),
    /// No answer came: the client failed, or the time to answer ran out.
    #[error("the client did not answer: {0}")]
    Failed(String),
    /// The question goes to the client with this run's answer, which is not used; the
    /// client's retry runs the tool again with the answer (MCP revision 2026-07-28). Return
    /// promptly.
    #[error("the client is asked; this run's result is not used: {0}")]
    Deferred(String),
}
