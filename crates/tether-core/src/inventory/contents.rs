//! What a deletion takes with it, and whether that keeps it. Deleting a Namespace
//! deletes its objects, a CustomResourceDefinition its custom resources, a
//! PersistentVolumeClaim (as its volume's reclaim policy usually says) its data. The
//! contents are sorted by owner: this inventory's, another inventory's, nobody's
//! ([`contents_of`]); prune keeps what would take more than this inventory made, and
//! every claim, unless the object itself says otherwise ([`guard`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::{InventoryRecord, Origin};
use crate::k8s::ObjectKey;

/// An object that a deletion takes with it: one in a Namespace, or a custom resource
/// of a CustomResourceDefinition.
#[derive(Clone, Debug)]
pub struct ContainedObject {
    pub key: ObjectKey,
    pub uid: String,
    /// The uids of its owners (ownerReferences).
    pub owners: Vec<String>,
    /// A Secret's type, to tell a service account's token from a user's Secret.
    pub secret_type: Option<String>,
    /// The ApplySet id of the tether inventory whose labels it carries.
    pub inventory: Option<String>,
}

/// What a Namespace or a CustomResourceDefinition about to be deleted holds: counts by
/// kind, and by owner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub by_kind: BTreeMap<String, usize>,
    /// How many this inventory created (directly, or through an owner it created).
    pub this_inventory: usize,
    /// What other tether inventories applied, with each one's ApplySet id.
    pub other_inventories: Vec<(ObjectKey, String)>,
    /// What no tether inventory created: kubectl's, Helm's, a controller's, or what
    /// this inventory adopted.
    pub no_inventory: Vec<ObjectKey>,
}

impl Contents {
    /// How many of its objects this inventory did not create.
    pub fn not_created_here(&self) -> usize {
        self.other_inventories.len() + self.no_inventory.len()
    }
}

/// Sorts what a deletion takes with it (a namespace's objects, a definition's custom
/// resources) by owner. What Kubernetes makes in every namespace (the `default`
/// service account and its token, the root CA ConfigMap) is left out, and what follows
/// from other objects (Endpoints of a Service, anything with an owner) counts as its
/// owner's.
pub fn contents_of(
    objects: &[ContainedObject],
    record: &InventoryRecord,
    applyset: &str,
) -> Contents {
    let created_here = |key: &ObjectKey| {
        record
            .entries
            .iter()
            .any(|(e, p)| e.key() == *key && p.origin != Origin::Adopted)
    };
    let by_uid: HashMap<&str, &ContainedObject> =
        objects.iter().map(|o| (o.uid.as_str(), o)).collect();
    // The object at the top of an owner chain, within the namespace.
    let root = |object: &'_ ContainedObject| -> ContainedObject {
        let mut current = object;
        for _ in 0..16 {
            match current
                .owners
                .first()
                .and_then(|uid| by_uid.get(uid.as_str()))
            {
                Some(owner) => current = owner,
                None => break,
            }
        }
        current.clone()
    };
    let mut contents = Contents::default();
    for object in objects.iter().filter(|o| !made_by_kubernetes(o)) {
        *contents.by_kind.entry(object.key.kind.clone()).or_default() += 1;
        let root = root(object);
        let service_of_endpoints = (object.key.kind == "Endpoints").then(|| ObjectKey {
            kind: "Service".into(),
            ..object.key.clone()
        });
        if created_here(&root.key) || service_of_endpoints.as_ref().is_some_and(created_here) {
            contents.this_inventory += 1;
            continue;
        }
        // An owner outside the namespace (or gone) leaves an object whose origin is
        // unknown here: it is not this inventory's.
        match root.inventory.or_else(|| object.inventory.clone()) {
            Some(other) if other != applyset => {
                contents.other_inventories.push((object.key.clone(), other));
            }
            _ => contents.no_inventory.push(object.key.clone()),
        }
    }
    contents.other_inventories.sort();
    contents.no_inventory.sort();
    contents
}

/// What Kubernetes makes in every namespace: nobody's to keep a namespace for.
fn made_by_kubernetes(o: &ContainedObject) -> bool {
    match (o.key.group.as_str(), o.key.kind.as_str()) {
        ("", "ServiceAccount") => o.key.name == "default",
        ("", "ConfigMap") => o.key.name == "kube-root-ca.crt",
        ("", "Secret") => {
            o.secret_type.as_deref() == Some("kubernetes.io/service-account-token")
                && o.key.name.starts_with("default-token-")
        }
        _ => false,
    }
}

/// Why prune keeps an object whose model is gone, for what its deletion would take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// A Namespace or a CustomResourceDefinition holding objects this inventory did
    /// not create.
    Contents { not_created_here: usize },
    /// A PersistentVolumeClaim: its volume, and the data on it, usually go with it.
    Volume,
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Guard::Contents { not_created_here } => write!(
                f,
                "kept: it holds {not_created_here} objects this inventory did not create"
            ),
            Guard::Volume => write!(
                f,
                "kept: a PersistentVolumeClaim's volume, and its data, usually go with it"
            ),
        }
    }
}

/// What prune knows of one deletion for [`guard`].
#[derive(Clone, Copy, Debug)]
pub struct Deletion<'a> {
    pub key: &'a ObjectKey,
    /// What it holds, for a Namespace or a CustomResourceDefinition.
    pub contents: Option<&'a Contents>,
    /// The live object carries `tether.dev/prune: with-contents`.
    pub opted_in: bool,
}

/// Does prune keep this deletion for what it would take? Not when the object opted
/// in (its author's annotation, on the live object), nor, for contents, when the
/// apply is told to delete others' objects with it.
pub fn guard(deletion: Deletion<'_>, delete_foreign_objects: bool) -> Option<Guard> {
    if deletion.opted_in {
        return None;
    }
    if deletion.key.group.is_empty() && deletion.key.kind == "PersistentVolumeClaim" {
        return Some(Guard::Volume);
    }
    let not_created_here = deletion.contents?.not_created_here();
    (not_created_here > 0 && !delete_foreign_objects)
        .then_some(Guard::Contents { not_created_here })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::stored;

    fn record(lines: &str) -> InventoryRecord {
        InventoryRecord::from_config(
            &BTreeMap::from([(stored::OBJECTS_KEY.to_string(), lines.to_string())]),
            &BTreeMap::new(),
        )
        .unwrap()
    }

    #[test]
    fn a_namespace_holds_what_this_inventory_created_another_applied_and_nobody_did() {
        let key = |kind: &str, name: &str| ObjectKey::new("v1", kind, Some("team"), name);
        let object = |kind: &str, name: &str, uid: &str, owner: Option<&str>| ContainedObject {
            key: key(kind, name),
            uid: uid.into(),
            owners: owner.map(|o| vec![o.to_string()]).unwrap_or_default(),
            secret_type: None,
            inventory: None,
        };
        let apps = |kind: &str, name: &str| ObjectKey::new("apps/v1", kind, Some("team"), name);
        let mut deployment = object("Deployment", "web", "d1", None);
        deployment.key = apps("Deployment", "web");
        deployment.inventory = Some("applyset-ours-v1".into());
        let mut replica_set = object("ReplicaSet", "web-1", "r1", Some("d1"));
        replica_set.key = apps("ReplicaSet", "web-1");
        let mut token = object("Secret", "default-token-abcde", "t1", None);
        token.secret_type = Some("kubernetes.io/service-account-token".into());
        let mut adopted = object("ConfigMap", "adopted", "c2", None);
        adopted.inventory = Some("applyset-ours-v1".into());
        let mut team_b = object("ConfigMap", "team-b", "c3", None);
        team_b.inventory = Some("applyset-b-v1".into());
        // A Pod of another inventory's Deployment is that inventory's.
        let mut their_deployment = object("Deployment", "api", "d2", None);
        their_deployment.key = apps("Deployment", "api");
        their_deployment.inventory = Some("applyset-b-v1".into());
        let objects = vec![
            deployment,
            replica_set,
            object("Pod", "web-1-x", "p1", Some("r1")),
            object("Service", "web", "s1", None),
            object("Endpoints", "web", "e1", None),
            object("ServiceAccount", "default", "sa", None),
            token,
            object("ConfigMap", "kube-root-ca.crt", "ca", None),
            object("ConfigMap", "theirs", "c1", None),
            adopted,
            team_b,
            their_deployment,
            object("Pod", "api-x", "p2", Some("d2")),
        ];
        let record = record(
            "apps/v1 Deployment team web created d1\nv1 Service team web\nv1 ConfigMap team adopted adopted c2\n",
        );
        let contents = contents_of(&objects, &record, "applyset-ours-v1");
        assert_eq!(contents.by_kind["ConfigMap"], 3, "{contents:?}");
        assert_eq!(contents.by_kind.get("ServiceAccount"), None);
        assert_eq!(contents.this_inventory, 5, "{contents:?}");
        assert_eq!(
            contents.no_inventory,
            vec![key("ConfigMap", "adopted"), key("ConfigMap", "theirs")]
        );
        assert_eq!(
            contents.other_inventories,
            vec![
                (key("ConfigMap", "team-b"), "applyset-b-v1".to_string()),
                (key("Pod", "api-x"), "applyset-b-v1".to_string()),
                (apps("Deployment", "api"), "applyset-b-v1".to_string()),
            ]
        );
        assert_eq!(contents.not_created_here(), 5);
    }

    #[test]
    fn prune_keeps_a_claim_and_a_holder_of_others_objects_unless_the_object_opts_in() {
        let keys = ["PersistentVolumeClaim", "Namespace", "ConfigMap"]
            .map(|kind| ObjectKey::new("v1", kind, Some("team"), "data"));
        let [claim, namespace, config_map] = &keys;
        let deletion = |key, contents, opted_in| Deletion {
            key,
            contents,
            opted_in,
        };
        let foreign = Contents {
            no_inventory: vec![ObjectKey::new("v1", "ConfigMap", Some("team"), "theirs")],
            ..Contents::default()
        };
        let ours = Contents {
            this_inventory: 3,
            ..Contents::default()
        };
        assert_eq!(
            guard(deletion(claim, None, false), false),
            Some(Guard::Volume)
        );
        assert_eq!(
            guard(deletion(claim, None, false), true),
            Some(Guard::Volume),
            "others' objects are not data"
        );
        assert_eq!(
            guard(deletion(namespace, Some(&foreign), false), false),
            Some(Guard::Contents {
                not_created_here: 1
            })
        );
        assert_eq!(
            guard(deletion(namespace, Some(&foreign), false), true),
            None
        );
        assert_eq!(guard(deletion(namespace, Some(&ours), false), false), None);
        assert_eq!(guard(deletion(config_map, None, false), false), None);
        assert_eq!(guard(deletion(claim, None, true), false), None);
        assert_eq!(
            guard(deletion(namespace, Some(&foreign), true), false),
            None
        );
    }
}
