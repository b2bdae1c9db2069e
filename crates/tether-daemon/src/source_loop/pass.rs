//! One pass of a source: a quiet one when nothing can have changed; else plan (from
//! the watch cache), check the history, then report drift or apply, the other
//! clusters of the models too; each step's decision a named function, each result
//! told to the [`Observers`](super::observers::Observers) and kept in the
//! [`Memory`](super::memory::Memory).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use tether_api::source_spec::{DriftPolicy, RewritePolicy};
use tether_core::inventory::budget::PruneHold;
use tether_core::k8s::ObjectKey;
use tether_core::plan::{Action, Change};
use tether_engine::reconcile::{
    ApplyOptions, ApplyReport, ClusterName, ClusterPlan, Outcome, Planned, ReconcileError, WatchAs,
    WatchCache,
};
use tether_web::ClusterRow;
use tokio::time::Instant;

use super::lifecycle::SourceLoop;
use super::observers::StatusSink;
use super::pass_outcome::{
    ClusterState, PassError, PassOutcome, Rewrite, cluster_state, conclude, verdict, verdict_of,
};
use crate::clock::now;
use crate::drift::{Drift, reporter};
use crate::source_status::PassResult;

impl<S: StatusSink> SourceLoop<S> {
    /// One pass: a quiet one when nothing can have changed; else plan, then report
    /// drift or apply, each step's decision a named function below.
    pub(super) async fn reconcile(&mut self, requested: bool) -> Result<PassOutcome, PassError> {
        if !requested && let Some(quiet) = self.quiet_pass().await {
            return Ok(quiet);
        }
        self.read_keys().await?;
        // Changes seen from here on make the next pass a full one.
        let mut changes = self.memory.cache.as_ref().map(WatchCache::changes);
        // A plan only reads (its dry runs change nothing): stopping drops it at once.
        let stop = self.stop.pass.clone();
        let planned = tokio::select! {
            planned = self.plan_unless_dormant() => planned?,
            () = stop.cancelled() => return Err(PassError::Stopped),
        };
        let Some((planned, others)) = planned else {
            return Ok(PassOutcome::nothing(None));
        };
        let commit = planned.plan.revision.as_ref().map(|r| r.commit.clone());
        tracing::Span::current().record("revision", commit.as_deref().unwrap_or("-"));
        if let Some(commit) = &commit {
            self.check_history(commit).await?;
        }
        self.note_load(&planned);
        if self.keep_watch_cache(&planned).await {
            // A new cache counts from zero: the next pass is a full one.
            changes = None;
        }
        let revision = planned.plan.revision.as_ref().map(|r| r.to_string());
        self.observers.show_plan(&planned, self.reconciler.keys());
        if self
            .memory
            .reports_drift_only(self.settings.drift, commit.as_deref())
        {
            return Ok(self.report_drift(&planned, revision).await);
        }
        if let Some(commit) = self.say_progressing(&planned, commit.as_deref()).await {
            self.observers.taken_up(commit, &planned, &others).await;
        }
        // A source that reports drift still applies a new commit whole.
        let options = ApplyOptions {
            correct_drift: self.settings.apply.correct_drift
                || self.settings.drift == DriftPolicy::Report,
            stop: self.stop.pass.clone(),
            fence: self.stop.tenure.clone(),
            ..self.settings.apply.clone()
        };
        let waiting = self.observers.waiting_shown();
        let report = self.reconciler.apply(&planned, &options, &waiting).await?;
        // What it deleted comes back through the watch cache: not drift.
        self.memory.remember_own_deletions(&report);
        if report.stopped {
            tracing::info!(
                applied = report.objects.len(),
                "pass stopped between objects: the Source was deleted or changed"
            );
            return Err(PassError::Stopped);
        }
        self.note_approval(&planned, &report, &options).await;
        self.attest(&planned, &report).await;
        let corrected = self.corrections(&planned, &report).await;
        let cache_synced = self.memory.cache.as_ref().is_some_and(WatchCache::synced);
        self.memory.settled = self.memory.settled_after(
            &report,
            commit.as_deref(),
            changes.filter(|_| cache_synced),
            self.settings.interval,
        );
        self.observers
            .tell_verdict(&planned, verdict(&report))
            .await;
        self.observers.watch_rollout(&planned, &report);
        let own = cluster_state(planned.cluster.display(), Ok(&report));
        let failed = self.apply_others(own, others, &options).await;
        if report.succeeded() && failed.is_empty() {
            self.memory.last_applied = commit;
        }
        let outcome = PassOutcome {
            revision,
            quiet: false,
            report,
            corrected,
            reported: Vec::new(),
        };
        conclude(outcome, failed)
    }

    /// Attests what the apply did, when it changed the cluster and the Source asks
    /// for it. The cluster is as applied whether or not the attestation is kept: a
    /// failure is logged, and the next change is attested again.
    async fn attest(&self, planned: &Planned, report: &ApplyReport) {
        let (Some(secret), Some(key)) = (&self.attestation, &self.attestation_key) else {
            return;
        };
        let places = match secret.places().await {
            Ok(places) => places,
            Err(error) => {
                tracing::warn!(
                    error = %tether_core::error_chain(&error),
                    "the pass's attestation was not kept"
                );
                return;
            }
        };
        match self
            .reconciler
            .attest(planned, report, key, secret.keep, places)
            .await
        {
            Ok(Some(kept)) => tracing::info!(
                attestation = %kept,
                objects = kept.objects,
                signer = %kept.signer,
                "attested"
            ),
            Ok(None) => {}
            Err(error) => tracing::warn!(
                error = %tether_core::error_chain(&error),
                "the pass's attestation was not kept"
            ),
        }
    }

    /// A prune beyond the deletion budget that a person approved, carried out: the log
    /// and an Event say so, with the digest (for an auditor).
    async fn note_approval(
        &mut self,
        planned: &Planned,
        report: &ApplyReport,
        options: &ApplyOptions,
    ) {
        if let Some(hold) = approved_prune(planned, report, options) {
            tracing::warn!(
                digest = %hold.digest,
                deleting = hold.deleting,
                recorded = hold.recorded,
                "a prune beyond the deletion budget carried out, as approved"
            );
            self.observers.status.record_approved(hold).await;
        }
    }

    /// What reading the models brought: who signed them (the log) and how long the
    /// fetch took (a metric).
    fn note_load(&self, planned: &Planned) {
        let loaded = &planned.models.loaded;
        if let Some(verified) = &loaded.verified {
            tracing::info!(%verified, "verified");
        }
        if let Some(took) = loaded.fetch_took {
            self.shared.metrics.fetched(&self.id, took);
        }
    }

    /// The keys this pass reads the models with, read now from the Source's Secrets
    /// (a rotated or removed key counts from this pass on): those that open the
    /// encrypted files, those its commits and its charts must be signed by, and the
    /// one that signs its attestation.
    async fn read_keys(&mut self) -> Result<(), PassError> {
        if let Some(secret) = &self.decryption {
            self.reconciler.set_keys(Arc::new(secret.read().await?));
        }
        if let Some(secret) = &self.verify {
            self.reconciler
                .set_trusted_keys(Arc::new(secret.read().await?));
        }
        if let Some(secret) = &self.verify_charts {
            self.reconciler
                .set_chart_keys(Some(Arc::new(secret.read().await?)));
        }
        if let Some(secret) = &self.attestation {
            self.attestation_key = Some(secret.read().await?);
        }
        Ok(())
    }

    /// The plan of the source's own cluster (the one this daemon reaches itself, or
    /// the first) and those of the others; `None` when Kubernetes is off for it (said
    /// once, not each pass): nothing to do and nothing to retry, the next change of
    /// the source brings the next pass. When the own cluster cannot be planned, the
    /// others are applied all the same.
    async fn plan_unless_dormant(
        &mut self,
    ) -> Result<Option<(Planned, Vec<ClusterPlan>)>, PassError> {
        let caches: BTreeMap<Option<String>, &WatchCache> = self
            .memory
            .cache
            .as_ref()
            .map(|cache| (self.memory.cache_cluster.clone(), cache))
            .into_iter()
            .collect();
        let planned = self
            .reconciler
            .plan_clusters(self.settings.plan, &caches)
            .await;
        let plans = match planned {
            Err(ReconcileError::Dormant(reason)) => {
                if self.memory.dormant.as_ref() != Some(&reason) {
                    tracing::info!(%reason, "Kubernetes is off: nothing is applied");
                }
                self.memory.dormant = Some(reason);
                return Ok(None);
            }
            planned => planned?,
        };
        self.memory.dormant = None;
        let (own, others) = own_and_others(plans.clusters, self.reconciler.own_cluster());
        match own.planned {
            Ok(planned) => {
                self.memory.cache_cluster = planned.cluster.service.clone();
                Ok(Some((planned, others)))
            }
            Err(error) if others.is_empty() => Err(error.into()),
            Err(error) => {
                let own_state = cluster_state(own.cluster.display(), Err(&error));
                let mut failed = vec![own_state.clone()];
                failed.extend(
                    self.apply_others(own_state, others, &self.settings.apply.clone())
                        .await,
                );
                Err(PassError::Clusters {
                    outcome: Box::new(PassOutcome::nothing(None)),
                    failed,
                })
            }
        }
    }

    /// Applies the plans of the other clusters, all at once; records how each
    /// cluster fared (`own` first), and returns the others not ready. Nothing, for a
    /// source of one cluster.
    async fn apply_others(
        &mut self,
        own: ClusterState,
        others: Vec<ClusterPlan>,
        options: &ApplyOptions,
    ) -> Vec<ClusterState> {
        if others.is_empty() {
            return Vec::new();
        }
        let reports = self
            .reconciler
            .apply_clusters(&others, options, &|_, _| {})
            .await;
        // The other clusters are not watched: each pass plans them again.
        self.memory.settled = None;
        let mut states = vec![own];
        for (plan, applied) in others.iter().zip(reports) {
            let result = match (&plan.planned, &applied) {
                (Err(error), _) | (_, Some(Err(error))) => Err(error),
                (Ok(_), Some(Ok(report))) => Ok(report),
                (Ok(_), None) => continue,
            };
            if let Ok(planned) = &plan.planned {
                self.observers
                    .tell_verdict(planned, verdict_of(result))
                    .await;
            }
            states.push(cluster_state(plan.cluster.display(), result));
        }
        // The own cluster's result is the pass's own; the others' are added to it.
        let failed: Vec<ClusterState> = states[1..].iter().filter(|s| !s.ready).cloned().collect();
        for failure in &failed {
            tracing::warn!(cluster = %failure.name, reason = failure.reason, message = %failure.message, "a cluster of the source was not applied");
        }
        let rows: Vec<ClusterRow> = states
            .iter()
            .map(|s| ClusterRow {
                name: s.name.clone(),
                ready: s.ready,
                reason: s.reason.to_string(),
                message: s.message.clone(),
            })
            .collect();
        self.observers
            .show(|views, name| views.clusters(name, rows));
        self.observers.status.record_clusters(states);
        failed
    }

    /// A new commit is being applied: the status says so (once, not on each retry of
    /// the same commit), the log has each change. Returns the commit when it is new.
    async fn say_progressing<'c>(
        &mut self,
        planned: &Planned,
        commit: Option<&'c str>,
    ) -> Option<&'c str> {
        let new = commit.filter(|c| self.memory.is_new_attempt(c));
        if let Some(commit) = new {
            let revision = self.observers.status.revision_name(commit);
            let progressing = PassResult::Progressing { revision };
            self.observers
                .show(|views, name| views.record(name, &progressing, &now(), None));
            self.observers.status.record(&progressing, None).await;
        }
        self.memory.last_attempted = commit.map(str::to_string);
        for change in planned
            .plan
            .changes
            .iter()
            .filter(|c| c.action != Action::Unchanged)
        {
            tracing::debug!(object = %change.key, action = change.action.name(), drift = change.drift, "planned");
        }
        new
    }

    /// A pass with nothing to do, known without reading the models: the remote's ref
    /// still names the commit the last pass applied completely (or stalled on, until
    /// its next retry is due), and the watch cache saw no change (no drift, deletion
    /// or re-listing) since that pass began. Costs one listing of the remote's refs. A
    /// stalled one repeats the refusals it stalled on, so that the status stays.
    async fn quiet_pass(&mut self) -> Option<PassOutcome> {
        let settled = self.memory.settled.as_ref()?;
        let unchanged = self.memory.drifted.is_empty()
            && self
                .memory
                .cache
                .as_ref()
                .is_some_and(|c| c.changes() == settled.changes && c.synced());
        let retry_due = settled
            .stalled
            .as_ref()
            .is_some_and(|s| Instant::now() >= s.retry_at);
        if !unchanged || retry_due {
            return None;
        }
        let commit = settled.commit.clone();
        if self.reconciler.unmoved_commit().await.as_ref() != Some(&commit) {
            return None;
        }
        let report = self
            .memory
            .settled
            .as_ref()
            .and_then(|s| s.stalled.as_ref())
            .map(|s| s.report.clone())
            .unwrap_or_default();
        tracing::Span::current().record("revision", commit.as_str());
        Some(PassOutcome {
            quiet: true,
            report,
            ..PassOutcome::nothing(Some(commit))
        })
    }

    /// Whether `commit` descends from the commit last applied. When it does not (a
    /// force-push, a reset branch), the rewrite is recorded once (a log line, a
    /// metric, an Event and the status) and applied, or refused when the Source says
    /// so.
    async fn check_history(&mut self, commit: &str) -> Result<(), PassError> {
        let Some(from) = self.memory.last_applied.clone() else {
            return Ok(());
        };
        if from == commit
            || self.reconciler.repo().descends_from(commit, &from).await != Some(false)
        {
            return Ok(());
        }
        let rewrite = Rewrite {
            from,
            to: commit.to_string(),
        };
        if self.memory.recorded_rewrite.as_ref() != Some(&rewrite) {
            tracing::warn!(
                from = %rewrite.from,
                to = %rewrite.to,
                refused = self.settings.rewrites == RewritePolicy::Refuse,
                "history rewritten: the ref's new commit does not descend from the one applied"
            );
            self.shared.metrics.history_rewritten(&self.id);
            self.observers.status.record_rewrite(&rewrite).await;
            self.memory.recorded_rewrite = Some(rewrite.clone());
        }
        match self.settings.rewrites {
            RewritePolicy::Apply => Ok(()),
            RewritePolicy::Refuse => Err(PassError::HistoryRewritten(rewrite)),
        }
    }

    /// Starts (or restarts, when the kinds or the namespaces watched changed) the
    /// watch cache; says whether it did.
    async fn keep_watch_cache(&mut self, planned: &Planned) -> bool {
        let kinds: BTreeSet<(String, String)> = planned
            .objects
            .iter()
            .filter(|o| {
                planned
                    .resources()
                    .namespaced(&o.api_version, &o.kind)
                    .is_some()
            })
            .map(|o| (o.api_version.clone(), o.kind.clone()))
            .collect();
        let scope = self.reconciler.watch_scope(planned);
        if self
            .memory
            .cache
            .as_ref()
            .is_some_and(|c| *c.kinds() == kinds && *c.scope() == scope)
        {
            return false;
        }
        let inventory = self.reconciler.inventory();
        let on_change = reporter(inventory.field_manager(), self.drift.0.clone());
        let identity = watch_identity(
            &planned.cluster,
            self.reconciler.own_cluster(),
            self.id.split('/').next().unwrap_or_default(),
            self.reconciler.identity(),
        );
        // The old subscription first: a new one of the same inventory replaces it.
        self.memory.cache = None;
        let watch_as = WatchAs {
            identity: &identity,
            client: planned.client(),
            resources: planned.resources().clone(),
        };
        self.memory.cache = Some(
            self.shared
                .watches
                .subscribe(watch_as, kinds, scope, inventory, on_change),
        );
        true
    }

    /// The drifted objects the apply changed back: an Event on each, a metric, and
    /// the next correction of each backs off.
    async fn corrections(
        &mut self,
        planned: &Planned,
        report: &ApplyReport,
    ) -> Vec<(ObjectKey, String)> {
        let seen = std::mem::take(&mut self.memory.drifted);
        let changes: BTreeMap<&ObjectKey, &Change> =
            planned.plan.changes.iter().map(|c| (&c.key, c)).collect();
        let now = Instant::now();
        let mut corrected = Vec::new();
        for object in &report.objects {
            if !matches!(object.outcome, Outcome::Configured | Outcome::Created) {
                continue;
            }
            let Some(drift) = changes.get(&object.key).and_then(|c| drift_of(c, &seen)) else {
                continue;
            };
            self.memory.backoff.corrected(&object.key, now);
            let note = format!(
                "{} changed fields tether applied; restored from the models",
                drift.manager
            );
            self.observers
                .publish(
                    &self.reconciler,
                    &drift,
                    "DriftCorrected",
                    EventType::Normal,
                    note,
                )
                .await;
            corrected.push((object.key.clone(), drift.manager));
        }
        self.shared
            .metrics
            .drift(&self.id, "corrected", corrected.len() as u64);
        let keys: Vec<ObjectKey> = corrected.iter().map(|(key, _)| key.clone()).collect();
        self.observers
            .show(|views, name| views.corrected(name, &keys, &crate::clock::now()));
        corrected
    }

    /// A source that only reports drift, at the revision it applied: the planned
    /// changes are drift, reported once per object and writer, not applied.
    async fn report_drift(&mut self, planned: &Planned, revision: Option<String>) -> PassOutcome {
        let seen = std::mem::take(&mut self.memory.drifted);
        let mut reported = Vec::new();
        for change in &planned.plan.changes {
            let Some(drift) = drift_of(change, &seen) else {
                continue;
            };
            let note = format!(
                "{} changed fields tether applied; left so (this source reports drift only)",
                drift.manager
            );
            self.observers
                .publish(
                    &self.reconciler,
                    &drift,
                    "DriftDetected",
                    EventType::Warning,
                    note,
                )
                .await;
            reported.push(change.key.clone());
        }
        self.shared
            .metrics
            .drift(&self.id, "reported", reported.len() as u64);
        PassOutcome {
            revision,
            quiet: false,
            report: ApplyReport::default(),
            corrected: Vec::new(),
            reported,
        }
    }
}

/// The prune beyond the deletion budget that this apply carried out: a person approved
/// its digest ([`ApplyOptions::approved_deletions`]), so it was not held.
fn approved_prune<'p>(
    planned: &'p Planned,
    report: &ApplyReport,
    options: &ApplyOptions,
) -> Option<&'p PruneHold> {
    let hold = planned.plan.prune_hold.as_ref()?;
    (options.prune && !report.stopped && report.prune_held.is_none()).then_some(hold)
}

/// The plan of the cluster this daemon reaches itself (the only one, or the
/// KubernetesService `own_name`), else the first; and the others.
/// Who a Source's watches are shared with: the Sources that reach the same cluster as
/// the same user. The daemon's own cluster is one for all; another is reached through
/// the Cluster resources of the Source's namespace, so its name means that cluster only
/// there.
fn watch_identity(
    cluster: &ClusterName,
    own_name: Option<&str>,
    source_namespace: &str,
    user: Option<&str>,
) -> String {
    let user = user.unwrap_or("the daemon's identity");
    match (&cluster.service, cluster.several) {
        (Some(service), true) if own_name != Some(service.as_str()) => {
            format!("cluster {service} of namespace {source_namespace} as {user}")
        }
        _ => format!("the daemon's cluster as {user}"),
    }
}

fn own_and_others(
    mut clusters: Vec<ClusterPlan>,
    own_name: Option<&str>,
) -> (ClusterPlan, Vec<ClusterPlan>) {
    let own = clusters
        .iter()
        .position(|c| !c.cluster.several || c.cluster.service.as_deref() == own_name)
        .unwrap_or(0);
    let own = clusters.remove(own);
    (own, clusters)
}

/// The drift a planned change undoes, if any: fields written in place by others on an
/// object this inventory applied (the plan says so, and names them), or an object
/// someone deleted (the watch saw it) that is made again.
fn drift_of(change: &Change, seen: &BTreeMap<ObjectKey, Drift>) -> Option<Drift> {
    if change.drift {
        let managers: BTreeSet<&str> = change
            .conflicts
            .iter()
            .map(|c| c.manager.as_str())
            .collect();
        let reference = seen.get(&change.key).map_or_else(
            || ObjectReference {
                api_version: Some(change.api_version.clone()),
                kind: Some(change.key.kind.clone()),
                name: Some(change.key.name.clone()),
                namespace: change.key.namespace.clone(),
                ..ObjectReference::default()
            },
            |d| d.reference.clone(),
        );
        return Some(Drift {
            key: change.key.clone(),
            manager: managers.into_iter().collect::<Vec<_>>().join(", "),
            deleted: false,
            reference,
        });
    }
    match change.action {
        Action::Create => seen.get(&change.key).cloned(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::plan::FieldConflict;

    #[test]
    fn watches_are_shared_by_cluster_and_user_and_another_cluster_is_its_namespaces() {
        let cluster = |service: Option<&str>, several| ClusterName {
            service: service.map(str::to_string),
            several,
        };
        let own = watch_identity(&cluster(Some("core"), false), Some("core"), "team-a", None);
        assert_eq!(
            own,
            watch_identity(&cluster(None, false), Some("core"), "team-b", None)
        );
        assert_eq!(
            own,
            watch_identity(&cluster(Some("core"), true), Some("core"), "team-b", None)
        );
        let as_team = watch_identity(
            &cluster(None, false),
            None,
            "team-a",
            Some("system:serviceaccount:team-a:tether"),
        );
        assert_ne!(own, as_team, "another user sees what it may see");
        // "edge" of two namespaces may be two clusters.
        let edge_a = watch_identity(&cluster(Some("edge"), true), Some("core"), "team-a", None);
        let edge_b = watch_identity(&cluster(Some("edge"), true), Some("core"), "team-b", None);
        assert_ne!(edge_a, edge_b);
        assert_ne!(edge_a, own);
    }

    fn change(action: Action, drift: bool, managers: &[&str]) -> Change {
        Change {
            wave: Some(0),
            conflicts: managers
                .iter()
                .map(|m| FieldConflict {
                    manager: (*m).into(),
                    field: ".data.key".into(),
                })
                .collect(),
            drift,
            ..Change::new(
                ObjectKey::new("v1", "ConfigMap", Some("team"), "settings"),
                "v1".into(),
                action,
            )
        }
    }

    #[test]
    fn the_plan_names_the_drift_it_undoes_whether_or_not_the_watch_saw_it_first() {
        let none = BTreeMap::new();
        let patched = change(
            Action::Conflict,
            true,
            &["kubectl-patch", "kubectl-edit", "kubectl-patch"],
        );
        let drift = drift_of(&patched, &none).unwrap();
        assert_eq!(drift.manager, "kubectl-edit, kubectl-patch");
        assert_eq!(drift.reference.name.as_deref(), Some("settings"));
        // Another applier's fields are a conflict, not drift; a plain update neither.
        assert!(drift_of(&change(Action::Conflict, false, &["helm"]), &none).is_none());
        assert!(drift_of(&change(Action::Update, false, &[]), &none).is_none());
        // A deleted object made again: drift only when the watch saw the deletion.
        let created = change(Action::Create, false, &[]);
        assert!(drift_of(&created, &none).is_none());
        let seen = BTreeMap::from([(
            created.key.clone(),
            Drift {
                key: created.key.clone(),
                manager: "a deletion".into(),
                deleted: true,
                reference: ObjectReference::default(),
            },
        )]);
        assert_eq!(drift_of(&created, &seen).unwrap().manager, "a deletion");
    }
}
