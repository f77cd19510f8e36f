//! The description of a tool, a resource or a prompt, from its doc comment.

/// The description from a doc comment's pieces (each `#[doc = …]` attribute, in order): lines
/// of `///` comments, whole `/** */` blocks or `include_str!` texts.
///
/// Removes a `/** */` block's leading `*` column, the indentation common to all lines, and
/// blank lines at the start and end; keeps blank lines between paragraphs.
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

/// The description of a resource or a prompt: `None` when there is no doc comment.
#[must_use]
pub fn optional_description(pieces: &[&str]) -> Option<String> {
    Some(doc_description(pieces)).filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_comments_keep_paragraphs_and_lose_decoration() {
        assert_eq!(
            doc_description(&[" First line.", " Second.", "", " Para two."]),
            "First line.\nSecond.\n\nPara two."
        );
        assert_eq!(
            doc_description(&["\n * Block line.\n *\n * More.\n "]),
            "Block line.\n\nMore."
        );
        assert_eq!(
            doc_description(&[" Intro:", "", "     code();"]),
            "Intro:\n\n    code();"
        );
        assert_eq!(doc_description(&["# Title\n\nBody\n"]), "# Title\n\nBody");
        assert_eq!(doc_description(&[]), "");
        assert_eq!(doc_description(&[" Intro", "\u{3000}詳細"]), "Intro\n詳細");
    }

    #[test]
    fn no_doc_comment_is_no_description() {
        assert_eq!(optional_description(&[]), None);
        assert_eq!(
            optional_description(&[" Notes."]).as_deref(),
            Some("Notes.")
        );
    }
}
