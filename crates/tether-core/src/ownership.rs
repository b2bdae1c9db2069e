//! What marks an object as tether's: the labels and annotations every rendered object
//! carries, and the inventory (an ApplySet parent) whose id those labels name: its
//! ApplySet id, its own field manager, and its record's name (`tether-inventory-<name>`,
//! a prefix reserved to tether). Pure: render writes these marks, and plan and prune
//! read them back.

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::k8s;

/// The value of [`MANAGED_BY_LABEL`] on everything tether applies, and the field
/// manager tether applied with before each inventory had its own
/// ([`Inventory::field_manager`]); fields it still owns are handed over.
pub const MANAGER: &str = "tether";
/// `tether install`'s field manager. A Source that applies tether's own objects (its
/// install exported into Git: bootstrap) takes over the fields it sets from it
/// ([`crate::managed_fields`]).
pub const INSTALL_MANAGER: &str = "tether-install";
/// The longest field manager the API server takes.
const FIELD_MANAGER_LIMIT: usize = 128;
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The ApplySet membership label: the id of the inventory that applied the object.
pub const PART_OF_LABEL: &str = "applyset.kubernetes.io/part-of";
/// The ApplySet parent's own id label.
pub const APPLYSET_ID_LABEL: &str = "applyset.kubernetes.io/id";
/// The label every shard of a record carries: the ApplySet id of its inventory, so
/// that orphans are found by one list.
pub const SHARD_OF_LABEL: &str = "tether.dev/inventory-shard-of";
/// The label of an Argo CD hook object tether made: the ApplySet id of the inventory
/// whose apply made it (a hook is not one of the inventory's objects, never pruned).
pub const HOOK_OF_LABEL: &str = "tether.dev/hook-of";
/// `Kind/name` of the model an object was rendered from.
pub const MODEL_ANNOTATION: &str = "tether.dev/model";
/// The model's file, relative to the models root.
pub const SOURCE_ANNOTATION: &str = "tether.dev/source";

/// How every ConfigMap storing an inventory's record begins (its head and its shards):
/// a prefix tether reserves, so that a record never takes a name a user wants.
pub const RECORD_PREFIX: &str = "tether-inventory-";
/// The longest name of a ConfigMap (a DNS subdomain).
const NAME_LIMIT: usize = 253;

/// The object that records what tether applied (an ApplySet parent ConfigMap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inventory {
    pub name: String,
    pub namespace: String,
}

impl Default for Inventory {
    fn default() -> Self {
        Inventory {
            name: "tether".into(),
            namespace: k8s::DEFAULT_NAMESPACE.into(),
        }
    }
}

impl Inventory {
    /// The field manager this inventory applies with: `tether:<namespace>/<name>`
    /// (`tether:<ApplySet id>` when that is too long for a field manager). Derived from
    /// the inventory's identity alone, so it is stable, and two inventories never share
    /// the ownership of a field.
    pub fn field_manager(&self) -> String {
        let named = format!("{MANAGER}:{}/{}", self.namespace, self.name);
        match named.len() <= FIELD_MANAGER_LIMIT {
            true => named,
            false => format!("{MANAGER}:{}", self.applyset_id()),
        }
    }

    /// The name of the ConfigMap holding the record's head: `tether-inventory-<name>`,
    /// or, for a name too long for that, its start and a hash of it. The inventory's
    /// identity (its ApplySet id and field manager) stays its name's, so objects
    /// applied before records moved here are still its own.
    pub fn record_name(&self) -> String {
        let named = format!("{RECORD_PREFIX}{}", self.name);
        if named.len() <= NAME_LIMIT {
            return named;
        }
        let hash = format!("{:x}", Sha256::digest(&self.name));
        let start: String = self.name.chars().take(200).collect();
        format!("{RECORD_PREFIX}{start}-{}", &hash[..16])
    }

    /// `namespace/name`, as reports name an inventory.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The ApplySet id (KEP-3659): base64url(sha256(name.namespace.kind.group)).
    pub fn applyset_id(&self) -> String {
        let digest = Sha256::digest(format!("{}.{}.ConfigMap.", self.name, self.namespace));
        format!(
            "applyset-{}-v1",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
        )
    }
}

/// The labels that make an object tether's, for the inventory `applyset`.
pub fn ownership_labels(applyset: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        (PART_OF_LABEL.to_string(), applyset.to_string()),
    ])
}

/// Does a live object carry tether's labels for the inventory `applyset`?
pub fn carries_tether_labels(object: &serde_json::Value, applyset: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    labels[MANAGED_BY_LABEL].as_str() == Some(MANAGER)
        && labels[PART_OF_LABEL].as_str() == Some(applyset)
}

/// Is a field path (as the API server prints it in conflicts) one of the labels and
/// annotations that tether sets on every object? Those are tether's to set whoever
/// set them before (a chart's `app.kubernetes.io/managed-by: Helm`); a diff shows the
/// change.
pub fn is_ownership_mark(field: &str) -> bool {
    let Some(label) = field.strip_prefix(".metadata.labels.") else {
        return field.starts_with(".metadata.annotations.tether.dev/");
    };
    label == MANAGED_BY_LABEL || label == PART_OF_LABEL
}

/// The ApplySet id of the tether inventory a live object belongs to, when that is not
/// `applyset` (tether's managed-by label and another inventory's part-of label).
pub fn other_inventory<'v>(object: &'v serde_json::Value, applyset: &str) -> Option<&'v str> {
    let labels = &object["metadata"]["labels"];
    let part_of = labels[PART_OF_LABEL].as_str()?;
    (labels[MANAGED_BY_LABEL].as_str() == Some(MANAGER) && part_of != applyset).then_some(part_of)
}

/// Is a live object (part of) the record of some tether inventory: an ApplySet parent,
/// or a shard of one?
pub fn is_inventory_record(object: &serde_json::Value) -> bool {
    let labels = &object["metadata"]["labels"];
    labels[APPLYSET_ID_LABEL].is_string() || labels[SHARD_OF_LABEL].is_string()
}

/// Is this the name of a ConfigMap that stores some inventory's record (reserved for
/// tether: no model may take it)?
pub fn is_record_name(api_version: &str, kind: &str, name: &str) -> bool {
    api_version == "v1" && kind == "ConfigMap" && name.starts_with(RECORD_PREFIX)
}

/// An annotation of a live object, if it has it.
pub fn annotation(object: &serde_json::Value, key: &str) -> Option<String> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applyset_id_follows_the_kep() {
        // base64url(sha256("tether.default.ConfigMap.")), computed independently with
        // `printf tether.default.ConfigMap. | sha256sum | xxd -r -p | basenc --base64url`.
        assert_eq!(
            Inventory::default().applyset_id(),
            "applyset-7UGKa0tlMtUmzMyVc1R_rBLUoNtSx-jYek2pOCi56Z8-v1"
        );
    }

    #[test]
    fn each_inventory_has_its_own_stable_field_manager() {
        assert_eq!(
            Inventory::default().field_manager(),
            "tether:default/tether"
        );
        let long = Inventory {
            name: "x".repeat(200),
            namespace: "team".into(),
        };
        assert_eq!(
            long.field_manager(),
            format!("tether:{}", long.applyset_id())
        );
        assert!(long.field_manager().len() <= 128);
    }

    #[test]
    fn an_object_of_another_inventory_names_its_applyset() {
        let ours = Inventory::default().applyset_id();
        let theirs = serde_json::json!({"metadata": {"labels": ownership_labels("applyset-b-v1")}});
        assert_eq!(other_inventory(&theirs, &ours), Some("applyset-b-v1"));
        let mine = serde_json::json!({"metadata": {"labels": ownership_labels(&ours)}});
        assert_eq!(other_inventory(&mine, &ours), None);
        let helm = serde_json::json!({"metadata": {"labels": {PART_OF_LABEL: "applyset-b-v1"}}});
        assert_eq!(other_inventory(&helm, &ours), None, "not tether's");
    }

    #[test]
    fn ownership_marks_are_tethers_labels_and_annotations() {
        assert!(is_ownership_mark(
            ".metadata.labels.app.kubernetes.io/managed-by"
        ));
        assert!(is_ownership_mark(
            ".metadata.labels.applyset.kubernetes.io/part-of"
        ));
        assert!(is_ownership_mark(".metadata.annotations.tether.dev/model"));
        assert!(!is_ownership_mark(".metadata.labels.app"));
        assert!(!is_ownership_mark(".data.tether.dev/model"));
    }

    #[test]
    fn copied_labels_of_another_inventory_are_not_ours() {
        let ours = Inventory::default().applyset_id();
        let object =
            serde_json::json!({"metadata": {"labels": ownership_labels("applyset-other-v1")}});
        assert!(!carries_tether_labels(&object, &ours));
        let object = serde_json::json!({"metadata": {"labels": ownership_labels(&ours)}});
        assert!(carries_tether_labels(&object, &ours));
    }
}
