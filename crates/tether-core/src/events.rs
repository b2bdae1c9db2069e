//! Pod lifecycle events: `created`, `updated` (the IP changed), `restarted` (a
//! container's restart count rose) and `deleted`, told apart by comparing what was
//! known of a pod with what the watch says now. The engine's event pipeline
//! (`tether_engine::events`) keeps them in an outbox and delivers them to the sinks.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// On a pod a day-2 action was taken on: what, when and by whom.
pub const ACTION_ANNOTATION: &str = "tether.dev/action";

/// What an event remembers of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodState {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub ip: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Restart count by container name.
    pub restart_counts: BTreeMap<String, i32>,
    /// The last day-2 action taken on the pod (`tether recreate`, `restart-containers`),
    /// from its `tether.dev/action` annotation: why it was deleted or restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl PodState {
    pub fn from_pod(pod: &Pod) -> Option<PodState> {
        let status = pod.status.as_ref();
        Some(PodState {
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            uid: pod.metadata.uid.clone()?,
            ip: status
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty()),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            restart_counts: status
                .and_then(|s| s.container_statuses.as_ref())
                .map(|statuses| {
                    statuses
                        .iter()
                        .map(|c| (c.name.clone(), c.restart_count))
                        .collect()
                })
                .unwrap_or_default(),
            action: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ACTION_ANNOTATION))
                .cloned(),
        })
    }

    /// `namespace/name`: a pod's identity (XOS keyed pods by name alone).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Created,
    Updated,
    Restarted,
    Deleted,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Updated => "updated",
            Status::Restarted => "restarted",
            Status::Deleted => "deleted",
        }
    }
}

/// One event, with the pod as it was then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodEvent {
    pub status: Status,
    pub pod: PodState,
    /// The cluster the pod runs in: its KubernetesService's name, else the kubeconfig
    /// context's. Empty in events an outbox recorded before events named it.
    #[serde(default)]
    pub cluster: String,
}

#[derive(Serialize)]
struct NetInterface<'a> {
    name: &'static str,
    addresses: Vec<&'a str>,
}

/// The value XOS's Kubernetes synchronizer published on `xos.kubernetes.pod-details`,
/// plus the namespace, the cluster, the uid and the restart counts.
#[derive(Serialize)]
struct XosValue<'a> {
    status: &'static str,
    name: &'a str,
    producer: &'static str,
    labels: &'a BTreeMap<String, String>,
    netinterfaces: [NetInterface<'a>; 1],
    namespace: &'a str,
    cluster: &'a str,
    uid: &'a str,
    restart_counts: &'a BTreeMap<String, i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'a str>,
    /// The outbox's sequence number: consumers may drop what they saw already.
    sequence: u64,
}

impl PodEvent {
    /// The JSON value sinks send.
    pub fn to_json(&self, sequence: u64) -> String {
        let pod = &self.pod;
        let value = XosValue {
            status: self.status.name(),
            name: &pod.name,
            producer: "k8s-sync",
            labels: &pod.labels,
            netinterfaces: [NetInterface {
                name: "primary",
                addresses: pod.ip.as_deref().into_iter().collect(),
            }],
            namespace: &pod.namespace,
            cluster: &self.cluster,
            uid: &pod.uid,
            restart_counts: &pod.restart_counts,
            action: pod.action.as_deref(),
            sequence,
        };
        // Serializing strings and maps of strings cannot fail.
        serde_json::to_string(&value).unwrap_or_default()
    }
}

/// The events between what was known of a pod of `cluster` and what is known now
/// (`None`: no such pod). A new uid under the same name is a new pod: deleted, then
/// created.
pub fn pod_events(
    cluster: &str,
    before: Option<&PodState>,
    after: Option<&PodState>,
) -> Vec<PodEvent> {
    let event = |status, pod: &PodState| PodEvent {
        status,
        pod: pod.clone(),
        cluster: cluster.to_string(),
    };
    match (before, after) {
        (None, None) => Vec::new(),
        (None, Some(now)) => vec![event(Status::Created, now)],
        (Some(was), None) => vec![event(Status::Deleted, was)],
        (Some(was), Some(now)) if was.uid != now.uid => {
            vec![event(Status::Deleted, was), event(Status::Created, now)]
        }
        (Some(was), Some(now)) => {
            let mut events = Vec::new();
            if was.ip != now.ip {
                events.push(event(Status::Updated, now));
            }
            let restarted = now.restart_counts.iter().any(|(container, count)| {
                was.restart_counts.get(container).is_some_and(|c| count > c)
            });
            if restarted {
                events.push(event(Status::Restarted, now));
            }
            events
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, ip: Option<&str>, restarts: i32) -> PodState {
        PodState {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: uid.into(),
            ip: ip.map(str::to_string),
            labels: BTreeMap::from([("app".into(), "web".into())]),
            restart_counts: BTreeMap::from([("web".into(), restarts)]),
            action: None,
        }
    }

    fn statuses(events: &[PodEvent]) -> Vec<Status> {
        events.iter().map(|e| e.status).collect()
    }

    #[test]
    fn a_pods_life_is_four_events() {
        let pending = pod("u1", None, 0);
        let running = pod("u1", Some("10.0.0.5"), 0);
        let restarted = pod("u1", Some("10.0.0.5"), 1);
        let mut all = Vec::new();
        all.extend(pod_events("east", None, Some(&pending)));
        all.extend(pod_events("east", Some(&pending), Some(&running)));
        all.extend(pod_events("east", Some(&running), Some(&running)));
        all.extend(pod_events("east", Some(&running), Some(&restarted)));
        all.extend(pod_events("east", Some(&restarted), None));
        assert_eq!(
            statuses(&all),
            [
                Status::Created,
                Status::Updated,
                Status::Restarted,
                Status::Deleted
            ]
        );
        assert_eq!(all[3].pod, restarted, "deleted carries the last state");
    }

    #[test]
    fn a_new_uid_under_the_same_name_is_a_new_pod() {
        let events = pod_events(
            "east",
            Some(&pod("u1", Some("10.0.0.5"), 3)),
            Some(&pod("u2", None, 0)),
        );
        assert_eq!(statuses(&events), [Status::Deleted, Status::Created]);
        assert_eq!(events[1].pod.uid, "u2");
    }

    #[test]
    fn the_value_is_the_xos_contract_plus_namespace_cluster_uid_and_restarts() {
        let event = PodEvent {
            status: Status::Updated,
            pod: pod("u1", Some("10.0.0.5"), 2),
            cluster: "east".into(),
        };
        assert_eq!(
            event.to_json(7),
            r#"{"status":"updated","name":"web-0","producer":"k8s-sync","labels":{"app":"web"},"netinterfaces":[{"name":"primary","addresses":["10.0.0.5"]}],"namespace":"shop","cluster":"east","uid":"u1","restart_counts":{"web":2},"sequence":7}"#
        );
    }
}
