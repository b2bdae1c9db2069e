//! Watch caches of the objects an inventory labels, for a reconciler that runs pass
//! after pass: one watch per kind keeps each kind's live objects, so that a pass plans
//! without listing, and the same watch tells its owner of every change as it happens
//! (the daemon's drift). A kind whose watch is not synced (starting, or re-listing
//! after an error) is listed by the pass as before. An identity confined to some
//! namespaces (a team's Source) watches each of them, since it may not watch across
//! the cluster: a kind is synced when all of its watches are.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::StreamExt;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::task::JoinSet;

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

#[derive(Default)]
struct KindCache {
    synced: bool,
    objects: HashMap<ObjectKey, Value>,
    /// Filled while the watch (re)lists; swapped in when the listing is done.
    listing: HashMap<ObjectKey, Value>,
}

/// The live objects of some kinds, by the inventory's label, kept by watches.
pub struct WatchCache {
    resources: Resources,
    kinds: BTreeSet<KindId>,
    scope: Scope,
    state: Arc<Mutex<HashMap<WatchId, KindCache>>>,
    /// Counts every event of every watch: unchanged, nothing was seen to change.
    changes: Arc<AtomicU64>,
    tasks: JoinSet<()>,
}

impl WatchCache {
    /// Watches `kinds` (found in `resources`) for objects labelled for `inventory`,
    /// the namespaced ones in `scope` (cluster-scoped kinds across the cluster).
    pub fn start(
        client: &Client,
        resources: Resources,
        kinds: BTreeSet<KindId>,
        scope: Scope,
        inventory: &Inventory,
        on_change: OnChange,
    ) -> Self {
        let state: Arc<Mutex<HashMap<WatchId, KindCache>>> = Arc::default();
        let selector = format!("{PART_OF_LABEL}={}", inventory.applyset_id());
        let manager = inventory.field_manager();
        let changes: Arc<AtomicU64> = Arc::default();
        let mut tasks = JoinSet::new();
        for (id, namespace) in watches(&resources, &kinds, &scope) {
            let Some(resource) = resources
                .served()
                .find(|(v, k, _)| *v == id.0 && *k == id.1)
                .map(|(_, _, r)| r.clone())
            else {
                continue;
            };
            let api: Api<DynamicObject> = match &namespace {
                Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let config = watcher::Config::default().labels(&selector);
            let watch = KindWatch {
                id: (id, namespace),
                manager: manager.clone(),
                state: state.clone(),
                changes: changes.clone(),
                on_change: on_change.clone(),
            };
            tasks.spawn(async move {
                let mut events = watcher::watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    watch.observe(event);
                }
            });
        }
        WatchCache {
            resources,
            kinds,
            scope,
            state,
            changes,
            tasks,
        }
    }

    /// How many events the watches have seen: equal counts mean that nothing
    /// changed (or was re-listed) in between.
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

    /// The live objects of one kind, if its watches are synced.
    pub(super) fn listed(&self, api_version: &str, kind: &str) -> Option<Vec<(ObjectKey, Value)>> {
        let id = (api_version.to_string(), kind.to_string());
        let state = lock(&self.state);
        let mut listed = Vec::new();
        for watch in watches(&self.resources, &BTreeSet::from([id]), &self.scope) {
            let cached = state.get(&watch).filter(|c| c.synced)?;
            listed.extend(cached.objects.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Some(listed)
    }

    /// Are all watches synced (their first listing done)?
    pub fn synced(&self) -> bool {
        let state = lock(&self.state);
        watches(&self.resources, &self.kinds, &self.scope)
            .iter()
            .all(|id| state.get(id).is_some_and(|c| c.synced))
    }
}

impl Drop for WatchCache {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// The watches of `kinds` that `resources` serves: a namespaced kind's in each
/// namespace of `scope`, a cluster-scoped kind's across the cluster.
fn watches(resources: &Resources, kinds: &BTreeSet<KindId>, scope: &Scope) -> Vec<WatchId> {
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

/// One kind's watch (in one namespace, or all).
struct KindWatch {
    id: WatchId,
    manager: String,
    state: Arc<Mutex<HashMap<WatchId, KindCache>>>,
    changes: Arc<AtomicU64>,
    on_change: OnChange,
}

impl KindWatch {
    fn key(&self, object: &DynamicObject) -> ObjectKey {
        ObjectKey::new(
            &self.id.0.0,
            &self.id.0.1,
            object.metadata.namespace.as_deref(),
            &object.name_any(),
        )
    }

    /// Keeps `object`: in the listing being made, or among the synced objects.
    fn store(&self, object: DynamicObject, listing: bool) {
        let key = self.key(&object);
        let value = live_value(object, &self.id.0.0, &self.id.0.1, &self.manager);
        let mut state = lock(&self.state);
        let cached = state.entry(self.id.clone()).or_default();
        match listing {
            true => cached.listing.insert(key, value),
            false => cached.objects.insert(key, value),
        };
    }

    fn observe(&self, event: Result<Event<DynamicObject>, watcher::Error>) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        match event {
            Ok(Event::Init) => {
                let mut state = lock(&self.state);
                let cached = state.entry(self.id.clone()).or_default();
                cached.synced = false;
                cached.listing.clear();
            }
            Ok(Event::InitApply(object)) => self.store(object, true),
            Ok(Event::InitDone) => {
                let mut state = lock(&self.state);
                let cached = state.entry(self.id.clone()).or_default();
                cached.objects = std::mem::take(&mut cached.listing);
                cached.synced = true;
            }
            Ok(Event::Apply(object)) => {
                (self.on_change)(&self.id.0.0, &self.id.0.1, &object, false);
                self.store(object, false);
            }
            Ok(Event::Delete(object)) => {
                (self.on_change)(&self.id.0.0, &self.id.0.1, &object, true);
                let key = self.key(&object);
                let mut state = lock(&self.state);
                state
                    .entry(self.id.clone())
                    .or_default()
                    .objects
                    .remove(&key);
            }
            Err(error) => {
                // Until the watch lists again, passes list this kind themselves.
                tracing::debug!(%error, kind = self.id.0.1, "watch interrupted; resuming");
                lock(&self.state).entry(self.id.clone()).or_default().synced = false;
            }
        }
    }
}
