//! [`Planned`]: a plan of one cluster and what carrying it out needs, its [`Step`]s
//! (each change and the object it applies), and the [`Rollout`] it is done with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tether_core::hook::Hook;
use tether_core::inventory::Provenance;
use tether_core::k8s::ObjectKey;
use tether_core::plan::{Change, Plan};
use tether_core::render::RenderedObject;
use tether_core::workflow::Workflow;

use super::checked_models::CheckedModels;
use super::clusters::ClusterName;
use super::outcome::{Blocker, ObjectFailure};
use super::wait;
use crate::cluster::Resources;

/// A plan of one cluster, and what carrying it out needs.
pub struct Planned {
    pub models: Arc<CheckedModels>,
    /// Shared with whoever shows it after the pass (the daemon's page), not copied.
    pub plan: Arc<Plan>,
    /// The rendered objects of this cluster, in apply order.
    pub objects: Vec<RenderedObject>,
    /// Which models wait for which.
    pub workflow: Workflow,
    /// The workflow's members planned, when not all are (a selection, or one
    /// cluster of several).
    pub(super) members: Option<BTreeSet<usize>>,
    /// Only some models were selected: nothing may be pruned.
    pub(super) partial: bool,
    /// The cluster planned, and the client that reaches it.
    pub cluster: ClusterName,
    pub(super) client: Client,
    pub(super) steps: Vec<Step>,
    pub(super) forgotten: BTreeSet<ObjectKey>,
    pub(super) uids: BTreeMap<ObjectKey, String>,
    pub(super) resources: Resources,
    pub(super) allow_empty: bool,
    /// The Argo CD hooks of this cluster's models, run by an apply that changes
    /// something.
    pub hooks: Vec<Hook>,
}

impl Planned {
    /// The body `step` applies (its rendered object, with the hash of what was
    /// applied), made now.
    pub(super) fn desired(&self, step: &Step) -> Option<serde_json::Value> {
        let object = self.objects.get(step.object?)?;
        let mut body = tether_core::plan::with_applied_hash(&object.body);
        tether_core::ignore::pin(&mut body, &step.pins);
        Some(body)
    }

    /// The API resources of the kinds the plan touches (as discovery found them).
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// The client of the cluster planned.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// What the plan's rollout is done with: every object it makes, ready.
    pub fn rollout(&self) -> Rollout {
        Rollout {
            client: self.client.clone(),
            checks: self.models.health.clone(),
            gates: self.workflow.rollout(self.members.as_ref()),
        }
    }
}

/// The objects of a plan and the client that reads them: a rollout, done when each is
/// ready (a Deployment's replicas available, a Job complete; see
/// `tether_core::readiness`).
#[derive(Clone)]
pub struct Rollout {
    client: Client,
    checks: tether_core::health::HealthChecks,
    gates: Vec<tether_core::workflow::WaveGate>,
}

impl Rollout {
    /// Waits until every object is ready; else, at `timeout` or once one failed, the
    /// objects that are not.
    pub async fn wait(&self, timeout: Duration) -> Result<(), Vec<Blocker>> {
        wait::wait_for(
            &self.client,
            &self.checks,
            &self.gates,
            timeout,
            &std::collections::HashMap::new(),
            &|_| {},
        )
        .await
    }
}

/// One change, and the object it applies (none for deletions and errors).
pub(super) struct Step {
    pub(super) change: Change,
    /// The rendered object it applies, by its place in [`Planned::objects`]. The body
    /// sent is made from it as the object is applied ([`Planned::desired`]): a pass
    /// holds one copy of every object, not two.
    pub(super) object: Option<usize>,
    /// Apply with force: fields other managers own are set to the values they have.
    pub(super) force: bool,
    /// A merge patch of the object's managed fields to send before applying: the
    /// hand-over of fields `kubectl apply` set client-side (see
    /// [`tether_core::managed_fields`]).
    pub(super) hand_over: Option<serde_json::Value>,
    /// A merge patch that switches a controller's update strategy and drops the
    /// rolling parameters the server defaulted, sent before the apply (which the
    /// server refuses while they are there).
    pub(super) clear_rolling: Option<serde_json::Value>,
    /// How the object comes into the inventory if it is not recorded yet.
    pub(super) provenance: Option<Provenance>,
    /// Why an [`Action::Error`](tether_core::plan::Action::Error) step could not be
    /// planned, when the server refused the identity (its report's failure); else it is
    /// reported unplanned.
    pub(super) refusal: Option<ObjectFailure>,
    /// The fields left to other managers, applied with their live values or left out
    /// (see [`tether_core::ignore`]).
    pub(super) pins: Vec<tether_core::ignore::Pin>,
}
