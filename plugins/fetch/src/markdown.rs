//! A page's HTML as Markdown for a model: [`htmd`] with the original's ATX headings, and the
//! parts of a page that are not its content (scripts, styles, navigation, forms…) left out,
//! where the original keeps only what readability takes for the article.

use htmd::HtmlToMarkdown;
use htmd::options::{BulletListMarker, HeadingStyle, HrStyle, Options};

/// What the original answers for a page with nothing left once simplified.
pub const FAILED: &str = "<error>Page failed to be simplified from HTML</error>";

/// Elements whose whole subtree is never content.
const NOT_CONTENT: &[&str] = &[
    "head", "script", "style", "noscript", "template", "nav", "footer", "aside", "form", "iframe",
    "svg", "canvas", "button", "select",
];

/// `html` as Markdown, or [`FAILED`] if nothing is left.
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
    let converted = converter.convert(html);
    log::set_max_level(level);
    match converted {
        Ok(markdown) if !markdown.trim().is_empty() => markdown,
        _ => FAILED.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
