//! Where events go: Kafka (the XOS contract), JSON lines (stdout or a file), and
//! Kubernetes Events on the pod (`kubectl describe pod` shows them). Each sink takes
//! a batch of records in order and either delivers all of them or fails; the
//! outbox keeps what failed for the next try.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, PostParams};
use rskafka::BackoffConfig;
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use thiserror::Error;
use tokio::io::AsyncWriteExt;

use super::outbox::Record;
use tether_core::events::{PodEvent, Status};

#[derive(Debug, Error)]
pub enum SinkError {
    #[error("Kafka at {brokers}: {message}")]
    Kafka { brokers: String, message: String },
    #[error("cannot write events to {path}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the Kubernetes Event for pod {pod}")]
    Kubernetes {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

pub enum Sink {
    Kafka(KafkaSink),
    JsonLines(JsonLinesSink),
    KubernetesEvents(KubernetesEventsSink),
}

impl Sink {
    /// The sink's name in the outbox (its delivery position is kept under it).
    pub fn name(&self) -> &'static str {
        match self {
            Sink::Kafka(_) => "kafka",
            Sink::JsonLines(_) => "jsonl",
            Sink::KubernetesEvents(_) => "kubernetes-events",
        }
    }

    pub(crate) async fn deliver(&mut self, records: &[Record]) -> Result<(), SinkError> {
        match self {
            Sink::Kafka(s) => s.deliver(records).await,
            Sink::JsonLines(s) => s.deliver(records).await,
            Sink::KubernetesEvents(s) => s.deliver(records).await,
        }
    }
}

/// Produces each event to a topic, keyed by pod name (so one pod's events stay in one
/// partition, in order).
pub struct KafkaSink {
    topic: KafkaTopic,
}

impl KafkaSink {
    pub fn new(brokers: Vec<String>, topic: String) -> Self {
        KafkaSink {
            topic: KafkaTopic::new(brokers, topic),
        }
    }

    async fn deliver(&mut self, records: &[Record]) -> Result<(), SinkError> {
        let messages = records.iter().map(|record| KafkaMessage {
            key: record.event.pod.name.as_bytes().to_vec(),
            value: record.event.to_json(record.sequence).into_bytes(),
            headers: BTreeMap::new(),
        });
        self.topic.produce(messages.collect()).await
    }
}

/// One keyed message for a [`KafkaTopic`].
pub struct KafkaMessage {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub headers: BTreeMap<String, Vec<u8>>,
}

/// A topic tether produces to, pod events and notices alike: one client, made on
/// first use and again after a failure; messages partitioned by key as Kafka's default
/// partitioner does.
pub struct KafkaTopic {
    brokers: Vec<String>,
    topic: String,
    client: Option<(Arc<rskafka::client::Client>, i32)>,
}

impl KafkaTopic {
    pub fn new(brokers: Vec<String>, topic: String) -> Self {
        KafkaTopic {
            brokers,
            topic,
            client: None,
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn error(&self, message: impl std::fmt::Display) -> SinkError {
        SinkError::Kafka {
            brokers: self.brokers.join(","),
            message: message.to_string(),
        }
    }

    /// A client and the topic's partition count; the topic is made (one partition)
    /// when the broker does not have it.
    async fn connect(&mut self) -> Result<(Arc<rskafka::client::Client>, i32), SinkError> {
        if let Some((client, partitions)) = &self.client {
            return Ok((client.clone(), *partitions));
        }
        // Give up on a broker that does not answer; the outbox retries later.
        let backoff = BackoffConfig {
            deadline: Some(Duration::from_secs(5)),
            ..BackoffConfig::default()
        };
        let client = ClientBuilder::new(self.brokers.clone())
            .client_id("tether")
            .backoff_config(backoff)
            .build()
            .await
            .map_err(|e| self.error(e))?;
        let client = Arc::new(client);
        let topics = client.list_topics().await.map_err(|e| self.error(e))?;
        let partitions = match topics.iter().find(|t| t.name == self.topic) {
            Some(topic) => i32::try_from(topic.partitions.len()).unwrap_or(1).max(1),
            None => {
                let controller = client.controller_client().map_err(|e| self.error(e))?;
                controller
                    .create_topic(&self.topic, 1, 1, 5_000)
                    .await
                    .map_err(|e| self.error(format!("cannot create topic {}: {e}", self.topic)))?;
                1
            }
        };
        self.client = Some((client.clone(), partitions));
        Ok((client, partitions))
    }

    /// Produces all of `messages`, in order per key, or fails.
    pub async fn produce(&mut self, messages: Vec<KafkaMessage>) -> Result<(), SinkError> {
        let result = self.produce_once(messages).await;
        if result.is_err() {
            // Connect afresh next time: the broker may have moved or restarted.
            self.client = None;
        }
        result
    }

    async fn produce_once(&mut self, messages: Vec<KafkaMessage>) -> Result<(), SinkError> {
        let (client, partitions) = self.connect().await?;
        // Messages of one partition go in one request, in order; partitions one after
        // another, so a failure leaves later partitions for the retry, never earlier.
        let mut by_partition: Vec<(i32, Vec<rskafka::record::Record>)> = Vec::new();
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let timestamp =
            rskafka::chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default();
        for message in messages {
            let partition = partition_of(&message.key, partitions);
            let kafka_record = rskafka::record::Record {
                key: Some(message.key),
                value: Some(message.value),
                headers: message.headers,
                timestamp,
            };
            match by_partition.iter_mut().find(|(p, _)| *p == partition) {
                Some((_, batch)) => batch.push(kafka_record),
                None => by_partition.push((partition, vec![kafka_record])),
            }
        }
        for (partition, batch) in by_partition {
            let producer = client
                .partition_client(&self.topic, partition, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| self.error(e))?;
            producer
                .produce(batch, Compression::NoCompression)
                .await
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }
}

/// Kafka's default partitioner for keyed records: murmur2 of the key, made positive,
/// modulo the partition count; so Java, Go and Python producers agree with tether.
fn partition_of(key: &[u8], partitions: i32) -> i32 {
    let hash = murmur2(key) & 0x7fff_ffff;
    i32::try_from(hash % u32::try_from(partitions.max(1)).unwrap_or(1)).unwrap_or(0)
}

fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// One JSON value per line: the Kafka value, to standard output or appended to a file.
pub struct JsonLinesSink {
    /// `None`: standard output.
    path: Option<PathBuf>,
}

impl JsonLinesSink {
    pub fn new(path: Option<PathBuf>) -> Self {
        JsonLinesSink { path }
    }

    async fn deliver(&mut self, records: &[Record]) -> Result<(), SinkError> {
        let mut text = String::new();
        for record in records {
            text.push_str(&record.event.to_json(record.sequence));
            text.push('\n');
        }
        let label = self.path.as_ref().map_or_else(
            || "standard output".to_string(),
            |p| p.display().to_string(),
        );
        let error = |source| SinkError::File {
            path: label.clone(),
            source,
        };
        match &self.path {
            Some(path) => {
                let mut file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .await
                    .map_err(error)?;
                file.write_all(text.as_bytes()).await.map_err(error)?;
                file.sync_data().await.map_err(error)
            }
            None => {
                let mut out = tokio::io::stdout();
                out.write_all(text.as_bytes()).await.map_err(error)?;
                out.flush().await.map_err(error)
            }
        }
    }
}

/// A Kubernetes Event on the pod for each event.
pub struct KubernetesEventsSink {
    client: Client,
}

impl KubernetesEventsSink {
    pub fn new(client: Client) -> Self {
        KubernetesEventsSink { client }
    }

    async fn deliver(&mut self, records: &[Record]) -> Result<(), SinkError> {
        for record in records {
            let pod = &record.event.pod;
            let api: Api<Event> = Api::namespaced(self.client.clone(), &pod.namespace);
            match api
                .create(&PostParams::default(), &kubernetes_event(record))
                .await
            {
                Ok(_) => {}
                // Delivered before (the outbox delivers at least once).
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                // The namespace is gone or going: nobody can see an Event there.
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
                    tracing::debug!(pod = %pod.key(), reason = %status.message, "event not recorded");
                }
                Err(source) => {
                    return Err(SinkError::Kubernetes {
                        pod: pod.key(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

fn kubernetes_event(record: &Record) -> Event {
    let PodEvent {
        status,
        pod,
        cluster,
    } = &record.event;
    let reason = match status {
        Status::Created => "PodCreated",
        Status::Updated => "PodIPChanged",
        Status::Restarted => "ContainerRestarted",
        Status::Deleted => "PodDeleted",
    };
    let ip = pod.ip.as_deref().unwrap_or("none");
    let restarts: Vec<String> = pod
        .restart_counts
        .iter()
        .map(|(container, count)| format!("{container}: {count}"))
        .collect();
    // Events recorded before events named their cluster have none to say.
    let place = match cluster.as_str() {
        "" => String::new(),
        cluster => format!(" in cluster {cluster}"),
    };
    let message = format!(
        "tether: pod {}{place} (IP {ip}; restarts {})",
        status.name(),
        if restarts.is_empty() {
            "none".to_string()
        } else {
            restarts.join(", ")
        }
    );
    // One name per outbox record: a redelivery is refused as a duplicate.
    let name = format!("{}.tether-{}", pod.name, record.sequence);
    let about = PodRef {
        namespace: &pod.namespace,
        name: &pod.name,
        uid: &pod.uid,
    };
    pod_event(&about, name, reason, status.name(), message)
}

/// The pod an Event is about.
pub struct PodRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// A Normal Event named `name` on a pod, reported by tether.
pub(crate) fn pod_event(
    pod: &PodRef<'_>,
    name: String,
    reason: &str,
    action: &str,
    message: String,
) -> Event {
    let now = k8s_openapi::jiff::Timestamp::now();
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(pod.namespace.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.to_string()),
            namespace: Some(pod.namespace.to_string()),
            uid: Some(pod.uid.to_string()),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some("Normal".into()),
        source: Some(EventSource {
            component: Some("tether".into()),
            host: None,
        }),
        reporting_component: Some("tether".into()),
        reporting_instance: Some("tether".into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        action: Some(action.into()),
        count: Some(1),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_land_on_the_partitions_java_clients_pick() {
        // Kafka's Utils.murmur2 reference values.
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(partition_of(b"web-0", 1), 0);
    }

    #[test]
    fn a_kubernetes_event_names_the_pods_cluster() {
        let pod = tether_core::events::PodState {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: "u1".into(),
            ip: Some("10.0.0.5".into()),
            labels: Default::default(),
            restart_counts: [("web".to_string(), 1)].into(),
            action: None,
        };
        let record = |cluster: &str| Record {
            sequence: 7,
            event: PodEvent {
                status: Status::Restarted,
                pod: pod.clone(),
                cluster: cluster.into(),
            },
        };
        let message = |cluster| kubernetes_event(&record(cluster)).message.unwrap();
        assert_eq!(
            message("east"),
            "tether: pod restarted in cluster east (IP 10.0.0.5; restarts web: 1)"
        );
        // Recorded before events named their cluster.
        assert_eq!(
            message(""),
            "tether: pod restarted (IP 10.0.0.5; restarts web: 1)"
        );
    }
}
