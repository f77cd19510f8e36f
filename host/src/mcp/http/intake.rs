//! A request's body, read before rmcp parses it: within the body limit, weighed for what its
//! JSON will take once parsed, and counted against the memory the server lets requests hold.
//!
//! rmcp reads a body whole and parses it into `serde_json` values that live as long as the
//! request does (a standing `subscriptions/listen`, a call waiting on a question, a call that
//! goes on after its client left, for the client to resume its answer). Parsed, a megabyte of
//! small values takes up to a hundred times as much: so a body is refused when its parsed
//! weight would pass [`WEIGHT_PER_BODY_BYTE`] times the body limit (an `initialize`, whose
//! capabilities rmcp keeps for the session's life, past [`MAX_INITIALIZE_WEIGHT`]), and what
//! requests hold (their bodies as they arrive, then their weights) is counted per identity
//! and in all until both the request (its handler, however long rmcp keeps it) and its answer
//! have ended; past the budget a request is refused (503) instead of taking memory from
//! everyone.
//!
//! A handler may make its request hold more, for what its answer copies from what the server
//! keeps ([`RequestShare::charge`]: a task's result, sent again for each poll). A small request
//! may use a reserve past its client's part (an eighth more), so that a client whose tasks and
//! standing streams hold its part can still cancel them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use http_body_util::BodyExt;

use super::Body;
use super::body::{BodyError, InTime};
use crate::mcp::catalog::Caller;

/// How many bytes of memory a request's JSON may take once parsed, per byte of the body limit:
/// an array of small numbers takes about 16 times its text; of empty-keyed objects, about 100.
pub(super) const WEIGHT_PER_BODY_BYTE: usize = 16;

/// The share of the memory for requests one identity may hold: a quarter, so that one client
/// alone cannot starve the others (without authentication every client is one, and may hold
/// all of it).
const SHARES: usize = 4;

/// A request holding at most this much in all is small: it may use a reserve of an eighth of
/// its identity's part past the part, so that a client whose tasks and standing streams hold
/// its part can still cancel them (and answer their questions).
const SMALL_REQUEST: usize = 16 << 10;

/// The most an `initialize` request's JSON may take once parsed: rmcp keeps its capabilities,
/// client information and `_meta` for the session's life, outside any request.
pub(super) const MAX_INITIALIZE_WEIGHT: usize = 256 << 10;

/// The memory requests hold, in all and by identity.
#[derive(Debug)]
pub(super) struct Intake {
    /// Most bytes all requests may hold at once.
    total: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by: HashMap<Caller, usize>,
}

/// What one request holds; given back when dropped (with the request's answer).
#[derive(Debug)]
pub(super) struct Share {
    intake: Arc<Intake>,
    who: Caller,
    bytes: usize,
}

/// Why a share could not grow.
#[derive(Debug)]
enum Short {
    /// This request alone would hold more than an identity may: it never will.
    Never { part: usize },
    /// The identity holds its part already.
    Identity { held: usize, part: usize },
    /// All requests together hold the server's budget.
    Server { total: usize },
}

impl Intake {
    pub(super) fn new(total: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            held: Mutex::new(Held::default()),
        })
    }

    /// An empty share of `who`.
    pub(super) fn share(self: &Arc<Self>, who: Caller) -> Share {
        Share {
            intake: Arc::clone(self),
            who,
            bytes: 0,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Share {
    /// The most one identity's requests may hold: a quarter of the budget, or all of it when
    /// the server has no identities.
    fn part(&self) -> usize {
        match self.who {
            Caller(Some(_)) => self.intake.total / SHARES,
            Caller(None) => self.intake.total,
        }
    }

    /// Holds `more` bytes besides what this share holds, if its identity's part and the
    /// server's budget allow.
    fn grow(&mut self, more: usize) -> Result<(), Short> {
        let part = self.part();
        let mut held = self.intake.held();
        let mine = held.by.get(&self.who).copied().unwrap_or(0);
        let after = self.bytes.saturating_add(more);
        if after > part {
            return Err(Short::Never { part });
        }
        let reserve = if after <= SMALL_REQUEST { part / 8 } else { 0 };
        if mine.saturating_add(more) > part.saturating_add(reserve) {
            return Err(Short::Identity { held: mine, part });
        }
        if held.total.saturating_add(more) > self.intake.total {
            return Err(Short::Server {
                total: self.intake.total,
            });
        }
        held.total += more;
        *held.by.entry(self.who).or_default() += more;
        self.bytes += more;
        Ok(())
    }

    /// Gives back `less` bytes of what this share holds.
    fn release(&mut self, less: usize) {
        let less = less.min(self.bytes);
        let mut held = self.intake.held();
        held.total = held.total.saturating_sub(less);
        if let Some(mine) = held.by.get_mut(&self.who) {
            *mine = mine.saturating_sub(less);
            if *mine == 0 {
                held.by.remove(&self.who);
            }
        }
        self.bytes -= less;
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if self.bytes != 0 {
            self.release(self.bytes);
        }
    }
}

/// A response's body holding its request's share until it ends: let go as the last frame is
/// taken (before the client reads the end of a stream), or when the body is dropped.
pub(super) struct Holding<B> {
    body: std::pin::Pin<Box<B>>,
    share: Option<RequestShare>,
}

/// A request's share, held by its answer's body and by the request as rmcp hands it to the
/// handler (in its extensions, for as long as rmcp keeps the request): given back when both
/// are gone. A handler may make it hold more ([`charge`](Self::charge)).
#[derive(Debug, Clone)]
pub(super) struct RequestShare(Arc<Mutex<Share>>);

impl RequestShare {
    pub(super) fn new(share: Share) -> Self {
        Self(Arc::new(Mutex::new(share)))
    }

    /// Holds `bytes` more, for what the request's answer copies from what the server keeps (at
    /// most a whole part: a copy larger than a part is sent when the client's requests hold
    /// nothing else), if its client's part and the server's budget allow: else why not, for
    /// the client.
    pub(super) fn charge(&self, bytes: usize) -> Result<(), String> {
        let mut share = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bytes = bytes.min(share.part().saturating_sub(share.bytes));
        share.grow(bytes).map_err(|short| match short {
            Short::Never { part } | Short::Identity { part, .. } => format!(
                "this client's requests hold too much of the server's memory for this answer to \
                 copy {} KiB more (a client may hold {} KiB): ask again once some of its \
                 requests have ended",
                bytes.div_ceil(1024),
                part / 1024
            ),
            Short::Server { total } => format!(
                "the server's requests in progress hold all the memory it gives requests ({} \
                 KiB): ask again shortly",
                total / 1024
            ),
        })
    }
}

impl<B> Holding<B> {
    pub(super) fn new(body: B, share: RequestShare) -> Self {
        Self {
            body: Box::pin(body),
            share: Some(share),
        }
    }
}

impl<B: http_body::Body> http_body::Body for Holding<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = this.body.as_mut().poll_frame(cx);
        if matches!(frame, std::task::Poll::Ready(None)) || this.body.is_end_stream() {
            this.share = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The whole body of a request, at most `limit` bytes, held in `share` as it arrives and then
/// weighed: the body, or the answer refusing it.
pub(super) async fn read<B>(
    body: InTime<B>,
    declared: Option<u64>,
    limit: usize,
    share: &mut Share,
) -> Result<Bytes, Response<Body>>
where
    B: http_body::Body,
    B::Error: std::fmt::Display,
{
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large(limit));
    }
    let mut body = std::pin::pin!(body);
    let mut bytes = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(BodyError::Late(limit)) => return Err(late(limit)),
            Err(error) => {
                return Err(closing(
                    StatusCode::BAD_REQUEST,
                    &format!("the request's body could not be read: {error}"),
                ));
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let arrived = bytes::Buf::remaining(&data);
        if bytes.len().saturating_add(arrived) > limit {
            return Err(too_large(limit));
        }
        share.grow(arrived).map_err(busy)?;
        bytes::BufMut::put(&mut bytes, data);
    }
    let bytes = bytes.freeze();
    // What parsing will make of it, beyond the text already held.
    let weight = crate::json_weight::parsed_json_bytes(&bytes);
    if weight > MAX_INITIALIZE_WEIGHT && is_initialize(&bytes) {
        return Err(closing(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the initialize request's JSON would take about {} KiB of the server's memory \
                 once parsed, over {} KiB: its capabilities and _meta are kept for the \
                 session's life; send only what the protocol asks",
                weight / 1024,
                MAX_INITIALIZE_WEIGHT / 1024
            ),
        ));
    }
    let most = limit.saturating_mul(WEIGHT_PER_BODY_BYTE);
    if weight > most {
        return Err(closing(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request's JSON would take about {} KiB of the server's memory once parsed, \
                 over {} KiB ({WEIGHT_PER_BODY_BYTE} times the body limit): it is made of very \
                 many small values; send fewer, larger ones",
                weight / 1024,
                most / 1024
            ),
        ));
    }
    share
        .grow(weight.saturating_sub(bytes.len()))
        .map_err(busy)?;
    Ok(bytes)
}

/// Whether `bytes` is a JSON-RPC `initialize` request (read without keeping anything but its
/// method).
fn is_initialize(bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method<'_>>(bytes)
        .is_ok_and(|message| message.method.as_deref() == Some("initialize"))
}

/// The id and the method of the JSON-RPC request `bytes` holds, if it is one (read without
/// keeping anything else of it).
pub(super) fn request_head(bytes: &[u8]) -> Option<(rmcp::model::RequestId, String)> {
    #[derive(serde::Deserialize)]
    struct Request {
        id: Option<rmcp::model::RequestId>,
        method: Option<String>,
    }
    let request: Request = serde_json::from_slice(bytes).ok()?;
    Some((request.id?, request.method?))
}

/// `status` for the request `id`, saying `why`, as a JSON-RPC error of that id.
pub(super) fn refused_request(
    status: StatusCode,
    id: &rmcp::model::RequestId,
    why: &str,
) -> Response<Body> {
    let mut response = super::gate::refusal(status, why);
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32600, "message": why},
    });
    *response.body_mut() =
        http_body_util::BodyExt::boxed(http_body_util::Full::new(Bytes::from(body.to_string())));
    response
}

/// A refusal after which the connection closes: the client may still be sending the body.
fn closing(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = super::gate::refusal(status, message);
    response.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

fn too_large(limit: usize) -> Response<Body> {
    closing(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request's body is larger than this server's limit of {limit} bytes"),
    )
}

fn late(limit: std::time::Duration) -> Response<Body> {
    closing(
        StatusCode::REQUEST_TIMEOUT,
        &format!(
            "the request's body did not arrive within {}s of its headers",
            limit.as_secs_f64()
        ),
    )
}

/// 503, saying whose requests hold the memory, with a second to wait; 413 for a request that
/// alone would hold more than a client may.
fn busy(short: Short) -> Response<Body> {
    let message = match short {
        Short::Never { part } => {
            return closing(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the request would hold more of the server's memory once parsed than one \
                     client may ({} KiB): send a smaller one",
                    part / 1024
                ),
            );
        }
        Short::Identity { held, part } => format!(
            "this client's requests in progress hold {} KiB of the server's memory, the most one \
             client may ({} KiB): wait for some to end (a standing stream holds its request \
             until it closes), then retry",
            held / 1024,
            part / 1024
        ),
        Short::Server { total } => format!(
            "the server's requests in progress hold all the memory it gives requests ({} KiB): \
             retry shortly",
            total / 1024
        ),
    };
    let mut response = closing(StatusCode::SERVICE_UNAVAILABLE, &message);
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shares count per identity and in all, and give back what they held when dropped.
    #[test]
    fn shares_are_bounded_per_identity_and_in_all_and_given_back() {
        const K: usize = 1024;
        let intake = Intake::new(400 * K);
        let alice = Caller(Some([1; 16]));
        let bob = Caller(Some([2; 16]));
        let mut first = intake.share(alice);
        first.grow(60 * K).expect("within alice's part");
        let mut second = intake.share(alice);
        assert!(matches!(
            second.grow(50 * K),
            Err(Short::Identity { held, part }) if held == 60 * K && part == 100 * K
        ));
        assert!(matches!(
            intake.share(alice).grow(101 * K),
            Err(Short::Never { part }) if part == 100 * K
        ));
        // Without identities, one client may hold it all.
        let mut anyone = intake.share(Caller(None));
        anyone.grow(150 * K).expect("beyond a quarter");
        drop(anyone);
        second.grow(40 * K).expect("up to alice's part");
        // A small request may go past the part by an eighth of it, no further.
        let mut small = intake.share(alice);
        small.grow(12 * K).expect("within the reserve");
        assert!(matches!(
            intake.share(alice).grow(K),
            Err(Short::Identity { .. })
        ));
        drop(small);
        drop(first);
        second
            .grow(60 * K)
            .expect("what the first held is given back");
        let mut others: Vec<Share> = (0..3)
            .map(|n| {
                let mut share = intake.share(Caller(Some([10 + n; 16])));
                share.grow(100 * K).expect("each within its part");
                share
            })
            .collect();
        let mut last = intake.share(bob);
        assert!(matches!(last.grow(1), Err(Short::Server { total }) if total == 400 * K));
        others.pop();
        last.grow(100 * K).expect("room again");
    }
}
