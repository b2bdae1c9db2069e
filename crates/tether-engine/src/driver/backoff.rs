//! Exponential backoff with jitter, the one pace of retries.

use std::time::Duration;

/// Exponential backoff with jitter: each delay doubles up to a cap, and is spread by
/// ±20% so that many clients retrying at once do not stay in step.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

/// How far a delay is spread around its nominal value.
const JITTER: f64 = 0.2;

impl Backoff {
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The same delay each time (still spread by the jitter).
    pub const fn fixed(delay: Duration) -> Self {
        Backoff::new(delay, delay)
    }

    /// Retrying one request or operation in place (an apply, a fetch, a push): short
    /// delays, a few seconds at most.
    pub const fn request() -> Self {
        Backoff::new(Duration::from_millis(250), Duration::from_secs(5))
    }

    /// Retrying a failed pass of a loop (a sink that is down, a remote that refuses):
    /// from half a second up to half a minute, so that recovery is noticed quickly.
    pub const fn pass() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(30))
    }

    /// The delay before the next retry; each call doubles the one after, up to the cap.
    pub(super) fn next_delay(&mut self) -> Duration {
        let nominal = self.next;
        self.next = (self.next * 2).min(self.max);
        nominal.mul_f64(1.0 - JITTER + 2.0 * JITTER * fastrand::f64())
    }

    /// After a success: the next failure starts from the initial delay again.
    pub(super) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_with_bounded_jitter() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
        for nominal in [1.0, 2.0, 4.0, 8.0, 8.0, 8.0] {
            let delay = backoff.next_delay().as_secs_f64();
            assert!(
                (nominal * 0.8..=nominal * 1.2).contains(&delay),
                "{delay} is not {nominal} ± 20%"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(1200));
    }
}
