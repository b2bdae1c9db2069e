//! Every retry, every wait and every long-running loop of tether, paced in one place.
//!
//! - [`drive`] runs a long-running loop (`discover --watch`, event delivery, the
//!   daemon's reconcile loop): a pass runs at start and again when something changed,
//!   changes that come close together are gathered for one pass (debounce), a failed
//!   pass is retried with exponential backoff and jitter, and the loop stops at once
//!   on shutdown.
//! - [`Retries`] paces the retries of one request or operation with a [`Backoff`]
//!   (an apply, a fetch, a push, an inventory write, a task that could not start).
//! - [`Poll`] paces the looks of a wait for a condition, each a fixed time apart,
//!   until a timeout (objects ready, a pod gone, a rollout done): what kube-runtime's
//!   `await_condition` wrapped in `tokio::time::timeout` does for one object, for
//!   conditions over several objects and kinds.
//!
//! Nothing outside this module sleeps in a loop: `tests/architecture.rs` fails on a
//! loop elsewhere that calls a sleep, and [`Backoff`]'s delays are readable only here.

mod backoff;
mod pace;

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use backoff::Backoff;
pub use pace::{Poll, Retries};

/// Work that a [`drive`]n loop repeats.
pub trait Loop {
    type Output;
    type Error: std::error::Error + 'static;

    /// One pass. It sees the whole current state, never only what changed, so a pass
    /// that is skipped, merged with another or retried still converges.
    fn pass(&mut self) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;

    /// Resolves when something changed that the next pass should see (or after a
    /// while, for work that should be looked at now and then anyway).
    fn changed(&mut self) -> impl Future<Output = ()> + Send;
}

/// When passes run.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// What the logs call the loop.
    pub name: &'static str,
    /// After a change, how long to wait for more before the pass.
    pub debounce: Duration,
    /// How failed passes are retried.
    pub backoff: Backoff,
    /// On shutdown, how long a pass in progress may go on to finish (it is cancelled
    /// after that; zero cancels it at once).
    pub grace: Duration,
}

/// Runs `work` until `shutdown` is cancelled: a pass at once, then one after each
/// change (gathered over `schedule.debounce`). A failed pass is logged and retried
/// after the backoff delay; changes meanwhile are seen by that retry. Every outcome is
/// handed to `observe`, for the caller to report.
pub async fn drive<L: Loop>(
    work: &mut L,
    schedule: &Schedule,
    shutdown: &CancellationToken,
    mut observe: impl FnMut(&Result<L::Output, L::Error>),
) {
    let mut backoff = schedule.backoff.clone();
    // The failure last logged: the same failure again is a debug line, so that a
    // loop that fails for hours logs it once, not on each retry.
    let mut last_failure: Option<String> = None;
    loop {
        let outcome = {
            let pass = work.pass();
            tokio::pin!(pass);
            tokio::select! {
            outcome = &mut pass => outcome,
            () = shutdown.cancelled() => {
                // Let the pass finish (and be reported) if it does so within the grace.
                if let Ok(outcome) = tokio::time::timeout(schedule.grace, pass).await {
                    observe(&outcome);
                } else {
                    tracing::warn!(task = schedule.name, "shutdown: a pass in progress was cancelled");
                }
                return;
            }
            }
        };
        observe(&outcome);
        if shutdown.is_cancelled() {
            // The pass ended as the loop was stopped (it may have stopped because of
            // it): no retry, and nothing to say of one.
            return;
        }
        let wait = match &outcome {
            Ok(_) => {
                backoff.reset();
                last_failure = None;
                None
            }
            Err(error) => {
                let retry = backoff.next_delay();
                let error = tether_core::error_chain(error);
                if last_failure.as_ref() == Some(&error) {
                    tracing::debug!(task = schedule.name, %error, ?retry, "pass failed again; retrying");
                } else {
                    tracing::warn!(task = schedule.name, %error, ?retry, "pass failed; retrying");
                    last_failure = Some(error);
                }
                Some(retry)
            }
        };
        drop(outcome);
        let woken = async {
            match wait {
                Some(retry) => tokio::time::sleep(retry).await,
                None => {
                    work.changed().await;
                    // Gather what else changes in the window into the same pass.
                    tokio::time::sleep(schedule.debounce).await;
                }
            }
        };
        tokio::select! {
            () = woken => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Ctrl-C, or SIGTERM (how Kubernetes stops a pod), as a cancellation token.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        signal().await;
        cancel.cancel();
    });
    token
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::*;

    /// A loop whose passes fail a given number of times, recording when each ran. A
    /// pass sees every change made before it started, as a snapshot of a watch cache.
    struct Recorder {
        failures: usize,
        runs: Vec<Instant>,
        changes: watch::Receiver<u32>,
    }

    fn recorder(failures: usize) -> (Recorder, watch::Sender<u32>) {
        let (sender, changes) = watch::channel(0);
        let work = Recorder {
            failures,
            runs: Vec::new(),
            changes,
        };
        (work, sender)
    }

    #[derive(Debug, thiserror::Error)]
    #[error("remote down")]
    struct RemoteDown;

    impl Loop for Recorder {
        type Output = ();
        type Error = RemoteDown;

        async fn pass(&mut self) -> Result<(), RemoteDown> {
            self.runs.push(Instant::now());
            self.changes.borrow_and_update();
            if self.failures > 0 {
                self.failures -= 1;
                return Err(RemoteDown);
            }
            Ok(())
        }

        async fn changed(&mut self) {
            if self.changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn schedule(debounce: Duration) -> Schedule {
        Schedule {
            name: "test",
            debounce,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(4)),
            grace: Duration::ZERO,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failed_passes_are_retried_with_growing_delays_until_one_succeeds() {
        let (mut work, _changes) = recorder(4);
        let shutdown = CancellationToken::new();
        let start = Instant::now();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            stop.cancel();
        });
        let mut outcomes = Vec::new();
        drive(&mut work, &schedule(Duration::ZERO), &shutdown, |o| {
            outcomes.push(o.is_ok());
        })
        .await;
        assert_eq!(outcomes, [false, false, false, false, true]);
        let gaps: Vec<f64> = work
            .runs
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        for (gap, nominal) in gaps.iter().zip([1.0, 2.0, 4.0, 4.0]) {
            assert!(
                (nominal * 0.8..=nominal * 1.2).contains(gap),
                "retry after {gap}s, expected {nominal}s ± 20%: {gaps:?}"
            );
        }
        assert_eq!(work.runs[0], start, "the first pass runs at once");
        // After the success, nothing more runs without a change.
        assert_eq!(work.runs.len(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn changes_within_the_debounce_window_make_one_pass() {
        let (mut work, changes) = recorder(0);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let start = Instant::now();
        tokio::spawn(async move {
            // A burst of five changes 100 ms apart, then one more much later.
            tokio::time::sleep(Duration::from_secs(1)).await;
            for _ in 0..5 {
                changes.send_modify(|n| *n += 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
            changes.send_modify(|n| *n += 1);
            tokio::time::sleep(Duration::from_secs(10)).await;
            stop.cancel();
        });
        drive(
            &mut work,
            &schedule(Duration::from_secs(2)),
            &shutdown,
            |_| {},
        )
        .await;
        let at: Vec<u64> = work
            .runs
            .iter()
            .map(|t| (*t - start).as_millis() as u64)
            .collect();
        // At start; once for the burst (first change at 1 s + 2 s debounce); once for
        // the late change (at 11.5 s + 2 s).
        assert_eq!(at, [0, 3000, 13500]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_a_loop_that_waits_for_a_retry() {
        let (mut work, _changes) = recorder(usize::MAX);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let start = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            stop.cancel();
        });
        drive(&mut work, &schedule(Duration::ZERO), &shutdown, |_| {}).await;
        assert_eq!(start.elapsed(), Duration::from_millis(1500));
        assert_eq!(work.runs.len(), 2, "at start, and the first retry near 1 s");
    }
}
