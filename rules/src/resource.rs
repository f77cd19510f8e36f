//! What a plugin's resources must be: valid URIs and MIME types, within the caps on how many
//! resources and URI templates one plugin lists.
//!
//! The macros check a `#[resource(uri = …, mime_type = …)]` at compile time and the host
//! checks every plugin's list at load, both with these functions, so that what builds loads.
//! A template's own grammar is in [`crate::template`]; a template is a URI too, and is
//! checked with [`check_uri`] there.

use alloc::string::String;
use core::fmt;

pub use crate::template::MAX_URI_BYTES;

/// Most resources one plugin may list.
pub const MAX_RESOURCES: usize = 1000;

/// Most URI templates one plugin may offer.
pub const MAX_TEMPLATES: usize = 100;

/// Longest MIME type, parameters included, in bytes.
pub const MAX_MIME_TYPE_BYTES: usize = 256;

/// Longest type or subtype of a MIME type, in characters (RFC 6838's `restricted-name`).
pub const MAX_MIME_NAME_LEN: usize = 127;

/// Why a URI is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriProblem {
    /// The URI is empty.
    Empty,
    /// The URI is longer than [`MAX_URI_BYTES`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The URI has white space, a control character or another character a reader does not
    /// see ([`crate::tool::first_hidden`]): the first such.
    NotOneWord(char),
    /// The URI does not start with a scheme (`letter *( letter / digit / "+" / "-" / "." )`)
    /// and a colon.
    NoScheme,
    /// A resource's URI has a `{` or `}`: a URI with `{variables}` is a template.
    HasVariable,
    /// A `%` not followed by two hex digits (RFC 3986 allows `%` only in an escape).
    BadEscape,
    /// A plugin's URI (or template) is not written in the normal form hosts compare URIs in
    /// (RFC 3986, section 6.2.2: see [`is_normal`]).
    NotNormal,
    /// A plugin's URI (or template, or one its content names) has a character that is not
    /// ASCII (the first such): RFC 3986 writes such characters percent-encoded, and one may
    /// look like another plugin's (`notes://аll` with a Cyrillic `а`).
    NotAscii(char),
    /// The URI has what clients' URL parsers read as something else than RFC 3986 does
    /// (named): it could be another plugin's URI to a client, and not to the host.
    ReadOtherwise(&'static str),
}

impl fmt::Display for UriProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("it is empty; a URI looks like `notes://today`"),
            Self::TooLong { len } => {
                write!(
                    f,
                    "it is {len} bytes; a URI is at most {MAX_URI_BYTES} bytes"
                )
            }
            Self::NotOneWord(c) => write!(
                f,
                "it has {c:?}; a URI is one word with a scheme, such as `notes://today` or \
                 `file:///a.txt`, with no white space, control characters or characters shown \
                 as nothing (percent-encode them: a space is `%20`)"
            ),
            Self::NoScheme => f.write_str(
                "it does not start with a scheme; a URI looks like `notes://today` or \
                 `file:///a.txt` (a letter, then letters, digits, `+`, `-` or `.`, then `:`)",
            ),
            Self::HasVariable => f.write_str(
                "it has a `{` or `}`; a URI with `{variables}` is a resource template, not a \
                 resource",
            ),
            Self::BadEscape => f.write_str(
                "it has a `%` not followed by two hex digits; a percent sign itself is \
                 written `%25`",
            ),
            Self::NotAscii(c) => write!(
                f,
                "it has {c:?}, which is not ASCII; a URI writes such characters \
                 percent-encoded (RFC 3986: `é` is `%C3%A9`), so that none looks like \
                 another's"
            ),
            Self::NotNormal => f.write_str(
                "it is not in the normal form hosts compare URIs in (RFC 3986, section \
                 6.2.2): write the scheme and the host in lower case, letters, digits and \
                 `-._~` as themselves rather than percent-escaped, and other escapes' hex \
                 digits in upper case (`notes://all`, not `NOTES://%61ll`)",
            ),
            Self::ReadOtherwise(what) => write!(
                f,
                "it has {what}; write the URI as a client's URL parser would (RFC 3986 and the \
                 WHATWG URL standard read it alike)"
            ),
        }
    }
}

/// Checks a URI (a resource's, one a client reads, a template's fixed text): 1 to
/// [`MAX_URI_BYTES`] bytes, no white space, control characters or characters shown as nothing
/// ([`crate::tool::first_hidden`]), a scheme and a colon, every `%` an escape (two hex digits).
///
/// # Errors
/// The first problem, in this order: empty, too long, not one word, no scheme, bad escape.
pub fn check_uri(uri: &str) -> Result<(), UriProblem> {
    if uri.is_empty() {
        return Err(UriProblem::Empty);
    }
    if uri.len() > MAX_URI_BYTES {
        return Err(UriProblem::TooLong { len: uri.len() });
    }
    if let Some(bad) = uri.chars().find(|&c| c.is_whitespace() || c.is_control()) {
        return Err(UriProblem::NotOneWord(bad));
    }
    if let Some((_, hidden)) = crate::tool::first_hidden(uri) {
        return Err(UriProblem::NotOneWord(hidden));
    }
    let Some((scheme, _)) = uri.split_once(':') else {
        return Err(UriProblem::NoScheme);
    };
    let valid_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return Err(UriProblem::NoScheme);
    }
    let bytes = uri.as_bytes();
    let bad_escape = bytes.iter().enumerate().any(|(at, &b)| {
        b == b'%'
            && !(bytes.get(at + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(at + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if bad_escape {
        return Err(UriProblem::BadEscape);
    }
    if uri.contains('\\') {
        return Err(UriProblem::ReadOtherwise(
            "a backslash, which URL parsers read as `/` after a special scheme such as `https`",
        ));
    }
    if ipv4_read_otherwise(uri) {
        return Err(UriProblem::ReadOtherwise(
            "an IPv4 address not written as four decimal numbers (`127.1`, `0x7f.0.0.1`, \
             `2130706433`), which URL parsers rewrite after a special scheme such as `https`",
        ));
    }
    Ok(())
}

/// Whether `uri`, of a special scheme, has a host that URL parsers read as an IPv4 address
/// (its last label a number: decimal, or hex after `0x`) but is not written as one in its
/// usual form, four decimal numbers of 0 to 255 without leading zeros.
fn ipv4_read_otherwise(uri: &str) -> bool {
    // Only a special scheme's host is read so: other URIs are not normalised for this.
    let special = uri.split_once(':').is_some_and(|(scheme, _)| {
        SPECIAL_SCHEMES
            .iter()
            .any(|(name, _)| scheme.eq_ignore_ascii_case(name))
    });
    if !special {
        return false;
    }
    let comparable = comparable_uri(uri);
    let Some((scheme, rest)) = comparable.split_once(':') else {
        return false;
    };
    if !SPECIAL_SCHEMES
        .iter()
        .any(|(special, _)| *special == scheme)
    {
        return false;
    }
    let Some(after) = rest.strip_prefix("//") else {
        return false;
    };
    let authority = &after[..after.find(['/', '?', '#']).unwrap_or(after.len())];
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.starts_with('[') {
        return false;
    }
    let host = host.split(':').next().unwrap_or(host);
    let labels = host.strip_suffix('.').unwrap_or(host);
    let last = labels.rsplit('.').next().unwrap_or(labels);
    let number = |label: &str| {
        !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
            || label
                .strip_prefix("0x")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if !number(last) {
        return false;
    }
    let parts: alloc::vec::Vec<&str> = host.split('.').collect();
    let usual = parts.len() == 4
        && parts.iter().all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && (part.len() == 1 || !part.starts_with('0'))
                && part.parse::<u8>().is_ok()
        });
    !usual
}

/// Checks the URI of one resource a plugin lists: [`check_uri`], ASCII ([`check_ascii`]), no
/// `{` or `}` (those mark a template's variables), and written in normal form
/// ([`is_normal`]).
///
/// # Errors
/// [`check_uri`]'s problem, else [`UriProblem::NotAscii`], else [`UriProblem::HasVariable`],
/// else [`UriProblem::NotNormal`].
pub fn check_resource_uri(uri: &str) -> Result<(), UriProblem> {
    check_uri(uri)?;
    check_ascii(uri)?;
    if uri.contains(['{', '}']) {
        return Err(UriProblem::HasVariable);
    }
    if !is_normal(uri) {
        return Err(UriProblem::NotNormal);
    }
    Ok(())
}

/// Checks that a URI a plugin gives (listed, a template, named in its content) is ASCII, as
/// RFC 3986 writes URIs: a character that is not could look like another (`notes://аll` with
/// a Cyrillic `а`, beside another plugin's `notes://all`).
///
/// # Errors
/// [`UriProblem::NotAscii`] naming the first such character.
pub fn check_ascii(uri: &str) -> Result<(), UriProblem> {
    match uri.chars().find(|c| !c.is_ascii()) {
        Some(c) => Err(UriProblem::NotAscii(c)),
        None => Ok(()),
    }
}

/// The schemes the WHATWG URL standard treats as special (what browsers' and most clients'
/// URL parsers follow), with their default ports.
const SPECIAL_SCHEMES: [(&str, Option<&str>); 6] = [
    ("http", Some("80")),
    ("https", Some("443")),
    ("ws", Some("80")),
    ("wss", Some("443")),
    ("ftp", Some("21")),
    ("file", None),
];

/// `uri` as hosts compare URIs: RFC 3986's normal form (its sections 6.2.2 and 6.2.3), and what
/// clients' URL parsers (WHATWG's standard, the `url` crate) make of it besides. The scheme and
/// the host in lower case (not the user information before an `@`); percent-escapes of
/// unreserved characters (letters, digits, `-._~`) decoded, the other escapes' hex digits in
/// upper case; `.` and `..` segments of a path removed; an empty user information, an empty
/// port and a special scheme's default port dropped, a port's leading zeros too; an empty path
/// after a special scheme's host is `/`. Anything else as it is. Spellings a client may take
/// for one resource (`NOTES://all`, `notes://%61ll`, `notes://all:`, `notes://@all`,
/// `notes://note/./7` for `notes://note/7`) come out the same; for a URI [`check_uri`] accepts
/// (every `%` an escape), a second pass changes nothing.
#[must_use]
pub fn comparable_uri(uri: &str) -> String {
    let decoded = decode_unreserved(uri);
    let Some((scheme, rest)) = decoded.split_once(':') else {
        return decoded;
    };
    let scheme = scheme.to_ascii_lowercase();
    let default_port = SPECIAL_SCHEMES
        .iter()
        .find(|(special, _)| *special == scheme)
        .map(|(_, port)| *port);
    let mut out = String::with_capacity(decoded.len());
    out.push_str(&scheme);
    out.push(':');
    let path_and_more = match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find(['/', '?', '#']).unwrap_or(after.len());
            out.push_str("//");
            push_authority(&mut out, &after[..end], default_port.flatten());
            let more = &after[end..];
            // A special scheme's host is followed by a path, `/` at least.
            if default_port.is_some() && !more.starts_with('/') {
                out.push('/');
            }
            more
        }
        None => rest,
    };
    let path_end = path_and_more
        .find(['?', '#'])
        .unwrap_or(path_and_more.len());
    let (path, more) = path_and_more.split_at(path_end);
    if path.starts_with('/') {
        push_without_dot_segments(&mut out, path);
    } else {
        out.push_str(path);
    }
    out.push_str(more);
    out
}

/// Writes the authority `authority` (`[userinfo@]host[:port]`) as [`comparable_uri`] compares
/// it: an empty user information (and an empty password's `:`) dropped, the host's letters in
/// lower case but not the hex digits of escapes (upper case already), an empty port, a port's
/// leading zeros and the scheme's `default_port` dropped.
fn push_authority(out: &mut String, authority: &str, default_port: Option<&str>) {
    let (user, host_and_port) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    if let Some(user) = user.map(|user| user.strip_suffix(':').unwrap_or(user))
        && !user.is_empty()
    {
        out.push_str(user);
        out.push('@');
    }
    // An IPv6 address in brackets has colons of its own.
    let port_at = match host_and_port.strip_prefix('[') {
        Some(v6) => v6
            .find(']')
            .and_then(|end| host_and_port[end + 2..].find(':').map(|at| at + end + 2)),
        None => host_and_port.find(':'),
    };
    let (host, port) = match port_at {
        Some(at) => (&host_and_port[..at], Some(&host_and_port[at + 1..])),
        None => (host_and_port, None),
    };
    let mut escape_left = 0;
    for c in host.chars() {
        if escape_left > 0 {
            escape_left -= 1;
            out.push(c);
            continue;
        }
        if c == '%' {
            escape_left = 2;
        }
        out.push(c.to_ascii_lowercase());
    }
    let port = port.map(|port| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            let plain = port.trim_start_matches('0');
            if plain.is_empty() && !port.is_empty() {
                "0"
            } else {
                plain
            }
        } else {
            // A template's `{port}`, or what is no port: as it is.
            port
        }
    });
    if let Some(port) = port.filter(|port| !port.is_empty() && Some(*port) != default_port) {
        out.push(':');
        out.push_str(port);
    }
}

/// Writes the absolute path `path` without its `.` and `..` segments (RFC 3986, section
/// 5.2.4): `/a/./b/../c` is `/a/c`; a last `.` or `..` leaves a `/` at the end.
fn push_without_dot_segments(out: &mut String, path: &str) {
    let segments: alloc::vec::Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    let mut kept: alloc::vec::Vec<&str> = alloc::vec::Vec::with_capacity(segments.len());
    for (index, segment) in segments.iter().enumerate() {
        match *segment {
            "." => {}
            ".." => {
                kept.pop();
            }
            other => {
                kept.push(other);
                continue;
            }
        }
        if index == last {
            kept.push("");
        }
    }
    out.push('/');
    out.push_str(&kept.join("/"));
}

/// `text` with its percent-escapes of unreserved characters decoded and the other escapes'
/// hex digits in upper case (an escape is `%` and two ASCII hex digits, nothing else).
fn decode_unreserved(text: &str) -> String {
    fn hex(digit: u8) -> Option<u8> {
        char::from(digit)
            .to_digit(16)
            .and_then(|value| u8::try_from(value).ok())
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = match (bytes[at], bytes.get(at + 1), bytes.get(at + 2)) {
            (b'%', Some(&high), Some(&low)) => hex(high).zip(hex(low)).map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match escaped {
            Some(byte) if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) => {
                out.push(char::from(byte));
                at += 3;
            }
            Some(byte) => {
                const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(char::from(DIGITS[usize::from(byte >> 4)]));
                out.push(char::from(DIGITS[usize::from(byte & 15)]));
                at += 3;
            }
            None => {
                let ch = text[at..].chars().next().unwrap_or_default();
                out.push(ch);
                at += ch.len_utf8();
            }
        }
    }
    out
}

/// Whether `uri` (a URI, or a template's text) is written as hosts compare URIs: whether it is
/// its own [`comparable_uri`].
///
/// What a plugin offers must be in this form, so that two spellings of one URI (`NOTES://all`
/// and `notes://%61ll` for `notes://all`) can never be offered by two plugins, each thinking
/// it has its own, and so that comparing offered URIs as written is comparing them as a
/// client's URI is compared with them.
#[must_use]
pub fn is_normal(uri: &str) -> bool {
    comparable_uri(uri) == uri
}

/// Why a MIME type is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MimeProblem {
    /// Not `type/subtype`, each 1 to [`MAX_MIME_NAME_LEN`] of RFC 6838's characters.
    NotTypeSubtype,
    /// The parameters after `;` are not one line of text.
    BadParameters,
    /// Longer than [`MAX_MIME_TYPE_BYTES`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
}

impl fmt::Display for MimeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotTypeSubtype => f.write_str(
                "it is not `type/subtype` (each letters, digits and `!#$&-^_.+`), such as \
                 `text/markdown` or `image/png`, optionally with parameters \
                 (`text/plain; charset=utf-8`)",
            ),
            Self::BadParameters => f.write_str(
                "its parameters (after `;`) must be one line of text, such as `charset=utf-8`",
            ),
            Self::TooLong { len } => write!(
                f,
                "it is {len} bytes; a MIME type is at most {MAX_MIME_TYPE_BYTES} bytes"
            ),
        }
    }
}

/// Whether `name` is an RFC 6838 `restricted-name` (a MIME type's type or subtype).
fn is_restricted_name(name: &str) -> bool {
    name.len() <= MAX_MIME_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '!' | '#' | '$' | '&' | '-' | '^' | '_' | '.' | '+')
        })
}

/// Checks a MIME type: `type/subtype` by RFC 6838, then optionally `;` and parameters on
/// the same line; at most [`MAX_MIME_TYPE_BYTES`] bytes.
///
/// # Errors
/// The first problem, in this order: too long, not `type/subtype`, bad parameters.
pub fn check_mime_type(mime: &str) -> Result<(), MimeProblem> {
    if mime.len() > MAX_MIME_TYPE_BYTES {
        return Err(MimeProblem::TooLong { len: mime.len() });
    }
    let (essence, parameters) = mime.split_once(';').unwrap_or((mime, ""));
    let Some((kind, subtype)) = essence.split_once('/') else {
        return Err(MimeProblem::NotTypeSubtype);
    };
    if !is_restricted_name(kind) || !is_restricted_name(subtype) {
        return Err(MimeProblem::NotTypeSubtype);
    }
    if parameters.chars().any(char::is_control) || crate::tool::first_hidden(parameters).is_some() {
        return Err(MimeProblem::BadParameters);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    /// What plugins offer must be in normal form: what [`comparable_uri`] leaves as it is, so
    /// that two offered URIs that differ as written differ as compared.
    #[test]
    fn offered_uris_are_in_the_form_uris_are_compared_in() {
        for (uri, normal) in [
            ("notes://all", true),
            ("NOTES://all", false),
            ("notes://ALL/x", false),
            ("notes://all/X", true),
            ("notes://%61ll", false),
            ("notes://all/%7e", false),
            ("notes://all/%2f", false),
            ("notes://all/%2F", true),
            ("notes://a%2Fb/x", true),
            ("notes://caf%C3%A9/x", true),
            ("notes://caf%c3%a9/x", false),
            ("notes://all/%+A", true),
            ("notes://all/%%341", false),
            ("x://Alice@h/x", true),
            ("x://Alice@H/x", false),
            ("notes://all/%0A", true),
            ("notes://all/%G1", true),
            ("notes://all/%", true),
            ("notes://[::1]:80/x", true),
            ("notes://[::A]/x", false),
            ("urn:ISBN:1", true),
            ("x://é/%", true),
        ] {
            assert_eq!(is_normal(uri), normal, "{uri}");
            // For a URI the rule accepts, a second pass changes nothing.
            if check_uri(uri).is_ok() {
                let once = comparable_uri(uri);
                assert_eq!(comparable_uri(&once), once, "{uri}");
            }
        }
        // A `%` that is not an escape is refused by the rule (decoding around it could make
        // one: `%%341` would become `%41`, then `A`).
        for uri in [
            "notes://all/%+A",
            "notes://all/%G1",
            "notes://all/%",
            "notes://all/%%341",
        ] {
            assert_eq!(check_uri(uri), Err(UriProblem::BadEscape), "{uri}");
            assert_eq!(check_resource_uri(uri), Err(UriProblem::BadEscape), "{uri}");
        }
        for (one, other) in [
            ("NOTES://all", "notes://all"),
            ("notes://%61ll", "notes://all"),
            ("Notes://ALL/Note", "notes://all/Note"),
            ("notes://all/%7e%2f", "notes://all/~%2F"),
            ("urn:X:%41", "urn:X:A"),
            ("notes://A%2fB/x", "notes://a%2Fb/x"),
        ] {
            assert_eq!(
                comparable_uri(one),
                comparable_uri(other),
                "{one} / {other}"
            );
        }
        assert_ne!(
            comparable_uri("notes://all/A"),
            comparable_uri("notes://all/a")
        );
        assert_ne!(
            comparable_uri("notes://all/%2F"),
            comparable_uri("notes://all//")
        );
    }

    /// The attack: another plugin's `notes://all` written `notes://all:`, `notes://@all` or
    /// `notes://note/./7`: the comparison (case and escapes only) took each for a URI no one
    /// offers, while clients' URL parsers read notes' own; offered at load (`notes://all:`, a
    /// template `notes://note/./{n}`), it clashed with nothing. Compared as URL parsers read
    /// them, they are notes', and not in normal form, so no plugin may offer them.
    #[test]
    fn spellings_url_parsers_read_as_one_uri_are_one() {
        for (spelt, read) in [
            ("notes://all:", "notes://all"),
            ("notes://@all", "notes://all"),
            ("notes://:@all", "notes://all"),
            ("notes://ada:@all/x", "notes://ada@all/x"),
            ("notes://note/./7", "notes://note/7"),
            ("notes://note/%2E/7", "notes://note/7"),
            ("notes://note/x/../7", "notes://note/7"),
            ("notes://note/%2e%2E/note/7", "notes://note/note/7"),
            ("notes://note/7/.", "notes://note/7/"),
            ("notes://note/7/..", "notes://note/"),
            ("notes://all:0080/x", "notes://all:80/x"),
            ("notes://[::1]:/x", "notes://[::1]/x"),
            ("https://example.com:443/a", "https://example.com/a"),
            ("HTTP://Example.COM:80", "http://example.com/"),
            ("https://example.com?q", "https://example.com/?q"),
            ("file:///a/./b", "file:///a/b"),
            ("notes://note/{n}/./x", "notes://note/{n}/x"),
        ] {
            assert_eq!(comparable_uri(spelt), read, "{spelt}");
            assert!(!is_normal(spelt), "{spelt}");
            assert_eq!(comparable_uri(read), read, "{read}");
            assert!(is_normal(read), "{read}");
        }
        // What differs stays apart: a port of another number, a user, a query, a fragment,
        // an empty segment, a port of a scheme that has no default.
        for (one, other) in [
            ("notes://all:81", "notes://all"),
            ("notes://ada@all", "notes://all"),
            ("notes://all/x?", "notes://all/x"),
            ("notes://all/x#", "notes://all/x"),
            ("notes://all//x", "notes://all/x"),
            ("notes://all:80/x", "notes://all/x"),
            ("notes://all", "notes://all/"),
            ("x://h:{port}/", "x://h/"),
        ] {
            assert_ne!(
                comparable_uri(one),
                comparable_uri(other),
                "{one} / {other}"
            );
        }
        assert!(is_normal("x://h:{port}/"));
        // What URL parsers rewrite otherwise is refused.
        for refused in [
            "https://example.com\\a",
            "notes://a\\b",
            "http://127.1/x",
            "http://0x7f.0.0.1/",
            "https://2130706433/",
            "http://127.000.0.1/",
            "ws://example.123/",
        ] {
            assert!(
                matches!(check_uri(refused), Err(UriProblem::ReadOtherwise(_))),
                "{refused}: {:?}",
                check_uri(refused)
            );
        }
        for accepted in [
            "http://127.0.0.1/x",
            "https://example.com",
            "notes://127.1/x",
            "https://1.example/",
            "https://[::1]:8443/",
        ] {
            assert_eq!(check_uri(accepted), Ok(()), "{accepted}");
        }
    }

    /// A URI a plugin gives is ASCII, as RFC 3986 writes URIs: `notes://аll` (a Cyrillic `а`)
    /// would look like `notes://all`; percent-encoded, the same text passes.
    #[test]
    fn a_plugins_uris_are_ascii() {
        assert_eq!(
            check_resource_uri("notes://\u{430}ll"),
            Err(UriProblem::NotAscii('\u{430}'))
        );
        assert_eq!(
            crate::template::check_template("notes://n\u{43e}te/{id}"),
            Err(crate::template::TemplateProblem::NotAUri(
                UriProblem::NotAscii('\u{43e}')
            ))
        );
        assert_eq!(check_resource_uri("notes://%D0%B0ll"), Ok(()));
        // What a client sends is held to `check_uri` only.
        assert_eq!(check_uri("notes://\u{430}ll"), Ok(()));
    }

    #[test]
    fn uris_need_a_scheme_and_no_spaces() {
        for good in [
            "test://static-text",
            "file:///a/b.txt",
            "urn:isbn:1",
            "a+b.c-d:x",
        ] {
            assert_eq!(check_resource_uri(good), Ok(()), "{good:?}");
        }
        assert_eq!(check_uri(""), Err(UriProblem::Empty));
        assert_eq!(check_uri("no-scheme"), Err(UriProblem::NoScheme));
        assert_eq!(check_uri("://x"), Err(UriProblem::NoScheme));
        assert_eq!(check_uri("1x://y"), Err(UriProblem::NoScheme));
        assert_eq!(check_uri("my notes:x"), Err(UriProblem::NotOneWord(' ')));
        assert_eq!(check_uri("x://\u{7}"), Err(UriProblem::NotOneWord('\u{7}')));
        // Characters shown as nothing, which would carry text no reader sees.
        assert_eq!(
            check_uri("notes://a\u{E0041}\u{E0042}"),
            Err(UriProblem::NotOneWord('\u{E0041}'))
        );
        assert_eq!(
            check_uri("notes://\u{202E}txt"),
            Err(UriProblem::NotOneWord('\u{202E}'))
        );
        assert_eq!(
            check_uri("notes://a\u{200B}b"),
            Err(UriProblem::NotOneWord('\u{200B}'))
        );
        assert_eq!(
            check_uri(&format!("x://{}", "a".repeat(MAX_URI_BYTES))),
            Err(UriProblem::TooLong {
                len: MAX_URI_BYTES + 4
            })
        );
        assert_eq!(check_uri("x://{id}"), Ok(()));
        assert_eq!(check_resource_uri("x://{id}"), Err(UriProblem::HasVariable));
    }

    #[test]
    fn mime_types_are_type_slash_subtype() {
        for good in [
            "text/plain",
            "image/png",
            "application/vnd.api+json",
            "text/plain; charset=utf-8",
        ] {
            assert_eq!(check_mime_type(good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            "markdown",
            "text/",
            "/plain",
            "text/pl ain",
            "text/plain/x",
            "tëxt/plain",
        ] {
            assert_eq!(
                check_mime_type(bad),
                Err(MimeProblem::NotTypeSubtype),
                "{bad:?}"
            );
        }
        assert_eq!(
            check_mime_type("text/plain; a=\nb"),
            Err(MimeProblem::BadParameters)
        );
        assert_eq!(
            check_mime_type("text/plain; charset=utf-8\u{E0041}\u{E0042}"),
            Err(MimeProblem::BadParameters)
        );
        let long = format!("text/plain; x={}", "y".repeat(MAX_MIME_TYPE_BYTES));
        assert!(matches!(
            check_mime_type(&long),
            Err(MimeProblem::TooLong { .. })
        ));
    }
}
