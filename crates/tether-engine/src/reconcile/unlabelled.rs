//! Whether the plan's objects that no labelled list found exist at all. Each may be
//! new, or someone else's object of the same name; one read apiece answers that, and
//! a first apply of 1,000 objects made 1,000 of them before its first write. Where a
//! kind has many such objects, one list of names answers for all of them: those it
//! does not name are absent (no read), those it names are read as before, for their
//! content. Which kinds get a list is the pure [`lookups`]; [`absent`] asks.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use kube::api::ListParams;
use serde_json::Value;

use crate::cluster::{ClusterError, LIST_PAGE, Resources, api_error};
use tether_core::k8s::ObjectKey;

use super::in_flight;

/// From how many unlabelled objects of one kind a list of names is made: fewer take
/// at most one round of concurrent reads, which costs what the list would.
pub(super) const LISTED_FROM: usize = in_flight::READS;

/// How the unlabelled objects of one kind are looked up.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Lookup {
    pub api_version: String,
    pub kind: String,
    /// The namespace to list, when all of them are in one; else across the cluster
    /// (a cluster-scoped kind, or several namespaces).
    pub namespace: Option<String>,
    /// Their keys.
    pub keys: BTreeSet<ObjectKey>,
}

/// The kinds whose unlabelled objects are looked up by one list: those with at least
/// [`LISTED_FROM`] objects that are served, not labelled for the inventory, and not
/// defined by this apply. The others are read one by one as they are planned.
/// `objects` are the plan's, each by its apiVersion and key.
pub(super) fn lookups<'o>(
    objects: impl IntoIterator<Item = (&'o str, ObjectKey)>,
    labelled: &HashMap<ObjectKey, Arc<Value>>,
    served: impl Fn(&str, &str) -> bool,
) -> Vec<Lookup> {
    let mut by_kind: BTreeMap<(&str, String), BTreeSet<ObjectKey>> = BTreeMap::new();
    for (api_version, key) in objects {
        if served(api_version, &key.kind) && !labelled.contains_key(&key) {
            by_kind
                .entry((api_version, key.kind.clone()))
                .or_default()
                .insert(key);
        }
    }
    by_kind
        .into_iter()
        .filter(|(_, keys)| keys.len() >= LISTED_FROM)
        .map(|((api_version, kind), keys)| {
            let namespaces: BTreeSet<Option<&str>> =
                keys.iter().map(|k| k.namespace.as_deref()).collect();
            let namespace = match namespaces.into_iter().collect::<Vec<_>>()[..] {
                [Some(only)] => Some(only.to_string()),
                _ => None,
            };
            Lookup {
                api_version: api_version.to_string(),
                kind,
                namespace,
                keys,
            }
        })
        .collect()
}

/// The objects of `lookups` that are not in the cluster, by one list of names per
/// kind (the newest state: an object made a moment ago is not taken for absent). A
/// list the server refuses leaves its objects to be read one by one, which says
/// what the refusal means for each.
pub(super) async fn absent(
    resources: &Resources,
    lookups: Vec<Lookup>,
) -> Result<HashSet<ObjectKey>, ClusterError> {
    let mut absent = HashSet::new();
    for lookup in lookups {
        let api = resources.api(
            &lookup.api_version,
            &lookup.kind,
            lookup.namespace.as_deref(),
        )?;
        let mut params = ListParams::default().limit(LIST_PAGE);
        let mut present = HashSet::new();
        let listed = loop {
            match api.list_metadata(&params).await {
                Ok(page) => {
                    let next = page.metadata.continue_.filter(|token| !token.is_empty());
                    present.extend(page.items.into_iter().map(|item| {
                        let meta = item.metadata;
                        (meta.namespace, meta.name.unwrap_or_default())
                    }));
                    match next {
                        Some(token) => params = params.continue_token(&token),
                        None => break true,
                    }
                }
                Err(kube::Error::Api(status)) => {
                    tracing::debug!(kind = %lookup.kind, message = %status.message, "names not listed: read one by one");
                    break false;
                }
                Err(e) => return Err(api_error(format!("list {} names", lookup.kind))(e)),
            }
        };
        if listed {
            absent.extend(
                lookup
                    .keys
                    .into_iter()
                    .filter(|key| !present.contains(&(key.namespace.clone(), key.name.clone()))),
            );
        }
    }
    Ok(absent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmap(namespace: &str, name: &str) -> (&'static str, ObjectKey) {
        (
            "v1",
            ObjectKey::new("v1", "ConfigMap", Some(namespace), name),
        )
    }

    #[test]
    fn a_kind_with_many_unlabelled_objects_is_listed_in_their_namespace() {
        let mut objects: Vec<_> = (0..LISTED_FROM)
            .map(|i| configmap("team", &format!("c-{i}")))
            .collect();
        objects.push(("v1", ObjectKey::new("v1", "Namespace", None, "team")));
        let found = lookups(objects, &HashMap::new(), |_, _| true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "ConfigMap");
        assert_eq!(found[0].namespace.as_deref(), Some("team"));
        assert_eq!(found[0].keys.len(), LISTED_FROM);
    }

    #[test]
    fn several_namespaces_are_listed_across_the_cluster() {
        let objects: Vec<_> = (0..LISTED_FROM)
            .map(|i| configmap(&format!("team-{i}"), "settings"))
            .collect();
        let found = lookups(objects, &HashMap::new(), |_, _| true);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].namespace, None);
    }

    #[test]
    fn labelled_unserved_and_few_objects_are_read_one_by_one() {
        let objects: Vec<_> = (0..LISTED_FROM)
            .map(|i| configmap("team", &format!("c-{i}")))
            .collect();
        // One of them labelled for the inventory: one too few left.
        let labelled = HashMap::from([(objects[0].1.clone(), Arc::new(Value::Null))]);
        assert_eq!(lookups(objects.clone(), &labelled, |_, _| true), vec![]);
        // A kind the server does not serve (defined by this apply's CRD).
        assert_eq!(lookups(objects, &HashMap::new(), |_, _| false), vec![]);
    }
}
