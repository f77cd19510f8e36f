//! `[client]`: which questions a plugin may ask the client during a call (elicitation asks a
//! person, sampling spends the client's model, roots tells the plugin where the client works),
//! how many, how large, and how long a call may wait for an answer.

use std::time::Duration;

/// What a plugin may ask the client (contract 0.3.0's interface `client`). Elicitation is
/// allowed by default (a person sees the question and may say no); sampling (it spends the
/// client's model and its budget) and roots (it tells the plugin the user's directories) are
/// denied unless the policy allows them.
///
/// ```toml
/// [client]
/// elicitation = true        # default true
/// sampling = false          # default false
/// roots = false             # default false
/// max_questions = 10        # per call, all kinds together; 1-1000
/// max_question_bytes = 65536  # a question, and its answer, each; 1 KiB-16 MiB
/// answer_timeout_ms = 300000  # how long one question waits for its answer; 1 ms-1 day
/// ```
///
/// `max_question_bytes` counts what a question and an answer carry plus 64 bytes for every
/// entry of every list they hold (each message of a conversation and its block, each stop
/// sequence and model hint, each field, choice and required name of a form, each root), as
/// output limits count blocks: many empty entries are not free.
///
/// Waiting for an answer does not count against the call's time limit
/// (`limits.timeout_ms`): a person may take minutes. Meanwhile the session's other calls to
/// the same plugin wait for the instance (one call at a time, as always) and fail as busy if
/// their own time limit ends first; calls to other plugins are not held up.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientPolicy {
    /// The plugin may ask the user for input.
    pub elicitation: bool,
    /// The plugin may ask the client's model.
    pub sampling: bool,
    /// The plugin may read the client's roots.
    pub roots: bool,
    /// Most questions one call may ask, all kinds together.
    pub max_questions: u32,
    /// Largest question (message, schema, conversation) and largest answer, in bytes, with
    /// 64 bytes charged for every entry of their lists.
    pub max_question_bytes: usize,
    /// How long one question waits for its answer.
    pub answer_timeout: Duration,
}

impl Default for ClientPolicy {
    fn default() -> Self {
        Self {
            elicitation: true,
            sampling: false,
            roots: false,
            max_questions: 10,
            max_question_bytes: 64 << 10,
            answer_timeout: Duration::from_secs(300),
        }
    }
}

impl ClientPolicy {
    /// The range of `max_questions`.
    pub const MAX_QUESTIONS: std::ops::RangeInclusive<u64> = 1..=1000;
    /// The range of `max_question_bytes`.
    pub const MAX_QUESTION_BYTES: std::ops::RangeInclusive<u64> = 1024..=(16 << 20);
    /// The range of `answer_timeout_ms`.
    pub const ANSWER_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=86_400_000;

    /// Allows or denies elicitation.
    #[must_use]
    pub fn elicitation(mut self, allowed: bool) -> Self {
        self.elicitation = allowed;
        self
    }

    /// Allows or denies sampling.
    #[must_use]
    pub fn sampling(mut self, allowed: bool) -> Self {
        self.sampling = allowed;
        self
    }

    /// Allows or denies reading the client's roots.
    #[must_use]
    pub fn roots(mut self, allowed: bool) -> Self {
        self.roots = allowed;
        self
    }

    /// Sets how long one question waits for its answer.
    #[must_use]
    pub fn answer_timeout(mut self, timeout: Duration) -> Self {
        self.answer_timeout = timeout;
        self
    }

    /// Sets the most questions per call.
    #[must_use]
    pub fn max_questions(mut self, questions: u32) -> Self {
        self.max_questions = questions;
        self
    }

    /// Sets the largest question and answer, in bytes.
    #[must_use]
    pub fn max_question_bytes(mut self, bytes: usize) -> Self {
        self.max_question_bytes = bytes;
        self
    }
}
