//! Whether an answer is of the shape its question asked for, checked by the host whoever
//! answered, before the plugin sees it: a form's content fits the form
//! ([`Form`](super::form::Form)); a model's answer speaks as the assistant, with text, an
//! image or audio; roots are few, and each a `file://` URI.

use super::Asker;
use super::form::Form;
use crate::tool::{Content, ElicitationAnswer, QuestionError, Role, Root, SamplingAnswer};

/// Most roots an answer may list.
pub const MAX_ROOTS: usize = 100;

/// The error for an answer of the wrong shape: the client's (or the handler's) failure,
/// refused before the plugin sees it.
fn misfit(asker: &Asker, problem: &str) -> QuestionError {
    QuestionError::Failed(format!(
        "the answer to question '{}' of tool '{}' of plugin '{}' was refused: {problem}",
        asker.key, asker.tool, asker.plugin
    ))
}

/// Checks a form's answer: accepted content fits `form`.
pub(crate) fn check_elicitation(
    answer: &ElicitationAnswer,
    form: &Form,
    asker: &Asker,
) -> Result<(), QuestionError> {
    match answer {
        ElicitationAnswer::Accept(content) => form
            .check(content)
            .map_err(|problem| misfit(asker, &format!("it does not fit the form: {problem}"))),
        ElicitationAnswer::Decline | ElicitationAnswer::Cancel => Ok(()),
    }
}

/// Checks a model's answer: the assistant's, with one text, image (`image/…`) or audio
/// (`audio/…`) block.
pub(crate) fn check_sampling(answer: &SamplingAnswer, asker: &Asker) -> Result<(), QuestionError> {
    if answer.role != Role::Assistant {
        return Err(misfit(
            asker,
            "it speaks as the user; a model's answer speaks as the assistant",
        ));
    }
    let (media, family) = match &answer.content {
        Content::Text(_) => return Ok(()),
        Content::Image(media) => (media, "image"),
        Content::Audio(media) => (media, "audio"),
        Content::Resource(_) | Content::Link(_) => {
            return Err(misfit(
                asker,
                "it is a resource; a model's answer is text, an image or audio",
            ));
        }
    };
    match media.mime_type.split_once('/') {
        Some((kind, subtype))
            if kind.eq_ignore_ascii_case(family)
                && !subtype.is_empty()
                && subtype.bytes().all(|b| b.is_ascii_graphic() && b != b'/') =>
        {
            Ok(())
        }
        _ => Err(misfit(
            asker,
            &format!(
                "its {family} has the MIME type \"{}\", not {family}/…",
                media.mime_type.escape_debug()
            ),
        )),
    }
}

/// Checks roots: at most [`MAX_ROOTS`], each a `file://` URI.
pub(crate) fn check_roots(roots: &[Root], asker: &Asker) -> Result<(), QuestionError> {
    if roots.len() > MAX_ROOTS {
        return Err(misfit(
            asker,
            &format!(
                "it lists {} roots, over the {MAX_ROOTS} allowed",
                roots.len()
            ),
        ));
    }
    for root in roots {
        file_uri(&root.uri).map_err(|problem| {
            misfit(
                asker,
                &format!("the root \"{}\" {problem}", root.uri.escape_debug()),
            )
        })?;
    }
    Ok(())
}

/// Whether `uri` is a `file://` URI as RFC 8089 writes one: `file://`, a host name or none,
/// an absolute path of URI characters (RFC 3986's unreserved and sub-delims, `:`, `@`, `/`,
/// and `%` with two hex digits), no query or fragment, no `.` or `..` segment and no encoded
/// NUL or `/`.
fn file_uri(uri: &str) -> Result<(), &'static str> {
    let scheme = uri.get(..7).filter(|s| s.eq_ignore_ascii_case("file://"));
    let Some(rest) = scheme.and_then(|_| uri.get(7..)) else {
        return Err("is not a file:// URI");
    };
    let Some(slash) = rest.find('/') else {
        return Err("has no absolute path");
    };
    let (host, path) = rest.split_at(slash);
    // None, or labels of letters, digits and hyphens: never `.` or `..`, which a plugin
    // taking the part after `file://` would read as a relative path (`file://../etc`).
    let label = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !host.is_empty() && !host.split('.').all(label) {
        return Err("has a host part that is not a host name");
    }
    let bytes = path.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = path
                    .get(at + 1..at + 3)
                    .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
                match hex {
                    Some("00") => return Err("encodes a NUL character"),
                    Some(hex) if hex.eq_ignore_ascii_case("2f") => {
                        return Err("encodes a '/' in a path segment");
                    }
                    Some(_) => at += 3,
                    None => return Err("has a '%' without two hex digits"),
                }
            }
            b'?' | b'#' => return Err("has a query or fragment"),
            b if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) => at += 1,
            _ => return Err("has a character a URI may not hold (encode it with %)"),
        }
    }
    // A dot may be written `%2e` too (RFC 3986 decodes it before removing dot segments).
    if path.split('/').any(|segment| {
        let decoded = segment.replace("%2e", ".").replace("%2E", ".");
        decoded == "." || decoded == ".."
    }) {
        return Err("has a '.' or '..' segment");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::Media;

    fn asker() -> Asker {
        Asker::new("p", "t", "k")
    }

    fn root(uri: &str) -> Root {
        Root {
            uri: uri.into(),
            name: None,
        }
    }

    #[test]
    fn roots_are_few_file_uris() {
        for good in [
            "file:///work",
            "file:///home/ada/My%20Project",
            "FILE://localhost/srv/a-b_c~d",
            "file://files.example.com/srv",
            "file:///C:/Users/ada",
        ] {
            assert_eq!(check_roots(&[root(good)], &asker()), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("https://example.com/", "not a file:// URI"),
            ("file:", "not a file:// URI"),
            ("file://host", "no absolute path"),
            ("file://user@host/x", "host part"),
            ("file:///a b", "may not hold"),
            ("file:///a\nb", "may not hold"),
            ("file:///caf\u{e9}", "may not hold"),
            ("file:///a?b", "query"),
            ("file:///a%zz", "two hex digits"),
            ("file:///a%00b", "NUL"),
            ("file:///a%2fb", "'/'"),
            ("file:///work/../etc", "'..'"),
            ("file:///work/%2e%2e/etc", "'..'"),
            ("file:///work/.%2E/etc", "'..'"),
            ("file:///work/%2E/etc", "'.'"),
            // A host of `.` or `..` reads as a relative path once `file://` is taken off.
            ("file://../etc", "host part"),
            ("file://./etc", "host part"),
            ("file://a..b/etc", "host part"),
        ] {
            let result = check_roots(&[root(bad)], &asker());
            assert!(
                matches!(&result, Err(QuestionError::Failed(text)) if text.contains(why) && text.contains("question 'k' of tool 't' of plugin 'p'")),
                "{bad:?}: {result:?}"
            );
        }
        let many = vec![root("file:///x"); MAX_ROOTS + 1];
        let result = check_roots(&many, &asker());
        assert!(
            matches!(&result, Err(QuestionError::Failed(text)) if text.contains("101 roots")),
            "{result:?}"
        );
    }

    #[test]
    fn a_models_answer_is_the_assistants_text_image_or_audio() {
        let answer = |role, content| SamplingAnswer {
            role,
            content,
            model: "m".into(),
            stop_reason: None,
        };
        let media = |mime: &str| Media {
            mime_type: mime.into(),
            data: vec![1],
        };
        let ok = |a: &SamplingAnswer| check_sampling(a, &asker()).is_ok();
        assert!(ok(&answer(Role::Assistant, Content::text("Paris"))));
        assert!(ok(&answer(
            Role::Assistant,
            Content::Image(media("image/png"))
        )));
        assert!(ok(&answer(
            Role::Assistant,
            Content::Audio(media("audio/wav"))
        )));
        assert!(!ok(&answer(Role::User, Content::text("I am the user"))));
        assert!(!ok(&answer(
            Role::Assistant,
            Content::Image(media("text/html"))
        )));
        assert!(!ok(&answer(
            Role::Assistant,
            Content::Audio(media("audio/"))
        )));
        let link = Content::Link(crate::tool::ResourceMeta::new("notes://all", "all"));
        assert!(!ok(&answer(Role::Assistant, link)));
    }
}
