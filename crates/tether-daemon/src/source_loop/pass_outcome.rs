//! What one pass did ([`PassOutcome`]) or why it did not ([`PassError`]), and the
//! pure decisions on it: how each cluster fared, what its commit status says, whether
//! the pass is retried soon or waits for a change.

use tether_core::k8s::ObjectKey;
use tether_engine::reconcile::{ApplyReport, ReconcileError};

use crate::attestation::AttestationKeyError;
use crate::decryption::DecryptionKeysError;
use crate::feedback::Verdict;
use crate::loop_views::blocked_on;
use crate::source_status::{apply_failed, hook_failed, objects_failed, prune_held};
use crate::verify::VerifyKeysError;

/// What one pass did.
#[derive(Debug)]
pub struct PassOutcome {
    /// The commit applied, for a Git source or a directory in a checkout.
    pub revision: Option<String>,
    /// Nothing could have changed, so nothing was read or applied.
    pub quiet: bool,
    pub report: ApplyReport,
    /// Objects whose drift this pass corrected, and by whom it was made.
    pub corrected: Vec<(ObjectKey, String)>,
    /// Objects found drifted and left so (the source reports drift only).
    pub reported: Vec<ObjectKey>,
}

impl PassOutcome {
    /// A pass that applied nothing (at `revision`, when known).
    pub(super) fn nothing(revision: Option<String>) -> Self {
        PassOutcome {
            revision,
            quiet: false,
            report: ApplyReport::default(),
            corrected: Vec::new(),
            reported: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    /// Some objects failed for reasons that may pass (the server busy or away).
    #[error("{}; retrying", apply_failed(&.0.report).1)]
    ObjectsFailed(Box<PassOutcome>),
    /// The keys of the encrypted files could not be read: nothing was applied.
    #[error(transparent)]
    DecryptionKeys(#[from] DecryptionKeysError),
    /// The keys commits must be signed by could not be read: nothing was applied.
    #[error(transparent)]
    VerifyKeys(#[from] VerifyKeysError),
    /// The key attestations are signed with could not be read: nothing was applied.
    #[error(transparent)]
    AttestationKey(#[from] AttestationKeyError),
    /// The ref's history was rewritten and the source refuses rewrites: nothing was
    /// applied.
    #[error(
        "history rewritten: the ref moved from {} to {}, which does not descend from it; this source refuses rewrites (spec.rewrites: Refuse)",
        .0.from, .0.to
    )]
    HistoryRewritten(Rewrite),
    /// The pass was stopped (its source deleted or changed): it records nothing.
    #[error("stopped: the source was deleted or changed")]
    Stopped,
    /// The models name several clusters, and some could not be planned or applied
    /// (the others were).
    #[error("{}", .failed.iter().map(|c| format!("cluster {}: {}", c.name, c.message)).collect::<Vec<_>>().join("; "))]
    Clusters {
        outcome: Box<PassOutcome>,
        /// The clusters not ready.
        failed: Vec<ClusterState>,
    },
}

/// How one cluster of a source fared in a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterState {
    /// Its KubernetesService.
    pub name: String,
    pub ready: bool,
    /// `Applied`, or why not (as a Source's status reasons say it).
    pub reason: &'static str,
    pub message: String,
    /// Not ready, and retrying cannot help before something changes (its Cluster
    /// resource, the models).
    pub stalled: bool,
}

/// The tracked ref moved to a commit that does not descend from the one last applied:
/// history was rewritten (a force-push, a reset branch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// The commit last applied.
    pub from: String,
    /// The ref's commit now.
    pub to: String,
}

/// What a cluster's apply says of its commit: applied (ready once its rollout is),
/// failed for good (a blocked wave at its timeout, a refused object), or failed for
/// now (a retry soon may bring it).
pub(super) fn verdict(report: &ApplyReport) -> Verdict {
    if let Some(blocked) = &report.blocked {
        let blockers = blocked.blockers.iter().map(|b| (&b.key, b.state.as_str()));
        return Verdict::Failed(format!("blocked: {}", blocked_on(blocked.wave, blockers)));
    }
    if let Some(hold) = &report.prune_held {
        return Verdict::Failed(prune_held(hold));
    }
    // A hook that failed fails the pass, naming the hook and why.
    if let Some(hook) = report.hook_failure() {
        return Verdict::Failed(hook_failed(hook));
    }
    match (report.succeeded(), retries_soon(report)) {
        (true, _) => Verdict::Applied,
        (false, true) => Verdict::Retrying,
        (false, false) => Verdict::Failed(objects_failed(report)),
    }
}

/// What another cluster's apply (or the error that kept it from one) says of its
/// commit.
pub(super) fn verdict_of(result: Result<&ApplyReport, &ReconcileError>) -> Verdict {
    match result {
        Ok(report) => verdict(report),
        Err(error) if error.is_permanent() => Verdict::Failed(tether_core::error_chain(error)),
        Err(_) => Verdict::Retrying,
    }
}

/// A pass's result: an error when another cluster failed, or when objects failed
/// that a retry soon may bring.
pub(super) fn conclude(
    outcome: PassOutcome,
    failed: Vec<ClusterState>,
) -> Result<PassOutcome, PassError> {
    match (retries_soon(&outcome.report), failed.is_empty()) {
        (_, false) => Err(PassError::Clusters {
            outcome: Box::new(outcome),
            failed,
        }),
        (true, true) => Err(PassError::ObjectsFailed(Box::new(outcome))),
        (false, true) => Ok(outcome),
    }
}

/// How a cluster fared, as the status says it. A cluster where Kubernetes is off is
/// ready: nothing is asked of it.
pub(super) fn cluster_state(
    name: &str,
    result: Result<&ApplyReport, &ReconcileError>,
) -> ClusterState {
    let (ready, reason, message, stalled) = match result {
        Ok(report) if report.succeeded() => (true, "Applied", String::new(), false),
        Ok(ApplyReport {
            prune_held: Some(hold),
            ..
        }) => (false, "PruneHeld", prune_held(hold), true),
        Ok(report) => (false, objects_reason(report), objects_failed(report), false),
        Err(error @ ReconcileError::Dormant(_)) => (true, error.reason(), error.to_string(), false),
        Err(error) => (
            false,
            error.reason(),
            tether_core::error_chain(error),
            error.is_permanent(),
        ),
    };
    ClusterState {
        name: name.to_string(),
        ready,
        reason,
        message,
        stalled,
    }
}

/// Why a cluster's objects failed, as a status reason: `Forbidden` when its identity
/// was refused (an Event then says so), else `ObjectsFailed`.
fn objects_reason(report: &ApplyReport) -> &'static str {
    match report
        .failures()
        .any(|(_, f)| matches!(f, tether_engine::reconcile::ObjectFailure::Forbidden { .. }))
    {
        true => "Forbidden",
        false => "ObjectsFailed",
    }
}

/// Whether a pass is retried soon (with the driver's backoff) rather than at the next
/// interval: what a wave waits for may be ready later, and some failures pass (the
/// server busy or away). A failed dependency or a refused object waits for a change.
pub(super) fn retries_soon(report: &ApplyReport) -> bool {
    let waiting = report
        .blocked
        .as_ref()
        .is_some_and(|b| !b.blockers.iter().any(|x| x.failed));
    waiting || report.failures().any(|(_, f)| f.retryable())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tether_core::directive::HookPhase;
    use tether_engine::reconcile::{
        BlockedWave, Blocker, HookRun, ObjectFailure, ObjectReport, Outcome,
    };

    /// A report whose second wave waits for a Job (failed, or still running).
    pub(crate) fn blocked(failed: bool) -> ApplyReport {
        ApplyReport {
            objects: Vec::new(),
            blocked: Some(BlockedWave {
                wave: 1,
                waves: 2,
                blockers: vec![Blocker {
                    key: ObjectKey::new("batch/v1", "Job", Some("n"), "init"),
                    state: "running".into(),
                    failed,
                    external: false,
                    needed_by: Vec::new(),
                }],
                not_applied: 1,
            }),
            stopped: false,
            prune_held: None,
            hooks: Vec::new(),
        }
    }

    /// A report of one ConfigMap that failed so.
    pub(crate) fn refused(failure: ObjectFailure) -> ApplyReport {
        ApplyReport {
            objects: vec![ObjectReport {
                key: ObjectKey::new("v1", "ConfigMap", Some("n"), "big"),
                outcome: Outcome::Failed(failure),
            }],
            blocked: None,
            stopped: false,
            prune_held: None,
            hooks: Vec::new(),
        }
    }

    #[test]
    fn a_pass_waiting_for_a_dependency_retries_soon_and_one_that_failed_waits_for_a_change() {
        assert!(!retries_soon(&ApplyReport::default()));
        assert!(retries_soon(&blocked(false)));
        assert!(!retries_soon(&blocked(true)));
    }

    #[test]
    fn a_hook_that_failed_fails_the_commit_naming_the_hook() {
        let report = ApplyReport {
            hooks: vec![HookRun {
                phase: HookPhase::PreSync,
                key: ObjectKey::new("batch/v1", "Job", Some("n"), "db-migrate-x7k2p"),
                failure: Some("Job failed: BackoffLimitExceeded".into()),
                deleted: false,
            }],
            ..ApplyReport::default()
        };
        assert!(!report.succeeded());
        assert_eq!(
            verdict(&report),
            Verdict::Failed(
                "PreSync hook Job n/db-migrate-x7k2p: Job failed: BackoffLimitExceeded".into()
            )
        );
    }
}
