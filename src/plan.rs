//! Plan: what applying would change, object by object, and a reviewer's diff of it.
//! The comparisons here are pure; `crate::reconcile` fetches the live objects and the
//! server's dry-run results they compare.
//!
//! No noise: a diff compares the live object with the server's own dry run of the
//! apply, so defaulted and server-set fields are the same on both sides. No wasted
//! round trips: an object whose live state already holds every field tether sets,
//! applied from the same rendered body (the applied-hash annotation), is unchanged
//! without asking the server.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::git::Revision;
use crate::k8s::ObjectKey;

/// The hash of the rendered body an object was last applied from.
pub const APPLIED_HASH_ANNOTATION: &str = "tether.dev/applied-hash";
/// kubectl's client-side apply record, which holds Secret values in plain text.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    Create,
    Update,
    Delete,
    /// The apply would take fields another manager owns; not done without force.
    Conflict,
    Unchanged,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Conflict => "conflict",
            Action::Unchanged => "unchanged",
        }
    }
}

/// A field that another field manager owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldConflict {
    pub manager: String,
    pub field: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub key: ObjectKey,
    pub api_version: String,
    pub action: Action,
    /// `Kind/name` of the model, for objects rendered from models.
    pub model: Option<String>,
    /// The model's file.
    pub source: Option<String>,
    /// A unified diff of the object's YAML, Secret values masked; empty when unchanged.
    pub diff: String,
    pub conflicts: Vec<FieldConflict>,
}

/// The changes in apply order, deletions last (in reverse apply order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Where the models came from: a path or a repository URL.
    pub source: String,
    pub revision: Option<Revision>,
    pub changes: Vec<Change>,
    /// Deletions are only carried out with `--prune`; reports say so.
    pub prune: bool,
}

impl Plan {
    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }

    pub fn has_differences(&self) -> bool {
        self.changes.iter().any(|c| c.action != Action::Unchanged)
    }
}

/// Canonical JSON of the rendered body, hashed: what the applied-hash annotation holds.
pub fn applied_hash(body: &Value) -> String {
    let digest = Sha256::digest(body.to_string().as_bytes());
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// The body to apply: the rendered body plus the applied-hash annotation.
pub fn with_applied_hash(body: &Value) -> Value {
    let hash = applied_hash(body);
    let mut body = body.clone();
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED_HASH_ANNOTATION.into(), Value::String(hash));
        }
    }
    body
}

/// Can we tell, without asking the server, that applying `desired` changes nothing?
/// Yes when the live object was applied from the same body (same hash, so tether owns
/// the same fields) and still holds every value of it.
pub fn provably_unchanged(desired: &Value, live: &Value) -> bool {
    let annotation = |v: &Value| {
        v["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
            .as_str()
            .map(str::to_string)
    };
    annotation(desired).is_some() && annotation(desired) == annotation(live) && holds(desired, live)
}

/// Does `live` hold every field of `desired`? Lists of named items (containers,
/// volumes, ports, env) match by name, since the server may add items of its own;
/// other lists must be equal item by item.
fn holds(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, v)| l.get(k).is_some_and(|lv| holds(v, lv))),
        (Value::Array(d), Value::Array(l)) => {
            let named = |items: &Vec<Value>| {
                items
                    .iter()
                    .all(|i| i.get("name").is_some_and(Value::is_string))
            };
            if named(d) && named(l) {
                d.iter().all(|item| {
                    l.iter()
                        .find(|li| li.get("name") == item.get("name"))
                        .is_some_and(|li| holds(item, li))
                })
            } else {
                d.len() == l.len() && d.iter().zip(l).all(|(a, b)| holds(a, b))
            }
        }
        (d, l) => d == l,
    }
}

/// What a reviewer compares: no status, no server bookkeeping, no tether bookkeeping.
pub fn normalize(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
        ] {
            metadata.remove(field);
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(APPLIED_HASH_ANNOTATION);
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
    object
}

/// `apiVersion`, `kind`, `metadata` first, as in rendered objects, so that both sides
/// of a diff print in the same order.
pub fn normalize_key_order(object: Value) -> Value {
    let Value::Object(mut map) = object else {
        return object;
    };
    let mut ordered = serde_json::Map::with_capacity(map.len());
    for key in ["apiVersion", "kind", "metadata"] {
        if let Some(v) = map.shift_remove(key) {
            ordered.insert(key.to_string(), v);
        }
    }
    ordered.extend(map);
    Value::Object(ordered)
}

/// Masks the values of a Secret on both sides of a diff: equal values show as
/// `***`, differing ones as `*** (before)` / `*** (after)`, so a change is visible
/// and a value never is.
pub fn mask_secrets(kind: &str, before: Option<&mut Value>, after: Option<&mut Value>) {
    if kind != "Secret" {
        return;
    }
    let original_before = before.as_ref().map(|b| (**b).clone());
    let original_after = after.as_ref().map(|a| (**a).clone());
    let mask = |side: &mut Value, other: Option<&Value>, label: &str| {
        for field in ["data", "stringData"] {
            if let Some(entries) = side.get_mut(field).and_then(Value::as_object_mut) {
                for (key, value) in entries.iter_mut() {
                    let same =
                        other.and_then(|o| o.get(field)).and_then(|f| f.get(key)) == Some(&*value);
                    *value = Value::String(if same {
                        "***".into()
                    } else {
                        format!("*** ({label})")
                    });
                }
            }
        }
        if let Some(annotations) = side
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            && let Some(value) = annotations.get_mut(LAST_APPLIED_ANNOTATION)
        {
            *value = Value::String("***".into());
        }
    };
    if let Some(before) = before {
        mask(before, original_after.as_ref(), "before");
    }
    if let Some(after) = after {
        mask(after, original_before.as_ref(), "after");
    }
}

/// YAML of an object for a diff (keys as given; render and the server keep an order).
pub fn object_yaml(object: &Value) -> String {
    serde_saphyr::to_string(object).unwrap_or_else(|_| object.to_string())
}

/// A unified diff with three lines of context, between two YAML texts.
pub fn unified_diff(before: &str, after: &str, before_name: &str, after_name: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(before_name, after_name)
        .to_string()
}

/// The diff of one change, masked: `live` → `planned` (either side may be absent).
pub fn change_diff(kind: &str, live: Option<&Value>, planned: Option<&Value>) -> String {
    let mut before = live.map(normalize);
    let mut after = planned.map(normalize);
    mask_secrets(kind, before.as_mut(), after.as_mut());
    let text = |v: &Option<Value>| v.as_ref().map(object_yaml).unwrap_or_default();
    unified_diff(&text(&before), &text(&after), "live", "planned")
}

/// The fields and managers of a server-side apply conflict (HTTP 409).
pub fn conflicts_of(status: &kube::core::Status) -> Vec<FieldConflict> {
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    let mut conflicts: Vec<FieldConflict> = causes
        .iter()
        .filter(|c| c.reason == "FieldManagerConflict")
        .map(|c| FieldConflict {
            manager: c
                .message
                .split('"')
                .nth(1)
                .unwrap_or(&c.message)
                .to_string(),
            field: c.field.clone(),
        })
        .collect();
    if conflicts.is_empty() {
        conflicts.push(FieldConflict {
            manager: String::new(),
            field: status.message.clone(),
        });
    }
    conflicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unchanged_needs_same_hash_and_every_value() {
        let desired = with_applied_hash(
            &json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        );
        let mut live = desired.clone();
        live["metadata"]["uid"] = json!("123");
        live["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        live["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar"}));
        assert!(provably_unchanged(&desired, &live));
        live["spec"]["containers"][0]["image"] = json!("y");
        assert!(!provably_unchanged(&desired, &live), "a changed value");
        let other = with_applied_hash(&json!({"metadata": {"name": "a"}}));
        assert!(
            !provably_unchanged(&other, &desired),
            "a field removed from the model"
        );
        let list = with_applied_hash(&json!({"metadata": {"name": "a"}, "args": ["1"]}));
        let mut longer = list.clone();
        longer["args"] = json!(["1", "2"]);
        assert!(
            !provably_unchanged(&list, &longer),
            "lists without names compare whole"
        );
    }

    #[test]
    fn secrets_are_masked_on_both_sides() {
        let mut before = json!({"kind": "Secret", "data": {"same": "YQ==", "changed": "Yg=="},
            "metadata": {"annotations": {LAST_APPLIED_ANNOTATION: "{\"data\":{\"same\":\"YQ==\"}}"}}});
        let mut after =
            json!({"kind": "Secret", "data": {"same": "YQ==", "changed": "Yw==", "added": "ZA=="}});
        mask_secrets("Secret", Some(&mut before), Some(&mut after));
        let text = format!("{before}{after}");
        for value in ["YQ==", "Yg==", "Yw==", "ZA=="] {
            assert!(!text.contains(value), "{text}");
        }
        assert_eq!(before["data"]["same"], "***");
        assert_eq!(after["data"]["same"], "***");
        assert_eq!(before["data"]["changed"], "*** (before)");
        assert_eq!(after["data"]["changed"], "*** (after)");
        assert_eq!(after["data"]["added"], "*** (after)");
    }

    #[test]
    fn normalize_drops_bookkeeping() {
        let live = json!({"metadata": {"name": "a", "uid": "1", "resourceVersion": "2", "managedFields": [],
            "annotations": {APPLIED_HASH_ANNOTATION: "h"}}, "status": {"phase": "Running"}, "spec": {}});
        assert_eq!(
            normalize(&live),
            json!({"metadata": {"name": "a"}, "spec": {}})
        );
    }
}
