//! One HTTP GET through `wasi:http@0.3.0`, awaited (the plugin's other calls run meanwhile):
//! the host checks every request (redirects are new requests, checked again) against the
//! policy's `[http]` grants.

use url::{Position, Url};

/// The most bytes of a body read; the rest is left unread.
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// A response, its body read (up to [`MAX_BODY_BYTES`]).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The `Content-Type` header, empty if none.
    pub content_type: String,
    /// The `Location` header, if any.
    pub location: Option<String>,
    pub body: Vec<u8>,
    /// Whether the body went on past [`MAX_BODY_BYTES`].
    pub cut: bool,
}

/// Why a request got no response.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// The host refused it: its destination is not granted (`[http] allow`).
    NotGranted,
    /// The host refused it: the name resolves to an address that is not public.
    NotPublic,
    /// The deadline given passed before the response ended.
    TimedOut,
    /// The host ended it: the call's time limit passed.
    CallTimeLimit,
    /// Anything else (refused connection, unknown host, broken response…), described.
    Other(String),
}

/// When a fetch gives up waiting: an instant of the monotonic clock, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub u64);

impl Deadline {
    /// `milliseconds` from now.
    #[must_use]
    pub fn after(milliseconds: u64) -> Self {
        #[cfg(target_arch = "wasm32")]
        let now = wasip3::clocks::monotonic_clock::now();
        #[cfg(not(target_arch = "wasm32"))]
        let now: u64 = 0;
        Self(now.saturating_add(milliseconds.saturating_mul(1_000_000)))
    }
}

/// The `Host` part of `url` (`host[:port]`) and its path and query, as sent.
pub fn target(url: &Url) -> (&str, &str) {
    (
        &url[Position::BeforeHost..Position::AfterPort],
        &url[Position::BeforePath..Position::AfterQuery],
    )
}

/// GETs `url` with `user_agent`, without following redirects; [`Failure::TimedOut`] if the
/// response has not ended by `deadline`. Awaited over `wasi:http@0.3.0`: the plugin's other
/// calls run while it waits.
#[cfg(target_arch = "wasm32")]
pub async fn get(url: &Url, user_agent: &str, deadline: Deadline) -> Result<Response, Failure> {
    let request = wasi::get(url, user_agent);
    let timer = wasip3::clocks::monotonic_clock::wait_until(deadline.0);
    let mut request = std::pin::pin!(request);
    let mut timer = std::pin::pin!(timer);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(answer) = request.as_mut().poll(cx) {
            return std::task::Poll::Ready(answer);
        }
        timer.as_mut().poll(cx).map(|()| Err(Failure::TimedOut))
    })
    .await
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use super::{Failure, MAX_BODY_BYTES, Response, target};
    use url::Url;
    use wasip3::http::client;
    use wasip3::http::types::{ErrorCode, Fields, Method, Request, Scheme};
    use wasip3::wit_bindgen::rt::async_support::StreamResult;
    use wasip3::wit_future;

    fn failure(code: &ErrorCode) -> Failure {
        match code {
            ErrorCode::HttpRequestDenied => Failure::NotGranted,
            ErrorCode::DestinationIpProhibited => Failure::NotPublic,
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout => Failure::CallTimeLimit,
            ErrorCode::DnsError(_) => Failure::Other("the host name could not be resolved".into()),
            ErrorCode::ConnectionRefused => Failure::Other("the connection was refused".into()),
            ErrorCode::DestinationUnavailable | ErrorCode::DestinationNotFound => {
                Failure::Other("the host cannot be reached".into())
            }
            ErrorCode::ConnectionTerminated => {
                Failure::Other("the connection was closed before the response ended".into())
            }
            ErrorCode::TlsCertificateError | ErrorCode::TlsAlertReceived(_) => {
                Failure::Other(format!("the TLS handshake failed ({code:?})"))
            }
            other => Failure::Other(format!("{other:?}")),
        }
    }

    pub(super) async fn get(url: &Url, user_agent: &str) -> Result<Response, Failure> {
        let broken = |what: &str| Failure::Other(what.to_owned());
        let headers =
            Fields::from_list(&[("user-agent".to_owned(), user_agent.as_bytes().to_vec())])
                .map_err(|_| broken("the User-Agent is not a valid header value"))?;
        let (trailers_writer, trailers) = wit_future::new(|| Ok(None));
        drop(trailers_writer);
        let (request, _sent) = Request::new(headers, None, trailers, None);
        request
            .set_method(&Method::Get)
            .map_err(|()| broken("GET refused"))?;
        let scheme = match url.scheme() {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            other => return Err(broken(&format!("the scheme {other}: is not fetched"))),
        };
        let (authority, path) = target(url);
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| broken("the scheme is refused"))?;
        request
            .set_authority(Some(authority))
            .map_err(|()| broken("the host is not a valid authority"))?;
        request
            .set_path_with_query(Some(path))
            .map_err(|()| broken("the path is not valid"))?;
        let response = client::send(request).await.map_err(|e| failure(&e))?;
        let status = response.get_status_code();
        let header = |name: &str| -> Option<String> {
            response
                .get_headers()
                .get(name)
                .first()
                .map(|value| String::from_utf8_lossy(value).into_owned())
        };
        let (content_type, location) = (
            header("content-type").unwrap_or_default(),
            header("location"),
        );
        let (result_writer, result) = wit_future::new(|| Ok(()));
        drop(result_writer);
        let (mut stream, finished) = wasip3::http::types::Response::consume_body(response, result);
        let mut bytes = Vec::new();
        let mut cut = false;
        loop {
            let room = (MAX_BODY_BYTES + 1).saturating_sub(bytes.len());
            if room == 0 {
                // The rest is left unread: the stream and the response are dropped.
                bytes.truncate(MAX_BODY_BYTES);
                cut = true;
                break;
            }
            let (read, chunk) = stream.read(Vec::with_capacity(room.min(64 << 10))).await;
            bytes.extend_from_slice(&chunk);
            match read {
                StreamResult::Complete(_) => {}
                StreamResult::Dropped | StreamResult::Cancelled => break,
            }
        }
        // A body that broke off (a reset, a length that does not match) ends as a whole one
        // does: how it ended is the host's answer, here.
        if !cut && let Err(code) = finished.await {
            return Err(failure(&code));
        }
        Ok(Response {
            status,
            content_type,
            location,
            body: bytes,
            cut,
        })
    }
}

/// Natively there is no `wasi:http`: every request fails, saying so.
#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::unused_async)]
pub async fn get(_url: &Url, _user_agent: &str, _deadline: Deadline) -> Result<Response, Failure> {
    Err(Failure::Other(
        "HTTP needs wasi:http: run this tool as a plugin".into(),
    ))
}
