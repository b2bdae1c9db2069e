//! Watch caches of the objects an inventory labels, for a reconciler that runs pass
//! after pass: one watch per kind keeps each kind's live objects, so that a pass plans
//! without listing, and the same watch tells its owner of every change as it happens
//! (the daemon's drift). The watches are shared ([`Watches`]): one per kind and
//! identity on a cluster, whatever the number of Sources, each Source subscribing with
//! its inventory. A kind whose watch is not synced for a Source (starting, re-listing
//! after an error, or listing again for a Source that just joined) is listed by the
//! pass as before. An identity confined to some namespaces (a team's Source) watches
//! each of them, since it may not watch across the cluster: a kind is synced when all
//! of its watches are.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::cluster::Resources;
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

/// How long a quiet watch waits before it looks whether Sources joined it (their
/// objects come with a new listing, one for all who joined meanwhile).
const REJOIN_DELAY: Duration = Duration::from_secs(2);

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
    /// The running watch (replaced when it lists again for a newcomer).
    task: Mutex<Option<JoinHandle<()>>>,
    /// Whether a new listing is due (a Source joined since the last one).
    relist: AtomicBool,
}

#[derive(Default)]
struct WatchState {
    subscribers: HashMap<String, Subscriber>,
    /// Filled while the watch (re)lists; swapped in when the listing is done.
    listing: HashMap<String, Objects>,
    /// Whether a listing is under way.
    listing_active: bool,
}

struct Subscriber {
    /// The inventory's field manager, which its live values are trimmed for.
    manager: String,
    on_change: OnChange,
    changes: Arc<AtomicU64>,
    /// Whether its objects were listed since it joined.
    synced: bool,
    objects: Objects,
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
                objects: HashMap::new(),
            };
            let key = (identity.to_string(), id.clone());
            let watch = match registry.get(&key) {
                Some(watch) => {
                    lock(&watch.state)
                        .subscribers
                        .insert(applyset.clone(), subscriber);
                    watch.rejoin();
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
                            listing: HashMap::new(),
                            listing_active: false,
                        }),
                        task: Mutex::new(None),
                        relist: AtomicBool::new(false),
                    });
                    watch.run(api, id.0.clone());
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
    /// Starts the watch on `api` (tether's objects of one kind).
    fn run(self: &Arc<Self>, api: Api<DynamicObject>, kind: KindId) {
        let config = watcher::Config::default().labels(PART_OF_LABEL);
        let watch = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api.clone(), config.clone())
                .default_backoff()
                .boxed();
            loop {
                let next = tokio::time::timeout(REJOIN_DELAY, events.next()).await;
                let Some(shared) = watch.upgrade() else {
                    return;
                };
                match next {
                    Ok(Some(event)) => shared.observe(&kind, event),
                    Ok(None) => return,
                    Err(_) => {}
                }
                // Newcomers' objects come with a new listing, one for all who joined
                // meanwhile, once the listing under way (if any) is done.
                if !lock(&shared.state).listing_active
                    && shared.relist.swap(false, Ordering::AcqRel)
                {
                    events = watcher::watcher(api.clone(), config.clone())
                        .default_backoff()
                        .boxed();
                }
            }
        });
        *lock(&self.task) = Some(task);
    }

    /// A Source joined: its objects come with the next listing.
    fn rejoin(&self) {
        self.relist.store(true, Ordering::Release);
    }

    fn observe(
        &self,
        (api_version, kind): &KindId,
        event: Result<Event<DynamicObject>, watcher::Error>,
    ) {
        let mut state = lock(&self.state);
        match event {
            Ok(Event::Init) => {
                state.listing.clear();
                state.listing_active = true;
            }
            Ok(Event::InitApply(object)) => {
                let Some((applyset, key)) = identify(api_version, kind, &object) else {
                    return;
                };
                let Some(subscriber) = state.subscribers.get(&applyset) else {
                    return;
                };
                let value = live_value(object, api_version, kind, &subscriber.manager);
                state
                    .listing
                    .entry(applyset)
                    .or_default()
                    .insert(key, Arc::new(value));
            }
            Ok(Event::InitDone) => {
                state.listing_active = false;
                let mut listing = std::mem::take(&mut state.listing);
                for (applyset, subscriber) in &mut state.subscribers {
                    subscriber.objects = listing.remove(applyset).unwrap_or_default();
                    subscriber.synced = true;
                    subscriber.changes.fetch_add(1, Ordering::AcqRel);
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
                    subscriber.objects.insert(key, Arc::new(value));
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
                let on_change = subscriber.on_change.clone();
                drop(state);
                on_change(api_version, kind, &object, true);
            }
            Err(error) => {
                // Until the watch lists again, passes list this kind themselves.
                tracing::debug!(%error, kind, "watch interrupted; resuming");
                for subscriber in state.subscribers.values_mut() {
                    subscriber.synced = false;
                    subscriber.changes.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }
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
