//! The cluster side of discovery: reflectors (watch caches) of pods and of the
//! controllers that own them, in every namespace or in the namespaces of the scope.
//! `--once` waits for the first full list; `--watch` keeps them and is told of
//! every change.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource};
use thiserror::Error;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

use crate::watch::{Forward, PodWatchEvent, WatchStatus, Watchable, reflect};
use tether_core::discovery::facts::{Controllers, PodFacts};
use tether_core::k8s::Scope;

#[derive(Debug, Error)]
pub enum WatchError {
    #[error("the cluster did not list pods and controllers within {waited:?}: {last_error}")]
    NotReady {
        waited: Duration,
        last_error: String,
    },
}

/// Watch caches of pods and controllers; dropping it stops the watches.
pub struct ClusterWatch {
    pods: Vec<Store<Pod>>,
    replica_sets: Vec<Store<ReplicaSet>>,
    deployments: Vec<Store<Deployment>>,
    stateful_sets: Vec<Store<StatefulSet>>,
    daemon_sets: Vec<Store<DaemonSet>>,
    jobs: Vec<Store<Job>>,
    status: Arc<WatchStatus>,
    /// Changes since the last snapshot.
    changes: signal::Receiver<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl ClusterWatch {
    /// Starts watching; call [`ClusterWatch::ready`] before the first snapshot. Every
    /// pod watch event is also sent to `pod_events` (the event pipeline), so events
    /// and discovery come from the same watch.
    pub fn start(
        client: &Client,
        scope: &Scope,
        pod_events: Option<UnboundedSender<PodWatchEvent>>,
    ) -> Self {
        let status = Arc::new(WatchStatus::default());
        let mut watch = ClusterWatch {
            pods: Vec::new(),
            replica_sets: Vec::new(),
            deployments: Vec::new(),
            stateful_sets: Vec::new(),
            daemon_sets: Vec::new(),
            jobs: Vec::new(),
            changes: status.subscribe(),
            status,
            tasks: Vec::new(),
        };
        for namespace in scope.watches() {
            let forward: Option<Forward<Pod>> = pod_events.clone().map(|feed| {
                let namespace = namespace.clone();
                Box::new(move |event: &watcher::Event<Pod>| {
                    // A closed pipeline (shutting down) needs nothing more.
                    let _ = feed.send((namespace.clone(), event.clone()));
                }) as Forward<Pod>
            });
            let namespace = namespace.as_deref();
            let store = watch.reflect(client, namespace, forward);
            watch.pods.push(store);
            let store = watch.reflect(client, namespace, None);
            watch.replica_sets.push(store);
            let store = watch.reflect(client, namespace, None);
            watch.deployments.push(store);
            let store = watch.reflect(client, namespace, None);
            watch.stateful_sets.push(store);
            let store = watch.reflect(client, namespace, None);
            watch.daemon_sets.push(store);
            let store = watch.reflect(client, namespace, None);
            watch.jobs.push(store);
        }
        watch
    }

    fn reflect<K: Watchable>(
        &mut self,
        client: &Client,
        namespace: Option<&str>,
        forward: Option<Forward<K>>,
    ) -> Store<K> {
        let (store, task) = reflect(client, namespace, self.status.clone(), forward);
        self.tasks.push(task);
        store
    }

    /// Waits until every cache holds a full list, or fails after `timeout` with the
    /// last error the watches met (a forbidden list, an unreachable server).
    pub async fn ready(&self, timeout: Duration) -> Result<(), WatchError> {
        let all = async {
            all_ready(&self.pods).await;
            all_ready(&self.replica_sets).await;
            all_ready(&self.deployments).await;
            all_ready(&self.stateful_sets).await;
            all_ready(&self.daemon_sets).await;
            all_ready(&self.jobs).await;
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| WatchError::NotReady {
                waited: timeout,
                last_error: self
                    .status
                    .last_error()
                    .unwrap_or_else(|| "no answer".into()),
            })
    }

    /// Resolves at the next change to any watched object (at once if one happened
    /// since the last snapshot).
    pub async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            // Unreachable while the watch holds its status; never a busy loop.
            std::future::pending::<()>().await;
        }
    }

    /// The pods in the caches now, with their top-level controllers. Changes made
    /// before it are seen by it: [`ClusterWatch::changed`] waits for later ones.
    pub fn snapshot(&mut self) -> Vec<PodFacts> {
        self.changes.borrow_and_update();
        let mut controllers = Controllers::default();
        for x in self.replica_sets.iter().flat_map(Store::state) {
            controllers.insert_replica_set(&x);
        }
        for x in self.deployments.iter().flat_map(Store::state) {
            controllers.insert_deployment(&x);
        }
        for x in self.stateful_sets.iter().flat_map(Store::state) {
            controllers.insert_stateful_set(&x);
        }
        for x in self.daemon_sets.iter().flat_map(Store::state) {
            controllers.insert_daemon_set(&x);
        }
        for x in self.jobs.iter().flat_map(Store::state) {
            controllers.insert_job(&x);
        }
        self.pods
            .iter()
            .flat_map(Store::state)
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter_map(|pod| PodFacts::from_pod(&pod, &controllers))
            .collect()
    }
}

async fn all_ready<K>(stores: &[Store<K>])
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    for store in stores {
        // An error means the watch task ended (aborted): nothing more to wait for.
        let _ = store.wait_until_ready().await;
    }
}

impl Drop for ClusterWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
