//! What the library logs (`tracing`) while a future runs, captured for a test to check: that
//! something was looked at and what was concluded, where the result alone would be the same
//! had nothing been looked at.

use std::fmt::Write;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::instrument::WithSubscriber;

/// Runs `future` and returns its output with the messages logged while it was polled (at
/// every level, in order, as `LEVEL message`). What runs on other threads (a blocking task it
/// spawned) is not seen.
pub async fn logged<T>(future: impl Future<Output = T>) -> (T, Vec<String>) {
    let capture = Capture::default();
    let lines = Arc::clone(&capture.lines);
    let output = future.with_subscriber(capture).await;
    let lines = lines.lock().unwrap_or_else(PoisonError::into_inner).clone();
    (output, lines)
}

#[derive(Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
}

/// The `message` field of an event, as text.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(format!("{} ", event.metadata().level()));
        event.record(&mut message);
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.0);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}
