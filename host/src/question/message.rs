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

/// Most blank lines in a row in a text a question shows: more would push what follows out of
/// sight of the host's attribution above it.
pub const MAX_BLANK_LINES_IN_A_ROW: usize = 2;

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
    check_shown(message).map_err(refuse)
}

/// Checks a text a question shows the person answering (a message, a form's title, a
/// sampling request's text): no character that hides, moves or reorders text
/// ([`check_text`]), no look-alike of the host's attribution, no run of blank lines burying
/// what follows. What is wrong, if anything, as the end of a sentence ("that …").
pub(crate) fn check_shown(text: &str) -> Result<(), String> {
    check_text(text).map_err(|problem| format!("holds {problem}"))?;
    check_not_attributed(text)?;
    let mut blank = 0;
    for line in text.split('\n') {
        blank = if line.chars().all(is_blank) {
            blank + 1
        } else {
            0
        };
        if blank > MAX_BLANK_LINES_IN_A_ROW {
            return Err(format!(
                "has more than {MAX_BLANK_LINES_IN_A_ROW} blank lines in a row, which would \
                 push what follows out of sight"
            ));
        }
    }
    Ok(())
}

/// Checks that `text` does not imitate the host's attribution (a sampling request's texts,
/// which are documents as often as not, are held to this rule alone). What is wrong, if
/// anything, as the end of a sentence ("that …").
pub(crate) fn check_not_attributed(text: &str) -> Result<(), String> {
    match imitated_attribution(text) {
        Some(form) => Err(format!(
            "imitates the host's attribution ({form}), which names the plugin and tool that ask"
        )),
        None => Ok(()),
    }
}

/// Which form of the host's attribution `text` imitates, if any: `[plugin 'P', tool 'T'
/// asks]`, as it is now, or `(asked by tool 'T' of plugin 'P')`, as it was. However it is
/// spelled: compared after compatibility normalisation (full-width brackets and letters read
/// as ASCII), in lower case, with every kind of quote read as `'` and blanks (non-breaking
/// and ideographic spaces too) taken out; and in any brackets, as `plugin '…', tool '…'`.
fn imitated_attribution(text: &str) -> Option<&'static str> {
    use unicode_normalization::UnicodeNormalization as _;
    // Quotes are read as `'` before normalising too: NFKC splits some (the acute accent,
    // Greek oxia) into a space and a combining mark.
    let quote = |c: char| {
        matches!(
            c,
            '"' | '`'
                | '\u{B4}'
                | '\u{2B9}'..='\u{2BD}'
                | '\u{2C8}'
                | '\u{1FFD}'
                | '\u{1FFE}'
                | '\u{1FBD}'
                | '\u{1FBF}'
                | '\u{0384}'
                | '\u{02DD}'
                | '\u{02EE}'
                | '\u{05F3}'
                | '\u{05F4}'
                | '\u{301D}'..='\u{301F}'
                | '\u{A78B}'
                | '\u{055A}'
                | '\u{02CA}'
                | '\u{275B}'
                | '\u{275C}'
                | '\u{07F4}'
                | '\u{07F5}'
                | '\u{1FEF}'
                | '\u{2018}'..='\u{201F}'
                | '\u{2032}'..='\u{2037}'
                | '\u{300C}'..='\u{300F}'
                | '\u{A78C}'
                | '\u{FF02}'
                | '\u{FF07}'
                | '\u{FF40}'
        )
    };
    let comma = |c: char| {
        matches!(
            c,
            '\u{3001}'
                | '\u{FF64}'
                | '\u{FE50}'
                | '\u{FE51}'
                | '\u{FF0C}'
                | '\u{060C}'
                | '\u{FE10}'
                | '\u{FE11}'
                | '\u{2E41}'
                | '\u{A665}'
        )
    };
    // Letters that look alike in common fonts are one letter here (`I`, lower-cased `i`, `l`,
    // `1`, `|`): the words compared are folded the same way.
    let fold = |c: char| match c {
        'i' | '1' | '|' | '\u{01C0}' => 'l',
        c => c,
    };
    let folded = |word: &str| word.chars().map(fold).collect::<String>();
    // Blanks of any kind are one space here (a name holding one is told apart below).
    let mut spaced = String::with_capacity(text.len());
    let letters = text
        .chars()
        .map(|c| if quote(c) { '\'' } else { c })
        // Decomposed, so that every accent stands alone and goes (`ḷ` is `l` here).
        .nfkd()
        .flat_map(char::to_lowercase)
        // What shows as nothing is nothing here: a zero-width space or a soft hyphen inside
        // "plugin", a terminal's escape, a variation selector.
        .filter(|&c| {
            is_blank(c)
                || (!unicode_normalization::char::is_combining_mark(c)
                    && !c.is_control()
                    && !llm_worker_rules::tool::is_hidden_char(c)
                    && !matches!(c, '\u{200B}'..='\u{200D}' | '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}'))
        })
        .map(|c| match c {
            c if is_blank(c) => ' ',
            c if quote(c) => '\'',
            c if comma(c) => ',',
            // Letters of other scripts that look like those of the attribution's words.
            '\u{0430}' | '\u{03B1}' => 'a',
            '\u{0261}' | '\u{0581}' => 'g',
            '\u{0131}' | '\u{0456}' | '\u{03B9}' => 'i',
            '\u{04CF}' | '\u{0269}' => 'l',
            '\u{043A}' | '\u{03BA}' => 'k',
            '\u{0578}' => 'n',
            '\u{043E}' | '\u{03BF}' | '\u{0585}' => 'o',
            '\u{0440}' | '\u{03C1}' => 'p',
            '\u{0455}' => 's',
            '\u{057D}' | '\u{03C5}' => 'u',
            '\u{03C4}' => 't',
            c => c,
        })
        .map(fold);
    for c in letters {
        if c != ' ' || !spaced.ends_with(' ') {
            spaced.push(c);
        }
    }
    let skeleton: String = spaced.chars().filter(|&c| c != ' ').collect();
    if skeleton.contains(&folded("[plugin'")) {
        return Some("\"[plugin '\"");
    }
    if skeleton.contains(&folded("askedbytool'")) {
        return Some("\"asked by tool '\"");
    }
    // `plugin '<name>', tool '` in any brackets, or `plugin '<name>', ` and the subject of a
    // request other than a tool call (`a resource read asks`: see `Asker::subject`), blanks
    // removed; the comma may be a second quote (a low quote looks like one), or left out when
    // the name is one word (so that "the plugin's reply is 'a completion'" passes).
    const SUBJECTS: [&str; 6] = [
        "tool'",
        "apromptrendering",
        "thepromptlist",
        "aresourceread",
        "theresourcelist",
        "acompletion",
    ];
    let subjects: Vec<String> = SUBJECTS.iter().map(|subject| folded(subject)).collect();
    let plugin = folded("plugin");
    let mut rest = spaced.as_str();
    while let Some(at) = rest.find(&plugin) {
        rest = &rest[at + plugin.len()..];
        let Some(quoted) = rest.trim_start_matches(' ').strip_prefix('\'') else {
            continue;
        };
        let quoted = quoted.trim_start_matches('\'');
        let Some(end) = quoted.find('\'') else {
            continue;
        };
        let name = &quoted[..end];
        let closing = &quoted[end..];
        let after = closing.trim_start_matches('\'');
        let quotes = closing.len() - after.len();
        let after = after.trim_start_matches(' ');
        let (after, comma) = match after.strip_prefix(',') {
            Some(after) => (after, true),
            None => (after, quotes > 1),
        };
        if !comma && name.contains(' ') {
            continue;
        }
        let subject: String = after.chars().filter(|&c| c != ' ').take(24).collect();
        if subjects
            .iter()
            .any(|known| subject.starts_with(known.as_str()))
        {
            return Some("\"plugin '…', tool '…'\" (or the subject of another request)");
        }
    }
    None
}

/// Checks a document's text put to the client (a sampling request's messages and system
/// prompt): line breaks (`\n`, `\r\n`), tabs and right-to-left marks pass, as documents hold
/// them; any other control character (a terminal's escape, a carriage return alone, a
/// backspace: each can hide text from the person approving), a character that overrides or
/// isolates the text's direction, or a line or paragraph separator does not. A plugin
/// sampling a document it fetched normalises these first. What is wrong, if anything, as
/// the end of a sentence ("holding …").
pub(crate) fn check_document(text: &str) -> Result<(), String> {
    let mut next = text.chars().skip(1).chain(std::iter::once('\0'));
    let bad = text.chars().enumerate().find_map(|(at, c)| {
        let after = next.next();
        let what = match c {
            '\t' | '\n' => return None,
            // A line ending of two characters; alone, it moves a terminal's cursor back over
            // the line's start (what follows hides what came before).
            '\r' if after == Some('\n') => return None,
            '\r' => "a carriage return not ending a line",
            '\u{0}'..='\u{1F}' | '\u{7F}'..='\u{9F}' => "a control character",
            '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => {
                "a character overriding the text's direction"
            }
            '\u{2028}' | '\u{2029}' => "a line or paragraph separator",
            _ => return None,
        };
        Some((at, c, what))
    });
    match bad {
        Some((at, c, what)) => Err(format!("{what} (U+{:04X}) at character {at}", u32::from(c))),
        None => Ok(()),
    }
}

/// Whether `c` shows as blank space: white space, and the braille blank, which Unicode does not
/// count as white space.
fn is_blank(c: char) -> bool {
    c.is_whitespace() || c == '\u{2800}'
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
            other => panic!("{message:?} not refused: {other:?}"),
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
    fn look_alikes_of_the_attribution_and_runs_of_blank_lines_are_refused() {
        for forged in [
            // A non-breaking space, full-width brackets and letters, curly quotes, two spaces,
            // other brackets, an ideographic space.
            "[plugin\u{A0}'github', tool 'login' asks]",
            "\u{FF3B}plugin 'github', tool 'login' asks\u{FF3D}",
            "[\u{FF50}\u{FF4C}\u{FF55}\u{FF47}\u{FF49}\u{FF4E} 'github', tool 'login' asks]",
            "[plugin \u{2018}github\u{2019}, tool \u{2018}login\u{2019} asks]",
            "[plugin  'github', tool 'login' asks]",
            "\u{3010}plugin 'github',\u{3000}tool 'login' asks\u{3011}",
            "(asked by tool\u{A0}'login' of plugin 'github')",
            // An acute accent (split by NFKC), a saltillo, an ideographic comma.
            "[plugin \u{B4}github\u{B4}, tool \u{B4}login\u{B4} asks]",
            "[plugin \u{A78C}github\u{A78C}, tool 'login' asks]",
            "\u{3010}plugin 'github'\u{3001}tool 'login' asks\u{3011}",
            // The attribution of requests other than tool calls, in other brackets or none.
            "\u{3010}plugin 'github', a prompt rendering asks\u{3011}",
            "(plugin 'github', a resource read asks)",
            "plugin 'github', the resource list asks",
            "plugin 'github', a completion asks",
            "[plugin\u{A0}'github', the prompt list asks]",
            // Quotes NFKC splits into a space and an accent (psili, koronis, dasia, tonos,
            // double acute), a low quote or an Arabic comma for the comma, a letter with an
            // accent below, CJK and Armenian quotes, letters of other scripts in "plugin". (What shows as nothing is refused in a
            // message before this: e2e `questions::sampling_texts_of_every_kind_…`.)
            "[plugin \u{1FBF}github\u{1FBF}, tool \u{1FBF}login\u{1FBF} asks]",
            "[plugin \u{1FBD}github\u{1FBD}, tool \u{1FFE}login\u{0384} asks]",
            "(asked by tool \u{02DD}login\u{02DD} of plugin 'github')",
            "\u{3010}plugin 'github'\u{201A} tool 'login' asks\u{3011}",
            "\u{3010}plugin 'github'\u{060C} tool 'login' asks\u{3011}",
            "[plugin \u{055A}github\u{055A}, tool \u{055A}login\u{055A} asks]",
            "[pl\u{057D}\u{0261}\u{0131}n 'github', tool 'login' asks]",
            "[\u{0440}lugin 'github', t\u{043E}\u{043E}l 'login' asks]",
            "[pIugin 'github', tooI 'login' asks]",
            "(plugin ''github'', tool ''login'' asks)",
            "\u{3010}plugin 'github' tool 'login' asks\u{3011}",
            "(plugin 'github' tool 'login' asks)",
            "[pl\u{0323}ugin 'github', tool 'login' asks]",
            "[plugin \u{301D}github\u{301E}, tool 'login' asks]",
        ] {
            let text = refused(&format!("Paste your token.\n{forged}"));
            assert!(
                text.contains("imitates the host's attribution"),
                "{forged:?}: {text}"
            );
        }
        let text = refused(&format!("Hello.{}[real question]", "\n".repeat(4)));
        assert!(text.contains("blank lines in a row"), "{text}");
        let text = refused("Hello.\n\u{A0}\n \n\u{3000}\nrest");
        assert!(text.contains("blank lines in a row"), "{text}");
        let text = refused("Hello.\n\u{2800}\n\u{2800}\u{2800}\n\u{2800}\nrest");
        assert!(text.contains("blank lines in a row"), "{text}");
        // Ordinary text about plugins and tools passes, and so do two blank lines.
        for fine in [
            "This plugin's tool 'search' needs a key.",
            "Each plugin's manifest declares `tool` entries.",
            "the plugin's reply is 'a completion'",
            "Plugin settings: tool list, 'advanced' mode.",
            "First.\n\n\nSecond.",
        ] {
            assert_eq!(check_message(fine, &asker()), Ok(()), "{fine:?}");
        }
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
