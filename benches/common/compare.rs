//! What the benchmarks that compare tether with a peer tool share: timing, and
//! checking each run's exit code. A benchmark that uses it includes `common/mode.rs`
//! as `mode` too.

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

/// How many runs [`median`] takes: three, one in a smoke run.
pub fn runs() -> usize {
    crate::mode::size(3, 1)
}

/// What [`median`] gives, for a table's heading: "median of 3", or "one run".
pub fn median_of() -> String {
    match runs() {
        1 => "one run".to_string(),
        n => format!("median of {n}"),
    }
}

/// The median of [`runs`] runs of `f`.
pub fn median(mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs()).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}
