//! A request body that must arrive in time: read with no time limit, a client trickling one
//! byte at a time would hold its connection (and a place among the server's connections) for
//! as long as it liked.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};

/// `B`, failing once it has taken longer than its limit to arrive.
pub(super) struct InTime<B> {
    body: Pin<Box<B>>,
    /// Started when the request was received (its headers read).
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl<B> InTime<B> {
    pub(super) fn new(body: B, limit: Duration) -> Self {
        Self {
            body: Box::pin(body),
            deadline: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }
}

/// Why a body could not be read.
#[derive(Debug)]
pub(super) enum BodyError<E> {
    Body(E),
    Late(Duration),
}

impl<E: std::fmt::Display> std::fmt::Display for BodyError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Body(error) => error.fmt(f),
            Self::Late(limit) => write!(
                f,
                "the request's body did not arrive within {}s of its headers",
                limit.as_secs_f64()
            ),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for BodyError<E> {}

impl<B: Body> Body for InTime<B> {
    type Data = B::Data;
    type Error = BodyError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyError::Late(this.limit))));
        }
        this.body
            .as_mut()
            .poll_frame(cx)
            .map(|frame| frame.map(|frame| frame.map_err(BodyError::Body)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
