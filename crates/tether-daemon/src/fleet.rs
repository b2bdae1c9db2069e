//! The daemon's report to a fleet hub: its own task, apart from the Sources' loops
//! (reporting never blocks or slows a pass). It watches the Sources (a reflector of
//! its own), and a driven loop writes the report when a Source's status changed
//! (debounced) and at each heartbeat; while the hub is away it retries with a short
//! backoff, and the first request after the hub's return carries the current report.
//! It writes its own cluster's `ClusterReport` (`tether_api::cluster_report`) as a
//! ServiceAccount of the hub whose RBAC lets it write that report only; the hub
//! holds no cluster's credentials (the hub's side is `tether_admin::fleet`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tether_core::fleet::{Counts, Drift, Report, SourceReport, cut};
use tether_engine::cluster::{Target, client_of};
use tether_engine::driver::{Backoff, Loop, Schedule, drive};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::now;
use crate::shared::Shared;
use tether_api::cluster_report::ClusterReport;
use tether_api::source_spec::Source;

/// Where and how often the daemon reports.
#[derive(Clone, Debug)]
pub(crate) struct Reporting {
    /// The hub, as `tether fleet join` made its kubeconfig.
    pub hub: Target,
    /// The hub's namespace of reports.
    pub namespace: String,
    /// This cluster's name: its report's.
    pub cluster: String,
    /// How often the report is written when nothing changes.
    pub heartbeat: Duration,
}

/// After a change of a Source, how long to wait for more before reporting.
const DEBOUNCE: Duration = Duration::from_secs(1);

/// The hub's answer, or its absence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReportError {
    #[error("cannot reach the fleet hub")]
    Client(#[source] tether_engine::cluster::ClusterError),
    #[error("cannot write ClusterReport/{cluster} in the hub's namespace {namespace}")]
    Write {
        cluster: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("the watch of the Sources stopped")]
    Watch,
}

/// What a pass did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The report was written, with this many Sources.
    Report(usize),
    /// Nothing changed since the last report, and no heartbeat is due.
    Nothing,
}

/// Reports the Sources `local` sees (in `namespace`, all: `None`) to the hub until
/// `shutdown`.
pub(crate) async fn run(
    reporting: Reporting,
    local: Client,
    namespace: Option<String>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let api: Api<Source> = match &namespace {
        Some(namespace) => Api::namespaced(local, namespace),
        None => Api::all(local),
    };
    let (store, writer) = reflector::store();
    let changes = Arc::new(Notify::new());
    let watching = {
        let changes = changes.clone();
        let stop = shutdown.clone();
        let events =
            reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(move |event| {
                    if event.is_ok() {
                        changes.notify_one();
                    }
                    std::future::ready(())
                });
        tokio::spawn(async move {
            tokio::select! {
                () = events => {}
                () = stop.cancelled() => {}
            }
        })
    };
    let mut reporter = Reporter {
        reporting,
        hub: None,
        store,
        changes,
        shared,
        last: None,
    };
    let schedule = Schedule {
        name: "fleet report",
        debounce: DEBOUNCE,
        // Short: the hub's return is noticed within seconds.
        backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(5)),
        grace: Duration::from_secs(2),
    };
    drive(&mut reporter, &schedule, &shutdown, |outcome| {
        if let Ok(Sent::Report(sources)) = outcome {
            tracing::debug!(sources, "reported to the fleet hub");
        }
    })
    .await;
    watching.abort();
}

struct Reporter {
    reporting: Reporting,
    /// The hub's reports, made at the first pass (the hub may be away at start).
    hub: Option<Api<ClusterReport>>,
    store: Store<Source>,
    changes: Arc<Notify>,
    shared: Arc<Shared>,
    /// The last report written (without its time), and when.
    last: Option<(Report, Instant)>,
}

impl Reporter {
    /// The report of the Sources now, without its time.
    fn current(&self) -> Report {
        let mut sources: Vec<SourceReport> = self
            .store
            .state()
            .iter()
            .map(|source| {
                let id = format!(
                    "{}/{}",
                    source.namespace().unwrap_or_default(),
                    source.name_any()
                );
                source_report(source, self.shared.metrics.drift_seen(&id))
            })
            .collect();
        sources.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Report {
            reported_at: None,
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
            heartbeat_seconds: Some(self.reporting.heartbeat.as_secs()),
            sources,
        }
    }

    async fn hub(&mut self) -> Result<Api<ClusterReport>, ReportError> {
        if let Some(api) = &self.hub {
            return Ok(api.clone());
        }
        let client = client_of(&self.reporting.hub)
            .await
            .map_err(ReportError::Client)?;
        let api = Api::namespaced(client, &self.reporting.namespace);
        self.hub = Some(api.clone());
        Ok(api)
    }
}

impl Loop for Reporter {
    type Output = Sent;
    type Error = ReportError;

    async fn pass(&mut self) -> Result<Sent, ReportError> {
        // Never a report of no Sources because the watch has not listed them yet.
        self.store
            .wait_until_ready()
            .await
            .map_err(|_| ReportError::Watch)?;
        let report = self.current();
        if let Some((last, at)) = &self.last
            && *last == report
            && at.elapsed() < self.reporting.heartbeat
        {
            return Ok(Sent::Nothing);
        }
        let api = self.hub().await?;
        let sent = Report {
            reported_at: Some(now()),
            ..report.clone()
        };
        // A merge patch of the whole spec: every top-level field is present, and the
        // list of Sources is replaced as a whole.
        let patch = serde_json::json!({ "spec": sent });
        match api
            .patch(
                &self.reporting.cluster,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(source) => {
                // A rotated token (a kubeconfig mounted from a Secret) is read again.
                if matches!(&source, kube::Error::Api(status) if status.code == 401) {
                    self.hub = None;
                }
                return Err(ReportError::Write {
                    cluster: self.reporting.cluster.clone(),
                    namespace: self.reporting.namespace.clone(),
                    source,
                });
            }
        }
        let count = report.sources.len();
        self.last = Some((report, Instant::now()));
        Ok(Sent::Report(count))
    }

    async fn changed(&mut self) {
        let due = match &self.last {
            Some((_, at)) => tokio::time::Instant::from_std(*at + self.reporting.heartbeat),
            None => tokio::time::Instant::now(),
        };
        tokio::select! {
            () = self.changes.notified() => {}
            () = tokio::time::sleep_until(due) => {}
        }
    }
}

/// One Source as its status shows it (already redacted), messages cut.
pub(crate) fn source_report(source: &Source, (corrected, reported): (u64, u64)) -> SourceReport {
    let status = source.status.clone().unwrap_or_default();
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let ready = condition("Ready");
    let is_true = |type_: &str| condition(type_).is_some_and(|c| c.status == "True");
    let blocked_on = ready
        .filter(|c| c.status == "False" && c.reason == "DependencyNotReady")
        .map(|c| cut(&c.message));
    SourceReport {
        namespace: source.namespace().unwrap_or_default(),
        name: source.name_any(),
        wanted: status.last_attempted_revision.as_deref().map(cut),
        applied: status.last_applied_revision.as_deref().map(cut),
        ready: ready.map(|c| c.status.clone()).filter(|s| !s.is_empty()),
        reason: ready.map(|c| cut(&c.reason)).filter(|s| !s.is_empty()),
        message: ready.map(|c| cut(&c.message)).filter(|s| !s.is_empty()),
        stalled: is_true("Stalled"),
        reconciling: is_true("Reconciling"),
        suspended: source.spec.suspend,
        blocked_on,
        counts: status.last_plan.map(|plan| Counts {
            created: plan.created,
            configured: plan.configured,
            unchanged: plan.unchanged,
            pruned: plan.pruned,
            failed: plan.failed,
        }),
        last_success: status.last_success_time,
        drift: Drift {
            corrected,
            reported,
        },
    }
}
