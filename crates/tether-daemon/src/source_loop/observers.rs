//! Who learns of a source's passes ([`Observers`]): the status ([`StatusSink`]: a
//! Source's, or none for a source from flags), the feedback (commit statuses,
//! notices), the web page's view, and the Events on drifted objects; and what each
//! is told of a pass's result (pure: the status's words, the notices).

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::{Event, EventType, Recorder};
use tether_core::feedback::notice::NoticeKind;
use tether_engine::reconcile::{
    ApplyProgress, ApplyReport, ClusterName, ClusterPlan, Planned, Reconciler,
};
use tether_sops::Keyring;

use super::pass_outcome::{ClusterState, PassError, PassOutcome, Rewrite};
use tether_core::inventory::budget::PruneHold;

use crate::clock::now;
use crate::drift::Drift;
use crate::feedback::{Draft, SourceFeedback, Verdict, notices_of_apply};
use crate::loop_views::{LastPlan, Shown, SourceName, Views, blocked_on};
use crate::revert::{RolloutOf, SourceRevert};
use crate::shared::{Shared, event_reporter};
use crate::source_status::PassResult;

/// Where a loop records each pass's result for its users (a Source's status).
pub(crate) trait StatusSink: Send + Sync {
    /// `ref@sha1:commit`, as the status names a revision.
    fn revision_name(&self, commit: &str) -> String;
    fn record(
        &mut self,
        result: &PassResult<'_>,
        handled_request: Option<String>,
    ) -> impl Future<Output = ()> + Send;
    /// Says that the tracked ref was rewritten (for an auditor: an Event, and the
    /// status's next write).
    fn record_rewrite(&mut self, rewrite: &Rewrite) -> impl Future<Output = ()> + Send;
    /// Says that a prune beyond the deletion budget was carried out, as a person
    /// approved it (for an auditor: an Event naming the digest).
    fn record_approved(&mut self, hold: &PruneHold) -> impl Future<Output = ()> + Send;
    /// How each cluster of a source whose models name several fared in the last
    /// pass (the status's next write).
    fn record_clusters(&mut self, clusters: Vec<ClusterState>);
}

/// No status beyond metrics and logs (a source from flags).
pub(crate) struct NoStatus;

impl StatusSink for NoStatus {
    fn revision_name(&self, commit: &str) -> String {
        commit.to_string()
    }

    async fn record(&mut self, _: &PassResult<'_>, _: Option<String>) {}

    async fn record_rewrite(&mut self, _: &Rewrite) {}

    async fn record_approved(&mut self, _: &PruneHold) {}

    fn record_clusters(&mut self, _: Vec<ClusterState>) {}
}

/// Who learns of a source's passes: its status (a Source's, or none), its feedback
/// (commit statuses, notices), the web page's view of it, and the Events on the
/// objects whose drift a pass corrected or reported. (Metrics are the loop's, by its
/// id.)
pub(crate) struct Observers<S = NoStatus> {
    pub(crate) status: S,
    /// Where commit statuses and notices go (none: nowhere beyond the status).
    pub(crate) feedback: Option<Arc<SourceFeedback>>,
    /// How the web page shows the source and acts for it (none: not shown).
    pub(crate) shown: Option<Shown>,
    /// Records the Events on drifted objects: the daemon's own client, when the
    /// reconciler acts as a Source's ServiceAccount, which need not be allowed to
    /// write Events (none: the reconciler's client, once needed).
    pub(crate) events: Option<Recorder>,
    /// The daemon's shared state, whose views the web page shows.
    pub(crate) shared: Arc<Shared>,
    /// Reverts a commit whose rollout fails (`spec.revert`; none: never).
    pub(crate) revert: Option<Arc<SourceRevert>>,
}

impl<S: StatusSink> Observers<S> {
    /// Records an Event of `drift` on its object, through the events' client (else
    /// `reconciler`'s).
    pub(super) async fn publish(
        &mut self,
        reconciler: &Reconciler,
        drift: &Drift,
        reason: &str,
        type_: EventType,
        note: String,
    ) {
        if self.events.is_none() {
            let Ok(client) = reconciler.client().await else {
                return;
            };
            self.events = Some(Recorder::new(client.clone(), event_reporter()));
        }
        let Some(recorder) = &self.events else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Apply".into(),
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, &drift.reference).await {
            tracing::warn!(%error, object = %drift.key, "cannot record the drift event");
        }
    }

    /// Records a pass's result: the feedback's notices and commit statuses, the
    /// page's view, the status.
    pub(super) async fn record(
        &mut self,
        result: &Result<PassOutcome, PassError>,
        requested: Option<String>,
        took: Duration,
    ) {
        if let Some(feedback) = &self.feedback {
            if let Some((commit, why)) = failed_early(result) {
                feedback.failed_early(&commit, &why).await;
            }
            let revision = pass_revision(result).map(|commit| self.status.revision_name(commit));
            feedback
                .notify(notices_of(result), revision.as_deref())
                .await;
        }
        if let Some(pass_result) = pass_result(&self.status, result) {
            let took = Some(took.as_secs_f64());
            self.show(|views, name| views.record(name, &pass_result, &now(), took));
            self.status.record(&pass_result, requested).await;
        }
    }

    /// Tells the web page's view of the source, when it is shown.
    pub(super) fn show(&self, tell: impl FnOnce(&Views, &SourceName)) {
        if let Some(shown) = &self.shown {
            tell(&self.shared.views, &shown.name);
        }
    }

    /// What an apply tells the page while a wave waits: what it is blocked on.
    pub(super) fn waiting_shown(&self) -> impl Fn(ApplyProgress<'_>) + Sync + use<S> {
        let shown = self.shown.as_ref().map(|s| s.name.clone());
        let shared = self.shared.clone();
        move |progress| {
            if let (
                ApplyProgress::Waiting {
                    wave, not_ready, ..
                },
                Some(name),
            ) = (progress, &shown)
            {
                let blockers = not_ready.iter().map(|(key, state)| (key, state.as_str()));
                shared.views.waiting(name, &blocked_on(wave, blockers));
            }
        }
    }

    /// The page's view of a plan of the source's own cluster (decrypted with `keys`).
    pub(super) fn show_plan(&self, planned: &Planned, keys: Arc<Keyring>) {
        self.show(|views, name| {
            let last = LastPlan {
                plan: planned.plan.clone(),
                workflow: planned.workflow.clone(),
                models: planned.models.clone(),
            };
            views.planned(name, last, planned.client().clone(), keys);
        });
    }

    /// A new commit is taken up on the plan's clusters: pending in each.
    pub(super) async fn taken_up(&self, commit: &str, planned: &Planned, others: &[ClusterPlan]) {
        let Some(feedback) = &self.feedback else {
            return;
        };
        let clusters: Vec<Option<&str>> = std::iter::once(&planned.cluster)
            .chain(others.iter().map(|o| &o.cluster))
            .map(status_cluster)
            .collect();
        feedback.taken_up(commit, &clusters).await;
    }

    /// What the pass did with a cluster's plan, for the commit status of its context:
    /// applied (its rollout then waited for), failed, or to be retried.
    pub(super) async fn tell_verdict(&self, planned: &Planned, verdict: Verdict) {
        let commit = planned.plan.revision.as_ref().map(|r| r.commit.as_str());
        let (Some(feedback), Some(commit)) = (&self.feedback, commit) else {
            return;
        };
        let cluster = status_cluster(&planned.cluster);
        if self.revert.is_some() && cluster.is_none() && verdict == Verdict::Applied {
            // The revert waits for the rollout, and says how it ended.
            return;
        }
        let rollout = (verdict == Verdict::Applied).then(|| planned.rollout());
        feedback.concluded(commit, cluster, verdict, rollout).await;
    }

    /// With `spec.revert`, the rollout of the own cluster's commit that this pass
    /// changed the cluster for is watched: waited for when the pass applied it, failed
    /// already when a wave waited in vain for what did not become healthy.
    /// The first pass after a restart that changes nothing resumes the wait cut short.
    pub(super) fn watch_rollout(&self, planned: &Planned, report: &ApplyReport) {
        let (Some(revert), Some(revision)) = (&self.revert, &planned.plan.revision) else {
            return;
        };
        if status_cluster(&planned.cluster).is_some() {
            return;
        }
        let resumed = revert.resume(&revision.commit);
        if !report.changed() {
            if let Some(left) = resumed.filter(|_| report.succeeded()) {
                tracing::info!(commit = %revision.commit, left = %humantime::format_duration(left), "the rollout's wait resumed");
                revert.watch(
                    &revision.commit,
                    RolloutOf::Applied(planned.rollout()),
                    left,
                );
            }
            return;
        }
        let rollout = match &report.blocked {
            None if report.succeeded() => RolloutOf::Applied(planned.rollout()),
            Some(blocked) if blocked.blockers.iter().any(|b| !b.external) => {
                RolloutOf::Blocked(blocked.blockers.clone())
            }
            _ => return,
        };
        revert.watch(&revision.commit, rollout, revert.timeout);
    }
}

/// What the status says of a pass's result; nothing of a stopped pass (its Source is
/// gone or changed: the status is the next loop's, if any).
pub(super) fn pass_result<'r>(
    status: &impl StatusSink,
    result: &'r Result<PassOutcome, PassError>,
) -> Option<PassResult<'r>> {
    let name = |revision: Option<&str>| revision.map(|commit| status.revision_name(commit));
    let said = match result {
        Ok(outcome) if outcome.report.succeeded() => PassResult::Applied {
            revision: name(outcome.revision.as_deref()).unwrap_or_default(),
            report: &outcome.report,
        },
        Ok(outcome) => PassResult::ObjectsFailed {
            revision: name(outcome.revision.as_deref()).unwrap_or_default(),
            report: &outcome.report,
        },
        Err(PassError::ObjectsFailed(outcome)) => PassResult::ObjectsFailed {
            revision: name(outcome.revision.as_deref()).unwrap_or_default(),
            report: &outcome.report,
        },
        Err(PassError::Reconcile(error)) => {
            let (reason, stalled) = (error.reason(), error.is_permanent());
            PassResult::Failed {
                revision: name(error.commit()),
                reason,
                message: tether_core::error_chain(error),
                stalled,
            }
        }
        Err(PassError::DecryptionKeys(error)) => PassResult::Failed {
            revision: None,
            reason: "DecryptionKeysUnavailable",
            message: tether_core::error_chain(error),
            stalled: false,
        },
        Err(PassError::VerifyKeys(error)) => PassResult::Failed {
            revision: None,
            reason: "VerifyKeysUnavailable",
            message: tether_core::error_chain(error),
            stalled: false,
        },
        Err(PassError::AttestationKey(error)) => PassResult::Failed {
            revision: None,
            reason: "AttestationKeyUnavailable",
            message: tether_core::error_chain(error),
            stalled: false,
        },
        Err(error @ PassError::HistoryRewritten(rewrite)) => PassResult::Failed {
            revision: Some(status.revision_name(&rewrite.to)),
            reason: "HistoryRewritten",
            message: error.to_string(),
            stalled: true,
        },
        Err(PassError::Stopped) => return None,
        Err(error @ PassError::Clusters { outcome, failed }) => PassResult::Failed {
            revision: name(outcome.revision.as_deref()),
            reason: failed.first().map_or("ClusterFailed", |f| f.reason),
            message: error.to_string(),
            stalled: failed.iter().all(|f| f.stalled),
        },
    };
    Some(said)
}

/// The cluster a commit status names: a KubernetesService of a Source whose models
/// name several; else `None`, the daemon's own (`--cluster-name`), so that two
/// clusters applying the same models never share a context.
fn status_cluster(cluster: &ClusterName) -> Option<&str> {
    cluster
        .several
        .then_some(cluster.service.as_deref())
        .flatten()
}

/// The commit a pass failed before it was planned, and why: invalid models (their
/// first errors, with file and line), a commit not signed by a trusted key, or a
/// rewritten history the Source refuses.
fn failed_early(result: &Result<PassOutcome, PassError>) -> Option<(String, String)> {
    match result {
        Err(PassError::Reconcile(error)) => {
            let commit = error.commit()?.to_string();
            Some((commit, error.to_string()))
        }
        Err(error @ PassError::HistoryRewritten(rewrite)) => {
            Some((rewrite.to.clone(), error.to_string()))
        }
        _ => None,
    }
}

/// The notices of a pass's result (pure): a revision applied that changed the
/// cluster, a failure or stall with its reason, drift corrected or reported per
/// object, what was pruned (a Node's removal as a host's), a wave left blocked.
fn notices_of(result: &Result<PassOutcome, PassError>) -> Vec<Draft> {
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(PassError::ObjectsFailed(outcome)) => outcome,
        Err(PassError::Clusters { outcome, failed }) => {
            let mut drafts = notices_of_outcome(outcome);
            drafts.extend(failed.iter().map(|cluster| {
                let kind = match cluster.stalled {
                    true => NoticeKind::Stalled,
                    false => NoticeKind::Failed,
                };
                Draft::new(
                    kind,
                    format!("cluster {}: {}", cluster.name, cluster.message),
                )
                .about(format!("cluster {}", cluster.name))
                .because(cluster.reason)
            }));
            return drafts;
        }
        Err(PassError::Stopped) => return Vec::new(),
        Err(PassError::Reconcile(error)) => {
            let kind = match error.is_permanent() {
                true => NoticeKind::Stalled,
                false => NoticeKind::Failed,
            };
            return vec![Draft::new(kind, tether_core::error_chain(error)).because(error.reason())];
        }
        Err(error @ PassError::DecryptionKeys(_)) => {
            return vec![
                Draft::new(NoticeKind::Failed, tether_core::error_chain(error))
                    .because("DecryptionKeysUnavailable"),
            ];
        }
        Err(error @ PassError::VerifyKeys(_)) => {
            return vec![
                Draft::new(NoticeKind::Failed, tether_core::error_chain(error))
                    .because("VerifyKeysUnavailable"),
            ];
        }
        Err(error @ PassError::AttestationKey(_)) => {
            return vec![
                Draft::new(NoticeKind::Failed, tether_core::error_chain(error))
                    .because("AttestationKeyUnavailable"),
            ];
        }
        Err(error @ PassError::HistoryRewritten(_)) => {
            return vec![
                Draft::new(NoticeKind::Stalled, error.to_string()).because("HistoryRewritten"),
            ];
        }
    };
    notices_of_outcome(outcome)
}

fn notices_of_outcome(outcome: &PassOutcome) -> Vec<Draft> {
    notices_of_apply(&outcome.report, &outcome.corrected, &outcome.reported)
}

/// The commit a pass worked on, when known.
fn pass_revision(result: &Result<PassOutcome, PassError>) -> Option<&str> {
    match result {
        Ok(outcome) => outcome.revision.as_deref(),
        Err(PassError::ObjectsFailed(outcome) | PassError::Clusters { outcome, .. }) => {
            outcome.revision.as_deref()
        }
        Err(PassError::Reconcile(error)) => error.commit(),
        Err(PassError::HistoryRewritten(rewrite)) => Some(&rewrite.to),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::k8s::ObjectKey;
    use tether_engine::reconcile::{ApplyReport, Outcome};

    fn outcome(objects: &[(&str, Outcome)], corrected: &[(&str, &str)]) -> PassOutcome {
        let key = |name: &str| ObjectKey::new("v1", "ConfigMap", Some("shop"), name);
        PassOutcome {
            revision: Some("c1".into()),
            quiet: false,
            report: ApplyReport {
                objects: objects
                    .iter()
                    .map(|(name, outcome)| tether_engine::reconcile::ObjectReport {
                        key: key(name),
                        outcome: outcome.clone(),
                    })
                    .collect(),
                ..Default::default()
            },
            corrected: corrected
                .iter()
                .map(|(name, manager)| (key(name), manager.to_string()))
                .collect(),
            reported: Vec::new(),
        }
    }

    fn kinds(result: Result<PassOutcome, PassError>) -> Vec<(NoticeKind, Option<String>)> {
        notices_of(&result)
            .into_iter()
            .map(|d| (d.kind, d.subject))
            .collect()
    }

    #[test]
    fn a_pass_makes_the_notices_of_what_it_did() {
        let settings = Some("ConfigMap shop/settings".to_string());
        // Nothing changed: nothing to tell.
        assert_eq!(
            kinds(Ok(outcome(&[("settings", Outcome::Unchanged)], &[]))),
            []
        );
        assert_eq!(
            kinds(Ok(outcome(&[("settings", Outcome::Created)], &[]))),
            [(NoticeKind::Applied, None)]
        );
        assert_eq!(
            kinds(Ok(outcome(
                &[("settings", Outcome::Configured)],
                &[("settings", "kubectl-patch")]
            ))),
            [
                (NoticeKind::Applied, None),
                (NoticeKind::DriftCorrected, settings.clone())
            ]
        );
        assert_eq!(
            kinds(Ok(outcome(
                &[("old", Outcome::Pruned), ("older", Outcome::Pruned)],
                &[]
            ))),
            [
                (NoticeKind::Applied, None),
                (NoticeKind::Pruned, Some("ConfigMap shop/old".into()))
            ]
        );
        assert_eq!(kinds(Err(PassError::Stopped)), []);
    }
}
