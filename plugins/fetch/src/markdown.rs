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

/// Most elements a page may make the parser build (reopened formatting elements included):
/// some 30 MiB of the plugin's memory as the parser's tree.
const MAX_ELEMENTS: usize = 100_000;

/// Deepest nesting of elements converted: the converter walks the page recursively, and a
/// page of 20,000 nested `div`s (100 KB) would overflow the plugin's stack (a trap).
const MAX_NESTING: usize = 512;

/// Whether `name` is of HTML's "special" category: the parser's rules for end tags and implied
/// ends stop at such elements.
fn is_special(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "applet"
            | "area"
            | "article"
            | "aside"
            | "base"
            | "basefont"
            | "bgsound"
            | "blockquote"
            | "body"
            | "br"
            | "button"
            | "caption"
            | "center"
            | "col"
            | "colgroup"
            | "dd"
            | "details"
            | "dir"
            | "div"
            | "dl"
            | "dt"
            | "embed"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "form"
            | "frame"
            | "frameset"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "head"
            | "header"
            | "hgroup"
            | "hr"
            | "html"
            | "iframe"
            | "img"
            | "input"
            | "keygen"
            | "li"
            | "link"
            | "listing"
            | "main"
            | "marquee"
            | "menu"
            | "meta"
            | "nav"
            | "noembed"
            | "noframes"
            | "noscript"
            | "object"
            | "ol"
            | "p"
            | "param"
            | "plaintext"
            | "pre"
            | "script"
            | "search"
            | "section"
            | "select"
            | "source"
            | "style"
            | "summary"
            | "table"
            | "tbody"
            | "td"
            | "template"
            | "textarea"
            | "tfoot"
            | "th"
            | "thead"
            | "title"
            | "tr"
            | "track"
            | "ul"
            | "wbr"
            | "xmp"
            | "mi"
            | "mo"
            | "mn"
            | "ms"
            | "mtext"
            | "annotation-xml"
            | "foreignobject"
            | "desc"
            | "svg"
            | "math"
    )
}

/// Whether a search for an element in scope stops at `name`.
fn is_scope(name: &str) -> bool {
    matches!(
        name,
        "applet"
            | "caption"
            | "html"
            | "table"
            | "td"
            | "th"
            | "marquee"
            | "object"
            | "template"
            | "button"
    )
}

/// Whether a start tag `name` closes an open `p` (when one is in scope).
fn closes_p(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "aside"
            | "blockquote"
            | "center"
            | "details"
            | "dialog"
            | "dir"
            | "div"
            | "dl"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "header"
            | "hgroup"
            | "main"
            | "menu"
            | "nav"
            | "ol"
            | "p"
            | "search"
            | "section"
            | "summary"
            | "ul"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "pre"
            | "listing"
            | "form"
            | "table"
            | "hr"
            | "li"
            | "dd"
            | "dt"
    )
}

/// Whether `name` is a formatting element, which the parser reopens where it was closed by
/// something else (`<p><b>x<p>y`: the second paragraph's text is bold too).
fn is_formatting(name: &str) -> bool {
    matches!(
        name,
        "a" | "b"
            | "big"
            | "code"
            | "em"
            | "font"
            | "i"
            | "nobr"
            | "s"
            | "small"
            | "strike"
            | "strong"
            | "tt"
            | "u"
    )
}

/// [`nesting`]'s model of what the parser keeps: the open elements, and the formatting
/// elements it reopens.
#[derive(Default)]
struct Nesting {
    /// Each open element's name, and its formatting entry's id if it is one.
    open: Vec<(String, Option<u64>)>,
    /// The ids of the formatting entries open now.
    open_ids: std::collections::HashSet<u64>,
    /// The formatting elements to reopen: id, name, attributes as written.
    active: Vec<(u64, String, String)>,
    next_id: u64,
    deepest: usize,
    /// Every element the model opened, reopened ones included: what the parser builds.
    built: usize,
}

impl Nesting {
    fn push(&mut self, name: String, formatting: Option<u64>) {
        if let Some(id) = formatting {
            self.open_ids.insert(id);
        }
        self.open.push((name, formatting));
        self.deepest = self.deepest.max(self.open.len());
        self.built += 1;
    }

    /// Closes the element at `index` and everything open inside it.
    fn close_from(&mut self, index: usize) {
        for (_, formatting) in self.open.drain(index..) {
            if let Some(id) = formatting {
                self.open_ids.remove(&id);
            }
        }
    }

    /// The innermost open element named in `names`, searched from the innermost outwards
    /// while `passes` lets the search go past an element.
    fn innermost(&self, names: &[&str], passes: impl Fn(&str) -> bool) -> Option<usize> {
        for (index, (element, _)) in self.open.iter().enumerate().rev() {
            if names.contains(&element.as_str()) {
                return Some(index);
            }
            if !passes(element) {
                return None;
            }
        }
        None
    }

    /// Reopens the formatting elements closed by something else, as the parser does before
    /// text and most start tags: those after the last one still open.
    fn reconstruct(&mut self) {
        let reopen_from = self
            .active
            .iter()
            .rposition(|(id, ..)| self.open_ids.contains(id))
            .map_or(0, |open| open + 1);
        for at in reopen_from..self.active.len() {
            let id = self.next_id;
            self.next_id += 1;
            self.active[at].0 = id;
            let name = self.active[at].1.clone();
            self.push(name, Some(id));
        }
    }
}

/// How deeply the tags of `html` nest, stopping past `limit`: a quick first look, before
/// parsing, at what the parser would build, following the main rules by which it opens, closes
/// and reopens elements (an end tag closes what it names unless a special element is in the
/// way; `li`, `dd`, `dt`, `p`, `option`, and in a table `tr`, `td` and `th`, end their open
/// predecessors; formatting elements closed by something else are reopened before text and
/// most start tags, up to three alike; comments, declarations, quoted attribute values and
/// scripts hold no tags; `/>` closes only inside `svg` or `math`).
///
/// The parser looks through its open elements at many start tags, so a page of 400,000
/// nested `div`s takes it minutes, and a page reopening a thousand formatting elements builds
/// half a million: this refuses such pages at once. It is not the guarantee (the parser's
/// rules are richer than these): [`nests_deeper_than`] measures the parsed tree.
fn nesting(html: &str, limit: usize) -> usize {
    const VOID: &[&str] = &[
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr", "param", "keygen",
    ];
    const RAW: &[&str] = &["script", "style", "textarea", "title", "xmp", "iframe"];
    let name_of = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == ':')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    // Where the tag that starts at the beginning of `rest` ends (after its `>`), quoted
    // attribute values skipped; and whether it ends with `/>`.
    // A quote starts a quoted value only right after `=` (blanks between): one in a name or
    // in an unquoted value is a character like any other.
    let tag_end = |rest: &str| -> (usize, bool) {
        let mut quote: Option<u8> = None;
        let mut after_equals = false;
        for (at, byte) in rest.bytes().enumerate() {
            match (quote, byte) {
                (Some(open), byte) if byte == open => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') if after_equals => quote = Some(byte),
                (None, b'>') => return (at + 1, at > 0 && rest.as_bytes()[at - 1] == b'/'),
                (None, b'=') => {
                    after_equals = true;
                    continue;
                }
                (None, byte) if byte.is_ascii_whitespace() && after_equals => continue,
                (None, _) => {}
            }
            after_equals = false;
        }
        (rest.len(), false)
    };
    let mut model = Nesting::default();
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        if model.deepest > limit || model.built > MAX_ELEMENTS {
            return limit + 1;
        }
        // Text, blanks too, reopens the formatting elements closed by something else.
        if at > 0 {
            model.reconstruct();
        }
        rest = &rest[at + 1..];
        if let Some(comment) = rest.strip_prefix("!--") {
            // `<!-->` and `<!--->` are whole comments; `--!>` ends one as `-->` does.
            if let Some(after) = comment
                .strip_prefix('>')
                .or_else(|| comment.strip_prefix("->"))
            {
                rest = after;
                continue;
            }
            rest = comment_end(comment).map_or("", |end| &comment[end..]);
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
            if is_formatting(&name)
                && let Some(entry) = model.active.iter().rposition(|(_, n, _)| *n == name)
            {
                let id = model.active[entry].0;
                let Some(index) = model.open.iter().rposition(|(_, f)| *f == Some(id)) else {
                    // Not open: the parser forgets it.
                    model.active.remove(entry);
                    continue;
                };
                let above = &model.open[index + 1..];
                if above.iter().any(|(element, _)| is_scope(element)) {
                    // Not in scope: the parser ignores the end tag.
                    continue;
                }
                model.active.remove(entry);
                if above.iter().any(|(element, _)| is_special(element)) {
                    // The parser's adoption agency: the block inside stays open, the
                    // formatting element is taken out of the stack.
                    model.open.remove(index);
                    model.open_ids.remove(&id);
                } else {
                    model.close_from(index);
                }
                continue;
            }
            let table_part = matches!(
                name.as_str(),
                "table" | "tbody" | "thead" | "tfoot" | "tr" | "td" | "th" | "caption"
            );
            let found = if table_part {
                // In table scope: through cells and captions, not past a table or template.
                model.innermost(&[name.as_str()], |element| {
                    !matches!(element, "html" | "table" | "template")
                })
            } else if is_special(&name) {
                model.innermost(&[name.as_str()], |element| !is_scope(element))
            } else {
                model.innermost(&[name.as_str()], |element| !is_special(element))
            };
            if let Some(index) = found {
                model.close_from(index);
            }
            continue;
        }
        let name = name_of(rest);
        if name.is_empty() {
            continue;
        }
        let (end, self_closing) = tag_end(rest);
        let tag = &rest[..end];
        let attributes = tag.strip_suffix('>').unwrap_or(tag)[name.len()..]
            .trim()
            .to_owned();
        rest = &rest[end..];
        let in_table = model.open.iter().any(|(element, _)| element == "table");
        let ended = |names: &[&str], model: &Nesting| {
            model.innermost(names, |element| {
                !is_special(element) || matches!(element, "address" | "div" | "p")
            })
        };
        let implied = match name.as_str() {
            "li" => ended(&["li"], &model),
            "dd" | "dt" => ended(&["dd", "dt"], &model),
            "option" => (model.open.last().map(|(n, _)| n.as_str()) == Some("option"))
                .then(|| model.open.len() - 1),
            "tr" if in_table => model.innermost(&["tr"], |element| {
                !matches!(element, "table" | "tbody" | "thead" | "tfoot")
            }),
            "td" | "th" if in_table => {
                model.innermost(&["td", "th"], |element| !matches!(element, "table" | "tr"))
            }
            _ => None,
        };
        if let Some(index) = implied {
            model.close_from(index);
        }
        if closes_p(&name)
            && let Some(index) = model.innermost(&["p"], |element| !is_scope(element))
        {
            model.close_from(index);
        }
        // Text-level elements reopen the closed formatting elements first.
        if is_formatting(&name) || !is_special(&name) || matches!(name.as_str(), "img" | "br") {
            model.reconstruct();
        }
        if VOID.contains(&name.as_str()) {
            continue;
        }
        let foreign = model
            .open
            .iter()
            .any(|(element, _)| element == "svg" || element == "math");
        if self_closing && foreign {
            continue;
        }
        // In SVG or MathML, `title` and `style` hold elements.
        if RAW.contains(&name.as_str()) && !foreign {
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
        if is_formatting(&name) {
            // At most three alike (name and attributes) are kept to reopen, as the parser
            // keeps them.
            let alike: Vec<usize> = model
                .active
                .iter()
                .enumerate()
                .filter(|(_, (_, n, a))| *n == name && *a == attributes)
                .map(|(at, _)| at)
                .collect();
            if alike.len() >= 3 {
                model.active.remove(alike[0]);
            }
            let id = model.next_id;
            model.next_id += 1;
            model.active.push((id, name.clone(), attributes));
            model.push(name, Some(id));
        } else {
            model.push(name, None);
        }
    }
    if model.built > MAX_ELEMENTS {
        return limit + 1;
    }
    model.deepest
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

/// Where the comment whose text starts `comment` ends (after its `-->` or `--!>`), if it
/// does: one pass over the text. Looking for each ending on its own read the rest of the page
/// again for every comment that lacked the other one (a page of `<!--x-->` took minutes).
fn comment_end(comment: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = comment[from..].find("--") {
        let at = from + at;
        match &comment.as_bytes()[at + 2..] {
            [b'>', ..] => return Some(at + 3),
            [b'!', b'>', ..] => return Some(at + 4),
            // Past a `-`: an ASCII boundary.
            _ => from = at + 1,
        }
    }
    None
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
        // Formatting elements the parser reopens (each `<p>` closes the last `b`, the next `<b>`
        // reopens every earlier one: half a million elements from 15 KB), and table cells
        // outside any table (which the parser ignores, so the `div`s nest on).
        let reopened: String = (0..3000).map(|k| format!("<p><b id={k}>")).collect();
        assert_eq!(extract(&reopened), FAILED);
        let cells = "<td>".to_owned() + &"<div>".repeat(500);
        assert_eq!(extract(&cells.repeat(800)), FAILED);
        // Alike formatting elements left open are reopened three at a time, as the parser does.
        let fonts = "<p><font color=red>text".repeat(2_000);
        assert!(nesting(&fonts, MAX_NESTING) <= MAX_NESTING);
        // Many elements reopened at little depth: 400 formatting elements reopened by each of
        // 300 paragraphs (200,000 elements from 6 KB).
        let reopening: String = (0..400)
            .map(|k| format!("<p><b id={k}>"))
            .collect::<String>()
            + &"<p>x".repeat(300);
        assert_eq!(extract(&reopening), FAILED);
        // Tags hidden from a reader of the tags as written, each around 3,000 `div`s: a quote in
        // an attribute's name, comments `<!-->` and `--!>`, SVG's `title`; a table closed
        // through its cell, then cells outside any table; formatting end tags across a block
        // or a scope.
        let divs = "<div>".repeat(3_000);
        for page in [
            format!("<div a'>{divs}'>x"),
            format!("<!-->{divs}-->x"),
            format!("<!-- x --!>{divs}-->x"),
            format!("<svg><title>{divs}"),
            format!(
                "<table><td></table>{}",
                ("<td>".to_owned() + &"<div>".repeat(100)).repeat(30)
            ),
            "<b><div></b>".repeat(3_000),
            "<b><object></b>".repeat(3_000),
        ] {
            assert_eq!(extract(&page), FAILED, "{}", &page[..page.len().min(60)]);
        }
        // A tag that never ends, after letters beyond ASCII.
        assert_eq!(nesting("<b é", MAX_NESTING), 1);
    }

    #[test]
    fn comments_end_at_the_first_of_their_endings_found_in_one_pass() {
        assert_eq!(comment_end("x-->y"), Some(4));
        assert_eq!(comment_end("x--!>y"), Some(5));
        assert_eq!(comment_end("x--->y"), Some(5));
        assert_eq!(comment_end("x--!->--!>"), Some(10));
        assert_eq!(comment_end("x-- >"), None);
        assert_eq!(comment_end("x--"), None);
        // 2 MiB of comments, none lacking an ending: each ending found without reading the
        // rest of the page again (quadratic, minutes, before).
        let page = "<!--x-->".repeat(1 << 18) + "<b>";
        assert_eq!(nesting(&page, MAX_NESTING), 1);
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
