//! The HTTP side of the OCI distribution API: manifests and blobs read with size caps, blobs
//! and manifests written, the registry's token or basic authentication.
//!
//! TLS is rustls with ring, checked against the system's root certificates; plain HTTP only for a
//! loopback registry and only when asked for. Redirects are followed at most five times, only
//! to https (or to plain HTTP on loopback when plain HTTP is allowed), and reqwest drops the
//! `Authorization` header on any redirect to another host, port or scheme. Proxies come from
//! the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`).

use std::sync::Mutex;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, LOCATION, WWW_AUTHENTICATE,
};

use super::{Credentials, Reference, RegistryError};

/// Largest manifest or index read (what registries themselves accept).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest token response read.
const MAX_TOKEN_BYTES: u64 = 1 << 20;
/// Largest error body quoted from a registry.
const MAX_ERROR_BYTES: u64 = 64 << 10;

/// How the client reaches a registry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// Speak plain HTTP (allowed for a loopback registry only).
    pub plain_http: bool,
    /// Time to connect.
    pub connect_timeout: Duration,
    /// Time a response may stay silent.
    pub read_timeout: Duration,
    /// Time for a whole request, body included.
    pub request_timeout: Duration,
    /// Credentials; `None` looks them up ([`Credentials::find`]) for the registry.
    pub credentials: Option<Credentials>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            plain_http: false,
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(600),
            credentials: None,
        }
    }
}

impl ClientOptions {
    /// Sets whether plain HTTP is spoken (loopback registries only).
    pub fn plain_http(mut self, plain_http: bool) -> Self {
        self.plain_http = plain_http;
        self
    }

    /// Sets the credentials instead of looking them up.
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Sets the time limit of one whole request.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// A client for one repository of one registry.
pub struct RegistryClient {
    http: reqwest::Client,
    base: String,
    repository: String,
    credentials: Option<Credentials>,
    /// The `Authorization` value that worked last (a bearer token or basic credentials).
    authorization: Mutex<Option<HeaderValue>>,
}

/// What a registry answered to a GET of a manifest.
pub(crate) struct Fetched {
    pub(crate) bytes: Vec<u8>,
    pub(crate) content_type: Option<String>,
}

impl RegistryClient {
    /// A client for `reference`'s repository.
    pub fn new(reference: &Reference, options: &ClientOptions) -> Result<Self, RegistryError> {
        if options.plain_http && !reference.is_loopback() {
            return Err(RegistryError::Usage(format!(
                "plain HTTP is only for a registry on this machine (localhost, 127.0.0.1, \
                 [::1]), not {}: anyone on the path could change what is pulled; drop \
                 --plain-http",
                reference.registry
            )));
        }
        let credentials = match &options.credentials {
            Some(credentials) => Some(credentials.clone()),
            None => Credentials::find(&reference.registry).map_err(RegistryError::Usage)?,
        };
        let plain_http = options.plain_http;
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            let url = attempt.url();
            let loopback = url
                .host_str()
                .is_some_and(super::reference::is_loopback_host);
            match url.scheme() {
                "https" => attempt.follow(),
                "http" if plain_http && loopback => attempt.follow(),
                _ => {
                    let message = format!(
                        "a redirect to {url}: only https is followed (plain HTTP only to a \
                         loopback registry with --plain-http)"
                    );
                    attempt.error(message)
                }
            }
        });
        let mut builder = reqwest::Client::builder()
            .redirect(redirects)
            .referer(false)
            .connect_timeout(options.connect_timeout)
            .read_timeout(options.read_timeout)
            .timeout(options.request_timeout)
            .user_agent(concat!("llm-worker/", env!("CARGO_PKG_VERSION")));
        if !plain_http {
            builder = builder.https_only(true);
        }
        let http = builder.build().map_err(|error| {
            RegistryError::Usage(format!("cannot set up the HTTP client: {error}"))
        })?;
        let scheme = if plain_http { "http" } else { "https" };
        Ok(Self {
            http,
            base: format!(
                "{scheme}://{}/v2/{}",
                reference.api_host(),
                reference.repository
            ),
            repository: reference.repository.clone(),
            credentials,
            authorization: Mutex::new(None),
        })
    }

    /// GETs the manifest at `reference` (a tag or a digest), at most [`MAX_MANIFEST_BYTES`];
    /// `None` if the registry has none.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
        accept: &str,
    ) -> Result<Option<Fetched>, RegistryError> {
        let url = format!("{}/manifests/{reference}", self.base);
        let response = self
            .send(reqwest::Method::GET, &url, Some(accept), None, None)
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = expect_success(response, &url).await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(|value| value.split(';').next().unwrap_or(value).trim().to_owned());
        let bytes = read_capped(
            response,
            MAX_MANIFEST_BYTES,
            &format!("the manifest {reference}"),
            "",
        )
        .await?;
        Ok(Some(Fetched {
            bytes,
            content_type,
        }))
    }

    /// GETs the blob `digest`, at most `limit` bytes, and checks its digest.
    pub(crate) async fn blob(
        &self,
        digest: &str,
        limit: u64,
        what: &str,
        cap_hint: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self
            .send(reqwest::Method::GET, &url, None, None, None)
            .await?;
        let response = expect_success(response, &url).await?;
        let bytes = read_capped(response, limit, what, cap_hint).await?;
        let actual = format!("sha256:{}", crate::digest::sha256_hex(&bytes));
        if actual != digest {
            return Err(RegistryError::DigestMismatch {
                what: what.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Uploads `bytes` as a blob (unless the registry has it), monolithically.
    pub(crate) async fn put_blob(&self, bytes: &[u8]) -> Result<String, RegistryError> {
        let digest = format!("sha256:{}", crate::digest::sha256_hex(bytes));
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self
            .send(reqwest::Method::HEAD, &url, None, None, Some("push"))
            .await?;
        if response.status().is_success() {
            return Ok(digest);
        }
        let url = format!("{}/blobs/uploads/", self.base);
        let response = self
            .send(reqwest::Method::POST, &url, None, None, Some("push"))
            .await?;
        let response = expect_success(response, &url).await?;
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| RegistryError::Status {
                url: url.clone(),
                status: response.status().as_u16(),
                detail: ": no Location for the upload".into(),
            })?;
        let upload = response
            .url()
            .join(location)
            .map_err(|error| RegistryError::Status {
                url: url.clone(),
                status: 202,
                detail: format!(": an upload Location that is not a URL ({error})"),
            })?;
        let mut upload = upload;
        upload.query_pairs_mut().append_pair("digest", &digest);
        let upload = upload.to_string();
        let response = self
            .send(
                reqwest::Method::PUT,
                &upload,
                None,
                Some(("application/octet-stream", bytes.to_vec())),
                Some("push"),
            )
            .await?;
        expect_success(response, &upload).await?;
        Ok(digest)
    }

    /// PUTs a manifest under `reference` (a tag); its digest.
    pub(crate) async fn put_manifest(
        &self,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<String, RegistryError> {
        let digest = format!("sha256:{}", crate::digest::sha256_hex(&bytes));
        let url = format!("{}/manifests/{reference}", self.base);
        let response = self
            .send(
                reqwest::Method::PUT,
                &url,
                None,
                Some((media_type, bytes)),
                Some("push"),
            )
            .await?;
        expect_success(response, &url).await?;
        Ok(digest)
    }

    /// Sends a request, authenticating once if the registry asks (a bearer token from the
    /// realm it names, or basic credentials).
    async fn send(
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
        let cached = self
            .authorization
            .lock()
            .ok()
            .and_then(|value| value.clone());
        let response = request(cached)
            .send()
            .await
            .map_err(|error| transport(url, &error))?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
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
            .map_err(|error| transport(url, &error))
    }

    /// The `Authorization` value that answers `challenge`.
    async fn authenticate(
        &self,
        challenge: &str,
        url: &str,
        push: Option<&str>,
    ) -> Result<HeaderValue, RegistryError> {
        let denied = |why: String| RegistryError::Status {
            url: url.to_owned(),
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
                    "the registry wants credentials: `docker login` it, or set {} and {}",
                    super::credentials::USERNAME_VARIABLE,
                    super::credentials::PASSWORD_VARIABLE
                ))
            })?;
            return HeaderValue::from_str(&value)
                .map_err(|_| denied("the credentials are not valid in a header".into()));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(denied(format!(
                "the registry asks for `{scheme}` authentication, which is not supported"
            )));
        }
        let realm = parameters
            .iter()
            .find(|(key, _)| key == "realm")
            .map(|(_, value)| value.clone())
            .ok_or_else(|| denied("the registry's token challenge names no realm".into()))?;
        let mut token_url = reqwest::Url::parse(&realm)
            .map_err(|_| denied(format!("the token realm '{realm}' is not a URL")))?;
        let loopback = token_url
            .host_str()
            .is_some_and(super::reference::is_loopback_host);
        if token_url.scheme() != "https" && !(token_url.scheme() == "http" && loopback) {
            return Err(denied(format!(
                "the token realm {realm} is not https; no credentials are sent to it"
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
        let token_text = token_url.to_string();
        let response = request
            .send()
            .await
            .map_err(|error| transport(&token_text, &error))?;
        let response = expect_success(response, &token_text).await?;
        let body = read_capped(response, MAX_TOKEN_BYTES, "the token response", "").await?;
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| denied(format!("{token_text} answered something other than JSON")))?;
        let token = answer
            .get("token")
            .or_else(|| answer.get("access_token"))
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| denied(format!("{token_text} answered no token")))?;
        HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| denied("the token is not valid in a header".into()))
    }
}

/// `key="value"` pairs of a `WWW-Authenticate` challenge.
fn challenge_parameters(text: &str) -> Vec<(String, String)> {
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

fn transport(url: &str, error: &reqwest::Error) -> RegistryError {
    // reqwest's own text is "error sending request"; the cause says what happened.
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
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
        url: url.to_owned(),
        message,
    }
}

/// The response if it is a success; else the registry's error, quoted.
async fn expect_success(
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
                    match (code, message) {
                        (Some(code), Some(message)) => Some(format!("{code}: {message}")),
                        (Some(text), None) | (None, Some(text)) => Some(text.to_owned()),
                        _ => None,
                    }
                })
                .collect();
            (!texts.is_empty()).then(|| format!(" ({})", texts.join("; ")))
        })
        .unwrap_or_default();
    Err(RegistryError::Status {
        url: url.to_owned(),
        status,
        detail,
    })
}

/// Reads a body of at most `limit` bytes (refusing a larger `Content-Length` before reading).
async fn read_capped(
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
    let url = response.url().to_string();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| transport(&url, &error))?
    {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(too_large((body.len() + chunk.len()) as u64));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-line HTTP server on loopback: `answer(request head)` is the whole response; every
    /// request head is kept.
    async fn server(
        answer: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1
                {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let response = answer(&head);
                if let Ok(mut seen) = kept.lock() {
                    seen.push(head);
                }
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn credentials_never_follow_a_redirect_to_another_host_and_http_only_to_loopback() {
        let (blob_port, blob_seen) = server(|_| {
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".into()
        })
        .await;
        let (registry_port, registry_seen) = server(move |head| {
            if !head.contains("authorization:") {
                return "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\n\
                        Content-Length: 0\r\nConnection: close\r\n\r\n"
                    .into();
            }
            let target = if head.starts_with("get /v2/acme/away/") {
                "http://registry.example/blob".to_owned()
            } else {
                format!("http://localhost:{blob_port}/blob")
            };
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            )
        })
        .await;
        let options = super::ClientOptions::default()
            .plain_http(true)
            .credentials(super::Credentials::new("user", "hunter2"));
        let digest = format!("sha256:{}", crate::digest::sha256_hex(b"hello"));
        let reference =
            super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/x:1")).expect("ref");
        let client = super::RegistryClient::new(&reference, &options).expect("client");
        let blob = client
            .blob(&digest, 100, "the blob", "")
            .await
            .expect("blob");
        assert_eq!(blob, b"hello");
        let to_registry = registry_seen.lock().expect("seen").join("");
        assert!(
            to_registry.contains("authorization: basic "),
            "{to_registry}"
        );
        let to_blob_host = blob_seen.lock().expect("seen").join("");
        assert!(to_blob_host.contains("get /blob"), "{to_blob_host}");
        assert!(!to_blob_host.contains("authorization"), "{to_blob_host}");

        let reference = super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/away:1"))
            .expect("ref");
        let client = super::RegistryClient::new(&reference, &options).expect("client");
        let error = client
            .blob(&digest, 100, "the blob", "")
            .await
            .expect_err("refused");
        assert!(
            error.to_string().contains("only https is followed"),
            "{error}"
        );

        let remote = super::Reference::parse("registry.example/acme/x:1").expect("ref");
        let error = super::RegistryClient::new(&remote, &options)
            .err()
            .expect("refused");
        assert!(
            error.to_string().contains("plain HTTP is only for"),
            "{error}"
        );
    }

    #[test]
    fn challenges_are_read_with_quotes_and_commas() {
        let pairs = super::challenge_parameters(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(
            pairs,
            vec![
                ("realm".into(), "https://auth.example/token".into()),
                ("service".into(), "registry.example".into()),
                ("scope".into(), "repository:a/b:pull,push".into()),
            ]
        );
    }
}
