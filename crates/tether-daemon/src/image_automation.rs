//! A Source's image automation (`spec.imageAutomation`): the engine's
//! [`Automation`] run on the Source's repository, again after the shortest interval of
//! its policies and at once when a registry's webhook names one of their image
//! repositories; each policy's outcome in `status.images`, the metrics and the log;
//! a commit pushed to the Source's branch nudges the Source's loop, which applies it
//! like any push. It runs beside the loop and stops with it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tether_engine::image_automation::automation::{
    Automation, PolicyOutcome, PolicyResult, RunReport,
};
use tether_engine::image_automation::notification::Pushed;

use tether_web::ImagePolicyRow;

use super::loop_views::SourceName;
use crate::shared::Shared;
use crate::switchboard::Trigger;
use tether_api::source_spec::{ImagePolicyStatus, Source};

/// How long to wait for the next run when the models have no policy (they may gain
/// one with any push).
const WITHOUT_POLICIES: Duration = Duration::from_secs(300);
/// How many registry pushes may wait for a run; more are one run anyway.
pub(crate) const QUEUED: usize = 16;

/// What one Source's image automation needs.
pub(crate) struct SourceImages {
    pub id: String,
    pub automation: Automation,
    pub sources: Api<Source>,
    pub secrets: Api<Secret>,
    /// The Source, as its status and the web page name it.
    pub source: SourceName,
    /// The Source's loop, nudged after a commit.
    pub trigger: mpsc::Sender<Trigger>,
    pub shared: Arc<Shared>,
}

impl SourceImages {
    /// Runs until `stop`: a run now, then one per interval or registry push.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let (nudge, mut pushes) = mpsc::channel::<Vec<Pushed>>(QUEUED);
        let mut pushed: Option<Vec<Pushed>> = None;
        loop {
            let secrets = crate::registry_secrets::NamespaceSecrets(&self.secrets);
            let run = self
                .automation
                .run(&secrets, pushed.as_deref(), chrono::Utc::now());
            let wait = tokio::select! {
                () = stop.cancelled() => break,
                report = run => match report {
                    Ok(report) => {
                        self.record(&report).await;
                        self.shared
                            .switchboard
                            .register_images(&self.id, report.repositories.clone(), nudge.clone());
                        report.rescan_after.unwrap_or(WITHOUT_POLICIES)
                    }
                    Err(error) => {
                        tracing::warn!(error = %tether_core::error_chain(&error), "image automation failed; trying again after a minute");
                        Duration::from_secs(60)
                    }
                },
            };
            // The next registry push, or the interval's end (`None`; the channel
            // cannot close: this loop holds a sender).
            pushed = tokio::select! {
                () = stop.cancelled() => break,
                received = tokio::time::timeout(wait, pushes.recv()) => match received {
                    Ok(Some(first)) => {
                        let mut all = first;
                        while let Ok(more) = pushes.try_recv() {
                            all.extend(more);
                        }
                        Some(all)
                    }
                    Ok(None) | Err(_) => None,
                },
            };
        }
        self.shared.switchboard.unregister_images(&self.id);
    }

    /// A run's outcome: the status (only the policies it scanned change), the
    /// metrics, the log, and the loop nudged after a commit.
    async fn record(&self, report: &RunReport) {
        let now = chrono::Utc::now();
        for policy in &report.policies {
            let result = result_name(&policy.result);
            self.shared.metrics.image_scanned(
                &self.id,
                &policy.policy,
                result,
                now.timestamp_millis() as f64 / 1000.0,
                policy.listed,
            );
            match &policy.result {
                PolicyResult::Failed { error } => {
                    tracing::warn!(policy = %policy.policy, image = %policy.image, %error, "image policy failed");
                }
                PolicyResult::Updated { .. } => {
                    tracing::info!(policy = %policy.policy, image = %policy.image, outcome = %policy.summary(), "image updated");
                }
                PolicyResult::Kept { .. } => {
                    tracing::debug!(policy = %policy.policy, outcome = %policy.summary(), "image kept");
                }
            }
        }
        if !report.commits.is_empty() {
            // A full channel already holds a trigger: the pass will see the commit.
            let _ = self.trigger.try_send(Trigger::Changed);
        }
        self.write_status(
            report,
            &now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
        .await;
    }

    async fn write_status(&self, report: &RunReport, now: &str) {
        let current = match self.sources.get_status(&self.source.name).await {
            Ok(source) => source.status.unwrap_or_default().images,
            Err(error) => {
                tracing::warn!(%error, "cannot read the Source's status");
                return;
            }
        };
        let images = merged_status(current, report, now);
        self.shared
            .views
            .images(&self.source, images.iter().map(row_of).collect());
        let patch = serde_json::json!({
            "status": { "images": images, "imagesSummary": summary(&images) }
        });
        if let Err(error) = self
            .sources
            .patch_status(
                &self.source.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(%error, "cannot write the image policies' status");
        }
    }
}

/// A policy's status as the web page shows it.
fn row_of(status: &ImagePolicyStatus) -> ImagePolicyRow {
    ImagePolicyRow {
        policy: status.policy.clone(),
        image: status.image.clone(),
        last_scan: status.last_scan_time.clone(),
        tags: status.tags,
        candidate: status.candidate.clone(),
        result: status.result.clone(),
        message: status.message.clone(),
        last_update: status.last_update.clone(),
        last_update_time: status.last_update_time.clone(),
    }
}

fn result_name(result: &PolicyResult) -> &'static str {
    match result {
        PolicyResult::Updated { .. } => "updated",
        PolicyResult::Kept { .. } => "kept",
        PolicyResult::Failed { .. } => "failed",
    }
}

/// The policies' status after a run: those it scanned as it found them, the others
/// (a registry's webhook scans only its repository's) as they were, and none of a
/// policy the models no longer have.
fn merged_status(
    current: Vec<ImagePolicyStatus>,
    report: &RunReport,
    now: &str,
) -> Vec<ImagePolicyStatus> {
    let (scanned, mut images): (Vec<ImagePolicyStatus>, Vec<ImagePolicyStatus>) = current
        .into_iter()
        .filter(|s| report.names.contains(&s.policy))
        .partition(|s| report.policies.iter().any(|p| p.policy == s.policy));
    images.extend(report.policies.iter().map(|p| {
        let mut status = policy_status(p, now);
        // A scan that chose nothing new keeps the policy's last update.
        if status.last_update.is_none()
            && let Some(before) = scanned.iter().find(|s| s.policy == p.policy)
        {
            status.last_update.clone_from(&before.last_update);
            status.last_update_time.clone_from(&before.last_update_time);
        }
        status
    }));
    images.sort_by(|a, b| a.policy.cmp(&b.policy));
    images
}

fn policy_status(policy: &PolicyOutcome, now: &str) -> ImagePolicyStatus {
    let result = match policy.result {
        PolicyResult::Updated { .. } => "Updated",
        PolicyResult::Kept { .. } => "Kept",
        PolicyResult::Failed { .. } => "Failed",
    };
    ImagePolicyStatus {
        policy: policy.policy.clone(),
        image: policy.image.clone(),
        last_scan_time: now.to_string(),
        tags: policy.listed.map(|n| n as u64),
        candidate: policy.candidate.clone(),
        result: result.to_string(),
        message: policy.summary(),
        last_update: matches!(policy.result, PolicyResult::Updated { .. })
            .then(|| policy.summary()),
        last_update_time: matches!(policy.result, PolicyResult::Updated { .. })
            .then(|| now.to_string()),
    }
}

/// `3 policies: 1 updated, 1 failed (api)`.
fn summary(images: &[ImagePolicyStatus]) -> String {
    let count = |result: &str| images.iter().filter(|i| i.result == result).count();
    let failed: Vec<&str> = images
        .iter()
        .filter(|i| i.result == "Failed")
        .map(|i| i.policy.as_str())
        .collect();
    let mut text = format!(
        "{} {}: {} updated, {} failed",
        images.len(),
        if images.len() == 1 {
            "policy"
        } else {
            "policies"
        },
        count("Updated"),
        failed.len()
    );
    if !failed.is_empty() {
        text.push_str(&format!(" ({})", failed.join(", ")));
    }
    text
}
