//! One run of image automation over a models branch, for the CLI (`tether images`)
//! and the daemon alike:
//!
//! ```text
//! branch's files ──models: ImagePolicies──▶ per policy, its targets (update::Places, read once)
//!       ──one tag list per image repository (scan::list_tags, folded into a Shortlist
//!         per policy: bounded memory)──▶ candidates, best first (ages for min_age)
//!       ──Workspace::sync: on the branch's tip, for each target choose::decide
//!         (never backwards) ──update::plan──▶ Edit ──▶ commit, push
//!         (one commit per policy or one for the batch; to the branch, or to the
//!          policy's own branch, replaced in place)
//! ```
//!
//! Nothing is remembered between runs: each run derives its decisions from the
//! registry as it answers now and from the branch's tip as the commit is made
//! (`Workspace::sync` plans on the tip, again after a rejected push). A run killed
//! at any point has committed either a whole decision or nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use thiserror::Error;

use tether_core::image_automation::choose::{self, Decision, Shortlist};
use tether_core::image_automation::markers::MarkerField;
use tether_core::image_automation::policy::{ImagePolicy, Rule, UpdateMode};
use tether_core::image_automation::update::{self, Place, Places, Target, Update};
use tether_core::operation::Edit;
use tether_core::revert::{held_policies, held_reason};
use tether_core::source::SourceFiles;

use super::notification::Pushed;
use super::scan;
use crate::discovery::Destination;
use crate::oci::{Access, Credentials, OciError, Registry};
use crate::writeback::{Author, Change, Synced, WritebackError};

/// How many of the best candidates a policy keeps from a listing.
const SHORTLIST: usize = 32;
/// How many commits back a run looks for tether's reverts that hold its policies.
const HOLD_HISTORY: usize = 100;
/// How many image repositories are listed at once.
const CONCURRENT_SCANS: usize = 8;
/// How many candidates' ages a `min_age` policy looks up, best first, in one run.
const AGE_LOOKUPS: usize = 8;
/// The branch an `update: branch` policy proposes on.
pub const BRANCH_PREFIX: &str = "tether/image/";

#[derive(Debug, Error)]
pub enum ImagesError {
    #[error(transparent)]
    Writeback(#[from] WritebackError),
    #[error("the chosen images cannot be written")]
    Update(#[from] update::UpdateError),
    #[error("the image automation's task stopped: {0}")]
    Task(String),
}

/// Where the registry credentials a policy's `secret` names come from: the
/// daemon reads Secrets of the Source's namespace.
pub trait Secrets: Sync {
    fn get(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<SecretCredentials, String>> + Send;
}

/// No secrets: the CLI, whose credentials are a Docker config.
pub struct NoSecrets;

impl Secrets for NoSecrets {
    async fn get(&self, name: &str) -> Result<SecretCredentials, String> {
        Err(format!(
            "the policy names the secret {name}, which only the daemon reads (from the Source's namespace); the CLI reads registry credentials from a Docker config"
        ))
    }
}

/// A secret's registry credentials.
#[derive(Clone, Debug)]
pub enum SecretCredentials {
    /// A Docker config's JSON (`.dockerconfigjson`).
    DockerConfig(Vec<u8>),
    Basic(Credentials),
}

impl SecretCredentials {
    /// The credentials for `registry` (`host[:port]`) that the secret `name` holds.
    pub fn for_registry(self, name: &str, registry: &str) -> Result<Credentials, String> {
        match self {
            SecretCredentials::Basic(credentials) => Ok(credentials),
            SecretCredentials::DockerConfig(config) => {
                Credentials::from_docker_config(&config, registry)
                    .ok_or_else(|| format!("the secret {name} holds no credentials for {registry}"))
            }
        }
    }
}

impl Automation {
    /// What `policy` authenticates to `registry` with: its secret's credentials (an
    /// error when the secret cannot be read: a policy that names one never goes
    /// anonymous by mistake), else the Docker config's.
    async fn access(
        &self,
        secrets: &impl Secrets,
        policy: &ImagePolicy,
        registry: &str,
    ) -> Result<Access, String> {
        let credentials = match &policy.secret {
            Some(name) => Some(secrets.get(name).await?.for_registry(name, registry)?),
            None => self
                .docker_config
                .as_deref()
                .and_then(|config| Credentials::from_docker_config(config, registry)),
        };
        Ok(Access {
            credentials,
            insecure: policy.insecure,
        })
    }
}

/// Where an image repository lives: `registry.local:5000/shop/api` is
/// (`registry.local:5000`, `shop/api`); a name without a registry is Docker Hub's
/// (`nginx` is `library/nginx` there), as Docker and Kubernetes read it.
pub fn registry_and_repository(image: &str) -> (String, String) {
    match image.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), rest.to_string())
        }
        Some(_) => ("registry-1.docker.io".to_string(), image.to_string()),
        None => (
            "registry-1.docker.io".to_string(),
            format!("library/{image}"),
        ),
    }
}

/// A run's settings.
#[derive(Clone, Debug)]
pub struct Automation {
    pub destination: Destination,
    /// The branch read and committed to (default: the checkout's, or main).
    pub branch: Option<String>,
    pub author: Author,
    /// Push what is committed (a remote's clone always pushes).
    pub push: bool,
    /// One commit for every policy that commits to the branch, instead of one each.
    pub batch: bool,
    /// Commit the decisions; otherwise only say what they are.
    pub commit: bool,
    /// A Docker config's JSON, for registries no policy names a secret for.
    pub docker_config: Option<Vec<u8>>,
}

/// What a run found and did for one policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyOutcome {
    pub policy: String,
    pub image: String,
    /// Tags listed (none for a digest policy, or when the registry was not reached).
    pub listed: Option<usize>,
    /// The best tag (or digest) the policy admits now.
    pub candidate: Option<String>,
    pub result: PolicyResult,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyResult {
    /// Written to the branch (or the policy's branch), in `commit`.
    Updated {
        from: String,
        to: String,
        commit: Option<String>,
        branch: String,
    },
    /// Nothing to write, and why.
    Kept { reason: String },
    /// The policy could not be decided: its registry, credentials or targets.
    Failed { error: String },
}

impl PolicyOutcome {
    /// The one sentence `kubectl get`, the log and the CLI show.
    pub fn summary(&self) -> String {
        match &self.result {
            PolicyResult::Updated {
                from, to, branch, ..
            } => {
                format!("{from} → {to} on {branch}")
            }
            PolicyResult::Kept { reason } => reason.clone(),
            PolicyResult::Failed { error } => error.clone(),
        }
    }
}

/// A run's outcome.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    pub policies: Vec<PolicyOutcome>,
    /// Commits made (pushed when the run pushes).
    pub commits: Vec<String>,
    /// The image repositories the policies list (`registry/repository`), which a
    /// registry's webhook is matched against.
    pub repositories: Vec<String>,
    /// The shortest interval of the policies: when the next run is due.
    pub rescan_after: Option<Duration>,
    /// Every policy of the models (a run for a registry's webhook scans some).
    pub names: Vec<String>,
}

/// What one policy's scan found: its candidates, best first, with their ages (for
/// `min_age`), or the digest its tag points at.
#[derive(Clone, Debug)]
enum Found {
    Tags {
        listed: usize,
        candidates: Vec<(String, Option<Duration>)>,
    },
    TooManyTags {
        listed: usize,
    },
    Digest(String),
    Failed(String),
}

/// The edit of one commit, with the decisions it carries.
struct Planned {
    edit: Edit,
    updates: Vec<Update>,
    kept: BTreeMap<String, String>,
}

impl Change for Planned {
    fn writes(&self) -> &BTreeMap<String, String> {
        &self.edit.writes
    }
    fn message(&self) -> String {
        self.edit.summary.clone()
    }
}

impl Automation {
    /// One run. With `pushed`, only the policies whose image repository one of the
    /// pushes names are scanned (a registry's webhook); otherwise all of them.
    pub async fn run(
        &self,
        secrets: &impl Secrets,
        pushed: Option<&[Pushed]>,
        now: DateTime<Utc>,
    ) -> Result<RunReport, ImagesError> {
        let destination = self.destination.clone();
        let branch = self.branch.clone();
        let workspace = tokio::task::spawn_blocking(move || destination.open(branch.as_deref()))
            .await
            .map_err(|e| ImagesError::Task(e.to_string()))??;
        let files = workspace.models()?;
        let policies = policies_of(&files);
        // The policies a revert of tether's holds, until a person commits.
        let held_by = held_policies(&workspace.history(HOLD_HISTORY)?);
        let mut report = RunReport {
            repositories: policies
                .iter()
                .map(|p| repository_key(&p.image.value))
                .collect(),
            rescan_after: policies.iter().map(|p| p.interval).min(),
            names: policies.iter().map(|p| p.name.value.clone()).collect(),
            ..RunReport::default()
        };
        report.repositories.sort();
        report.repositories.dedup();
        let (held, chosen): (Vec<&ImagePolicy>, Vec<&ImagePolicy>) = policies
            .iter()
            .filter(|p| {
                let key = repository_key(&p.image.value);
                pushed.is_none_or(|pushes| pushes.iter().any(|push| pushed_to(push, &key)))
            })
            .partition(|p| held_by.contains_key(&p.name.value));
        let places = Places::read(&files);
        let groups: Vec<(String, Vec<PolicyTargets>)> = by_repository(&chosen)
            .into_iter()
            .map(|(key, group)| {
                let targets = group
                    .into_iter()
                    .map(|p| {
                        let targets = places.targets(&p.name.value, &p.image.value);
                        (p, targets.unwrap_or_default())
                    })
                    .collect();
                (key, targets)
            })
            .collect();
        let scans: Vec<_> = groups
            .iter()
            .map(|(key, targets)| self.scan(secrets, key, targets, now))
            .collect();
        let scanned: Vec<Vec<(String, Found)>> = futures::stream::iter(scans)
            .buffer_unordered(CONCURRENT_SCANS)
            .collect()
            .await;
        let found: BTreeMap<String, Found> = scanned.into_iter().flatten().collect();
        let commit = CommitPlan {
            policies: &chosen,
            found: &found,
        };
        report.policies = chosen
            .iter()
            .map(|p| initial_outcome(p, &places, found.get(&p.name.value)))
            .collect();
        self.commit(workspace, &commit, &mut report).await?;
        report.policies.extend(held_outcomes(&held, &held_by));
        Ok(report)
    }

    /// Lists one image repository once for every policy of `group`, and looks up what
    /// the decisions need (the digest of a digest policy's tag; the ages of the best
    /// candidates of a `min_age` policy).
    async fn scan(
        &self,
        secrets: &impl Secrets,
        repository: &str,
        group: &[PolicyTargets<'_>],
        now: DateTime<Utc>,
    ) -> Vec<(String, Found)> {
        let Some((first, _)) = group.first() else {
            return Vec::new();
        };
        let (registry_host, path) = registry_and_repository(&first.image.value);
        let registry = match self
            .access(secrets, first, &registry_host)
            .await
            .and_then(|access| {
                Registry::for_repository(&registry_host, &path, &access)
                    .map_err(|e| tether_core::error_chain(&e))
            }) {
            Ok(registry) => registry,
            Err(error) => {
                return group
                    .iter()
                    .map(|(p, _)| (p.name.value.clone(), Found::Failed(error.clone())))
                    .collect();
            }
        };
        let mut results = Vec::new();
        let mut listed_policies = Vec::new();
        for (policy, targets) in group {
            match &policy.rule {
                Rule::Digest { tag } => {
                    let found = match scan::digest_of(&registry, tag).await {
                        Ok(digest) => Found::Digest(digest),
                        Err(error) => Found::Failed(tether_core::error_chain(&error)),
                    };
                    results.push((policy.name.value.clone(), found));
                }
                _ => listed_policies.push((*policy, targets.as_slice())),
            }
        }
        if !listed_policies.is_empty() {
            results.extend(list_once(&registry, repository, &listed_policies, now).await);
        }
        results
    }

    /// Commits what the decisions change: to the branch (one commit per policy, or
    /// one for the batch), or to each `update: branch` policy's own branch.
    async fn commit(
        &self,
        workspace: crate::writeback::Workspace,
        plan: &CommitPlan<'_>,
        report: &mut RunReport,
    ) -> Result<(), ImagesError> {
        let mut groups: Vec<(Option<String>, Vec<String>)> = Vec::new();
        let direct: Vec<String> = plan
            .policies
            .iter()
            .filter(|p| p.update == UpdateMode::Commit)
            .map(|p| p.name.value.clone())
            .collect();
        if self.batch && !direct.is_empty() {
            groups.push((None, direct));
        } else {
            groups.extend(direct.into_iter().map(|name| (None, vec![name])));
        }
        groups.extend(
            plan.policies
                .iter()
                .filter(|p| p.update == UpdateMode::Branch)
                .map(|p| {
                    (
                        Some(format!("{BRANCH_PREFIX}{}", p.name.value)),
                        vec![p.name.value.clone()],
                    )
                }),
        );
        let policies: Vec<ImagePolicy> = plan.policies.iter().map(|p| (*p).clone()).collect();
        let found = plan.found.clone();
        let author = self.author.clone();
        let push = self.push;
        let write = self.commit;
        let (outcomes, commits) = tokio::task::spawn_blocking(move || {
            let mut workspace = workspace;
            let mut outcomes: Vec<(String, PolicyResult)> = Vec::new();
            let mut commits = Vec::new();
            // Decided first on the files as read: a group none of whose policies would
            // change anything is not synced (no fetch, no commit); the others are
            // decided again on the branch's tip as they commit.
            let every: Vec<String> = groups.iter().flat_map(|(_, n)| n.clone()).collect();
            let as_read = decide_all(&workspace.models()?, &policies, &every, &found)?;
            for (proposal, names) in groups {
                match &proposal {
                    Some(branch) => workspace.propose_replacing(branch),
                    None => workspace.commit_to_branch(),
                }
                // A commit an earlier run made and could not push (it was killed in
                // between) is pushed now, though nothing more changes.
                let unpushed = write && push && workspace.needs_push();
                if !unpushed && !as_read.updates.iter().any(|u| names.contains(&u.policy)) {
                    outcomes.extend(as_read.kept.iter().filter(|(n, _)| names.contains(n)).map(
                        |(name, reason)| {
                            let reason = reason.clone();
                            (name.clone(), PolicyResult::Kept { reason })
                        },
                    ));
                    continue;
                }
                let branch = workspace.target_branch().to_string();
                let decide = |files: &SourceFiles| decide_all(files, &policies, &names, &found);
                let synced: Synced<Planned> = if write {
                    workspace.sync(decide, &author, push)?
                } else {
                    Synced {
                        commit: None,
                        outcome: decide(&workspace.models()?)?,
                        pushed: false,
                    }
                };
                outcomes.extend(results_of(&synced, &branch));
                commits.extend(synced.commit.filter(|_| !synced.outcome.updates.is_empty()));
            }
            Ok::<_, ImagesError>((outcomes, commits))
        })
        .await
        .map_err(|e| ImagesError::Task(e.to_string()))??;
        for (name, result) in outcomes {
            if let Some(outcome) = report.policies.iter_mut().find(|o| o.policy == name)
                && !matches!(outcome.result, PolicyResult::Failed { .. })
            {
                outcome.result = result;
            }
        }
        report.commits = commits;
        Ok(())
    }
}

/// Lists one image repository once for `policies`, folding the tags into a shortlist
/// per policy and value written, then their ages where a policy has a `min_age`.
async fn list_once(
    registry: &Registry,
    repository: &str,
    policies: &[(&ImagePolicy, &[Target])],
    now: DateTime<Utc>,
) -> Vec<(String, Found)> {
    let mut results = Vec::new();
    let max_tags = policies.iter().map(|(p, _)| p.max_tags).max().unwrap_or(0);
    // One shortlist per policy and distinct value written now.
    let mut shortlists: Vec<(&ImagePolicy, Vec<Shortlist>)> = policies
        .iter()
        .map(|(policy, targets)| {
            let mut currents: Vec<&str> = targets
                .iter()
                .filter(|t| decides(policy, &t.place))
                .map(|t| t.current_tag.as_str())
                .collect();
            currents.sort_unstable();
            currents.dedup();
            let lists = currents
                .into_iter()
                .map(|current| Shortlist::new(policy, current, SHORTLIST))
                .collect();
            (*policy, lists)
        })
        .collect();
    let listing = scan::list_tags(registry, max_tags, |tag| {
        for (_, lists) in &mut shortlists {
            for list in lists.iter_mut() {
                list.offer(tag);
            }
        }
    })
    .await;
    tracing::debug!(repository, ?listing, "listed the tags");
    for (policy, lists) in shortlists {
        let found = match &listing {
            Err(error) => Found::Failed(tether_core::error_chain(error)),
            Ok(listing) if listing.truncated || listing.listed > policy.max_tags => {
                Found::TooManyTags {
                    listed: listing.listed,
                }
            }
            Ok(listing) => {
                let candidates = merged(policy, lists);
                match aged(registry, policy, candidates, now).await {
                    Ok(candidates) => Found::Tags {
                        listed: listing.listed,
                        candidates,
                    },
                    Err(error) => Found::Failed(tether_core::error_chain(&error)),
                }
            }
        };
        results.push((policy.name.value.clone(), found));
    }
    results
}

/// A policy and the places it writes.
type PolicyTargets<'p> = (&'p ImagePolicy, Vec<Target>);

/// The policies a commit decides for, and what their scans found.
struct CommitPlan<'a> {
    policies: &'a [&'a ImagePolicy],
    found: &'a BTreeMap<String, Found>,
}

/// The image policies of the branch's models.
fn policies_of(files: &SourceFiles) -> Vec<ImagePolicy> {
    tether_core::operation::read_models(files).image_policies
}

/// `registry/repository`, one spelling for an image repository.
fn repository_key(image: &str) -> String {
    let (registry, repository) = registry_and_repository(image);
    format!("{registry}/{repository}")
}

/// Does `push` concern the image repository `key` (`registry/repository`)? By the
/// repository's path only: a registry is often reached by several names (a cluster's
/// service, a loopback port), and a needless scan costs one list call, whereas a
/// missed one delays an update to the interval.
pub fn pushed_to(push: &Pushed, key: &str) -> bool {
    key.split_once('/')
        .is_some_and(|(_, repository)| repository == push.repository)
}

/// The policies grouped by image repository, each listed once.
fn by_repository<'p>(policies: &[&'p ImagePolicy]) -> BTreeMap<String, Vec<&'p ImagePolicy>> {
    let mut groups: BTreeMap<String, Vec<&ImagePolicy>> = BTreeMap::new();
    for policy in policies {
        groups
            .entry(repository_key(&policy.image.value))
            .or_default()
            .push(policy);
    }
    groups
}

/// A policy's candidates from all its shortlists, best first, each once.
fn merged(policy: &ImagePolicy, lists: Vec<Shortlist>) -> Vec<String> {
    let mut tags: Vec<String> = lists.into_iter().flat_map(Shortlist::finish).collect();
    tags.sort_by_key(|tag| std::cmp::Reverse(policy.rank(tag)));
    tags.dedup();
    tags.truncate(SHORTLIST);
    tags
}

/// The candidates with their ages, when the policy has a `min_age`: looked up best
/// first until one is old enough (at most [`AGE_LOOKUPS`]).
async fn aged(
    registry: &Registry,
    policy: &ImagePolicy,
    candidates: Vec<String>,
    now: DateTime<Utc>,
) -> Result<Vec<(String, Option<Duration>)>, OciError> {
    let Some(min_age) = policy.min_age else {
        return Ok(candidates.into_iter().map(|tag| (tag, None)).collect());
    };
    let mut aged = Vec::new();
    for tag in candidates.into_iter().take(AGE_LOOKUPS) {
        let age = scan::created_at(registry, &tag)
            .await?
            .and_then(|created| (now - created).to_std().ok())
            .unwrap_or(Duration::ZERO);
        let old_enough = age >= min_age;
        aged.push((tag, Some(age)));
        if old_enough {
            break;
        }
    }
    Ok(aged)
}

/// The outcome before anything is committed: what the scan found, or why the policy
/// cannot be decided.
/// What a run says of the policies a revert holds: kept, naming the revert.
fn held_outcomes(held: &[&ImagePolicy], held_by: &BTreeMap<String, String>) -> Vec<PolicyOutcome> {
    held.iter()
        .map(|p| PolicyOutcome {
            policy: p.name.value.clone(),
            image: p.image.value.clone(),
            listed: None,
            candidate: None,
            result: PolicyResult::Kept {
                reason: held_reason(held_by.get(&p.name.value).map_or("", String::as_str)),
            },
        })
        .collect()
}

fn initial_outcome(policy: &ImagePolicy, places: &Places, found: Option<&Found>) -> PolicyOutcome {
    let (listed, candidate, failure) = match found {
        Some(Found::Tags { listed, candidates }) => (
            Some(*listed),
            candidates.first().map(|(t, _)| t.clone()),
            None,
        ),
        Some(Found::TooManyTags { listed }) => (
            Some(*listed),
            None,
            Some(format!(
                "{} has more than {} tags ({listed} listed): nothing is chosen from a partial list; raise max_tags or clean the repository",
                policy.image.value, policy.max_tags
            )),
        ),
        Some(Found::Digest(digest)) => (None, Some(digest.clone()), None),
        Some(Found::Failed(error)) => (None, None, Some(error.clone())),
        None => (None, None, Some("not scanned".to_string())),
    };
    let failure = failure.or_else(|| {
        places
            .targets(&policy.name.value, &policy.image.value)
            .err()
            .map(|e| e.to_string())
    });
    PolicyOutcome {
        policy: policy.name.value.clone(),
        image: policy.image.value.clone(),
        listed,
        candidate,
        result: match failure {
            Some(error) => PolicyResult::Failed { error },
            None => PolicyResult::Kept {
                reason: "up to date".into(),
            },
        },
    }
}

/// The decisions of `names` on the branch's files as they are now, and their edit.
fn decide_all(
    files: &SourceFiles,
    policies: &[ImagePolicy],
    names: &[String],
    found: &BTreeMap<String, Found>,
) -> Result<Planned, ImagesError> {
    let mut updates = Vec::new();
    let mut kept = BTreeMap::new();
    let places = Places::read(files);
    for policy in policies.iter().filter(|p| names.contains(&p.name.value)) {
        let Ok(targets) = places.targets(&policy.name.value, &policy.image.value) else {
            continue;
        };
        for target in targets.into_iter().filter(|t| decides(policy, &t.place)) {
            let decision = match found.get(&policy.name.value) {
                Some(Found::Tags { candidates, .. }) => {
                    choose::decide(policy, &target.current_tag, candidates)
                }
                Some(Found::Digest(digest)) => {
                    choose::decide_digest(policy, target.current_digest.as_deref(), digest)
                }
                _ => continue,
            };
            match decision {
                Decision::Update { to, why, .. } => {
                    let (to_tag, to_digest) = match &policy.rule {
                        Rule::Digest { .. } => (target.current_tag.clone(), Some(to)),
                        _ => (to, None),
                    };
                    updates.push(Update {
                        policy: policy.name.value.clone(),
                        image: policy.image.value.clone(),
                        target,
                        to_tag,
                        to_digest,
                        why,
                    });
                }
                Decision::Keep { reason } => {
                    kept.insert(policy.name.value.clone(), reason.to_string());
                }
            }
        }
    }
    let edit = if updates.is_empty() {
        Edit {
            writes: BTreeMap::new(),
            summary: String::new(),
        }
    } else {
        let mut edit = update::plan(files, &updates)?;
        edit.summary = update::message(&updates);
        edit
    };
    Ok(Planned {
        edit,
        updates,
        kept,
    })
}

/// Does the value at `place` follow `policy`'s choice? A `:name` marker holds the
/// repository, which no policy changes; a `:digest` marker only a digest policy's.
fn decides(policy: &ImagePolicy, place: &Place) -> bool {
    match place {
        Place::Marker(MarkerField::Name) => false,
        Place::Marker(MarkerField::Digest) => matches!(policy.rule, Rule::Digest { .. }),
        Place::Marker(_) | Place::ImageModel { .. } => true,
    }
}

/// Each policy's result in one commit.
fn results_of(synced: &Synced<Planned>, branch: &str) -> Vec<(String, PolicyResult)> {
    let planned = &synced.outcome;
    let mut results: Vec<(String, PolicyResult)> = planned
        .kept
        .iter()
        .map(|(name, reason)| {
            (
                name.clone(),
                PolicyResult::Kept {
                    reason: reason.clone(),
                },
            )
        })
        .collect();
    for update in &planned.updates {
        let to = update
            .to_digest
            .clone()
            .unwrap_or_else(|| update.to_tag.clone());
        let from = match &update.to_digest {
            Some(_) => update.target.current_digest.clone().unwrap_or_default(),
            None => update.target.current_tag.clone(),
        };
        results.retain(|(name, _)| *name != update.policy);
        results.push((
            update.policy.clone(),
            PolicyResult::Updated {
                from,
                to,
                commit: synced.commit.clone(),
                branch: branch.to_string(),
            },
        ));
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_are_read_as_docker_reads_them() {
        let cases = [
            ("nginx", ("registry-1.docker.io", "library/nginx")),
            (
                "fluent/fluent-bit",
                ("registry-1.docker.io", "fluent/fluent-bit"),
            ),
            (
                "registry.local:5000/shop/api",
                ("registry.local:5000", "shop/api"),
            ),
            ("127.0.0.1:5000/app", ("127.0.0.1:5000", "app")),
            ("localhost/app", ("localhost", "app")),
            ("ghcr.io/org/team/app", ("ghcr.io", "org/team/app")),
        ];
        for (image, (registry, repository)) in cases {
            assert_eq!(
                registry_and_repository(image),
                (registry.to_string(), repository.to_string()),
                "{image}"
            );
        }
    }
}
