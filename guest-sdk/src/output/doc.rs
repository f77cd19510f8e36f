//! The description of a tool, a resource or a prompt, from its doc comment.

pub use llm_worker_rules::tool::doc_description;

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
