//! The views: the same values the JSON API (`/api/v1/…`) returns and the pages show.
//! Times are RFC 3339 text, made by the caller (this crate reads no clock).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The schema name of every JSON document of the API.
pub const API_SCHEMA: &str = "tether.dev/ui/v1";

/// A Source as the list shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceSummary {
    pub namespace: String,
    pub name: String,
    /// The repository (or OCI artifact) URL; none for a directory.
    pub url: Option<String>,
    pub reference: Option<String>,
    pub path: Option<String>,
    pub state: State,
    /// A kstatus-like reason (`Applied`, `Progressing`, `WaveBlocked`, `ObjectsFailed`, …).
    pub reason: String,
    /// What the last pass said (masked: no secret value is ever in it).
    pub message: String,
    /// The commit the Source wants: the last one it began to apply.
    pub wanted: Option<String>,
    /// The commit last applied without error.
    pub applied: Option<String>,
    /// When the last pass ended (RFC 3339).
    pub last_pass: Option<String>,
    /// How long the last pass took, in seconds.
    pub took_seconds: Option<f64>,
    /// What the Source is blocked on, as one line:
    /// `wave 2 → Deployment shop/web: 3/5 replicas available`.
    pub blocked_on: Option<String>,
    /// A link to the wanted commit on the Git host, when its URL is one tether knows
    /// how to link (GitHub, GitLab, Gitea/Forgejo, Bitbucket).
    pub commit_link: Option<String>,
    /// Objects planned and how many of them drifted, failed or conflict.
    pub counts: Counts,
    /// How each cluster fared, when the models name several.
    pub clusters: Vec<ClusterRow>,
    /// The digest of the deletions of a prune held beyond the deletion budget, which
    /// a person may approve (`Action::ApproveDeletions`).
    pub held_deletions: Option<String>,
}

/// A Source's state, in the order of attention: the first ones need a person.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// The last pass failed (the models are invalid, the cluster refused, …).
    Failed,
    /// Blocked: a wave waits for something that is not ready.
    Blocked,
    /// Objects drifted from the models and were not (yet) corrected.
    Drifted,
    /// A pass is applying a new commit.
    Progressing,
    /// No pass has finished yet.
    #[default]
    Unknown,
    /// Suspended by its spec: nothing is applied.
    Suspended,
    /// Everything of the wanted commit is applied.
    Ready,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Failed => "Failed",
            State::Blocked => "Blocked",
            State::Drifted => "Drifted",
            State::Progressing => "Progressing",
            State::Unknown => "Unknown",
            State::Suspended => "Suspended",
            State::Ready => "Ready",
        }
    }

    /// Whether a person should look.
    pub fn needs_attention(self) -> bool {
        matches!(self, State::Failed | State::Blocked | State::Drifted)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub objects: usize,
    pub drifted: usize,
    pub failed: usize,
    pub conflicts: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub name: String,
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

/// Sorts the list "needs attention" first (by state, then namespace and name).
pub fn attention_first(sources: &mut [SourceSummary]) {
    sources.sort_by(|a, b| (a.state, &a.namespace, &a.name).cmp(&(b.state, &b.namespace, &b.name)));
}

/// One Source, whole: what its page shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceDetail {
    pub summary: SourceSummary,
    /// The objects, grouped by the model that made them.
    pub models: Vec<ModelNode>,
    /// The last plan as the diff report (`tether diff -o markdown`), secrets masked.
    pub report_markdown: Option<String>,
    /// The dependency graph: which model waits for which, and the waves.
    pub graph: Graph,
    /// Kubernetes Events about the Source and its objects, newest first.
    pub events: Vec<EventRow>,
    /// Pods discovery committed to the repository, with the commit that recorded them.
    pub discovered: Vec<DiscoveredPod>,
    /// The hosts (Node models) of the Source.
    pub hosts: Vec<HostRow>,
    /// The image policies of the Source's models, as their last scan left them.
    pub images: Vec<ImagePolicyRow>,
    /// The last commit whose rollout failed, with `spec.revert`: the same entry as the
    /// Source's `status.lastRevert`.
    pub last_revert: Option<RevertRow>,
}

/// A model and the objects it made (objects no model made, e.g. plain manifests,
/// are under the file that holds them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelNode {
    /// `Kind/name` of the model, or the file of plain manifests.
    pub model: String,
    pub wave: Option<usize>,
    pub objects: Vec<ObjectRow>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRow {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// What the last plan did or would do: `create`, `update`, `unchanged`, `delete`, …
    pub action: String,
    /// Ready, as tether's readiness checks judge it (`None`: not known).
    pub ready: Option<bool>,
    /// The readiness's own words (`3/5 replicas available`).
    pub readiness: Option<String>,
    /// Someone changed fields tether applied.
    pub drift: Option<DriftRow>,
    /// Fields another manager owns, which tether would not take.
    pub conflicts: Vec<ConflictRow>,
    /// Why the object failed, when it did.
    pub error: Option<String>,
    /// The pods of a workload (Deployment, StatefulSet, DaemonSet, Job).
    pub pods: Vec<PodRow>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftRow {
    /// The field manager who made the change (`kubectl-patch`, `helm`, …).
    pub manager: String,
    /// When it was seen (RFC 3339).
    pub seen: String,
    /// When tether put it back, if it did.
    pub corrected: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConflictRow {
    pub manager: String,
    pub field: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub phase: String,
    pub ready: bool,
    pub restarts: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Graph {
    /// Each wave's models (0-based waves, in order).
    pub waves: Vec<Vec<String>>,
    /// `(model, what it waits for)`.
    pub edges: Vec<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    pub time: Option<String>,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    /// `Kind/namespace/name`.
    pub object: String,
    pub message: String,
    pub count: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredPod {
    pub namespace: String,
    pub name: String,
    /// The model file, relative to the repository.
    pub file: String,
    /// The commit that recorded it, and its link on the Git host.
    pub commit: Option<String>,
    pub commit_link: Option<String>,
}

/// A host: a Node model and its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostRow {
    pub name: String,
    /// The labels the model assigns (what the host endpoints change).
    pub labels: BTreeMap<String, String>,
    /// Locked: cordoned and drained, by the model.
    pub locked: bool,
    /// The node exists in the cluster and is Ready.
    pub ready: Option<bool>,
    /// The pods on the node.
    pub pods: Vec<PodRow>,
    /// The model's file, relative to the repository.
    pub file: Option<String>,
}

/// A commit whose rollout failed, and tether's revert of it (none when it kept it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevertRow {
    /// The revision whose rollout failed.
    pub failed: String,
    /// The revert's revision, when tether reverted it.
    pub revert: Option<String>,
    /// The objects that were not healthy in time, and what came of it.
    pub message: String,
    /// The image policies the revert holds until a person commits.
    pub held: Vec<String>,
    /// When (RFC 3339).
    pub time: String,
}

/// An image policy at its last scan: the same entry as the Source's `status.images`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyRow {
    pub policy: String,
    /// The image repository it follows.
    pub image: String,
    /// When the registry was last scanned (RFC 3339).
    pub last_scan: String,
    /// How many tags the repository listed (none for a digest policy, or when the
    /// registry was not reached).
    pub tags: Option<u64>,
    /// The best tag (or digest) the policy admits now.
    pub candidate: Option<String>,
    /// `Updated`, `Kept` or `Failed`.
    pub result: String,
    /// What was chosen and from what, why nothing was, or what went wrong.
    pub message: String,
    /// The policy's last update (`1.0.0 → 1.0.1 on main`) and when (RFC 3339).
    pub last_update: Option<String>,
    pub last_update_time: Option<String>,
}
