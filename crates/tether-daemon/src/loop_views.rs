//! What the page knows of each source loop of this process: the loops tell
//! [`Views`] what each pass did (the same [`PassResult`] the Source's status is made
//! from), and the page and the API read it. Every change is also sent to the live
//! stream (`/api/v1/stream`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::Client;
use tether_core::k8s::ObjectKey;
use tether_core::plan::Plan;
use tether_core::workflow::Workflow;
use tether_engine::discovery::Destination;
use tether_engine::reconcile::{CheckedModels, Outcome};
use tether_sops::Keyring;
use tether_web::{ClusterRow, Counts, DriftRow, ImagePolicyRow, RevertRow, SourceSummary, State};
use tokio::sync::{broadcast, mpsc};

use crate::source_status::{PassResult, next_status};
use crate::switchboard::Trigger;
use tether_api::source_spec::SourceStatus;

/// How many changes the live stream holds for a slow reader before it skips to the
/// newest (a reader that lagged reloads the list).
const STREAM_BACKLOG: usize = 1024;

/// The sources of this process, as the page shows them.
pub(crate) struct Views {
    shown: Mutex<BTreeMap<SourceName, Entry>>,
    stream: broadcast::Sender<Arc<SourceSummary>>,
}

/// A Source's namespace and name (for a source from flags: its inventory's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SourceName {
    pub namespace: String,
    pub name: String,
}

/// How the page acts for a source: where its commits go, how it is nudged, and
/// the client that reads (and recreates pods) as the source's identity.
#[derive(Clone)]
pub(crate) struct Handle {
    pub trigger: mpsc::Sender<Trigger>,
    /// Where day-2 commits go; none for a source whose repository cannot be
    /// written (an OCI artifact).
    pub writeback: Option<Writeback>,
    /// The source's URL and ref, as the page shows them.
    pub url: Option<String>,
    pub reference: Option<String>,
    pub path: Option<String>,
    /// What its attestations are checked with, when it attests (`spec.attestation`).
    pub attestation: Option<Attesting>,
}

/// A Source's attestations, as the page's API checks them: the inventory they attest,
/// and the Secret of the key that signs them (its public half checks them).
#[derive(Clone)]
pub(crate) struct Attesting {
    pub inventory: tether_core::ownership::Inventory,
    pub secret: Arc<crate::attestation::AttestationSecret>,
}

/// How a source loop is shown on the page.
#[derive(Clone, Debug)]
pub(crate) struct Shown {
    pub name: SourceName,
    /// Where the page's day-2 actions commit.
    pub writeback: Option<Writeback>,
    /// The models' directory in the repository.
    pub path: Option<String>,
    /// The last failed rollout the Source's status records (`spec.revert`): shown
    /// from the start, also after a restart.
    pub last_revert: Option<RevertRow>,
}

/// Where and how the page's commits go.
#[derive(Clone, Debug)]
pub(crate) struct Writeback {
    pub destination: Destination,
    /// The branch committed to (default: the remote's default, or the checkout's).
    pub branch: Option<String>,
    /// Commit to a new branch per action instead (a pull request to merge).
    pub propose: bool,
}

struct Entry {
    handle: Handle,
    status: SourceStatus,
    summary: SourceSummary,
    last: Option<Arc<LastPlan>>,
    /// Drift seen by the watches, by object, until the next plan says otherwise.
    drift: BTreeMap<ObjectKey, DriftRow>,
    /// Why objects failed in the last apply, by object.
    failed: BTreeMap<ObjectKey, String>,
    /// What the apply of the last plan did to each object (`configured`, …).
    applied: BTreeMap<ObjectKey, &'static str>,
    client: Option<Client>,
    keys: Arc<Keyring>,
    /// The image policies at their last scan.
    images: Vec<ImagePolicyRow>,
    /// The last failed rollout, with `spec.revert`.
    last_revert: Option<RevertRow>,
}

/// The last plan of a source's own cluster, and what the page makes of it.
pub(crate) struct LastPlan {
    pub plan: Arc<Plan>,
    pub workflow: Workflow,
    pub models: Arc<CheckedModels>,
}

/// One source, as a request reads it.
pub(crate) struct Snapshot {
    pub summary: SourceSummary,
    pub handle: Handle,
    pub last: Option<Arc<LastPlan>>,
    pub drift: BTreeMap<ObjectKey, DriftRow>,
    pub failed: BTreeMap<ObjectKey, String>,
    pub applied: BTreeMap<ObjectKey, &'static str>,
    pub client: Option<Client>,
    pub keys: Arc<Keyring>,
    pub images: Vec<ImagePolicyRow>,
    pub last_revert: Option<RevertRow>,
}

impl Default for Views {
    fn default() -> Self {
        Views {
            shown: Mutex::new(BTreeMap::new()),
            stream: broadcast::channel(STREAM_BACKLOG).0,
        }
    }
}

impl Views {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<SourceName, Entry>> {
        // A panic while holding the lock leaves plain data behind: go on with it.
        self.shown.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A source loop started (or started again, with a new handle).
    pub(crate) fn register(&self, name: &SourceName, handle: Handle) {
        let summary = SourceSummary {
            namespace: name.namespace.clone(),
            name: name.name.clone(),
            url: handle.url.clone(),
            reference: handle.reference.clone(),
            path: handle.path.clone(),
            ..SourceSummary::default()
        };
        let shown = Entry {
            handle,
            status: SourceStatus::default(),
            summary: summary.clone(),
            last: None,
            drift: BTreeMap::new(),
            failed: BTreeMap::new(),
            applied: BTreeMap::new(),
            client: None,
            keys: Arc::default(),
            images: Vec::new(),
            last_revert: None,
        };
        self.lock().insert(name.clone(), shown);
        let _ = self.stream.send(Arc::new(summary));
    }

    pub(crate) fn unregister(&self, name: &SourceName) {
        self.lock().remove(name);
    }

    /// Every source, "needs attention" first.
    pub(crate) fn list(&self) -> Vec<SourceSummary> {
        let mut list: Vec<SourceSummary> =
            self.lock().values().map(|s| s.summary.clone()).collect();
        tether_web::attention_first(&mut list);
        list
    }

    pub(crate) fn get(&self, name: &SourceName) -> Option<Snapshot> {
        self.lock().get(name).map(|shown| Snapshot {
            summary: shown.summary.clone(),
            handle: shown.handle.clone(),
            last: shown.last.clone(),
            drift: shown.drift.clone(),
            failed: shown.failed.clone(),
            applied: shown.applied.clone(),
            client: shown.client.clone(),
            keys: shown.keys.clone(),
            images: shown.images.clone(),
            last_revert: shown.last_revert.clone(),
        })
    }

    /// The live stream: each changed summary.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<SourceSummary>> {
        self.stream.subscribe()
    }

    /// Changes `name`'s entry, then remakes its summary and sends it to the stream.
    fn change(&self, name: &SourceName, change: impl FnOnce(&mut Entry)) {
        let summary = {
            let mut shown = self.lock();
            let Some(entry) = shown.get_mut(name) else {
                return;
            };
            change(entry);
            entry.summary = summary_of(entry);
            entry.summary.clone()
        };
        let _ = self.stream.send(Arc::new(summary));
    }

    /// A pass's result, as the status records it (at `now`, RFC 3339), and how long
    /// the pass took.
    pub(crate) fn record(
        &self,
        name: &SourceName,
        result: &PassResult<'_>,
        now: &str,
        took: Option<f64>,
    ) {
        // What the Source is blocked on once the pass ended (none: it ended blocked
        // on nothing); a pass in progress keeps what its waiting waves said.
        let ended_blocked_on = match result {
            PassResult::Progressing { .. } => None,
            PassResult::ObjectsFailed { report, .. } => {
                Some(report.blocked.as_ref().map(|blocked| {
                    let blockers = blocked.blockers.iter().map(|b| (&b.key, b.state.as_str()));
                    blocked_on(blocked.wave, blockers)
                }))
            }
            _ => Some(None),
        };
        let report = match result {
            PassResult::ObjectsFailed { report, .. } | PassResult::Applied { report, .. } => {
                Some(report)
            }
            _ => None,
        };
        let failed = report.map(|report| {
            report
                .failures()
                .map(|(key, failure)| (key.clone(), failure.to_string()))
                .collect::<BTreeMap<_, _>>()
        });
        // A quiet pass applies nothing: what the last apply did stays.
        let applied = report.filter(|r| !r.objects.is_empty()).map(|report| {
            report
                .objects
                .iter()
                .map(|o| (o.key.clone(), outcome_word(&o.outcome)))
                .collect::<BTreeMap<_, _>>()
        });
        self.change(name, |shown| {
            shown.status = next_status(&shown.status, None, result, now);
            if !matches!(result, PassResult::Progressing { .. }) {
                shown.summary.last_pass = Some(now.to_string());
                shown.summary.took_seconds = took;
            }
            if let Some(blocked_on) = ended_blocked_on {
                shown.summary.blocked_on = blocked_on;
            }
            if let Some(report) = report {
                shown.summary.held_deletions = report.prune_held.as_ref().map(|h| h.digest.clone());
            }
            if let Some(failed) = failed {
                shown.failed = failed;
            }
            if let Some(applied) = applied {
                shown.applied = applied;
            }
        });
    }

    /// The plan a full pass made of the source's own cluster, and the client and keys
    /// it was made with.
    pub(crate) fn planned(
        &self,
        name: &SourceName,
        last: LastPlan,
        client: Client,
        keys: Arc<Keyring>,
    ) {
        self.change(name, |shown| {
            // What the plan now says of each object replaces what the watches said.
            shown.drift.retain(|key, drift| {
                drift.corrected.is_none()
                    && last.plan.changes.iter().any(|c| c.key == *key && c.drift)
            });
            shown.last = Some(Arc::new(last));
            shown.applied.clear();
            shown.client = Some(client);
            shown.keys = keys;
        });
    }

    /// A pass waits for a wave: what it is blocked on, until the pass ends.
    pub(crate) fn waiting(&self, name: &SourceName, blocked_on: &str) {
        self.change(name, |entry| {
            entry.summary.blocked_on = Some(blocked_on.to_string())
        });
    }

    /// A watch saw `manager` change an object the source applied.
    pub(crate) fn drifted(&self, name: &SourceName, key: &ObjectKey, manager: &str, now: &str) {
        self.change(name, |shown| {
            shown.drift.insert(
                key.clone(),
                DriftRow {
                    manager: manager.to_string(),
                    seen: now.to_string(),
                    corrected: None,
                },
            );
        });
    }

    /// A pass put drifted objects back.
    pub(crate) fn corrected(&self, name: &SourceName, keys: &[ObjectKey], now: &str) {
        if keys.is_empty() {
            return;
        }
        self.change(name, |shown| {
            for key in keys {
                if let Some(drift) = shown.drift.get_mut(key) {
                    drift.corrected = Some(now.to_string());
                }
            }
        });
    }

    /// The image policies after a run of the Source's image automation.
    pub(crate) fn images(&self, name: &SourceName, rows: Vec<ImagePolicyRow>) {
        self.change(name, |entry| entry.images = rows);
    }

    /// The last failed rollout, with `spec.revert`.
    pub(crate) fn revert(&self, name: &SourceName, row: RevertRow) {
        self.change(name, |entry| entry.last_revert = Some(row));
    }

    /// How each cluster fared, when the models name several.
    pub(crate) fn clusters(&self, name: &SourceName, rows: Vec<ClusterRow>) {
        self.change(name, |shown| shown.summary.clusters = rows);
    }
}

/// `wave 2 → Deployment shop/web: 3/5 replicas available` (1-based waves, as the
/// status says them): the first of what the wave waits for, and how many more.
pub(crate) fn blocked_on<'a>(
    wave: usize,
    mut blockers: impl ExactSizeIterator<Item = (&'a ObjectKey, &'a str)>,
) -> String {
    let Some((first, state)) = blockers.next() else {
        return format!("wave {}", wave + 1);
    };
    let more = match blockers.len() {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    format!("wave {} → {first}: {state}{more}", wave + 1)
}

/// How the page words what an apply did to an object.
fn outcome_word(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Created => "created",
        Outcome::Configured => "configured",
        Outcome::Unchanged => "unchanged",
        Outcome::Pruned => "pruned",
        Outcome::Released => "released",
        Outcome::Prunable => "prunable",
        Outcome::Replaced => "replaced",
        Outcome::Failed(_) => "failed",
    }
}

/// The summary of a source: its status's conditions and revisions, and what the
/// page knows beside (drift not corrected yet, the last plan's counts).
fn summary_of(shown: &Entry) -> SourceSummary {
    let status = &shown.status;
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let ready = condition("Ready");
    let reconciling = condition("Reconciling").filter(|c| c.status == "True");
    let drifted = shown
        .drift
        .values()
        .filter(|d| d.corrected.is_none())
        .count();
    let state = match (ready.map(|c| c.status.as_str()), reconciling) {
        (_, Some(c)) if c.reason == "Progressing" => State::Progressing,
        (Some("True"), _) if drifted > 0 => State::Drifted,
        (Some("True"), _) => State::Ready,
        (Some("Unknown"), _) if ready.is_some_and(|c| c.reason == "Suspended") => State::Suspended,
        (Some("False"), _) if shown.summary.blocked_on.is_some() => State::Blocked,
        (Some("False"), _) => State::Failed,
        _ => State::Unknown,
    };
    let (reason, message) = match reconciling
        .filter(|_| state == State::Progressing)
        .or(ready)
    {
        Some(c) => (c.reason.clone(), c.message.clone()),
        None => (String::new(), String::new()),
    };
    let commit = |revision: &Option<String>| {
        revision.as_deref().map(|r| {
            r.rsplit_once(':')
                .map_or(r, |(_, commit)| commit)
                .to_string()
        })
    };
    let wanted = commit(&status.last_attempted_revision);
    let last = shown.last.as_ref();
    let counts = Counts {
        objects: last.map_or(0, |l| l.plan.changes.len()),
        drifted,
        failed: shown.failed.len(),
        conflicts: last.map_or(0, |l| {
            l.plan
                .changes
                .iter()
                .filter(|c| !c.conflicts.is_empty())
                .count()
        }),
    };
    SourceSummary {
        state,
        reason,
        message,
        commit_link: match (&shown.handle.url, &wanted) {
            (Some(url), Some(commit)) => commit_link(url, commit),
            _ => None,
        },
        wanted,
        applied: commit(&status.last_applied_revision),
        counts,
        ..shown.summary.clone()
    }
}

/// The page of `commit` on the Git host of `url`, for the hosts whose commit pages
/// tether knows: GitHub, GitLab, Gitea/Forgejo/Codeberg, Bitbucket.
pub(crate) fn commit_link(url: &str, commit: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("ssh://git@"))
        .or_else(|| url.strip_prefix("git@"))?;
    let (host, path) = rest.split_once(['/', ':'])?;
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let path = path.trim_end_matches('/').trim_end_matches(".git");
    if path.is_empty() || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let base = format!("https://{host}/{path}");
    match host {
        "github.com" => Some(format!("{base}/commit/{commit}")),
        "bitbucket.org" => Some(format!("{base}/commits/{commit}")),
        h if h.contains("gitlab") => Some(format!("{base}/-/commit/{commit}")),
        h if h.contains("gitea") || h.contains("forgejo") || h == "codeberg.org" => {
            Some(format!("{base}/commit/{commit}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_engine::reconcile::{
        ApplyReport, BlockedWave, Blocker, ObjectFailure, ObjectReport,
    };

    fn views() -> (Views, SourceName) {
        let views = Views::default();
        let name = SourceName {
            namespace: "shop".into(),
            name: "web".into(),
        };
        let (trigger, _) = mpsc::channel(1);
        let handle = Handle {
            trigger,
            writeback: None,
            url: Some("https://github.com/acme/shop.git".into()),
            reference: Some("main".into()),
            path: None,
            attestation: None,
        };
        views.register(&name, handle);
        (views, name)
    }

    fn blocked() -> ApplyReport {
        let blocker = |name: &str, state: &str| Blocker {
            key: ObjectKey::new("apps/v1", "Deployment", Some("shop"), name),
            state: state.into(),
            failed: false,
            external: false,
            needed_by: vec!["Slice/front".into()],
        };
        ApplyReport {
            blocked: Some(BlockedWave {
                wave: 1,
                waves: 3,
                blockers: vec![
                    blocker("web", "3/5 replicas available"),
                    blocker("db", "0/1"),
                ],
                not_applied: 4,
            }),
            ..ApplyReport::default()
        }
    }

    #[test]
    fn each_pass_result_is_a_state_in_attention_order_with_what_it_is_blocked_on() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let revision = format!("main@sha1:{commit}");
        let applied = ApplyReport::default();
        let blocked = blocked();
        let cases: Vec<(PassResult, State, Option<&str>)> = vec![
            (
                PassResult::Progressing {
                    revision: revision.clone(),
                },
                State::Progressing,
                None,
            ),
            (
                PassResult::Applied {
                    revision: revision.clone(),
                    report: &applied,
                },
                State::Ready,
                None,
            ),
            (
                PassResult::ObjectsFailed {
                    revision: revision.clone(),
                    report: &blocked,
                },
                State::Blocked,
                Some("wave 2 → Deployment shop/web: 3/5 replicas available (and 1 more)"),
            ),
            (
                PassResult::Failed {
                    revision: None,
                    reason: "InvalidModels",
                    message: "models.yaml:3:1: error".into(),
                    stalled: true,
                },
                State::Failed,
                None,
            ),
            (PassResult::Suspended, State::Suspended, None),
        ];
        for (result, state, blocked_on) in cases {
            let (views, name) = views();
            views.record(&name, &result, "2026-11-25T00:00:00Z", Some(0.5));
            let summary = &views.list()[0];
            assert_eq!(summary.state, state, "{result:?}");
            assert_eq!(summary.blocked_on.as_deref(), blocked_on, "{result:?}");
        }
        let (views, name) = views();
        views.record(
            &name,
            &PassResult::Applied {
                revision,
                report: &applied,
            },
            "now",
            None,
        );
        let summary = &views.list()[0];
        assert_eq!(
            (summary.wanted.as_deref(), summary.applied.as_deref()),
            (Some(commit), Some(commit))
        );
        assert_eq!(
            summary.commit_link.as_deref(),
            Some(format!("https://github.com/acme/shop/commit/{commit}").as_str())
        );
    }

    #[test]
    fn drift_needs_attention_until_it_is_corrected_and_the_stream_says_each_change() {
        let (views, name) = views();
        let mut stream = views.subscribe();
        let applied = ApplyReport::default();
        let result = PassResult::Applied {
            revision: "main@sha1:ab".into(),
            report: &applied,
        };
        views.record(&name, &result, "t0", None);
        let key = ObjectKey::new("v1", "ConfigMap", Some("shop"), "settings");
        views.drifted(&name, &key, "kubectl-patch", "t1");
        assert_eq!(views.list()[0].state, State::Drifted);
        assert_eq!(views.list()[0].counts.drifted, 1);
        views.corrected(&name, std::slice::from_ref(&key), "t2");
        assert_eq!(views.list()[0].state, State::Ready);
        let states: Vec<State> = std::iter::from_fn(|| stream.try_recv().ok())
            .map(|s| s.state)
            .collect();
        assert_eq!(states, [State::Ready, State::Drifted, State::Ready]);
        // A waiting wave is said while the pass goes on.
        views.waiting(&name, "wave 2 → Pod shop/db: not ready");
        assert_eq!(
            views.list()[0].blocked_on.as_deref(),
            Some("wave 2 → Pod shop/db: not ready")
        );
        views.record(&name, &result, "t3", None);
        assert_eq!(
            views.list()[0].blocked_on,
            None,
            "the pass that applied says nothing is blocked"
        );
        // A pass whose waves all started, but some objects failed: nothing blocks it.
        views.waiting(&name, "wave 2 → Pod shop/db: not ready");
        let failed = ApplyReport {
            objects: vec![ObjectReport {
                key: key.clone(),
                outcome: Outcome::Failed(ObjectFailure::Unreachable),
            }],
            ..ApplyReport::default()
        };
        let result = PassResult::ObjectsFailed {
            revision: "main@sha1:ab".into(),
            report: &failed,
        };
        views.record(&name, &result, "t4", None);
        assert_eq!(views.list()[0].blocked_on, None);
        assert_eq!(views.list()[0].state, State::Failed);
    }

    #[test]
    fn commit_links_for_the_hosts_tether_knows_and_none_for_others() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let cases = [
            (
                "https://github.com/acme/shop.git",
                Some("https://github.com/acme/shop/commit/"),
            ),
            (
                "git@github.com:acme/shop.git",
                Some("https://github.com/acme/shop/commit/"),
            ),
            (
                "ssh://git@gitlab.example.org/acme/shop",
                Some("https://gitlab.example.org/acme/shop/-/commit/"),
            ),
            (
                "https://codeberg.org/acme/shop",
                Some("https://codeberg.org/acme/shop/commit/"),
            ),
            (
                "https://bitbucket.org/acme/shop",
                Some("https://bitbucket.org/acme/shop/commits/"),
            ),
            ("git://127.0.0.1:9418/shop", None),
            ("file:///srv/shop", None),
            ("https://git.example.org/shop", None),
        ];
        for (url, want) in cases {
            assert_eq!(
                commit_link(url, commit),
                want.map(|prefix| format!("{prefix}{commit}")),
                "{url}"
            );
        }
        assert_eq!(commit_link("https://github.com/a/b", "<script>"), None);
    }
}
