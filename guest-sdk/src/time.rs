//! Waiting in a tool without holding up the plugin's other calls.

use std::time::Duration;

/// Waits `duration`. On contract 1.0.0 the plugin's other calls run meanwhile (a timer of
/// `wasi:clocks@0.3.0`); the wait counts against the call's time limit. Natively (in unit
/// tests) it blocks the thread.
pub async fn sleep(duration: Duration) {
    #[cfg(target_arch = "wasm32")]
    {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        wasip3::clocks::monotonic_clock::wait_for(nanos).await;
    }
    #[cfg(not(target_arch = "wasm32"))]
    std::thread::sleep(duration);
}
