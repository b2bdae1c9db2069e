//! The daemon's metrics, in OpenMetrics text (`/metrics`). Labels are sources,
//! results, actions and providers, never objects: the number of series does not grow
//! with what a source manages. Beside tether's own (`tether_*`), the process's resident
//! memory and open file descriptors under their conventional names
//! (`process_resident_memory_bytes`, `process_open_fds`) and the runtime's alive tasks
//! (`tether_runtime_alive_tasks`), read at each scrape: what shows a leak over weeks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use tether_engine::reconcile::{ApplyReport, Outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SourceLabel {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub source: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ActionLabels {
    pub source: String,
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLabels {
    pub source: String,
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyResultLabels {
    pub source: String,
    pub policy: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WebhookLabels {
    pub provider: String,
    pub outcome: String,
}

/// Every metric the daemon keeps, registered once.
pub(crate) struct Metrics {
    registry: Registry,
    reconcile_duration: Family<ResultLabels, Histogram, fn() -> Histogram>,
    reconciles: Family<ResultLabels, Counter>,
    applied: Family<ActionLabels, Counter>,
    drift: Family<ActionLabels, Counter>,
    fetch_duration: Family<SourceLabel, Histogram, fn() -> Histogram>,
    webhooks: Family<WebhookLabels, Counter>,
    leader: Gauge,
    last_success: Family<SourceLabel, Gauge<f64, AtomicU64>>,
    history_rewrites: Family<SourceLabel, Counter>,
    image_scans: Family<PolicyResultLabels, Counter>,
    image_last_scan: Family<PolicyLabels, Gauge<f64, AtomicU64>>,
    image_tags: Family<PolicyLabels, Gauge>,
    /// The image policies each source has had series for, to forget them with it.
    image_policies: std::sync::Mutex<BTreeMap<String, BTreeSet<String>>>,
}

/// The values of the `result` label of image policies' scans.
const IMAGE_RESULTS: [&str; 3] = ["updated", "kept", "failed"];

/// The values of the `result` label.
const RESULTS: [&str; 2] = ["success", "failure"];
/// The values of the `action` label of applied objects and of drift.
const ACTIONS: [&str; 8] = [
    "created",
    "configured",
    "pruned",
    "released",
    "replaced",
    "failed",
    "corrected",
    "reported",
];

fn seconds_histogram() -> Histogram {
    // 5 ms to about 80 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Metrics {
            registry: Registry::default(),
            reconcile_duration: Family::new_with_constructor(
                seconds_histogram as fn() -> Histogram,
            ),
            reconciles: Family::default(),
            applied: Family::default(),
            drift: Family::default(),
            fetch_duration: Family::new_with_constructor(seconds_histogram as fn() -> Histogram),
            webhooks: Family::default(),
            leader: Gauge::default(),
            last_success: Family::default(),
            history_rewrites: Family::default(),
            image_scans: Family::default(),
            image_last_scan: Family::default(),
            image_tags: Family::default(),
            image_policies: std::sync::Mutex::default(),
        };
        // The root registry has no prefix, so that the process's figures keep the names
        // every dashboard knows; tether's own live in the `tether` sub-registry.
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let tether = registry.sub_registry_with_prefix("tether");
        tether.register_collector(Box::new(RuntimeCollector));
        tether.register(
            "reconcile_duration_seconds",
            "How long a pass of a source took, by result",
            metrics.reconcile_duration.clone(),
        );
        tether.register(
            "reconciles",
            "Passes of a source, by result",
            metrics.reconciles.clone(),
        );
        tether.register(
            "applied_objects",
            "Objects a source's passes applied or pruned, by action",
            metrics.applied.clone(),
        );
        tether.register(
            "drift",
            "Changes by other writers to fields tether applied, corrected or reported",
            metrics.drift.clone(),
        );
        tether.register(
            "git_fetch_duration_seconds",
            "How long fetching a source's repository took",
            metrics.fetch_duration.clone(),
        );
        tether.register(
            "webhook_requests",
            "Webhook requests, by provider and outcome",
            metrics.webhooks.clone(),
        );
        tether.register(
            "leader",
            "1 while this process is the leader (or runs without election)",
            metrics.leader.clone(),
        );
        tether.register(
            "source_last_success_timestamp_seconds",
            "When a pass of the source last succeeded (Unix time)",
            metrics.last_success.clone(),
        );
        metrics.register_images(tether);
        tether.register(
            "history_rewrites",
            "Times a source's ref moved to a commit that does not descend from the applied one",
            metrics.history_rewrites.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

/// The process's resident memory and open file descriptors, read from `/proc` at each
/// scrape (a gauge set by a timer would be stale, and one more task). Where there is no
/// `/proc` (not Linux) or it cannot be read, the series is left out rather than given
/// a made-up 0.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(bytes) = resident_memory_bytes() {
            let gauge = ConstGauge::new(bytes);
            let metric = encoder.encode_descriptor(
                "process_resident_memory",
                "Resident memory size in bytes",
                Some(&Unit::Bytes),
                gauge.metric_type(),
            )?;
            gauge.encode(metric)?;
        }
        if let Some(fds) = open_fds() {
            let gauge = ConstGauge::new(fds);
            let metric = encoder.encode_descriptor(
                "process_open_fds",
                "Number of open file descriptors",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// The watches the Sources share: one per kind and identity on a cluster, however
/// many Sources subscribe.
#[derive(Debug)]
struct WatchesCollector(tether_engine::reconcile::Watches);

impl Collector for WatchesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = ConstGauge::new(i64::try_from(self.0.count()).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "watches",
            "Watches of the Sources' objects (shared: one per kind, namespace and identity on a cluster)",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

/// The tokio runtime's alive tasks: a task per Source, watch and connection, so a
/// number that grows with time, not with the Sources, is a task leak.
#[derive(Debug)]
struct RuntimeCollector;

impl Collector for RuntimeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // /metrics is answered on the runtime; an encode outside one (a test) has none.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Ok(());
        };
        let tasks = i64::try_from(runtime.metrics().num_alive_tasks()).unwrap_or(i64::MAX);
        let gauge = ConstGauge::new(tasks);
        let metric = encoder.encode_descriptor(
            "runtime_alive_tasks",
            "Tasks alive on the tokio runtime (spawned and not yet finished)",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

/// `VmRSS` of `/proc/self/status`, in bytes. The kernel gives it in kB there, which
/// spares knowing the page size that `/proc/self/statm` counts in (asking for it would
/// take libc, and unsafe code is forbidden here).
#[cfg(target_os = "linux")]
fn resident_memory_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// The entries of `/proc/self/fd`. The listing's own descriptor is among them, as in
/// every Prometheus client's `process_open_fds`.
#[cfg(target_os = "linux")]
fn open_fds() -> Option<i64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    i64::try_from(entries.count()).ok()
}

#[cfg(not(target_os = "linux"))]
fn resident_memory_bytes() -> Option<i64> {
    None
}

#[cfg(not(target_os = "linux"))]
fn open_fds() -> Option<i64> {
    None
}

impl Metrics {
    /// A finished pass: its duration, result and what it applied.
    pub(crate) fn pass(
        &self,
        source: &str,
        result: &str,
        took: Duration,
        report: Option<&ApplyReport>,
    ) {
        let labels = ResultLabels {
            source: source.to_string(),
            result: result.to_string(),
        };
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.reconciles.get_or_create(&labels).inc();
        for object in report.map(|r| r.objects.as_slice()).unwrap_or_default() {
            let action = match object.outcome {
                Outcome::Created => "created",
                Outcome::Configured => "configured",
                Outcome::Pruned => "pruned",
                Outcome::Released => "released",
                Outcome::Replaced => "replaced",
                Outcome::Failed(_) => "failed",
                Outcome::Unchanged | Outcome::Prunable => continue,
            };
            self.applied
                .get_or_create(&ActionLabels {
                    source: source.to_string(),
                    action: action.to_string(),
                })
                .inc();
        }
        if result == "success" {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            self.last_success
                .get_or_create(&SourceLabel {
                    source: source.to_string(),
                })
                .set(now.as_secs_f64());
        }
    }

    pub(crate) fn fetched(&self, source: &str, took: Duration) {
        self.fetch_duration
            .get_or_create(&SourceLabel {
                source: source.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Drift seen on `count` objects: `corrected` or `reported`.
    pub(crate) fn drift(&self, source: &str, action: &str, count: u64) {
        self.drift
            .get_or_create(&ActionLabels {
                source: source.to_string(),
                action: action.to_string(),
            })
            .inc_by(count);
    }

    /// The drift seen on `source`'s objects since the process started: (corrected,
    /// reported).
    pub(crate) fn drift_seen(&self, source: &str) -> (u64, u64) {
        let count = |action: &str| {
            self.drift
                .get(&ActionLabels {
                    source: source.to_string(),
                    action: action.to_string(),
                })
                .map_or(0, |counter| counter.get())
        };
        (count("corrected"), count("reported"))
    }

    pub(crate) fn webhook(&self, provider: &str, outcome: &str) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                provider: provider.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub(crate) fn history_rewritten(&self, source: &str) {
        self.history_rewrites
            .get_or_create(&SourceLabel {
                source: source.to_string(),
            })
            .inc();
    }

    fn register_images(&self, tether: &mut Registry) {
        tether.register(
            "image_policy_scans",
            "Scans of an image policy's registry, by what came of them (updated, kept, failed)",
            self.image_scans.clone(),
        );
        tether.register(
            "image_policy_last_scan_timestamp_seconds",
            "When an image policy's registry was last scanned (Unix time)",
            self.image_last_scan.clone(),
        );
        tether.register(
            "image_policy_tags",
            "How many tags an image policy's repository listed at its last scan",
            self.image_tags.clone(),
        );
    }

    /// A scan of image policy `policy` of `source`: what came of it (`updated`,
    /// `kept`, `failed`), when (Unix time), and the tags listed.
    pub(crate) fn image_scanned(
        &self,
        source: &str,
        policy: &str,
        result: &str,
        at: f64,
        tags: Option<usize>,
    ) {
        let labels = PolicyLabels {
            source: source.to_string(),
            policy: policy.to_string(),
        };
        self.image_scans
            .get_or_create(&PolicyResultLabels {
                source: source.to_string(),
                policy: policy.to_string(),
                result: result.to_string(),
            })
            .inc();
        self.image_last_scan.get_or_create(&labels).set(at);
        if let Some(tags) = tags {
            self.image_tags
                .get_or_create(&labels)
                .set(i64::try_from(tags).unwrap_or(i64::MAX));
        }
        self.image_policies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(source.to_string())
            .or_default()
            .insert(policy.to_string());
    }

    /// Drops the series of a deleted source: over a month of Sources made and
    /// deleted, the series (and the memory behind them) are those of the live ones.
    pub(crate) fn forget(&self, source: &str) {
        let policies = self
            .image_policies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(source)
            .unwrap_or_default();
        for policy in policies {
            let labels = PolicyLabels {
                source: source.to_string(),
                policy: policy.clone(),
            };
            self.image_last_scan.remove(&labels);
            self.image_tags.remove(&labels);
            for result in IMAGE_RESULTS {
                self.image_scans.remove(&PolicyResultLabels {
                    source: source.to_string(),
                    policy: policy.clone(),
                    result: result.to_string(),
                });
            }
        }
        let source_label = SourceLabel {
            source: source.to_string(),
        };
        self.fetch_duration.remove(&source_label);
        self.last_success.remove(&source_label);
        self.history_rewrites.remove(&source_label);
        for result in RESULTS {
            let labels = ResultLabels {
                source: source.to_string(),
                result: result.to_string(),
            };
            self.reconcile_duration.remove(&labels);
            self.reconciles.remove(&labels);
        }
        for action in ACTIONS {
            let labels = ActionLabels {
                source: source.to_string(),
                action: action.to_string(),
            };
            self.applied.remove(&labels);
            self.drift.remove(&labels);
        }
    }

    /// The metrics, with the number of `watches` read at each scrape.
    pub(crate) fn counting(watches: tether_engine::reconcile::Watches) -> Self {
        let mut metrics = Metrics::default();
        metrics
            .registry
            .sub_registry_with_prefix("tether")
            .register_collector(Box::new(WatchesCollector(watches)));
        metrics
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Whether this replica runs the Sources (the leader, or the only one).
    pub(crate) fn is_leader(&self) -> bool {
        self.leader.get() == 1
    }

    /// The OpenMetrics text of every metric.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// Every metric the daemon exposes, with one series of each whose label values
/// are placeholders (`SOURCE`, …): what the reference's page reads the names,
/// types, help and labels from. Called on the runtime, it has the runtime's too.
pub fn metrics_sample() -> String {
    let metrics = Metrics::counting(tether_engine::reconcile::Watches::default());
    let source = || SourceLabel {
        source: "SOURCE".into(),
    };
    let result = || ResultLabels {
        source: "SOURCE".into(),
        result: "RESULT".into(),
    };
    let action = || ActionLabels {
        source: "SOURCE".into(),
        action: "ACTION".into(),
    };
    let policy = || PolicyLabels {
        source: "SOURCE".into(),
        policy: "POLICY".into(),
    };
    metrics
        .reconcile_duration
        .get_or_create(&result())
        .observe(0.0);
    metrics.reconciles.get_or_create(&result()).inc();
    metrics.applied.get_or_create(&action()).inc();
    metrics.drift.get_or_create(&action()).inc();
    metrics.fetch_duration.get_or_create(&source()).observe(0.0);
    metrics.webhook("PROVIDER", "OUTCOME");
    metrics.last_success.get_or_create(&source()).set(0.0);
    metrics.history_rewritten("SOURCE");
    metrics.image_scanned("SOURCE", "POLICY", "RESULT", 0.0, Some(0));
    metrics.image_last_scan.get_or_create(&policy()).set(0.0);
    metrics.encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::k8s::ObjectKey;
    use tether_engine::reconcile::ObjectReport;

    #[test]
    fn series_are_per_source_and_action_never_per_object() {
        let metrics = Metrics::default();
        let report = ApplyReport {
            objects: (0..500)
                .map(|i| ObjectReport {
                    key: ObjectKey::new("v1", "ConfigMap", Some("n"), &format!("c{i}")),
                    outcome: Outcome::Created,
                })
                .collect(),
            blocked: None,
            stopped: false,
            prune_held: None,
            hooks: Vec::new(),
        };
        metrics.pass(
            "team/web",
            "success",
            Duration::from_millis(30),
            Some(&report),
        );
        metrics.webhook("github", "accepted");
        metrics.set_leader(true);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"tether_applied_objects_total{source="team/web",action="created"} 500"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"tether_reconciles_total{source="team/web",result="success"} 1"#));
        assert!(
            text.contains(
                r#"tether_webhook_requests_total{provider="github",outcome="accepted"} 1"#
            )
        );
        assert!(text.contains("tether_leader 1"));
        assert!(text.contains("tether_reconcile_duration_seconds_bucket"));
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("c42"), "no object names in labels");
    }

    #[test]
    fn a_deleted_source_leaves_no_series_behind() {
        let metrics = Metrics::default();
        let failed = ApplyReport {
            objects: vec![ObjectReport {
                key: ObjectKey::new("v1", "ConfigMap", Some("n"), "c"),
                outcome: Outcome::Failed(tether_engine::reconcile::ObjectFailure::Unreachable),
            }],
            blocked: None,
            stopped: false,
            prune_held: None,
            hooks: Vec::new(),
        };
        for source in ["team/web", "team/db"] {
            metrics.pass(source, "success", Duration::from_millis(5), None);
            metrics.pass(source, "failure", Duration::from_millis(5), Some(&failed));
            metrics.fetched(source, Duration::from_millis(5));
            metrics.drift(source, "corrected", 1);
            metrics.drift(source, "reported", 1);
            metrics.history_rewritten(source);
        }
        metrics.forget("team/web");
        let text = metrics.encode();
        assert!(!text.contains("team/web"), "{text}");
        assert!(text.contains(r#"tether_history_rewrites_total{source="team/db"} 1"#));
    }

    /// The value of the series `name` (no labels) in `text`.
    fn value(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn process_figures_are_read_at_scrape_time() {
        let metrics = Metrics::default();
        let parked = tokio::spawn(std::future::pending::<()>());
        let text = metrics.encode();
        parked.abort();
        let rss = value(&text, "process_resident_memory_bytes").expect(&text);
        // A test binary with tokio running: more than 1 MiB, less than 16 GiB.
        assert!(
            rss > 1024.0 * 1024.0 && rss < 16.0 * 1024.0 * 1024.0 * 1024.0,
            "{rss}"
        );
        assert!(
            text.contains("# UNIT process_resident_memory_bytes bytes"),
            "{text}"
        );
        // Standard input, output and error at least.
        let fds = value(&text, "process_open_fds").expect(&text);
        assert!((3.0..100_000.0).contains(&fds), "{fds}");
        // The test itself and the parked task.
        let tasks = value(&text, "tether_runtime_alive_tasks").expect(&text);
        assert!(tasks >= 1.0, "{tasks}");
        // Tether's own keep their prefix; the process's have none.
        assert!(!text.contains("tether_process_"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn without_a_runtime_the_task_count_is_left_out() {
        let text = Metrics::default().encode();
        assert!(!text.contains("tether_runtime_alive_tasks"), "{text}");
    }
}
