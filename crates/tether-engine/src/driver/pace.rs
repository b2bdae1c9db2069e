//! The two paces of code that tries again: [`Retries`] after a failure, [`Poll`] while
//! a condition does not hold yet. Each is the one place its kind of code sleeps; the
//! caller makes the attempt or the look and decides what it means.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Backoff;

/// The retries of one request or operation: after a failed attempt, [`Retries::again`]
/// waits the backoff's delay and says whether another attempt may be made.
///
/// ```
/// # use tether_engine::driver::{Backoff, Retries};
/// # async fn fetch() -> Result<u32, std::io::Error> { Ok(1) }
/// # async fn example() -> Result<u32, std::io::Error> {
/// let mut retries = Retries::new(Backoff::request(), 3);
/// loop {
///     match fetch().await {
///         Ok(value) => return Ok(value),
///         Err(error) if error.kind() == std::io::ErrorKind::TimedOut && retries.again().await => {}
///         Err(error) => return Err(error),
///     }
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Retries {
    backoff: Backoff,
    /// At most this many attempts in all, the first included; `None`: no limit.
    attempts: Option<u32>,
    /// The attempt being made, from 1.
    attempt: u32,
}

impl Retries {
    /// At most `attempts` attempts in all, the first included.
    pub fn new(backoff: Backoff, attempts: u32) -> Self {
        Retries {
            backoff,
            attempts: Some(attempts),
            attempt: 1,
        }
    }

    /// As many attempts as it takes, for a task that must start and is stopped from
    /// outside ([`Retries::again_unless`]).
    pub fn endless(backoff: Backoff) -> Self {
        Retries {
            backoff,
            attempts: None,
            attempt: 1,
        }
    }

    /// The number of the attempt being made, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether another attempt may follow the one being made.
    pub fn left(&self) -> bool {
        self.attempts.is_none_or(|attempts| self.attempt < attempts)
    }

    /// After a failed attempt: `false` at once when none is left; otherwise waits the
    /// backoff's delay and says `true`.
    pub async fn again(&mut self) -> bool {
        match self.next_delay() {
            Some(delay) => {
                tokio::time::sleep(delay).await;
                true
            }
            None => false,
        }
    }

    /// As [`Retries::again`], and `false` as soon as `stop` is cancelled.
    pub async fn again_unless(&mut self, stop: &CancellationToken) -> bool {
        tokio::select! {
            again = self.again() => again,
            () = stop.cancelled() => false,
        }
    }

    /// As [`Retries::again`], for blocking code (Git's fetch and push, which run off
    /// the async runtime).
    pub(crate) fn again_blocking(&mut self) -> bool {
        match self.next_delay() {
            Some(delay) => {
                std::thread::sleep(delay);
                true
            }
            None => false,
        }
    }

    /// After a success: the next failure is retried as the first was.
    pub fn succeeded(&mut self) {
        self.backoff.reset();
        self.attempt = 1;
    }

    fn next_delay(&mut self) -> Option<Duration> {
        if !self.left() {
            return None;
        }
        self.attempt += 1;
        Some(self.backoff.next_delay())
    }
}

/// The looks of a wait for a condition: one every `every`, until `timeout` has passed
/// since the wait began. The caller looks, and asks [`Poll::next`] before looking
/// again.
///
/// ```
/// # use std::time::Duration;
/// # use tether_engine::driver::Poll;
/// # async fn gone() -> bool { true }
/// # async fn example() -> Result<(), &'static str> {
/// let mut poll = Poll::new(Duration::from_millis(250), Duration::from_secs(60));
/// while !gone().await {
///     if !poll.next().await {
///         return Err("still there after a minute");
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Poll {
    every: Duration,
    deadline: Instant,
}

impl Poll {
    /// A wait beginning now.
    pub fn new(every: Duration, timeout: Duration) -> Self {
        Poll {
            every,
            deadline: Instant::now() + timeout,
        }
    }

    /// `false` at once when the timeout has passed (the caller then reports what it
    /// last saw); otherwise waits until the next look and says `true`.
    pub async fn next(&mut self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        tokio::time::sleep(self.every).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn retries_stop_after_their_attempts_with_growing_delays() {
        let start = Instant::now();
        let mut retries = Retries::new(
            Backoff::new(Duration::from_secs(1), Duration::from_secs(4)),
            4,
        );
        let mut waits = Vec::new();
        while retries.again().await {
            waits.push((Instant::now() - start).as_secs_f64());
        }
        assert_eq!(
            retries.attempt(),
            4,
            "three retries after the first attempt"
        );
        let nominal = [1.0, 3.0, 7.0];
        assert_eq!(waits.len(), nominal.len());
        for (at, expected) in waits.iter().zip(nominal) {
            assert!((expected * 0.8..=expected * 1.2).contains(at), "{waits:?}");
        }
        let before = Instant::now();
        assert!(!retries.again().await, "no attempt left");
        assert_eq!(Instant::now(), before, "and no wait for nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn endless_retries_end_when_stopped_and_start_over_after_a_success() {
        let stop = CancellationToken::new();
        let mut retries = Retries::endless(Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(30),
        ));
        for _ in 0..20 {
            assert!(retries.again_unless(&stop).await);
        }
        assert_eq!(retries.attempt(), 21);
        retries.succeeded();
        assert_eq!(retries.attempt(), 1);
        let start = Instant::now();
        assert!(retries.again_unless(&stop).await);
        assert!(
            Instant::now() - start <= Duration::from_millis(1200),
            "from the first delay again"
        );
        let cancel = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let start = Instant::now();
        assert!(!retries.again_unless(&stop).await);
        assert_eq!(
            Instant::now() - start,
            Duration::from_millis(300),
            "stopped mid-wait"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_poll_looks_every_interval_until_its_timeout() {
        let start = Instant::now();
        let mut poll = Poll::new(Duration::from_millis(250), Duration::from_secs(1));
        let mut looks = vec![0];
        while poll.next().await {
            looks.push((Instant::now() - start).as_millis());
        }
        assert_eq!(
            looks,
            [0, 250, 500, 750, 1000],
            "the look at the timeout is the last"
        );
        assert_eq!(Instant::now() - start, Duration::from_secs(1));
    }
}
