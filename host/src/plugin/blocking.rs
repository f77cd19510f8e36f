//! Running a plugin future to completion from synchronous code (loading, and the factory that
//! creates an instance at registration), whatever runtime the caller is in.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

/// A small runtime of our own for callers that are not on a multi-threaded Tokio runtime.
/// WASI's host functions (clocks, polling) need Tokio's timers.
fn fallback_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("llm-worker-plugin-init")
            // Plugin calls nest deep futures (more so unoptimised): more than the default 2 MiB.
            .thread_stack_size(8 << 20)
            .enable_time()
            .build()
            // Without a runtime no plugin can run at all; this fails only if the OS refuses a
            // thread, which no caller could recover from either.
            .unwrap_or_else(|e| panic!("llm-worker: cannot start its Tokio runtime: {e}"))
    })
}

/// Runs `future` to completion and returns its output.
///
/// - On a multi-threaded Tokio runtime the current worker blocks in place (other tasks move to
///   other workers).
/// - On a current-thread Tokio runtime (which must not be blocked) the future runs on a
///   short-lived thread.
/// - Outside any runtime it runs on this thread.
pub(crate) fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(future))
        }
        Ok(_) => std::thread::scope(|scope| {
            match scope.spawn(|| fallback_runtime().block_on(future)).join() {
                Ok(output) => output,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }),
        Err(_) => fallback_runtime().block_on(future),
    }
}
