//! Where a pod may run, in the scheduler's and the taint manager's terms: node
//! selectors, required node affinity, cordons, taints and tolerations. Pure.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Pod, Taint, Toleration};

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Whether one toleration matches a taint (key, value and effect, with `Exists`
/// and empty keys and effects as wildcards).
fn matches(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Why `pod` cannot be placed on `node`, in the scheduler's words; `None` when it can.
pub fn unfit(pod: &Pod, node: &Node) -> Option<String> {
    let tolerations = tolerations(pod);
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let cordon = Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    if cordoned && !tolerations.iter().any(|t| matches(t, &cordon)) {
        return Some("node(s) were unschedulable".into());
    }
    let refused = taints(node).iter().find(|taint| {
        matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|t| matches(t, taint))
    });
    if let Some(taint) = refused {
        return Some(format!(
            "node(s) had taint {{{}: {}}}, that the pod didn't tolerate",
            taint.key,
            taint.value.as_deref().unwrap_or_default()
        ));
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
    if selector.is_some_and(|s| s.iter().any(|(k, v)| labels.get(k) != Some(v))) {
        return Some("node(s) didn't match node selector".into());
    }
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    let name = node.metadata.name.clone().unwrap_or_default();
    let fields = [("metadata.name".to_string(), name)].into();
    if let Some(terms) = terms {
        let term_holds = |term: &k8s_openapi::api::core::v1::NodeSelectorTerm| {
            let expressions = term.match_expressions.as_deref().unwrap_or_default();
            let field_expressions = term.match_fields.as_deref().unwrap_or_default();
            (!expressions.is_empty() || !field_expressions.is_empty())
                && expressions.iter().all(|e| requirement_holds(e, &labels))
                && field_expressions
                    .iter()
                    .all(|e| requirement_holds(e, &fields))
        };
        if !terms.iter().any(term_holds) {
            return Some("node(s) didn't match Pod's node affinity".into());
        }
    }
    None
}

fn requirement_holds(
    requirement: &NodeSelectorRequirement,
    values_of: &std::collections::BTreeMap<String, String>,
) -> bool {
    let value = values_of.get(&requirement.key);
    let wanted = requirement.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| wanted.contains(v)),
        "NotIn" => value.is_none_or(|v| !wanted.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                wanted.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if requirement.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// The node a pod goes to: the least loaded of those it fits, by name on a tie. Without
/// one, the scheduler's message ("0/2 nodes are available: …").
pub fn choose<'a>(
    pod: &Pod,
    nodes: &'a [Node],
    load: impl Fn(&str) -> usize,
) -> Result<&'a Node, String> {
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    let mut best: Option<(&Node, usize)> = None;
    for node in nodes {
        if let Some(reason) = unfit(pod, node) {
            *reasons.entry(reason).or_default() += 1;
            continue;
        }
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pods = load(name);
        let better = best.is_none_or(|(chosen, chosen_pods)| {
            (pods, name)
                < (
                    chosen_pods,
                    chosen.metadata.name.as_deref().unwrap_or_default(),
                )
        });
        if better {
            best = Some((node, pods));
        }
    }
    best.map(|(node, _)| node).ok_or_else(|| {
        let reasons: Vec<String> = reasons
            .iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            if reasons.is_empty() {
                "no nodes".to_string()
            } else {
                reasons.join(", ")
            }
        )
    })
}

/// What the taint manager does to a pod on a node with `NoExecute` taints.
#[derive(Debug, PartialEq, Eq)]
pub enum Eviction {
    Never,
    Now,
    After(Duration),
}

pub fn eviction(pod: &Pod, node: &Node) -> Eviction {
    let tolerations = tolerations(pod);
    let mut after: Option<Duration> = None;
    for taint in taints(node).iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| matches(t, taint)).collect();
        if matching.is_empty() {
            return Eviction::Now;
        }
        // Tolerated for as long as the shortest bounded toleration allows.
        let bounded = matching
            .iter()
            .filter_map(|t| t.toleration_seconds)
            .map(|s| Duration::from_secs(s.max(0).unsigned_abs()))
            .min();
        if matching.iter().all(|t| t.toleration_seconds.is_some())
            && let Some(bound) = bounded
        {
            after = Some(after.map_or(bound, |a| a.min(bound)));
        }
    }
    match after {
        None => Eviction::Never,
        Some(d) if d.is_zero() => Eviction::Now,
        Some(d) => Eviction::After(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "nginx"}]);
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn named(name: &str, spec: serde_json::Value) -> Node {
        node(
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "disk": "ssd"}}, "spec": spec}),
        )
    }

    #[test]
    fn the_least_loaded_fitting_node_is_chosen() {
        let nodes = [named("a", json!({})), named("b", json!({}))];
        let chosen = choose(&pod(json!({})), &nodes, |n| usize::from(n == "a")).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("b"));
        let tie = choose(&pod(json!({})), &nodes, |_| 3).unwrap();
        assert_eq!(tie.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn a_cordoned_node_takes_only_pods_that_tolerate_it() {
        let nodes = [named("a", json!({"unschedulable": true}))];
        assert_eq!(
            choose(&pod(json!({})), &nodes, |_| 0).unwrap_err(),
            "0/1 nodes are available: 1 node(s) were unschedulable."
        );
        let daemon = pod(
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
        );
        assert!(choose(&daemon, &nodes, |_| 0).is_ok());
    }

    #[test]
    fn taints_refuse_pods_without_a_matching_toleration() {
        let tainted = named(
            "a",
            json!({"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}),
        );
        assert_eq!(
            unfit(&pod(json!({})), &tainted).as_deref(),
            Some("node(s) had taint {dedicated: db}, that the pod didn't tolerate")
        );
        let wrong_value = pod(
            json!({"tolerations": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}),
        );
        assert!(unfit(&wrong_value, &tainted).is_some());
        let equal = pod(json!({"tolerations": [{"key": "dedicated", "value": "db"}]}));
        assert_eq!(unfit(&equal, &tainted), None);
        let everything = pod(json!({"tolerations": [{"operator": "Exists"}]}));
        assert_eq!(unfit(&everything, &tainted), None);
        let prefer = named(
            "b",
            json!({"taints": [{"key": "dedicated", "effect": "PreferNoSchedule"}]}),
        );
        assert_eq!(unfit(&pod(json!({})), &prefer), None);
    }

    #[test]
    fn selectors_and_required_affinity_pick_nodes() {
        let nodes = [named("a", json!({})), named("b", json!({}))];
        let hdd = pod(json!({"nodeSelector": {"disk": "hdd"}}));
        assert_eq!(
            choose(&hdd, &nodes, |_| 0).unwrap_err(),
            "0/2 nodes are available: 2 node(s) didn't match node selector."
        );
        // What the DaemonSet controller writes: a match on the node's name.
        let daemon = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}}),
        );
        let chosen = choose(&daemon, &nodes, |n| usize::from(n == "b") * 10).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("b"));
        let not_ssd = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["ssd"]}]}]}}}}),
        );
        assert_eq!(
            unfit(&not_ssd, &nodes[0]).as_deref(),
            Some("node(s) didn't match Pod's node affinity")
        );
    }

    #[test]
    fn no_execute_taints_evict_at_once_or_after_the_toleration() {
        let tainted = named(
            "a",
            json!({"taints": [{"key": "maintenance", "effect": "NoExecute"}]}),
        );
        assert_eq!(eviction(&pod(json!({})), &tainted), Eviction::Now);
        let for_a_while = pod(
            json!({"tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]}),
        );
        assert_eq!(
            eviction(&for_a_while, &tainted),
            Eviction::After(Duration::from_secs(30))
        );
        let forever = pod(json!({"tolerations": [{"key": "maintenance", "operator": "Exists"}]}));
        assert_eq!(eviction(&forever, &tainted), Eviction::Never);
        let no_schedule_only = named(
            "b",
            json!({"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}),
        );
        assert_eq!(
            eviction(&pod(json!({})), &no_schedule_only),
            Eviction::Never
        );
    }
}
