//! The inventory's record at its largest, against the control plane: 100,000 entries
//! in shards, written, read back, and written again with the writer killed at moments
//! spread over the write, never losing an entry.

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use tether_core::inventory::{InventoryEntry, InventoryRecord, Provenance};
use tether_core::ownership::{Inventory, SHARD_OF_LABEL};
use tether_engine::record::{read_inventory, update_inventory};

use crate::reconcile::setup;

const ENTRIES: usize = 100_000;

/// A record of 100,000 entries; a tenth of them have uids of `generation`'s own, so
/// that every generation is a different record of the same size.
fn generation(generation: usize) -> InventoryRecord {
    InventoryRecord {
        entries: (0..ENTRIES)
            .map(|i| {
                let entry =
                    InventoryEntry::parse(&format!("apps/v1 Deployment team-{} web-{i}", i % 100))
                        .unwrap();
                let salt = if i % 10 == 0 { generation } else { 0 };
                let uid = format!("{:08x}-7d1c-4f0e-{:04x}-{:012x}", i * 7919, salt, i);
                (entry, Provenance::adopted(Some(uid)))
            })
            .collect(),
        commit: Some(format!("{generation:040x}")),
    }
}

/// The shards of the inventory's record that exist, by name.
async fn shards(configmaps: &Api<ConfigMap>, inventory: &Inventory) -> Vec<ConfigMap> {
    let selector = format!("{SHARD_OF_LABEL}={}", inventory.applyset_id());
    configmaps
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

fn describe(record: &InventoryRecord) -> String {
    format!(
        "{} entries, commit {:?}",
        record.entries.len(),
        record.commit
    )
}

#[tokio::test]
async fn a_hundred_thousand_entries_survive_writes_killed_at_any_moment() {
    let (client, ns, name) = setup("record-100k").await;
    let inventory = Inventory {
        name,
        namespace: ns.clone(),
    };
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // Written and read back.
    let first = generation(0);
    let written = update_inventory(&client, &inventory, |_| first.clone())
        .await
        .expect("the API server takes it");
    assert_eq!(written, first);
    let read = read_inventory(&client, &inventory).await.unwrap();
    assert_eq!(read.entries.len(), ENTRIES);
    assert_eq!(read, first);
    let stored = shards(&configmaps, &inventory).await;
    assert!(stored.len() >= 2, "{} shards", stored.len());
    for shard in &stored {
        assert_eq!(shard.immutable, Some(true));
        let size: usize = shard
            .binary_data
            .iter()
            .flatten()
            .map(|(_, v)| v.0.len())
            .sum();
        assert!(size < 1024 * 1024, "a shard of {size} bytes");
    }

    // A whole write, timed, to spread the kills over it; the shards of the head it
    // replaced are removed.
    let started = Instant::now();
    let second = generation(1);
    update_inventory(&client, &inventory, |_| second.clone())
        .await
        .unwrap();
    let whole = started.elapsed();
    let before: Vec<String> = stored
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    let now: Vec<String> = shards(&configmaps, &inventory)
        .await
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert!(
        before.iter().all(|name| !now.contains(name)),
        "the replaced head's shards are removed: {before:?} {now:?}"
    );

    // Killed at moments from its start to past its end (aborting the task drops the
    // write wherever it is, as a killed process would, requests in flight included).
    let (mut previous, mut interrupted, mut completed) = (second, 0, 0);
    for round in 0..12 {
        let next = generation(round + 2);
        let writer = {
            let (client, inventory, next) = (client.clone(), inventory.clone(), next.clone());
            tokio::spawn(async move {
                update_inventory(&client, &inventory, move |_| next.clone()).await
            })
        };
        tokio::time::sleep(whole * round as u32 / 8).await;
        writer.abort();
        let _ = writer.await;
        let read = read_inventory(&client, &inventory)
            .await
            .unwrap_or_else(|e| panic!("round {round}: the record is unreadable: {e}"));
        if read == next {
            completed += 1;
            previous = next;
        } else {
            assert!(
                read == previous,
                "round {round}: the record is neither the one before the write ({}) nor after it ({}): {}",
                describe(&previous),
                describe(&next),
                describe(&read)
            );
            interrupted += 1;
        }
    }
    assert!(
        interrupted > 0 && completed > 0,
        "the kills fell before and after the commit point: {interrupted} interrupted, {completed} completed (a whole write took {whole:?})"
    );

    // The next write goes through whatever the kills left.
    let last = generation(99);
    update_inventory(&client, &inventory, |_| last.clone())
        .await
        .unwrap();
    assert_eq!(read_inventory(&client, &inventory).await.unwrap(), last);
}
