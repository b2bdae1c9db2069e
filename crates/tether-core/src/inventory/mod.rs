//! The inventory's content and the decisions made with it, all pure: what the
//! ApplySet parent records (one line per object: which object, whether tether created
//! or adopted it, and its uid; and the commit applied), what to prune, what to record
//! before and after an apply, and how objects are batched by apply rank. [`stored`]
//! says how a record is laid out in ConfigMaps; `cluster` reads and writes them;
//! `reconcile` carries out the decisions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use crate::k8s::{ObjectKey, api_group, apply_rank};
use crate::ownership::carries_tether_labels;

pub mod budget;
pub mod contents;
pub mod stored;

pub use contents::{ContainedObject, Contents, contents_of};

/// A line of the inventory: the entry, then `created` or `adopted` and the uid when
/// known (lines of older inventories have neither).
fn parse_line(line: &str) -> Option<(InventoryEntry, Provenance)> {
    let words: Vec<&str> = line.split(' ').collect();
    let entry = InventoryEntry::parse(&words.get(..4)?.join(" "))?;
    let origin = match words.get(4).copied() {
        None => return Some((entry, Provenance::UNKNOWN)),
        Some("created") => Origin::Created,
        Some("adopted") => Origin::Adopted,
        Some(_) => return None,
    };
    let uid = words.get(5).map(|u| u.to_string());
    (words.len() <= 6).then_some((entry, Provenance { origin, uid }))
}

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

/// How an object came into the inventory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// tether created it: prune deletes it.
    Created,
    /// It existed when tether first applied it: prune releases it (tether's labels
    /// and field ownership removed, the object kept).
    Adopted,
    /// Recorded by a tether that did not record origins: treated as created.
    Unknown,
}

/// What the inventory knows of one object besides its identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    pub origin: Origin,
    /// The uid of the object tether created or adopted, once known: an object of the
    /// same name with another uid is not that object.
    pub uid: Option<String>,
}

impl Provenance {
    pub fn created() -> Self {
        Provenance {
            origin: Origin::Created,
            uid: None,
        }
    }

    pub fn adopted(uid: Option<String>) -> Self {
        Provenance {
            origin: Origin::Adopted,
            uid,
        }
    }

    const UNKNOWN: Provenance = Provenance {
        origin: Origin::Unknown,
        uid: None,
    };

    fn words(&self) -> String {
        let origin = match self.origin {
            Origin::Created => "created",
            Origin::Adopted => "adopted",
            Origin::Unknown => return String::new(),
        };
        match &self.uid {
            Some(uid) => format!(" {origin} {uid}"),
            None => format!(" {origin}"),
        }
    }
}

/// What the inventory records: the objects tether applied with their provenance, and
/// the commit it applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InventoryRecord {
    pub entries: BTreeMap<InventoryEntry, Provenance>,
    pub commit: Option<String>,
}

/// What prune does with a recorded object that no model renders any more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PruneDecision {
    /// tether created it, and the live object is that one: delete it.
    Delete,
    /// tether adopted it: remove tether's labels and field ownership, keep it.
    Release,
    /// Not tether's to touch any more; the entry is dropped. The reason says why.
    Forget(&'static str),
    /// Its annotation keeps it from prune (Flux's `prune: disabled`, Argo CD's
    /// `Prune=false`): released as an adopted object is, whoever made it. The
    /// annotation as written, or the problem reading it (then it is kept too).
    Keep(String),
    /// tether created it, and its annotation asks a person to confirm its deletion
    /// (Argo CD's `Prune=confirm`): deleted as [`PruneDecision::Delete`] is, once the
    /// prune's deletions are approved by their digest ([`budget`]). The annotation as
    /// written.
    Confirm(String),
}

impl InventoryRecord {
    /// The object lines, one per entry, as the inventory stores them.
    pub fn lines(&self) -> String {
        self.entries
            .iter()
            .map(|(e, p)| format!("{}{}\n", e.line(), p.words()))
            .collect()
    }

    /// The ApplySet `contains-group-kinds` annotation: `Kind.group` of every entry.
    pub fn group_kinds(&self) -> String {
        let group_kinds: BTreeSet<String> = self
            .entries
            .keys()
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
            .keys()
            .map(|e| (e.api_version.clone(), e.kind.clone()))
    }

    /// The record written before anything is applied: what was recorded, plus every
    /// object about to be applied (with how it comes in: created or adopted), so that an
    /// interrupted apply loses track of nothing. An object already recorded keeps its
    /// provenance. The commit stays the one last applied in full.
    pub fn before_apply(
        &self,
        applying: impl IntoIterator<Item = (InventoryEntry, Provenance)>,
    ) -> Self {
        let mut entries = self.entries.clone();
        for (entry, provenance) in applying {
            entries.entry(entry).or_insert(provenance);
        }
        InventoryRecord {
            entries,
            commit: self.commit.clone(),
        }
    }

    /// The record written after an apply: without what was pruned, released or
    /// forgotten (`removed`), with the uids the server gave the objects tether created
    /// (`created_uids`), and with `commit` only when nothing failed (otherwise the
    /// next apply completes it).
    pub fn after_apply(
        &self,
        removed: &BTreeSet<ObjectKey>,
        created_uids: &BTreeMap<ObjectKey, String>,
        commit: Option<String>,
        previous_commit: Option<String>,
        all_succeeded: bool,
    ) -> Self {
        InventoryRecord {
            entries: self
                .entries
                .iter()
                .filter(|(e, _)| !removed.contains(&e.key()))
                .map(|(e, p)| {
                    let mut p = p.clone();
                    if p.uid.is_none() && p.origin != Origin::Adopted {
                        p.uid = created_uids.get(&e.key()).cloned();
                    }
                    (e.clone(), p)
                })
                .collect(),
            commit: if all_succeeded {
                commit
            } else {
                previous_commit
            },
        }
    }
}

/// What prune does with each recorded object that no model renders, in reverse apply
/// order. An object is deleted only when tether created it, it is live with this
/// inventory's labels, and its uid is the one recorded; adopted objects are released;
/// an entry whose object is gone, no longer labelled for this inventory, or replaced by
/// another object of the same name is forgotten, so that a later object of that name
/// is never taken for it (but not an object recorded to be created and not made yet:
/// another apply may be making it). Nothing when nothing is rendered, unless
/// `allow_empty`: a source without models never prunes by accident.
pub fn prune_decisions<'r>(
    record: &'r InventoryRecord,
    rendered: &BTreeSet<ObjectKey>,
    live: &HashMap<ObjectKey, impl std::borrow::Borrow<Value>>,
    applyset: &str,
    allow_empty: bool,
) -> Vec<(&'r InventoryEntry, PruneDecision)> {
    if rendered.is_empty() && !allow_empty {
        return Vec::new();
    }
    let mut decisions: Vec<(&InventoryEntry, PruneDecision)> = record
        .entries
        .iter()
        .filter(|(e, _)| !rendered.contains(&e.key()))
        .filter_map(|(entry, provenance)| {
            let decision = match live.get(&entry.key()).map(std::borrow::Borrow::borrow) {
                // Recorded to be created and not created yet: an apply may be under way.
                None if provenance.origin == Origin::Created && provenance.uid.is_none() => {
                    return None;
                }
                None => PruneDecision::Forget("gone"),
                Some(object) if !carries_tether_labels(object, applyset) => {
                    PruneDecision::Forget("no longer labelled for this inventory")
                }
                Some(object)
                    if provenance.uid.as_deref().is_some_and(|uid| {
                        object["metadata"]["uid"].as_str().is_some_and(|l| l != uid)
                    }) =>
                {
                    PruneDecision::Forget("another object of that name")
                }
                Some(object) if let Some(by) = kept_by(object) => PruneDecision::Keep(by),
                Some(_) if provenance.origin == Origin::Adopted => PruneDecision::Release,
                Some(object) if let Some(by) = confirmed_by(object) => PruneDecision::Confirm(by),
                Some(_) => PruneDecision::Delete,
            };
            Some((entry, decision))
        })
        .collect();
    decisions.sort_by_key(|(e, _)| std::cmp::Reverse((apply_rank(&e.kind), e.key())));
    decisions
}

/// The annotation on a live object that keeps it from prune. One tether cannot read
/// keeps it too: its author meant something, and prune does not guess.
fn kept_by(object: &Value) -> Option<String> {
    match crate::directive::directives(object) {
        Ok(directives) => directives.keep.map(|written| written.to_string()),
        Err(problem) => Some(problem),
    }
}

/// The annotation on a live object that asks a person to confirm its deletion.
fn confirmed_by(object: &Value) -> Option<String> {
    let directives = crate::directive::directives(object).ok()?;
    directives.confirm.map(|written| written.to_string())
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
}
