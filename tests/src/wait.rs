//! Waiting in a test: for a signal (a future), or for a condition polled until a deadline.
//! Never a sleep standing in for either: a sleep long enough for a slow machine makes every
//! run slow, and one short enough for a quick run fails on a busy machine.
//!
//! Both fail the test saying what it waited for. The deadline is far above what anything the
//! tests wait for takes, so that only a thing that never happens fails.

use std::future::Future;
use std::time::Duration;

/// How long a test waits for something before it fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How often [`until`] and [`eventually`] look again.
const POLL: Duration = Duration::from_millis(10);

/// Awaits `signal`; fails the test if it has not come within [`DEADLINE`].
///
/// # Panics
///
/// Past the deadline, naming `what` was awaited.
pub async fn within<T>(what: &str, signal: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, signal)
        .await
        .unwrap_or_else(|_| panic!("gave up after {DEADLINE:?} waiting for {what}"))
}

/// Returns once `condition` holds, looking again every few milliseconds; fails the test if it
/// still does not hold after [`DEADLINE`].
///
/// # Panics
///
/// Past the deadline, naming `what` was awaited.
pub async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    eventually(what, || std::future::ready(condition().then_some(()))).await;
}

/// Runs `attempt` until it gives `Some`, every few milliseconds, and returns what it gave;
/// fails the test if it has given only `None` after [`DEADLINE`].
///
/// # Panics
///
/// Past the deadline, naming `what` was awaited.
pub async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    within(what, async {
        loop {
            if let Some(value) = attempt().await {
                return value;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}
