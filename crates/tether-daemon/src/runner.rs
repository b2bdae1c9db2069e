//! One source, reconciled continuously: a pass plans and applies (and prunes, when
//! asked); the next pass comes after the interval (with jitter), at once when
//! something triggers it (a saved model file, a webhook, a requested reconcile), or
//! when a watch sees drift on an object the source applied. Each pass is recorded:
//! metrics, the Source's status, and an Event on each object whose drift it
//! corrected or reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Shared;
use super::clock::now;
use super::crd::{DriftPolicy, RewritePolicy};
use super::drift::{CorrectionBackoff, Drift, reporter};
use super::keys::{DecryptionKeysError, DecryptionSecret};
use super::status::{PassResult, objects_failed};
use super::web::views::{Handle, LastPlan, Shown, SourceName, Views, blocked_on};
use tether_core::k8s::ObjectKey;
use tether_core::plan::{Action, Change};
use tether_core::source::is_model_path;
use tether_engine::driver::{Backoff, Loop, Schedule, drive};
use tether_engine::reconcile::{
    ApplyOptions, ApplyProgress, ApplyReport, ClusterName, ClusterPlan, Outcome, PlanOptions,
    Planned, ReconcileError, Reconciler, Tenure, WatchAs, WatchCache,
};
use tether_web::ClusterRow;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use super::{Trigger, event_reporter};
use crate::feedback::{Draft, SourceFeedback, Verdict, notices_of_apply};
use tether_core::feedback::notice::NoticeKind;

/// Where a loop records each pass's result for its users (a Source's status).
pub trait StatusSink: Send {
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
    /// How each cluster of a source whose models name several fared in the last
    /// pass (the status's next write).
    fn record_clusters(&mut self, clusters: Vec<ClusterState>);
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

/// No status beyond metrics and logs (a source from flags).
pub struct NoStatus;

impl StatusSink for NoStatus {
    fn revision_name(&self, commit: &str) -> String {
        commit.to_string()
    }

    async fn record(&mut self, _: &PassResult<'_>, _: Option<String>) {}

    async fn record_rewrite(&mut self, _: &Rewrite) {}

    fn record_clusters(&mut self, _: Vec<ClusterState>) {}
}

/// Where a source's models come from, as the daemon's endpoints show it (webhooks
/// find their sources by it).
#[derive(Clone, Debug, Default)]
pub struct Origin {
    /// The Git repository's URL; `None` for a directory.
    pub url: Option<String>,
    pub reference: Option<String>,
}

/// After a change, how long more changes are gathered into the same pass: saving
/// several files at once, or a burst of webhooks, is one pass. Short, since it is
/// the least time from a push to its apply.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// One source, reconciled pass after pass.
pub struct SourceLoop<S = NoStatus> {
    id: String,
    reconciler: Reconciler,
    plan: PlanOptions,
    apply: ApplyOptions,
    drift_policy: DriftPolicy,
    rewrite_policy: RewritePolicy,
    interval: Duration,
    triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
    drift: (mpsc::Sender<Drift>, mpsc::Receiver<Drift>),
    /// The watch cache of the kinds the source applies (started after the first
    /// plan, which finds them): passes plan from it, and it reports drift.
    cache: Option<WatchCache>,
    /// Drift seen since the last pass, by object.
    drifted: BTreeMap<ObjectKey, Drift>,
    backoff: CorrectionBackoff,
    /// A requested reconcile the next pass handles.
    requested: Option<String>,
    /// The commit last applied without error.
    last_applied: Option<String>,
    /// The commit the last pass began to apply: the status says "progressing" only
    /// when a pass takes up a new one, not on each retry of the same.
    last_attempted: Option<String>,
    /// The last rewrite recorded, so that each is recorded once, not on each retry.
    recorded_rewrite: Option<Rewrite>,
    /// Stops the pass in progress between objects (the Source deleted or changed).
    stop_pass: CancellationToken,
    /// The tenure of the replica's Lease the loop runs in: once it ends, a pass in
    /// progress stops between objects as on `stop_pass`.
    tenure: Tenure,
    /// Why Kubernetes is off for the source, as last said (said once, not each pass).
    dormant: Option<String>,
    /// The commit of the last pass that applied everything (or stalled on refusals),
    /// with the watch cache's change count when it began: the state a quiet pass
    /// checks against.
    settled: Option<Settled>,
    /// File changes of a models directory (the watcher is kept alive beside it).
    directory: Option<notify::RecommendedWatcher>,
    shared: Arc<Shared>,
    status: S,
    recorder: Option<Recorder>,
    /// Becomes true when the first pass has finished (whatever its result).
    first_pass: tokio::sync::watch::Sender<bool>,
    /// Where the keys of the encrypted files are read before each pass that loads
    /// the models (a Source's decryption Secret).
    decryption: Option<DecryptionSecret>,
    /// The KubernetesService whose cluster `cache` watches.
    cache_cluster: Option<String>,
    /// How the web page shows the source and acts for it (none: not shown).
    shown: Option<Shown>,
    /// Where commit statuses and notices go (none: nowhere beyond the status).
    feedback: Option<Arc<SourceFeedback>>,
}

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
    fn nothing(revision: Option<String>) -> Self {
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
    #[error("{} objects failed; retrying", .0.report.failures().count())]
    ObjectsFailed(Box<PassOutcome>),
    /// The keys of the encrypted files could not be read: nothing was applied.
    #[error(transparent)]
    DecryptionKeys(#[from] DecryptionKeysError),
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

impl<S: StatusSink> SourceLoop<S> {
    /// A loop that records each pass's result in `status`.
    pub fn new(
        id: &str,
        reconciler: Reconciler,
        plan: PlanOptions,
        apply: ApplyOptions,
        interval: Duration,
        shared: Arc<Shared>,
        status: S,
    ) -> Self {
        SourceLoop {
            id: id.to_string(),
            reconciler,
            plan,
            apply,
            drift_policy: DriftPolicy::Correct,
            rewrite_policy: RewritePolicy::Apply,
            interval,
            // One pending trigger is enough: a pass reads the whole source.
            triggers: mpsc::channel(1),
            drift: mpsc::channel(256),
            cache: None,
            drifted: BTreeMap::new(),
            backoff: CorrectionBackoff::default(),
            requested: None,
            last_applied: None,
            last_attempted: None,
            recorded_rewrite: None,
            stop_pass: CancellationToken::new(),
            tenure: shared.fence.tenure(),
            dormant: None,
            settled: None,
            directory: None,
            shared,
            status,
            recorder: None,
            first_pass: tokio::sync::watch::Sender::new(false),
            decryption: None,
            cache_cluster: None,
            shown: None,
            feedback: None,
        }
    }

    /// Takes its triggers from this channel (made before the loop, so that a trigger
    /// sent while it starts is not lost).
    pub fn with_triggers(
        mut self,
        triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
    ) -> Self {
        self.triggers = triggers;
        self
    }

    pub fn with_drift_policy(mut self, policy: DriftPolicy) -> Self {
        self.drift_policy = policy;
        self
    }

    pub fn with_rewrite_policy(mut self, policy: RewritePolicy) -> Self {
        self.rewrite_policy = policy;
        self
    }

    /// Starts from the commit an earlier process applied (the Source's status), so
    /// that a rewrite made while no daemon ran is still seen.
    pub fn with_last_applied(mut self, commit: Option<String>) -> Self {
        self.last_applied = commit;
        self
    }

    /// Knows `rewrite` as recorded already (by an earlier loop of the Source, in its
    /// status), so that it is not recorded again.
    pub fn with_recorded_rewrite(mut self, rewrite: Option<Rewrite>) -> Self {
        self.recorded_rewrite = rewrite;
        self
    }

    /// Shows the source on the web page.
    pub fn shown_as(mut self, shown: Shown) -> Self {
        self.shown = Some(shown);
        self
    }

    /// Tells how each commit fared through `feedback` (commit statuses, notices).
    pub fn with_feedback(mut self, feedback: Option<Arc<SourceFeedback>>) -> Self {
        self.feedback = feedback;
        self
    }

    /// Stops a pass in progress as soon as `stop` is cancelled: a plan is dropped,
    /// an apply stops between objects, and the pass records nothing. Its applies
    /// stop so too once `tenure` ends.
    pub fn with_pass_stop(mut self, stop: CancellationToken, tenure: Tenure) -> Self {
        self.stop_pass = stop;
        self.tenure = tenure;
        self
    }

    /// Records its Events (drift corrected or reported) through `client`: the
    /// daemon's own, when the reconciler acts as a Source's ServiceAccount, which
    /// need not be allowed to write Events.
    pub fn with_events_by(mut self, client: kube::Client) -> Self {
        self.recorder = Some(Recorder::new(client, event_reporter()));
        self
    }

    /// Opens the encrypted files with the keys of `secret`, read before each pass.
    pub fn with_decryption(mut self, secret: DecryptionSecret) -> Self {
        self.decryption = Some(secret);
        self
    }

    /// Runs the loop until `shutdown`, registered with the daemon's endpoints
    /// (webhooks, requests, the source list) meanwhile; each pass's outcome goes to
    /// `observe`. The one way a source runs: `tether run` runs one from flags with it,
    /// the controller each Source. On shutdown, a pass in progress may finish within
    /// `grace`.
    pub async fn run(
        mut self,
        origin: Origin,
        grace: Duration,
        shutdown: &CancellationToken,
        observe: impl FnMut(&Result<PassOutcome, PassError>),
    ) {
        let shared = self.shared.clone();
        let id = self.id.clone();
        if let Some(shown) = &self.shown {
            let handle = Handle {
                trigger: self.trigger(),
                writeback: shown.writeback.clone(),
                url: origin.url.clone(),
                reference: origin.reference.clone(),
                path: shown.path.clone(),
            };
            shared.views.register(&shown.name, handle);
        }
        shared.register(
            &id,
            origin.url,
            origin.reference,
            self.interval,
            self.trigger(),
        );
        let schedule = Schedule {
            name: "source",
            debounce: DEBOUNCE,
            backoff: Backoff::pass(),
            grace,
        };
        drive(&mut self, &schedule, shutdown, observe).await;
        shared.unregister(&id);
        if let Some(shown) = &self.shown {
            shared.views.unregister(&shown.name);
        }
    }

    /// Says when the first pass has finished: work that can wait (discovery's first
    /// large commit) starts then, so that start-up does not hold both at once.
    pub fn first_pass(&self) -> tokio::sync::watch::Receiver<bool> {
        self.first_pass.subscribe()
    }

    /// The inventory the source records in.
    pub fn inventory(&self) -> &tether_core::ownership::Inventory {
        self.reconciler.inventory()
    }

    /// Where webhooks and requests send their triggers.
    pub fn trigger(&self) -> mpsc::Sender<Trigger> {
        self.triggers.0.clone()
    }

    /// Also pass as soon as a model file (or the settings file) under `directory`
    /// changes. Editors' temporary and backup files are ignored.
    pub fn watch_directory(mut self, directory: &Path) -> Result<Self, notify::Error> {
        let sender = self.triggers.0.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let Ok(event) = event else {
                    return;
                };
                let relevant = !matches!(event.kind, EventKind::Access(_))
                    && event.paths.iter().any(|p| is_models_change(p.as_path()));
                if relevant {
                    let _ = sender.try_send(Trigger::Changed);
                }
            })?;
        watcher.watch(directory, RecursiveMode::Recursive)?;
        self.directory = Some(watcher);
        Ok(self)
    }

    /// One pass: a quiet one when nothing can have changed; else plan, then report
    /// drift or apply, each step's decision a named function below.
    async fn reconcile(&mut self, requested: bool) -> Result<PassOutcome, PassError> {
        if !requested && let Some(quiet) = self.quiet_pass().await {
            return Ok(quiet);
        }
        if let Some(secret) = &self.decryption {
            self.reconciler.set_keys(Arc::new(secret.read().await?));
        }
        // Changes seen from here on make the next pass a full one.
        let mut changes = self.cache.as_ref().map(WatchCache::changes);
        // A plan only reads (its dry runs change nothing): stopping drops it at once.
        let stop = self.stop_pass.clone();
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
        if let Some(took) = planned.models.loaded.fetch_took {
            self.shared.metrics.fetched(&self.id, took);
        }
        if self.keep_watch_cache(&planned).await {
            // A new cache counts from zero: the next pass is a full one.
            changes = None;
        }
        let revision = planned.plan.revision.as_ref().map(|r| r.to_string());
        self.show_plan(&planned);
        if reports_drift_only(
            self.drift_policy,
            commit.as_deref(),
            self.last_applied.as_deref(),
        ) {
            return Ok(self.report_drift(&planned, revision).await);
        }
        if let Some(commit) = self.say_progressing(&planned, commit.as_deref()).await {
            taken_up(self.feedback.clone(), commit, &planned, &others).await;
        }
        // A source that reports drift still applies a new commit whole.
        let options = ApplyOptions {
            correct_drift: self.apply.correct_drift || self.drift_policy == DriftPolicy::Report,
            stop: self.stop_pass.clone(),
            fence: self.tenure.clone(),
            ..self.apply.clone()
        };
        let waiting = self.waiting_shown();
        let report = self.reconciler.apply(&planned, &options, &waiting).await?;
        if report.stopped {
            tracing::info!(
                applied = report.objects.len(),
                "pass stopped between objects: the Source was deleted or changed"
            );
            return Err(PassError::Stopped);
        }
        let corrected = self.corrections(&planned, &report).await;
        let cache_synced = self.cache.as_ref().is_some_and(WatchCache::synced);
        let previous = self.settled.take();
        self.settled = settled_after(
            &report,
            commit.as_deref(),
            changes.filter(|_| cache_synced),
            previous.as_ref(),
            self.interval,
        );
        tell_verdict(self.feedback.clone(), &planned, verdict(&report)).await;
        let own = cluster_state(planned.cluster.display(), Ok(&report));
        let failed = self.apply_others(own, others, &options).await;
        if report.succeeded() && failed.is_empty() {
            self.last_applied = commit;
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

    /// The plan of the source's own cluster (the one this daemon reaches itself, or
    /// the first) and those of the others; `None` when Kubernetes is off for it (said
    /// once, not each pass): nothing to do and nothing to retry, the next change of
    /// the source brings the next pass. When the own cluster cannot be planned, the
    /// others are applied all the same.
    async fn plan_unless_dormant(
        &mut self,
    ) -> Result<Option<(Planned, Vec<ClusterPlan>)>, PassError> {
        let caches: BTreeMap<Option<String>, &WatchCache> = self
            .cache
            .as_ref()
            .map(|cache| (self.cache_cluster.clone(), cache))
            .into_iter()
            .collect();
        let planned = self.reconciler.plan_clusters(self.plan, &caches).await;
        let plans = match planned {
            Err(ReconcileError::Dormant(reason)) => {
                if self.dormant.as_ref() != Some(&reason) {
                    tracing::info!(%reason, "Kubernetes is off: nothing is applied");
                }
                self.dormant = Some(reason);
                return Ok(None);
            }
            planned => planned?,
        };
        self.dormant = None;
        let (own, others) = own_and_others(plans.clusters, self.reconciler.own_cluster());
        match own.planned {
            Ok(planned) => {
                self.cache_cluster = planned.cluster.service.clone();
                Ok(Some((planned, others)))
            }
            Err(error) if others.is_empty() => Err(error.into()),
            Err(error) => {
                let own_state = cluster_state(own.cluster.display(), Err(&error));
                let mut failed = vec![own_state.clone()];
                failed.extend(
                    self.apply_others(own_state, others, &self.apply.clone())
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
        self.settled = None;
        let mut states = vec![own];
        for (plan, applied) in others.iter().zip(reports) {
            let result = match (&plan.planned, &applied) {
                (Err(error), _) | (_, Some(Err(error))) => Err(error),
                (Ok(_), Some(Ok(report))) => Ok(report),
                (Ok(_), None) => continue,
            };
            if let Ok(planned) = &plan.planned {
                tell_verdict(self.feedback.clone(), planned, verdict_of(result)).await;
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
        self.show(|views, name| views.clusters(name, rows));
        self.status.record_clusters(states);
        failed
    }

    /// A new commit is being applied: the status says so (once, not on each retry of
    /// the same commit), the log has each change. Returns the commit when it is new.
    async fn say_progressing<'c>(
        &mut self,
        planned: &Planned,
        commit: Option<&'c str>,
    ) -> Option<&'c str> {
        let new = commit.filter(|c| {
            is_new_attempt(
                c,
                self.last_applied.as_deref(),
                self.last_attempted.as_deref(),
            )
        });
        if let Some(commit) = new {
            let revision = self.status.revision_name(commit);
            let progressing = PassResult::Progressing { revision };
            self.show(|views, name| views.record(name, &progressing, &now(), None));
            self.status.record(&progressing, None).await;
        }
        self.last_attempted = commit.map(str::to_string);
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
        let settled = self.settled.as_ref()?;
        let unchanged = self.drifted.is_empty()
            && self
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
        let Some(from) = self.last_applied.clone() else {
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
        if self.recorded_rewrite.as_ref() != Some(&rewrite) {
            tracing::warn!(
                from = %rewrite.from,
                to = %rewrite.to,
                refused = self.rewrite_policy == RewritePolicy::Refuse,
                "history rewritten: the ref's new commit does not descend from the one applied"
            );
            self.shared.metrics.history_rewritten(&self.id);
            self.status.record_rewrite(&rewrite).await;
            self.recorded_rewrite = Some(rewrite.clone());
        }
        match self.rewrite_policy {
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
        self.cache = None;
        let watch_as = WatchAs {
            identity: &identity,
            client: planned.client(),
            resources: planned.resources().clone(),
        };
        self.cache = Some(
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
        let seen = std::mem::take(&mut self.drifted);
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
            self.backoff.corrected(&object.key, now);
            let note = format!(
                "{} changed fields tether applied; restored from the models",
                drift.manager
            );
            self.publish(&drift, "DriftCorrected", EventType::Normal, note)
                .await;
            corrected.push((object.key.clone(), drift.manager));
        }
        self.shared
            .metrics
            .drift(&self.id, "corrected", corrected.len() as u64);
        let keys: Vec<ObjectKey> = corrected.iter().map(|(key, _)| key.clone()).collect();
        self.show(|views, name| views.corrected(name, &keys, &super::clock::now()));
        corrected
    }

    /// A source that only reports drift, at the revision it applied: the planned
    /// changes are drift, reported once per object and writer, not applied.
    async fn report_drift(&mut self, planned: &Planned, revision: Option<String>) -> PassOutcome {
        let seen = std::mem::take(&mut self.drifted);
        let mut reported = Vec::new();
        for change in &planned.plan.changes {
            let Some(drift) = drift_of(change, &seen) else {
                continue;
            };
            let note = format!(
                "{} changed fields tether applied; left so (this source reports drift only)",
                drift.manager
            );
            self.publish(&drift, "DriftDetected", EventType::Warning, note)
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

    async fn publish(&mut self, drift: &Drift, reason: &str, type_: EventType, note: String) {
        if self.recorder.is_none() {
            let Ok(client) = self.reconciler.client().await else {
                return;
            };
            self.recorder = Some(Recorder::new(client.clone(), event_reporter()));
        }
        let Some(recorder) = &self.recorder else {
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

    /// Records a pass's result in the status.
    async fn record(
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
    fn show(&self, tell: impl FnOnce(&Views, &SourceName)) {
        if let Some(shown) = &self.shown {
            tell(&self.shared.views, &shown.name);
        }
    }

    /// What an apply tells the page while a wave waits: what it is blocked on.
    fn waiting_shown(&self) -> impl Fn(ApplyProgress<'_>) + Sync + use<S> {
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

    /// The page's view of a plan of the source's own cluster.
    fn show_plan(&self, planned: &Planned) {
        self.show(|views, name| {
            let last = LastPlan {
                plan: planned.plan.clone(),
                workflow: planned.workflow.clone(),
                models: planned.models.clone(),
            };
            views.planned(name, last, planned.client().clone(), self.reconciler.keys());
        });
    }
}

/// What the status says of a pass's result; nothing of a stopped pass (its Source is
/// gone or changed: the status is the next loop's, if any).
fn pass_result<'r>(
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
            let revision = match error {
                ReconcileError::Invalid(models) => models.loaded.revision.as_ref(),
                _ => None,
            };
            PassResult::Failed {
                revision: name(revision.map(|r| r.commit.as_str())),
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

/// What a cluster's apply says of its commit: applied (ready once its rollout is),
/// failed for good (a blocked wave at its timeout, a refused object), or failed for
/// now (a retry soon may bring it).
fn verdict(report: &ApplyReport) -> Verdict {
    if let Some(blocked) = &report.blocked {
        let blockers = blocked.blockers.iter().map(|b| (&b.key, b.state.as_str()));
        return Verdict::Failed(format!("blocked: {}", blocked_on(blocked.wave, blockers)));
    }
    match (report.succeeded(), retries_soon(report)) {
        (true, _) => Verdict::Applied,
        (false, true) => Verdict::Retrying,
        (false, false) => Verdict::Failed(crate::status::objects_failed(report)),
    }
}

/// The commit a pass failed before it was planned, and why: invalid models (their
/// first errors, with file and line), or a rewritten history the Source refuses.
fn failed_early(result: &Result<PassOutcome, PassError>) -> Option<(String, String)> {
    match result {
        Err(PassError::Reconcile(error @ ReconcileError::Invalid(models))) => {
            let commit = models.loaded.revision.as_ref()?.commit.clone();
            Some((commit, error.to_string()))
        }
        Err(error @ PassError::HistoryRewritten(rewrite)) => {
            Some((rewrite.to.clone(), error.to_string()))
        }
        _ => None,
    }
}

/// A new commit is taken up on the plan's clusters: pending in each.
async fn taken_up(
    feedback: Option<Arc<SourceFeedback>>,
    commit: &str,
    planned: &Planned,
    others: &[ClusterPlan],
) {
    let Some(feedback) = feedback else {
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
async fn tell_verdict(feedback: Option<Arc<SourceFeedback>>, planned: &Planned, verdict: Verdict) {
    let commit = planned.plan.revision.as_ref().map(|r| r.commit.as_str());
    let (Some(feedback), Some(commit)) = (feedback, commit) else {
        return;
    };
    let rollout = (verdict == Verdict::Applied).then(|| planned.rollout());
    feedback
        .concluded(commit, status_cluster(&planned.cluster), verdict, rollout)
        .await;
}

/// What another cluster's apply (or the error that kept it from one) says of its
/// commit.
fn verdict_of(result: Result<&ApplyReport, &ReconcileError>) -> Verdict {
    match result {
        Ok(report) => verdict(report),
        Err(error) if error.is_permanent() => Verdict::Failed(tether_core::error_chain(error)),
        Err(_) => Verdict::Retrying,
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
        Err(PassError::Reconcile(ReconcileError::Invalid(models))) => {
            models.loaded.revision.as_ref().map(|r| r.commit.as_str())
        }
        Err(PassError::HistoryRewritten(rewrite)) => Some(&rewrite.to),
        Err(_) => None,
    }
}

/// A pass's result: an error when another cluster failed, or when objects failed
/// that a retry soon may bring.
fn conclude(outcome: PassOutcome, failed: Vec<ClusterState>) -> Result<PassOutcome, PassError> {
    match (retries_soon(&outcome.report), failed.is_empty()) {
        (_, false) => Err(PassError::Clusters {
            outcome: Box::new(outcome),
            failed,
        }),
        (true, true) => Err(PassError::ObjectsFailed(Box::new(outcome))),
        (false, true) => Ok(outcome),
    }
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

/// How a cluster fared, as the status says it. A cluster where Kubernetes is off is
/// ready: nothing is asked of it.
fn cluster_state(name: &str, result: Result<&ApplyReport, &ReconcileError>) -> ClusterState {
    let (ready, reason, message, stalled) = match result {
        Ok(report) if report.succeeded() => (true, "Applied", String::new(), false),
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

/// Whether a pass at `commit` takes up a commit anew: neither the one applied nor the
/// one the last pass tried (a retry of that is not news).
fn is_new_attempt(commit: &str, last_applied: Option<&str>, last_attempted: Option<&str>) -> bool {
    Some(commit) != last_applied && Some(commit) != last_attempted
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
            reference,
        });
    }
    match change.action {
        Action::Create => seen.get(&change.key).cloned(),
        _ => None,
    }
}

/// A model file or the settings file. Editors' temporary and backup files (`.#x.yaml`,
/// `x.yaml~`, `.x.yaml.swp`) are neither: hidden, or not `.yaml`/`.yml`.
fn is_models_change(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    is_model_path(path) || name == tether_engine::repo::SETTINGS_FILE
}

/// Whether the pass only reports drift: the source reports drift rather than
/// correct it, and its commit is the one last applied (a new commit is applied whole).
fn reports_drift_only(
    policy: DriftPolicy,
    commit: Option<&str>,
    last_applied: Option<&str>,
) -> bool {
    policy == DriftPolicy::Report && commit.is_some() && commit == last_applied
}

/// Whether a pass is retried soon (with the driver's backoff) rather than at the next
/// interval: what a wave waits for may be ready later, and some failures pass (the
/// server busy or away). A failed dependency or a refused object waits for a change.
fn retries_soon(report: &ApplyReport) -> bool {
    let waiting = report
        .blocked
        .as_ref()
        .is_some_and(|b| !b.blockers.iter().any(|x| x.failed));
    waiting || report.failures().any(|(_, f)| f.retryable())
}

/// A commit whose pass left nothing to do until something changes.
#[derive(Clone, Debug, PartialEq)]
struct Settled {
    commit: String,
    /// The watch cache's change count when the pass began.
    changes: u64,
    /// The pass stalled on objects the server refused (a conflict, a refusal):
    /// applying them again cannot help until something changes, so the passes in
    /// between are quiet, and a full one comes only when the retry is due.
    stalled: Option<StalledRetry>,
}

#[derive(Clone, Debug, PartialEq)]
struct StalledRetry {
    /// The refusals, which the quiet passes report again.
    report: ApplyReport,
    retry_at: Instant,
    /// The wait before this retry, doubled each time the same commit stalls again.
    delay: Duration,
}

/// The longest wait between two full passes of a commit stalled on refusals (an
/// administrator's fix, such as a raised quota, that no watch sees is applied then).
const STALLED_RETRY_MAX: Duration = Duration::from_secs(300);

/// What the next quiet pass checks against, after a pass at `commit` that began at
/// the synced watch cache's change count `changes` (`None`: not synced, or no cache):
/// a pass that applied everything settles; one that stalled on refusals settles
/// until its retry, which waits one interval after the first stall and twice as long
/// after each stall of the same commit, up to [`STALLED_RETRY_MAX`]. Anything else
/// (a wave waiting, a failure that may pass) leaves the next pass a full one.
fn settled_after(
    report: &ApplyReport,
    commit: Option<&str>,
    changes: Option<u64>,
    previous: Option<&Settled>,
    interval: Duration,
) -> Option<Settled> {
    let (commit, changes) = (commit?, changes?);
    let stalled = match report.succeeded() {
        true => None,
        false if report.blocked.is_none() && !retries_soon(report) && !report.stopped => {
            let delay = previous
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

impl<S: StatusSink> Loop for SourceLoop<S> {
    type Output = PassOutcome;
    type Error = PassError;

    async fn pass(&mut self) -> Result<PassOutcome, PassError> {
        let started = std::time::Instant::now();
        let requested = self.requested.take();
        // The revision is this pass's field, on a span of its own: a field recorded
        // on the source's long-lived span would be kept (and logged) once per pass.
        let span = tracing::info_span!("pass", revision = tracing::field::Empty);
        let result = self.reconcile(requested.is_some()).instrument(span).await;
        if matches!(result, Err(PassError::Stopped)) {
            // The Source is gone or changed: its status and metrics are the next
            // loop's, if any.
            return result;
        }
        let label = match &result {
            Ok(outcome) if outcome.report.succeeded() => "success",
            _ => "failure",
        };
        let report = match &result {
            // A quiet pass applied nothing (a stalled one only repeats its refusals).
            Ok(outcome) if outcome.quiet => None,
            Ok(outcome) => Some(&outcome.report),
            Err(PassError::ObjectsFailed(outcome)) => Some(&outcome.report),
            Err(PassError::Clusters { outcome, .. }) => Some(&outcome.report),
            Err(_) => None,
        };
        self.shared
            .metrics
            .pass(&self.id, label, started.elapsed(), report);
        self.record(&result, requested, started.elapsed()).await;
        self.shared.passed(&self.id);
        self.first_pass.send_replace(true);
        result
    }

    async fn changed(&mut self) {
        // ±10% jitter, so that many sources started together do not pass together.
        let jitter = 0.9 + fastrand::f64() * 0.2;
        let tick = Instant::now() + self.interval.mul_f64(jitter);
        // The one timer of this wait: the interval's tick, moved sooner by drift on an
        // object that is backing off, which waits for its turn.
        let wake = tokio::time::sleep_until(tick);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                () = &mut wake => return,
                Some(trigger) = self.triggers.1.recv() => {
                    if let Trigger::Requested(value) = trigger {
                        self.requested = Some(value);
                    }
                    return;
                }
                Some(drift) = self.drift.1.recv() => {
                    tracing::debug!(object = %drift.key, by = %drift.manager, "drift seen");
                    self.show(|views, name| views.drifted(name, &drift.key, &drift.manager, &now()));
                    let not_before = self.backoff.not_before(&drift.key, Instant::now());
                    self.drifted.insert(drift.key.clone(), drift);
                    match not_before {
                        None => return,
                        Some(at) if at < wake.deadline() => wake.as_mut().reset(at),
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    use tether_core::plan::FieldConflict;
    use tether_engine::reconcile::{BlockedWave, Blocker, ObjectFailure};

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
                reports_drift_only(policy, commit, last_applied),
                expected,
                "{policy:?} {commit:?} {last_applied:?}"
            );
        }
    }

    fn blocked(failed: bool) -> ApplyReport {
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
                is_new_attempt(commit, applied, attempted),
                expected,
                "{commit} {applied:?} {attempted:?}"
            );
        }
    }

    #[test]
    fn a_pass_waiting_for_a_dependency_retries_soon_and_one_that_failed_waits_for_a_change() {
        assert!(!retries_soon(&ApplyReport::default()));
        assert!(retries_soon(&blocked(false)));
        assert!(!retries_soon(&blocked(true)));
    }

    #[test]
    fn only_a_complete_pass_of_a_commit_with_a_synced_cache_settles() {
        let interval = Duration::from_secs(10);
        let done = ApplyReport::default();
        let settled = settled_after(&done, Some("c"), Some(7), None, interval).unwrap();
        assert_eq!(
            (settled.commit.as_str(), settled.changes, settled.stalled),
            ("c", 7, None)
        );
        assert_eq!(settled_after(&done, None, Some(7), None, interval), None);
        assert_eq!(settled_after(&done, Some("c"), None, None, interval), None);
        // A wave waiting, a failure that may pass: the next pass is a full one.
        let waiting = blocked(false);
        assert_eq!(
            settled_after(&waiting, Some("c"), Some(7), None, interval),
            None
        );
        let unreachable = refused(ObjectFailure::Unreachable);
        assert_eq!(
            settled_after(&unreachable, Some("c"), Some(7), None, interval),
            None
        );
    }

    fn refused(failure: ObjectFailure) -> ApplyReport {
        ApplyReport {
            objects: vec![tether_engine::reconcile::ObjectReport {
                key: ObjectKey::new("v1", "ConfigMap", Some("n"), "big"),
                outcome: Outcome::Failed(failure),
            }],
            blocked: None,
            stopped: false,
        }
    }

    #[test]
    fn a_commit_stalled_on_refusals_is_retried_ever_less_often_until_it_changes() {
        let interval = Duration::from_secs(10);
        let report = refused(ObjectFailure::Refused {
            code: 422,
            message: "too large".into(),
        });
        let mut delays = Vec::new();
        let mut previous = None;
        for _ in 0..8 {
            let settled = settled_after(&report, Some("c"), Some(7), previous.as_ref(), interval)
                .expect("a stall settles");
            let stalled = settled.stalled.clone().expect("stalled");
            assert_eq!(
                stalled.report, report,
                "the quiet passes repeat the refusals"
            );
            delays.push(stalled.delay.as_secs());
            previous = Some(settled);
        }
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300, 300]);
        // Another commit stalls anew: one interval.
        let other = settled_after(&report, Some("d"), Some(7), previous.as_ref(), interval);
        assert_eq!(
            other.and_then(|s| s.stalled).map(|s| s.delay),
            Some(interval)
        );
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
                reference: ObjectReference::default(),
            },
        )]);
        assert_eq!(drift_of(&created, &seen).unwrap().manager, "a deletion");
    }

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
