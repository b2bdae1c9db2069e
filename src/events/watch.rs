//! The event pipeline: a pod watch feeds the outbox; one task per sink drains it.
//! A sink that fails (a broker that is down) is retried with backoff on its own
//! task: the watch, discovery and reconciliation never wait for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

use super::PodState;
use super::outbox::{Outbox, OutboxError};
use super::sink::Sink;
use crate::discover::Scope;

/// How many events a sink takes in one delivery.
const BATCH: usize = 500;

/// Runs the watch and the sinks until dropped.
pub struct EventPipeline {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for EventPipeline {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A pod watch event, with the namespace its watch covers (`None`: all).
pub type PodWatchEvent = (Option<String>, Event<Pod>);

impl EventPipeline {
    /// Starts watching the pods of `scope` into `outbox`, and delivering to `sinks`.
    pub fn start(client: &Client, scope: &Scope, outbox: Arc<Outbox>, sinks: Vec<Sink>) -> Self {
        let (mut pipeline, feed) = EventPipeline::fed(outbox, sinks);
        let namespaces: Vec<Option<String>> = match scope {
            Scope::All => vec![None],
            Scope::Namespaces(names) => names.iter().cloned().map(Some).collect(),
        };
        for namespace in namespaces {
            let api: Api<Pod> = match &namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            };
            let feed = feed.clone();
            pipeline.tasks.push(tokio::spawn(async move {
                let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(event) => {
                            if feed.send((namespace.clone(), event)).is_err() {
                                break;
                            }
                        }
                        Err(error) => tracing::warn!(%error, "pod watch failed; retrying"),
                    }
                }
            }));
        }
        pipeline
    }

    /// Starts delivering to `sinks` what is fed to the returned sender: the pod watch
    /// events of a watch that runs elsewhere (discovery's).
    pub fn fed(
        outbox: Arc<Outbox>,
        sinks: Vec<Sink>,
    ) -> (Self, mpsc::UnboundedSender<PodWatchEvent>) {
        let (appended, _) = signal::channel(0u64);
        let mut tasks = Vec::new();
        for sink in sinks {
            tasks.push(tokio::spawn(deliver(
                outbox.clone(),
                sink,
                appended.subscribe(),
            )));
        }
        let (feed, events) = mpsc::unbounded_channel();
        tasks.push(tokio::spawn(observe(events, outbox, appended)));
        (EventPipeline { tasks }, feed)
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, OutboxError> + Send + 'static,
) -> Result<T, OutboxError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(OutboxError::Io {
            path: "outbox".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// Records pod watch events in the outbox, in the order they come.
async fn observe(
    mut events: mpsc::UnboundedReceiver<PodWatchEvent>,
    outbox: Arc<Outbox>,
    appended: signal::Sender<u64>,
) {
    // A (re)listing in progress, per watched namespace.
    let mut listings: HashMap<Option<String>, Vec<PodState>> = HashMap::new();
    while let Some((namespace, event)) = events.recv().await {
        let outbox = outbox.clone();
        let result = match event {
            Event::Init => {
                listings.insert(namespace, Vec::new());
                Ok(0)
            }
            Event::InitApply(pod) => {
                listings
                    .entry(namespace)
                    .or_default()
                    .extend(PodState::from_pod(&pod));
                Ok(0)
            }
            Event::InitDone => {
                let pods = listings.remove(&namespace).unwrap_or_default();
                blocking(move || {
                    outbox.observe_all(pods, |ns| namespace.as_deref().is_none_or(|n| n == ns))
                })
                .await
            }
            Event::Apply(pod) => match PodState::from_pod(&pod) {
                Some(state) => blocking(move || outbox.observe([(state.key(), Some(state))])).await,
                None => Ok(0),
            },
            Event::Delete(pod) => match PodState::from_pod(&pod) {
                Some(state) => blocking(move || outbox.observe([(state.key(), None)])).await,
                None => Ok(0),
            },
        };
        match result {
            Ok(0) => {}
            Ok(count) => {
                tracing::debug!(count, "events recorded");
                appended.send_modify(|n| *n += 1);
            }
            // The disk is the one thing the outbox cannot do without: say so loudly.
            Err(error) => {
                tracing::error!(error = %crate::error_chain(&error), "cannot record pod events")
            }
        }
    }
}

/// Delivers the outbox to one sink, in order, retrying failures with backoff.
async fn deliver(outbox: Arc<Outbox>, mut sink: Sink, mut appended: signal::Receiver<u64>) {
    let name = sink.name();
    let mut delay = Duration::from_millis(200);
    loop {
        let pending = outbox.pending(name, BATCH);
        let Some(last) = pending.last().map(|r| r.sequence) else {
            // Nothing to send: wait for the next event (or look again in a while).
            let _ = tokio::time::timeout(Duration::from_secs(5), appended.changed()).await;
            continue;
        };
        match sink.deliver(&pending).await {
            Ok(()) => {
                delay = Duration::from_millis(200);
                let outbox = outbox.clone();
                if let Err(error) = blocking(move || outbox.acknowledge(name, last)).await {
                    tracing::error!(sink = name, error = %crate::error_chain(&error), "cannot record a delivery");
                    tokio::time::sleep(delay).await;
                }
            }
            Err(error) => {
                tracing::warn!(sink = name, error = %crate::error_chain(&error), retry = ?delay, backlog = outbox.backlog(), "events not delivered; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}
