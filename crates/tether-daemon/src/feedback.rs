//! A Source's feedback: the commit statuses of its commits, one context per cluster
//! (`tether/<cluster>/<namespace>/<name>`), recorded in the Source's feedback outbox
//! and delivered to the Git host on a task of its own, so that a host that is down
//! or slow never slows a pass; a restart delivers what was left.
//!
//! The states follow the pass: `pending` when a commit is taken up, `success` once
//! every wave is applied and every object ready (a [`Rollout`] waited for beside the
//! loop), `failure` when the models are invalid, an object is refused, a wave stays
//! blocked until its timeout, or the rollout does not finish in time; `error` for a
//! pending commit another replaced before it was ready. The core's `Ledger` decides
//! what is news, under the outbox's lock: one request per (commit, context, state).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::Resource;
use kube::api::Api;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

use crate::loop_views::blocked_on;
use crate::source_status::objects_failed;
use tether_api::source_spec::{FeedbackSpec, NotificationSpec, ReceiverType, Source};
use tether_core::feedback::notice::{Admission, Gate, GatePolicy, Notice, NoticeKind};
use tether_core::feedback::status::{self, Ledger};
use tether_core::feedback::{CommitState, CommitStatus, HostedRepository, PullRequestComment};
use tether_core::k8s::ObjectKey;
use tether_engine::events::sink::KafkaTopic;
use tether_engine::feedback::githost::GitHostClient;
use tether_engine::feedback::notify::Receiver;
use tether_engine::feedback::{
    Feedback, GIT_HOST_RECIPIENT, GitHostRecipient, NamedReceiver, Said,
};
use tether_engine::outbox::{Outbox, Recipient, Record, blocking, spawn_delivery};
use tether_engine::reconcile::{
    ApplyReport, Blocker, DEFAULT_WAVE_TIMEOUT, ObjectFailure, Outcome, Rollout,
};

/// How long a request to the Git host may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a Source's feedback cannot start (said in its status; the Source is applied
/// all the same).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FeedbackError {
    #[error("spec.feedback: cannot read the Secret {namespace}/{name}: {message}")]
    Secret {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("spec.feedback: the Secret {namespace}/{name} has no `{key}`")]
    MissingKey {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("spec.feedback: {0}")]
    Repository(#[from] tether_core::feedback::HostedRepositoryError),
    #[error("spec.feedback: {0}")]
    Delivery(#[from] tether_engine::feedback::DeliveryError),
    #[error("spec.feedback: {0}")]
    Outbox(#[from] tether_engine::outbox::OutboxError),
    #[error("spec.feedback.exclude: {0}")]
    Exclusion(String),
    #[error("spec.feedback.notifications[]: a {0} receiver needs {1}")]
    Incomplete(&'static str, &'static str),
}

/// What one cluster's part of a pass says of its commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Applied: ready once its rollout is.
    Applied,
    /// Not applied, and retrying soon may bring it: still pending.
    Retrying,
    /// Not applied, and it will not be by retrying: failure, with why.
    Failed(String),
}

/// A Source's feedback, while its loop runs.
pub(crate) struct SourceFeedback {
    /// `namespace/name`.
    source: String,
    /// The cluster this daemon runs in (`--cluster-name`, else `default`): the context
    /// of a Source's part that names no KubernetesService.
    own_cluster: String,
    outbox: Arc<Outbox<Said>>,
    /// The rollout each context waits for; a newer commit's replaces it.
    rollouts: Mutex<HashMap<String, JoinHandle<()>>>,
    /// The contexts of the last commit taken up: a commit that fails before it is
    /// planned (invalid models) fails in each.
    contexts: Mutex<Vec<String>>,
    rollout_timeout: Duration,
    /// Pull requests are planned and commented on.
    pull_requests: bool,
    /// Which notices are sent (none without a receiver).
    gate: Option<Mutex<Gate>>,
    stop: CancellationToken,
    deliveries: Vec<JoinHandle<()>>,
}

impl Drop for SourceFeedback {
    fn drop(&mut self) {
        self.stop.cancel();
        for rollout in self.lock_rollouts().values() {
            rollout.abort();
        }
        // Deliveries finish what they send (the driver's grace), then stop; what is
        // left stays in the outbox for the next start.
        let _ = &self.deliveries;
    }
}

impl SourceFeedback {
    /// The feedback `source` asks for, with its outbox under `dir`; `None` when it
    /// asks for none.
    pub(crate) async fn open(
        client: &Client,
        source: &Source,
        dir: &Path,
        own_cluster: Option<&str>,
    ) -> Result<Option<Arc<Self>>, FeedbackError> {
        let Some(spec) = &source.spec.feedback else {
            return Ok(None);
        };
        let namespace = source.namespace().unwrap_or_default();
        let host = match (&spec.secret_ref, spec.commit_statuses || spec.pull_requests) {
            (Some(secret), true) => {
                Some(git_host(client, &namespace, &secret.name, source, spec).await?)
            }
            _ => None,
        };
        let receivers = receivers(client, source, spec).await?;
        let gate = match spec.notifications.is_empty() {
            true => None,
            false => Some(Mutex::new(Gate::new(gate_policy(spec)?))),
        };
        let recipients: Vec<String> = host
            .as_ref()
            .map(|_| GIT_HOST_RECIPIENT.to_string())
            .into_iter()
            .chain(receivers.iter().map(Receivers::name))
            .collect();
        let dir = dir.to_path_buf();
        let outbox = Arc::new(blocking(move || Outbox::<Said>::open(&dir, &recipients)).await?);
        if outbox.backlog() > 0 {
            tracing::info!(
                backlog = outbox.backlog(),
                "delivering feedback left from before"
            );
        }
        let stop = CancellationToken::new();
        let pull_requests = host.is_some() && spec.pull_requests;
        let mut deliveries = Vec::new();
        if let Some(host) = host {
            let delivery = spawn_delivery(outbox.clone(), host, stop.clone(), "feedback delivery");
            deliveries.push(delivery);
        }
        for receiver in receivers {
            deliveries.push(receiver.spawn(outbox.clone(), stop.clone()));
        }
        Ok(Some(Arc::new(SourceFeedback {
            source: format!("{namespace}/{}", source.name_any()),
            own_cluster: own_cluster.unwrap_or("default").to_string(),
            outbox,
            rollouts: Mutex::new(HashMap::new()),
            contexts: Mutex::new(Vec::new()),
            rollout_timeout: rollout_timeout(source),
            pull_requests,
            gate,
            stop,
            deliveries,
        })))
    }

    fn lock_rollouts(&self) -> std::sync::MutexGuard<'_, HashMap<String, JoinHandle<()>>> {
        self.rollouts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The context of the Source's part on `cluster` (its KubernetesService; `None`:
    /// the daemon's own cluster).
    pub(crate) fn context(&self, cluster: Option<&str>) -> String {
        status::context(cluster.unwrap_or(&self.own_cluster), &self.source)
    }

    /// `commit` is taken up on `clusters`: pending in each; a commit still pending
    /// there is superseded (its rollout no longer waited for).
    pub(crate) async fn taken_up(&self, commit: &str, clusters: &[Option<&str>]) {
        let contexts: Vec<String> = clusters.iter().map(|c| self.context(*c)).collect();
        *self.contexts.lock().unwrap_or_else(|e| e.into_inner()) = contexts.clone();
        let commit = commit.to_string();
        let short = short(&commit).to_string();
        self.record(move |ledger| {
            let mut statuses = Vec::new();
            for context in &contexts {
                for older in ledger.pending(context).into_iter().filter(|c| *c != commit) {
                    statuses.push(CommitStatus::new(
                        older,
                        context,
                        CommitState::Error,
                        &format!("superseded by {short} before it was ready"),
                    ));
                }
                statuses.push(CommitStatus::new(
                    &commit,
                    context,
                    CommitState::Pending,
                    &format!("applying {short}"),
                ));
            }
            statuses
        })
        .await;
        let mut rollouts = self.lock_rollouts();
        for context in clusters.iter().map(|c| self.context(*c)) {
            if let Some(waiting) = rollouts.remove(&context) {
                waiting.abort();
            }
        }
    }

    /// What a pass did with `commit` on `cluster`.
    pub(crate) async fn concluded(
        self: &Arc<Self>,
        commit: &str,
        cluster: Option<&str>,
        verdict: Verdict,
        rollout: Option<Rollout>,
    ) {
        let context = self.context(cluster);
        let said = self.outbox.state(|said| said.ledger.said(commit, &context));
        if said.is_some_and(CommitState::is_final) {
            // Said already (before a restart, or by an earlier pass of the commit).
            return;
        }
        match (verdict, rollout) {
            (Verdict::Applied, Some(rollout)) => self.await_rollout(commit, context, rollout),
            (Verdict::Applied, None) => {
                self.say(commit, &context, CommitState::Success, "applied")
                    .await;
            }
            (Verdict::Retrying, _) => {}
            (Verdict::Failed(why), _) => {
                self.say(commit, &context, CommitState::Failure, &why).await;
            }
        }
    }

    /// The rollout of `commit` on the own cluster ended, as the Source's revert waited
    /// for it (`spec.revert`, [`crate::revert`]): success, or failure naming what was
    /// not ready (`failing`) and what became of the revert (`after`).
    pub(crate) async fn rollout_ended(
        &self,
        commit: &str,
        failing: Option<&[(ObjectKey, String)]>,
        after: Option<&str>,
    ) {
        let context = self.context(None);
        let (state, description) = rollout_end(failing, after);
        self.say(commit, &context, state, &description).await;
    }

    /// `commit` failed before it was planned (its models are invalid, its history
    /// refused): pending then failure, in each context of the last commit (the own
    /// cluster's, for the first).
    pub(crate) async fn failed_early(&self, commit: &str, why: &str) {
        let mut contexts = self
            .contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if contexts.is_empty() {
            contexts.push(self.context(None));
        }
        let (commit, why) = (commit.to_string(), why.to_string());
        let short = short(&commit).to_string();
        self.record(move |_| {
            contexts
                .iter()
                .flat_map(|context| {
                    [
                        CommitStatus::new(
                            &commit,
                            context,
                            CommitState::Pending,
                            &format!("applying {short}"),
                        ),
                        CommitStatus::new(&commit, context, CommitState::Failure, &why),
                    ]
                })
                .collect()
        })
        .await;
    }

    /// Waits beside the loop for `rollout`, then says success or failure (unless a
    /// newer commit took the context up meanwhile: that aborts the wait).
    fn await_rollout(self: &Arc<Self>, commit: &str, context: String, rollout: Rollout) {
        let feedback = Arc::downgrade(self);
        let timeout = self.rollout_timeout;
        let commit = commit.to_string();
        let waited_for = context.clone();
        let waiting = tokio::spawn(async move {
            let result = rollout.wait(timeout).await;
            let Some(feedback) = feedback.upgrade() else {
                return;
            };
            let (state, description) = rollout_verdict(&result);
            feedback
                .say(&commit, &waited_for, state, &description)
                .await;
        });
        if let Some(replaced) = self.lock_rollouts().insert(context, waiting) {
            replaced.abort();
        }
    }

    /// The context of a pull request's plan on this daemon's cluster.
    fn diff_context(&self) -> String {
        status::diff_context(&self.own_cluster, &self.source)
    }

    /// A pull request's head is being planned.
    pub(crate) async fn planning(&self, head: &str) {
        let context = self.diff_context();
        self.say(head, &context, CommitState::Pending, "planning")
            .await;
    }

    /// A pull request's plan: its comment (one per Source and cluster, edited on each
    /// push) and the head's diff status.
    pub(crate) async fn pull_request(
        &self,
        number: u64,
        head: &str,
        report: &str,
        state: CommitState,
        description: &str,
    ) {
        let comment = PullRequestComment::new(number, &self.own_cluster, &self.source, report);
        let status = CommitStatus::new(head, &self.diff_context(), state, description);
        let outbox = self.outbox.clone();
        let recorded = blocking(move || {
            outbox.record(|said| {
                let mut events = vec![Feedback::Comment(comment)];
                if said.ledger.admit(&status) {
                    events.push(Feedback::Status(status));
                }
                events
            })
        })
        .await;
        if let Err(error) = recorded {
            tracing::error!(error = %tether_core::error_chain(&error), "cannot record the pull request's plan");
        }
    }

    /// Whether pull requests are planned (a Git host to comment on, and the Source
    /// asks for it).
    pub(crate) fn plans_pull_requests(&self) -> bool {
        self.pull_requests
    }

    /// Records the notices a pass made that the gate lets through (excluded kinds,
    /// the same news again, and notices over the rate are not sent; the next one sent
    /// says how many the rate held back).
    pub(crate) async fn notify(&self, drafts: Vec<Draft>, revision: Option<&str>) {
        let Some(gate) = &self.gate else {
            return;
        };
        let time = crate::clock::now();
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let notices: Vec<Feedback> = {
            let mut gate = gate.lock().unwrap_or_else(|e| e.into_inner());
            drafts
                .into_iter()
                .filter_map(|draft| {
                    let mut notice = Notice::new(
                        draft.kind,
                        &self.source,
                        &self.own_cluster,
                        &time,
                        draft.message,
                    );
                    if let Some(revision) = revision {
                        notice = notice.with_revision(revision);
                    }
                    if let Some(subject) = draft.subject {
                        notice = notice.with_subject(subject);
                    }
                    if let Some(reason) = draft.reason {
                        notice = notice.with_reason(reason);
                    }
                    match gate.admit(&notice, now_secs) {
                        Admission::Send { suppressed: 0 } => Some(notice),
                        Admission::Send { suppressed } => {
                            notice.message = format!(
                                "{} ({suppressed} earlier notices held back by the rate limit)",
                                notice.message
                            );
                            Some(notice)
                        }
                        Admission::Duplicate | Admission::Excluded | Admission::Limited => None,
                    }
                })
                .map(Feedback::Notice)
                .collect()
        };
        if notices.is_empty() {
            return;
        }
        let outbox = self.outbox.clone();
        if let Err(error) = blocking(move || outbox.record(|_| notices)).await {
            tracing::error!(error = %tether_core::error_chain(&error), "cannot record the notices");
        }
    }

    async fn say(&self, commit: &str, context: &str, state: CommitState, description: &str) {
        let status = CommitStatus::new(commit, context, state, description);
        self.record(move |_| vec![status]).await;
    }

    /// Records the statuses `decide` makes that the ledger admits, off the runtime.
    async fn record(&self, decide: impl FnOnce(&Ledger) -> Vec<CommitStatus> + Send + 'static) {
        let outbox = self.outbox.clone();
        let recorded = blocking(move || {
            outbox.record(|said| {
                decide(&said.ledger)
                    .into_iter()
                    .filter(|status| said.ledger.admit(status))
                    .map(Feedback::Status)
                    .collect()
            })
        })
        .await;
        if let Err(error) = recorded {
            tracing::error!(error = %tether_core::error_chain(&error), "cannot record the commit status");
        }
    }
}

/// How long a Source's commit's rollout may take: its `spec.timeout`, else what a
/// wave may.
pub(crate) fn rollout_timeout(source: &Source) -> Duration {
    source
        .spec
        .timeout()
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_WAVE_TIMEOUT)
}

/// What a rollout's end says: success, or failure with what was not ready.
fn rollout_verdict(result: &Result<(), Vec<Blocker>>) -> (CommitState, String) {
    let failing: Option<Vec<(ObjectKey, String)>> = result.as_ref().err().map(|blockers| {
        blockers
            .iter()
            .map(|b| (b.key.clone(), b.state.clone()))
            .collect()
    });
    rollout_end(failing.as_deref(), None)
}

/// Success, or failure naming what was not ready, and what came of it (`after`: a
/// revert).
fn rollout_end(
    failing: Option<&[(ObjectKey, String)]>,
    after: Option<&str>,
) -> (CommitState, String) {
    let Some(failing) = failing else {
        return (CommitState::Success, "applied and ready".to_string());
    };
    let not_ready = format!(
        "not ready: {}",
        blocked_rollout(failing.iter().map(|(key, state)| (key, state.as_str())))
    );
    let description = match after {
        Some(after) => format!("{not_ready}; {after}"),
        None => not_ready,
    };
    (CommitState::Failure, description)
}

/// `Deployment shop/web: 3/5 replicas available (and 2 more)`.
fn blocked_rollout<'a>(
    blockers: impl ExactSizeIterator<Item = (&'a tether_core::k8s::ObjectKey, &'a str)>,
) -> String {
    let said = blocked_on(0, blockers);
    said.strip_prefix("wave 1 → ").unwrap_or(&said).to_string()
}

/// A commit's first 7 characters, as hosts show them.
fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

/// Where a Source's notices are delivered: a receiver of the engine's, or the
/// Source's own Events.
enum Receivers {
    Sent(NamedReceiver),
    OnSource(Box<SourceEvents>),
}

impl Receivers {
    fn name(&self) -> String {
        match self {
            Receivers::Sent(named) => named.name.clone(),
            Receivers::OnSource(events) => events.name.clone(),
        }
    }

    fn spawn(self, outbox: Arc<Outbox<Said>>, stop: CancellationToken) -> JoinHandle<()> {
        match self {
            Receivers::Sent(named) => spawn_delivery(outbox, named, stop, "notice delivery"),
            Receivers::OnSource(events) => spawn_delivery(outbox, *events, stop, "notice delivery"),
        }
    }
}

/// The receivers of `spec.notifications`, each named by its place in the list (its
/// delivery position is kept under that name).
async fn receivers(
    client: &Client,
    source: &Source,
    spec: &FeedbackSpec,
) -> Result<Vec<Receivers>, FeedbackError> {
    let namespace = source.namespace().unwrap_or_default();
    let mut receivers = Vec::new();
    for (index, notification) in spec.notifications.iter().enumerate() {
        let name = format!("notify-{index}-{}", notification.receiver.name());
        receivers.push(match notification.receiver {
            ReceiverType::KubernetesEvents => Receivers::OnSource(Box::new(SourceEvents {
                name,
                recorder: Recorder::new(client.clone(), crate::shared::event_reporter()),
                regarding: source.object_ref(&()),
            })),
            _ => Receivers::Sent(NamedReceiver {
                name,
                receiver: receiver(client, &namespace, notification).await?,
            }),
        });
    }
    Ok(receivers)
}

/// Which notices `spec` lets through, and how many a minute.
fn gate_policy(spec: &FeedbackSpec) -> Result<GatePolicy, FeedbackError> {
    let exclude = spec
        .exclude
        .iter()
        .map(|name| name.parse::<NoticeKind>())
        .collect::<Result<_, _>>()
        .map_err(|e| FeedbackError::Exclusion(e.to_string()))?;
    let defaults = GatePolicy::default();
    Ok(GatePolicy {
        exclude,
        per_minute: spec.notices_per_minute.unwrap_or(defaults.per_minute),
        ..defaults
    })
}

/// A Secret's value, as text.
async fn secret_values(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, k8s_openapi::ByteString>, FeedbackError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let found = secrets.get(name).await.map_err(|e| FeedbackError::Secret {
        namespace: namespace.to_string(),
        name: name.to_string(),
        message: e.to_string(),
    })?;
    Ok(found.data.unwrap_or_default())
}

/// A notification receiver, with the URL and key of its Secret.
async fn receiver(
    client: &Client,
    namespace: &str,
    spec: &NotificationSpec,
) -> Result<Receiver, FeedbackError> {
    let kind = spec.receiver.name();
    let values = match &spec.secret_ref {
        Some(secret) => secret_values(client, namespace, &secret.name).await?,
        None => Default::default(),
    };
    let text = |key: &str| {
        values
            .get(key)
            .map(|v| Zeroizing::new(String::from_utf8_lossy(&v.0).trim().to_string()))
    };
    let roots = values.get("ca.crt").map(|c| c.0.clone());
    Ok(match spec.receiver {
        ReceiverType::Cloudevents => Receiver::webhook(
            text("url").ok_or(FeedbackError::Incomplete(kind, "a Secret with `url`"))?,
            text("hmacKey").map(|k| Zeroizing::new(k.as_bytes().to_vec())),
            roots.as_deref(),
        )?,
        ReceiverType::Slack => Receiver::slack(
            text("url").ok_or(FeedbackError::Incomplete(kind, "a Secret with `url`"))?,
            roots.as_deref(),
        )?,
        ReceiverType::Kafka => {
            if spec.brokers.is_empty() {
                return Err(FeedbackError::Incomplete(kind, "brokers"));
            }
            Receiver::Kafka(KafkaTopic::new(
                spec.brokers.clone(),
                spec.topic
                    .clone()
                    .unwrap_or_else(|| "tether.notices".into()),
            ))
        }
        ReceiverType::KubernetesEvents => {
            return Err(FeedbackError::Incomplete(
                kind,
                "no receiver: it is the Source's",
            ));
        }
    })
}

/// A notice's kind as an Event's reason (CamelCase, as Kubernetes' reasons are).
fn event_reason(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Applied => "Applied",
        NoticeKind::Failed => "Failed",
        NoticeKind::Stalled => "Stalled",
        NoticeKind::DriftCorrected => "DriftCorrected",
        NoticeKind::DriftReported => "DriftReported",
        NoticeKind::Pruned => "Pruned",
        NoticeKind::WaveBlocked => "WaveBlocked",
        NoticeKind::HostRemoved => "HostRemoved",
        NoticeKind::Reverted => "Reverted",
    }
}

/// Notices as Events on the Source (`kubectl describe source`): Warning for what
/// needs a person, Normal for the rest.
struct SourceEvents {
    name: String,
    recorder: Recorder,
    regarding: ObjectReference,
}

impl Recipient<Feedback> for SourceEvents {
    type Error = kube::Error;

    fn name(&self) -> String {
        self.name.clone()
    }

    async fn deliver(&mut self, records: &[Record<Feedback>]) -> Result<(), kube::Error> {
        for record in records {
            let Feedback::Notice(notice) = &record.event else {
                continue;
            };
            let type_ = match notice.kind {
                NoticeKind::Applied | NoticeKind::DriftCorrected | NoticeKind::Pruned => {
                    EventType::Normal
                }
                _ => EventType::Warning,
            };
            let event = KubeEvent {
                type_,
                reason: event_reason(notice.kind).into(),
                note: Some(notice.message.clone()),
                action: "Reconcile".into(),
                secondary: None,
            };
            self.recorder.publish(&event, &self.regarding).await?;
        }
        Ok(())
    }
}

/// The Git host's client, with the token (and CA) of the Source's Secret.
async fn git_host(
    client: &Client,
    namespace: &str,
    secret: &str,
    source: &Source,
    spec: &FeedbackSpec,
) -> Result<GitHostRecipient, FeedbackError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let found = secrets
        .get(secret)
        .await
        .map_err(|e| FeedbackError::Secret {
            namespace: namespace.to_string(),
            name: secret.to_string(),
            message: e.to_string(),
        })?;
    let data = found.data.unwrap_or_default();
    let token = data
        .get("token")
        .map(|t| Zeroizing::new(String::from_utf8_lossy(&t.0).trim().to_string()))
        .ok_or_else(|| FeedbackError::MissingKey {
            namespace: namespace.to_string(),
            name: secret.to_string(),
            key: "token",
        })?;
    let repository = HostedRepository::from_url(
        &source.spec.url,
        spec.provider,
        spec.api_url.as_deref(),
        spec.repository.as_deref(),
    )?;
    let roots = data.get("ca.crt").map(|c| c.0.as_slice());
    let host = repository.host;
    let client = GitHostClient::new(repository, token, roots, REQUEST_TIMEOUT)?;
    Ok(GitHostRecipient::new(client, host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::k8s::ObjectKey;

    #[test]
    fn a_rollout_that_ends_names_what_was_not_ready() {
        assert_eq!(
            rollout_verdict(&Ok(())),
            (CommitState::Success, "applied and ready".to_string())
        );
        let blocker = |name: &str, state: &str| Blocker {
            key: ObjectKey::new("apps/v1", "Deployment", Some("shop"), name),
            state: state.into(),
            failed: false,
            external: false,
            needed_by: Vec::new(),
        };
        let (state, description) = rollout_verdict(&Err(vec![
            blocker("web", "1/3 replicas available"),
            blocker("api", "0/1 replicas available"),
        ]));
        assert_eq!(state, CommitState::Failure);
        assert_eq!(
            description,
            "not ready: Deployment shop/web: 1/3 replicas available (and 1 more)"
        );
        // With spec.revert, the revert says what came of it.
        let failing = [(blocker("web", "").key, "1/3 replicas available".to_string())];
        assert_eq!(
            rollout_end(Some(&failing), Some("reverted in 8d0e4c1f2a")),
            (
                CommitState::Failure,
                "not ready: Deployment shop/web: 1/3 replicas available; reverted in 8d0e4c1f2a"
                    .to_string()
            )
        );
    }
}

/// A notice a pass makes, before it is dated and named for the Source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Draft {
    pub kind: NoticeKind,
    pub subject: Option<String>,
    pub reason: Option<String>,
    pub message: String,
}

impl Draft {
    pub(crate) fn new(kind: NoticeKind, message: String) -> Self {
        Draft {
            kind,
            subject: None,
            reason: None,
            message,
        }
    }

    pub(crate) fn about(mut self, subject: impl ToString) -> Self {
        self.subject = Some(subject.to_string());
        self
    }

    pub(crate) fn because(mut self, reason: impl ToString) -> Self {
        self.reason = Some(reason.to_string());
        self
    }
}

/// The notices of what a pass did (pure): a revision applied that changed the
/// cluster, the first failed object, drift corrected or reported per object, what was
/// pruned (a Node's removal as a host's), a wave left blocked.
pub(crate) fn notices_of_apply(
    report: &ApplyReport,
    corrected: &[(ObjectKey, String)],
    reported: &[ObjectKey],
) -> Vec<Draft> {
    let mut drafts = Vec::new();
    let changed = report.created() + report.configured() + report.pruned();
    if report.succeeded() && changed > 0 {
        drafts.push(Draft::new(
            NoticeKind::Applied,
            format!(
                "applied: {} created, {} configured, {} pruned",
                report.created(),
                report.configured(),
                report.pruned()
            ),
        ));
    }
    if let Some((key, failure)) = report.failures().next() {
        drafts.push(
            Draft::new(NoticeKind::Failed, objects_failed(report))
                .about(key)
                .because(match failure {
                    ObjectFailure::Forbidden { .. } => "Forbidden",
                    _ => "ObjectsFailed",
                }),
        );
    }
    for (key, manager) in corrected {
        drafts.push(
            Draft::new(
                NoticeKind::DriftCorrected,
                format!("{key}: changed by {manager}, set back to the models"),
            )
            .about(key)
            .because(manager),
        );
    }
    for key in reported {
        drafts.push(
            Draft::new(
                NoticeKind::DriftReported,
                format!("{key} differs from the models (the Source reports drift only)"),
            )
            .about(key),
        );
    }
    let pruned: Vec<&ObjectKey> = report
        .objects
        .iter()
        .filter(|o| o.outcome == Outcome::Pruned)
        .map(|o| &o.key)
        .collect();
    if let Some(first) = pruned.first() {
        let more = match pruned.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        drafts.push(Draft::new(NoticeKind::Pruned, format!("pruned {first}{more}")).about(first));
    }
    for host in pruned.iter().filter(|k| k.kind == "Node") {
        drafts.push(
            Draft::new(
                NoticeKind::HostRemoved,
                format!("host {} removed", host.name),
            )
            .about(host),
        );
    }
    if let Some(blocked) = &report.blocked {
        let blockers = blocked.blockers.iter().map(|b| (&b.key, b.state.as_str()));
        drafts.push(
            Draft::new(
                NoticeKind::WaveBlocked,
                format!(
                    "blocked: {}; {} objects not applied",
                    blocked_on(blocked.wave, blockers),
                    blocked.not_applied
                ),
            )
            .because("WaveBlocked"),
        );
    }
    drafts
}
