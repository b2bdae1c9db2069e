//! Objects handed over from one inventory to another (`tether handover`): what
//! `tether apply` applied (inventory `default/tether`) becomes a Source's, so the
//! Source updates and prunes it instead of refusing it as another inventory's.
//!
//! In three steps, each safe to interrupt and run again: the receiving inventory
//! records the objects first; then each object gets the receiver's membership label,
//! its fields the receiver's field manager (so the receiver's applies meet no
//! conflict); last the giving inventory forgets them. The decision per object
//! ([`decide`]) is pure.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::Client;
use kube::api::{DynamicObject, Patch, PatchParams};
use tether_core::inventory::{InventoryEntry, InventoryRecord};
use tether_core::managed_fields::rename_manager;
use tether_core::ownership::{Inventory, PART_OF_LABEL};

use crate::cluster::{ClusterError, Resources, api_error};
use crate::record::{read_inventory, update_inventory};

/// Why a recorded object was not handed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Left {
    /// Not in the cluster any more: the giver forgets it.
    Gone,
    /// Another inventory's by its label (taken with --dangerous-override-ownership):
    /// not the giver's to give; it stays recorded by the giver, which will not touch it.
    OwnedElsewhere(String),
}

/// What a handover did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Handover {
    pub moved: Vec<InventoryEntry>,
    /// Moved by an earlier, interrupted handover: the giver only forgets them.
    pub already_moved: Vec<InventoryEntry>,
    pub left: Vec<(InventoryEntry, Left)>,
}

/// What to do with one recorded object, from its live membership label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Move,
    /// An earlier, interrupted handover moved it already.
    AlreadyMoved,
    Leave(Left),
}

/// Decides one object's handover from its live label (`None`: no object).
pub fn decide(
    live_label: Option<Option<&str>>,
    giver: &Inventory,
    receiver: &Inventory,
) -> Decision {
    match live_label {
        None => Decision::Leave(Left::Gone),
        Some(Some(id)) if id == giver.applyset_id() => Decision::Move,
        Some(Some(id)) if id == receiver.applyset_id() => Decision::AlreadyMoved,
        Some(label) => Decision::Leave(Left::OwnedElsewhere(
            label.unwrap_or("no label").to_string(),
        )),
    }
}

/// Hands every object `giver` recorded over to `receiver`.
pub async fn hand_over(
    client: &Client,
    giver: &Inventory,
    receiver: &Inventory,
) -> Result<Handover, ClusterError> {
    let record = read_inventory(client, giver).await?;
    let kinds = record
        .entries
        .keys()
        .map(|e| (e.api_version.clone(), e.kind.clone()))
        .collect();
    let resources = Resources::discover(client, &kinds).await?;
    let mut live = Vec::new();
    let mut handover = Handover::default();
    for entry in record.entries.keys() {
        let api = resources.api(&entry.api_version, &entry.kind, entry.namespace.as_deref())?;
        let object = api
            .get_opt(&entry.name)
            .await
            .map_err(api_error(format!("read {} {}", entry.kind, entry.name)))?;
        let label = object.as_ref().map(|o| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(PART_OF_LABEL))
                .map(String::as_str)
        });
        match (decide(label, giver, receiver), object) {
            (Decision::Move, Some(object)) => live.push((entry.clone(), object)),
            (Decision::AlreadyMoved, _) => handover.already_moved.push(entry.clone()),
            (Decision::Leave(why), _) => handover.left.push((entry.clone(), why)),
            // `decide` moves only an object it was shown.
            (Decision::Move, None) => handover.left.push((entry.clone(), Left::Gone)),
        }
    }
    // 1. The receiver records them, with their provenance (created or adopted).
    let taken: BTreeSet<&InventoryEntry> =
        live.iter().map(|(e, _)| e).chain(&handover.moved).collect();
    update_inventory(client, receiver, |current| {
        received(current, &record, &taken)
    })
    .await?;
    // 2. Each object becomes the receiver's.
    for (entry, object) in live {
        let api = resources.api(&entry.api_version, &entry.kind, entry.namespace.as_deref())?;
        let patch = relabel_patch(&object, giver, receiver);
        api.patch(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(format!(
                "hand over {} {}",
                entry.kind, entry.name
            )))?;
        handover.moved.push(entry);
    }
    // 3. The giver forgets what moved and what is gone.
    let forgotten: BTreeSet<InventoryEntry> = handover
        .moved
        .iter()
        .chain(&handover.already_moved)
        .cloned()
        .chain(
            handover
                .left
                .iter()
                .filter(|(_, why)| *why == Left::Gone)
                .map(|(e, _)| e.clone()),
        )
        .collect();
    update_inventory(client, giver, |current| {
        let mut kept = current.clone();
        kept.entries.retain(|entry, _| !forgotten.contains(entry));
        kept
    })
    .await?;
    handover.moved.sort();
    Ok(handover)
}

/// The receiver's record with the `taken` entries of `given` added.
fn received(
    current: &InventoryRecord,
    given: &InventoryRecord,
    taken: &BTreeSet<&InventoryEntry>,
) -> InventoryRecord {
    let mut record = current.clone();
    for (entry, provenance) in &given.entries {
        if taken.contains(entry) {
            record
                .entries
                .entry(entry.clone())
                .or_insert_with(|| provenance.clone());
        }
    }
    record
}

/// A merge patch giving the object to the receiver: its membership label, and the
/// giver's field ownership renamed; conditional on the resourceVersion read, so a
/// write in between fails it rather than being overwritten.
fn relabel_patch(
    object: &DynamicObject,
    giver: &Inventory,
    receiver: &Inventory,
) -> serde_json::Value {
    let entries: &[ManagedFieldsEntry] = object
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    let mut metadata = serde_json::json!({
        "resourceVersion": object.metadata.resource_version,
        "labels": { PART_OF_LABEL: receiver.applyset_id() },
    });
    if let Some(renamed) =
        rename_manager(entries, &giver.field_manager(), &receiver.field_manager())
    {
        metadata["managedFields"] = serde_json::json!(renamed);
    }
    serde_json::json!({ "metadata": metadata })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(namespace: &str, name: &str) -> Inventory {
        Inventory {
            name: name.into(),
            namespace: namespace.into(),
        }
    }

    #[test]
    fn only_the_givers_objects_move() {
        let giver = inventory("default", "tether");
        let receiver = inventory("shop", "web");
        let (giver_id, receiver_id) = (giver.applyset_id(), receiver.applyset_id());
        assert_eq!(
            decide(Some(Some(&giver_id)), &giver, &receiver),
            Decision::Move
        );
        assert_eq!(
            decide(Some(Some(&receiver_id)), &giver, &receiver),
            Decision::AlreadyMoved
        );
        assert_eq!(decide(None, &giver, &receiver), Decision::Leave(Left::Gone));
        assert_eq!(
            decide(Some(Some("applyset-other")), &giver, &receiver),
            Decision::Leave(Left::OwnedElsewhere("applyset-other".into()))
        );
        assert_eq!(
            decide(Some(None), &giver, &receiver),
            Decision::Leave(Left::OwnedElsewhere("no label".into()))
        );
    }
}
