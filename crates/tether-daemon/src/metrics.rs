//! The daemon's metrics, in OpenMetrics text (`/metrics`). Labels are sources,
//! results, actions and providers, never objects: the number of series does not grow
//! with what a source manages.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use tether_engine::reconcile::{ApplyReport, Outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub source: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub source: String,
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub provider: String,
    pub outcome: String,
}

/// Every metric the daemon keeps, registered once.
pub struct Metrics {
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
}

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
            registry: Registry::with_prefix("tether"),
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
        };
        let mut registry = Registry::with_prefix("tether");
        registry.register(
            "reconcile_duration_seconds",
            "How long a pass of a source took, by result",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "reconciles",
            "Passes of a source, by result",
            metrics.reconciles.clone(),
        );
        registry.register(
            "applied_objects",
            "Objects a source's passes applied or pruned, by action",
            metrics.applied.clone(),
        );
        registry.register(
            "drift",
            "Changes by other writers to fields tether applied, corrected or reported",
            metrics.drift.clone(),
        );
        registry.register(
            "git_fetch_duration_seconds",
            "How long fetching a source's repository took",
            metrics.fetch_duration.clone(),
        );
        registry.register(
            "webhook_requests",
            "Webhook requests, by provider and outcome",
            metrics.webhooks.clone(),
        );
        registry.register(
            "leader",
            "1 while this process is the leader (or runs without election)",
            metrics.leader.clone(),
        );
        registry.register(
            "source_last_success_timestamp_seconds",
            "When a pass of the source last succeeded (Unix time)",
            metrics.last_success.clone(),
        );
        registry.register(
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

impl Metrics {
    /// A finished pass: its duration, result and what it applied.
    pub fn pass(&self, source: &str, result: &str, took: Duration, report: Option<&ApplyReport>) {
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

    pub fn fetched(&self, source: &str, took: Duration) {
        self.fetch_duration
            .get_or_create(&SourceLabel {
                source: source.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Drift seen on `count` objects: `corrected` or `reported`.
    pub fn drift(&self, source: &str, action: &str, count: u64) {
        self.drift
            .get_or_create(&ActionLabels {
                source: source.to_string(),
                action: action.to_string(),
            })
            .inc_by(count);
    }

    pub fn webhook(&self, provider: &str, outcome: &str) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                provider: provider.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn history_rewritten(&self, source: &str) {
        self.history_rewrites
            .get_or_create(&SourceLabel {
                source: source.to_string(),
            })
            .inc();
    }

    /// Drops the series of a deleted source: over a month of Sources made and
    /// deleted, the series (and the memory behind them) are those of the live ones.
    pub fn forget(&self, source: &str) {
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

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
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
}
