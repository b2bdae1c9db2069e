//! Hosts against the cluster: a node's taints edited in place, and the removal of a
//! host whose model is gone (cordon, evict, delete, then the Node). What to do is
//! decided by the pure [`tether_core::host`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::outcome::{ObjectFailure, Outcome, status_text};
use crate::cluster::ClusterError;
use crate::cluster::api_error;
use crate::driver::Poll;
use tether_core::host::{BoundPod, HostRemoval, merged_taints, selector_query};
use tether_core::k8s::ObjectKey;

/// How often a removal looks again at the pods still on the node.
const REMOVAL_POLL: Duration = Duration::from_secs(1);
/// How often an in-place edit of the taints is tried when the node changes under it.
const TAINT_ATTEMPTS: usize = 5;

/// Is this the key of a (core) Node?
pub(super) fn is_node(key: &ObjectKey) -> bool {
    key.kind == "Node" && key.group.is_empty()
}

fn nodes(client: &Client) -> Api<Node> {
    Api::all(client.clone())
}

/// The pods bound to node `node`, as JSON.
pub(super) async fn bound_pods(client: &Client, node: &str) -> Result<Vec<Value>, ClusterError> {
    let pods: Api<Pod> = Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = pods
        .list(&params)
        .await
        .map_err(api_error(format!("list the pods on node {node}")))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect())
}

/// Puts tether's taints on the node (those `desired` records) in place of those it
/// set before, keeping everyone else's: read, edit, write on the node's
/// resourceVersion, and again when someone else wrote in between.
pub(super) async fn sync_taints(
    client: &Client,
    name: &str,
    desired: &Value,
    manager: &str,
) -> Result<(), ObjectFailure> {
    let api = nodes(client);
    let params = PatchParams {
        field_manager: Some(format!("{manager}-taints")),
        ..PatchParams::default()
    };
    let failed = |e: kube::Error| ObjectFailure::of_kube_error(&e);
    for _ in 0..TAINT_ATTEMPTS {
        let live = api.get(name).await.map_err(failed)?;
        let live = serde_json::to_value(&live).unwrap_or_default();
        let Some(taints) = merged_taints(&live, desired) else {
            return Ok(());
        };
        let patch = json!({
            "metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
            "spec": {"taints": taints},
        });
        match api.patch(name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.is_conflict() => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    Err(ObjectFailure::Unavailable {
        message: format!("the taints of node {name} kept changing under the edit"),
    })
}

/// Removes a host whose model is gone: cordons its node, evicts its pods through
/// the Eviction API until none is left or `timeout` runs out (a disruption budget
/// that blocks is named with the pods it protects), deletes the pods nothing would
/// move, then the Node. `None` when the node was gone already. A removal that stops
/// leaves the node cordoned and recorded, for the next prune to go on.
pub(super) async fn remove_host(
    client: &Client,
    name: &str,
    manager: &str,
    timeout: Duration,
) -> Result<Option<Outcome>, ClusterError> {
    let api = nodes(client);
    let cordon = PatchParams {
        field_manager: Some(format!("{manager}-host-removal")),
        ..PatchParams::default()
    };
    let patch = json!({"spec": {"unschedulable": true}});
    match api.patch(name, &cordon, &Patch::Merge(&patch)).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(None),
        Err(e) => return Ok(Some(failed(format!("cordon: {}", kube_text(&e))))),
    }
    tracing::info!(node = name, "host leaving: node cordoned");
    let mut poll = Poll::new(REMOVAL_POLL, timeout);
    // The refusals of the last round: each budget's (namespace, cause) and the pods
    // it kept.
    let mut blocked: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    loop {
        let pods = bound_pods(client, name).await?;
        let removal = HostRemoval::of(name, &pods);
        let terminating = pods
            .iter()
            .filter(|p| !p["metadata"]["deletionTimestamp"].is_null())
            .count();
        if removal.evict.is_empty() && terminating == 0 {
            return finish(client, name, &removal).await;
        }
        blocked.clear();
        for pod in &removal.evict {
            match evict(client, pod).await {
                Ok(()) => tracing::info!(pod = %pod.display(), "evicted"),
                Err(Eviction::Blocked(cause)) => {
                    let budget = (pod.namespace.clone(), cause);
                    blocked.entry(budget).or_default().push(pod.display());
                }
                Err(Eviction::Failed(message)) => {
                    return Ok(Some(failed(format!("evict {}: {message}", pod.display()))));
                }
            }
        }
        if !poll.next().await {
            let reason = match blocked.is_empty() {
                true => format!("{terminating} pods still terminating"),
                false => budget_refusals(client, &blocked).await,
            };
            return Ok(Some(failed(format!(
                "stopped after {}s with the node cordoned: {reason}",
                timeout.as_secs()
            ))));
        }
    }
}

/// Deletes the pods that eviction does not move, then the Node.
async fn finish(
    client: &Client,
    name: &str,
    removal: &HostRemoval,
) -> Result<Option<Outcome>, ClusterError> {
    for pod in &removal.delete {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
        match pods.delete(&pod.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(e) => {
                return Ok(Some(failed(format!(
                    "delete {}: {}",
                    pod.display(),
                    kube_text(&e)
                ))));
            }
        }
    }
    Ok(
        match nodes(client).delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(node = name, "host removed: node deleted");
                Some(Outcome::Pruned)
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => None,
            Err(e) => Some(failed(format!("delete the node: {}", kube_text(&e)))),
        },
    )
}

enum Eviction {
    /// A disruption budget refuses it now (it may allow it later).
    Blocked(String),
    Failed(String),
}

/// Asks the Eviction API to evict `pod`: policy/v1, or policy/v1beta1 on servers
/// before 1.22 (as `kubectl drain` chooses).
async fn evict(client: &Client, pod: &BoundPod) -> Result<(), Eviction> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let mut result = Err(Eviction::Failed("no eviction API".into()));
    for version in ["policy/v1", "policy/v1beta1"] {
        let body = json!({
            "apiVersion": version,
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        });
        result = match pods
            .create_subresource::<Value, Value>("eviction", &pod.name, &Default::default(), &body)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 429 => {
                Err(Eviction::Blocked(budget_cause(&status)))
            }
            // An eviction body of a version this server does not know.
            Err(kube::Error::Api(status))
                if status.code == 400 && status.message.contains(version) =>
            {
                continue;
            }
            Err(e) => Err(Eviction::Failed(kube_text(&e))),
        };
        break;
    }
    result
}

/// Why a disruption budget refused an eviction, as the server says it ("The
/// disruption budget db needs 2 healthy pods and has 2 currently").
fn budget_cause(status: &kube::core::Status) -> String {
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))
        .map(|c| c.message.clone())
        .unwrap_or_else(|| status.message.clone())
}

/// Each budget that refused evictions, the pods it kept, and every pod it protects.
async fn budget_refusals(
    client: &Client,
    blocked: &BTreeMap<(String, String), Vec<String>>,
) -> String {
    let mut parts = Vec::new();
    for ((namespace, cause), kept) in blocked {
        let budget = cause
            .strip_prefix("The disruption budget ")
            .and_then(|rest| rest.split_whitespace().next());
        let protected = match budget {
            Some(budget) => protected_pods(client, namespace, budget).await,
            None => None,
        };
        let mut part = format!("{cause}: it keeps {}", kept.join(", "));
        if let Some(protected) = protected.filter(|p| !p.is_empty()) {
            part.push_str(&format!(" (it protects {})", protected.join(", ")));
        }
        parts.push(part);
    }
    parts.join("; ")
}

/// The pods a disruption budget selects (policy/v1, or v1beta1 before 1.21).
async fn protected_pods(client: &Client, namespace: &str, budget: &str) -> Option<Vec<String>> {
    let mut selector = None;
    for version in ["v1", "v1beta1"] {
        let resource = ApiResource {
            group: "policy".into(),
            version: version.into(),
            api_version: format!("policy/{version}"),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        if let Ok(found) = api.get(budget).await {
            selector = Some(found.data["spec"]["selector"].clone());
            break;
        }
    }
    let query = selector_query(&selector?)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&query))
        .await
        .ok()?;
    let mut names: Vec<String> = list
        .items
        .iter()
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            format!("{namespace}/{} on {node}", p.name_any())
        })
        .collect();
    names.sort();
    Some(names)
}

fn failed(message: String) -> Outcome {
    Outcome::Failed(ObjectFailure::HostKept { message })
}

fn kube_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status_text(status),
        other => other.to_string(),
    }
}
