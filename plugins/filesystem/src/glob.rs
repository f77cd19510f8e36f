//! Glob patterns as the original's `minimatch(path, pattern, { dot: true })` reads them, for
//! the common forms: `*` and `?` within one component, `**` across components, `[…]` classes
//! and `{a,b}` alternatives (expanded first, as minimatch does). A pattern the `glob` crate
//! cannot read is matched literally.

use glob::{MatchOptions, Pattern};

/// A compiled pattern: one `glob::Pattern` per brace alternative.
pub struct Glob(Vec<Pattern>);

/// At most this many alternatives from one pattern's braces.
const MAX_ALTERNATIVES: usize = 256;

/// Longest pattern whose braces are expanded; a longer one is matched literally (each byte of
/// a compiled pattern takes some 16 bytes of the plugin's memory, and finding a brace group
/// is quadratic in the pattern's braces).
const MAX_PATTERN_BYTES: usize = 4 << 10;

/// Most bytes of all a pattern's alternatives together: 256 alternatives of a 32 KB pattern
/// compiled to 134 MB, past the plugin's memory limit (a trap).
const MAX_EXPANDED_BYTES: usize = 64 << 10;

impl Glob {
    /// Compiles `pattern`.
    #[must_use]
    pub fn new(pattern: &str) -> Self {
        let mut alternatives = Vec::new();
        if pattern.len() > MAX_PATTERN_BYTES {
            alternatives.push(Pattern::escape(pattern));
        } else {
            expand(pattern, &mut alternatives);
        }
        Self(
            alternatives
                .iter()
                .map(|alternative| {
                    Pattern::new(&as_minimatch_reads(alternative)).unwrap_or_else(|_| {
                        Pattern::new(&Pattern::escape(alternative)).unwrap_or_default()
                    })
                })
                .collect(),
        )
    }

    /// Whether the relative path `path` (components separated by `/`) matches.
    #[must_use]
    pub fn matches(&self, path: &str) -> bool {
        let options = MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: false,
        };
        self.0
            .iter()
            .any(|pattern| pattern.matches_with(path, options))
    }
}

/// `pattern` written so that the `glob` crate reads it as minimatch does: a run of stars in
/// a component other than `**` alone is one `*` (`**.txt` is `*.txt`; the crate refuses it),
/// and a class opened by `[^` is negated, as `[!` writes it for the crate. A class is copied
/// as it is otherwise (`[[^]` holds `[` and `^`; stars in it are characters).
fn as_minimatch_reads(pattern: &str) -> String {
    let parts: Vec<String> = pattern
        .split('/')
        .map(|part| {
            if part == "**" {
                return part.to_owned();
            }
            let chars: Vec<char> = part.chars().collect();
            let mut out = String::with_capacity(part.len());
            let mut after_star = false;
            let mut at = 0;
            while at < chars.len() {
                if chars[at] == '['
                    && let Some(end) = class_end(&chars, at)
                {
                    out.push('[');
                    let mut inside = at + 1;
                    if chars[inside] == '^' {
                        out.push('!');
                        inside += 1;
                    }
                    out.extend(&chars[inside..=end]);
                    at = end + 1;
                    after_star = false;
                    continue;
                }
                let ch = chars[at];
                at += 1;
                if ch == '*' && after_star {
                    continue;
                }
                after_star = ch == '*';
                out.push(ch);
            }
            out
        })
        .collect();
    parts.join("/")
}

/// The `]` closing the class that opens at `chars[open]` (a `[`), as the `glob` crate reads a
/// class: an optional `!` or `^`, then a `]` that is a member if it comes first, then members
/// up to the next `]`; `None` if nothing closes it.
fn class_end(chars: &[char], open: usize) -> Option<usize> {
    let mut at = open + 1;
    if matches!(chars.get(at), Some('!' | '^')) {
        at += 1;
    }
    if chars.get(at) == Some(&']') {
        at += 1;
    }
    chars
        .get(at..)?
        .iter()
        .position(|c| *c == ']')
        .map(|found| at + found)
}

/// The alternatives of the first `{a,b}` group in `pattern`, each expanded in turn.
fn expand(pattern: &str, out: &mut Vec<String>) {
    let expanded: usize = out.iter().map(String::len).sum();
    if out.len() >= MAX_ALTERNATIVES || expanded + pattern.len() > MAX_EXPANDED_BYTES {
        return;
    }
    let Some((open, close, commas)) = first_group(pattern) else {
        out.push(pattern.to_owned());
        return;
    };
    let (head, tail) = (&pattern[..open], &pattern[close + 1..]);
    let mut start = open + 1;
    for end in commas.into_iter().chain([close]) {
        expand(&format!("{head}{}{tail}", &pattern[start..end]), out);
        start = end + 1;
    }
}

/// The first brace group with a comma at its top level: its `{`, its `}`, and its commas.
fn first_group(pattern: &str) -> Option<(usize, usize, Vec<usize>)> {
    let bytes = pattern.as_bytes();
    for (open, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'{') {
        let mut depth = 0usize;
        let mut commas = Vec::new();
        for (at, byte) in bytes.iter().enumerate().skip(open) {
            match byte {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        if !commas.is_empty() {
                            return Some((open, at, commas));
                        }
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(at),
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Braces multiplying a long pattern past the plugin's memory: bounded, and a pattern too
    /// long to expand is matched literally.
    #[test]
    fn patterns_are_bounded_in_what_they_compile_to() {
        let long = format!("{}{}", "a".repeat(32_000), "{0,1}".repeat(8));
        let glob = Glob::new(&long);
        assert_eq!(glob.0.len(), 1);
        assert!(glob.matches(&long));
        let mut alternatives = Vec::new();
        expand(
            &format!("{}{}", "a".repeat(4_000), "{0,1}".repeat(8)),
            &mut alternatives,
        );
        assert!(alternatives.iter().map(String::len).sum::<usize>() <= MAX_EXPANDED_BYTES);
        assert!(!alternatives.is_empty());
        assert_eq!(Glob::new("{a,b}.txt").0.len(), 2);
    }

    #[test]
    fn patterns_match_as_minimatch_does() {
        let glob = Glob::new("*.txt");
        assert!(glob.matches("a.txt"));
        assert!(glob.matches(".hidden.txt"));
        assert!(!glob.matches("sub/a.txt"));
        let deep = Glob::new("**/*.txt");
        assert!(deep.matches("a.txt"));
        assert!(deep.matches("sub/deeper/a.txt"));
        let braces = Glob::new("*.{md,rs}");
        assert!(braces.matches("a.md") && braces.matches("b.rs") && !braces.matches("c.txt"));
        assert!(Glob::new("[").matches("["));
        assert!(Glob::new("{x}").matches("{x}"));
        // Stars run together within a component are one star; `**` alone crosses components.
        let stars = Glob::new("**.txt");
        assert!(stars.matches("a.txt") && !stars.matches("sub/a.txt"));
        let under = Glob::new("src/**.rs");
        assert!(under.matches("src/lib.rs") && !under.matches("src/a/lib.rs"));
        assert!(Glob::new("a***").matches("abc"));
        assert!(Glob::new("**/**/x").matches("a/b/x"));
        // `[^…]` is negated, as `[!…]` is.
        let negated = Glob::new("[^a]*");
        assert!(negated.matches("b") && !negated.matches("a"));
        assert!(Glob::new("[!a]*").matches("b"));
        // `^` is a member anywhere but first; stars in a class are members.
        let caret = Glob::new("[[^]x");
        assert!(caret.matches("^x") && caret.matches("[x") && !caret.matches("!x"));
        let member = Glob::new("[a^]");
        assert!(member.matches("^") && member.matches("a"));
        let star = Glob::new("x[**]y**");
        assert!(star.matches("x*yz") && !star.matches("xayz"));
        assert!(Glob::new("[]a]").matches("]"));
        assert!(Glob::new("a[").matches("a["));
    }
}
