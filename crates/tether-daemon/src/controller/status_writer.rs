//! A Source's status and Events, written by its loop: the status when a pass changed
//! it (never for a pass that found nothing to do; computed by
//! [`crate::source_status`]), a warning Event on a refusal, a rewritten history, or a
//! part of the Source that cannot start. Only while the loop's tenure holds: once
//! this replica's Lease lapsed, the Source may be another replica's, and so is its
//! status (a pass refused by the fence would otherwise say so there for minutes).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use tether_api::source_spec::{ClusterStatus, HistoryRewrite, Source, SourceStatus};
use tether_core::inventory::budget::PruneHold;
use tether_engine::cluster::Tenure;

use crate::clock::now;
use crate::shared::event_reporter;
use crate::source_loop::{ClusterState, Rewrite, StatusSink};
use crate::source_status::revision_name;
use crate::source_status::{PassResult, next_status, refusal_event, worth_writing};

/// Writes a Source's status when a pass changed it (never for a pass that found
/// nothing to do), and records Events on the Source.
pub(super) struct SourceStatusWriter {
    api: Api<Source>,
    name: String,
    reference: Option<String>,
    generation: Option<i64>,
    status: SourceStatus,
    /// Events on the Source (kube's recorder: a repeated Event is one with a count).
    events: Recorder,
    regarding: ObjectReference,
    /// A rewrite seen and not yet written in the status: the next write carries it.
    rewrite: Option<HistoryRewrite>,
    /// How each cluster fared in the last pass, for the next write.
    clusters: Option<Vec<ClusterState>>,
    /// The tenure of this replica's Lease the loop runs in: it writes only in it.
    tenure: Tenure,
}

/// The part of the Source's status its passes write: the image policies' part is
/// the image automation's, the last revert the revert's, and the owner the claim's, so a pass's patch never
/// carries (nor puts back) an older copy of them.
fn passes_status(source: &Source) -> SourceStatus {
    let mut status = source.status.clone().unwrap_or_default();
    status.images.clear();
    status.images_summary = None;
    status.last_revert = None;
    status.owner = None;
    status.owner_since = None;
    status
}

impl SourceStatusWriter {
    pub(super) fn new(client: &Client, source: &Source, tenure: Tenure) -> Self {
        let reporter = event_reporter();
        SourceStatusWriter {
            api: Api::namespaced(client.clone(), &source.namespace().unwrap_or_default()),
            name: source.name_any(),
            reference: source.spec.reference.clone(),
            generation: source.metadata.generation,
            status: passes_status(source),
            events: Recorder::new(client.clone(), reporter),
            regarding: source.object_ref(&()),
            rewrite: None,
            clusters: None,
            tenure,
        }
    }

    /// A warning Event on the Source (`kubectl describe source`).
    pub(super) async fn warn(&self, reason: &str, note: String) {
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Configure".into(),
            secondary: None,
        };
        if let Err(error) = self.events.publish(&event, &self.regarding).await {
            tracing::warn!(%error, reason, "cannot record the Source's event");
        }
    }
}

/// How a cluster fared, as a Source's status says it.
fn cluster_status(state: &ClusterState) -> ClusterStatus {
    ClusterStatus {
        name: state.name.clone(),
        ready: match state.ready {
            true => "True",
            false => "False",
        }
        .to_string(),
        reason: state.reason.to_string(),
        message: state.message.clone(),
    }
}

impl StatusSink for SourceStatusWriter {
    fn revision_name(&self, commit: &str) -> String {
        revision_name(self.reference.as_deref(), commit)
    }

    async fn record(&mut self, result: &PassResult<'_>, handled_request: Option<String>) {
        let mut next = next_status(&self.status, self.generation, result, &now());
        if handled_request.is_some() {
            next.last_handled_reconcile_at = handled_request;
        }
        if let Some(rewrite) = &self.rewrite {
            next.last_history_rewrite = Some(rewrite.clone());
        }
        if let Some(clusters) = &self.clusters {
            next.clusters = clusters.iter().map(cluster_status).collect();
        }
        if !worth_writing(&self.status, &next) {
            return;
        }
        if !self.tenure.holds() {
            tracing::debug!("this replica's tenure ended: the Source's status is its next owner's");
            return;
        }
        let patch = serde_json::json!({ "status": next });
        match self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.status = next;
                self.rewrite = None;
            }
            Err(error) => tracing::warn!(%error, "cannot write the Source's status"),
        }
        // Said once per change of the status, not on each pass that repeats it.
        if let Some((reason, note)) = refusal_event(result) {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(note),
                action: "Apply".into(),
                secondary: None,
            };
            if let Err(error) = self.events.publish(&event, &self.regarding).await {
                tracing::warn!(%error, reason, "cannot record the refusal's event");
            }
        }
    }

    async fn record_approved(&mut self, hold: &PruneHold) {
        let event = KubeEvent {
            type_: EventType::Normal,
            reason: "PruneApproved".into(),
            note: Some(format!(
                "pruned {} of {} recorded objects, beyond the deletion budget, as approved by {}",
                hold.deleting, hold.recorded, hold.digest
            )),
            action: "Prune".into(),
            secondary: None,
        };
        if let Err(error) = self.events.publish(&event, &self.regarding).await {
            tracing::warn!(%error, "cannot record the PruneApproved event");
        }
    }

    fn record_clusters(&mut self, clusters: Vec<ClusterState>) {
        self.clusters = Some(clusters);
    }

    async fn record_rewrite(&mut self, rewrite: &Rewrite) {
        let (from, to) = (
            self.revision_name(&rewrite.from),
            self.revision_name(&rewrite.to),
        );
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: "HistoryRewritten".into(),
            note: Some(format!(
                "the ref moved from {from} to {to}, which does not descend from it (a force-push?)"
            )),
            action: "Fetch".into(),
            secondary: None,
        };
        if let Err(error) = self.events.publish(&event, &self.regarding).await {
            tracing::warn!(%error, "cannot record the HistoryRewritten event");
        }
        self.rewrite = Some(HistoryRewrite {
            from,
            to,
            time: now(),
        });
    }
}
