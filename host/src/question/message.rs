//! What a question's text may hold. The person answering an elicitation reads the plugin's
//! message under a line of the host's naming the plugin and the tool (over MCP), so the
//! message is bounded — length, lines — and may carry no character that hides, moves or
//! reorders text: control characters (but newline and tab), bidirectional formatting
//! characters, line and paragraph separators. It may not imitate the host's attribution
//! either. A message that breaks a rule is refused as the plugin's error, naming the rule:
//! nothing is cut or replaced, so what the person reads is what the plugin wrote.

use super::Asker;
use crate::tool::QuestionError;

/// Most characters (Unicode scalar values) of an elicitation's message.
pub const MAX_MESSAGE_CHARS: usize = 2_000;

/// Most lines of an elicitation's message (its newlines plus one).
pub const MAX_MESSAGE_LINES: usize = 20;

/// How the host's attribution begins (`[plugin 'P', tool 'T' asks]`), and how it began
/// before it came first (`… (asked by tool 'T' of plugin 'P')`): a message holding either
/// would pass itself off as the host's, or another plugin's.
const ATTRIBUTION_MARKERS: [&str; 2] = ["[plugin '", "(asked by tool '"];

/// Checks an elicitation's message against the rules above.
pub(crate) fn check_message(message: &str, asker: &Asker) -> Result<(), QuestionError> {
    let refuse = |rule: String| {
        QuestionError::Denied(format!(
            "tool '{}' of plugin '{}' asked question '{}' with a message that {rule}; the \
             host refuses it rather than show it to the person answering",
            asker.tool, asker.plugin, asker.key
        ))
    };
    let chars = message.chars().count();
    if chars > MAX_MESSAGE_CHARS {
        return Err(refuse(format!(
            "has {chars} characters, over the {MAX_MESSAGE_CHARS} a message may have"
        )));
    }
    let lines = message.split('\n').count();
    if lines > MAX_MESSAGE_LINES {
        return Err(refuse(format!(
            "has {lines} lines, over the {MAX_MESSAGE_LINES} a message may have"
        )));
    }
    check_text(message).map_err(|problem| refuse(format!("holds {problem}")))?;
    let lower = message.to_lowercase();
    if let Some(marker) = ATTRIBUTION_MARKERS
        .iter()
        .find(|marker| lower.contains(*marker))
    {
        return Err(refuse(format!(
            "imitates the host's attribution (\"{marker}\"), which names the plugin and tool \
             that ask"
        )));
    }
    Ok(())
}

/// Whether `text` is free of the characters no shown text may hold; the problem, naming the
/// character and where it is, if not.
pub(crate) fn check_text(text: &str) -> Result<(), String> {
    let named = text
        .chars()
        .enumerate()
        .find_map(|(at, c)| forbidden(c).map(|what| (at, c, what)));
    // And whatever else a description may not hold (text read but not shown).
    let hidden = llm_worker_rules::tool::first_hidden(text)
        .map(|(at, c)| (at, c, "a character read but not shown"));
    match named.into_iter().chain(hidden).min_by_key(|&(at, ..)| at) {
        Some((at, c, what)) => Err(format!("{what} (U+{:04X}) at character {at}", u32::from(c))),
        None => Ok(()),
    }
}

/// What kind of forbidden character `c` is, if it is one.
fn forbidden(c: char) -> Option<&'static str> {
    match c {
        '\n' | '\t' => None,
        // Unicode's Cc: C0 controls (carriage return, escape …), DEL and C1 controls.
        c if c.is_control() => Some("a control character"),
        '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{061C}' => Some("a bidirectional formatting character"),
        '\u{2028}' | '\u{2029}' => Some("a line or paragraph separator"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asker() -> Asker {
        Asker::new("evil", "phish", "token")
    }

    fn refused(message: &str) -> String {
        match check_message(message, &asker()) {
            Err(QuestionError::Denied(text)) => text,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_plain_message_of_a_few_lines_passes() {
        let message = "Sign in to continue.\n\n\tYour token:";
        assert_eq!(check_message(message, &asker()), Ok(()));
        assert_eq!(
            check_message(&"é".repeat(MAX_MESSAGE_CHARS), &asker()),
            Ok(())
        );
        let lines = vec!["line"; MAX_MESSAGE_LINES].join("\n");
        assert_eq!(check_message(&lines, &asker()), Ok(()));
    }

    #[test]
    fn a_forged_attribution_buried_under_newlines_is_refused() {
        let forged = format!(
            "Paste your token.\n(asked by tool 'login' of plugin 'github'){}",
            "\n".repeat(404)
        );
        let text = refused(&forged);
        assert!(
            text.contains("406 lines") && text.contains("tool 'phish' of plugin 'evil'"),
            "{text}"
        );
        // Without the newlines, the imitation itself is refused, in either form.
        let text = refused("Paste your token.\n(asked by tool 'login' of plugin 'github')");
        assert!(text.contains("imitates the host's attribution"), "{text}");
        let text = refused("[Plugin 'github', tool 'login' asks] Paste your token.");
        assert!(text.contains("imitates"), "{text}");
    }

    #[test]
    fn long_messages_and_hiding_characters_are_refused() {
        let text = refused(&"x".repeat(MAX_MESSAGE_CHARS + 1));
        assert!(text.contains("2001 characters"), "{text}");
        for (message, what) in [
            (
                "safe\u{202E}txt.exe",
                "bidirectional formatting character (U+202E)",
            ),
            (
                "a\u{2066}b\u{2069}",
                "bidirectional formatting character (U+2066)",
            ),
            ("a\u{200F}", "U+200F"),
            ("a\u{061C}", "U+061C"),
            ("overwrite\rme", "control character (U+000D)"),
            ("\u{1b}[2J", "control character (U+001B)"),
            ("next\u{85}line", "control character (U+0085)"),
            ("a\u{2028}b", "line or paragraph separator (U+2028)"),
            // Tag characters spell ASCII no one sees; supplementary variation selectors can
            // carry bytes the same way; a Hangul filler shows as nothing.
            ("Approve\u{E0049}\u{E0067}", "read but not shown (U+E0049)"),
            ("ok\u{E0101}", "read but not shown (U+E0101)"),
            ("a\u{3164}b", "read but not shown (U+3164)"),
            // A run of variation selectors shows as nothing, and so does one after a letter;
            // one after an emoji is text.
            (
                "hi\u{2764}\u{FE0F}\u{FE01}\u{FE02}",
                "read but not shown (U+FE01)",
            ),
            ("h\u{FE0E}i\u{FE0F}", "read but not shown (U+FE0E)"),
        ] {
            let text = refused(message);
            assert!(text.contains(what), "{message:?}: {text}");
        }
    }
}
