//! Fields other controllers own, left alone: ignore rules per target (kind, and
//! optionally group, name, namespace and labels) with JSON pointers, in Argo CD's
//! `ignoreDifferences` spelling, and the defaults every repository has:
//! - `/spec/replicas` of a workload a HorizontalPodAutoscaler (or a KEDA ScaledObject,
//!   which makes one) among the rendered objects scales;
//! - the `caBundle` of a webhook configuration, CustomResourceDefinition conversion
//!   or APIService that asks cert-manager's CA injector to fill it.
//!
//! An ignored field of an object that exists is left out of what tether applies, so
//! tether neither diffs, corrects nor takes it: its owner (the autoscaler) keeps it.
//! While tether still owns it (it set it when it made the object, and nobody changed
//! it since), leaving it out would delete it: tether applies it with its live value
//! instead, until another manager changes it and owns it alone. An object tether
//! creates gets every field Git gives it. Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;
use thiserror::Error;

use crate::k8s::{ObjectKey, api_group};

/// One rule, as written in `.tether.yaml` (`ignoreDifferences[]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IgnoreDifferences {
    /// The API group (`apps`); any group when absent, `""` for the core group.
    #[serde(default)]
    pub group: Option<String>,
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels the object must carry, each with this value.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// RFC 6901 pointers (`/spec/replicas`); `*` stands for every item of a list.
    pub json_pointers: Vec<Spanned<String>>,
}

/// A rule that cannot be used, at its place.
#[derive(Debug, Error)]
#[error("{file}:{line}:{column}: ignoreDifferences: {what}\n  hint: {hint}")]
pub struct IgnoreError {
    pub file: String,
    pub line: u64,
    pub column: u64,
    pub what: String,
    pub hint: String,
}

/// Checks the rules' pointers: each starts with `/` and names a field.
pub fn check(file: &str, rules: &[IgnoreDifferences]) -> Result<(), IgnoreError> {
    for rule in rules {
        for pointer in &rule.json_pointers {
            if !pointer.value.starts_with('/') || pointer.value.len() < 2 {
                return Err(IgnoreError {
                    file: file.to_string(),
                    line: pointer.referenced.line(),
                    column: pointer.referenced.column(),
                    what: format!(
                        "{:?} is not a JSON pointer to a field of a {}",
                        pointer.value, rule.kind
                    ),
                    hint: "write a pointer from the object's root, such as /spec/replicas (~1 for a / in a key, * for every item of a list)".into(),
                });
            }
        }
    }
    Ok(())
}

/// A field whose value tether applies as it is live, or leaves out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Applied with the live value.
    Keep { pointer: String, value: Value },
    /// Not applied: the live object does not have it.
    Drop { pointer: String },
}

impl Pin {
    pub fn pointer(&self) -> &str {
        match self {
            Pin::Keep { pointer, .. } | Pin::Drop { pointer } => pointer,
        }
    }
}

/// The workloads an autoscaler among `objects` scales: a HorizontalPodAutoscaler's
/// `scaleTargetRef`, or a KEDA ScaledObject's (a Deployment when its kind is not
/// written), in the autoscaler's namespace.
pub fn scaled(objects: &[&Value]) -> BTreeSet<ObjectKey> {
    objects
        .iter()
        .filter_map(|o| {
            let target = match (o["apiVersion"].as_str()?, o["kind"].as_str()?) {
                (v, "HorizontalPodAutoscaler") if v.starts_with("autoscaling/") => {
                    &o["spec"]["scaleTargetRef"]
                }
                (v, "ScaledObject") if v.starts_with("keda.sh/") => &o["spec"]["scaleTargetRef"],
                _ => return None,
            };
            Some(ObjectKey::new(
                target["apiVersion"].as_str().unwrap_or("apps/v1"),
                target["kind"].as_str().unwrap_or("Deployment"),
                o["metadata"]["namespace"].as_str(),
                target["name"].as_str()?,
            ))
        })
        .collect()
}

/// cert-manager's CA injector fills the `caBundle` of an object with one of these.
const INJECTS_CA: [&str; 3] = [
    "cert-manager.io/inject-ca-from",
    "cert-manager.io/inject-ca-from-secret",
    "cert-manager.io/inject-apiserver-ca",
];

/// The pointers ignored on `object` (as rendered): the rules that match it, then the
/// defaults. `scaled` is what [`scaled`] found.
pub fn pointers(
    rules: &[IgnoreDifferences],
    object: &Value,
    scaled: &BTreeSet<ObjectKey>,
) -> Vec<String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_group(api_version);
    let kind = object["kind"].as_str().unwrap_or_default();
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str();
    let namespace = metadata["namespace"].as_str();
    let mut found: Vec<String> = rules
        .iter()
        .filter(|r| {
            r.kind == kind
                && r.group.as_deref().is_none_or(|g| g == group)
                && r.name.as_deref().is_none_or(|n| Some(n) == name)
                && r.namespace.as_deref().is_none_or(|n| Some(n) == namespace)
                && r.labels
                    .iter()
                    .all(|(k, v)| metadata["labels"][k].as_str() == Some(v.as_str()))
        })
        .flat_map(|r| r.json_pointers.iter().map(|p| p.value.clone()))
        .collect();
    let key = ObjectKey::new(api_version, kind, namespace, name.unwrap_or_default());
    if scaled.contains(&key) {
        found.push("/spec/replicas".into());
    }
    let injected = INJECTS_CA
        .iter()
        .any(|a| !metadata["annotations"][*a].is_null());
    if injected {
        found.push(
            match kind {
                "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                    "/webhooks/*/clientConfig/caBundle"
                }
                "CustomResourceDefinition" => "/spec/conversion/webhook/clientConfig/caBundle",
                "APIService" => "/spec/caBundle",
                _ => return dedup(found),
            }
            .into(),
        );
    }
    dedup(found)
}

fn dedup(mut pointers: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    pointers.retain(|p| seen.insert(p.clone()));
    pointers
}

/// What applying `desired` over `live` as `manager` does with each ignored field
/// `desired` sets: keep the live value where `manager` owns the field (leaving it out
/// would delete it), else leave it out.
pub fn pins(pointers: &[String], desired: &Value, live: &Value, manager: &str) -> Vec<Pin> {
    pointers
        .iter()
        .flat_map(|p| expand(p, desired))
        .filter(|p| desired.pointer(p).is_some())
        .map(|pointer| match live.pointer(&pointer) {
            Some(value) if owns(live, manager, &pointer) => Pin::Keep {
                pointer,
                value: value.clone(),
            },
            _ => Pin::Drop { pointer },
        })
        .collect()
}

/// Does `manager` own the field at `pointer` by its applies (the live object's
/// `managedFields`)? A pointer through a list is taken as owned: its items are keyed
/// in the field set by what they hold, and keeping the live value is the safe side.
fn owns(live: &Value, manager: &str, pointer: &str) -> bool {
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == manager && e["operation"] == "Apply")
        .any(|entry| {
            let mut fields = &entry["fieldsV1"];
            let mut value = live;
            for token in &tokens {
                if value.is_array() {
                    return true;
                }
                fields = &fields[format!("f:{token}")];
                value = &value[token.as_str()];
                if fields.is_null() {
                    return false;
                }
            }
            true
        })
}

/// `body` with its pins applied.
pub fn pin(body: &mut Value, pins: &[Pin]) {
    for pin in pins {
        match pin {
            Pin::Keep { pointer, value } => {
                if let Some(slot) = body.pointer_mut(pointer) {
                    *slot = value.clone();
                }
            }
            Pin::Drop { pointer } => {
                let Some((parent, last)) = pointer.rsplit_once('/') else {
                    continue;
                };
                let key = last.replace("~1", "/").replace("~0", "~");
                if let Some(Value::Object(map)) = body.pointer_mut(parent) {
                    map.remove(&key);
                }
            }
        }
    }
}

/// The concrete pointers of `pointer` in `value`: each `*` is every index of the list
/// there.
fn expand(pointer: &str, value: &Value) -> Vec<String> {
    let mut found = vec![(String::new(), value)];
    for token in pointer.split('/').skip(1) {
        found = found
            .into_iter()
            .flat_map(|(at, here)| match (token, here) {
                ("*", Value::Array(items)) => items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (format!("{at}/{i}"), item))
                    .collect::<Vec<_>>(),
                ("*", _) => Vec::new(),
                (token, here) => {
                    let next = format!("{at}/{token}");
                    let child = here.pointer(&format!("/{token}"));
                    match child {
                        Some(child) => vec![(next, child)],
                        // Kept so that a field the object lacks is looked up as written.
                        None => vec![(next, &Value::Null)],
                    }
                }
            })
            .collect();
    }
    found.into_iter().map(|(at, _)| at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(text: &str) -> Vec<IgnoreDifferences> {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn a_rule_matches_its_target_by_kind_group_name_namespace_and_labels() {
        let rules = rules(
            "- {group: apps, kind: Deployment, namespace: shop, labels: {tier: web}, jsonPointers: [/spec/template/metadata/annotations]}\n- {kind: ConfigMap, name: seed, jsonPointers: [/data/counter]}\n",
        );
        let deployment = |namespace: &str, tier: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": namespace, "labels": {"tier": tier}}})
        };
        let none = BTreeSet::new();
        assert_eq!(
            pointers(&rules, &deployment("shop", "web"), &none),
            ["/spec/template/metadata/annotations"]
        );
        assert!(pointers(&rules, &deployment("other", "web"), &none).is_empty());
        assert!(pointers(&rules, &deployment("shop", "db"), &none).is_empty());
        let seed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seed", "namespace": "x"}});
        assert_eq!(pointers(&rules, &seed, &none), ["/data/counter"]);
    }

    #[test]
    fn an_autoscaled_workload_and_an_injected_ca_bundle_are_ignored_by_default() {
        let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}});
        let keda = json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "worker", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"name": "worker"}}});
        let scaled = scaled(&[&hpa, &keda]);
        let deployment = |name: &str, namespace: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace}});
        assert_eq!(
            pointers(&[], &deployment("web", "shop"), &scaled),
            ["/spec/replicas"]
        );
        assert_eq!(
            pointers(&[], &deployment("worker", "shop"), &scaled),
            ["/spec/replicas"]
        );
        assert!(pointers(&[], &deployment("web", "other"), &scaled).is_empty());
        let webhook = |annotations: Value| {
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                   "metadata": {"name": "w", "annotations": annotations}})
        };
        assert_eq!(
            pointers(
                &[],
                &webhook(json!({"cert-manager.io/inject-ca-from": "shop/cert"})),
                &scaled
            ),
            ["/webhooks/*/clientConfig/caBundle"]
        );
        assert!(pointers(&[], &webhook(json!({})), &scaled).is_empty());
    }

    #[test]
    fn a_pinned_field_keeps_its_live_value_and_one_the_live_object_lacks_is_dropped() {
        let desired = json!({"spec": {"replicas": 2, "paused": false},
            "webhooks": [{"name": "a", "clientConfig": {"caBundle": "Cg=="}},
                         {"name": "b", "clientConfig": {"caBundle": "Cg=="}}]});
        let live = json!({"spec": {"replicas": 5},
            "webhooks": [{"name": "a", "clientConfig": {"caBundle": "LS0tLS1CRUdJTi=="}},
                         {"name": "b", "clientConfig": {}}],
            "metadata": {"managedFields": [
                {"manager": "tether", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}, "f:webhooks": {}}},
                {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]}});
        let found = pins(
            &[
                "/spec/replicas".into(),
                "/spec/paused".into(),
                "/spec/minReadySeconds".into(),
                "/webhooks/*/clientConfig/caBundle".into(),
            ],
            &desired,
            &live,
            "tether",
        );
        let pointers: Vec<&str> = found.iter().map(Pin::pointer).collect();
        assert_eq!(
            pointers,
            [
                "/spec/replicas",
                "/spec/paused",
                "/webhooks/0/clientConfig/caBundle",
                "/webhooks/1/clientConfig/caBundle"
            ]
        );
        let mut body = desired.clone();
        pin(&mut body, &found);
        assert_eq!(
            body,
            json!({"spec": {"replicas": 5},
                "webhooks": [{"name": "a", "clientConfig": {"caBundle": "LS0tLS1CRUdJTi=="}},
                             {"name": "b", "clientConfig": {}}]})
        );
        // Once only another manager owns the replicas, tether leaves them out.
        let others = json!({"spec": {"replicas": 5}, "metadata": {"managedFields": [
            {"manager": "tether", "operation": "Apply", "fieldsV1": {"f:spec": {"f:paused": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]}});
        assert_eq!(
            pins(&["/spec/replicas".into()], &desired, &others, "tether"),
            [Pin::Drop {
                pointer: "/spec/replicas".into()
            }]
        );
    }

    #[test]
    fn a_pointer_that_is_not_one_is_an_error_at_its_place() {
        let rules = rules(
            "- kind: Deployment\n  jsonPointers:\n    - /spec/replicas\n    - spec.replicas\n",
        );
        let error = check(".tether.yaml", &rules).unwrap_err();
        assert_eq!((error.line, error.column), (4, 7), "{error}");
        assert!(
            error
                .to_string()
                .contains("\"spec.replicas\" is not a JSON pointer"),
            "{error}"
        );
    }
}
