//! A plugin's stdout and stderr: bounded in-memory buffers, drained to the host's log (tagged
//! with the plugin's name) after every call, and quoted in trap messages.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::events::{CallReports, LogLevel};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much of a stream is kept between two drains; older bytes are dropped (and counted).
pub(crate) const CAPTURE_BYTES: usize = 16 << 10;

#[derive(Default)]
struct Captured {
    bytes: VecDeque<u8>,
    dropped: u64,
}

/// One captured stream. Clones share the buffer. Writes never fail and never block: a plugin
/// that floods its output loses the oldest bytes, not the host's memory.
#[derive(Clone, Default)]
pub(crate) struct CapturedOutput {
    inner: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    captured: Mutex<Captured>,
    /// Whether `captured` holds anything: most calls write nothing, and draining after each of
    /// them then costs one atomic load instead of a lock.
    written: AtomicBool,
}

impl CapturedOutput {
    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.inner
            .captured
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn append(&self, data: &[u8]) {
        let mut captured = self.lock();
        let keep = &data[data.len().saturating_sub(CAPTURE_BYTES)..];
        captured.dropped += (data.len() - keep.len()) as u64;
        let overflow = (captured.bytes.len() + keep.len()).saturating_sub(CAPTURE_BYTES);
        captured.dropped += overflow as u64;
        captured.bytes.drain(..overflow);
        captured.bytes.extend(keep);
        self.inner.written.store(true, Ordering::Release);
    }

    /// Takes what was written since the last drain, and how many bytes were dropped.
    pub(crate) fn drain(&self) -> (String, u64) {
        if !self.inner.written.load(Ordering::Acquire) {
            return (String::new(), 0);
        }
        let mut captured = self.lock();
        self.inner.written.store(false, Ordering::Relaxed);
        let bytes: Vec<u8> = captured.bytes.drain(..).collect();
        let dropped = std::mem::take(&mut captured.dropped);
        (String::from_utf8_lossy(&bytes).into_owned(), dropped)
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(1 << 20)
    }
}

#[async_trait::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A plugin instance's stdout and stderr.
#[derive(Clone, Default)]
pub(crate) struct PluginOutput {
    pub(crate) stdout: CapturedOutput,
    pub(crate) stderr: CapturedOutput,
}

impl PluginOutput {
    /// Passes what the plugin wrote during a call to that call's reports, one log message per
    /// line (stdout at `info`, stderr at `warn`): the same bounds as the plugin's own log
    /// messages (at most [`crate::events::MAX_LOGS_PER_CALL`] per call, each cut to its size
    /// cap, then one message saying how many were dropped). Returns the stderr text, for
    /// quoting in an error.
    pub(crate) fn drain_into(&self, reports: &mut CallReports) -> String {
        let (stdout, dropped_out) = self.stdout.drain();
        let (stderr, dropped_err) = self.stderr.drain();
        for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
            reports.log(LogLevel::Info, format!("stdout: {line}"));
        }
        for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
            reports.log(LogLevel::Warn, format!("stderr: {line}"));
        }
        if dropped_out + dropped_err > 0 {
            reports.log(
                LogLevel::Warn,
                format!(
                    "dropped {dropped_out} bytes of stdout and {dropped_err} of stderr over the \
                     {CAPTURE_BYTES}-byte buffers"
                ),
            );
        }
        stderr
    }
}

/// The end of a plugin's stderr, for an error message: the last few lines, at most 400 chars.
pub(crate) fn stderr_tail(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        return None;
    }
    let start = tail.ceil_char_boundary(tail.len().saturating_sub(400));
    // Shown to people (a terminal, a client's log): nothing in it may act on their terminal.
    Some(llm_worker_rules::tool::Visible(&tail[start..]).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_output_keeps_the_newest_bytes() {
        let out = CapturedOutput::default();
        out.append(b"hello ");
        out.append(&vec![b'x'; CAPTURE_BYTES]);
        out.append(b"end");
        let (text, dropped) = out.drain();
        assert_eq!(text.len(), CAPTURE_BYTES);
        assert!(text.ends_with("xxend"));
        assert_eq!(dropped, 6 + 3);
        assert_eq!(out.drain(), (String::new(), 0));
    }

    #[test]
    fn stderr_tails_are_short() {
        assert_eq!(stderr_tail("\n\n"), None);
        assert_eq!(stderr_tail("a\nb\nc\nd\n").as_deref(), Some("b | c | d"));
        assert!(stderr_tail(&"é".repeat(1000)).is_some_and(|t| t.len() <= 400));
        assert_eq!(
            stderr_tail("panicked\n\u{1b}]8;;https://x\u{7}link\u{1b}[2J").as_deref(),
            Some("panicked | \\u{1b}]8;;https://x\\u{7}link\\u{1b}[2J")
        );
    }
}
