//! Pull requests planned before merge. A pull (merge) request's webhook for the branch
//! a Source follows makes the Source plan the request's head against its clusters, as
//! its own identity and confined as itself, and keep one comment on the request with
//! the plan's Markdown report (`tether diff -o markdown`'s) and a commit status
//! `tether/diff/<cluster>/<source>` on the head: failure when an object would be
//! refused or conflict.
//!
//! What a request's author controls is only the content planned, never where it comes
//! from or what is done with it: the head is fetched from the Source's own repository
//! (`refs/pull/N/head`, `refs/merge-requests/N/head`), never from a fork's URL; the
//! plan only reads and dry-runs (nothing is applied or recorded); and a request from a
//! fork is planned without the Source's decryption keys, so that no secret of the
//! Source can be moved into a rendered object and shown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::decryption::DecryptionSecret;
use crate::feedback::SourceFeedback;
use crate::source_status::remedy_words;
use tether_api::source_spec::Source;
use tether_api::webhook::PullRequest;
use tether_core::feedback::CommitState;
use tether_core::plan::Action;
use tether_engine::cluster::Target;
use tether_engine::git::Credentials;
use tether_engine::reconcile::{ClusterPlans, PlanOptions, ReconcileError, Reconciler};

/// What makes a reconciler act as a Source: its identity (impersonated), its
/// confinement, its other clusters.
pub(crate) trait ActAs: Sync {
    fn act_as(
        &self,
        reconciler: Reconciler,
    ) -> futures::future::BoxFuture<'_, Result<Reconciler, String>>;
}

/// Pull requests waiting to be planned, per Source; more are dropped (the next push
/// to the request brings another webhook).
pub(crate) const QUEUED: usize = 16;

/// How a Source's pull requests are planned: everything its loop knows, but the ref.
pub(crate) struct PullRequestPlanner<'a> {
    pub source: &'a Source,
    pub credentials: Credentials,
    /// Where heads are fetched: apart from the loop's cache, so neither waits.
    pub cache: PathBuf,
    pub feedback: Arc<SourceFeedback>,
    /// Makes a reconciler act as the Source (its identity, its confinement).
    pub acting: &'a dyn ActAs,
    /// The daemon's own client (the Source's Secrets are read with it).
    pub client: Client,
}

impl<'a> PullRequestPlanner<'a> {
    pub(crate) fn new(
        source: &'a Source,
        credentials: Credentials,
        feedback: Arc<SourceFeedback>,
        cache: PathBuf,
        acting: &'a dyn ActAs,
        client: &Client,
    ) -> Self {
        PullRequestPlanner {
            source,
            credentials,
            cache,
            feedback,
            acting,
            client: client.clone(),
        }
    }

    /// Plans each request that comes, one at a time, until `stop`.
    pub(crate) async fn run(
        &self,
        mut requests: mpsc::Receiver<PullRequest>,
        stop: &CancellationToken,
    ) {
        loop {
            let request = tokio::select! {
                request = requests.recv() => request,
                () = stop.cancelled() => None,
            };
            let Some(request) = request else {
                return;
            };
            tracing::info!(number = request.number, head = %request.head_commit, from_fork = request.from_fork, "planning a pull request");
            self.feedback.planning(&request.head_commit).await;
            let (report, state, description) = match self.plan(&request).await {
                Ok(plans) => judged(&plans),
                Err(message) => (
                    format!(
                        "### tether diff\n\ntether could not plan this head:\n\n```\n{message}\n```\n"
                    ),
                    CommitState::Failure,
                    message,
                ),
            };
            self.feedback
                .pull_request(
                    request.number,
                    &request.head_commit,
                    &report,
                    state,
                    &description,
                )
                .await;
        }
    }

    /// The plan of the request's head, or why there is none.
    async fn plan(&self, request: &PullRequest) -> Result<ClusterPlans, String> {
        let url = self.source.spec.url.clone();
        let (head_ref, head, cache, credentials) = (
            request.head_ref.clone(),
            request.head_commit.clone(),
            self.cache.clone(),
            self.credentials.clone(),
        );
        tokio::task::spawn_blocking(move || {
            tether_engine::git::fetch_pull_request_head(
                &url,
                &head_ref,
                &head,
                &cache,
                &credentials,
            )
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| tether_core::error_chain(&e))?;
        let mut spec = self.source.spec.clone();
        spec.reference = Some(request.head_commit.clone());
        let namespace = self.source.namespace().unwrap_or_default();
        let settings = crate::source_loop::settings_of(
            &spec,
            &namespace,
            &self.source.name_any(),
            self.cache.clone(),
            self.credentials.clone(),
        )
        .map_err(|e| e.to_string())?;
        let reconciler = Reconciler::new(settings.repo, Target::default(), settings.inventory);
        let mut reconciler = self.acting.act_as(reconciler).await?;
        // A fork's content never sees the Source's keys.
        if let (Some(decryption), false) = (&spec.decryption, request.from_fork) {
            let secret =
                DecryptionSecret::new(self.client.clone(), &namespace, &decryption.secret_ref.name);
            let keys = secret
                .read()
                .await
                .map_err(|e| tether_core::error_chain(&e))?;
            reconciler = reconciler.with_keys(Arc::new(keys));
        }
        let options = PlanOptions {
            dry_run_new: true,
            ..settings.settings.plan
        };
        reconciler
            .plan_clusters(options, &BTreeMap::new())
            .await
            .map_err(|error| match &error {
                ReconcileError::Invalid(_) => format!("the models have errors:\n{error}"),
                _ => tether_core::error_chain(&error),
            })
    }
}

/// The comment's report, the diff status's state and its description: failure when an
/// object would be refused or conflict, or a cluster cannot be planned.
fn judged(plans: &ClusterPlans) -> (String, CommitState, String) {
    let mut report = String::new();
    let mut failed = Vec::new();
    let mut counts = Vec::new();
    for cluster in &plans.clusters {
        if !report.is_empty() {
            report.push('\n');
        }
        match &cluster.planned {
            Ok(planned) => {
                let plan = &planned.plan;
                report.push_str(&tether_core::report::markdown(plan, remedy_words));
                let refused = plan.count(Action::Error);
                let conflicts = plan.count(Action::Conflict);
                if refused + conflicts > 0 {
                    failed.push(format!(
                        "{}: {refused} refused, {conflicts} in conflict",
                        cluster.cluster.display()
                    ));
                }
                counts.push(format!(
                    "{} to create, {} to update, {} to delete",
                    plan.count(Action::Create),
                    plan.count(Action::Update),
                    plan.count(Action::Delete)
                ));
            }
            Err(ReconcileError::Dormant(_)) => {}
            Err(error) => {
                let line = format!(
                    "cluster {}: not planned: {}",
                    cluster.cluster.display(),
                    tether_core::error_chain(error)
                );
                report.push_str(&format!("### {line}\n"));
                failed.push(line);
            }
        }
    }
    match failed.is_empty() {
        true => (report, CommitState::Success, counts.join("; ")),
        false => (report, CommitState::Failure, failed.join("; ")),
    }
}
