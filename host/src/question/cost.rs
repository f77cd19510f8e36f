//! What a question and its answer are charged against `[client] max_question_bytes`: the
//! bytes they carry plus a fixed overhead for every entry of every list they hold — each
//! message of a conversation and its content block, each stop sequence and model hint, each
//! field, choice and required name of a form, each root — as tool output is charged per
//! block. An empty entry is not free: 20,000 empty messages are some 60 bytes each on the
//! wire.

use super::form::Form;
use crate::plugin::charged;
use crate::question::QuestionError;
use crate::tool::{Content, ElicitationAnswer, Root, SamplingAnswer, SamplingRequest};

/// An elicitation of `message` with a schema of `schema_bytes` (its JSON text): one entry,
/// plus the form's entries.
pub(crate) fn elicitation(message: &str, schema_bytes: usize, form: Option<&Form>) -> usize {
    charged(
        message.len().saturating_add(schema_bytes),
        form.map_or(0, Form::items).saturating_add(1),
    )
}

/// A sampling request: each message twice (the message and its block), each stop sequence,
/// each model hint.
pub(crate) fn sampling(request: &SamplingRequest) -> usize {
    let texts = |texts: &[String]| texts.iter().map(String::len).fold(0, usize::saturating_add);
    let bytes = request
        .messages
        .iter()
        .map(|message| message.content.size())
        .fold(0, usize::saturating_add)
        .saturating_add(request.system_prompt.as_ref().map_or(0, String::len))
        .saturating_add(texts(&request.stop_sequences))
        .saturating_add(texts(&request.model_hints));
    let entries = request
        .messages
        .len()
        .saturating_mul(2)
        .saturating_add(request.stop_sequences.len())
        .saturating_add(request.model_hints.len())
        .saturating_add(1);
    charged(bytes, entries)
}

/// A roots question carries nothing but itself.
pub(crate) fn roots_question() -> usize {
    charged(0, 1)
}

/// A form's answer: its content's JSON text, and each field it gives.
pub(crate) fn elicitation_answer(answer: &ElicitationAnswer) -> usize {
    match answer {
        ElicitationAnswer::Accept(content) => charged(
            serde_json::to_string(content).map_or(usize::MAX, |text| text.len()),
            content.len().saturating_add(1),
        ),
        ElicitationAnswer::Decline | ElicitationAnswer::Cancel => charged(0, 1),
    }
}

/// A model's answer: its block, the model's name and the stop reason.
pub(crate) fn sampling_answer(answer: &SamplingAnswer) -> usize {
    charged(
        Content::size(&answer.content)
            .saturating_add(answer.model.len())
            .saturating_add(answer.stop_reason.as_ref().map_or(0, String::len)),
        1,
    )
}

/// Roots: each one's URI and name.
pub(crate) fn roots_answer(roots: &[Root]) -> usize {
    charged(
        roots
            .iter()
            .map(|root| {
                root.uri
                    .len()
                    .saturating_add(root.name.as_ref().map_or(0, String::len))
            })
            .fold(0, usize::saturating_add),
        roots.len().saturating_add(1),
    )
}

/// An answer of `bytes` (as the functions above count them) within the plugin's `[client]
/// max_question_bytes` of `max`; otherwise why not, naming the plugin and the setting.
pub(crate) fn within_limit(bytes: usize, max: usize, plugin: &str) -> Result<(), QuestionError> {
    if bytes > max {
        return Err(QuestionError::Failed(format!(
            "the answer was {bytes} bytes, over the limit of {max} bytes (`[client] \
             max_question_bytes` of plugin '{plugin}')"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::Message;

    #[test]
    fn empty_entries_are_charged() {
        let empty = SamplingRequest {
            messages: vec![Message::user(""); 20_000],
            ..SamplingRequest::default()
        };
        // The wire carried some 59 bytes per empty message; the charge is more.
        assert!(sampling(&empty) > 20_000 * 59, "{}", sampling(&empty));
        let hints = SamplingRequest {
            stop_sequences: vec![String::new(); 100],
            model_hints: vec![String::new(); 100],
            ..SamplingRequest::default()
        };
        assert_eq!(sampling(&hints), charged(0, 201));
        assert_eq!(roots_answer(&[]), charged(0, 1));
    }
}
