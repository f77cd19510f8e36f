//! A page's HTML as Markdown for a model: [`htmd`] with the original's ATX headings, and the
//! parts of a page that are not its content (scripts, styles, navigation, forms…) left out,
//! where the original keeps only what readability takes for the article.

use std::rc::Rc;

use htmd::options::{BulletListMarker, HeadingStyle, HrStyle, Options};
use htmd::{HtmlToMarkdown, Node};

/// What the original answers for a page with nothing left once simplified.
pub const FAILED: &str = "<error>Page failed to be simplified from HTML</error>";

/// Elements whose whole subtree is never content.
const NOT_CONTENT: &[&str] = &[
    "head", "script", "style", "noscript", "template", "nav", "footer", "aside", "form", "iframe",
    "svg", "canvas", "button", "select",
];

/// Deepest nesting of elements converted: the converter walks the page recursively, and a
/// page of 20,000 nested `div`s (100 KB) would overflow the plugin's stack (a trap).
const MAX_NESTING: usize = 512;

/// Whether `tree` nests deeper than `limit` elements, measured on the tree the parser built
/// (not on the tags as written, which a page can make say anything: an end tag closing nothing
/// is dropped by the parser, one inside a comment is no tag at all), walking it with a stack
/// of its own.
fn nests_deeper_than(tree: &Rc<Node>, limit: usize) -> bool {
    let mut pending = vec![(Rc::clone(tree), 0usize)];
    while let Some((node, depth)) = pending.pop() {
        if depth > limit {
            return true;
        }
        for child in node.children.borrow().iter() {
            pending.push((Rc::clone(child), depth + 1));
        }
    }
    false
}

/// `html` as Markdown, or [`FAILED`] if nothing is left (or its elements nest too deeply to
/// convert).
pub fn extract(html: &str) -> String {
    let converter = HtmlToMarkdown::builder()
        .skip_tags(NOT_CONTENT.to_vec())
        .options(Options {
            heading_style: HeadingStyle::Atx,
            hr_style: HrStyle::Dashes,
            bullet_list_marker: BulletListMarker::Asterisk,
            ul_bullet_spacing: 1,
            ol_number_spacing: 1,
            ..Options::default()
        })
        .build();
    // The HTML parser logs a trace record for every character it reads and a debug record
    // for every token: hundreds a page, each formatted and sent to the host, which keeps a
    // hundred a call. They are none of the operator's business: while it parses, only
    // warnings and above pass (the plugin's own records, outside it, are unaffected).
    let level = log::max_level();
    log::set_max_level(level.min(log::LevelFilter::Warn));
    let converted = converter
        .html_to_tree(html)
        .ok()
        .filter(|tree| !nests_deeper_than(tree, MAX_NESTING))
        .map(|tree| converter.tree_to_markdown(&tree));
    log::set_max_level(level);
    match converted {
        Some(markdown) if !markdown.trim().is_empty() => markdown,
        _ => FAILED.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_nested_too_deeply_is_not_converted() {
        let deep = format!("{}x{}", "<div>".repeat(20_000), "</div>".repeat(20_000));
        assert_eq!(extract(&deep), FAILED);
        // Siblings, void elements and a few hundred levels are converted.
        let wide = format!("{}<br><img src=a>", "<p>para</p>".repeat(5_000));
        assert!(extract(&wide).starts_with("para"));
        let nested = format!("{}x{}", "<div>".repeat(300), "</div>".repeat(300));
        assert_eq!(extract(&nested), "x");
        // End tags that close nothing (the parser drops them) or are no tags at all (in a
        // comment, in an attribute) do not make a deep page shallow.
        for trick in ["<div></x>", "<div><!--</a>-->", "<div title='</a>'>"] {
            let deep = format!("{}x", trick.repeat(20_000));
            assert_eq!(extract(&deep), FAILED, "{trick}");
        }
    }

    #[test]
    fn keeps_the_content_and_leaves_out_the_rest() {
        let markdown = extract(
            "<html><head><title>T</title><style>p{}</style></head><body><nav><a href=/>Home</a>\
             </nav><h1>Title</h1><p>Some <b>bold</b> text and <a href=\"/x\">a link</a>.</p>\
             <ul><li>one</li><li>two</li></ul><script>alert(1)</script><footer>(c)</footer>\
             </body></html>",
        );
        assert_eq!(
            markdown,
            "# Title\n\nSome **bold** text and [a link](/x).\n\n* one\n* two"
        );
    }

    #[test]
    fn an_empty_page_is_the_original_failure() {
        assert_eq!(
            extract("<html><body><script>x</script></body></html>"),
            FAILED
        );
        assert_eq!(extract(""), FAILED);
    }
}
