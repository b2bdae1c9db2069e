//! What discovery needs to know about pods and their controllers, taken from the
//! Kubernetes objects. Pure: the watch in `tether_engine::discovery::caches` feeds it.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A pod, as discovery sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub service_account: String,
    /// The first container's image, as written in the pod spec.
    pub image: String,
    pub ip: Option<String>,
    /// The node it runs on, once scheduled.
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The top-level controller, found through controller ownerReferences.
    pub controller: Option<ControllerFacts>,
}

/// A workload controller (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job).
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerFacts {
    pub kind: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Desired pods: replicas, or a Job's completions; none for a DaemonSet.
    pub replicas: Option<i64>,
}

/// Controllers by uid, each with the uid of its own controller, to walk a pod's
/// ownerReferences up to the top.
#[derive(Debug, Default)]
pub struct Controllers {
    by_uid: HashMap<String, (ControllerFacts, Option<String>)>,
}

impl Controllers {
    pub fn insert(&mut self, kind: &str, metadata: &ObjectMeta, replicas: Option<i32>) {
        let Some(uid) = &metadata.uid else { return };
        let facts = ControllerFacts {
            kind: kind.to_string(),
            name: metadata.name.clone().unwrap_or_default(),
            labels: metadata.labels.clone().unwrap_or_default(),
            annotations: metadata.annotations.clone().unwrap_or_default(),
            replicas: replicas.map(i64::from),
        };
        self.by_uid
            .insert(uid.clone(), (facts, controller_uid(metadata)));
    }

    pub fn insert_replica_set(&mut self, x: &ReplicaSet) {
        let replicas = x.spec.as_ref().and_then(|s| s.replicas);
        self.insert("ReplicaSet", &x.metadata, replicas);
    }

    pub fn insert_deployment(&mut self, x: &Deployment) {
        let replicas = x.spec.as_ref().and_then(|s| s.replicas);
        self.insert("Deployment", &x.metadata, replicas);
    }

    pub fn insert_stateful_set(&mut self, x: &StatefulSet) {
        let replicas = x.spec.as_ref().and_then(|s| s.replicas);
        self.insert("StatefulSet", &x.metadata, replicas);
    }

    pub fn insert_daemon_set(&mut self, x: &DaemonSet) {
        self.insert("DaemonSet", &x.metadata, None);
    }

    pub fn insert_job(&mut self, x: &Job) {
        let completions = x.spec.as_ref().and_then(|s| s.completions);
        self.insert("Job", &x.metadata, completions);
    }

    /// The last controller up the chain from `metadata`'s controller reference. A
    /// controller that is not known (a custom resource, a CronJob) ends the walk.
    pub fn top_controller(&self, metadata: &ObjectMeta) -> Option<ControllerFacts> {
        let mut uid = controller_uid(metadata)?;
        let mut top = None;
        // ownerReferences can form a cycle in a broken cluster; the depth bounds it.
        for _ in 0..8 {
            let Some((facts, parent)) = self.by_uid.get(&uid) else {
                break;
            };
            top = Some(facts);
            match parent {
                Some(parent) => uid = parent.clone(),
                None => break,
            }
        }
        top.cloned()
    }
}

fn controller_uid(metadata: &ObjectMeta) -> Option<String> {
    metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

impl PodFacts {
    /// `None` for a pod without containers (the API server never accepts one).
    pub fn from_pod(pod: &Pod, controllers: &Controllers) -> Option<PodFacts> {
        let spec = pod.spec.as_ref()?;
        let image = spec.containers.first()?.image.clone()?;
        Some(PodFacts {
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            service_account: spec
                .service_account_name
                .clone()
                .unwrap_or_else(|| "default".into()),
            image,
            ip: pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty()),
            node: spec.node_name.clone().filter(|n| !n.is_empty()),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            controller: controllers.top_controller(&pod.metadata),
        })
    }
}
