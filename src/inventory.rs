//! The inventory's content and the decisions made with it, all pure: what the
//! ApplySet parent records (one line per object, and the commit applied), what to
//! prune, what to record before and after an apply, and how objects are batched by
//! apply rank. `cluster` reads and writes the ConfigMap; `reconcile` carries out the
//! decisions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use crate::k8s::{ObjectKey, api_group, apply_rank};
use crate::ownership::carries_tether_labels;

/// The ConfigMap key of the object lines.
const OBJECTS_KEY: &str = "objects";
/// The ConfigMap key of the commit last applied without a failure.
const COMMIT_KEY: &str = "commit";

/// One object recorded in the inventory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InventoryEntry {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl InventoryEntry {
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }

    /// `apiVersion kind namespace|- name`, one line of the inventory.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.api_version,
            self.kind,
            self.namespace.as_deref().unwrap_or("-"),
            self.name
        )
    }

    pub fn parse(line: &str) -> Option<Self> {
        let mut parts = line.split(' ');
        let (api_version, kind, namespace, name) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        Some(InventoryEntry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: (namespace != "-").then(|| namespace.to_string()),
            name: name.into(),
        })
    }
}

/// What the inventory records: the objects tether applied, and the commit it applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InventoryRecord {
    pub entries: BTreeSet<InventoryEntry>,
    pub commit: Option<String>,
}

impl InventoryRecord {
    /// Reads the ConfigMap's data; the error is the first line that is not an entry.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut entries = BTreeSet::new();
        for line in data
            .get(OBJECTS_KEY)
            .map(String::as_str)
            .unwrap_or("")
            .lines()
            .filter(|l| !l.is_empty())
        {
            entries.insert(InventoryEntry::parse(line).ok_or_else(|| line.to_string())?);
        }
        Ok(InventoryRecord {
            entries,
            commit: data.get(COMMIT_KEY).cloned(),
        })
    }

    /// The ConfigMap's data.
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let objects: String = self.entries.iter().map(|e| e.line() + "\n").collect();
        let mut data = BTreeMap::from([(OBJECTS_KEY.to_string(), objects)]);
        if let Some(commit) = &self.commit {
            data.insert(COMMIT_KEY.to_string(), commit.clone());
        }
        data
    }

    /// The ApplySet `contains-group-kinds` annotation: `Kind.group` of every entry.
    pub fn group_kinds(&self) -> String {
        let group_kinds: BTreeSet<String> = self
            .entries
            .iter()
            .map(|e| match api_group(&e.api_version) {
                "" => e.kind.clone(),
                group => format!("{}.{group}", e.kind),
            })
            .collect();
        group_kinds.into_iter().collect::<Vec<_>>().join(",")
    }

    /// The kinds (apiVersion, kind) the inventory records.
    pub fn kinds(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.entries
            .iter()
            .map(|e| (e.api_version.clone(), e.kind.clone()))
    }

    /// The record written before anything is applied: what was recorded, plus every
    /// object about to be applied, so that an interrupted apply loses track of nothing.
    /// The commit stays the one last applied in full.
    pub fn before_apply(&self, applying: impl IntoIterator<Item = InventoryEntry>) -> Self {
        let mut entries = self.entries.clone();
        entries.extend(applying);
        InventoryRecord {
            entries,
            commit: self.commit.clone(),
        }
    }

    /// The record written after an apply: without what was pruned (or found gone), and
    /// with `commit` only when nothing failed (otherwise the next apply completes it).
    pub fn after_apply(
        &self,
        pruned: &BTreeSet<ObjectKey>,
        commit: Option<String>,
        previous_commit: Option<String>,
        all_succeeded: bool,
    ) -> Self {
        InventoryRecord {
            entries: self
                .entries
                .iter()
                .filter(|e| !pruned.contains(&e.key()))
                .cloned()
                .collect(),
            commit: if all_succeeded {
                commit
            } else {
                previous_commit
            },
        }
    }
}

/// The recorded objects to delete: in the inventory, rendered by no model, and live
/// with tether's labels for this inventory (an object someone else made, or one
/// labelled for another inventory, is never a candidate). Nothing when nothing is
/// rendered: a source without models never prunes. In reverse apply order.
pub fn prune_candidates<'r>(
    record: &'r InventoryRecord,
    rendered: &BTreeSet<ObjectKey>,
    live: &HashMap<ObjectKey, Value>,
    applyset: &str,
) -> Vec<&'r InventoryEntry> {
    if rendered.is_empty() {
        return Vec::new();
    }
    let mut candidates: Vec<&InventoryEntry> = record
        .entries
        .iter()
        .filter(|e| !rendered.contains(&e.key()))
        .filter(|e| {
            live.get(&e.key())
                .is_some_and(|object| carries_tether_labels(object, applyset))
        })
        .collect();
    candidates.sort_by_key(|e| std::cmp::Reverse((apply_rank(&e.kind), e.key())));
    candidates
}

/// Items grouped by the apply rank of their kind, lowest rank first; each group keeps
/// the items' order. Objects of one rank do not depend on each other.
pub fn by_rank<T>(
    items: impl IntoIterator<Item = T>,
    kind: impl Fn(&T) -> &str,
) -> Vec<(u8, Vec<T>)> {
    let mut ranks: BTreeMap<u8, Vec<T>> = BTreeMap::new();
    for item in items {
        ranks.entry(apply_rank(kind(&item))).or_default().push(item);
    }
    ranks.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_lines_round_trip() {
        for entry in [
            InventoryEntry {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
            },
            InventoryEntry {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: "shop".into(),
            },
        ] {
            assert_eq!(InventoryEntry::parse(&entry.line()), Some(entry));
        }
        assert_eq!(InventoryEntry::parse("v1 ConfigMap shop"), None);
    }

    #[test]
    fn data_round_trips_and_names_a_bad_line() {
        let record = InventoryRecord {
            entries: [InventoryEntry::parse("v1 ConfigMap shop a").unwrap()].into(),
            commit: Some("abc".into()),
        };
        assert_eq!(InventoryRecord::from_data(&record.to_data()), Ok(record));
        let bad = BTreeMap::from([(OBJECTS_KEY.to_string(), "v1 ConfigMap\n".to_string())]);
        assert_eq!(
            InventoryRecord::from_data(&bad),
            Err("v1 ConfigMap".to_string())
        );
    }
}
