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
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::outbox::{Outbox, OutboxError};
use super::sink::{JsonLinesSink, KafkaSink, KubernetesEventsSink, Sink, SinkError};
use crate::config::{EventsConfig, SinkConfig};
use crate::driver::{Backoff, Loop, Schedule, drive};
use crate::watch::PodWatchEvent;
use tether_core::events::PodState;
use tether_core::k8s::Scope;

/// How many events a sink takes in one delivery.
const BATCH: usize = 500;

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
    pub fn start(client: &Client, scope: &Scope, outbox: Arc<Outbox>, sinks: Vec<Sink>) -> Self {
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
        outbox: Arc<Outbox>,
        sinks: Vec<Sink>,
    ) -> (Self, mpsc::UnboundedSender<PodWatchEvent>) {
        let (appended, _) = signal::channel(0u64);
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        for sink in sinks {
            let mut delivery = Delivery {
                outbox: outbox.clone(),
                sink,
                appended: appended.subscribe(),
            };
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let schedule = Schedule {
                    name: "event delivery",
                    debounce: Duration::ZERO,
                    backoff: Backoff::pass(),
                    // A delivery in progress is finished: the outbox is flushed.
                    grace: Duration::from_secs(5),
                };
                drive(&mut delivery, &schedule, &stop, |_| {}).await;
            }));
        }
        let (feed, events) = mpsc::unbounded_channel();
        tasks.push(tokio::spawn(observe(events, outbox, appended)));
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
) -> Result<Arc<Outbox>, OutboxError> {
    let names: Vec<String> = sinks.iter().map(|s| s.name().to_string()).collect();
    let dir = config.outbox.clone();
    let cluster = cluster.to_string();
    let outbox = blocking(move || Outbox::open(&dir, &names, &cluster)).await?;
    if outbox.backlog() > 0 {
        tracing::info!(
            backlog = outbox.backlog(),
            "delivering events left from before"
        );
    }
    Ok(Arc::new(outbox))
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
                tracing::error!(error = %tether_core::error_chain(&error), "cannot record pod events")
            }
        }
    }
}

/// The outbox delivered to one sink, in order; the driver retries a failure with
/// backoff, on this sink's task only.
struct Delivery {
    outbox: Arc<Outbox>,
    sink: Sink,
    appended: signal::Receiver<u64>,
}

/// Why a delivery pass stopped.
#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    #[error("events not delivered to {sink} ({backlog} waiting)")]
    Sink {
        sink: &'static str,
        backlog: usize,
        #[source]
        source: SinkError,
    },
    #[error("cannot record a delivery to {sink}")]
    Record {
        sink: &'static str,
        #[source]
        source: OutboxError,
    },
}

impl Loop for Delivery {
    type Output = ();
    type Error = DeliveryError;

    /// Delivers everything pending, a batch at a time.
    async fn pass(&mut self) -> Result<(), DeliveryError> {
        let name = self.sink.name();
        loop {
            self.appended.borrow_and_update();
            let pending = self.outbox.pending(name, BATCH);
            let Some(last) = pending.last().map(|r| r.sequence) else {
                return Ok(());
            };
            self.sink
                .deliver(&pending)
                .await
                .map_err(|source| DeliveryError::Sink {
                    sink: name,
                    backlog: self.outbox.backlog(),
                    source,
                })?;
            let outbox = self.outbox.clone();
            blocking(move || outbox.acknowledge(name, last))
                .await
                .map_err(|source| DeliveryError::Record { sink: name, source })?;
        }
    }

    /// The next event recorded, or a look again in a while.
    async fn changed(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.appended.changed()).await;
    }
}
