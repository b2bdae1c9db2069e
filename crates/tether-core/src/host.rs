//! Hosts (Node models), the pure part: which taints tether keeps on a node, and what
//! removing a host does to the pods bound to it. `tether_engine::reconcile` reads the node,
//! its pods and its budgets, and carries the result out.
//!
//! A node's `spec.taints` is one atomic list to server-side apply, so applying it
//! would take every taint (the node controller's, an operator's) from their owners.
//! tether instead records the taints it set in an annotation it applies, and edits
//! the list in place: its own taints are replaced, everyone else's are kept.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::{Host, LOCK_TAINT_KEY};

/// On a Node tether manages: the taints tether set, as a JSON list.
pub const TAINTS_ANNOTATION: &str = "tether.dev/taints";
/// kubelet's mark of a static pod's mirror: deleting it does nothing lasting.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The taints a host's model asks for, as the API writes them: those written, then
/// the lock's when locked.
pub fn model_taints(host: &Host) -> Vec<Value> {
    let mut taints: Vec<Value> = host
        .taints
        .iter()
        .map(|t| {
            let mut taint = json!({"key": t.key.value, "effect": t.effect.value.name()});
            if let Some(value) = &t.value {
                taint["value"] = json!(value.value);
            }
            taint
        })
        .collect();
    if host.is_locked() {
        taints.push(json!({"key": LOCK_TAINT_KEY, "effect": "NoExecute"}));
    }
    taints
}

/// A taint's identity on a node: its key and effect (the API server refuses two
/// taints that share both).
fn identity(taint: &Value) -> (&str, &str) {
    (
        taint["key"].as_str().unwrap_or_default(),
        taint["effect"].as_str().unwrap_or_default(),
    )
}

/// The taints recorded in an object's annotation (none when absent or unreadable:
/// then tether claims none of the node's taints).
fn recorded_taints(object: &Value) -> Vec<Value> {
    object["metadata"]["annotations"][TAINTS_ANNOTATION]
        .as_str()
        .and_then(|text| serde_json::from_str::<Vec<Value>>(text).ok())
        .unwrap_or_default()
}

/// The annotation's value for the taints of a model.
pub fn taints_annotation(taints: &[Value]) -> String {
    Value::Array(taints.to_vec()).to_string()
}

/// The node's taint list once tether's are in place: the taints tether set before
/// (recorded on `live`) and those it sets now (recorded on `desired`) are taken out,
/// and the new ones added after the others, which keep their order. `None` when the
/// list would not change.
pub fn merged_taints(live: &Value, desired: &Value) -> Option<Vec<Value>> {
    let current: Vec<Value> = live["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let wanted = recorded_taints(desired);
    let previous = recorded_taints(live);
    let ours = |t: &Value| {
        previous
            .iter()
            .chain(&wanted)
            .any(|o| identity(o) == identity(t))
    };
    let mut merged: Vec<Value> = current.iter().filter(|t| !ours(t)).cloned().collect();
    merged.extend(wanted.iter().cloned());
    let same_taint = |a: &Value, b: &Value| {
        identity(a) == identity(b) && a["value"].as_str() == b["value"].as_str()
    };
    let unchanged = merged.len() == current.len()
        && merged
            .iter()
            .all(|m| current.iter().any(|c| same_taint(m, c)));
    (!unchanged).then_some(merged)
}

/// A pod bound to a host that is leaving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    /// `Kind/name` of its controller, when it has one.
    pub controller: Option<String>,
    /// Why it is deleted rather than evicted (a DaemonSet's, a mirror, finished).
    pub deleted_because: Option<&'static str>,
}

impl BoundPod {
    pub fn display(&self) -> String {
        let by = self
            .controller
            .as_ref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        format!("{}/{}{by}", self.namespace, self.name)
    }
}

/// What removing a host does: the pods evicted through the Eviction API (their
/// disruption budgets respected), then those deleted (nothing would move them: a
/// DaemonSet's pods come back on a node until it is gone, a mirror pod is the
/// kubelet's, a finished pod holds nothing), then the Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRemoval {
    pub evict: Vec<BoundPod>,
    pub delete: Vec<BoundPod>,
}

impl HostRemoval {
    /// The removal of node `node` from the pods the cluster holds (those bound
    /// elsewhere are left out), in namespace and name order.
    pub fn of(node: &str, pods: &[Value]) -> HostRemoval {
        let mut bound: Vec<BoundPod> = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str() == Some(node))
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(bound_pod)
            .collect();
        bound.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let (delete, evict) = bound.into_iter().partition(|p| p.deleted_because.is_some());
        HostRemoval { evict, delete }
    }

    /// Every pod that goes, evicted ones first.
    pub fn pods(&self) -> impl Iterator<Item = &BoundPod> {
        self.evict.iter().chain(&self.delete)
    }

    /// The lines a reviewer reads in the diff of the removal.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        for pod in &self.evict {
            text.push_str(&format!("- evict  pod {}\n", pod.display()));
        }
        for pod in &self.delete {
            let why = pod.deleted_because.unwrap_or_default();
            text.push_str(&format!("- delete pod {} ({why})\n", pod.display()));
        }
        text
    }
}

fn bound_pod(pod: &Value) -> BoundPod {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let controller = pod["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|owners| owners.iter().find(|o| o["controller"] == true))
        .map(|o| format!("{}/{}", text(&o["kind"]), text(&o["name"])));
    let phase = pod["status"]["phase"].as_str();
    let deleted_because = if !pod["metadata"]["annotations"][MIRROR_ANNOTATION].is_null() {
        Some("a static pod's mirror")
    } else if controller
        .as_deref()
        .is_some_and(|c| c.starts_with("DaemonSet/"))
    {
        Some("a DaemonSet's pod")
    } else if matches!(phase, Some("Succeeded" | "Failed")) {
        Some("finished")
    } else {
        None
    };
    BoundPod {
        namespace: text(&pod["metadata"]["namespace"]),
        name: text(&pod["metadata"]["name"]),
        controller,
        deleted_because,
    }
}

/// A label selector (`matchLabels`, `matchExpressions`) in the query syntax of
/// `labelSelector=`: the pods a disruption budget protects are listed with it.
/// `None` for an operator the syntax lacks.
pub fn selector_query(selector: &Value) -> Option<String> {
    let mut terms: Vec<String> = Vec::new();
    let labels: BTreeMap<String, String> = selector["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    terms.extend(labels.iter().map(|(k, v)| format!("{k}={v}")));
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str()?;
        let values: Vec<&str> = expression["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        terms.push(match expression["operator"].as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    Some(terms.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: Value, recorded: Option<Value>) -> Value {
        let mut node = json!({"metadata": {"name": "n1"}, "spec": {"taints": taints}});
        if let Some(recorded) = recorded {
            node["metadata"]["annotations"] = json!({TAINTS_ANNOTATION: recorded.to_string()});
        }
        node
    }

    #[test]
    fn tethers_taints_replace_its_own_and_keep_everyone_elses() {
        let kubelet = json!({"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"});
        let old = json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"});
        let new = json!({"key": "dedicated", "value": "web", "effect": "NoSchedule"});
        let lock = json!({"key": LOCK_TAINT_KEY, "effect": "NoExecute"});
        let live = node(json!([kubelet, old]), Some(json!([old])));
        let desired = node(json!(null), Some(json!([new, lock])));
        assert_eq!(
            merged_taints(&live, &desired),
            Some(vec![kubelet.clone(), new.clone(), lock.clone()])
        );
        // Unlocking and dropping every taint leaves the kubelet's alone.
        let live = node(json!([kubelet, new, lock]), Some(json!([new, lock])));
        let desired = node(json!(null), Some(json!([])));
        assert_eq!(merged_taints(&live, &desired), Some(vec![kubelet.clone()]));
        // Nothing to do: the same taints, in another order.
        let live = node(json!([new, kubelet]), Some(json!([new])));
        let desired = node(json!(null), Some(json!([new])));
        assert_eq!(merged_taints(&live, &desired), None);
        // A taint of ours someone removed comes back.
        let live = node(json!([kubelet]), Some(json!([new])));
        assert_eq!(
            merged_taints(&live, &desired),
            Some(vec![kubelet.clone(), new.clone()])
        );
        // A node without a record: only taints the model names are claimed.
        let live = node(json!([kubelet, old]), None);
        assert_eq!(
            merged_taints(&live, &desired),
            Some(vec![kubelet, new]),
            "the model's key and effect replace the one written by hand"
        );
    }

    #[test]
    fn a_removal_evicts_what_moves_and_deletes_what_would_not() {
        let pods = vec![
            json!({"metadata": {"namespace": "a", "name": "web-1", "ownerReferences": [
                {"kind": "ReplicaSet", "name": "web-5d4", "controller": true}]},
                "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"namespace": "a", "name": "agent-x", "ownerReferences": [
                {"kind": "DaemonSet", "name": "agent", "controller": true}]},
                "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"namespace": "kube-system", "name": "etcd-n1",
                "annotations": {MIRROR_ANNOTATION: "abc"}}, "spec": {"nodeName": "n1"}}),
            json!({"metadata": {"namespace": "a", "name": "job-x"}, "spec": {"nodeName": "n1"},
                "status": {"phase": "Succeeded"}}),
            json!({"metadata": {"namespace": "a", "name": "elsewhere"}, "spec": {"nodeName": "n2"}}),
            json!({"metadata": {"namespace": "a", "name": "leaving", "deletionTimestamp": "2026-11-23T10:00:00Z"},
                "spec": {"nodeName": "n1"}}),
            json!({"metadata": {"namespace": "a", "name": "pending"}, "spec": {}}),
        ];
        let removal = HostRemoval::of("n1", &pods);
        let names = |pods: &[BoundPod]| pods.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&removal.evict), ["web-1"]);
        assert_eq!(names(&removal.delete), ["agent-x", "job-x", "etcd-n1"]);
        assert_eq!(
            removal.describe(),
            "- evict  pod a/web-1 (ReplicaSet/web-5d4)\n\
             - delete pod a/agent-x (DaemonSet/agent) (a DaemonSet's pod)\n\
             - delete pod a/job-x (finished)\n\
             - delete pod kube-system/etcd-n1 (a static pod's mirror)\n"
        );
    }

    #[test]
    fn selectors_become_queries() {
        let selector = json!({"matchLabels": {"app": "db", "tier": "data"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"}]});
        assert_eq!(
            selector_query(&selector).as_deref(),
            Some("app=db,tier=data,zone in (a,b),!canary")
        );
        assert_eq!(selector_query(&json!({})).as_deref(), Some(""));
    }
}
