//! The bearer token of a local HTTP server, generated once and kept where only the user can
//! read it, so that clients configured with it keep working across restarts (as Jupyter does).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::McpError;

/// Bytes of randomness in a generated token (256 bits, written as 64 hex digits).
const TOKEN_BYTES: usize = 32;

/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 64 << 10;

/// Where [`persistent_token`] keeps the user's token by default:
/// `$XDG_STATE_HOME/llm-worker/http-token`, else `$HOME/.local/state/llm-worker/http-token`;
/// `None` when neither is set.
pub fn default_token_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local").join("state"))
        })?;
    Some(base.join("llm-worker").join("http-token"))
}

/// The token kept in `path`, created there (a random 256-bit token, mode 0600, in a directory
/// created with mode 0700) if the file does not exist yet.
///
/// The file is used only if it is a regular file of this user that no one else may read or
/// write (it admits callers to every tool), read without following a link; otherwise this is an
/// error saying what to fix, never a silently weaker token.
pub fn persistent_token(path: &Path) -> Result<String, McpError> {
    let error = |reason: String| McpError::TokenFile {
        path: path.to_owned(),
        reason,
    };
    match read_private(path) {
        Ok(Some(token)) => return Ok(token),
        Ok(None) => {}
        Err(reason) => return Err(error(reason)),
    }
    // Its directory is made through no link another user put or points on the way, and must
    // be one no one else can replace or put files in: the token is written there, and read
    // from there by every later start.
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::file::create_dir_all_through_own_links(parent, 0o700)
            .map_err(|e| error(format!("cannot create its directory: {e}")))?;
        crate::file::no_one_else_can_replace(parent, "its directory").map_err(error)?;
    }
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| error(format!("the system gave no random bytes: {e}")))?;
    let token = crate::digest::hex(&bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| error(format!("cannot write it: {e}")))?;
            Ok(token)
        }
        // Another server started at the same moment wrote it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_private(path)
            .map_err(error)?
            .ok_or_else(|| error("it vanished while it was being created".into())),
        Err(e) => Err(error(format!("cannot create it: {e}"))),
    }
}

/// The token in `path`, if the file exists and is private to this user.
fn read_private(path: &Path) -> Result<Option<String>, String> {
    let Some(text) = read_text(path, crate::file::Private::Ours)? else {
        return Ok(None);
    };
    let token = tokens_in(&text)
        .next()
        .ok_or("it holds no token; delete it to have a new one generated")?;
    // A token put there by hand is served as it is: one too short to be a secret is refused
    // here as it would be in a token file.
    if token.chars().count() < MIN_TOKEN_CHARS || token.contains(char::is_whitespace) {
        return Err(format!(
            "its token has {} characters{}, which is not a secret (at least {MIN_TOKEN_CHARS}, \
             no spaces); delete the file to have a new one generated",
            token.chars().count(),
            if token.contains(char::is_whitespace) {
                " with spaces"
            } else {
                ""
            }
        ));
    }
    Ok(Some(token.to_owned()))
}

/// The text of the private file `path` (`None`: there is none).
fn read_text(path: &Path, who: crate::file::Private) -> Result<Option<String>, String> {
    let Some(bytes) = crate::file::read_private_file(path, MAX_TOKEN_FILE_BYTES, who)? else {
        return Ok(None);
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "it is not UTF-8 text".to_owned())
}

/// The tokens of a token file's text: one per line, blank lines and `#` comments left out.
fn tokens_in(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

/// Fewest characters of a bearer token the HTTP service accepts (the `TOKEN` of a token file's
/// line `NAME: TOKEN`, a kept token, one given through [`HttpOptions`](crate::mcp::HttpOptions)).
pub const MIN_TOKEN_CHARS: usize = 16;

/// The bearer tokens of the operator's token file `path` (`--token-file`): one per line, blank
/// lines and `#` comments left out. A line `NAME: TOKEN` names its holder (an
/// [`Identity`](crate::Identity)'s name; a bearer token never holds `:` or spaces, RFC 6750);
/// a token alone is `token-N`, the file's Nth token (as [`HttpOptions::tokens`] names them).
/// A name or a token given twice is refused, and so is a token of fewer than 16 characters. The file must be the user's own and readable by
/// no one else — or root's and readable by its group at most, as Kubernetes mounts a secret —
/// and is checked on the file opened; links are followed.
///
/// [`HttpOptions::tokens`]: crate::mcp::HttpOptions::tokens
pub fn read_token_file(path: &Path) -> Result<Vec<super::BearerToken>, McpError> {
    read_tokens(path, false)
}

/// As [`read_token_file`], but every token must name its holder (`NAME: TOKEN`): for a server
/// whose access policy grants tools per identity, where a name that moved with the file's
/// lines would move the grants with it.
pub fn read_named_token_file(path: &Path) -> Result<Vec<super::BearerToken>, McpError> {
    read_tokens(path, true)
}

fn read_tokens(path: &Path, names_required: bool) -> Result<Vec<super::BearerToken>, McpError> {
    let error = file_error(path);
    let text = operators_text(path)?;
    let mut tokens: Vec<super::BearerToken> = Vec::new();
    // Where each name and token was first given, by line.
    let mut names = std::collections::HashMap::new();
    let mut secrets = std::collections::HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, token) = match line.split_once(':') {
            Some((name, token)) => (name.trim().to_owned(), token.trim()),
            None if names_required => {
                return Err(error(format!(
                    "line {number}: a token without a name; the access policy grants tools per \
                     identity, so write `NAME: TOKEN` (the name its grants use, \
                     `token:NAME`)"
                )));
            }
            None => (format!("token-{}", tokens.len() + 1), line),
        };
        let valid_name = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
        if !valid_name {
            return Err(error(format!(
                "line {number}: {name:?} is not a name (letters, digits, `-`, `_`, `.`, `@`)"
            )));
        }
        if token.is_empty() || token.contains(char::is_whitespace) {
            return Err(error(format!(
                "line {number}: write `NAME: TOKEN` or a token alone (no spaces in a token)"
            )));
        }
        // A token is a secret that anyone who can reach the server may guess at: one a person
        // made up (`alice: a`), or a line `prod:4f…` read as the name `prod` and the token
        // `4f…`, is refused rather than served.
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(error(format!(
                "line {number}: the token of {name:?} has {} characters, too few to be a secret \
                 (at least {MIN_TOKEN_CHARS}; `openssl rand -hex 32` makes one); a line \
                 `NAME: TOKEN` is split at its first `:`",
                token.chars().count()
            )));
        }
        if let Some(first) = names.insert(name.clone(), number) {
            return Err(error(format!(
                "line {number}: the name {name:?} is also line {first}'s (a token alone on the \
                 Nth line of tokens is named `token-N`); give each holder a name of its own"
            )));
        }
        if let Some(first) = secrets.insert(token.to_owned(), number) {
            return Err(error(format!(
                "line {number}: the same token as line {first}; a token names one holder"
            )));
        }
        tokens.push(super::BearerToken::new(name, token));
    }
    if tokens.is_empty() {
        return Err(error("it holds no token; put one token per line".into()));
    }
    Ok(tokens)
}

/// The secret in the operator's file `path` (`--oauth-introspection-secret-file`): its text,
/// trailing white space removed, in a file as private as a token file.
pub fn read_secret_file(path: &Path) -> Result<String, McpError> {
    let secret = operators_text(path)?.trim_end().to_owned();
    if secret.is_empty() {
        return Err(file_error(path)("it is empty".into()));
    }
    Ok(secret)
}

/// The error about the operator's secret file `path`, for a reason.
fn file_error(path: &Path) -> impl Fn(String) -> McpError + '_ {
    move |reason| McpError::TokenFile {
        path: path.to_owned(),
        reason,
    }
}

/// The text of the operator's secret file `path`, which must be there and private (see
/// [`read_token_file`]).
fn operators_text(path: &Path) -> Result<String, McpError> {
    let error = file_error(path);
    read_text(path, crate::file::Private::Operators)
        .map_err(&error)?
        .ok_or_else(|| error("there is no such file".into()))
}

/// Fewest bytes a request-state key may have.
const MIN_KEY_BYTES: usize = 32;

/// The request-state key in the operator's file `path` (`--request-state-key-file`), trailing
/// white space removed: at least 32 bytes, in a file as private as a token file (anyone who
/// reads it can forge the answers to a tool's questions). For
/// [`McpOptions::request_state_key`](super::McpOptions::request_state_key).
pub fn read_request_state_key(path: &Path) -> Result<Vec<u8>, McpError> {
    let error = |reason: String| McpError::KeyFile {
        path: path.to_owned(),
        reason,
    };
    let mut key =
        crate::file::read_private_file(path, MAX_TOKEN_FILE_BYTES, crate::file::Private::Operators)
            .map_err(error)?
            .ok_or_else(|| error("there is no such file".into()))?;
    while key.last().is_some_and(u8::is_ascii_whitespace) {
        key.pop();
    }
    if key.len() < MIN_KEY_BYTES {
        return Err(error(format!(
            "it has {} bytes; give at least {MIN_KEY_BYTES} (e.g. `head -c 32 /dev/urandom | \
             base64 > FILE`)",
            key.len()
        )));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attack: the generated token's directory made through a link another user put
    /// (their `~/.local/state/llm-worker` pointing into a system directory, under `sudo -E`),
    /// or in a directory others may write: the token was written where the link led, or
    /// where they could replace it. Made and kept only where no one else can replace it.
    #[test]
    fn a_token_is_kept_only_where_no_one_else_can_replace_it() {
        use std::os::unix::fs::PermissionsExt;
        let root =
            std::env::temp_dir().join(format!("llm-worker-token-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let own = root.join("state/llm-worker/http-token");
        let token = persistent_token(&own).expect("a token made");
        assert_eq!(persistent_token(&own).expect("the token kept"), token);

        let shared = root.join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let error = persistent_token(&shared.join("llm-worker/http-token"))
            .expect_err("a directory others may write")
            .to_string();
        assert!(error.contains("may be written by other users"), "{error}");

        // Another user's link on the way (only root can make one to try).
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        let linked = root.join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).expect("symlink");
        if std::os::unix::fs::lchown(&linked, Some(4242), None).is_ok() {
            let refused = persistent_token(&linked.join("llm-worker/http-token"));
            assert!(refused.is_err(), "{refused:?}");
            assert!(
                std::fs::read_dir(&elsewhere)
                    .expect("read")
                    .next()
                    .is_none(),
                "nothing was made where the link leads"
            );
        }
        std::fs::remove_dir_all(&root).expect("clean up");
    }

    /// A private token file holding `text`.
    fn token_file(name: &str, text: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path =
            std::env::temp_dir().join(format!("llm-worker-tokens-{name}-{}", std::process::id()));
        std::fs::write(&path, text).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    fn names(path: &Path) -> Vec<String> {
        read_token_file(path)
            .expect("tokens")
            .into_iter()
            .map(|token| token.name)
            .collect()
    }

    /// A token alone was named by its line, comments and blank lines counted: a comment added
    /// above it gave its name (and an access policy's grants to that name) to another token;
    /// and an explicit name could be an unnamed token's too, making two holders one identity.
    #[test]
    fn names_do_not_move_with_comments_and_are_never_shared() {
        let plain = token_file("plain", "first-token-0123456789\nsecond-token-0123456789\n");
        let commented = token_file(
            "commented",
            "# the team\n\nfirst-token-0123456789\n# more\nsecond-token-0123456789\n",
        );
        assert_eq!(names(&plain), ["token-1", "token-2"]);
        assert_eq!(names(&commented), names(&plain));
        for (name, text, said) in [
            (
                "same-name",
                "token-2: first-token-0123456789\nsecond-token-0123456789\n",
                "line 2: the name \"token-2\" is also line 1's",
            ),
            (
                "same-token",
                "alice: first-token-0123456789\nbob: first-token-0123456789\n",
                "line 2: the same token as line 1",
            ),
            (
                "short",
                "alice: first-token-0123456789\nbob: b0b\n",
                "line 2: the token of \"bob\" has 3 characters, too few",
            ),
            (
                "split",
                "prod:4f2a9c\n",
                "line 1: the token of \"prod\" has 6 characters",
            ),
        ] {
            let path = token_file(name, text);
            let error = read_token_file(&path).expect_err(name).to_string();
            assert!(error.contains(said), "{error}");
            std::fs::remove_file(path).expect("clean up");
        }
        let error = read_named_token_file(&commented)
            .expect_err("unnamed")
            .to_string();
        assert!(error.contains("line 3: a token without a name"), "{error}");
        for path in [plain, commented] {
            std::fs::remove_file(path).expect("clean up");
        }
    }
}
