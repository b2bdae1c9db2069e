//! Timing for the benchmarks that compare tether with a peer tool.

use std::time::{Duration, Instant};

/// How long `f` takes.
pub fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// The median of three runs of `f`.
pub fn median(mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..3).map(|_| f()).collect();
    times.sort();
    times[1]
}
