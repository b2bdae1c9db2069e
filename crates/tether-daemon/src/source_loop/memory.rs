//! What a source's passes remember between them: the commits applied and attempted,
//! the rewrite recorded, the state a quiet pass checks against, the drift seen since
//! the last pass, the deletions the passes made themselves, the watch cache of its
//! objects. Its decisions (is a commit news, does a pass only report drift, has a
//! commit settled, is a deletion the passes' own) are pure methods, tested as data
//! below.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tether_api::source_spec::DriftPolicy;
use tether_core::k8s::ObjectKey;
use tether_engine::reconcile::{ApplyReport, Outcome, WatchCache};
use tokio::time::Instant;

use super::pass_outcome::{Rewrite, retries_soon};
use crate::drift::{CorrectionBackoff, Drift};

/// What one source's passes remember between them.
#[derive(Default)]
pub(crate) struct Memory {
    /// The commit last applied without error.
    pub(crate) last_applied: Option<String>,
    /// The commit the last pass began to apply: the status says "progressing" only
    /// when a pass takes up a new one, not on each retry of the same.
    pub(crate) last_attempted: Option<String>,
    /// The last rewrite recorded, so that each is recorded once, not on each retry.
    pub(crate) recorded_rewrite: Option<Rewrite>,
    /// The commit of the last pass that applied everything (or stalled on refusals),
    /// with the watch cache's change count when it began: the state a quiet pass
    /// checks against.
    pub(super) settled: Option<Settled>,
    /// Why Kubernetes is off for the source, as last said (said once, not each pass).
    pub(super) dormant: Option<String>,
    /// A requested reconcile the next pass handles.
    pub(super) requested: Option<String>,
    /// Drift seen since the last pass, by object.
    pub(super) drifted: BTreeMap<ObjectKey, Drift>,
    /// The objects the passes deleted themselves (pruned, or replaced: deleted and
    /// made again) whose deletion the watch cache has not reported yet. Their
    /// deletions are not drift: else each would wake a pass of its own, hundreds one
    /// after another after a large prune.
    pub(super) own_deletions: BTreeSet<ObjectKey>,
    /// When each corrected object may be corrected again.
    pub(super) backoff: CorrectionBackoff,
    /// The watch cache of the kinds the source applies (started after the first
    /// plan, which finds them): passes plan from it, and it reports drift.
    pub(super) cache: Option<WatchCache>,
    /// The KubernetesService whose cluster `cache` watches.
    pub(super) cache_cluster: Option<String>,
}

impl Memory {
    /// The memory of a source an earlier process (or loop) applied: the commit its
    /// status says was applied last (so that a rewrite made while no daemon ran is
    /// still seen), the rewrite it recorded (not recorded again), and a reconcile
    /// request its status does not say was handled (the first pass handles it).
    pub(crate) fn resumed(
        last_applied: Option<String>,
        recorded_rewrite: Option<Rewrite>,
        requested: Option<String>,
    ) -> Self {
        Memory {
            last_applied,
            recorded_rewrite,
            requested,
            ..Memory::default()
        }
    }

    /// Whether a pass at `commit` takes up a commit anew: neither the one applied nor
    /// the one the last pass tried (a retry of that is not news).
    pub(super) fn is_new_attempt(&self, commit: &str) -> bool {
        Some(commit) != self.last_applied.as_deref()
            && Some(commit) != self.last_attempted.as_deref()
    }

    /// Remembers what the apply of `report` deleted itself (what it pruned or
    /// replaced), so that the watch cache's reports of these deletions are not taken
    /// for drift. An object it applied leaves: a deletion of it from now on is
    /// someone else's. The deletions of the last pass that deleted anything are kept,
    /// not every pass's: a report the full drift channel dropped would otherwise stay
    /// for the loop's life (an earlier prune's report still on its way then counts as
    /// drift once: one pass).
    pub(super) fn remember_own_deletions(&mut self, report: &ApplyReport) {
        let deleted: BTreeSet<ObjectKey> = report
            .objects
            .iter()
            .filter(|o| matches!(o.outcome, Outcome::Pruned | Outcome::Replaced))
            .map(|o| o.key.clone())
            .collect();
        if !deleted.is_empty() {
            self.own_deletions = deleted;
        }
        for object in &report.objects {
            if matches!(
                object.outcome,
                Outcome::Created | Outcome::Configured | Outcome::Unchanged
            ) {
                self.own_deletions.remove(&object.key);
            }
        }
    }

    /// Whether `drift` is the deletion of an object a pass deleted itself: not news,
    /// and no pass is due for it. Any other drift, a deletion by someone else among
    /// it, is.
    pub(super) fn is_own_deletion(&self, drift: &Drift) -> bool {
        drift.deleted && self.own_deletions.contains(&drift.key)
    }

    /// Whether the pass only reports drift: the source reports drift rather than
    /// correct it, and its commit is the one last applied (a new commit is applied
    /// whole).
    pub(super) fn reports_drift_only(&self, policy: DriftPolicy, commit: Option<&str>) -> bool {
        policy == DriftPolicy::Report && commit.is_some() && commit == self.last_applied.as_deref()
    }

    /// What the next quiet pass checks against, after a pass at `commit` that began at
    /// the synced watch cache's change count `changes` (`None`: not synced, or no
    /// cache): a pass that applied everything settles; one that stalled on refusals
    /// settles until its retry, which waits one interval after the first stall and
    /// twice as long after each stall of the same commit (what is settled now), up to
    /// [`STALLED_RETRY_MAX`]. Anything else (a wave waiting, a failure that may pass)
    /// leaves the next pass a full one.
    pub(super) fn settled_after(
        &self,
        report: &ApplyReport,
        commit: Option<&str>,
        changes: Option<u64>,
        interval: Duration,
    ) -> Option<Settled> {
        let (commit, changes) = (commit?, changes?);
        let stalled = match report.succeeded() {
            true => None,
            false if report.blocked.is_none() && !retries_soon(report) && !report.stopped => {
                let delay = self
                    .settled
                    .as_ref()
                    .filter(|p| p.commit == commit)
                    .and_then(|p| p.stalled.as_ref())
                    .map_or(interval, |s| (s.delay * 2).min(STALLED_RETRY_MAX));
                Some(StalledRetry {
                    report: report.clone(),
                    retry_at: Instant::now() + delay,
                    delay,
                })
            }
            false => return None,
        };
        Some(Settled {
            commit: commit.to_string(),
            changes,
            stalled,
        })
    }
}

/// A commit whose pass left nothing to do until something changes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Settled {
    pub(super) commit: String,
    /// The watch cache's change count when the pass began.
    pub(super) changes: u64,
    /// The pass stalled on objects the server refused (a conflict, a refusal):
    /// applying them again cannot help until something changes, so the passes in
    /// between are quiet, and a full one comes only when the retry is due.
    pub(super) stalled: Option<StalledRetry>,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct StalledRetry {
    /// The refusals, which the quiet passes report again.
    pub(super) report: ApplyReport,
    pub(super) retry_at: Instant,
    /// The wait before this retry, doubled each time the same commit stalls again.
    pub(super) delay: Duration,
}

/// The longest wait between two full passes of a commit stalled on refusals (an
/// administrator's fix, such as a raised quota, that no watch sees is applied then).
const STALLED_RETRY_MAX: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_loop::pass_outcome::tests::{blocked, refused};
    use k8s_openapi::api::core::v1::ObjectReference;
    use tether_engine::reconcile::{ObjectFailure, ObjectReport};

    /// A memory that applied `applied` and last attempted `attempted`.
    fn memory(applied: Option<&str>, attempted: Option<&str>) -> Memory {
        Memory {
            last_applied: applied.map(str::to_string),
            last_attempted: attempted.map(str::to_string),
            ..Memory::default()
        }
    }

    #[test]
    fn a_source_that_reports_drift_applies_only_a_new_commit() {
        use DriftPolicy::{Correct, Report};
        let cases = [
            (Report, Some("b"), Some("b"), true),
            (Report, Some("c"), Some("b"), false),
            (Report, Some("b"), None, false),
            // A directory has no commit: each pass applies.
            (Report, None, None, false),
            (Correct, Some("b"), Some("b"), false),
        ];
        for (policy, commit, last_applied, expected) in cases {
            assert_eq!(
                memory(last_applied, None).reports_drift_only(policy, commit),
                expected,
                "{policy:?} {commit:?} {last_applied:?}"
            );
        }
    }

    #[test]
    fn the_status_says_progressing_once_per_commit_not_on_each_retry() {
        let cases = [
            // The first commit of a new source.
            ("c", None, None, true),
            // A new commit after an applied one.
            ("c", Some("b"), Some("b"), true),
            // A retry of the commit that failed.
            ("c", Some("b"), Some("c"), false),
            // The applied commit again (drift, a requested pass).
            ("b", Some("b"), None, false),
            // Back to a commit tried before another (a revert): news again.
            ("c", Some("b"), Some("d"), true),
        ];
        for (commit, applied, attempted, expected) in cases {
            assert_eq!(
                memory(applied, attempted).is_new_attempt(commit),
                expected,
                "{commit} {applied:?} {attempted:?}"
            );
        }
    }

    #[test]
    fn the_deletions_of_the_last_pass_that_deleted_are_kept_not_every_passes() {
        let key = |name: &str| ObjectKey::new("v1", "ConfigMap", Some("n"), name);
        let pruned = |name: &str| ApplyReport {
            objects: vec![ObjectReport {
                key: key(name),
                outcome: Outcome::Pruned,
            }],
            ..ApplyReport::default()
        };
        let deletion = |name: &str| Drift {
            key: key(name),
            manager: "a deletion".into(),
            deleted: true,
            reference: ObjectReference::default(),
        };
        let mut memory = Memory::default();
        memory.remember_own_deletions(&pruned("a"));
        memory.remember_own_deletions(&ApplyReport::default());
        assert!(memory.is_own_deletion(&deletion("a")));
        memory.remember_own_deletions(&pruned("b"));
        assert!(!memory.is_own_deletion(&deletion("a")));
        assert!(memory.is_own_deletion(&deletion("b")));
    }

    #[test]
    fn only_the_deletions_the_passes_made_themselves_are_not_drift() {
        use Outcome::{Configured, Created, Prunable, Pruned, Released, Replaced, Unchanged};
        let key = |name: &str| ObjectKey::new("v1", "ConfigMap", Some("n"), name);
        let failed = || Outcome::Failed(ObjectFailure::Unreachable);
        // What each pass did to `a` (`None`: nothing, it applied `b`); then what the
        // watch saw: a deletion (or an edit) of `a` or `b`.
        let cases = [
            (vec![Some(Pruned)], "a", true, true),
            (vec![Some(Replaced)], "a", true, true),
            // Someone else deleted another object, or edited the pruned one.
            (vec![Some(Pruned)], "b", true, false),
            (vec![Some(Pruned)], "a", false, false),
            // Nothing was deleted: a prune that failed, one not asked for, a release.
            (vec![Some(failed())], "a", true, false),
            (vec![Some(Prunable)], "a", true, false),
            (vec![Some(Released)], "a", true, false),
            (vec![Some(Unchanged)], "a", true, false),
            // A later pass that does not apply it still knows.
            (vec![Some(Pruned), None], "a", true, true),
            (vec![Some(Pruned), Some(failed())], "a", true, true),
            // A later pass applied it again: its next deletion is someone else's.
            (vec![Some(Pruned), Some(Created)], "a", true, false),
            (vec![Some(Replaced), Some(Unchanged)], "a", true, false),
            (vec![Some(Replaced), Some(Configured)], "a", true, false),
        ];
        for (passes, name, deleted, expected) in cases {
            let mut memory = Memory::default();
            for outcome in &passes {
                let object = match outcome {
                    Some(outcome) => ObjectReport {
                        key: key("a"),
                        outcome: outcome.clone(),
                    },
                    None => ObjectReport {
                        key: key("b"),
                        outcome: Unchanged,
                    },
                };
                memory.remember_own_deletions(&ApplyReport {
                    objects: vec![object],
                    ..ApplyReport::default()
                });
            }
            let drift = Drift {
                key: key(name),
                manager: "someone".into(),
                deleted,
                reference: ObjectReference::default(),
            };
            assert_eq!(
                memory.is_own_deletion(&drift),
                expected,
                "{passes:?} {name} deleted: {deleted}"
            );
        }
    }

    #[test]
    fn only_a_complete_pass_of_a_commit_with_a_synced_cache_settles() {
        let interval = Duration::from_secs(10);
        let fresh = Memory::default();
        let done = ApplyReport::default();
        let settled = fresh
            .settled_after(&done, Some("c"), Some(7), interval)
            .unwrap();
        assert_eq!(
            (settled.commit.as_str(), settled.changes, settled.stalled),
            ("c", 7, None)
        );
        assert_eq!(fresh.settled_after(&done, None, Some(7), interval), None);
        assert_eq!(fresh.settled_after(&done, Some("c"), None, interval), None);
        // A wave waiting, a failure that may pass: the next pass is a full one.
        let waiting = blocked(false);
        assert_eq!(
            fresh.settled_after(&waiting, Some("c"), Some(7), interval),
            None
        );
        let unreachable = refused(ObjectFailure::Unreachable);
        assert_eq!(
            fresh.settled_after(&unreachable, Some("c"), Some(7), interval),
            None
        );
    }

    #[test]
    fn a_commit_stalled_on_refusals_is_retried_ever_less_often_until_it_changes() {
        let interval = Duration::from_secs(10);
        let report = refused(ObjectFailure::Refused {
            code: 422,
            message: "too large".into(),
        });
        let mut delays = Vec::new();
        let mut memory = Memory::default();
        for _ in 0..8 {
            let settled = memory
                .settled_after(&report, Some("c"), Some(7), interval)
                .expect("a stall settles");
            let stalled = settled.stalled.clone().expect("stalled");
            assert_eq!(
                stalled.report, report,
                "the quiet passes repeat the refusals"
            );
            delays.push(stalled.delay.as_secs());
            memory.settled = Some(settled);
        }
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300, 300]);
        // Another commit stalls anew: one interval.
        let other = memory.settled_after(&report, Some("d"), Some(7), interval);
        assert_eq!(
            other.and_then(|s| s.stalled).map(|s| s.delay),
            Some(interval)
        );
    }
}
