//! What a plugin's tool list must be: valid names and titles, within the caps.
//!
//! The macros check a `#[tool]` method's name and title, and the number of tools in a
//! `#[tool_registry]` block, at compile time, each with a message of their own that points at
//! the user's code; the host checks every plugin's list at load
//! (any toolchain can build a plugin) and refuses the plugin on the first problem, in the
//! words of [`NameProblem::reason`] and [`TitleProblem`].

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Longest tool name, in characters (all ASCII: see [`is_name_char`]).
pub const MAX_NAME_LEN: usize = 64;

/// Longest title, in bytes.
pub const MAX_TITLE_BYTES: usize = 256;

/// Most tools one plugin may list.
pub const MAX_TOOLS: usize = 256;

/// Longest tool description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 16 << 10;

/// Longest input (or output) schema of one tool, in bytes of JSON text.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// Whether `c` may be part of a tool name: `A-Z a-z 0-9 _ -` (what every provider accepts).
#[must_use]
pub const fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Why a tool name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name has a character other than `A-Z a-z 0-9 _ -` (the first such).
    BadChar(char),
    /// The name is longer than [`MAX_NAME_LEN`]; `len` is its length (all ASCII).
    TooLong {
        /// The name's length.
        len: usize,
    },
}

impl NameProblem {
    /// The problem as the host says it: "it is empty", ….
    #[must_use]
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Empty => "it is empty",
            Self::BadChar(_) => "only the characters A-Z, a-z, 0-9, '_' and '-' are allowed",
            Self::TooLong { .. } => "it is longer than 64 characters",
        }
    }
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// Checks a tool name: 1 to [`MAX_NAME_LEN`] characters of `A-Z a-z 0-9 _ -`.
///
/// # Errors
/// The first problem, in this order: empty, a character not allowed, too long (so that a
/// name found too long is all ASCII and its length in bytes is its length in characters).
pub fn check_name(name: &str) -> Result<(), NameProblem> {
    if name.is_empty() {
        return Err(NameProblem::Empty);
    }
    if let Some(bad) = name.chars().find(|&c| !is_name_char(c)) {
        return Err(NameProblem::BadChar(bad));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameProblem::TooLong { len: name.len() });
    }
    Ok(())
}

/// Why a tool's title is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TitleProblem {
    /// The title is empty or only white space.
    Empty,
    /// The title has a line break, another control character or a bidirectional override.
    NotOneLine,
    /// The title is longer than [`MAX_TITLE_BYTES`]; `len` is its length in bytes.
    TooLong {
        /// The title's length in bytes.
        len: usize,
    },
}

impl fmt::Display for TitleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty | Self::NotOneLine => f.write_str("it must be one line of text, not empty"),
            Self::TooLong { len } => {
                write!(f, "it is {len} bytes, over the limit of {MAX_TITLE_BYTES}")
            }
        }
    }
}

/// Checks a title: one line of text, not empty, at most [`MAX_TITLE_BYTES`] bytes.
///
/// # Errors
/// The first problem, in this order: empty, not one line, too long.
pub fn check_title(title: &str) -> Result<(), TitleProblem> {
    if title.trim().is_empty() {
        return Err(TitleProblem::Empty);
    }
    if title.chars().any(char::is_control) || first_hidden(title).is_some() {
        return Err(TitleProblem::NotOneLine);
    }
    if title.len() > MAX_TITLE_BYTES {
        return Err(TitleProblem::TooLong { len: title.len() });
    }
    Ok(())
}

/// Whether `c` may not be in a description: a control character other than a line break or a
/// tab (a terminal acts on it: it clears the screen, moves the cursor, rewrites what was
/// printed), one that reorders the text around it (Unicode's bidirectional embeddings,
/// overrides, isolates and marks), or one that is read but not shown (tag characters, which
/// spell ASCII invisibly; invisible operators and word joiners; line and paragraph separators;
/// the byte-order mark; interlinear annotations and the unassigned code points beside them and
/// beside the word joiner, which Unicode reserves as ignorable; the soft hyphen, the combining grapheme joiner,
/// the Mongolian variation selectors and vowel separator, the Khmer inherent vowels, the Hangul
/// fillers, the shorthand and musical format controls, shown as nothing; the whole block of
/// tags and supplementary variation selectors, U+E0000–U+E0FFF, which can carry bytes no one
/// sees — ideographic variation sequences included), so that what an operator reads is what a
/// model gets. Zero-width spaces and joiners and the first sixteen variation selectors stay:
/// scripts and emoji need them ([`first_hidden`] refuses them where none does, since there
/// they only hide data).
#[must_use]
pub const fn is_hidden_char(c: char) -> bool {
    // The control characters (C0, DEL, C1) but line feed and tab, spelt out: `char::is_control`
    // is `const` only from Rust 1.97.
    matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFFB}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// Text as a terminal should show it: each character of [`is_hidden_char`] written as its
/// escape (`\u{1b}`) instead of itself, the rest as it is. For text a plugin wrote (its
/// stderr, its results, its error messages) on its way to a person.
///
/// ```
/// use llm_worker_rules::tool::Visible;
/// assert_eq!(Visible("red \u{1b}[31m\tok").to_string(), "red \\u{1b}[31m\tok");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Visible<'a>(pub &'a str);

impl fmt::Display for Visible<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(is_hidden_char) {
            f.write_str(&rest[..at])?;
            let hidden = rest[at..].chars().next().unwrap_or_default();
            write!(f, "\\u{{{:x}}}", u32::from(hidden))?;
            rest = &rest[at + hidden.len_utf8()..];
        }
        f.write_str(rest)
    }
}

/// Text that must stay on one line of a report (a file name, why a plugin was refused), as a
/// terminal or a log should show it: as [`Visible`] shows it, and line feeds, tabs and
/// backslashes escaped too (`\n`, `\t`, `\\`), so that it cannot start a line of its own that
/// reads as the report's (`ok`, `lock: approved`), nor pass for such an escape. Shown so
/// wherever the report goes, a pipe included.
///
/// ```
/// use llm_worker_rules::tool::OneLine;
/// assert_eq!(
///     OneLine("a\nok  b\t\u{1b}\\n").to_string(),
///     "a\\nok  b\\t\\u{1b}\\\\n"
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct OneLine<'a>(pub &'a str);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\n' => f.write_str("\\n")?,
                '\t' => f.write_str("\\t")?,
                '\\' => f.write_str("\\\\")?,
                c if is_hidden_char(c) => write!(f, "\\u{{{:x}}}", u32::from(c))?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// At most the first `.1` characters of a text, shown as [`Visible`] shows it, then how long
/// the whole was: a text a message quotes whose length is not checked yet (a plugin's name or
/// URI refused for being too long) stays short.
///
/// ```
/// use llm_worker_rules::tool::VisibleCut;
/// assert_eq!(VisibleCut("abc", 8).to_string(), "abc");
/// assert_eq!(VisibleCut("abcdef", 2).to_string(), "ab… (6 bytes)");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct VisibleCut<'a>(pub &'a str, pub usize);

impl fmt::Display for VisibleCut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(text, max) = *self;
        match text.char_indices().nth(max) {
            None => Visible(text).fmt(f),
            Some((end, _)) => write!(f, "{}… ({} bytes)", Visible(&text[..end]), text.len()),
        }
    }
}

/// Why a description is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescriptionProblem {
    /// It holds a character of [`is_hidden_char`], the first at `at` (in characters).
    HiddenChar {
        /// The character.
        found: char,
        /// Its index, in characters.
        at: usize,
    },
    /// It is longer than [`MAX_DESCRIPTION_BYTES`]; `len` is its length in bytes.
    TooLong {
        /// The description's length in bytes.
        len: usize,
    },
}

impl fmt::Display for DescriptionProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HiddenChar { found, at } => write!(
                f,
                "it holds {found:?} (U+{:04X}) at character {at}: a description may hold line \
                 breaks and tabs, but no other control character and no bidirectional override",
                u32::from(*found)
            ),
            Self::TooLong { len } => write!(
                f,
                "it is {len} bytes, over the limit of {MAX_DESCRIPTION_BYTES}"
            ),
        }
    }
}

/// Checks a description (of a tool, resource, prompt or argument): at most
/// [`MAX_DESCRIPTION_BYTES`], and no character of [`is_hidden_char`].
///
/// # Errors
/// The first problem: too long, then the first hidden character.
pub fn check_description(text: &str) -> Result<(), DescriptionProblem> {
    if text.len() > MAX_DESCRIPTION_BYTES {
        return Err(DescriptionProblem::TooLong { len: text.len() });
    }
    match first_hidden(text) {
        Some((at, found)) => Err(DescriptionProblem::HiddenChar { found, at }),
        None => Ok(()),
    }
}

/// The first character of `text` that hides something, and its index (in characters): one of
/// [`is_hidden_char`], or a zero-width space, non-joiner or joiner (U+200B–U+200D) or a
/// variation selector (U+FE00–U+FE0F) where no script or emoji needs one, so that it can only
/// carry bits no one sees: at the start of the text, after a blank (white space, the braille
/// blank), after another of them (but the joiner after a selector, as in ❤️‍🔥), or after an
/// ASCII character — but a keycap (`1`, U+FE0F, U+20E3) and a zero-width character between
/// ASCII and a letter of another script (a Thai line-break hint after a Latin word). A joiner
/// between emoji, a non-joiner in Persian and a selector after an emoji stay text.
#[must_use]
pub fn first_hidden(text: &str) -> Option<(usize, char)> {
    let selector = |c: char| matches!(c, '\u{FE00}'..='\u{FE0F}');
    let zero_width = |c: char| matches!(c, '\u{200B}'..='\u{200D}');
    let blank = |c: char| c.is_whitespace() || c == '\u{2800}';
    let mut before: Option<char> = None;
    let mut rest = text.chars();
    let mut at = 0;
    while let Some(c) = rest.next() {
        let after = rest.clone().next();
        let hides = is_hidden_char(c)
            || ((selector(c) || zero_width(c))
                && match before {
                    None => true,
                    Some(before) if zero_width(before) => true,
                    Some(before) if selector(before) => c != '\u{200D}',
                    Some(before) if blank(before) => true,
                    Some(before) if before.is_ascii() => {
                        let keycap = matches!(before, '0'..='9' | '#' | '*')
                            && c == '\u{FE0F}'
                            && after == Some('\u{20E3}');
                        let boundary = zero_width(c)
                            && after.is_some_and(|next| {
                                !next.is_ascii()
                                    && !blank(next)
                                    && !selector(next)
                                    && !zero_width(next)
                                    && !is_hidden_char(next)
                            });
                        !(keycap || boundary)
                    }
                    Some(_) => false,
                });
        if hides {
            return Some((at, c));
        }
        before = Some(c);
        at += 1;
    }
    None
}

/// The description from a doc comment's pieces (each `#[doc = …]` attribute, in order): lines
/// of `///` comments, whole `/** */` blocks or `include_str!` texts.
///
/// Removes a `/** */` block's leading `*` column, the indentation common to all lines, and
/// blank lines at the start and end; keeps blank lines between paragraphs.
/// The SDK sends this text, and the host checks it ([`check_description`]); the macros check
/// it at compile time, from the same function.
#[must_use]
pub fn doc_description(pieces: &[&str]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for piece in pieces {
        // `split`, not `lines`: an empty piece (a blank `///` line) is one empty line.
        let piece_lines: Vec<&str> = piece
            .split('\n')
            .map(|line| line.strip_suffix('\r').unwrap_or(line))
            .collect();
        // A `/** */` block whose continuation lines all start with `*` (after spaces).
        let starred = piece_lines.len() > 1
            && piece_lines
                .iter()
                .skip(1)
                .filter(|line| !line.trim().is_empty())
                .all(|line| line.trim_start().starts_with('*'));
        for (index, line) in piece_lines.iter().enumerate() {
            let line = if starred && index > 0 {
                let rest = line.trim_start();
                rest.strip_prefix('*').unwrap_or(rest)
            } else {
                line
            };
            lines.push(line.trim_end().to_owned());
        }
    }
    // Indentation in characters (a doc comment may be indented with wide spaces).
    let indent = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.chars().take_while(|c| c.is_whitespace()).count())
        .min()
        .unwrap_or(0);
    let lines: Vec<&str> = lines
        .iter()
        .map(|line| {
            let cut = line
                .char_indices()
                .nth(indent)
                .map_or(line.len(), |(at, _)| at);
            line[cut..].trim_end()
        })
        .collect();
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |e| e + 1);
    lines[start..end].join("\n")
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn descriptions_hold_no_hidden_characters() {
        assert_eq!(check_description("Reads a note.\n\tIndented line."), Ok(()));
        // Zero-width joiners and non-joiners are text (emoji, Persian).
        assert_eq!(check_description("👩\u{200D}💻 می\u{200C}خواهم"), Ok(()));
        for (text, found, at) in [
            ("red \u{1b}[31m", '\u{1b}', 4),
            ("line\rover", '\r', 4),
            ("csi \u{9b}2J", '\u{9b}', 4),
            ("abc\u{202E}fed", '\u{202E}', 3),
            ("\u{2066}isolate", '\u{2066}', 0),
            ("safe\u{E0049}\u{E0067}", '\u{E0049}', 4),
            ("a\u{2028}b", '\u{2028}', 1),
            ("\u{FEFF}bom", '\u{FEFF}', 0),
        ] {
            let problem = check_description(text).expect_err(text);
            assert_eq!(problem, DescriptionProblem::HiddenChar { found, at });
            assert!(problem.to_string().contains("U+"), "{problem}");
        }
        let long = "d".repeat(MAX_DESCRIPTION_BYTES + 1);
        assert!(matches!(
            check_description(&long),
            Err(DescriptionProblem::TooLong { .. })
        ));
    }

    #[test]
    fn zero_width_characters_and_selectors_only_where_a_script_or_emoji_needs_them() {
        for fine in [
            "\u{2764}\u{FE0F} hearts",           // an emoji and its selector
            "\u{2764}\u{FE0F}\u{200D}\u{1F525}", // a selector, then a joiner
            "1\u{FE0F}\u{20E3} keycap",          // a keycap
            "API\u{200B}\u{E02}\u{E2D}\u{E07}",  // a line-break hint before Thai
            "\u{1F469}\u{200D}\u{1F4BB}",        // a joiner between emoji
            "\u{645}\u{6CC}\u{200C}\u{62E}\u{648}\u{627}\u{647}\u{645}", // a non-joiner in Persian
        ] {
            assert_eq!(first_hidden(fine), None, "{fine:?}");
        }
        for (text, found, at) in [
            ("\u{200B}start", '\u{200B}', 0),
            ("\u{FE0F}start", '\u{FE0F}', 0),
            // One selector or zero-width character after each ASCII letter carries bits.
            ("a\u{FE01}b\u{FE0E}c", '\u{FE01}', 1),
            ("ab\u{200C}c\u{200B}", '\u{200C}', 2),
            ("x\u{200D}y", '\u{200D}', 1),
            // Runs.
            ("\u{1F600}\u{200B}\u{200C}", '\u{200C}', 2),
            ("\u{2764}\u{FE0F}\u{FE0F}", '\u{FE0F}', 2),
            ("\u{1F469}\u{200D}\u{FE0F}", '\u{FE0F}', 2),
            // After a blank, or a digit that is no keycap.
            ("\u{2800}\u{FE01}", '\u{FE01}', 1),
            ("a \u{200B}", '\u{200B}', 2),
            ("2\u{FE0F}0\u{FE0E}", '\u{FE0F}', 1),
            ("x\u{200B} y", '\u{200B}', 1),
            // Unassigned code points Unicode reserves as ignorable.
            ("a\u{2065}b", '\u{2065}', 1),
            ("a\u{FFF0}b", '\u{FFF0}', 1),
            ("a\u{FFF8}b", '\u{FFF8}', 1),
        ] {
            assert_eq!(first_hidden(text), Some((at, found)), "{text:?}");
        }
        // The supplementary selectors are refused everywhere, ideographic variants included.
        assert_eq!(first_hidden("\u{8FBB}\u{E0100}"), Some((1, '\u{E0100}')));
    }

    #[test]
    fn names() {
        assert_eq!(check_name("get_user-2"), Ok(()));
        assert_eq!(check_name(""), Err(NameProblem::Empty));
        assert_eq!(check_name("grüßen"), Err(NameProblem::BadChar('ü')));
        assert_eq!(check_name("a.b"), Err(NameProblem::BadChar('.')));
        assert_eq!(check_name(&"n".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(
            check_name(&"n".repeat(MAX_NAME_LEN + 1)),
            Err(NameProblem::TooLong { len: 65 })
        );
        // Too long and not ASCII: the character is the problem named.
        assert_eq!(check_name(&"é".repeat(40)), Err(NameProblem::BadChar('é')));
        let reason = NameProblem::TooLong { len: 65 }.reason();
        assert!(reason.contains(&MAX_NAME_LEN.to_string()), "{reason}");
    }

    #[test]
    fn titles() {
        assert_eq!(check_title("Read a note"), Ok(()));
        assert_eq!(check_title(""), Err(TitleProblem::Empty));
        assert_eq!(check_title("  "), Err(TitleProblem::Empty));
        assert_eq!(check_title("two\nlines"), Err(TitleProblem::NotOneLine));
        assert_eq!(check_title(&"t".repeat(MAX_TITLE_BYTES)), Ok(()));
        assert_eq!(
            check_title(&"t".repeat(MAX_TITLE_BYTES + 1)),
            Err(TitleProblem::TooLong { len: 257 })
        );
        assert_eq!(
            TitleProblem::TooLong { len: 257 }.to_string(),
            "it is 257 bytes, over the limit of 256"
        );
    }
}
