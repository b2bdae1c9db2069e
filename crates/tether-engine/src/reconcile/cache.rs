//! Watch caches of the objects an inventory labels, for a reconciler that runs pass
//! after pass: one watch per kind keeps each kind's live objects, so that a pass plans
//! without listing, and the same watch tells its owner of every change as it happens
//! (the daemon's drift). The watches are shared ([`Watches`]): one per kind and
//! identity on a cluster, whatever the number of Sources, each Source subscribing with
//! its inventory; one that joins a running watch lists its own objects once. A kind
//! whose watch is not synced for a Source (starting, refused, or a newcomer's own
//! listing not done yet) is listed by the pass as before. An interrupted watch resumes
//! where it was and keeps its cache meanwhile, as an informer does. An identity
//! confined to some namespaces (a team's Source) watches each of them, since it may
//! not watch across the cluster: a kind is synced when all of its watches are.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::StreamExt;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::cluster::{Reads, Resources, list_each};
use crate::driver::{Backoff, Retries};
use tether_core::k8s::{ObjectKey, Scope};
use tether_core::managed_fields::live_value;
use tether_core::ownership::{Inventory, PART_OF_LABEL};

/// Called for each change a watch sees after its first listing: the kind's apiVersion
/// and kind, the object, and whether it was deleted.
pub type OnChange = Arc<dyn Fn(&str, &str, &DynamicObject, bool) + Send + Sync>;

type KindId = (String, String);
/// One watch: a kind, in one namespace or (`None`) all.
type WatchId = (KindId, Option<String>);
/// The live objects of one inventory in one watch, shared with the plans that read them.
type Objects = HashMap<ObjectKey, Arc<Value>>;

/// After how many failed attempts a newcomer's own listing is warned of (it is tried
/// until it succeeds).
const JOIN_ATTEMPTS: u32 = 5;

/// The watches of one daemon, shared by the Sources that act as one identity on one
/// cluster: one watch per kind (and namespace, for a confined identity) of everything
/// tether labels, its objects kept apart by inventory and only for the inventories
/// that subscribed. A thousand Sources of one team make as many watches as their
/// kinds, not a thousand times as many.
#[derive(Clone, Default)]
pub struct Watches {
    shared: Arc<Mutex<Registry>>,
}

/// The watches running, by identity and watch.
type Registry = HashMap<(String, WatchId), Arc<SharedWatch>>;

/// Who subscribes: the identity the watches are shared by (its cluster and user: only
/// Sources that see the same share them), its client, and what its cluster serves.
pub struct WatchAs<'w> {
    pub identity: &'w str,
    pub client: &'w Client,
    pub resources: Resources,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watches({})", self.count())
    }
}

/// One shared watch and what it keeps.
struct SharedWatch {
    state: Mutex<WatchState>,
    /// What it watches, for a newcomer's own listing.
    api: Api<DynamicObject>,
    task: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct WatchState {
    subscribers: HashMap<String, Subscriber>,
    /// Filled while the watch (re)lists; swapped in when the listing is done.
    listing: HashMap<String, Objects>,
    /// The objects a re-listing found changed since their subscriber's last view
    /// (written while the watch was away), by inventory: told as changes when it is
    /// done.
    relisted: Vec<(String, DynamicObject)>,
}

/// A change a re-listing found, for `on_change` once the state is unlocked.
struct Relisted {
    on_change: OnChange,
    object: DynamicObject,
    deleted: bool,
}

struct Subscriber {
    /// The inventory's field manager, which its live values are trimmed for.
    manager: String,
    on_change: OnChange,
    changes: Arc<AtomicU64>,
    /// Whether its objects were listed since it joined.
    synced: bool,
    /// Whether it was there when the watch's listing under way began, so that the
    /// listing holds all of its objects.
    in_listing: bool,
    objects: Objects,
    /// Until it is synced: objects the watch saw deleted, at their resourceVersion,
    /// which its own listing (read before) may still hold.
    deleted: HashMap<ObjectKey, u64>,
}

/// One inventory's view of the shared watches of its kinds: the live objects it
/// labels, kept as the watches see them.
pub struct WatchCache {
    resources: Resources,
    kinds: BTreeSet<KindId>,
    scope: Scope,
    applyset: String,
    watches: Vec<Arc<SharedWatch>>,
    /// Counts the events of its objects and the listings: unchanged, nothing was seen
    /// to change.
    changes: Arc<AtomicU64>,
    registry: Watches,
    identity: String,
}

impl Watches {
    /// Subscribes `inventory` to the watches of `kinds` (found in `watch_as`'s
    /// resources), the namespaced ones in `scope` (cluster-scoped kinds across the
    /// cluster). `on_change` hears of each change of its objects.
    pub fn subscribe(
        &self,
        watch_as: WatchAs<'_>,
        kinds: BTreeSet<KindId>,
        scope: Scope,
        inventory: &Inventory,
        on_change: OnChange,
    ) -> WatchCache {
        let WatchAs {
            identity,
            client,
            resources,
        } = watch_as;
        let applyset = inventory.applyset_id();
        let changes: Arc<AtomicU64> = Arc::default();
        let mut watches = Vec::new();
        let mut registry = lock(&self.shared);
        for id in watch_ids(&resources, &kinds, &scope) {
            let Some(resource) = resources
                .served()
                .find(|(v, k, _)| *v == id.0.0 && *k == id.0.1)
                .map(|(_, _, r)| r.clone())
            else {
                continue;
            };
            let subscriber = Subscriber {
                manager: inventory.field_manager(),
                on_change: on_change.clone(),
                changes: changes.clone(),
                synced: false,
                in_listing: false,
                objects: HashMap::new(),
                deleted: HashMap::new(),
            };
            let key = (identity.to_string(), id.clone());
            let watch = match registry.get(&key) {
                // A newcomer lists its own objects (by its label) and takes the
                // watch's events from now on.
                Some(watch) => {
                    lock(&watch.state)
                        .subscribers
                        .insert(applyset.clone(), subscriber);
                    watch.join(id.0.clone(), applyset.clone(), inventory.field_manager());
                    watch.clone()
                }
                None => {
                    let api: Api<DynamicObject> = match &id.1 {
                        Some(namespace) => {
                            Api::namespaced_with(client.clone(), namespace, &resource)
                        }
                        None => Api::all_with(client.clone(), &resource),
                    };
                    let watch = Arc::new(SharedWatch {
                        state: Mutex::new(WatchState {
                            subscribers: HashMap::from([(applyset.clone(), subscriber)]),
                            ..WatchState::default()
                        }),
                        api,
                        task: Mutex::new(None),
                    });
                    watch.run(id.0.clone());
                    registry.insert(key, watch.clone());
                    watch
                }
            };
            watches.push(watch);
        }
        drop(registry);
        WatchCache {
            resources,
            kinds,
            scope,
            applyset,
            watches,
            changes,
            registry: self.clone(),
            identity: identity.to_string(),
        }
    }

    /// How many watches run, for every identity and Source.
    pub fn count(&self) -> usize {
        lock(&self.shared).len()
    }
}

impl SharedWatch {
    /// Starts the watch (tether's objects of one kind).
    fn run(self: &Arc<Self>, kind: KindId) {
        let config = watcher::Config::default().labels(PART_OF_LABEL);
        let mut events = watcher::watcher(self.api.clone(), config)
            .default_backoff()
            .boxed();
        let watch = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Some(shared) = watch.upgrade() else {
                    return;
                };
                shared.observe(&kind, event);
            }
        });
        *lock(&self.task) = Some(task);
    }

    /// A Source joined a running watch: its own objects are listed (by its label, a
    /// read of the newest state) and merged with what the watch told it meanwhile, the
    /// newer of each object kept. Sources that join together never make the watch list
    /// everyone's objects again.
    fn join(self: &Arc<Self>, kind: KindId, applyset: String, manager: String) {
        let watch = Arc::downgrade(self);
        let api = self.api.clone();
        tokio::spawn(async move {
            let labelled = ListParams::default().labels(&format!("{PART_OF_LABEL}={applyset}"));
            // Trimmed as each page arrives: a page of objects is held at once, not all.
            let trimmed = |item: DynamicObject| {
                let key = ObjectKey::new(
                    &kind.0,
                    &kind.1,
                    item.metadata.namespace.as_deref(),
                    &item.name_any(),
                );
                let version = version_of_object(&item);
                (key, version, live_value(item, &kind.0, &kind.1, &manager))
            };
            // Until it is done, the newcomer's passes list for themselves; tried until it
            // is, or until the newcomer left.
            let mut retries = Retries::endless(Backoff::pass());
            let listed = loop {
                let mut listed = Vec::new();
                // From the server's cache, as the watch itself: merged by
                // resourceVersion with the watch's events, a moment behind is harmless.
                let each = |item| listed.push(trimmed(item));
                match list_each(&api, &labelled, Reads::Cached, each).await {
                    Ok(()) => break listed,
                    Err(error) => {
                        match retries.attempt() {
                            JOIN_ATTEMPTS => {
                                tracing::warn!(%error, kind = kind.1, "a Source's objects cannot be listed for its watch: its passes list them meanwhile; retrying")
                            }
                            _ => {
                                tracing::debug!(%error, kind = kind.1, "listing a newcomer's objects; retrying")
                            }
                        }
                        retries.again().await;
                        let subscribed = watch.upgrade().is_some_and(|shared| {
                            lock(&shared.state).subscribers.contains_key(&applyset)
                        });
                        if !subscribed {
                            return;
                        }
                    }
                }
            };
            let Some(shared) = watch.upgrade() else {
                return;
            };
            let mut state = lock(&shared.state);
            let Some(subscriber) = state.subscribers.get_mut(&applyset) else {
                return;
            };
            for (key, version, value) in listed {
                // Deleted since (the watch said so while this listing was made).
                if subscriber
                    .deleted
                    .get(&key)
                    .is_some_and(|gone| *gone >= version)
                {
                    continue;
                }
                keep_newer(&mut subscriber.objects, key, Arc::new(value));
            }
            subscriber.deleted.clear();
            subscriber.synced = true;
            subscriber.changes.fetch_add(1, Ordering::AcqRel);
        });
    }

    fn observe(
        &self,
        (api_version, kind): &KindId,
        event: Result<Event<DynamicObject>, watcher::Error>,
    ) {
        let mut state = lock(&self.state);
        match event {
            Ok(Event::Init) => state.begin_listing(),
            Ok(Event::InitApply(object)) => state.listed(api_version, kind, object),
            Ok(Event::InitDone) => {
                let relisted = state.end_listing();
                drop(state);
                tracing::debug!(kind, changed = relisted.len(), "the watch listed again");
                // What changed while the watch was away is told as the watch's own
                // events are: a write someone made then is drift all the same.
                for change in relisted {
                    (change.on_change)(api_version, kind, &change.object, change.deleted);
                }
            }
            Ok(Event::Apply(object)) => {
                let Some((applyset, key)) = identify(api_version, kind, &object) else {
                    return;
                };
                // An object that left an inventory (its label changed) leaves its map.
                for (other, subscriber) in &mut state.subscribers {
                    if *other != applyset && subscriber.objects.remove(&key).is_some() {
                        subscriber.changes.fetch_add(1, Ordering::AcqRel);
                    }
                }
                let Some(subscriber) = state.subscribers.get_mut(&applyset) else {
                    return;
                };
                subscriber.changes.fetch_add(1, Ordering::AcqRel);
                let on_change = subscriber.on_change.clone();
                let manager = subscriber.manager.clone();
                drop(state);
                on_change(api_version, kind, &object, false);
                let value = live_value(object, api_version, kind, &manager);
                let mut state = lock(&self.state);
                if let Some(subscriber) = state.subscribers.get_mut(&applyset) {
                    keep_newer(&mut subscriber.objects, key, Arc::new(value));
                }
            }
            Ok(Event::Delete(object)) => {
                let Some((applyset, key)) = identify(api_version, kind, &object) else {
                    return;
                };
                let Some(subscriber) = state.subscribers.get_mut(&applyset) else {
                    return;
                };
                subscriber.changes.fetch_add(1, Ordering::AcqRel);
                subscriber.objects.remove(&key);
                // Its own listing, still to come, may hold it: it is gone all the same.
                if !subscriber.synced {
                    subscriber.deleted.insert(key, version_of_object(&object));
                }
                let on_change = subscriber.on_change.clone();
                drop(state);
                on_change(api_version, kind, &object, true);
            }
            Err(error) if refused(&error) => {
                // The identity may no longer watch: until the watch lists again, passes
                // list this kind themselves (and are told why, if refused too).
                tracing::warn!(%error, kind, "watch refused; passes list for themselves");
                for subscriber in state.subscribers.values_mut() {
                    subscriber.synced = false;
                    subscriber.changes.fetch_add(1, Ordering::AcqRel);
                }
            }
            // The watcher resumes from the last resourceVersion it saw, so the cache
            // misses nothing; one that is too old (410) makes it list again, which
            // replaces the cache. Kept meanwhile, as an informer keeps its cache: were
            // every subscriber's passes to list for themselves at each interruption,
            // a thousand Sources would list at once from an API server already slow.
            Err(error) => tracing::debug!(%error, kind, "watch interrupted; resuming"),
        }
    }
}

/// Whether a watch's error says it may not watch at all (401, 403), rather than that
/// it was interrupted.
fn refused(error: &watcher::Error) -> bool {
    let code = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 401 | 403)
}

impl WatchState {
    /// The watch lists again: whoever is here now is complete once it is done.
    fn begin_listing(&mut self) {
        self.listing.clear();
        self.relisted.clear();
        for subscriber in self.subscribers.values_mut() {
            subscriber.in_listing = true;
        }
    }

    /// An object of the listing, kept for its inventory if that one subscribed.
    fn listed(&mut self, api_version: &str, kind: &str, object: DynamicObject) {
        let Some((applyset, key)) = identify(api_version, kind, &object) else {
            return;
        };
        let Some(subscriber) = self.subscribers.get(&applyset) else {
            return;
        };
        // A subscriber that had a complete view: what differs from it changed while
        // the watch was away (its first listing is no news).
        let changed = subscriber.synced
            && subscriber.objects.get(&key).is_none_or(|kept| {
                kept["metadata"]["resourceVersion"].as_str()
                    != object.metadata.resource_version.as_deref()
            });
        if changed {
            self.relisted.push((applyset.clone(), object.clone()));
        }
        let value = live_value(object, api_version, kind, &subscriber.manager);
        self.listing
            .entry(applyset)
            .or_default()
            .insert(key, Arc::new(value));
    }

    /// The listing is done: it replaces the objects of those it holds completely.
    /// Returns what changed or went since each complete subscriber's last view.
    fn end_listing(&mut self) -> Vec<Relisted> {
        let mut listing = std::mem::take(&mut self.listing);
        let mut relisted: Vec<Relisted> = std::mem::take(&mut self.relisted)
            .into_iter()
            .filter_map(|(applyset, object)| {
                let subscriber = self.subscribers.get(&applyset)?;
                Some(Relisted {
                    on_change: subscriber.on_change.clone(),
                    object,
                    deleted: false,
                })
            })
            .collect();
        for (applyset, subscriber) in &mut self.subscribers {
            let listed = listing.remove(applyset).unwrap_or_default();
            match subscriber.in_listing {
                // The listing holds all of its objects: what it lacks is gone.
                true => {
                    if subscriber.synced {
                        relisted.extend(
                            subscriber
                                .objects
                                .iter()
                                .filter(|(key, _)| !listed.contains_key(*key))
                                .filter_map(|(_, gone)| {
                                    serde_json::from_value((**gone).clone()).ok()
                                })
                                .map(|object| Relisted {
                                    on_change: subscriber.on_change.clone(),
                                    object,
                                    deleted: true,
                                }),
                        );
                    }
                    subscriber.objects = listed;
                    subscriber.synced = true;
                    subscriber.deleted.clear();
                }
                // It joined during the listing: its own listing completes it.
                false => {
                    for (key, value) in listed {
                        keep_newer(&mut subscriber.objects, key, value);
                    }
                }
            }
            subscriber.changes.fetch_add(1, Ordering::AcqRel);
        }
        relisted
    }
}

/// Keeps `value` unless the object is kept at a newer resourceVersion already (a
/// newcomer's own listing may be newer than the watch's events still to come).
/// Resource versions are compared as etcd's numbers (0: not one).
fn keep_newer(objects: &mut Objects, key: ObjectKey, value: Arc<Value>) {
    let version = |v: &Value| etcd_version(v["metadata"]["resourceVersion"].as_str());
    if objects
        .get(&key)
        .is_some_and(|kept| version(kept) > version(&value))
    {
        return;
    }
    objects.insert(key, value);
}

/// An object's resourceVersion as etcd's number (0: not one).
fn version_of_object(object: &DynamicObject) -> u64 {
    etcd_version(object.metadata.resource_version.as_deref())
}

/// A resourceVersion as etcd's number (0: none, or not a number).
fn etcd_version(text: Option<&str>) -> u64 {
    text.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The inventory an object is labelled for, and its key.
fn identify(api_version: &str, kind: &str, object: &DynamicObject) -> Option<(String, ObjectKey)> {
    let applyset = object.labels().get(PART_OF_LABEL)?.clone();
    let key = ObjectKey::new(
        api_version,
        kind,
        object.metadata.namespace.as_deref(),
        &object.name_any(),
    );
    Some((applyset, key))
}

impl WatchCache {
    /// How many events of its objects the watches have seen: equal counts mean that
    /// nothing changed (or was re-listed) in between.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// The kinds watched.
    pub fn kinds(&self) -> &BTreeSet<KindId> {
        &self.kinds
    }

    /// Where the namespaced kinds are watched.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The discovery the watches were started from, if it covers `kinds`.
    pub(super) fn resources_covering(&self, kinds: &BTreeSet<KindId>) -> Option<&Resources> {
        kinds
            .iter()
            .all(|(v, k)| self.resources.namespaced(v, k).is_some())
            .then_some(&self.resources)
    }

    /// The live objects of one kind, if its watches are synced: the values the watch
    /// keeps, shared, not copies.
    pub(super) fn listed(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Option<Vec<(ObjectKey, Arc<Value>)>> {
        let id = (api_version.to_string(), kind.to_string());
        let wanted = watch_ids(&self.resources, &BTreeSet::from([id]), &self.scope);
        let registry = lock(&self.registry.shared);
        let mut listed = Vec::new();
        for watch_id in wanted {
            let watch = registry.get(&(self.identity.clone(), watch_id))?;
            let state = lock(&watch.state);
            let subscriber = state.subscribers.get(&self.applyset).filter(|s| s.synced)?;
            listed.extend(
                subscriber
                    .objects
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        Some(listed)
    }

    /// Are all its watches synced (its objects listed since it joined)?
    pub fn synced(&self) -> bool {
        self.watches.iter().all(|watch| {
            lock(&watch.state)
                .subscribers
                .get(&self.applyset)
                .is_some_and(|s| s.synced)
        })
    }
}

impl Drop for WatchCache {
    /// Leaves the watches; a watch nobody subscribes to any more stops.
    fn drop(&mut self) {
        let mut registry = lock(&self.registry.shared);
        for watch in &self.watches {
            let mut state = lock(&watch.state);
            state.subscribers.remove(&self.applyset);
            state.listing.remove(&self.applyset);
            if state.subscribers.is_empty() {
                if let Some(task) = lock(&watch.task).take() {
                    task.abort();
                }
                drop(state);
                registry.retain(|_, w| !Arc::ptr_eq(w, watch));
            }
        }
    }
}

/// The watches of `kinds` that `resources` serves: a namespaced kind's in each
/// namespace of `scope`, a cluster-scoped kind's across the cluster.
fn watch_ids(resources: &Resources, kinds: &BTreeSet<KindId>, scope: &Scope) -> Vec<WatchId> {
    let mut watches = Vec::new();
    for (api_version, kind) in kinds {
        let in_namespaces = match resources.namespaced(api_version, kind) {
            None => continue,
            Some(true) => scope.watches(),
            Some(false) => vec![None],
        };
        for namespace in in_namespaces {
            watches.push(((api_version.clone(), kind.clone()), namespace));
        }
    }
    watches
}

fn lock<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data is plain maps: after a panic elsewhere it is still usable.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(version: &str) -> Arc<Value> {
        Arc::new(serde_json::json!({"metadata": {"resourceVersion": version}}))
    }

    fn object(name: &str, version: &str, applyset: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": version,
                "labels": {PART_OF_LABEL: applyset}},
        }))
        .unwrap()
    }

    fn subscriber() -> Subscriber {
        Subscriber {
            manager: "tether:shop/web".into(),
            on_change: Arc::new(|_, _, _, _| {}),
            changes: Arc::default(),
            synced: false,
            in_listing: false,
            objects: HashMap::new(),
            deleted: HashMap::new(),
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("v1", "ConfigMap", Some("shop"), name)
    }

    #[test]
    fn the_newer_of_two_views_of_an_object_is_kept() {
        let mut objects = Objects::new();
        keep_newer(&mut objects, key("a"), value("12"));
        keep_newer(&mut objects, key("a"), value("9"));
        assert_eq!(objects[&key("a")]["metadata"]["resourceVersion"], "12");
        keep_newer(&mut objects, key("a"), value("15"));
        assert_eq!(objects[&key("a")]["metadata"]["resourceVersion"], "15");
    }

    /// A watch that was away (a dropped connection, a 410) lists again: what was
    /// written or deleted meanwhile is told to its inventory, as the watch's events
    /// would have told it (it went unseen, and `kubectl scale` during a watch's gap
    /// under load waited for the interval to be corrected). A first listing is no news.
    #[test]
    fn a_re_listing_tells_what_changed_and_went_while_the_watch_was_away() {
        let told: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
        let mut state = WatchState::default();
        let mut web = subscriber();
        let seen = told.clone();
        web.on_change = Arc::new(move |_, _, object, deleted| {
            lock(&seen).push((object.name_any(), deleted));
        });
        state.subscribers.insert("web".into(), web);
        state.begin_listing();
        for name in ["same", "edited", "deleted"] {
            state.listed("v1", "ConfigMap", object(name, "5", "web"));
        }
        assert!(state.end_listing().is_empty(), "a first listing is no news");

        state.begin_listing();
        state.listed("v1", "ConfigMap", object("same", "5", "web"));
        state.listed("v1", "ConfigMap", object("edited", "9", "web"));
        state.listed("v1", "ConfigMap", object("made", "10", "web"));
        let relisted = state.end_listing();
        for change in relisted {
            (change.on_change)("v1", "ConfigMap", &change.object, change.deleted);
        }
        let mut told = lock(&told).clone();
        told.sort();
        assert_eq!(
            told,
            [
                ("deleted".to_string(), true),
                ("edited".to_string(), false),
                ("made".to_string(), false)
            ]
        );
        let keys: BTreeSet<&ObjectKey> = state.subscribers["web"].objects.keys().collect();
        assert_eq!(
            keys,
            BTreeSet::from([&key("edited"), &key("made"), &key("same")])
        );
    }

    #[test]
    fn a_listing_replaces_what_it_holds_completely_and_completes_a_newcomer() {
        let mut state = WatchState::default();
        state.subscribers.insert("old".into(), subscriber());
        state.begin_listing();
        state.listed("v1", "ConfigMap", object("kept", "5", "old"));
        // Someone else's objects are not kept.
        state.listed("v1", "ConfigMap", object("theirs", "5", "nobody"));
        // A newcomer joins during the listing and has listed some of its own already.
        let mut newcomer = subscriber();
        newcomer.objects.insert(key("newer"), value("30"));
        state.subscribers.insert("new".into(), newcomer);
        state.listed("v1", "ConfigMap", object("newer", "20", "new"));
        state.listed("v1", "ConfigMap", object("more", "21", "new"));
        assert!(state.end_listing().is_empty(), "first listings are no news");
        let old = &state.subscribers["old"];
        assert!(old.synced);
        assert_eq!(old.objects.keys().collect::<Vec<_>>(), [&key("kept")]);
        let new = &state.subscribers["new"];
        assert!(!new.synced, "synced by its own listing, not this one");
        assert_eq!(
            new.objects[&key("newer")]["metadata"]["resourceVersion"],
            "30"
        );
        assert!(new.objects.contains_key(&key("more")));
    }
}
