//! A deployment's attestation: what one apply sent to a cluster and what the cluster
//! kept of it, as an in-toto statement (signed into a DSSE envelope by
//! `tether_trust::dsse`, kept by `tether_engine::attestation`), and the comparison of a
//! statement with the cluster's live objects later ([`compare`]).
//!
//! Per object the statement holds:
//! - the digest of what was sent (the statement's subject);
//! - a digest per field the inventory's field manager owned right after the apply
//!   (its `FieldsV1` walked over the live object), so that a later change names its
//!   field. A Secret's `data` and `stringData` are one digest: a value's digest alone
//!   would let a short one be guessed;
//! - the other writers of the object (each manager's field set, by digest), so that a
//!   field someone else set since is told apart from what they had set before.
//!
//! No value is held, only digests: a statement may be read by whoever reads the
//! namespace it is kept in. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::managed_fields::leaves;

/// in-toto's statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate type of tether's deployment attestations.
pub const PREDICATE_TYPE: &str = "https://tether.dev/attestation/deployment/v1";

/// The writers whose changes are the cluster's own work, never a hand's: told apart
/// from the rest in [`Drift::Added`].
const CONTROL_PLANE_MANAGERS: &[&str] = &["kube-controller-manager", "kube-scheduler", "kubelet"];

/// What was deployed, and from where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// The repository (path, URL and ref, or artifact) as reports name it.
    pub source: String,
    /// The commit or artifact digest the objects were rendered from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Who signed it, when the source verifies signatures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<String>,
    pub cluster: String,
    pub inventory: String,
    /// The field manager the objects were applied as.
    pub manager: String,
    /// When the apply ended (RFC 3339, UTC).
    pub time: String,
}

/// One object of an attestation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestedObject {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// `sha256:…` of what was sent (keys sorted, no whitespace).
    pub sent: String,
    /// Each field the inventory's manager owned, to the digest of its value.
    pub fields: BTreeMap<String, String>,
    /// Each other writer (`manager` or `manager/subresource`), to the digest of its
    /// field set.
    #[serde(default)]
    pub writers: BTreeMap<String, String>,
}

impl AttestedObject {
    /// `apps/v1 Deployment shop/web`: the object as the statement's subject names it.
    pub fn reference(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {} {ns}/{}", self.api_version, self.kind, self.name),
            None => format!("{} {} {}", self.api_version, self.kind, self.name),
        }
    }
}

/// What an attestation says, read back from its statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    pub deployment: Deployment,
    pub objects: Vec<AttestedObject>,
}

#[derive(Serialize, Deserialize)]
struct Statement {
    #[serde(rename = "_type")]
    statement_type: String,
    subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    predicate_type: String,
    predicate: Attestation,
}

#[derive(Serialize, Deserialize)]
struct Subject {
    name: String,
    digest: BTreeMap<String, String>,
}

/// Why a statement cannot be read as a deployment attestation.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StatementError {
    #[error("the statement is not JSON of an in-toto statement: {0}")]
    NotAStatement(String),
    #[error("the statement's predicate is {0}, not {PREDICATE_TYPE}")]
    OtherPredicate(String),
    #[error("the statement names {subject} with {found}, but its predicate says {expected}")]
    Inconsistent {
        subject: String,
        found: String,
        expected: String,
    },
}

impl Attestation {
    /// The in-toto statement, as bytes to sign.
    pub fn statement(&self) -> Vec<u8> {
        let statement = Statement {
            statement_type: STATEMENT_TYPE.into(),
            subject: self
                .objects
                .iter()
                .map(|object| Subject {
                    name: object.reference(),
                    digest: BTreeMap::from([(
                        "sha256".to_string(),
                        object.sent.trim_start_matches("sha256:").to_string(),
                    )]),
                })
                .collect(),
            predicate_type: PREDICATE_TYPE.into(),
            predicate: self.clone(),
        };
        serde_json::to_vec(&statement).unwrap_or_default()
    }

    /// An attestation read from the statement a verified envelope holds.
    pub fn read(statement: &[u8]) -> Result<Attestation, StatementError> {
        let statement: Statement = serde_json::from_slice(statement)
            .map_err(|e| StatementError::NotAStatement(e.to_string()))?;
        if statement.predicate_type != PREDICATE_TYPE {
            return Err(StatementError::OtherPredicate(statement.predicate_type));
        }
        for (subject, object) in statement.subject.iter().zip(&statement.predicate.objects) {
            let found = format!(
                "sha256:{}",
                subject.digest.get("sha256").map_or("", String::as_str)
            );
            if subject.name != object.reference() || found != object.sent {
                return Err(StatementError::Inconsistent {
                    subject: subject.name.clone(),
                    found,
                    expected: format!("{} {}", object.reference(), object.sent),
                });
            }
        }
        Ok(statement.predicate)
    }
}

/// `sha256:…` of a value in canonical JSON (keys sorted, no whitespace).
pub fn digest(value: &Value) -> String {
    let digest = Sha256::digest(canonical(value).as_bytes());
    format!("sha256:{}", hex(&digest))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for key in keys {
                    out.insert(key.clone(), sorted(&map[key]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// A short digest of a field's value: 128 bits are plenty to tell a change.
fn field_digest(value: &Value) -> String {
    let digest = Sha256::digest(canonical(value).as_bytes());
    hex(&digest[..16])
}

/// The fields `manager` owns on `live` (the object as the server returns it, with its
/// managedFields), each to the digest of its value; a Secret's data as one.
pub fn owned_fields(live: &Value, manager: &str) -> BTreeMap<String, String> {
    let secret = live["kind"] == "Secret" && live["apiVersion"] == "v1";
    let mut fields = BTreeMap::new();
    let mut secret_data = Map::new();
    for entry in entries(live) {
        if entry["manager"] != manager
            || entry["operation"] != "Apply"
            || entry.get("subresource").is_some_and(|s| !s.is_null())
        {
            continue;
        }
        for (path, value) in leaves(&entry["fieldsV1"], live) {
            match secret && (path.starts_with("data.") || path.starts_with("stringData.")) {
                true => {
                    secret_data.insert(path, value.clone());
                }
                false => {
                    fields.insert(path, field_digest(value));
                }
            }
        }
    }
    if !secret_data.is_empty() {
        fields.insert("data".into(), field_digest(&Value::Object(secret_data)));
    }
    fields
}

/// The object's other writers than `manager`, each to the digest of its field set.
pub fn writers(live: &Value, manager: &str) -> BTreeMap<String, String> {
    entries(live)
        .filter(|entry| !(entry["manager"] == manager && entry["operation"] == "Apply"))
        .map(|entry| (writer_name(entry), field_digest(&entry["fieldsV1"])))
        .collect()
}

fn entries(live: &Value) -> impl Iterator<Item = &Value> {
    live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
}

fn writer_name(entry: &Value) -> String {
    let manager = entry["manager"].as_str().unwrap_or("(unnamed)");
    match entry["subresource"].as_str().filter(|s| !s.is_empty()) {
        Some(subresource) => format!("{manager}/{subresource}"),
        None => manager.to_string(),
    }
}

/// Is `path` the attested `field`, or within a Secret's data (attested as one)?
fn within(path: &str, field: &str) -> bool {
    path == field
        || (field == "data" && (path.starts_with("data.") || path.starts_with("stringData.")))
}

/// How a live object differs from what the attestation says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drift {
    /// The object is gone.
    Missing { object: String },
    /// A field the apply set has another value now; `by` the writers that set it
    /// since (none when the inventory's own manager holds the new value: a later
    /// apply).
    Changed {
        object: String,
        field: String,
        by: Vec<String>,
    },
    /// A field the apply set is gone.
    Removed { object: String, field: String },
    /// A writer other than the cluster's own controllers set fields since.
    Added {
        object: String,
        writer: String,
        fields: Vec<String>,
    },
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drift::Missing { object } => write!(f, "{object}: deleted"),
            Drift::Changed { object, field, by } if by.is_empty() => {
                write!(f, "{object}: {field} changed by a later apply")
            }
            Drift::Changed { object, field, by } => {
                write!(f, "{object}: {field} changed by {}", by.join(", "))
            }
            Drift::Removed { object, field } => write!(f, "{object}: {field} removed"),
            Drift::Added {
                object,
                writer,
                fields,
            } => write!(f, "{object}: {writer} set {} since", fields.join(", ")),
        }
    }
}

/// How the live objects differ from `attestation`: `live` holds, per attested object
/// in order, the object as the server returns it now (none: not found).
pub fn compare(attestation: &Attestation, live: &[Option<Value>]) -> Vec<Drift> {
    let manager = &attestation.deployment.manager;
    let mut drift = Vec::new();
    for (attested, live) in attestation.objects.iter().zip(live) {
        let object = attested.reference();
        let Some(live) = live else {
            drift.push(Drift::Missing { object });
            continue;
        };
        let now = owned_fields(live, manager);
        let changed_writers: Vec<(String, Vec<(String, String)>)> = entries(live)
            .filter(|entry| {
                !(entry["manager"] == manager.as_str() && entry["operation"] == "Apply")
            })
            .filter(|entry| {
                attested.writers.get(&writer_name(entry)) != Some(&field_digest(&entry["fieldsV1"]))
            })
            .map(|entry| {
                let fields = leaves(&entry["fieldsV1"], live)
                    .into_iter()
                    .map(|(path, value)| (path, field_digest(value)))
                    .collect();
                (writer_name(entry), fields)
            })
            .collect();
        for (field, recorded) in &attested.fields {
            let by_others: Vec<&(String, Vec<(String, String)>)> = changed_writers
                .iter()
                .filter(|(_, fields)| fields.iter().any(|(path, _)| within(path, field)))
                .collect();
            // A Secret's data taken by another writer cannot be compared to its one
            // digest: it changed hands, so it is told as changed.
            let current = now.get(field).or_else(|| {
                by_others
                    .iter()
                    .flat_map(|(_, fields)| fields.iter())
                    .find(|(path, _)| path == field)
                    .map(|(_, digest)| digest)
            });
            let by = || by_others.iter().map(|(writer, _)| writer.clone()).collect();
            match current {
                Some(value) if value == recorded => {}
                None if by_others.is_empty() => drift.push(Drift::Removed {
                    object: object.clone(),
                    field: field.clone(),
                }),
                _ => drift.push(Drift::Changed {
                    object: object.clone(),
                    field: field.clone(),
                    by: by(),
                }),
            }
        }
        for (writer, fields) in &changed_writers {
            let manager_name = writer.split('/').next().unwrap_or_default();
            if CONTROL_PLANE_MANAGERS.contains(&manager_name) || writer.ends_with("/status") {
                continue;
            }
            let added: Vec<String> = fields
                .iter()
                .filter(|(path, _)| !attested.fields.contains_key(path))
                .map(|(path, _)| path.clone())
                .collect();
            if !added.is_empty() {
                drift.push(Drift::Added {
                    object: object.clone(),
                    writer: writer.clone(),
                    fields: added,
                });
            }
        }
    }
    drift
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn live(data: Value, entries: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "menu", "namespace": "shop", "managedFields": entries,
                         "labels": {"team": "a"}},
            "data": data,
        })
    }

    fn applied() -> Value {
        json!({"manager": "tether-shop", "operation": "Apply", "apiVersion": "v1",
               "fieldsType": "FieldsV1",
               "fieldsV1": {"f:data": {"f:dish": {}, "f:price": {}},
                            "f:metadata": {"f:labels": {"f:team": {}}}}})
    }

    fn attestation(live: &Value) -> Attestation {
        Attestation {
            deployment: Deployment {
                source: "repo".into(),
                revision: Some("abc".into()),
                verified: None,
                cluster: "local".into(),
                inventory: "shop".into(),
                manager: "tether-shop".into(),
                time: "2026-11-30T09:00:00Z".into(),
            },
            objects: vec![AttestedObject {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("shop".into()),
                name: "menu".into(),
                sent: digest(&json!({"data": {"dish": "soup"}})),
                fields: owned_fields(live, "tether-shop"),
                writers: writers(live, "tether-shop"),
            }],
        }
    }

    #[test]
    fn fields_are_named_by_path_and_keyed_list_items_by_their_keys() {
        let object = json!({"spec": {"containers": [{"name": "web", "image": "a:1"}]}});
        let fields = json!({"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}});
        let paths: Vec<String> = leaves(&fields, &object)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.containers[name=web].image",
                "spec.containers[name=web].name"
            ]
        );
    }

    #[test]
    fn the_same_object_shows_no_drift_and_a_statement_reads_back() {
        let now = live(json!({"dish": "soup", "price": "4"}), json!([applied()]));
        let attested = attestation(&now);
        assert_eq!(attested.objects[0].fields.len(), 3);
        assert_eq!(compare(&attested, &[Some(now)]), vec![]);
        assert_eq!(Attestation::read(&attested.statement()), Ok(attested));
    }

    #[test]
    fn an_edit_names_its_field_and_writer_and_a_deletion_the_object() {
        let before = live(json!({"dish": "soup", "price": "4"}), json!([applied()]));
        let attested = attestation(&before);
        // kubectl edit: price changed (taken from tether), a label added.
        let edited = live(
            json!({"dish": "soup", "price": "9"}),
            json!([
                {"manager": "tether-shop", "operation": "Apply",
                 "fieldsV1": {"f:data": {"f:dish": {}}, "f:metadata": {"f:labels": {"f:team": {}}}}},
                {"manager": "kubectl-edit", "operation": "Update",
                 "fieldsV1": {"f:data": {"f:price": {}}, "f:metadata": {"f:labels": {"f:owner": {}}}}},
            ]),
        );
        let mut edited = edited;
        edited["metadata"]["labels"]["owner"] = json!("me");
        let drift = compare(&attested, &[Some(edited)]);
        let text: Vec<String> = drift.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "v1 ConfigMap shop/menu: data.price changed by kubectl-edit",
                "v1 ConfigMap shop/menu: kubectl-edit set metadata.labels.owner since",
            ]
        );
        assert_eq!(
            compare(&attested, &[None]),
            vec![Drift::Missing {
                object: "v1 ConfigMap shop/menu".into()
            }]
        );
    }

    #[test]
    fn a_secrets_data_is_one_digest_and_a_forged_subject_is_refused() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "managedFields": [
                {"manager": "m", "operation": "Apply", "fieldsV1": {"f:data": {"f:password": {}, "f:user": {}}}}
            ]},
            "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
        });
        let fields = owned_fields(&secret, "m");
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["data"]);
        let now = live(json!({"dish": "soup", "price": "4"}), json!([applied()]));
        let mut attested = attestation(&now);
        let statement = attested.statement();
        attested.objects[0].sent = digest(&json!("other"));
        let mut forged: Value = serde_json::from_slice(&statement).unwrap();
        forged["predicate"] = serde_json::to_value(&attested).unwrap();
        assert!(matches!(
            Attestation::read(forged.to_string().as_bytes()),
            Err(StatementError::Inconsistent { .. })
        ));
    }
}
