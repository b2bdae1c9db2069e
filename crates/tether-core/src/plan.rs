//! Plan: what applying would change, object by object, and a reviewer's diff of it
//! (unified, Secret values masked), with the conflicts a 409 names.
//! The comparisons here are pure; `tether_engine::reconcile` fetches the live objects and the
//! server's dry-run results they compare.
//!
//! No noise: a diff compares the live object with the server's own dry run of the
//! apply, so defaulted and server-set fields are the same on both sides. No wasted
//! round trips: an object whose live state already holds every field tether sets,
//! applied from the same rendered body (the applied-hash annotation), is unchanged
//! without asking the server.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::inventory::Contents;
use crate::inventory::budget::PruneHold;
use crate::inventory::contents::Deletion;
use crate::k8s::ObjectKey;
use crate::normalize::same_quantity;
use crate::source::Revision;

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
    /// The object could not be planned (the server refused its dry run); the other
    /// objects are planned and applied all the same.
    Error,
    /// Its model is gone, but tether adopted it: prune removes tether's labels and
    /// field ownership and keeps the object.
    Release,
    /// A field the server does not let change (a Job's pod template) changed: the
    /// object is deleted and created again.
    Replace,
    /// A Node model whose host is gone: with prune, the node is cordoned, its pods
    /// evicted (disruption budgets respected) or deleted, and the Node deleted.
    RemoveHost,
    /// A Node model whose node is not in the cluster (yet): nothing is applied
    /// until it joins, since tether never creates a node.
    Absent,
    /// Its annotation says not to apply it (Flux's `ssa: Ignore`, or `ssa:
    /// IfNotPresent` of an object that exists): nothing is applied or recorded.
    Skip,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Conflict => "conflict",
            Action::Unchanged => "unchanged",
            Action::Error => "error",
            Action::Release => "release",
            Action::Replace => "replace",
            Action::RemoveHost => "remove-host",
            Action::Absent => "absent",
            Action::Skip => "skip",
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
    /// The wave of the workflow it is applied in; `None` for deletions (after the
    /// last wave).
    pub wave: Option<usize>,
    /// `Kind/name` of the model, for objects rendered from models.
    pub model: Option<String>,
    /// The model's file.
    pub source: Option<String>,
    /// A unified diff of the object's YAML, Secret values masked; empty when unchanged.
    pub diff: String,
    pub conflicts: Vec<FieldConflict>,
    /// Why the object could not be planned (with [`Action::Error`]).
    pub error: Option<String>,
    /// The other tether inventory the live object belongs to (`namespace/name`, or its
    /// ApplySet id when no such inventory is found); the change is then a conflict
    /// that only `take_ownership` overrides.
    pub owned_by: Option<String>,
    /// The conflicts are drift: on an object this inventory applied, every
    /// conflicting field was last written in place (`kubectl edit`/`patch`, a
    /// controller's update) rather than by another declarative applier. A daemon that
    /// corrects drift takes those fields back.
    pub drift: bool,
    /// For a Namespace or a CustomResourceDefinition to delete: what its deletion
    /// takes with it (the Namespace's objects, the definition's custom resources).
    /// It is kept when that includes objects this inventory did not create, unless
    /// the apply is told otherwise ([`crate::inventory::contents::guard`]).
    pub contents: Option<Contents>,
    /// For a deletion: the annotation on the live object that lets prune delete it
    /// with what it holds (`tether.dev/prune: with-contents`).
    pub with_contents: Option<String>,
    /// The annotation, in Flux's or Argo CD's spelling (`key: value`), that decided
    /// the action: a skip, a release instead of a deletion, a replace. See
    /// [`crate::directive`].
    pub directive: Option<String>,
    /// The fields left to other managers (JSON pointers; see [`crate::ignore`]):
    /// applied with their live values or not at all, so never in the diff.
    pub ignored: Vec<String>,
}

impl Change {
    /// A change of `key` with nothing else known yet: no wave, model, diff,
    /// conflict, error, owner or drift.
    pub fn new(key: ObjectKey, api_version: String, action: Action) -> Self {
        Change {
            key,
            api_version,
            action,
            wave: None,
            model: None,
            source: None,
            diff: String::new(),
            conflicts: Vec::new(),
            error: None,
            owned_by: None,
            drift: false,
            contents: None,
            with_contents: None,
            directive: None,
            ignored: Vec::new(),
        }
    }

    /// The change as the deletion guard sees it ([`crate::inventory::contents::guard`]).
    pub fn deletion(&self) -> Deletion<'_> {
        Deletion {
            key: &self.key,
            contents: self.contents.as_ref(),
            opted_in: self.with_contents.is_some(),
        }
    }
}

/// The changes in apply order, deletions last (in reverse apply order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Where the models came from: a path or a repository URL.
    pub source: String,
    /// The KubernetesService whose cluster this plan is for, when the models name
    /// several (each cluster is planned apart).
    pub cluster: Option<String>,
    pub revision: Option<Revision>,
    pub changes: Vec<Change>,
    /// Deletions are only carried out with `--prune`; reports say so.
    pub prune: bool,
    /// What a reviewer should know besides the changes (a missing inventory).
    pub warnings: Vec<String>,
    /// The waves of the workflow, when models wait for others (empty otherwise).
    pub waves: Vec<WaveSummary>,
    /// The dependency graph as a Mermaid flowchart, when models wait for others.
    pub graph: Option<String>,
    /// The prune is beyond the deletion budget: nothing is deleted until its
    /// deletions are approved (see [`crate::inventory::budget`]).
    pub prune_hold: Option<PruneHold>,
    /// The Argo CD hooks an apply of it runs when it changes something, each as
    /// `Phase Kind namespace/name` (a generated name ends in `*`; see [`crate::hook`]).
    pub hooks: Vec<String>,
}

/// One wave of a plan, as reports show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WaveSummary {
    /// What must be ready before it starts (`Kind namespace/name`, with the rule).
    pub waits_for: Vec<String>,
}

impl Plan {
    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }

    pub fn has_differences(&self) -> bool {
        self.changes
            .iter()
            .any(|c| !matches!(c.action, Action::Unchanged | Action::Error | Action::Absent))
    }

    pub fn has_errors(&self) -> bool {
        self.count(Action::Error) > 0
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
/// other lists must be equal item by item. An empty list, or an empty map where
/// Kubernetes has a map type, is what the server stores as nothing.
fn holds(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, v)| match l.get(k) {
            Some(lv) => holds(v, lv),
            None => stored_as_nothing(k, v),
        }),
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

/// Fields whose Kubernetes type is a map (Go maps drop out of JSON when empty), as
/// opposed to structs such as `emptyDir: {}`, which the server keeps.
const MAP_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "stringData",
    "nodeSelector",
    "matchLabels",
    "limits",
    "requests",
    "hard",
    "capacity",
    "overhead",
];

fn stored_as_nothing(field: &str, value: &Value) -> bool {
    match value {
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty() && MAP_FIELDS.contains(&field),
        _ => false,
    }
}

/// The fields of the resource lists (limits, requests, a quota's `hard`, …) and
/// `sizeLimit`, whose values are quantities.
const QUANTITY_MAPS: &[&str] = &[
    "limits",
    "requests",
    "hard",
    "capacity",
    "overhead",
    "max",
    "min",
    "default",
    "defaultRequest",
    "maxLimitRequestRatio",
];

/// Is a conflict's field a map field (labels, annotations, data, …) that the live
/// object holds empty or not at all? Another manager that applied `labels: {}` or
/// `binaryData: {}` owns that emptiness as a value (current servers record an applied
/// empty map as a leaf): a manager that fills it takes nothing of theirs. A path that
/// cannot be read down to its parent is not an empty map.
pub fn empty_map_at(live: &Value, path: &str) -> bool {
    let field = path.rsplit('.').next().unwrap_or_default();
    MAP_FIELDS.contains(&field)
        && match value_at(live, path) {
            Some(value) => stored_as_nothing(field, value) || value.is_null(),
            // A field of the object itself (`.binaryData`) has the object as parent.
            None => parent_path(path).is_none_or(|p| value_at(live, p).is_some()),
        }
}

/// Do two objects hold the same value at a field path of a conflict (as the API
/// server spells it: `.spec.containers[name="app"].resources.limits.cpu`)? Quantities
/// compare by value (`1e+09` and `1G`). An unreadable path is not the same value.
pub fn same_value_at(live: &Value, applied: &Value, path: &str) -> bool {
    // Empty is nothing by the same rule as `holds`: lists, and maps of map fields.
    let field = path.rsplit('.').next().unwrap_or_default();
    let nothing = |v: &Value| stored_as_nothing(field, v);
    let (a, b) = match (value_at(live, path), value_at(applied, path)) {
        (Some(a), Some(b)) => (a, b),
        // What is stored as nothing: absent on both sides, or
        // absent on one and empty on the other, is the same (when the path is
        // readable down to the field's parent).
        (a, b) => {
            let readable = parent_path(path)
                .is_some_and(|p| value_at(live, p).is_some() && value_at(applied, p).is_some());
            return readable && a.is_none_or(nothing) && b.is_none_or(nothing);
        }
    };
    if a == b {
        return true;
    }
    let segments: Vec<&str> = path.rsplit('.').take(2).collect();
    let quantity = match segments.as_slice() {
        [field, ..] if *field == "sizeLimit" => true,
        [_, parent, ..] => QUANTITY_MAPS.contains(&parent.split('[').next().unwrap_or("")),
        _ => false,
    };
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match (text(a), text(b)) {
        (Some(a), Some(b)) => quantity && same_quantity(&a, &b),
        _ => false,
    }
}

/// The path of a field's parent: `.a.b[k=1].c` → `.a.b[k=1]` (a field name with
/// dots cuts wrongly, and then does not resolve).
fn parent_path(path: &str) -> Option<&str> {
    let cut = path.rfind(['.', '['])?;
    (cut > 0).then(|| &path[..cut])
}

/// The value at a field path as the API server prints it in conflicts: `.name` for a
/// field (names may hold dots: the longest key that fits wins), `[k="v",n=1]` for the
/// item of a keyed list, `[=v]` for an item of a set, `[3]` for an index.
pub fn value_at<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    if path.is_empty() {
        return Some(value);
    }
    if let Some(rest) = path.strip_prefix('.') {
        let map = value.as_object()?;
        let mut keys: Vec<&String> = map
            .keys()
            .filter(|k| {
                rest.strip_prefix(k.as_str())
                    .is_some_and(|after| after.is_empty() || after.starts_with(['.', '[']))
            })
            .collect();
        keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
        return keys
            .into_iter()
            .find_map(|k| value_at(&map[k], &rest[k.len()..]));
    }
    let rest = path.strip_prefix('[')?;
    let end = closing_bracket(rest)?;
    let (selector, after) = (&rest[..end], &rest[end + 1..]);
    let items = value.as_array()?;
    let item = if let Some(set_value) = selector.strip_prefix('=') {
        let wanted: Value = serde_json::from_str(set_value).ok()?;
        items.iter().find(|i| **i == wanted)?
    } else if let Ok(index) = selector.parse::<usize>() {
        items.get(index)?
    } else {
        let keys: Vec<(&str, Value)> = split_outside_quotes(selector)
            .into_iter()
            .map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k, serde_json::from_str(v).ok()?))
            })
            .collect::<Option<_>>()?;
        items
            .iter()
            .find(|i| keys.iter().all(|(k, v)| i.get(*k) == Some(v)))?
    };
    value_at(item, after)
}

/// The index of the `]` that closes a selector, skipping brackets inside JSON strings.
fn closing_bracket(text: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ']' if !in_string => return Some(i),
            _ => {}
        }
    }
    None
}

fn split_outside_quotes(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut in_string, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ',' if !in_string => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
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

/// The diff of an object that is replaced: the live values of the fields tether
/// sets against the rendered ones (the rest is the server's and comes back).
pub fn replace_diff(kind: &str, live: &Value, planned: &Value) -> String {
    change_diff(kind, Some(&projected(live, planned)), Some(planned))
}

/// `live`, cut down to the fields `shape` has.
fn projected(live: &Value, shape: &Value) -> Value {
    match (live, shape) {
        (Value::Object(live), Value::Object(shape)) => Value::Object(
            shape
                .iter()
                .filter_map(|(k, s)| Some((k.clone(), projected(live.get(k)?, s))))
                .collect(),
        ),
        (Value::Array(live), Value::Array(shape)) if live.len() == shape.len() => Value::Array(
            live.iter()
                .zip(shape)
                .map(|(l, s)| projected(l, s))
                .collect(),
        ),
        (live, _) => live.clone(),
    }
}

/// The fields and managers of a server-side apply conflict (HTTP 409).
pub fn conflicts_of(status: &kube_core::Status) -> Vec<FieldConflict> {
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
    fn conflict_paths_find_their_values() {
        let object = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
                "containers": [{"name": "a", "resources": {"limits": {"cpu": "1e+09"}}}],
                "finalizers": ["x/y"], "args": ["one", "two"]}});
        let at = |path| value_at(&object, path).cloned();
        assert_eq!(
            at(".metadata.labels.app.kubernetes.io/name"),
            Some(json!("web"))
        );
        assert_eq!(
            at(".spec.ports[port=80,protocol=\"TCP\"].targetPort"),
            Some(json!(8080))
        );
        assert_eq!(at(".spec.ports[port=81,protocol=\"TCP\"]"), None);
        assert_eq!(at(".spec.finalizers[=\"x/y\"]"), Some(json!("x/y")));
        assert_eq!(at(".spec.args[1]"), Some(json!("two")));
        assert_eq!(at("spec"), None, "not a path");
        let path = ".spec.containers[name=\"a\"].resources.limits.cpu";
        let mut applied = object.clone();
        applied["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("1G");
        assert!(
            same_value_at(&object, &applied, path),
            "one quantity, two spellings"
        );
        applied["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("2G");
        assert!(!same_value_at(&object, &applied, path));
        let mut relabelled = object.clone();
        relabelled["metadata"]["labels"]["app.kubernetes.io/name"] = json!("1e3");
        let mut other = object.clone();
        other["metadata"]["labels"]["app.kubernetes.io/name"] = json!("1000");
        assert!(
            !same_value_at(
                &relabelled,
                &other,
                ".metadata.labels.app.kubernetes.io/name"
            ),
            "a label is not a quantity"
        );
    }

    #[test]
    fn empty_maps_and_lists_are_held_by_nothing_where_the_server_drops_them() {
        let desired = with_applied_hash(&json!({"metadata": {"name": "a", "labels": {}},
            "data": {}, "spec": {"tolerations": [], "volumes": [{"name": "v", "emptyDir": {}}]}}));
        let mut live = desired.clone();
        live["metadata"].as_object_mut().unwrap().remove("labels");
        live.as_object_mut().unwrap().remove("data");
        live["spec"].as_object_mut().unwrap().remove("tolerations");
        assert!(provably_unchanged(&desired, &live));
        live["spec"]["volumes"][0] = json!({"name": "v", "hostPath": {"path": "/x"}});
        assert!(
            !provably_unchanged(&desired, &live),
            "emptyDir is a struct the server keeps"
        );
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
