//! Who sends a request: a static bearer token (compared in constant time with each of the
//! server's), or an OAuth access token (feature `oauth`); the 401 and 403 answers that tell a
//! client how to get one.

use std::sync::Arc;

use http::{HeaderValue, Request, Response, StatusCode, header};
use subtle::ConstantTimeEq;

use super::Body;
use super::gate::refusal;
use crate::Identity;
use crate::mcp::identity::{BearerToken, SharedIdentity};

/// How requests are authenticated.
pub(super) struct Authenticator {
    /// The static tokens and who holds each.
    tokens: Vec<(Vec<u8>, SharedIdentity)>,
    #[cfg(feature = "oauth")]
    oauth: Option<crate::mcp::oauth::SharedVerifier>,
}

impl Authenticator {
    /// Static `tokens` (empty ones left out: they would admit `Bearer ` with nothing after it).
    pub(super) fn new(tokens: &[BearerToken]) -> Self {
        let tokens = tokens
            .iter()
            .filter(|token| !token.secret.trim().is_empty())
            .map(|token| {
                (
                    token.secret.trim().as_bytes().to_vec(),
                    Arc::new(Identity::token(token.name.clone())),
                )
            })
            .collect();
        Self {
            tokens,
            #[cfg(feature = "oauth")]
            oauth: None,
        }
    }

    /// How long past its `exp` an access token is still accepted (the verifier's clock skew);
    /// zero without OAuth.
    pub(super) fn leeway(&self) -> std::time::Duration {
        #[cfg(feature = "oauth")]
        if let Some(verifier) = &self.oauth {
            return verifier.options().leeway;
        }
        std::time::Duration::ZERO
    }

    /// Accepts the access tokens `verifier` accepts too.
    #[cfg(feature = "oauth")]
    pub(super) fn with_oauth(mut self, verifier: crate::mcp::oauth::SharedVerifier) -> Self {
        self.oauth = Some(verifier);
        self
    }

    /// Whether any request can be authenticated at all (else the server is open).
    pub(super) fn is_configured(&self) -> bool {
        #[cfg(feature = "oauth")]
        if self.oauth.is_some() {
            return true;
        }
        !self.tokens.is_empty()
    }

    /// The metadata document to answer `request` with, if it asks for this resource's
    /// Protected Resource Metadata.
    pub(super) fn metadata<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        #[cfg(feature = "oauth")]
        if let Some(verifier) = &self.oauth
            && request.method() == http::Method::GET
            && verifier.options().is_metadata_path(request.uri().path())
        {
            use http_body_util::BodyExt;
            let body = verifier.options().metadata().to_string();
            let mut response =
                Response::new(http_body_util::Full::new(bytes::Bytes::from(body)).boxed());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return Some(response);
        }
        let _ = request;
        None
    }

    /// Who sent a request with these `headers`: `Ok(None)` on a server without
    /// authentication; a 401 or 403 answer if its token is missing or not accepted.
    pub(super) async fn authenticate(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Option<SharedIdentity>, Response<Body>> {
        if !self.is_configured() {
            return Ok(None);
        }
        // The scheme's name is case-insensitive (RFC 9110).
        let given = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .filter(|value| value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer "))
            .map(|value| value[7..].trim_ascii());
        let Some(given) = given else {
            return Err(self.unauthorized(None));
        };
        // Compared in constant time with each token, whichever matches (a token's length
        // is not secret).
        let matched = self.tokens.iter().fold(None, |found, (token, identity)| {
            let matches = bool::from(token.as_slice().ct_eq(given));
            found.or(matches.then_some(identity))
        });
        if let Some(identity) = matched {
            return Ok(Some(Arc::clone(identity)));
        }
        #[cfg(feature = "oauth")]
        if let Some(verifier) = &self.oauth {
            let Ok(token) = std::str::from_utf8(given) else {
                return Err(self.unauthorized(Some("the token is not text")));
            };
            return match verifier.verify(token).await {
                Ok(identity) => Ok(Some(Arc::new(identity))),
                Err(crate::mcp::oauth::Refused::Invalid(reason)) => {
                    tracing::debug!("refused an access token: {reason}");
                    Err(self.unauthorized(Some(&format!("the access token is refused: {reason}"))))
                }
                Err(crate::mcp::oauth::Refused::Scope(needed)) => Err(self.forbidden(&needed)),
            };
        }
        Err(self.unauthorized(Some("the bearer token is not one this server accepts")))
    }

    /// 401, with what a client needs to get a token (RFC 6750 §3, RFC 9728 §5.1).
    fn unauthorized(&self, invalid: Option<&str>) -> Response<Body> {
        let message = invalid
            .unwrap_or("this MCP server needs a bearer token: send `Authorization: Bearer TOKEN`");
        let mut response = refusal(StatusCode::UNAUTHORIZED, message);
        let mut challenge = String::from("Bearer realm=\"llm-worker\"");
        if invalid.is_some() {
            challenge.push_str(", error=\"invalid_token\"");
        }
        #[cfg(feature = "oauth")]
        if let Some(verifier) = &self.oauth {
            let options = verifier.options();
            if !options.required_scopes.is_empty() {
                challenge.push_str(&format!(
                    ", scope=\"{}\"",
                    options.required_scopes.join(" ")
                ));
            }
            challenge.push_str(&format!(
                ", resource_metadata=\"{}\"",
                options.metadata_url()
            ));
        }
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// 403 `insufficient_scope`, naming the scopes needed (RFC 6750 §3.1).
    #[cfg(feature = "oauth")]
    fn forbidden(&self, needed: &[String]) -> Response<Body> {
        let needed = needed.join(" ");
        let mut response = refusal(
            StatusCode::FORBIDDEN,
            &format!("the access token lacks scopes this server needs: {needed}"),
        );
        let mut challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{needed}\"");
        if let Some(verifier) = &self.oauth {
            challenge.push_str(&format!(
                ", resource_metadata=\"{}\"",
                verifier.options().metadata_url()
            ));
        }
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}
