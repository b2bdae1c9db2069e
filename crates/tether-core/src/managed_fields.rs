//! Field ownership hand-over to an inventory's field manager:
//! - when tether adopts an object that `kubectl apply` made client-side, the fields
//!   that kubectl's client-side manager owns and that tether sets move to tether, as
//!   `kubectl apply --server-side` does for its own objects (k8s.io/client-go's
//!   `csaupgrade`). Without it, kubectl's manager keeps co-owning those fields, and
//!   every later change of them in Git is a conflict. Fields tether does not set stay
//!   kubectl's.
//! - the fields of the manager every inventory shared before each had its own
//!   ([`crate::ownership::MANAGER`]) move whole to the inventory's manager.
//! - the fields `tether install` applied ([`crate::ownership::INSTALL_MANAGER`]) and
//!   the inventory sets move to it: a Source that applies tether's own install from
//!   Git (bootstrap) then changes them by commit, instead of meeting a conflict on
//!   each one a commit changes (`--replicas`, the image).
//!
//! Pure.
//!
//! Field sets are the server's `FieldsV1` tries: `f:<name>` a field, `k:<json>` the
//! item of a keyed list, `v:<json>` an item of a set, `i:<n>` an index, and `.` the
//! node itself; an empty object is a leaf.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use kube_core::DynamicObject;
use serde_json::{Map, Value};

use crate::ownership::{INSTALL_MANAGER, MANAGER};

/// The managers of client-side apply: kubectl's, and the one the server names for an
/// object's creation before any apply.
const CLIENT_SIDE_MANAGERS: &[&str] = &["kubectl-client-side-apply", "before-first-apply"];

/// What is handed over from an entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Giving {
    Nothing,
    /// The fields tether sets (a client-side apply, or tether's own install).
    WhatTetherSets,
    /// Every field (tether's former shared manager).
    Everything,
}

fn giving(entry: &ManagedFieldsEntry, manager: &str) -> Giving {
    let (name, operation) = (entry.manager.as_deref(), entry.operation.as_deref());
    match (name, operation) {
        (Some(name), Some("Update")) if CLIENT_SIDE_MANAGERS.contains(&name) => {
            Giving::WhatTetherSets
        }
        (Some(INSTALL_MANAGER), Some("Apply")) => Giving::WhatTetherSets,
        (Some(MANAGER), Some("Apply")) if manager != MANAGER => Giving::Everything,
        _ => Giving::Nothing,
    }
}

/// Is a conflict with `manager` taken quietly once its fields are handed over? Those
/// of tether's former shared manager and of `tether install` are tether's own: an
/// inventory takes them whatever their value (a client-side apply's differing value
/// stays a conflict: someone else chose it).
pub fn gives_way(manager: &str) -> bool {
    manager == MANAGER || manager == INSTALL_MANAGER
}

/// Does an object's field ownership hold anything to hand over to `manager`?
pub fn has_anything_to_hand_over(entries: &[ManagedFieldsEntry], manager: &str) -> bool {
    entries
        .iter()
        .any(|e| giving(e, manager) != Giving::Nothing)
}

/// The managed fields after the hand-over to `manager` at `now` (see the module);
/// `None` when there is nothing to hand over.
pub fn hand_over(
    entries: &[ManagedFieldsEntry],
    desired: &Value,
    manager: &str,
    api_version: &str,
    now: Time,
) -> Option<Vec<ManagedFieldsEntry>> {
    let mut taken = Map::new();
    let mut result = Vec::with_capacity(entries.len() + 1);
    for entry in entries {
        let giving = giving(entry, manager);
        let fields = entry.fields_v1.as_ref().and_then(|f| f.0.as_object());
        let Some(fields) = fields.filter(|_| giving != Giving::Nothing) else {
            result.push(entry.clone());
            continue;
        };
        let shared = match giving {
            Giving::Everything => fields.clone(),
            _ => intersect(fields, desired),
        };
        if shared.is_empty() {
            result.push(entry.clone());
            continue;
        }
        let kept = subtract(fields, &shared);
        union_into(&mut taken, &shared);
        if !kept.is_empty() {
            let mut entry = entry.clone();
            entry.fields_v1 = Some(FieldsV1(Value::Object(kept)));
            result.push(entry);
        }
    }
    if taken.is_empty() {
        return None;
    }
    let ours = result.iter_mut().find(|e| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Apply")
            && e.api_version.as_deref() == Some(api_version)
    });
    match ours {
        Some(entry) => {
            let mut fields = entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.as_object().cloned())
                .unwrap_or_default();
            union_into(&mut fields, &taken);
            entry.fields_v1 = Some(FieldsV1(Value::Object(fields)));
        }
        None => result.push(ManagedFieldsEntry {
            api_version: Some(api_version.to_string()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(Value::Object(taken))),
            manager: Some(manager.to_string()),
            operation: Some("Apply".into()),
            subresource: None,
            time: Some(now),
        }),
    }
    Some(result)
}

/// The managed fields after `from`'s entries are given to `to` (a handover between
/// inventories): renamed, or merged into `to`'s entry of the same apiVersion. `None`
/// when `from` owns nothing.
pub fn rename_manager(
    entries: &[ManagedFieldsEntry],
    from: &str,
    to: &str,
) -> Option<Vec<ManagedFieldsEntry>> {
    let owned_by = |e: &ManagedFieldsEntry, manager: &str| {
        e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply")
    };
    if !entries.iter().any(|e| owned_by(e, from)) {
        return None;
    }
    let (given, mut result): (Vec<_>, Vec<_>) =
        entries.iter().cloned().partition(|e| owned_by(e, from));
    for entry in given {
        let same_version =
            |e: &&mut ManagedFieldsEntry| owned_by(e, to) && e.api_version == entry.api_version;
        let fields = entry.fields_v1.as_ref().and_then(|f| f.0.as_object());
        match (result.iter_mut().find(same_version), fields) {
            (Some(ours), Some(fields)) => {
                let mut merged = ours
                    .fields_v1
                    .as_ref()
                    .and_then(|f| f.0.as_object().cloned())
                    .unwrap_or_default();
                union_into(&mut merged, fields);
                ours.fields_v1 = Some(FieldsV1(Value::Object(merged)));
            }
            _ => {
                let mut renamed = entry.clone();
                renamed.manager = Some(to.to_string());
                result.push(renamed);
            }
        }
    }
    Some(result)
}

/// A live object as JSON, with the apiVersion and kind that list items come without.
/// Its managedFields (never compared, and the bulk of a listed object) keep only who
/// wrote and how (to tell drift), unless they hold fields to hand over to `manager`.
pub fn live_value(
    mut object: DynamicObject,
    api_version: &str,
    kind: &str,
    manager: &str,
) -> Value {
    let keep = object
        .metadata
        .managed_fields
        .as_deref()
        .is_some_and(|entries| has_anything_to_hand_over(entries, manager));
    if !keep && let Some(entries) = &mut object.metadata.managed_fields {
        for entry in entries {
            entry.fields_v1 = None;
            entry.time = None;
        }
    }
    let mut map = serde_json::Map::new();
    map.insert("apiVersion".into(), Value::String(api_version.into()));
    map.insert("kind".into(), Value::String(kind.into()));
    map.insert(
        "metadata".into(),
        serde_json::to_value(&object.metadata).unwrap_or_default(),
    );
    if let Value::Object(data) = object.data {
        map.extend(data);
    }
    Value::Object(map)
}

/// The part of a field set that `value` sets.
fn intersect(fields: &Map<String, Value>, value: &Value) -> Map<String, Value> {
    let mut shared = Map::new();
    for (key, child) in fields {
        if key == "." {
            shared.insert(key.clone(), child.clone());
            continue;
        }
        let Some(inner) = member(key, value) else {
            continue;
        };
        match child.as_object() {
            Some(grandchildren) if !grandchildren.is_empty() => {
                let sub = intersect(grandchildren, inner);
                if !sub.is_empty() {
                    shared.insert(key.clone(), Value::Object(sub));
                }
            }
            _ => {
                shared.insert(key.clone(), child.clone());
            }
        }
    }
    // The node itself alone (`.`) is not a field tether sets.
    if shared.len() == 1 && shared.contains_key(".") {
        shared.clear();
    }
    shared
}

/// The leaf fields of a field set that `value` holds, each with its path
/// (`spec.template.spec.containers[name=web].image`) and value, in the set's order.
pub fn leaves<'v>(fields: &Value, value: &'v Value) -> Vec<(String, &'v Value)> {
    let mut found = Vec::new();
    if let Some(fields) = fields.as_object() {
        collect_leaves(fields, value, "", &mut found);
    }
    found
}

fn collect_leaves<'v>(
    fields: &Map<String, Value>,
    value: &'v Value,
    path: &str,
    found: &mut Vec<(String, &'v Value)>,
) {
    for (key, child) in fields {
        if key == "." {
            continue;
        }
        let Some(inner) = member(key, value) else {
            continue;
        };
        let here = format!("{path}{}", path_step(key, path.is_empty()));
        match child.as_object() {
            Some(grandchildren) if grandchildren.keys().any(|k| k != ".") => {
                collect_leaves(grandchildren, inner, &here, found);
            }
            _ => found.push((here, inner)),
        }
    }
}

/// A field-set key as a step of a path: `.name`, `[name=web]`, `[=value]`, `[3]`.
fn path_step(key: &str, first: bool) -> String {
    if let Some(name) = key.strip_prefix("f:") {
        return match first {
            true => name.to_string(),
            false => format!(".{name}"),
        };
    }
    if let Some(keys) = key.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).unwrap_or_default();
        let named: Vec<String> = keys
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        return format!("[{}]", named.join(","));
    }
    if let Some(set_value) = key.strip_prefix("v:") {
        return format!("[={set_value}]");
    }
    format!("[{}]", key.strip_prefix("i:").unwrap_or(key))
}

/// The value a field-set key names within `value`.
fn member<'v>(key: &str, value: &'v Value) -> Option<&'v Value> {
    if let Some(name) = key.strip_prefix("f:") {
        return value.as_object()?.get(name);
    }
    let items = value.as_array()?;
    if let Some(keys) = key.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).ok()?;
        return items
            .iter()
            .find(|item| keys.iter().all(|(k, v)| item.get(k) == Some(v)));
    }
    if let Some(set_value) = key.strip_prefix("v:") {
        let wanted: Value = serde_json::from_str(set_value).ok()?;
        return items.iter().find(|item| **item == wanted);
    }
    let index: usize = key.strip_prefix("i:")?.parse().ok()?;
    items.get(index)
}

/// `fields` without what `taken` holds.
fn subtract(fields: &Map<String, Value>, taken: &Map<String, Value>) -> Map<String, Value> {
    let mut kept = Map::new();
    for (key, child) in fields {
        let Some(taken_child) = taken.get(key) else {
            kept.insert(key.clone(), child.clone());
            continue;
        };
        if let (Some(children), Some(taken_children)) = (child.as_object(), taken_child.as_object())
            && !children.is_empty()
        {
            let rest = subtract(children, taken_children);
            // What is left of a node is only worth keeping if it holds a field.
            if rest.keys().any(|k| k != ".") {
                kept.insert(key.clone(), Value::Object(rest));
            }
        }
    }
    kept
}

fn union_into(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, child) in from {
        match (into.get_mut(key), child.as_object()) {
            (Some(Value::Object(existing)), Some(children)) => union_into(existing, children),
            (Some(_), _) => {}
            (None, _) => {
                into.insert(key.clone(), child.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_handover_renames_the_givers_entries_and_merges_into_the_takers() {
        let entry =
            |manager: &str, operation: &str, fields: serde_json::Value| ManagedFieldsEntry {
                api_version: Some("v1".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(FieldsV1(fields)),
                manager: Some(manager.into()),
                operation: Some(operation.into()),
                subresource: None,
                time: None,
            };
        let kubectl = entry(
            "kubectl",
            "Update",
            serde_json::json!({"f:data": {"f:x": {}}}),
        );
        let from = entry(
            "tether:default/tether",
            "Apply",
            serde_json::json!({"f:data": {"f:a": {}}}),
        );
        let to = entry(
            "tether:shop/web",
            "Apply",
            serde_json::json!({"f:data": {"f:b": {}}}),
        );
        // Renamed when the taker owns nothing yet; others' entries untouched.
        let renamed = super::rename_manager(
            &[kubectl.clone(), from.clone()],
            "tether:default/tether",
            "tether:shop/web",
        )
        .unwrap();
        assert_eq!(renamed.len(), 2);
        assert_eq!(renamed[0], kubectl);
        assert_eq!(renamed[1].manager.as_deref(), Some("tether:shop/web"));
        assert_eq!(renamed[1].fields_v1, from.fields_v1);
        // Merged into the taker's entry, wherever it stands.
        let merged = super::rename_manager(
            &[from.clone(), to],
            "tether:default/tether",
            "tether:shop/web",
        )
        .unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(
            merged[0].fields_v1.as_ref().unwrap().0,
            serde_json::json!({"f:data": {"f:b": {}, "f:a": {}}})
        );
        // Nothing to give: nothing to write.
        assert_eq!(
            super::rename_manager(&[kubectl], "tether:default/tether", "tether:shop/web"),
            None
        );
    }

    use super::*;
    use serde_json::json;

    const OURS: &str = "tether:default/tether";

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            ..ManagedFieldsEntry::default()
        }
    }

    fn fields(entries: &[ManagedFieldsEntry], manager: &str) -> Option<Value> {
        entries
            .iter()
            .find(|e| e.manager.as_deref() == Some(manager))
            .and_then(|e| e.fields_v1.clone())
            .map(|f| f.0)
    }

    /// The hand-over at a fixed time (the time is only stamped on tether's entry).
    fn handed_at_epoch(
        entries: &[ManagedFieldsEntry],
        desired: &Value,
        manager: &str,
    ) -> Option<Vec<ManagedFieldsEntry>> {
        let epoch = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        hand_over(entries, desired, manager, "v1", epoch)
    }

    #[test]
    fn fields_tether_sets_move_and_the_rest_stays() {
        let kubectl = entry(
            "kubectl-client-side-apply",
            "Update",
            json!({"f:data": {".": {}, "f:key": {}, "f:extra": {}},
                "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}}}),
        );
        let controller = entry(
            "kube-controller-manager",
            "Update",
            json!({"f:data": {"f:x": {}}}),
        );
        let desired = json!({"data": {"key": "b"}, "metadata": {"name": "cm"}});
        let after = handed_at_epoch(&[kubectl, controller], &desired, OURS).unwrap();
        assert_eq!(
            fields(&after, OURS),
            Some(json!({"f:data": {".": {}, "f:key": {}}}))
        );
        assert_eq!(
            fields(&after, "kubectl-client-side-apply"),
            Some(json!({"f:data": {"f:extra": {}},
                "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}}}))
        );
        assert_eq!(
            fields(&after, "kube-controller-manager"),
            Some(json!({"f:data": {"f:x": {}}})),
            "other managers keep theirs"
        );
    }

    #[test]
    fn keyed_list_items_move_by_their_keys() {
        let kubectl = entry(
            "kubectl-client-side-apply",
            "Update",
            json!({"f:spec": {"f:ports": {".": {},
                "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:targetPort": {}},
                "k:{\"port\":443,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}}}),
        );
        let ours = entry(
            "tether",
            "Apply",
            json!({"f:metadata": {"f:labels": {"f:a": {}}}}),
        );
        let desired =
            json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}});
        let after = handed_at_epoch(&[kubectl, ours], &desired, OURS).unwrap();
        assert_eq!(
            fields(&after, OURS),
            Some(json!({"f:metadata": {"f:labels": {"f:a": {}}},
                "f:spec": {"f:ports": {".": {},
                    "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:targetPort": {}}}}}))
        );
        assert_eq!(
            fields(&after, "kubectl-client-side-apply"),
            Some(
                json!({"f:spec": {"f:ports": {"k:{\"port\":443,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}}})
            )
        );
    }

    /// Bootstrap: a Source applies the objects `tether install` made; the fields it
    /// sets become its own, so a commit changing the replicas is no conflict.
    #[test]
    fn the_fields_of_tether_s_own_install_that_a_source_sets_move_to_it() {
        let install = entry(
            INSTALL_MANAGER,
            "Apply",
            json!({"f:spec": {"f:replicas": {}, "f:serviceName": {}}}),
        );
        let desired = json!({"spec": {"replicas": 3}});
        let after = handed_at_epoch(&[install], &desired, OURS).unwrap();
        assert_eq!(
            fields(&after, OURS),
            Some(json!({"f:spec": {"f:replicas": {}}}))
        );
        assert_eq!(
            fields(&after, INSTALL_MANAGER),
            Some(json!({"f:spec": {"f:serviceName": {}}}))
        );
    }

    #[test]
    fn nothing_to_hand_over_without_client_side_managers() {
        let helm = entry("helm", "Update", json!({"f:data": {"f:key": {}}}));
        let kubectl_ssa = entry("kubectl", "Apply", json!({"f:data": {"f:key": {}}}));
        let desired = json!({"data": {"key": "b"}});
        assert_eq!(
            handed_at_epoch(&[helm, kubectl_ssa], &desired, "tether"),
            None
        );
    }
}
