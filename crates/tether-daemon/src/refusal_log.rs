//! Refused webhook requests in the log without a flood (pure: the time is passed in).
//! Anyone who can reach the endpoint can send refused requests as fast as the network
//! carries them; a line each would turn a flood of requests into a flood of logs. So
//! the first refusal of a kind (provider and outcome) is logged at once, with its
//! details; the ones after it are counted, and when the kind's window ends, one
//! summary line gives the count. The metric still counts each request.
//!
//! The summary is due when the window ends, not at the next refusal: a flood that
//! stopped would otherwise leave its count unsaid until the next refusal, which may
//! never come. The daemon asks for the windows that ended every few seconds
//! ([`FLUSH_EVERY`]). A window that ends with refusals counted opens the next one at
//! once (a flood that goes on gives one summary a window, never a full line again);
//! a window that ends with none closes, so that the next refusal, after a quiet
//! window, is logged at once again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a kind's refusals are counted before their summary.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// How often the daemon looks for windows that ended: a summary comes at most this
/// late.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// What was refused: the provider (as the path named it, `unknown` for a path that
/// names none) and the outcome, as the metric labels them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RefusalKind {
    pub provider: &'static str,
    pub outcome: &'static str,
}

impl RefusalKind {
    /// The outcome in words, for the summary line.
    pub(crate) fn reason(self) -> &'static str {
        match self.outcome {
            "unauthorized" => "bad or missing signature",
            "bad_request" => "bad request",
            "too_large" => "body too large",
            "disabled" => "webhooks are off (no secret)",
            "unknown_provider" => "no such provider",
            other => other,
        }
    }
}

/// What to do with one refusal's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The first of its kind since a quiet window: log it, with its details.
    LogNow,
    /// Counted for the kind's summary.
    Counted,
}

/// The refusals of one kind counted in a window that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    pub kind: RefusalKind,
    /// Refusals counted (not logged one by one) in the window.
    pub refused: u64,
    /// How long the window lasted (at least [`WINDOW`]; later when looked at late).
    pub over: Duration,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refused {} webhook{} in the last {} s: {} (provider {})",
            thousands(self.refused),
            if self.refused == 1 { "" } else { "s" },
            self.over.as_secs(),
            self.kind.reason(),
            self.kind.provider
        )
    }
}

/// Each kind's open window.
#[derive(Debug)]
pub(crate) struct RefusalLog {
    window: Duration,
    open: BTreeMap<RefusalKind, Window>,
}

#[derive(Debug)]
struct Window {
    since: Instant,
    refused: u64,
}

impl Default for RefusalLog {
    fn default() -> Self {
        RefusalLog::new(WINDOW)
    }
}

impl RefusalLog {
    pub(crate) fn new(window: Duration) -> Self {
        RefusalLog {
            window,
            open: BTreeMap::new(),
        }
    }

    /// One refusal of `kind` at `now`: whether to log it, and the summary of the
    /// kind's previous window if it ended before anyone asked for it.
    pub(crate) fn refused(
        &mut self,
        kind: RefusalKind,
        now: Instant,
    ) -> (Decision, Option<Summary>) {
        let summary = self.end_window(kind, now);
        match self.open.get_mut(&kind) {
            Some(window) => {
                window.refused += 1;
                (Decision::Counted, summary)
            }
            None => {
                self.open.insert(
                    kind,
                    Window {
                        since: now,
                        refused: 0,
                    },
                );
                (Decision::LogNow, summary)
            }
        }
    }

    /// The summaries of the windows that ended by `now`, in kind order.
    pub(crate) fn ended(&mut self, now: Instant) -> Vec<Summary> {
        let kinds: Vec<RefusalKind> = self.open.keys().copied().collect();
        kinds
            .into_iter()
            .filter_map(|kind| self.end_window(kind, now))
            .collect()
    }

    /// Every count not said yet, whether its window ended or not (at shutdown).
    pub(crate) fn drain(&mut self, now: Instant) -> Vec<Summary> {
        std::mem::take(&mut self.open)
            .into_iter()
            .filter(|(_, window)| window.refused > 0)
            .map(|(kind, window)| Summary {
                kind,
                refused: window.refused,
                over: now.saturating_duration_since(window.since),
            })
            .collect()
    }

    /// Ends `kind`'s window if it ended by `now`: a summary when it counted any
    /// (and the next window opens at once), none when it was quiet (and it closes).
    fn end_window(&mut self, kind: RefusalKind, now: Instant) -> Option<Summary> {
        let window = self.open.get_mut(&kind)?;
        let over = now.saturating_duration_since(window.since);
        if over < self.window {
            return None;
        }
        if window.refused == 0 {
            self.open.remove(&kind);
            return None;
        }
        let summary = Summary {
            kind,
            refused: window.refused,
            over,
        };
        *window = Window {
            since: now,
            refused: 0,
        };
        Some(summary)
    }
}

/// `4999` as `4,999`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAD_SIGNATURE: RefusalKind = RefusalKind {
        provider: "github",
        outcome: "unauthorized",
    };
    const TOO_LARGE: RefusalKind = RefusalKind {
        provider: "gitlab",
        outcome: "too_large",
    };

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    /// Feeds refusals (kind, milliseconds from the start), flushing every 5 s as the
    /// daemon does, and returns the lines written: the refusal's own, or a summary.
    fn lines(refusals: &[(RefusalKind, u64)], until: u64) -> Vec<String> {
        let start = Instant::now();
        let mut log = RefusalLog::default();
        let mut lines = Vec::new();
        let mut next_flush = 5_000;
        for &(kind, millis) in refusals {
            while next_flush <= millis {
                lines.extend(
                    log.ended(at(start, next_flush))
                        .iter()
                        .map(|s| s.to_string()),
                );
                next_flush += 5_000;
            }
            let (decision, summary) = log.refused(kind, at(start, millis));
            lines.extend(summary.map(|s| s.to_string()));
            if decision == Decision::LogNow {
                lines.push(format!("{} {} at {millis} ms", kind.provider, kind.outcome));
            }
        }
        while next_flush <= until {
            lines.extend(
                log.ended(at(start, next_flush))
                    .iter()
                    .map(|s| s.to_string()),
            );
            next_flush += 5_000;
        }
        lines
    }

    #[test]
    fn a_flood_is_one_line_then_one_summary_a_window() {
        // 5,000 bad signatures in 59.99 s, one every 12 ms.
        let flood: Vec<_> = (0..5_000).map(|i| (BAD_SIGNATURE, i * 12)).collect();
        assert_eq!(
            lines(&flood, 180_000),
            [
                "github unauthorized at 0 ms",
                "refused 4,999 webhooks in the last 60 s: bad or missing signature (provider github)",
            ],
            "the count is said when the window ends, with no refusal after it"
        );
    }

    #[test]
    fn a_flood_that_goes_on_gives_a_summary_each_window_and_no_full_line() {
        // One a second for 150 s.
        let flood: Vec<_> = (0..150).map(|i| (BAD_SIGNATURE, i * 1_000)).collect();
        assert_eq!(
            lines(&flood, 400_000),
            [
                "github unauthorized at 0 ms",
                "refused 59 webhooks in the last 60 s: bad or missing signature (provider github)",
                "refused 60 webhooks in the last 60 s: bad or missing signature (provider github)",
                "refused 30 webhooks in the last 60 s: bad or missing signature (provider github)",
            ]
        );
    }

    #[test]
    fn after_a_quiet_window_the_next_refusal_is_logged_at_once() {
        let lines = lines(
            &[
                (BAD_SIGNATURE, 0),
                (BAD_SIGNATURE, 1_000),
                (BAD_SIGNATURE, 200_000),
            ],
            400_000,
        );
        assert_eq!(
            lines,
            [
                "github unauthorized at 0 ms",
                "refused 1 webhook in the last 60 s: bad or missing signature (provider github)",
                "github unauthorized at 200000 ms",
            ]
        );
    }

    #[test]
    fn kinds_are_counted_apart() {
        let lines = lines(
            &[
                (BAD_SIGNATURE, 0),
                (TOO_LARGE, 10),
                (BAD_SIGNATURE, 20),
                (TOO_LARGE, 30),
                (TOO_LARGE, 40),
            ],
            120_000,
        );
        assert_eq!(
            lines,
            [
                "github unauthorized at 0 ms",
                "gitlab too_large at 10 ms",
                "refused 1 webhook in the last 60 s: bad or missing signature (provider github)",
                // Its window ended at 60.01 s, seen at the 65 s look: the line says
                // the span it counted over.
                "refused 2 webhooks in the last 64 s: body too large (provider gitlab)",
            ]
        );
    }

    #[test]
    fn a_window_that_ended_unflushed_is_summed_up_at_the_next_refusal() {
        let start = Instant::now();
        let mut log = RefusalLog::default();
        assert_eq!(log.refused(BAD_SIGNATURE, start).0, Decision::LogNow);
        assert_eq!(
            log.refused(BAD_SIGNATURE, at(start, 1)).0,
            Decision::Counted
        );
        let (decision, summary) = log.refused(BAD_SIGNATURE, at(start, 61_000));
        assert_eq!(decision, Decision::Counted, "the flood goes on");
        assert_eq!(summary.map(|s| s.refused), Some(1));
        let left = log.drain(at(start, 62_000));
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].refused, left[0].over.as_secs()), (1, 1));
        assert!(log.drain(at(start, 63_000)).is_empty());
    }

    #[test]
    fn counts_are_written_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(4_999), "4,999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
