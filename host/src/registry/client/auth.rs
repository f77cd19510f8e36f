//! Authentication: a request sent again with the `Authorization` that answers the registry's
//! challenge, a bearer token from the realm it names or basic credentials.

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};

use super::RegistryClient;
use super::response::{expect_success, read_capped, transport};
use crate::registry::RegistryError;

/// Largest token response read.
const MAX_TOKEN_BYTES: u64 = 1 << 20;

impl RegistryClient {
    /// Sends a request, authenticating once if the registry asks (a bearer token from the
    /// realm it names, or basic credentials).
    pub(super) async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        accept: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
        push: Option<&str>,
    ) -> Result<reqwest::Response, RegistryError> {
        let body = body.map(|(media_type, bytes)| (media_type, bytes::Bytes::from(bytes)));
        let request = |authorization: Option<HeaderValue>| {
            let mut request = self.http.request(method.clone(), url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some((media_type, bytes)) = &body {
                request = request
                    .header(CONTENT_TYPE, *media_type)
                    .body(bytes.clone());
            }
            if let Some(value) = authorization {
                request = request.header(AUTHORIZATION, value);
            }
            request
        };
        // The registry's credentials go to the registry only: a URL it hands out elsewhere
        // (an upload Location on a storage host, say) gets the request without them, and its
        // challenges are not answered. (reqwest drops the `Authorization` header itself when a
        // redirect leaves the origin.)
        let ours = self.is_registry_origin(url);
        let cached = self
            .authorization
            .lock()
            .ok()
            .and_then(|value| value.clone())
            .filter(|_| ours);
        let response = request(cached)
            .send()
            .await
            .map_err(|error| transport(url, error))?;
        if response.status() != StatusCode::UNAUTHORIZED || !ours {
            return Ok(response);
        }
        // A challenge is judged by who made it: the URL that answered, after any redirects,
        // not the one asked for. A registry that redirects elsewhere does not get that host's
        // token realm sent the registry's credentials.
        if !self.is_registry_origin(response.url().as_str()) {
            return Err(RegistryError::Status {
                url: url.to_owned(),
                status: 401,
                detail: format!(
                    ": the registry redirected to {}, which asks for authentication; the \
                     registry's credentials are sent to the registry only, so none were sent",
                    response.url().origin().ascii_serialization()
                ),
            });
        }
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let authorization = self.authenticate(&challenge, url, push).await?;
        if let Ok(mut cached) = self.authorization.lock() {
            *cached = Some(authorization.clone());
        }
        request(Some(authorization))
            .send()
            .await
            .map_err(|error| transport(url, error))
    }

    /// Whether `url` has the registry's origin (scheme, host and port), the only one its
    /// credentials are sent to.
    fn is_registry_origin(&self, url: &str) -> bool {
        match (reqwest::Url::parse(url), reqwest::Url::parse(&self.base)) {
            (Ok(url), Ok(base)) => url.origin() == base.origin(),
            _ => false,
        }
    }

    /// The `Authorization` value that answers `challenge`.
    async fn authenticate(
        &self,
        challenge: &str,
        url: &str,
        push: Option<&str>,
    ) -> Result<HeaderValue, RegistryError> {
        let denied = |why: String| RegistryError::Status {
            url: crate::registry::shown_url_text(url),
            status: 401,
            detail: format!(": {why}"),
        };
        let (scheme, parameters) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let parameters = challenge_parameters(parameters);
        let basic = self.credentials.as_ref().map(|credentials| {
            let text = format!("{}:{}", credentials.username, credentials.password());
            format!(
                "Basic {}",
                <base64ct::Base64 as base64ct::Encoding>::encode_string(text.as_bytes())
            )
        });
        if scheme.eq_ignore_ascii_case("basic") {
            let value = basic.ok_or_else(|| {
                denied(format!(
                    "the registry wants credentials: `docker login` it, or set {}, {} and {} \
                     (the registry they are for)",
                    crate::registry::credentials::USERNAME_VARIABLE,
                    crate::registry::credentials::PASSWORD_VARIABLE,
                    crate::registry::credentials::REGISTRY_VARIABLE
                ))
            })?;
            return HeaderValue::from_str(&value)
                .map_err(|_| denied("the credentials are not valid in a header".into()));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(denied(format!(
                "the registry asks for `{}` authentication, which is not supported",
                crate::registry::quoted(scheme)
            )));
        }
        let realm = parameters
            .iter()
            .find(|(key, _)| key == "realm")
            .map(|(_, value)| value.clone())
            .ok_or_else(|| denied("the registry's token challenge names no realm".into()))?;
        let mut token_url = reqwest::Url::parse(&realm).map_err(|_| {
            denied(format!(
                "the token realm '{}' is not a URL",
                crate::registry::quoted(&realm)
            ))
        })?;
        let loopback = token_url
            .host_str()
            .is_some_and(crate::registry::reference::is_loopback_host);
        if token_url.scheme() != "https" && !(token_url.scheme() == "http" && loopback) {
            return Err(denied(format!(
                "the token realm {} is not https; no credentials are sent to it",
                crate::registry::shown_url(&token_url)
            )));
        }
        {
            let mut query = token_url.query_pairs_mut();
            if let Some((_, service)) = parameters.iter().find(|(key, _)| key == "service") {
                query.append_pair("service", service);
            }
            let actions = if push.is_some() { "pull,push" } else { "pull" };
            query.append_pair(
                "scope",
                &format!("repository:{}:{actions}", self.repository),
            );
        }
        let mut request = self.http.get(token_url.clone());
        if let Some(value) = &basic {
            request = request.header(AUTHORIZATION, value);
        }
        // As messages show it: the realm is the registry's, and so is its query.
        let token_text = crate::registry::shown_url(&token_url);
        let response = request
            .send()
            .await
            .map_err(|error| transport(&token_text, error))?;
        let response = expect_success(response, &token_text).await?;
        let body = read_capped(response, MAX_TOKEN_BYTES, "the token response", "").await?;
        // The two names the token may have (the distribution spec's and OAuth's), read alone:
        // the rest of a hostile answer is skipped, never built.
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
            denied(format!(
                "{token_text} answered something other than a JSON object"
            ))
        })?;
        let token = answer
            .token
            .or(answer.access_token)
            .ok_or_else(|| denied(format!("{token_text} answered no token")))?;
        HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| denied("the token is not valid in a header".into()))
    }
}

/// `key="value"` pairs of a `WWW-Authenticate` challenge.
pub(super) fn challenge_parameters(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            }
        } else {
            match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            }
        };
        pairs.push((key, value.to_owned()));
        rest = remaining.trim_start().trim_start_matches(',');
    }
    pairs
}
