//! The benchmark harness shared by the benchmarks of the workspace: medians of repeated runs,
//! and how to print them. (Every table is a ratio between setups measured in one process,
//! which is all a noisy shared machine allows.)

use std::time::{Duration, Instant};

/// The median time of one iteration over 21 samples of `run(iterations)`, after a warm-up.
pub fn median(iterations: u32, mut run: impl FnMut(u32)) -> Duration {
    run(iterations.div_ceil(10));
    let mut samples: Vec<Duration> = (0..21)
        .map(|_| {
            let start = Instant::now();
            run(iterations);
            start.elapsed() / iterations
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

/// The `p` quantile (0.5: the median, 0.9: the 90th percentile) of `times`, which it sorts;
/// zero for no times.
pub fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort_unstable();
    let index = ((times.len() as f64 - 1.0) * p).round() as usize;
    times.get(index).copied().unwrap_or_default()
}

/// A duration in the unit that suits it.
pub fn show(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos < 10_000 {
        format!("{:.2} µs", nanos as f64 / 1000.0)
    } else if nanos < 10_000_000 {
        format!("{:.1} µs", nanos as f64 / 1000.0)
    } else {
        format!("{:.1} ms", nanos as f64 / 1_000_000.0)
    }
}

/// `a / b` as a ratio.
pub fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
}
