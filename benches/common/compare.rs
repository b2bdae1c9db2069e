//! What the benchmarks that compare tether with a peer tool share: timing, and
//! checking each run's exit code.

use std::process::Output;
use std::time::{Duration, Instant};

/// Panics with the program's standard error unless it exited with one of `allowed`.
pub fn check(output: &Output, allowed: &[i32], what: &str) {
    let code = output.status.code().unwrap_or(-1);
    assert!(
        allowed.contains(&code),
        "{what} exited {code}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

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
