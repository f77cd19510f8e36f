//! One HTTP GET through `wasi:http`: the host checks every request (redirects are new
//! requests, checked again) against the policy's `[http]` grants.

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
        let now = wasip2::clocks::monotonic_clock::now();
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
/// response has not ended by `deadline`.
#[cfg(target_arch = "wasm32")]
pub fn get(url: &Url, user_agent: &str, deadline: Deadline) -> Result<Response, Failure> {
    use wasip2::clocks::monotonic_clock;
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme, http_error_code,
    };
    use wasip2::io::poll;
    use wasip2::io::streams::StreamError;

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
    let broken = |what: &str| Failure::Other(what.to_owned());

    let headers = Fields::new();
    headers
        .append("user-agent", user_agent.as_bytes())
        .map_err(|_| broken("the User-Agent is not a valid header value"))?;
    let request = OutgoingRequest::new(headers);
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
    let body = request.body().map_err(|()| broken("no request body"))?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| failure(&e))?;
    OutgoingBody::finish(body, None).map_err(|e| failure(&e))?;
    let timer = monotonic_clock::subscribe_instant(deadline.0);
    {
        let answered = pending.subscribe();
        poll::poll(&[&answered, &timer]);
        if !answered.ready() {
            return Err(Failure::TimedOut);
        }
    }
    let response = pending
        .get()
        .ok_or_else(|| broken("no response"))?
        .map_err(|()| broken("the response was taken twice"))?
        .map_err(|e| failure(&e))?;
    let header = |name: &str| -> Option<String> {
        let values = response.headers().get(name);
        values
            .first()
            .map(|value| String::from_utf8_lossy(value).into_owned())
    };
    let (content_type, location) = (
        header("content-type").unwrap_or_default(),
        header("location"),
    );
    let status = response.status();
    let incoming = response
        .consume()
        .map_err(|()| broken("no response body"))?;
    let stream = incoming
        .stream()
        .map_err(|()| broken("no response body stream"))?;
    let mut bytes = Vec::new();
    let mut cut = false;
    loop {
        let room = (MAX_BODY_BYTES + 1).saturating_sub(bytes.len());
        if room == 0 {
            bytes.truncate(MAX_BODY_BYTES);
            cut = true;
            break;
        }
        {
            let readable = stream.subscribe();
            poll::poll(&[&readable, &timer]);
            if !readable.ready() {
                return Err(Failure::TimedOut);
            }
        }
        match stream.read(room.min(64 << 10) as u64) {
            Ok(chunk) => bytes.extend(chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(error)) => {
                return Err(http_error_code(&error).map_or_else(
                    || Failure::Other(error.to_debug_string()),
                    |code| failure(&code),
                ));
            }
        }
    }
    drop(stream);
    drop(incoming);
    Ok(Response {
        status,
        content_type,
        location,
        body: bytes,
        cut,
    })
}

/// Natively there is no `wasi:http`: every request fails, saying so.
#[cfg(not(target_arch = "wasm32"))]
pub fn get(_url: &Url, _user_agent: &str, _deadline: Deadline) -> Result<Response, Failure> {
    Err(Failure::Other(
        "HTTP needs wasi:http: run this tool as a plugin".into(),
    ))
}
