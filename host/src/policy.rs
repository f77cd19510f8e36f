//! [`Limits`]: the resources one plugin instance may use, with safe defaults.

use std::time::Duration;

/// The resources one plugin instance may use. Every limit applies per instance (per session);
/// hitting one fails that call with an error naming the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Linear memory of one instance, in bytes (all its memories together). Default 64 MiB.
    pub memory_bytes: usize,
    /// Wall-clock time of one call (and of creating an instance). Default 10 s.
    pub call_timeout: Duration,
    /// Largest input JSON accepted, in bytes. Default 1 MiB.
    pub max_input_bytes: usize,
    /// Largest output returned, in bytes. Default 1 MiB.
    pub max_output_bytes: usize,
    /// Consecutive failed calls (trap, timeout, limit) after which the instance is disabled.
    /// Default 5.
    pub max_consecutive_failures: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            call_timeout: Duration::from_secs(10),
            max_input_bytes: 1 << 20,
            max_output_bytes: 1 << 20,
            max_consecutive_failures: 5,
        }
    }
}

impl Limits {
    /// Sets the memory limit in bytes.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets the time limit of one call.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the largest input in bytes.
    pub fn max_input_bytes(mut self, bytes: usize) -> Self {
        self.max_input_bytes = bytes;
        self
    }

    /// Sets the largest output in bytes.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets how many consecutive failures disable an instance.
    pub fn max_consecutive_failures(mut self, failures: u32) -> Self {
        self.max_consecutive_failures = failures;
        self
    }
}
