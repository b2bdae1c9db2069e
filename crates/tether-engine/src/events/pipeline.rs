//! The event pipeline: a pod watch feeds the outbox; one task per sink drains it.
//! A sink that fails (a broker that is down) is retried with backoff on its own
//! task: the watch, discovery and reconciliation never wait for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::watcher::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::outbox::{self as pods, Pods};
use super::sink::{JsonLinesSink, KafkaSink, KubernetesEventsSink, Sink, SinkError};
use crate::config::{EventsConfig, SinkConfig};
use crate::outbox::{Outbox, OutboxError, Recipient, Record, blocking, spawn_delivery};
use crate::watch::PodWatchEvent;
use tether_core::events::{PodEvent, PodState};
use tether_core::k8s::Scope;

/// Runs the watch and the sinks until dropped.
pub struct EventPipeline {
    tasks: Vec<JoinHandle<()>>,
    stop: CancellationToken,
}

impl Drop for EventPipeline {
    fn drop(&mut self) {
        self.stop.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// How long the events still in the outbox may take to be delivered at shutdown.
const FLUSH: Duration = Duration::from_secs(5);

impl EventPipeline {
    /// Stops: the deliveries in progress finish (the outbox is flushed to the sinks
    /// that take it) within a few seconds; what is left stays in the outbox for the
    /// next start.
    pub async fn close(mut self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut self.tasks);
        let _ = tokio::time::timeout(FLUSH, futures::future::join_all(tasks)).await;
    }

    /// The pipeline of `config`'s sinks and outbox, with a pod watch of its own on
    /// `cluster` (the name its events carry).
    pub async fn open(
        config: &EventsConfig,
        client: &Client,
        cluster: &str,
        scope: &Scope,
    ) -> Result<Self, OutboxError> {
        let sinks = open_sinks(config, client);
        let outbox = open_outbox(config, &sinks, cluster).await?;
        Ok(EventPipeline::start(client, scope, outbox, sinks))
    }

    /// The pipeline of `config`'s sinks and outbox, fed by a watch of `cluster` that
    /// runs elsewhere (discovery's) through the returned sender.
    pub(crate) async fn open_fed(
        config: &EventsConfig,
        client: &Client,
        cluster: &str,
    ) -> Result<(Self, mpsc::UnboundedSender<PodWatchEvent>), OutboxError> {
        let sinks = open_sinks(config, client);
        let outbox = open_outbox(config, &sinks, cluster).await?;
        Ok(EventPipeline::fed(outbox, sinks))
    }

    /// Starts watching the pods of `scope` into `outbox`, and delivering to `sinks`.
    pub fn start(
        client: &Client,
        scope: &Scope,
        outbox: Arc<Outbox<Pods>>,
        sinks: Vec<Sink>,
    ) -> Self {
        let (mut pipeline, feed) = EventPipeline::fed(outbox, sinks);
        for namespace in scope.watches() {
            let events = crate::watch::stream::<Pod>(client, namespace.as_deref());
            let feed = feed.clone();
            pipeline.tasks.push(tokio::spawn(async move {
                let mut events = std::pin::pin!(events);
                while let Some(event) = events.next().await {
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
    pub(crate) fn fed(
        outbox: Arc<Outbox<Pods>>,
        sinks: Vec<Sink>,
    ) -> (Self, mpsc::UnboundedSender<PodWatchEvent>) {
        let stop = CancellationToken::new();
        let mut tasks: Vec<JoinHandle<()>> = sinks
            .into_iter()
            .map(|sink| spawn_delivery(outbox.clone(), sink, stop.clone(), "event delivery"))
            .collect();
        let (feed, events) = mpsc::unbounded_channel();
        tasks.push(tokio::spawn(observe(events, outbox)));
        (EventPipeline { tasks, stop }, feed)
    }
}

/// The sinks, ready to deliver (the Kubernetes Events sink through `client`).
fn open_sinks(config: &EventsConfig, client: &Client) -> Vec<Sink> {
    config
        .sinks
        .iter()
        .map(|sink| match sink {
            SinkConfig::Kafka { brokers, topic } => {
                Sink::Kafka(KafkaSink::new(brokers.clone(), topic.clone()))
            }
            SinkConfig::JsonLines(path) => Sink::JsonLines(JsonLinesSink::new(path.clone())),
            SinkConfig::KubernetesEvents => {
                Sink::KubernetesEvents(KubernetesEventsSink::new(client.clone()))
            }
        })
        .collect()
}

async fn open_outbox(
    config: &EventsConfig,
    sinks: &[Sink],
    cluster: &str,
) -> Result<Arc<Outbox<Pods>>, OutboxError> {
    let names: Vec<String> = sinks.iter().map(|s| s.name().to_string()).collect();
    let dir = config.outbox.clone();
    let cluster = cluster.to_string();
    let outbox = blocking(move || pods::open(&dir, &names, &cluster)).await?;
    if outbox.backlog() > 0 {
        tracing::info!(
            backlog = outbox.backlog(),
            "delivering events left from before"
        );
    }
    Ok(Arc::new(outbox))
}

/// Records pod watch events in the outbox, in the order they come.
async fn observe(mut events: mpsc::UnboundedReceiver<PodWatchEvent>, outbox: Arc<Outbox<Pods>>) {
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
            Ok(count) => tracing::debug!(count, "events recorded"),
            // The disk is the one thing the outbox cannot do without: say so loudly.
            Err(error) => {
                tracing::error!(error = %tether_core::error_chain(&error), "cannot record pod events")
            }
        }
    }
}

impl Recipient<PodEvent> for Sink {
    type Error = SinkError;

    fn name(&self) -> String {
        Sink::name(self).to_string()
    }

    async fn deliver(&mut self, records: &[Record<PodEvent>]) -> Result<(), SinkError> {
        Sink::deliver(self, records).await
    }
}
