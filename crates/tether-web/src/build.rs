//! Views made from what the pipeline knows: the last plan's changes, the workflow's
//! waves, the models' hosts and discovered pods, and live objects the daemon read.
//! Each is a pure function of its inputs, so the page shows exactly what the CLI's
//! reports would.

use std::collections::BTreeMap;

use serde_json::Value;
use tether_core::health::HealthChecks;
use tether_core::k8s::ObjectKey;
use tether_core::model::Models;
use tether_core::plan::Plan;
use tether_core::readiness::{Readiness, assess};
use tether_core::source::SourceFiles;
use tether_core::workflow::{Need, Rule, Workflow};

use crate::view::{
    ConflictRow, DiscoveredPod, DriftRow, Graph, HostRow, ModelNode, ObjectRow, PodRow,
};

/// The plan's objects, grouped by the model that made them (in wave order, then as
/// planned); `applied` says what the apply then did to each (it replaces the plan's
/// action, and an applied object's conflicts were taken back), `failed` why an object
/// failed, `drift` who changed it.
pub fn model_nodes(
    plan: &Plan,
    applied: &BTreeMap<ObjectKey, &str>,
    failed: &BTreeMap<ObjectKey, String>,
    drift: &BTreeMap<ObjectKey, DriftRow>,
) -> Vec<ModelNode> {
    let mut nodes: Vec<ModelNode> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for change in &plan.changes {
        let model = change
            .model
            .clone()
            .or_else(|| change.source.clone())
            .unwrap_or_else(|| "(no model)".into());
        let at = *index.entry(model.clone()).or_insert_with(|| {
            nodes.push(ModelNode {
                model,
                wave: change.wave,
                objects: Vec::new(),
            });
            nodes.len() - 1
        });
        let error = failed
            .get(&change.key)
            .cloned()
            .or_else(|| change.error.clone());
        let outcome = applied.get(&change.key).copied();
        let settled = outcome.is_some_and(is_settled);
        nodes[at].objects.push(ObjectRow {
            kind: change.key.kind.clone(),
            namespace: change.key.namespace.clone(),
            name: change.key.name.clone(),
            action: outcome.unwrap_or(change.action.name()).into(),
            ready: None,
            readiness: None,
            drift: drift.get(&change.key).cloned(),
            conflicts: change
                .conflicts
                .iter()
                .filter(|_| !settled)
                .map(|c| ConflictRow {
                    manager: c.manager.clone(),
                    field: c.field.clone(),
                })
                .collect(),
            error,
            pods: Vec::new(),
        });
    }
    nodes.sort_by_key(|n| n.wave.unwrap_or(usize::MAX));
    nodes
}

/// Whether an apply that did `outcome` (`created`, `configured`, …) left the object
/// as the models say, whatever the plan found before (a conflict that drift
/// correction took back).
pub fn is_settled(outcome: &str) -> bool {
    matches!(outcome, "created" | "configured" | "unchanged" | "replaced")
}

/// Fills each object's readiness from its live state (`live`, by key; an object
/// absent there is not known, not "missing": the daemon reads only what it can), and
/// each workload's pods (those its selector matches, in its namespace); a kind with
/// a health check in `checks` is judged by it.
pub fn with_live(
    models: &mut [ModelNode],
    live: &BTreeMap<ObjectKey, Value>,
    pods: &[Value],
    checks: &HealthChecks,
) {
    for object in models.iter_mut().flat_map(|m| m.objects.iter_mut()) {
        let key = live.keys().find(|k| {
            k.kind == object.kind && k.namespace == object.namespace && k.name == object.name
        });
        let Some(value) = key.and_then(|k| live.get(k)) else {
            continue;
        };
        let (ready, words) = match assess(&object.kind, &Rule::BuiltIn, Some(value), None, checks) {
            Readiness::Ready => (true, "ready".to_string()),
            Readiness::Waiting(why) | Readiness::Failed(why) => (false, why),
        };
        object.ready = Some(ready);
        object.readiness = Some(words);
        if let Some(selector) = workload_selector(&object.kind, value) {
            object.pods = pods
                .iter()
                .filter(|p| namespace_of(p) == object.namespace.as_deref())
                .filter(|p| matches_labels(&selector, p))
                .map(pod_row)
                .collect();
        }
    }
}

/// The `matchLabels` of a workload's selector (Deployment, StatefulSet, DaemonSet,
/// ReplicaSet, Job).
fn workload_selector(kind: &str, object: &Value) -> Option<BTreeMap<String, String>> {
    if !matches!(
        kind,
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job"
    ) {
        return None;
    }
    let labels = object.pointer("/spec/selector/matchLabels")?.as_object()?;
    Some(
        labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
    )
}

fn namespace_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
}

fn matches_labels(selector: &BTreeMap<String, String>, pod: &Value) -> bool {
    !selector.is_empty()
        && selector.iter().all(|(key, value)| {
            pod.pointer("/metadata/labels")
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                == Some(value.as_str())
        })
}

/// A pod as the page shows it.
pub fn pod_row(pod: &Value) -> PodRow {
    let text = |pointer: &str| {
        pod.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = !statuses.is_empty()
        && statuses
            .iter()
            .all(|s| s.get("ready").and_then(Value::as_bool) == Some(true));
    let restarts = statuses
        .iter()
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum::<i64>();
    PodRow {
        namespace: text("/metadata/namespace").unwrap_or_default(),
        name: text("/metadata/name").unwrap_or_default(),
        node: text("/spec/nodeName"),
        phase: text("/status/phase").unwrap_or_else(|| "Unknown".into()),
        ready,
        restarts: i32::try_from(restarts).unwrap_or(i32::MAX),
    }
}

/// The workflow as a graph: the models of each wave, and what each waits for.
pub fn graph(workflow: &Workflow) -> Graph {
    let managed: Vec<_> = workflow.members.iter().filter(|m| m.managed).collect();
    let waves = managed.iter().map(|m| m.wave).max().map_or(0, |w| w + 1);
    let mut graph = Graph {
        waves: vec![Vec::new(); waves],
        edges: Vec::new(),
    };
    for member in &managed {
        graph.waves[member.wave].push(member.label.clone());
        for need in &member.needs {
            let waits_for = match need {
                Need::Model { member: other, .. } => {
                    workflow.members.get(*other).map(|o| o.label.clone())
                }
                Need::Object { gate, .. } => Some(gate.describe()),
            };
            if let Some(waits_for) = waits_for {
                graph.edges.push((member.label.clone(), waits_for));
            }
        }
    }
    graph
}

/// The hosts (Node models) with the live node's readiness and the pods on it
/// (`nodes`: the live Node objects by name; `pods`: the pods the daemon read).
pub fn hosts(
    models: &Models,
    files: &SourceFiles,
    nodes: &BTreeMap<String, Value>,
    pods: &[Value],
) -> Vec<HostRow> {
    models
        .hosts
        .iter()
        .map(|host| {
            let name = host.name.value.clone();
            let ready = nodes.get(&name).map(|node| {
                node.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|conditions| {
                        conditions.iter().any(|c| {
                            c.get("type").and_then(Value::as_str) == Some("Ready")
                                && c.get("status").and_then(Value::as_str) == Some("True")
                        })
                    })
            });
            HostRow {
                labels: host
                    .labels
                    .iter()
                    .map(|(k, v)| (k.value.clone(), v.value.clone()))
                    .collect(),
                locked: host.is_locked(),
                ready,
                pods: pods
                    .iter()
                    .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(&name))
                    .map(pod_row)
                    .collect(),
                file: Some(files.path(host.origin.span.file).to_string()),
                name,
            }
        })
        .collect()
}

/// The pods discovery committed (KubernetesServiceInstances under `discovered/`),
/// with the commit of the tree they were read from.
pub fn discovered(
    models: &Models,
    files: &SourceFiles,
    commit: Option<&str>,
) -> Vec<DiscoveredPod> {
    models
        .instances
        .iter()
        .filter_map(|instance| {
            let file = files.path(instance.origin.span.file);
            let under = file.split('/').position(|part| part == "discovered")?;
            // discovered/[SERVICE/]NAMESPACE/NAME.yaml
            let parts: Vec<&str> = file.split('/').skip(under + 1).collect();
            let namespace = parts.len().checked_sub(2).map(|i| parts[i])?;
            Some(DiscoveredPod {
                namespace: namespace.to_string(),
                name: instance.name.value.clone(),
                file: file.to_string(),
                commit: commit.map(str::to_string),
                commit_link: None,
            })
        })
        .collect()
}
