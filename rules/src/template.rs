//! Resource URI templates (RFC 6570 level 1, `notes://{date}/{id}`): which templates are
//! valid, and which URIs a template matches with what values.
//!
//! The macros check a `#[resource(template = "…")]` at compile time, the SDK matches the URIs
//! a client reads against it, and the host checks a plugin's templates at load.
//!
//! A variable `{name}` matches a non-empty run of characters without `/`. It ends where the
//! text that follows it in the template first appears (so `{name}.{ext}` splits
//! `archive.tar.gz` into `archive` and `tar.gz`); a variable at the end takes the rest. The
//! match never backtracks, so it costs time linear in the URI's length, whatever the URI.

use core::fmt;

use crate::resource::{UriProblem, check_uri};

/// Longest URI template (and longest resource URI), in bytes.
pub const MAX_URI_BYTES: usize = 2048;

/// Why a URI template is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateProblem {
    /// The template is empty.
    Empty,
    /// The template is longer than [`MAX_URI_BYTES`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A `{` without its `}`, or a `}` without its `{`.
    Unbalanced,
    /// A variable's name is empty or has a character other than `A-Z a-z 0-9 _` (such as a
    /// level-2 operator, `{+path}`).
    BadVariable,
    /// Two variables follow each other (`{a}{b}`): where one ends would be a guess.
    AdjacentVariables,
    /// A variable is named twice (`{a}/{a}`): the two places could hold different values.
    RepeatedVariable,
    /// No variable: a plain URI, which is a resource, not a template.
    NoVariable,
    /// The template is not a URI ([`check_uri`]): no scheme, or white space.
    NotAUri(UriProblem),
}

impl fmt::Display for TemplateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("it is empty"),
            Self::TooLong { len } => write!(
                f,
                "it is {len} bytes long; templates are at most {MAX_URI_BYTES} bytes"
            ),
            Self::Unbalanced => f.write_str("a `{` or `}` has no partner"),
            Self::BadVariable => f.write_str(
                "a variable's name must be 1 or more of `A-Z a-z 0-9 _` (level 1: no \
                 operators such as `+`, `#`, `?`)",
            ),
            Self::AdjacentVariables => f.write_str(
                "two variables follow each other; put fixed text (such as `/`) between them",
            ),
            Self::RepeatedVariable => {
                f.write_str("a variable is named twice; give each variable its own name")
            }
            Self::NoVariable => {
                f.write_str("it has no `{variable}`; a fixed URI is a resource, not a template")
            }
            Self::NotAUri(problem) => problem.fmt(f),
        }
    }
}

/// One piece of a template: fixed text or a variable's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text the URI must contain as it is.
    Literal(&'a str),
    /// A variable, by name.
    Variable(&'a str),
}

/// The pieces of `template` in order, or why it is refused.
pub fn pieces(template: &str) -> impl Iterator<Item = Result<Piece<'_>, TemplateProblem>> {
    let mut rest = template;
    core::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let piece = match rest.find(['{', '}']) {
            Some(0) if rest.starts_with('{') => match rest.find('}') {
                Some(end) => {
                    let name = &rest[1..end];
                    rest = &rest[end + 1..];
                    if name.contains('{') {
                        Err(TemplateProblem::Unbalanced)
                    } else if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        Err(TemplateProblem::BadVariable)
                    } else {
                        Ok(Piece::Variable(name))
                    }
                }
                None => Err(TemplateProblem::Unbalanced),
            },
            Some(0) => Err(TemplateProblem::Unbalanced),
            Some(at) => {
                let literal = &rest[..at];
                rest = &rest[at..];
                Ok(Piece::Literal(literal))
            }
            None => {
                let literal = rest;
                rest = "";
                Ok(Piece::Literal(literal))
            }
        };
        if piece.is_err() {
            rest = "";
        }
        Some(piece)
    })
}

/// Checks that `template` is a level-1 URI template this contract accepts: a URI
/// ([`check_uri`]) with at least one `{variable}`, its fixed text in normal form
/// ([`crate::resource::is_normal`]).
///
/// # Errors
/// The first problem found.
pub fn check_template(template: &str) -> Result<(), TemplateProblem> {
    check(template, true)?;
    crate::resource::check_ascii(template).map_err(TemplateProblem::NotAUri)?;
    if !crate::resource::is_normal(template) {
        return Err(TemplateProblem::NotAUri(UriProblem::NotNormal));
    }
    Ok(())
}

/// [`check_template`]'s checks; the look for repeated names (quadratic in the number of
/// variables) only when `repeats`: a match, run on every read, checks the rest (linear).
fn check(template: &str, repeats: bool) -> Result<(), TemplateProblem> {
    if template.is_empty() {
        return Err(TemplateProblem::Empty);
    }
    if template.len() > MAX_URI_BYTES {
        return Err(TemplateProblem::TooLong {
            len: template.len(),
        });
    }
    let mut previous_was_variable = false;
    let mut any_variable = false;
    for (at, piece) in pieces(template).enumerate() {
        let is_variable = match piece? {
            Piece::Variable(name) if repeats => {
                // Templates are short (at most `MAX_URI_BYTES`): look back at the earlier
                // pieces rather than keep a set.
                let named_before = pieces(template)
                    .take(at)
                    .any(|earlier| matches!(earlier, Ok(Piece::Variable(other)) if other == name));
                if named_before {
                    return Err(TemplateProblem::RepeatedVariable);
                }
                true
            }
            Piece::Variable(_) => true,
            Piece::Literal(_) => false,
        };
        if is_variable && previous_was_variable {
            return Err(TemplateProblem::AdjacentVariables);
        }
        any_variable |= is_variable;
        previous_was_variable = is_variable;
    }
    check_uri(template).map_err(TemplateProblem::NotAUri)?;
    if any_variable {
        Ok(())
    } else {
        Err(TemplateProblem::NoVariable)
    }
}

/// Matches `uri` against `template` (which should pass [`check_template`]), calling
/// `found(name, value)` for each variable, in order, once the whole URI has matched. Returns
/// whether it matched; an invalid template matches nothing.
pub fn match_uri<'u>(template: &str, uri: &'u str, mut found: impl FnMut(&str, &'u str)) -> bool {
    // Templates were checked whole where they were accepted; a repeated name cannot make the
    // walk below go wrong, so it is not looked for on every match.
    if !starts_like(template, uri) || check(template, false).is_err() || uri.len() > MAX_URI_BYTES {
        return false;
    }
    // First pass: does it match? Second pass: report the values (no allocation needed).
    walk(template, uri, |_, _| {}) && walk(template, uri, &mut found)
}

/// Whether `uri` matches `template`, a template that passed [`check_template`] already (as a
/// loaded plugin's have): [`match_uri`] without checking the template again, for a caller
/// that asks of many templates for each of many URIs.
#[must_use]
pub fn matches_checked(template: &str, uri: &str) -> bool {
    starts_like(template, uri) && uri.len() <= MAX_URI_BYTES && walk(template, uri, |_, _| {})
}

/// Whether some URI could match both `a` and `b` (templates that passed [`check_template`]), as
/// far as their text tells, erring toward yes: two plugins whose templates may overlap would
/// both answer a read of such a URI. A variable never matches a `/`, so the two must have as
/// many `/`-separated segments, and each pair of segments must be able to meet: equal if both
/// are plain text, the text an instance of the other if one is, and otherwise their text
/// before the first variable and after the last must agree as far as the shorter goes.
#[must_use]
pub fn may_overlap(a: &str, b: &str) -> bool {
    a.split('/').count() == b.split('/').count()
        && a.split('/')
            .zip(b.split('/'))
            .all(|(one, other)| segments_may_meet(one, other))
}

fn segments_may_meet(a: &str, b: &str) -> bool {
    match (a.contains('{'), b.contains('{')) {
        (false, false) => a == b,
        (true, false) => text_may_fill(a, b),
        (false, true) => text_may_fill(b, a),
        (true, true) => {
            let (pa, pb) = (
                a.split('{').next().unwrap_or_default(),
                b.split('{').next().unwrap_or_default(),
            );
            let (sa, sb) = (
                a.rsplit('}').next().unwrap_or_default(),
                b.rsplit('}').next().unwrap_or_default(),
            );
            (pa.starts_with(pb) || pb.starts_with(pa)) && (sa.ends_with(sb) || sb.ends_with(sa))
        }
    }
}

/// Whether the plain `text` of a segment could be what the segment `pattern` (holding
/// variables) matches: it begins and ends as the pattern does, with room for a character of
/// each variable. (A match of the whole URI may place a variable's end past where a walk of
/// the segment alone would, so the segment is not walked.)
fn text_may_fill(pattern: &str, text: &str) -> bool {
    let before = pattern.split('{').next().unwrap_or_default();
    let after = pattern.rsplit('}').next().unwrap_or_default();
    let variables = pattern.matches('{').count();
    text.len() >= before.len() + after.len() + variables
        && text.starts_with(before)
        && text.ends_with(after)
}

/// Whether `uri` begins with the text of `template` before its first variable: what every
/// URI it matches does, so that most templates are passed over without a walk.
fn starts_like(template: &str, uri: &str) -> bool {
    uri.starts_with(template.split('{').next().unwrap_or_default())
}

fn walk<'u>(template: &str, uri: &'u str, mut found: impl FnMut(&str, &'u str)) -> bool {
    let mut rest = uri;
    let mut pieces = pieces(template).peekable();
    while let Some(piece) = pieces.next() {
        match piece {
            Ok(Piece::Literal(text)) => match rest.strip_prefix(text) {
                Some(after) => rest = after,
                None => return false,
            },
            Ok(Piece::Variable(name)) => {
                let run = rest.find('/').map_or(rest, |slash| &rest[..slash]);
                let end = match pieces.peek() {
                    // The next text may start with `/`, right where the run ends.
                    Some(Ok(Piece::Literal(next))) => match rest.find(next) {
                        Some(at) if at <= run.len() => at,
                        _ => return false,
                    },
                    _ => run.len(),
                };
                if end == 0 {
                    return false;
                }
                found(name, &rest[..end]);
                rest = &rest[end..];
            }
            Err(_) => return false,
        }
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(template: &str, uri: &str) -> bool {
        match_uri(template, uri, |_, _| {})
    }

    fn values<'u>(template: &str, uri: &'u str) -> Option<([&'u str; 2], usize)> {
        let mut out = [""; 2];
        let mut count = 0;
        let ok = match_uri(template, uri, |_, value| {
            if count < 2 {
                out[count] = value;
            }
            count += 1;
        });
        ok.then_some((out, count))
    }

    /// The shortcut for checked templates answers as the full match does.
    #[test]
    fn a_checked_template_matches_as_any_does() {
        for (template, uri) in [
            ("notes://{id}", "notes://7"),
            ("notes://{id}", "notes://7/8"),
            ("notes://{id}", "memo://7"),
            ("notes://note/{id}.txt", "notes://note/1.txt"),
            ("notes://note/{id}.txt", "notes://note/.txt"),
            ("file:///{dir}/{name}", "file:///a/b"),
            ("file:///{dir}/{name}", "file:///a"),
            ("a:{x}", "a:"),
        ] {
            assert!(check_template(template).is_ok(), "{template}");
            assert_eq!(
                matches_checked(template, uri),
                matched(template, uri),
                "{template} {uri}"
            );
        }
    }

    #[test]
    fn templates_that_may_meet_are_told_apart_from_those_that_cannot() {
        for (a, b, meet) in [
            ("notes://note/{id}", "notes://{kind}/{id}", true),
            ("notes://note/{id}", "notes://note/{number}", true),
            ("notes://note/{id}", "notes://tag/{id}", false),
            ("notes://note/{id}", "notes://note/{id}/x", false),
            ("notes://{id}.json", "notes://{id}.txt", false),
            ("notes://{id}.json", "notes://a{id}", true),
            ("notes://a/{x}", "other://a/{x}", false),
            ("file:///{a}/{b}", "file:///home/{user}", true),
            ("file:///{a}/{b}", "file:///home/{user}/x", false),
            // A variable's end is found in the whole URI, not in its segment alone:
            // `n://q.j.j/7` matches both (`a` is `q.j`).
            ("n://{a}.j/{b}", "n://q.j.j/{id}", true),
            ("n://{a}.j/{b}", "n://q.x/{id}", false),
        ] {
            assert_eq!(may_overlap(a, b), meet, "{a} {b}");
            assert_eq!(may_overlap(b, a), meet, "{b} {a}");
        }
    }

    #[test]
    fn variables_match_runs_without_slashes() {
        assert_eq!(
            values("test://template/{id}/data", "test://template/42/data"),
            Some((["42", ""], 1))
        );
        assert_eq!(
            values("notes://{day}/{id}", "notes://mon/7"),
            Some((["mon", "7"], 2))
        );
        assert_eq!(
            values("f://{name}.{ext}", "f://archive.tar.gz"),
            Some((["archive", "tar.gz"], 2))
        );
        assert!(!matched(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!matched(
            "test://template/{id}/data",
            "test://template/a/b/data"
        ));
        assert!(!matched("test://template/{id}", "test://template/a/b"));
        assert!(!matched("test://template/{id}", "test://other/a"));
        assert!(!matched(
            "test://template/{id}/data",
            "test://template/a/datax"
        ));
    }

    #[test]
    fn bad_templates_are_refused_with_the_reason() {
        assert_eq!(check_template(""), Err(TemplateProblem::Empty));
        assert_eq!(check_template("a://{x"), Err(TemplateProblem::Unbalanced));
        assert_eq!(check_template("a://x}"), Err(TemplateProblem::Unbalanced));
        assert_eq!(
            check_template("a://{+x}"),
            Err(TemplateProblem::BadVariable)
        );
        assert_eq!(check_template("a://{}"), Err(TemplateProblem::BadVariable));
        assert_eq!(
            check_template("a://{x}{y}"),
            Err(TemplateProblem::AdjacentVariables)
        );
        assert_eq!(check_template("a://x"), Err(TemplateProblem::NoVariable));
        assert_eq!(
            check_template("my notes:{x}"),
            Err(TemplateProblem::NotAUri(UriProblem::NotOneWord(' ')))
        );
        assert_eq!(
            check_template("{scheme}://x"),
            Err(TemplateProblem::NotAUri(UriProblem::NoScheme))
        );
        assert_eq!(check_template("a://{x}/{y_2}"), Ok(()));
        assert!(!matched("a://{x", "a://{x"));
        // Its fixed text in normal form (the authority in lower case, variables' names in it
        // too), the variables' names elsewhere in any case.
        for template in [
            "A://{x}",
            "a://Host/{x}",
            "a://{Host}/x",
            "a://h/%7E{x}",
            "a://h/%2f{x}",
        ] {
            assert_eq!(
                check_template(template),
                Err(TemplateProblem::NotAUri(UriProblem::NotNormal)),
                "{template}"
            );
        }
        assert_eq!(check_template("a://{host}/X/%2F{Id}"), Ok(()));
    }
}
