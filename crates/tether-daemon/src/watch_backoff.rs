//! How the daemon's own watches (the members' Leases, the Sources) wait to reconnect:
//! from 0.2 s, doubling, to 2 s. kube's default grows to 30 s, so after the API
//! server was away a minute a replica saw no Lease renewed (its own included) for up
//! to 30 s more, and counted the others gone meanwhile. A failing reconnection is one
//! request every 2 s per watch.

use std::time::Duration;

const FIRST: Duration = Duration::from_millis(200);
const MOST: Duration = Duration::from_secs(2);

/// The backoff of one watch (reset by kube once it reconnects).
pub(crate) struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    pub(crate) fn new() -> Self {
        WatchBackoff { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(MOST);
        Some(wait)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn waits_double_to_two_seconds_and_start_over_once_reset() {
        let mut backoff = WatchBackoff::new();
        let waits: Vec<u128> = backoff.by_ref().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 2000, 2000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(FIRST));
    }
}
