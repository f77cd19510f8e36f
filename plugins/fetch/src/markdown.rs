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

/// Elements of HTML's "special" category: the parser's rules for end tags and implied ends
/// stop at them.
const SPECIAL: &[&str] = &[
    "address",
    "applet",
    "area",
    "article",
    "aside",
    "base",
    "basefont",
    "bgsound",
    "blockquote",
    "body",
    "br",
    "button",
    "caption",
    "center",
    "col",
    "colgroup",
    "dd",
    "details",
    "dir",
    "div",
    "dl",
    "dt",
    "embed",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hgroup",
    "hr",
    "html",
    "iframe",
    "img",
    "input",
    "keygen",
    "li",
    "link",
    "listing",
    "main",
    "marquee",
    "menu",
    "meta",
    "nav",
    "noembed",
    "noframes",
    "noscript",
    "object",
    "ol",
    "p",
    "param",
    "plaintext",
    "pre",
    "script",
    "search",
    "section",
    "select",
    "source",
    "style",
    "summary",
    "table",
    "tbody",
    "td",
    "template",
    "textarea",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "track",
    "ul",
    "wbr",
    "xmp",
    "mi",
    "mo",
    "mn",
    "ms",
    "mtext",
    "annotation-xml",
    "foreignobject",
    "desc",
    "svg",
    "math",
];

/// Where a search for an element in scope stops.
const SCOPE: &[&str] = &[
    "applet", "caption", "html", "table", "td", "th", "marquee", "object", "template", "button",
];

/// Start tags that close an open `p` (when one is in scope).
const CLOSES_P: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "center",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "header",
    "hgroup",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "search",
    "section",
    "summary",
    "ul",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "listing",
    "form",
    "table",
    "hr",
    "li",
    "dd",
    "dt",
];

/// The innermost open element named in `names`, searched from the innermost outwards while
/// `passes` lets the search go past an element.
fn innermost(open: &[String], names: &[&str], passes: impl Fn(&str) -> bool) -> Option<usize> {
    for (index, element) in open.iter().enumerate().rev() {
        if names.contains(&element.as_str()) {
            return Some(index);
        }
        if !passes(element) {
            return None;
        }
    }
    None
}

/// How deeply the tags of `html` nest, stopping past `limit`: a quick first look, before
/// parsing, at what the parser would build, following the main rules by which it opens and
/// closes elements (an end tag closes what it names unless a special element is in the way;
/// `li`, `dd`, `dt`, `p`, `option`, `tr`, `td` and `th` end their open predecessors; comments,
/// declarations, quoted attribute values and scripts hold no tags; `/>` closes only inside
/// `svg` or `math`).
///
/// The parser looks through its open elements at many start tags, so a page of 400,000
/// nested `div`s takes it minutes: this refuses such pages at once. It is not the guarantee
/// (the parser's rules are richer than these, and a page can be written to nest deeper than
/// this counts): [`nests_deeper_than`] measures the parsed tree; a page written to pass this
/// and nest deeply anyway costs its call time, not its instance.
fn nesting(html: &str, limit: usize) -> usize {
    const VOID: &[&str] = &[
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr", "param", "keygen",
    ];
    const RAW: &[&str] = &["script", "style", "textarea", "title", "xmp", "iframe"];
    let special = |element: &str| SPECIAL.contains(&element);
    let name_of = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == ':')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    // Where the tag that starts at the beginning of `rest` ends (after its `>`), quoted
    // attribute values skipped; and whether it ends with `/>`.
    let tag_end = |rest: &str| -> (usize, bool) {
        let mut quote: Option<u8> = None;
        for (at, byte) in rest.bytes().enumerate() {
            match (quote, byte) {
                (Some(open), byte) if byte == open => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') => quote = Some(byte),
                (None, b'>') => return (at + 1, at > 0 && rest.as_bytes()[at - 1] == b'/'),
                (None, _) => {}
            }
        }
        (rest.len(), false)
    };
    let mut open: Vec<String> = Vec::new();
    let mut deepest = 0usize;
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if let Some(comment) = rest.strip_prefix("!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        if rest.starts_with(['!', '?']) {
            rest = rest.find('>').map_or("", |end| &rest[end + 1..]);
            continue;
        }
        if let Some(closing) = rest.strip_prefix('/') {
            let name = name_of(closing);
            let (end, _) = tag_end(closing);
            rest = &closing[end..];
            let found = if special(&name) {
                innermost(&open, &[name.as_str()], |element| !SCOPE.contains(&element))
            } else {
                innermost(&open, &[name.as_str()], |element| !special(element))
            };
            if let Some(index) = found {
                open.truncate(index);
            }
            continue;
        }
        let name = name_of(rest);
        if name.is_empty() {
            continue;
        }
        let (end, self_closing) = tag_end(rest);
        rest = &rest[end..];
        let ended = |names: &[&str], open: &[String]| {
            innermost(open, names, |element| {
                !special(element) || matches!(element, "address" | "div" | "p")
            })
        };
        let implied = match name.as_str() {
            "li" => ended(&["li"], &open),
            "dd" | "dt" => ended(&["dd", "dt"], &open),
            "option" => (open.last().map(String::as_str) == Some("option")).then(|| open.len() - 1),
            "tr" => innermost(&open, &["tr"], |element| {
                !matches!(element, "table" | "tbody" | "thead" | "tfoot")
            }),
            "td" | "th" => innermost(&open, &["td", "th"], |element| {
                !matches!(element, "table" | "tr")
            }),
            _ => None,
        };
        if let Some(index) = implied {
            open.truncate(index);
        }
        if CLOSES_P.contains(&name.as_str())
            && let Some(index) = innermost(&open, &["p"], |element| !SCOPE.contains(&element))
        {
            open.truncate(index);
        }
        if VOID.contains(&name.as_str()) {
            continue;
        }
        let foreign = open
            .iter()
            .any(|element| element == "svg" || element == "math");
        if self_closing && foreign {
            continue;
        }
        if RAW.contains(&name.as_str()) {
            // Its text holds no tags: on to its end tag.
            let mut from = 0;
            rest = loop {
                let Some(at) = rest[from..].find("</") else {
                    break "";
                };
                let after = &rest.as_bytes()[from + at + 2..];
                if after
                    .get(..name.len())
                    .is_some_and(|tag| tag.eq_ignore_ascii_case(name.as_bytes()))
                {
                    break &rest[from + at..];
                }
                from += at + 2;
            };
            continue;
        }
        open.push(name);
        deepest = deepest.max(open.len());
        if deepest > limit {
            break;
        }
    }
    deepest
}

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
    if nesting(html, MAX_NESTING) > MAX_NESTING {
        return FAILED.to_owned();
    }
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
        for trick in [
            "<div></x>",
            "<div><!--</a>-->",
            "<div title='</a>'>",
            "<div/>",
        ] {
            let deep = format!("{}x", trick.repeat(20_000));
            assert_eq!(extract(&deep), FAILED, "{trick}");
        }
        // Refused before the parser spends minutes on it (it looks through its open elements
        // at each start tag): this test would not end otherwise.
        assert_eq!(extract(&"<div>".repeat(400_000)), FAILED);
        // What pages hold passes the first look: end tags left out, self-closed SVG
        // elements, tags in scripts and comments.
        let page = format!(
            "<ul>{}</ul><svg>{}</svg><script>{}</script><!--{}-->",
            "<li><p>item".repeat(600),
            "<path d='M0 0'/>".repeat(600),
            "'<div>'+".repeat(600),
            "<div>".repeat(600)
        );
        assert!(nesting(&page, MAX_NESTING) <= MAX_NESTING);
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
