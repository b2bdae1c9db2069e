//! Watching the cluster, for discovery and events alike: the scope (every namespace
//! or some), watch streams and reflectors (watch caches) that keep only what tether
//! reads, and the pod watch event that the event pipeline takes from discovery's
//! watch. Neither `discovery` nor `events` imports the other; both import this.

use std::fmt::Debug;
use std::sync::Mutex;

use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

/// A pod watch event, with the namespace its watch covers (`None`: all).
pub type PodWatchEvent = (Option<String>, watcher::Event<Pod>);

/// Where a reflector also sends each watch event.
pub type Forward<K> = Box<dyn Fn(&watcher::Event<K>) + Send>;

/// The kinds tether watches: namespaced, built in, cloneable.
pub trait Watchable:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// The watch events of one kind in one namespace (or all), re-listing with kube's
/// default backoff after an error. `managedFields` are dropped from every object:
/// tether never reads them from a watch, and they are most of a cached object.
pub fn stream<K: Watchable>(
    client: &Client,
    namespace: Option<&str>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|object| object.managed_fields_mut().clear())
}

/// What the watches of one [`Reflectors`] share: a change counter, and the last
/// error a watch met (to explain a cache that never fills).
#[derive(Debug)]
pub struct WatchStatus {
    changes: signal::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

impl Default for WatchStatus {
    fn default() -> Self {
        WatchStatus {
            changes: signal::channel(0).0,
            last_error: Mutex::new(None),
        }
    }
}

impl WatchStatus {
    /// A receiver that sees every change counted after it was made.
    pub fn subscribe(&self) -> signal::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

/// Starts a reflector of `K`: a watch cache kept up to date by a task, which counts
/// each change in `status` and hands each event to `forward`. Abort the task to stop.
pub(crate) fn reflect<K: Watchable>(
    client: &Client,
    namespace: Option<&str>,
    status: std::sync::Arc<WatchStatus>,
    forward: Option<Forward<K>>,
) -> (Store<K>, JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let events = reflector::reflector(writer, stream::<K>(client, namespace));
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if let Some(forward) = &forward {
                        forward(&event);
                    }
                    status.changes.send_modify(|n| *n += 1);
                }
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
                    if let Ok(mut last) = status.last_error.lock() {
                        *last = Some(error.to_string());
                    }
                }
            }
        }
    });
    (reader, task)
}
