//! Reading a registry's responses: transport errors with their causes, the registry's own
//! error quoted, and bodies read up to a cap.

use crate::registry::{RegistryError, quoted, quoted_up_to, shown_url, shown_url_text};

/// Largest error body quoted from a registry.
const MAX_ERROR_BYTES: u64 = 64 << 10;

/// The error of a request to `url` (as asked, not where redirects led: a blob's storage URL
/// may carry a signature in its query) that failed on the way.
pub(super) fn transport(url: &str, error: reqwest::Error) -> RegistryError {
    // reqwest's own text is "error sending request for url (…)", naming the URL the request
    // had reached; the cause says what happened. The text is the registry's in part (a
    // redirect's URL, a header): on one line, and cut.
    let error = error.without_url();
    let mut message = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    let message = if error.is_timeout() {
        format!("timed out ({message})")
    } else {
        message
    };
    RegistryError::Transport {
        url: shown_url_text(url),
        message: quoted_up_to(&message, 1_000),
    }
}

/// The response if it is a success; else the registry's error, quoted.
pub(super) async fn expect_success(
    response: reqwest::Response,
    url: &str,
) -> Result<reqwest::Response, RegistryError> {
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status().as_u16();
    let body = read_capped(response, MAX_ERROR_BYTES, "an error", "")
        .await
        .unwrap_or_default();
    // The distribution API's `{"errors":[{"code":…,"message":…}]}`.
    let detail = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|value| {
            let errors = value.get("errors")?.as_array()?;
            let texts: Vec<String> = errors
                .iter()
                .filter_map(|error| {
                    let code = error.get("code").and_then(serde_json::Value::as_str);
                    let message = error.get("message").and_then(serde_json::Value::as_str);
                    match (code.map(quoted), message.map(quoted)) {
                        (Some(code), Some(message)) => Some(format!("{code}: {message}")),
                        (Some(text), None) | (None, Some(text)) => Some(text),
                        _ => None,
                    }
                })
                .collect();
            (!texts.is_empty()).then(|| format!(" ({})", quoted_up_to(&texts.join("; "), 2_000)))
        })
        .unwrap_or_default();
    // The URL asked for may be one the registry gave (an upload's location, a token realm).
    Err(RegistryError::Status {
        url: shown_url_text(url),
        status,
        detail,
    })
}

/// Reads a body of at most `limit` bytes (refusing a larger `Content-Length` before reading).
pub(super) async fn read_capped(
    mut response: reqwest::Response,
    limit: u64,
    what: &str,
    cap_hint: &str,
) -> Result<Vec<u8>, RegistryError> {
    let too_large = |size: u64| RegistryError::TooLarge {
        what: what.to_owned(),
        size,
        limit,
        hint: cap_hint.to_owned(),
    };
    if let Some(length) = response.content_length()
        && length > limit
    {
        return Err(too_large(length));
    }
    let url = response.url().clone();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| transport(&shown_url(&url), error))?
    {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(too_large((body.len() + chunk.len()) as u64));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
