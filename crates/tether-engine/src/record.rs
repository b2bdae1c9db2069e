//! The inventory's record in the cluster: its head ConfigMap
//! (`tether-inventory-<inventory>`) and the shards the head names, read together and
//! written in the order that keeps every entry (see `tether_core::inventory::stored`),
//! and the record of a tether before heads (ConfigMap `<inventory>`), moved to the
//! head by the first write. A write reads, merges and writes: shards first, the head
//! on its resourceVersion, then the replaced head's shards deleted and, where shards
//! are written, orphans older than ten minutes.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::{Client, ResourceExt};

use crate::cluster::{ClusterError, api_error};
use crate::driver::{Backoff, Retries};
use tether_core::inventory::InventoryRecord;
use tether_core::inventory::stored::{Contents, Layout, ShardRef, is_orphan};
use tether_core::ownership::{
    APPLYSET_ID_LABEL, Inventory, MANAGED_BY_LABEL, MANAGER, SHARD_OF_LABEL,
};

/// The head's annotation naming the inventory (its ConfigMap's name is not).
pub const INVENTORY_ANNOTATION: &str = "tether.dev/inventory";
/// The head's annotation naming the record it was moved from, while that one may
/// still exist (a write interrupted between making the head and removing it).
const MOVED_FROM_ANNOTATION: &str = "tether.dev/moved-from";
/// How many shards are read or written at once.
const SHARDS_AT_ONCE: usize = 4;
/// How often a record is read again when a shard its head named was removed
/// meanwhile (a newer head names others).
const READ_ATTEMPTS: u32 = 5;
/// How often an update is tried when another apply wrote the record meanwhile.
const UPDATE_ATTEMPTS: u32 = 20;

/// A record as read: what it holds, and what writing it must know.
struct Stored {
    record: InventoryRecord,
    /// The head's resourceVersion; none when there is no head yet.
    version: Option<String>,
    /// The shards the head names (removed once a newer head is written).
    shards: Vec<ShardRef>,
    /// The record before heads, still to remove: its name, and its uid when it was
    /// read (it holds the record then; the head does not exist yet).
    moved_from: Option<(String, Option<String>)>,
}

fn inventory_error(verb: &str, inventory: &Inventory) -> impl FnOnce(kube::Error) -> ClusterError {
    api_error(format!(
        "{verb} the record of the inventory {} ({}/{})",
        inventory.display(),
        inventory.namespace,
        inventory.record_name()
    ))
}

fn bad_record(inventory: &Inventory) -> impl FnOnce(String) -> ClusterError {
    move |reason| ClusterError::BadInventory {
        namespace: inventory.namespace.clone(),
        name: inventory.name.clone(),
        reason,
    }
}

fn contents(config_map: &ConfigMap) -> Contents {
    Contents {
        data: config_map.data.clone().unwrap_or_default(),
        binary: config_map
            .binary_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
    }
}

fn is_ours(config_map: &ConfigMap, inventory: &Inventory) -> bool {
    config_map.labels().get(APPLYSET_ID_LABEL) == Some(&inventory.applyset_id())
}

/// Reads the inventory; a missing inventory is an empty one.
pub async fn read_inventory(
    client: &Client,
    inventory: &Inventory,
) -> Result<InventoryRecord, ClusterError> {
    Ok(read(client, inventory).await?.record)
}

/// Reads the inventory, and whether it exists at all (a missing inventory is an empty
/// one, but an inventory deleted by hand is not one that never was).
pub(crate) async fn read_inventory_existing(
    client: &Client,
    inventory: &Inventory,
) -> Result<(InventoryRecord, bool), ClusterError> {
    let stored = read(client, inventory).await?;
    let exists = stored.version.is_some() || stored.moved_from.is_some();
    Ok((stored.record, exists))
}

/// Reads the record: the head and its shards, or the record before heads when there
/// is no head yet. A shard removed between reading its head and reading it means a
/// newer head was written: the head is read again.
async fn read(client: &Client, inventory: &Inventory) -> Result<Stored, ClusterError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &inventory.namespace);
    let mut retries = Retries::new(Backoff::request(), READ_ATTEMPTS);
    loop {
        let Some(head) = api
            .get_opt(&inventory.record_name())
            .await
            .map_err(inventory_error("read", inventory))?
        else {
            return read_before_heads(&api, inventory).await;
        };
        if !is_ours(&head, inventory) {
            return Err(ClusterError::ForeignInventory {
                namespace: inventory.namespace.clone(),
                name: inventory.record_name(),
            });
        }
        let head_contents = contents(&head);
        let shards = InventoryRecord::shards_of(&head_contents).map_err(bad_record(inventory))?;
        let read_shards: Vec<Option<ConfigMap>> = stream::iter(names_of(&shards))
            .map(|name| {
                let api = api.clone();
                async move { api.get_opt(&name).await }
            })
            .buffered(SHARDS_AT_ONCE)
            .try_collect()
            .await
            .map_err(inventory_error("read", inventory))?;
        let Some(read_shards) = read_shards.into_iter().collect::<Option<Vec<_>>>() else {
            if retries.left() {
                tracing::debug!("a shard of the record was replaced meanwhile; reading again");
                retries.again().await;
                continue;
            }
            return Err(bad_record(inventory)(
                "a shard its head names does not exist".into(),
            ));
        };
        let shard_contents: Vec<Contents> = read_shards.iter().map(contents).collect();
        let record = InventoryRecord::from_stored(&head_contents, &shard_contents)
            .map_err(bad_record(inventory))?;
        let moved_from = head
            .annotations()
            .get(MOVED_FROM_ANNOTATION)
            .map(|name| (name.clone(), None));
        return Ok(Stored {
            record,
            version: head.metadata.resource_version,
            shards,
            moved_from,
        });
    }
}

/// The record a tether before heads kept in ConfigMap `<inventory>`, when that one is
/// labelled as this inventory's; a ConfigMap of that name without the label is a
/// user's own, and the record is empty.
async fn read_before_heads(
    api: &Api<ConfigMap>,
    inventory: &Inventory,
) -> Result<Stored, ClusterError> {
    let empty = Stored {
        record: InventoryRecord::default(),
        version: None,
        shards: Vec::new(),
        moved_from: None,
    };
    let Some(old) = api
        .get_opt(&inventory.name)
        .await
        .map_err(inventory_error("read", inventory))?
        .filter(|old| is_ours(old, inventory))
    else {
        return Ok(empty);
    };
    let old_contents = contents(&old);
    let record = InventoryRecord::from_config(&old_contents.data, &old_contents.binary)
        .map_err(bad_record(inventory))?;
    Ok(Stored {
        record,
        moved_from: Some((inventory.name.clone(), old.metadata.uid.clone())),
        ..empty
    })
}

/// Updates the inventory: reads it, applies `update` to what it holds, and writes the
/// result only if nobody wrote it in between (the head's resourceVersion), reading
/// again otherwise. Two applies of one inventory at once therefore never drop each
/// other's entries: each update is made to the record as the other left it.
pub async fn update_inventory(
    client: &Client,
    inventory: &Inventory,
    update: impl Fn(&InventoryRecord) -> InventoryRecord,
) -> Result<InventoryRecord, ClusterError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &inventory.namespace);
    let mut retries = Retries::new(Backoff::request(), UPDATE_ATTEMPTS);
    loop {
        let current = read(client, inventory).await?;
        let record = update(&current.record);
        // An unchanged record is not written: a pass that changed nothing writes nothing.
        if current.version.is_some() && current.moved_from.is_none() && record == current.record {
            return Ok(record);
        }
        // A head that still says it was moved from the old record: the head holds the
        // record, so the old one is removed first, then the head stops saying so.
        let mut moving = current.moved_from.is_some() && current.version.is_none();
        if let (Some((old, None)), Some(_)) = (&current.moved_from, &current.version) {
            moving = !remove_record_before_heads(&api, inventory, old, None).await;
        }
        match write(&api, inventory, &current, &record, moving).await {
            Ok(sharded) => {
                remove_replaced(&api, inventory, &current, sharded).await;
                return Ok(record);
            }
            Err(kube::Error::Api(status))
                if (status.is_conflict() || status.reason == "AlreadyExists") && retries.left() =>
            {
                tracing::debug!(
                    attempt = retries.attempt(),
                    "the inventory changed meanwhile; merging again"
                );
                retries.again().await;
            }
            Err(e) => return Err(inventory_error("write", inventory)(e)),
        }
    }
}

/// Writes `record` over `current`: its shards first, then the head on the version read
/// (the commit point); says whether it wrote shards. When the head is not written,
/// the shards made for it are removed again.
async fn write(
    api: &Api<ConfigMap>,
    inventory: &Inventory,
    current: &Stored,
    record: &InventoryRecord,
    moving: bool,
) -> Result<bool, kube::Error> {
    let layout = record.layout();
    let names = create_shards(api, inventory, &layout).await?;
    let mut head = head_config_map(inventory, record, &layout.head_naming(&names));
    // A record moved from before heads says so until the old one is gone.
    if let (true, Some((old, _))) = (moving, &current.moved_from) {
        head.annotations_mut()
            .insert(MOVED_FROM_ANNOTATION.into(), old.clone());
    }
    let params = PostParams {
        field_manager: Some(inventory.field_manager()),
        ..PostParams::default()
    };
    let written = match &current.version {
        Some(version) => {
            head.metadata.resource_version = Some(version.clone());
            api.replace(&inventory.record_name(), &params, &head).await
        }
        None => api.create(&params, &head).await,
    };
    if let Err(error) = written {
        remove(api, &names).await;
        return Err(error);
    }
    Ok(!names.is_empty())
}

/// Creates the layout's shards, immutable, under names the server gives; returns
/// their names in order. On a failure, those already made are removed.
async fn create_shards(
    api: &Api<ConfigMap>,
    inventory: &Inventory,
    layout: &Layout,
) -> Result<Vec<String>, kube::Error> {
    let params = PostParams {
        field_manager: Some(inventory.field_manager()),
        ..PostParams::default()
    };
    let shards: Vec<ConfigMap> = layout
        .shards
        .iter()
        .map(|shard| {
            let mut config_map = config_map(&shard.contents);
            config_map.metadata = ObjectMeta {
                generate_name: Some(format!("{}-", inventory.record_name())),
                namespace: Some(inventory.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (SHARD_OF_LABEL.to_string(), inventory.applyset_id()),
                    (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
                ])),
                ..ObjectMeta::default()
            };
            config_map.immutable = Some(true);
            config_map
        })
        .collect();
    let made: Vec<Result<ConfigMap, kube::Error>> = stream::iter(shards)
        .map(|shard| {
            let (api, params) = (api.clone(), params.clone());
            async move { api.create(&params, &shard).await }
        })
        .buffered(SHARDS_AT_ONCE)
        .collect()
        .await;
    let names: Vec<String> = made
        .iter()
        .filter_map(|m| m.as_ref().ok().map(|c| c.name_any()))
        .collect();
    match made.into_iter().find_map(Result::err) {
        Some(error) => {
            remove(api, &names).await;
            Err(error)
        }
        None => Ok(names),
    }
}

/// After a head was written: removes the shards of the head it replaced, the record
/// before heads once the head holds it, and orphan shards (made for a head that was
/// never written, by a writer that was killed), looked for only where shards are
/// written at all (`sharded`: this write's or the replaced head's), so that a record
/// of a few thousand entries costs no list per write. None of these is needed any
/// more, so a failure is only logged: the next write tries again.
async fn remove_replaced(
    api: &Api<ConfigMap>,
    inventory: &Inventory,
    replaced: &Stored,
    sharded: bool,
) {
    remove(api, &names_of(&replaced.shards)).await;
    if let (Some((old, Some(uid))), None) = (&replaced.moved_from, &replaced.version) {
        remove_record_before_heads(api, inventory, old, Some(uid.clone())).await;
    }
    if sharded || !replaced.shards.is_empty() {
        remove_orphans(api, inventory, &replaced.shards).await;
    }
}

/// Removes the record before heads, only when it is still this inventory's (its uid
/// as read, or its label); says whether it is gone.
async fn remove_record_before_heads(
    api: &Api<ConfigMap>,
    inventory: &Inventory,
    name: &str,
    uid: Option<String>,
) -> bool {
    let uid = match uid {
        Some(uid) => Some(uid),
        None => match api.get_opt(name).await {
            Ok(Some(old)) if is_ours(&old, inventory) => old.metadata.uid,
            Ok(_) => return true,
            Err(error) => {
                tracing::warn!(%error, "the inventory's old record could not be read");
                return false;
            }
        },
    };
    let Some(uid) = uid else { return true };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(
                inventory = %inventory.display(),
                record = %inventory.record_name(),
                "the inventory's record moved to its reserved name"
            );
            true
        }
        // Gone, or no longer the one read (a new object of that name is not ours).
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => true,
        Err(error) => {
            tracing::warn!(%error, "the inventory's old record could not be removed");
            false
        }
    }
}

/// Removes shards of this inventory that no head names and that no writer can still
/// be about to name (`tether_core::inventory::stored::is_orphan`).
async fn remove_orphans(api: &Api<ConfigMap>, inventory: &Inventory, replaced: &[ShardRef]) {
    let selector = format!("{SHARD_OF_LABEL}={}", inventory.applyset_id());
    let shards = match api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
    {
        Ok(list) => list.items,
        Err(error) => {
            tracing::debug!(%error, "the inventory's shards could not be listed");
            return;
        }
    };
    if shards.is_empty() {
        return;
    }
    // The head as it is now: another writer may have written one since ours.
    let named = match api.get_opt(&inventory.record_name()).await {
        Ok(Some(head)) => match InventoryRecord::shards_of(&contents(&head)) {
            Ok(named) => named,
            Err(_) => return,
        },
        Ok(None) => Vec::new(),
        Err(_) => return,
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let orphans: Vec<String> = shards
        .iter()
        .filter(|shard| {
            let age = shard
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|Time(made)| now.as_second() - made.as_second())
                .unwrap_or(0);
            is_orphan(&shard.name_any(), &named, replaced, age)
        })
        .map(|shard| shard.name_any())
        .collect();
    remove(api, &orphans).await;
}

/// Deletes shards by name; one already gone is fine.
async fn remove(api: &Api<ConfigMap>, names: &[String]) {
    stream::iter(names.to_vec())
        .for_each_concurrent(SHARDS_AT_ONCE, |name| {
            let api = api.clone();
            async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => {
                        tracing::warn!(%error, shard = %name, "a shard could not be removed")
                    }
                }
            }
        })
        .await;
}

fn names_of(shards: &[ShardRef]) -> Vec<String> {
    shards.iter().map(|s| s.name.clone()).collect()
}

fn config_map(contents: &Contents) -> ConfigMap {
    ConfigMap {
        data: Some(contents.data.clone()),
        binary_data: Some(
            contents
                .binary
                .iter()
                .map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.clone())))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// The head's ConfigMap: the ApplySet parent, holding `contents`.
fn head_config_map(
    inventory: &Inventory,
    record: &InventoryRecord,
    contents: &Contents,
) -> ConfigMap {
    let mut head = config_map(contents);
    head.metadata = ObjectMeta {
        name: Some(inventory.record_name()),
        namespace: Some(inventory.namespace.clone()),
        labels: Some(BTreeMap::from([
            (APPLYSET_ID_LABEL.to_string(), inventory.applyset_id()),
            (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        ])),
        annotations: Some(BTreeMap::from([
            (
                "applyset.kubernetes.io/tooling".to_string(),
                format!("tether/v{}", env!("CARGO_PKG_VERSION")),
            ),
            (
                "applyset.kubernetes.io/contains-group-kinds".to_string(),
                record.group_kinds(),
            ),
            (INVENTORY_ANNOTATION.to_string(), inventory.name.clone()),
        ])),
        ..ObjectMeta::default()
    };
    head
}

/// The record held by a head read elsewhere (another inventory's, listed by its label),
/// and the inventory's name; only heads whose lines are in the head itself are read
/// this way (a sharded record's entries are not needed to name its owner).
pub(crate) fn head_record(head: &ConfigMap) -> Option<(String, InventoryRecord)> {
    let name = head
        .annotations()
        .get(INVENTORY_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| head.name_any());
    let held = contents(head);
    InventoryRecord::from_config(&held.data, &held.binary)
        .ok()
        .map(|record| (name, record))
}
