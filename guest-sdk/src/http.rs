//! Outgoing HTTP from a tool, through `wasi:http@0.3.0`: one line to await a response, while
//! the plugin's other calls run.
//!
//! ```no_run
//! # async fn weather() -> Result<String, llm_worker_guest::http::HttpError> {
//! let response = llm_worker_guest::http::get("https://api.example.com/weather?city=Oslo").await?;
//! let text = response.text()?.to_owned();
//! # Ok(text) }
//! ```
//!
//! The host sends a request only if the plugin's policy grants its destination (`[http]
//! allow`), within the call's time limit; it adds the secret headers the operator configured.
//! A request the policy does not allow fails with [`HttpError::Denied`]. Natively (in unit
//! tests) there is no host, and every request fails with [`HttpError::Unsupported`].

/// Most bytes of a response body read by default: 8 MiB (see
/// [`Request::max_response_bytes`]).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 << 20;

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The URL is not an absolute `http` or `https` URL.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// A header name or value is not allowed.
    #[error("invalid header: {0}")]
    InvalidHeader(String),
    /// The host refused to send it: the plugin's policy does not allow its destination.
    #[error("the host refused the request: {0}")]
    Denied(String),
    /// It was sent, and failed: no connection, a timeout, a broken response.
    #[error("the request failed: {0}")]
    Failed(String),
    /// The response body was larger than [`Request::max_response_bytes`].
    #[error("the response body is over {0} bytes")]
    TooLarge(usize),
    /// No plugin host to send it (a native build, as in unit tests).
    #[error("there is no plugin host to send HTTP requests (a native build)")]
    Unsupported,
}

/// A response, its body read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code, such as 200.
    pub status: u16,
    /// The headers, names in lower case, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of the header `name` (any case), if it is text.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    /// The body as text.
    ///
    /// # Errors
    /// [`HttpError::Failed`] when it is not UTF-8.
    pub fn text(&self) -> Result<&str, HttpError> {
        std::str::from_utf8(&self.body)
            .map_err(|error| HttpError::Failed(format!("the body is not UTF-8 text: {error}")))
    }

    /// The body as JSON.
    ///
    /// # Errors
    /// [`HttpError::Failed`] with serde's message when it is not a `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|error| {
            HttpError::Failed(format!("the body is not the JSON expected: {error}"))
        })
    }

    /// Whether the status is 2xx.
    #[must_use]
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A request to send: `Request::get(url)`, then [`send`](Request::send).
#[derive(Debug, Clone)]
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    max_response_bytes: usize,
}

/// A `GET` of `url`, sent.
///
/// # Errors
/// See [`Request::send`].
pub async fn get(url: &str) -> Result<Response, HttpError> {
    Request::get(url).send().await
}

impl Request {
    /// A request of `method` (such as `"PUT"`) to `url`.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// A `GET` of `url`.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` to `url`.
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with its content type.
    ///
    /// # Errors
    /// [`HttpError::InvalidHeader`] never; serde's error as [`HttpError::Failed`].
    pub fn json<T: serde::Serialize>(self, value: &T) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value)
            .map_err(|error| HttpError::Failed(format!("cannot write the body: {error}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sets the most bytes of the response body read (default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`]); a longer body fails with [`HttpError::TooLarge`].
    #[must_use]
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Sends the request and reads the whole response. The plugin's other calls run while it
    /// waits.
    ///
    /// # Errors
    /// [`HttpError`]: a bad URL or header, a destination the policy does not allow, a failed
    /// connection or response, a body over the limit.
    pub async fn send(self) -> Result<Response, HttpError> {
        let url = Url::parse(&self.url)?;
        #[cfg(target_arch = "wasm32")]
        {
            let (https, authority, path_with_query) =
                (url.https, url.authority.to_owned(), url.path_with_query);
            wasi::send(&self, https, &authority, &path_with_query).await
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = url;
            Err(HttpError::Unsupported)
        }
    }
}

/// An absolute URL, split as `wasi:http` takes it.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Url<'a> {
    https: bool,
    authority: &'a str,
    path_with_query: String,
}

impl<'a> Url<'a> {
    fn parse(url: &'a str) -> Result<Self, HttpError> {
        let invalid = |why: &str| HttpError::InvalidUrl(format!("{url:?}: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("give an absolute URL, such as https://example.com/"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(invalid("the scheme must be http or https")),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() || authority.contains('@') {
            return Err(invalid("it needs a host (and no user name)"));
        }
        let path = path.split('#').next().unwrap_or_default();
        // `https://host` and `https://host?q` have the path `/`.
        let path_with_query = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        Ok(Self {
            https,
            authority,
            path_with_query,
        })
    }
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use super::{HttpError, Request, Response};
    use wasip3::http::client;
    use wasip3::http::types::{ErrorCode, Fields, Method, Request as WasiRequest, Scheme};
    use wasip3::wit_bindgen::rt::async_support::StreamResult;
    use wasip3::{wit_future, wit_stream};

    pub(super) async fn send(
        request: &Request,
        https: bool,
        authority: &str,
        path_with_query: &str,
    ) -> Result<Response, HttpError> {
        let entries: Vec<(String, Vec<u8>)> = request
            .headers
            .iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
            .collect();
        let headers = Fields::from_list(&entries)
            .map_err(|error| HttpError::InvalidHeader(format!("{error:?}")))?;
        let (trailers_writer, trailers) = wit_future::new(|| Ok(None));
        drop(trailers_writer);
        let contents = if request.body.is_empty() {
            None
        } else {
            let (mut writer, reader) = wit_stream::new();
            let body = request.body.clone();
            wasip3::wit_bindgen::spawn_local(async move {
                let _ = writer.write_all(body).await;
            });
            Some(reader)
        };
        let (outgoing, _sent) = WasiRequest::new(headers, contents, trailers, None);
        let method = match request.method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            _ => Method::Other(request.method.clone()),
        };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{what} {:?}", request.url));
        outgoing
            .set_method(&method)
            .map_err(|()| HttpError::Failed(format!("invalid method {:?}", request.method)))?;
        let scheme = if https { Scheme::Https } else { Scheme::Http };
        outgoing
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("invalid scheme in"))?;
        outgoing
            .set_authority(Some(authority))
            .map_err(|()| invalid("invalid host in"))?;
        outgoing
            .set_path_with_query(Some(path_with_query))
            .map_err(|()| invalid("invalid path in"))?;
        let response = client::send(outgoing).await.map_err(error)?;
        let status = response.get_status_code();
        let headers = response.get_headers().copy_all();
        let (result_writer, result) = wit_future::new(|| Ok(()));
        drop(result_writer);
        let (mut body_stream, finished) =
            wasip3::http::types::Response::consume_body(response, result);
        let mut body = Vec::new();
        loop {
            let room = request
                .max_response_bytes
                .saturating_add(1)
                .saturating_sub(body.len())
                .clamp(1, 64 << 10);
            let (read, chunk) = body_stream.read(Vec::with_capacity(room)).await;
            body.extend_from_slice(&chunk);
            if body.len() > request.max_response_bytes {
                return Err(HttpError::TooLarge(request.max_response_bytes));
            }
            match read {
                StreamResult::Complete(_) => {}
                StreamResult::Dropped | StreamResult::Cancelled => break,
            }
        }
        // The body ends the same way whether it was whole or broke off (a reset, a length
        // that does not match): how it ended is the host's answer here.
        if let Err(code) = finished.await {
            return Err(error(code));
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    fn error(code: ErrorCode) -> HttpError {
        match code {
            ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => {
                HttpError::Denied(format!("{code:?}"))
            }
            other => HttpError::Failed(format!("{other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_as_wasi_http_takes_them() {
        let url = Url::parse("https://api.example.com:8443/a/b?c=d#frag").expect("valid");
        assert!(url.https);
        assert_eq!(url.authority, "api.example.com:8443");
        assert_eq!(url.path_with_query, "/a/b?c=d");
        let bare = Url::parse("http://127.0.0.1:8080").expect("valid");
        assert!(!bare.https);
        assert_eq!(bare.path_with_query, "/");
        assert_eq!(
            Url::parse("http://h?q=1").expect("valid").path_with_query,
            "/?q=1"
        );
        for bad in [
            "ftp://x/",
            "example.com/x",
            "https:///x",
            "https://user@host/",
        ] {
            assert!(
                matches!(Url::parse(bad), Err(HttpError::InvalidUrl(_))),
                "{bad} was taken"
            );
        }
    }

    #[test]
    fn natively_there_is_no_host_to_send_it() {
        let sent = crate::block_on(get("https://example.com/"));
        assert_eq!(sent, Err(HttpError::Unsupported));
    }
}
