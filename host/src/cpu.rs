//! The CPU time a request's plugin code takes, into the counter the request's handler gives
//! (for the audit log, metrics and the per-identity quota). Plugin code runs in two places:
//! inside the polls of the request's own work (contracts 0.1.0–0.3.0: the thread CPU clock is
//! read around every poll, on whichever thread polls it), and in a contract 1.0.0 instance's
//! event loop, which charges each call the CPU time its code ran for (read when the loop
//! switches to and away from the call's code). Only measured for requests that something
//! observes or counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

tokio::task_local! {
    /// Where the work of the current request adds its CPU time, in nanoseconds.
    static SPENT: Arc<AtomicU64>;
}

/// The CPU time this thread has used, where the system says.
pub(crate) fn thread_cpu() -> Option<Duration> {
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

/// Runs `request` (a handler's future, or the part of a call that goes on as a task after its
/// request) with `spent` as the counter its work adds to.
#[cfg(feature = "mcp")]
pub(crate) fn counted<T>(
    spent: &Arc<AtomicU64>,
    request: impl Future<Output = T>,
) -> impl Future<Output = T> {
    SPENT.scope(Arc::clone(spent), request)
}

/// Runs `work` (synchronous: a session's registration, which starts its instances in tasks
/// of their own) with `spent` as the counter the work it starts adds to.
#[cfg(feature = "mcp-http")]
pub(crate) fn counted_now<T>(spent: &Arc<AtomicU64>, work: impl FnOnce() -> T) -> T {
    SPENT.sync_scope(Arc::clone(spent), work)
}

/// Runs `work` with `spent` (if any) as its counter: work started by a request that goes on
/// in a task of its own.
#[cfg(feature = "mcp")]
pub(crate) async fn counted_if<T>(
    spent: Option<Arc<AtomicU64>>,
    work: impl Future<Output = T>,
) -> T {
    match spent {
        Some(spent) => SPENT.scope(spent, work).await,
        None => work.await,
    }
}

/// The counter of the current request, if its CPU time is measured.
pub(crate) fn current() -> Option<Arc<AtomicU64>> {
    SPENT.try_with(Arc::clone).ok()
}

std::thread_local! {
    /// The CPU time this thread spent in [`excluded`] work, in nanoseconds (only ever grows).
    static EXCLUDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn nanos(took: Duration) -> u64 {
    u64::try_from(took.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `work`, leaving its CPU time out of the measurement ([`measured`]) of the work that
/// runs it: a caller polling a 1.0.0 instance's event loop runs other calls' code too, which the
/// loop charges to each call itself.
pub(crate) fn excluded<T>(work: impl FnOnce() -> T) -> T {
    let before = thread_cpu();
    let done = work();
    if let (Some(before), Some(after)) = (before, thread_cpu()) {
        let took = nanos(after.saturating_sub(before));
        EXCLUDED.with(|excluded| excluded.set(excluded.get().saturating_add(took)));
    }
    done
}

/// Adds `took` to `spent`.
pub(crate) fn charge(spent: &AtomicU64, took: Duration) {
    spent.fetch_add(nanos(took), Ordering::Relaxed);
}

/// Runs `work` (plugin code), adding the CPU time of its polls to the current request's
/// counter, if it has one (looked up when first polled).
#[cfg(feature = "mcp")]
pub(crate) fn measured<F: Future>(work: F) -> Measured<F> {
    Measured {
        work,
        spent: None,
        looked: false,
    }
}

#[cfg(feature = "mcp")]
pin_project_lite::pin_project! {
    /// The future of [`measured`]: a struct rather than an `async fn`, which would hold `work`
    /// twice (its argument, and the pinned copy it polls).
    pub(crate) struct Measured<F> {
        #[pin]
        work: F,
        spent: Option<Arc<AtomicU64>>,
        looked: bool,
    }
}

#[cfg(feature = "mcp")]
impl<F: Future> Future for Measured<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        if !*this.looked {
            *this.looked = true;
            *this.spent = current();
        }
        let Some(spent) = this.spent.as_deref() else {
            return this.work.poll(cx);
        };
        let excluded_before = EXCLUDED.with(std::cell::Cell::get);
        let before = thread_cpu();
        let polled = this.work.poll(cx);
        if let (Some(before), Some(after)) = (before, thread_cpu()) {
            let excluded = EXCLUDED
                .with(std::cell::Cell::get)
                .saturating_sub(excluded_before);
            let took =
                Duration::from_nanos(nanos(after.saturating_sub(before)).saturating_sub(excluded));
            charge(spent, took);
        }
        polled
    }
}

/// The CPU time counted in `spent`.
#[cfg(feature = "mcp")]
pub(crate) fn spent(spent: &AtomicU64) -> Duration {
    Duration::from_nanos(spent.load(Ordering::Relaxed))
}

#[cfg(all(test, feature = "mcp", unix))]
mod tests {
    use super::*;

    /// Spins until this thread has used `cpu` more CPU time.
    fn spin(cpu: Duration) {
        let start = thread_cpu().expect("a thread CPU clock");
        while thread_cpu().expect("a thread CPU clock") - start < cpu {
            std::hint::spin_loop();
        }
    }

    /// A caller polling a 1.0.0 instance's event loop runs other calls' code inside its own
    /// measured poll; the loop charges each call its own, so what the caller runs as
    /// `excluded` is not charged to it a second time. What it runs itself is.
    #[tokio::test]
    async fn work_excluded_from_a_measured_poll_is_not_charged_to_it() {
        let spent = Arc::new(AtomicU64::new(0));
        let work = measured(async {
            excluded(|| spin(Duration::from_millis(80)));
            spin(Duration::from_millis(20));
        });
        counted(&spent, work).await;
        let charged = super::spent(&spent);
        assert!(
            charged >= Duration::from_millis(20) && charged < Duration::from_millis(60),
            "{charged:?}"
        );
    }
}
