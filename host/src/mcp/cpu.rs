//! The CPU time a request's plugin code takes: the thread CPU clock read around every poll of
//! the request's work, on whichever thread polls it (a call's wasm runs inside those polls).
//! Measured only for requests that something observes or counts (the audit log, metrics, a
//! quota), into the counter the request's handler gives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

tokio::task_local! {
    /// Where the work of the current request adds its CPU time, in nanoseconds.
    static SPENT: Arc<AtomicU64>;
}

/// The CPU time this thread has used, where the system says.
fn thread_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Some(Duration::new(
            u64::try_from(now.tv_sec).ok()?,
            u32::try_from(now.tv_nsec).ok()?,
        ))
    }
    #[cfg(not(unix))]
    None
}

/// Runs `request` (a handler's future) with `spent` as the counter its work adds to.
pub(crate) async fn counted<T>(spent: &Arc<AtomicU64>, request: impl Future<Output = T>) -> T {
    SPENT.scope(Arc::clone(spent), request).await
}

/// Runs `work` (plugin code), adding the CPU time of its polls to the current request's
/// counter, if it has one.
pub(crate) async fn measured<T>(work: impl Future<Output = T>) -> T {
    let Ok(spent) = SPENT.try_with(Arc::clone) else {
        return work.await;
    };
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        let before = thread_cpu();
        let polled = work.as_mut().poll(cx);
        if let (Some(before), Some(after)) = (before, thread_cpu()) {
            let took = after.saturating_sub(before);
            spent.fetch_add(
                u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        polled
    })
    .await
}

/// The CPU time counted in `spent`.
pub(crate) fn spent(spent: &AtomicU64) -> Duration {
    Duration::from_nanos(spent.load(Ordering::Relaxed))
}
