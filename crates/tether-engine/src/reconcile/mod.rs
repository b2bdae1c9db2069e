//! The reconcile pass, as a library type the CLI and the daemon drive alike: a
//! [`Reconciler`] reads its source, checks and renders the models, plans against the
//! cluster ([`live`]: list, compare, dry-run), and applies the plan ([`apply`]:
//! server-side apply in dependency order, then prune), reporting each object's
//! [`outcome`]. What to record and what to prune is decided by the pure
//! [`tether_core::inventory`]; this module carries it out.
//!
//! [`build`] makes a repository's objects (prepare, Kustomize and Helm, complete,
//! render) with the Source's and the repository's confinement. `plan_clusters` builds
//! once, splits the objects by their member's cluster and plans every cluster at once,
//! one [`ClusterPlan`] each, an error being that cluster's only; a [`Planned`] carries
//! its cluster's client, so `apply` and `wait_ready` act where it was planned.

mod apply;
pub mod cache;
mod checked_models;
pub mod clusters;
mod contents;
mod hook;
mod in_flight;
mod live;
mod nodes;
mod options;
pub mod outcome;
mod planned;
mod unlabelled;
mod wait;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use thiserror::Error;
use tracing::instrument;

use crate::attestation;
use crate::cluster::{ClusterError, Target};
pub use crate::cluster::{Fence, Reads, Tenure};
use crate::generate::{Capabilities, Generate};
use crate::git::GitError;
use crate::git::verify::VerifyError;
use crate::oci::OciError;
use crate::record::read_inventory_existing;
use crate::repo::{CommitCache, LoadedModels, Repo, RepoError, SETTINGS_FILE};
pub use apply::DEFAULT_WAVE_TIMEOUT;
pub use cache::{WatchAs, WatchCache, Watches};
pub use checked_models::CheckedModels;
pub use clusters::{ClusterName, Clusters};
pub use options::{ApplyOptions, ApplyProgress, PlanOptions, Selection, Writes};
pub use outcome::{
    ApplyReport, BlockedWave, Blocker, HookRun, ObjectFailure, ObjectReport, Outcome,
};
pub use planned::{Planned, Rollout};
use tether_core::confine::{self, Confinement, SourceConfinement};
use tether_core::health::HealthChecks;
use tether_core::hook::Hook;
use tether_core::inventory::budget::{self, DeletionBudget, PruneHold};
use tether_core::k8s::ObjectKey;
use tether_core::ownership::Inventory;
use tether_core::plan::{Action, Change, Plan, WaveSummary};
use tether_core::remedy::Remedy;
use tether_core::render::{RenderedObject, render, render_hooks};
use tether_core::settings::{self, Settings, SettingsError};
use tether_core::workflow::Workflow;
pub use wait::WaitProgress;

/// Reconciles one source with the cluster of each KubernetesService its models name
/// (one, for most repositories), recording in an inventory of the same name in each.
/// Holds its clients once connected, so a long-running caller connects once.
pub struct Reconciler {
    repo: Repo,
    clusters: Clusters,
    inventory: Inventory,
    selection: Option<Selection>,
    /// The age keys that open the repository's encrypted files.
    keys: std::sync::Arc<tether_sops::Keyring>,
    /// The last commit's models, so that a retried pass at the same commit reads no
    /// blob again.
    commits: CommitCache,
    /// Kustomize and Helm, and what they built at the last commit.
    generate: Generate,
    /// What the Source (a daemon's) allows, which the repository's `confine:` may
    /// only narrow.
    confinement: Option<SourceConfinement>,
    /// The Source's health checks, for the kinds the repository's do not cover.
    health: HealthChecks,
    /// The user its own cluster's client impersonates (a Source's ServiceAccount), as
    /// refusals name it.
    identity: Option<String>,
}

#[derive(Debug, Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Source(#[from] RepoError),
    #[error("{}: {}", .0.path, .0.message)]
    Settings(#[from] SettingsError),
    /// A health check of `.tether.yaml` that does not compile.
    #[error(transparent)]
    HealthCheck(#[from] tether_core::health::HealthCheckError),
    /// An ignore rule of `.tether.yaml` whose pointer is not one.
    #[error(transparent)]
    Ignore(#[from] tether_core::ignore::IgnoreError),
    /// The models have errors: nothing is compared or applied.
    /// Said with its first errors, values starred (a Source's status, the logs).
    #[error("{}", .0.error_summary(3))]
    Invalid(Box<CheckedModels>),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A prune was asked of a source that renders no object: a wrong path more often
    /// than a wish to delete everything.
    #[error("the source renders no object, so nothing was applied or pruned")]
    NothingRendered,
    /// A selection names no model, or several.
    #[error("{0}")]
    Selection(String),
    /// Kubernetes is switched off for this repository (its KubernetesService says
    /// `enabled: false`, or `.tether.yaml` does): nothing is compared or applied,
    /// and the cluster is not contacted.
    #[error("{0}: nothing was compared or applied")]
    Dormant(String),
    /// A prune was asked of a plan of some models only.
    #[error("a plan of some models only cannot prune: what it leaves out is not gone")]
    PartialPrune,
}

impl ReconcileError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            ReconcileError::NothingRendered => Some(Remedy::AllowEmpty),
            ReconcileError::Cluster(error) => error.remedy(),
            ReconcileError::Source(error) => error.remedy(),
            _ => None,
        }
    }

    /// Why a pass failed, in a word: a Source's status reason, and what the CLI and
    /// the daemon's logs classify by.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Invalid(_) => "InvalidModels",
            ReconcileError::Settings(_)
            | ReconcileError::HealthCheck(_)
            | ReconcileError::Ignore(_) => "InvalidSettings",
            ReconcileError::NothingRendered => "NothingRendered",
            ReconcileError::Dormant(_) => "KubernetesDisabled",
            ReconcileError::Selection(_) | ReconcileError::PartialPrune => "InvalidSelection",
            ReconcileError::Cluster(ClusterError::NotReachable { .. }) => "ClusterMissing",
            ReconcileError::Source(RepoError::Git(GitError::Verify(error)))
                if error.is_permanent() =>
            {
                "Unverified"
            }
            ReconcileError::Source(RepoError::Git(error)) if error.is_permanent() => "GitRefused",
            ReconcileError::Source(RepoError::Oci(OciError::Unverified { .. })) => "Unverified",
            ReconcileError::Source(RepoError::Oci(error)) if error.is_permanent() => {
                "ArtifactRefused"
            }
            ReconcileError::Source(RepoError::Oci(_)) => "ArtifactFailed",
            ReconcileError::Source(_) => "GitFailed",
            ReconcileError::Cluster(error) if error.is_permanent() => "ClusterRefused",
            ReconcileError::Cluster(_) => "ClusterUnavailable",
        }
    }

    /// The commit a pass failed at before it was planned, when the error knows it:
    /// invalid models, or a commit (or tag) not signed by a trusted key.
    pub fn commit(&self) -> Option<&str> {
        match self {
            ReconcileError::Invalid(models) => {
                models.loaded.revision.as_ref().map(|r| r.commit.as_str())
            }
            ReconcileError::Source(RepoError::Git(GitError::Verify(VerifyError::Unverified(
                unverified,
            )))) => Some(&unverified.commit),
            _ => None,
        }
    }

    /// Whether trying again cannot help until something changes (the models, the
    /// settings, the request): the daemon says the Source is stalled, and the CLI
    /// does not suggest running again. Git and the cluster being unreachable, busy or
    /// in a conflict pass with time.
    pub fn is_permanent(&self) -> bool {
        !matches!(
            self.reason(),
            "GitFailed" | "ArtifactFailed" | "ClusterUnavailable"
        )
    }
}

impl Reconciler {
    pub fn new(repo: Repo, target: Target, inventory: Inventory) -> Self {
        Reconciler {
            repo,
            clusters: Clusters::kubeconfig(target, BTreeMap::new()),
            inventory,
            selection: None,
            keys: Default::default(),
            commits: CommitCache::default(),
            generate: Generate::from_environment(),
            confinement: None,
            health: HealthChecks::default(),
            identity: None,
        }
    }

    /// The models read, opened and checked, their kustomizations and charts built
    /// for this cluster.
    async fn built(&self) -> Result<(CheckedModels, Option<Rendered>), ReconcileError> {
        let mut loaded = self.repo.load_cached(&self.commits).await?;
        loaded.files = tether_sops::open_files(loaded.files, &self.keys);
        let capabilities = match needs_capabilities(&loaded) {
            true => self.capabilities().await,
            false => None,
        };
        build(
            loaded,
            &self.inventory,
            &self.generate,
            capabilities.as_ref(),
            self.confinement.as_ref(),
            &self.health,
        )
        .await
    }

    /// What the cluster serves, for charts' `.Capabilities`; none when it cannot be
    /// asked (the chart renders with Helm's defaults, and the plan reports the
    /// cluster's error). With several clusters, the default context's.
    async fn capabilities(&self) -> Option<Capabilities> {
        let client = self.client().await.ok()?;
        match crate::cluster::capabilities(&client).await {
            Ok(capabilities) => Some(capabilities),
            Err(error) => {
                tracing::debug!(error = %tether_core::error_chain(&error), "the cluster's capabilities are unknown");
                None
            }
        }
    }

    /// Checks the signatures of a Git source's commits, or of an artifact, against
    /// `keys` from the next plan on (a Source's keys, read before each pass); a
    /// source that does not verify is left as it is.
    pub fn set_trusted_keys(
        &mut self,
        keys: std::sync::Arc<tether_trust::trusted_keys::TrustedKeys>,
    ) {
        match &mut self.repo {
            Repo::Git {
                verify: Some(verification),
                ..
            } => verification.keys = keys,
            Repo::Oci {
                verify: Some(trusted),
                ..
            } => *trusted = keys,
            _ => {}
        }
    }

    /// Builds kustomizations and charts with `generate` (its chart keys, its cache).
    pub fn with_generate(mut self, generate: Generate) -> Self {
        self.generate = generate;
        self
    }

    /// Requires the charts fetched from a repository or a registry to be signed by
    /// one of `keys` from the next plan on (a Source's chart keys, read before each
    /// pass); `None`: charts are not verified.
    pub fn set_chart_keys(
        &mut self,
        keys: Option<std::sync::Arc<tether_trust::trusted_keys::TrustedKeys>>,
    ) {
        self.generate.set_chart_keys(keys);
    }

    /// Opens the repository's encrypted (sops) files with `keys`.
    pub fn with_keys(mut self, keys: std::sync::Arc<tether_sops::Keyring>) -> Self {
        self.set_keys(keys);
        self
    }

    /// Opens the encrypted files with `keys` from the next plan on (a rotated key).
    pub fn set_keys(&mut self, keys: std::sync::Arc<tether_sops::Keyring>) {
        self.keys = keys;
    }

    /// The keys the encrypted files are opened with (and an edit of one is signed
    /// again with).
    pub fn keys(&self) -> std::sync::Arc<tether_sops::Keyring> {
        self.keys.clone()
    }

    /// Plans and applies only the models `selection` names.
    pub fn with_selection(self, selection: Selection) -> Self {
        Reconciler {
            selection: Some(selection),
            ..self
        }
    }

    /// Reaches the KubernetesServices named here through these kubeconfig contexts
    /// (`--cluster NAME=CONTEXT`), before the repository's own mapping.
    pub fn with_contexts(self, contexts: BTreeMap<String, String>) -> Self {
        Reconciler {
            clusters: self.clusters.with_contexts(contexts),
            ..self
        }
    }

    /// Uses `client` instead of connecting to the target (a daemon shares one client
    /// among its sources): the client of its own cluster.
    pub fn with_client(self, client: Client) -> Self {
        Reconciler {
            clusters: Clusters::given(client),
            ..self
        }
    }

    /// Confines the objects to what `confinement` allows (a daemon's Source: its spec
    /// and the daemon's flags), narrowed by the repository's own `confine:`.
    pub fn with_confinement(self, confinement: SourceConfinement) -> Self {
        Reconciler {
            confinement: Some(confinement),
            ..self
        }
    }

    /// Judges the health of the kinds the repository's `.tether.yaml` has no check for
    /// by `health` (a Source's `spec.healthCheckExprs`), before the shipped library.
    pub fn with_health_checks(self, health: HealthChecks) -> Self {
        Reconciler { health, ..self }
    }

    /// Says that the client given impersonates `user` (a Source's ServiceAccount):
    /// refusals name it, and the watches keep to the plan's namespaces.
    pub fn acting_as(self, user: String) -> Self {
        Reconciler {
            identity: Some(user),
            ..self
        }
    }

    /// The user the client impersonates, if it does (a Source's ServiceAccount).
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// Reaches the clusters of the KubernetesServices other than `own_name` (the
    /// cluster of the client given) through `resolver`.
    pub fn with_other_clusters(
        self,
        own_name: Option<String>,
        resolver: clusters::Resolver,
    ) -> Self {
        Reconciler {
            clusters: self.clusters.with_others(own_name, resolver),
            ..self
        }
    }

    /// The KubernetesService of the cluster reached with the client given (the
    /// daemon's own), when it was named.
    pub fn own_cluster(&self) -> Option<&str> {
        self.clusters.own_name()
    }

    /// The client of the default cluster (the only one, for models that name one
    /// KubernetesService or none), connecting on first use.
    pub async fn client(&self) -> Result<Client, ClusterError> {
        let only = ClusterName {
            service: None,
            several: false,
        };
        self.clusters.client(&only, &BTreeMap::new()).await
    }

    /// Reads and checks the models once, and compares what they render with each
    /// cluster they reach, all at once: one cluster's error is its plan's, and the
    /// others are planned. `prune` only tells the plans' reports whether deletions
    /// will be carried out. Invalid models are reported before any cluster error:
    /// they make the clusters irrelevant. `caches` has the live objects of the kinds
    /// they watch, by cluster, read instead of listing them.
    #[instrument(skip_all, fields(source = %self.repo.label()))]
    pub async fn plan_clusters(
        &self,
        options: PlanOptions,
        caches: &BTreeMap<Option<String>, &WatchCache>,
    ) -> Result<ClusterPlans, ReconcileError> {
        let Prepared { common, parts } = self.prepare().await?;
        let common = &common;
        let connecting = parts.iter().map(|part| self.connect(common, &part.cluster));
        let mut clients = futures::future::join_all(connecting).await;
        refuse_shared_clusters(&parts, &mut clients).await;
        let plans = parts.into_iter().zip(clients).map(|(part, client)| {
            let cache = caches.get(&part.cluster.service).copied();
            let cluster = part.cluster.clone();
            async move {
                let planned = match client {
                    Ok(client) => self.plan_part(common, part, client, options, cache).await,
                    Err(error) => Err(error),
                };
                ClusterPlan { cluster, planned }
            }
        });
        let clusters = futures::future::join_all(plans).await;
        Ok(ClusterPlans {
            models: common.models.clone(),
            clusters,
        })
    }

    /// The models checked, and the objects of each cluster.
    async fn prepare(&self) -> Result<Prepared, ReconcileError> {
        // The models first: models with Kubernetes off never reach the cluster.
        let (models, rendered) = self.built().await?;
        let Some(Rendered {
            objects,
            hooks,
            workflow,
            services,
        }) = rendered
        else {
            return Err(ReconcileError::Invalid(Box::new(models)));
        };
        if let Some(reason) = &models.dormant {
            return Err(ReconcileError::Dormant(reason.clone()));
        }
        let (objects, selected) = select(objects, &workflow, self.selection.as_ref())?;
        let parts = split(objects, &workflow, &services, selected.as_ref());
        Ok(Prepared {
            common: Common {
                empty: parts.iter().all(|p| p.objects.is_empty()),
                models: Arc::new(models),
                hooks,
                workflow,
                partial: selected.is_some(),
                services,
            },
            parts,
        })
    }

    /// The client of `cluster`, unless Kubernetes is off there.
    async fn connect(
        &self,
        common: &Common,
        cluster: &ClusterName,
    ) -> Result<Client, ReconcileError> {
        if let Some(reason) = common.dormant(cluster) {
            return Err(ReconcileError::Dormant(reason));
        }
        let mapped = contexts_of(&common.models.settings);
        Ok(self.clusters.client(cluster, &mapped).await?)
    }

    /// Plans one cluster's objects against it, through `client`.
    async fn plan_part(
        &self,
        common: &Common,
        part: Part,
        client: Client,
        options: PlanOptions,
        cache: Option<&WatchCache>,
    ) -> Result<Planned, ReconcileError> {
        let Part {
            cluster,
            mut objects,
            members,
        } = part;
        let (record, recorded) = read_inventory_existing(&client, &self.inventory).await?;
        let recorded_objects = record.entries.len();
        tracing::debug!(
            recorded = record.entries.len(),
            cluster = cluster.display(),
            "inventory read"
        );
        let options = PlanOptions {
            partial: common.partial,
            ..options
        };
        let mut planning = live::plan(
            &client,
            &self.inventory,
            &common.models.settings.ignore_differences,
            &mut objects,
            record,
            options,
            cache,
        )
        .await?;
        let prune_hold = prune_hold(options.budget, &planning, recorded_objects);
        let hooks = common.hooks_of(members.as_ref());
        let plan = Plan {
            prune_hold,
            hooks: hooks
                .iter()
                .flat_map(|hook| {
                    let key = hook.key();
                    hook.phases
                        .iter()
                        .map(move |phase| format!("{phase} {key}"))
                })
                .collect(),
            warnings: plan_warnings(&self.inventory, &planning, recorded),
            source: common.models.loaded.label.clone(),
            cluster: cluster.several.then(|| cluster.display().to_string()),
            revision: common.models.loaded.revision.clone(),
            // The diffs move to the plan: the apply needs none of them.
            changes: planning
                .steps
                .iter_mut()
                .map(|step| {
                    let diff = std::mem::take(&mut step.change.diff);
                    Change {
                        diff,
                        ..step.change.clone()
                    }
                })
                .collect(),
            prune: options.prune,
            waves: wave_summaries(&common.workflow, members.as_ref()),
            graph: common
                .workflow
                .has_dependencies()
                .then(|| common.workflow.mermaid()),
        };
        Ok(Planned {
            models: common.models.clone(),
            plan: Arc::new(plan),
            objects,
            workflow: common.workflow.clone(),
            members,
            partial: common.partial,
            cluster,
            client,
            steps: planning.steps,
            forgotten: planning.forgotten,
            uids: planning.uids,
            resources: planning.resources,
            // What guards against a wrong path is the whole source rendering nothing:
            // one cluster of several may have no objects left.
            allow_empty: options.allow_empty || !common.empty,
            hooks,
        })
    }

    /// The source's commit, when the remote says it did not move since the cache
    /// last fetched (see [`Repo::unmoved_commit`]).
    pub async fn unmoved_commit(&self) -> Option<String> {
        self.repo.unmoved_commit().await
    }

    /// Where the models come from.
    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// The inventory the reconciler records in.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// Attests what `applied` left in `planned`'s cluster, signed with `key`, kept in
    /// the inventory's namespace (at most `keep` of them): after an apply that changed
    /// something, else nothing is attested.
    pub async fn attest(
        &self,
        planned: &Planned,
        applied: &ApplyReport,
        key: &tether_trust::dsse::RecordKey,
        keep: usize,
        places: attestation::Places,
    ) -> Result<Option<attestation::Kept>, attestation::AttestationError> {
        if !applied.changed() {
            return Ok(None);
        }
        let objects: Vec<&RenderedObject> = planned
            .objects
            .iter()
            .filter(|o| applied.applied(&o.key()))
            .collect();
        let loaded = &planned.models.loaded;
        let deployment = tether_core::attestation::Deployment {
            source: loaded.label.clone(),
            revision: loaded.revision.as_ref().map(|r| r.commit.clone()),
            verified: loaded.verified.as_ref().map(ToString::to_string),
            cluster: planned.cluster.display().to_string(),
            inventory: self.inventory.name.clone(),
            manager: self.inventory.field_manager(),
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let keeping = attestation::Keeping {
            namespace: self.inventory.namespace.clone(),
            inventory: self.inventory.name.clone(),
            keep,
            places,
        };
        attestation::attest(&planned.client, deployment, &objects, key, &keeping)
            .await
            .map(Some)
    }

    /// Where a watch cache of `planned`'s kinds looks. An impersonated identity (a
    /// team's ServiceAccount) has its rights in its namespaces as a rule and may not
    /// watch across the cluster, so it watches each namespace of the plan (and the
    /// inventory's), but not one where the server refused it every object of the
    /// plan: a watch cannot fall back as a list does (see `live`), it would only fail
    /// again and again. The client's own identity watches the cluster.
    pub fn watch_scope(&self, planned: &Planned) -> tether_core::k8s::Scope {
        if self.identity.is_none() {
            return tether_core::k8s::Scope::All;
        }
        let namespaces = planned
            .steps
            .iter()
            .filter(|s| s.refusal.is_none())
            .filter_map(|s| s.change.key.namespace.clone())
            .chain([self.inventory.namespace.clone()]);
        tether_core::k8s::Scope::Namespaces(namespaces.collect())
    }

    /// How `cluster` is reached, for reports (`context edge`).
    pub fn describe(&self, planned_models: &CheckedModels, cluster: &ClusterName) -> String {
        let mapped = contexts_of(&planned_models.settings);
        self.clusters.describe(cluster, &mapped)
    }

    /// Carries out a plan: records every object about to be applied in the inventory,
    /// applies rank by rank, prunes (with `options.prune`), and records the outcome.
    /// `progress` is called after each object with (done, total). An error means the
    /// apply stopped (the inventory could not be written); failures of single objects
    /// are in the report.
    #[instrument(skip_all, fields(changes = planned.steps.len()))]
    pub async fn apply(
        &self,
        planned: &Planned,
        options: &ApplyOptions,
        progress: &(dyn Fn(ApplyProgress<'_>) + Sync),
    ) -> Result<ApplyReport, ReconcileError> {
        if options.prune && planned.objects.is_empty() && !planned.allow_empty {
            return Err(ReconcileError::NothingRendered);
        }
        if options.prune && planned.partial {
            return Err(ReconcileError::PartialPrune);
        }
        let mut report =
            apply::apply(&planned.client, &self.inventory, planned, options, progress).await?;
        if let Some(identity) = &self.identity {
            report.refused_as(identity);
        }
        Ok(report)
    }

    /// Carries out the plan of each cluster that has one, all at once (see
    /// [`Reconciler::apply`]); `None` for a cluster that was not planned. One
    /// cluster's failure leaves the others applied.
    pub async fn apply_clusters(
        &self,
        plans: &[ClusterPlan],
        options: &ApplyOptions,
        progress: &(dyn Fn(&ClusterName, ApplyProgress<'_>) + Sync),
    ) -> Vec<Option<Result<ApplyReport, ReconcileError>>> {
        let applies = plans.iter().map(|cluster| async move {
            let planned = cluster.planned.as_ref().ok()?;
            let progress = |event: ApplyProgress<'_>| progress(&cluster.cluster, event);
            Some(self.apply(planned, options, &progress).await)
        });
        futures::future::join_all(applies).await
    }

    /// Waits until the workloads of the plan are ready by [`tether_core::readiness`]
    /// (Deployments available, StatefulSets and DaemonSets ready, Pods Ready, Jobs
    /// complete), and the objects of kinds with a health check healthy; returns those that were not when `timeout` ran out or that failed,
    /// with their state. `progress` gets those
    /// still waited for, and the number of workloads, after each look.
    pub async fn wait_ready(
        &self,
        planned: &Planned,
        timeout: Duration,
        progress: &wait::WaitProgress<'_>,
    ) -> Result<Vec<(ObjectKey, String)>, ReconcileError> {
        Ok(wait::wait_ready(
            &planned.client,
            &planned.models.health,
            &planned.objects,
            timeout,
            progress,
        )
        .await)
    }
}

/// The plans of every cluster of a source's models.
pub struct ClusterPlans {
    pub models: Arc<CheckedModels>,
    /// One per cluster, in the order of their KubernetesServices' names.
    pub clusters: Vec<ClusterPlan>,
}

/// One cluster's plan, or why it has none (unreachable, refused, switched off).
pub struct ClusterPlan {
    pub cluster: ClusterName,
    pub planned: Result<Planned, ReconcileError>,
}

/// What a plan of each cluster starts from.
struct Prepared {
    common: Common,
    parts: Vec<Part>,
}

/// What every cluster's plan shares.
struct Common {
    models: Arc<CheckedModels>,
    hooks: Vec<Hook>,
    workflow: Workflow,
    partial: bool,
    /// The whole source renders no object.
    empty: bool,
    services: Vec<Service>,
}

impl Common {
    /// The hooks of the models of one cluster's part (all, without parts).
    fn hooks_of(&self, members: Option<&BTreeSet<usize>>) -> Vec<Hook> {
        let taken = |hook: &&Hook| {
            members.is_none_or(|members| {
                let member = self.workflow.member(hook.object.model_id);
                member.is_some_and(|m| members.contains(&m))
            })
        };
        self.hooks.iter().filter(taken).cloned().collect()
    }

    /// Why Kubernetes is off for `cluster`, when its KubernetesService says so.
    fn dormant(&self, cluster: &ClusterName) -> Option<String> {
        self.services
            .iter()
            .find(|s| Some(&s.name) == cluster.service.as_ref())
            .and_then(|s| s.dormant.as_ref())
            .map(|why| format!("Kubernetes is off for this cluster ({why})"))
    }
}

/// One cluster's objects, and the workflow's members they come from (when not all).
struct Part {
    cluster: ClusterName,
    objects: Vec<RenderedObject>,
    members: Option<BTreeSet<usize>>,
}

/// A KubernetesService of the models: a cluster.
#[derive(Clone, Debug)]
pub struct Service {
    pub name: String,
    /// Where it says Kubernetes is off there (`enabled: false`), when it does.
    pub dormant: Option<String>,
}

/// The objects by cluster, in the order of the KubernetesServices' names: every
/// KubernetesService is a part even without objects (so that what its inventory
/// recorded can be pruned), unless a selection chose some models only.
fn split(
    objects: Vec<RenderedObject>,
    workflow: &Workflow,
    services: &[Service],
    selected: Option<&BTreeSet<usize>>,
) -> Vec<Part> {
    let several = services.len() > 1;
    let name = |service: Option<String>| ClusterName { service, several };
    if !several {
        return vec![Part {
            cluster: name(services.first().map(|s| s.name.clone())),
            objects,
            members: selected.cloned(),
        }];
    }
    let mut parts: BTreeMap<Option<String>, Vec<RenderedObject>> = match selected {
        Some(_) => BTreeMap::new(),
        None => services
            .iter()
            .map(|s| (Some(s.name.clone()), Vec::new()))
            .collect(),
    };
    for object in objects {
        let cluster = workflow
            .member(object.model_id)
            .and_then(|m| workflow.members[m].cluster.clone());
        parts.entry(cluster).or_default().push(object);
    }
    parts
        .into_iter()
        .map(|(service, objects)| {
            let members = (0..workflow.members.len())
                .filter(|m| workflow.members[*m].cluster == service)
                .filter(|m| selected.is_none_or(|s| s.contains(m)))
                .collect();
            Part {
                cluster: name(service),
                objects,
                members: Some(members),
            }
        })
        .collect()
}

/// The repository's mapping of KubernetesServices to kubeconfig contexts.
fn contexts_of(settings: &Settings) -> BTreeMap<String, String> {
    settings
        .clusters
        .iter()
        .map(|(service, c)| (service.clone(), c.context.clone()))
        .collect()
}

/// Two KubernetesServices that reach one cluster would share its inventory, and each
/// would prune what the other applied: neither is planned. A cluster is known by its
/// `kube-system` namespace's uid; where that cannot be read (an identity without the
/// right), the cluster is taken for its own.
async fn refuse_shared_clusters(parts: &[Part], clients: &mut [Result<Client, ReconcileError>]) {
    if parts.len() < 2 {
        return;
    }
    let ids = clients.iter().map(|client| async move {
        let client = client.as_ref().ok()?;
        crate::cluster::cluster_id(client).await
    });
    let ids = futures::future::join_all(ids).await;
    for shared in shared_clusters(&ids) {
        let services: Vec<String> = shared
            .iter()
            .map(|i| parts[*i].cluster.display().to_string())
            .collect();
        for i in shared {
            clients[i] = Err(ReconcileError::Cluster(ClusterError::SharedCluster {
                services: services.clone(),
            }));
        }
    }
}

/// The groups (indexes) of equal known ids, where a group has several members.
fn shared_clusters(ids: &[Option<String>]) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        if let Some(id) = id {
            groups.entry(id).or_default().push(i);
        }
    }
    groups.into_values().filter(|g| g.len() > 1).collect()
}

/// The hold on the plan's deletions (and host removals) when they are beyond `budget`
/// or one asks for confirmation (a deletion with a directive: `Prune=confirm`).
fn prune_hold(
    budget: Option<DeletionBudget>,
    planning: &live::Planning,
    recorded: usize,
) -> Option<PruneHold> {
    let deletions: Vec<budget::Deletion> = planning
        .steps
        .iter()
        .filter(|s| matches!(s.change.action, Action::Delete | Action::RemoveHost))
        .map(|s| budget::Deletion {
            key: &s.change.key,
            uid: planning.uids.get(&s.change.key).map(String::as_str),
            confirm: s.change.directive.is_some(),
        })
        .collect();
    budget::hold(budget, &deletions, recorded)
}

/// What a reviewer should know besides the changes: a missing inventory, nodes not
/// in the cluster yet.
fn plan_warnings(inventory: &Inventory, planning: &live::Planning, recorded: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    if !recorded && planning.labelled > 0 {
        warnings.push(format!(
            "the inventory {} does not exist, but {} objects carry its labels: was it deleted? What it recorded and no model renders is not pruned",
            inventory.display(),
            planning.labelled
        ));
    }
    for absent in planning
        .steps
        .iter()
        .filter(|s| s.change.action == Action::Absent)
    {
        warnings.push(format!(
            "node {} is not in the cluster: its model's labels, taints and lock are applied once it joins",
            absent.change.key.name
        ));
    }
    warnings
}

/// What valid models render: the objects in apply order, the workflow, and the
/// KubernetesServices (clusters) they belong to.
pub struct Rendered {
    pub objects: Vec<RenderedObject>,
    /// The Argo CD hooks, made by an apply that runs them ([`tether_core::hook`]).
    pub hooks: Vec<Hook>,
    pub workflow: Workflow,
    pub services: Vec<Service>,
}

/// The objects of the selected models, and the members of the workflow they come
/// from; all objects without a selection.
fn select(
    objects: Vec<RenderedObject>,
    workflow: &Workflow,
    selection: Option<&Selection>,
) -> Result<(Vec<RenderedObject>, Option<BTreeSet<usize>>), ReconcileError> {
    let Some(selection) = selection.filter(|s| !s.models.is_empty()) else {
        return Ok((objects, None));
    };
    let named = selection
        .models
        .iter()
        .map(|m| workflow.find(m))
        .collect::<Result<Vec<usize>, String>>()
        .map_err(ReconcileError::Selection)?;
    let taken = workflow.closure(&named, selection.skip_dependencies);
    let objects = objects
        .into_iter()
        .filter(|o| {
            workflow
                .member(o.model_id)
                .is_some_and(|m| taken.contains(&m))
        })
        .collect();
    Ok((objects, Some(taken)))
}

/// What each wave waits for, as reports show it; none when no model waits.
fn wave_summaries(workflow: &Workflow, selected: Option<&BTreeSet<usize>>) -> Vec<WaveSummary> {
    if !workflow.has_dependencies() {
        return Vec::new();
    }
    (0..workflow.wave_count())
        .map(|wave| WaveSummary {
            waits_for: workflow
                .gates(wave, selected)
                .iter()
                .map(|g| match g.external {
                    true => format!("{} (in the cluster)", g.gate.describe()),
                    false => g.gate.describe(),
                })
                .collect(),
        })
        .collect()
}

/// Do the models have a chart, whose templates may ask what the cluster serves?
fn needs_capabilities(loaded: &LoadedModels) -> bool {
    loaded
        .files
        .iter()
        .any(|(_, f)| f.text.contains(tether_core::model::Kind::HelmChart.name()))
}

/// Why Kubernetes is off for a repository: its settings say so, or its only
/// KubernetesService model does (StarlingX's "a system without Kubernetes behaves as
/// if the feature did not exist"). With several, each one's cluster is off apart
/// ([`services`]).
fn dormant(settings: &Settings, services: &[Service]) -> Option<String> {
    if settings.kubernetes.enabled == Some(false) {
        return Some(format!(
            "Kubernetes is off for this repository ({SETTINGS_FILE}: kubernetes.enabled: false)"
        ));
    }
    match services {
        [only] => only
            .dormant
            .as_ref()
            .map(|why| format!("Kubernetes is off for this repository ({why})")),
        _ => None,
    }
}

/// The KubernetesServices of the models, by name, with why each is off when it is.
fn services(
    graph: Option<&tether_core::resolve::Graph>,
    files: &tether_core::source::SourceFiles,
) -> Vec<Service> {
    let Some(graph) = graph else {
        return Vec::new();
    };
    let mut services: Vec<Service> = graph
        .models
        .kubernetes_services
        .iter()
        .map(|service| Service {
            name: service.name.value.clone(),
            dormant: service
                .enabled
                .as_ref()
                .filter(|_| !service.is_enabled())
                .map(|e| {
                    format!(
                        "KubernetesService {} has enabled: false, at {}:{}:{}",
                        service.name.value,
                        files.shown_path(e.span.file),
                        e.span.line,
                        e.span.column
                    )
                }),
        })
        .collect();
    services.sort_by(|a, b| a.name.cmp(&b.name));
    services
}

/// Builds the objects of loaded models: prepares them, builds their kustomizations
/// and charts (by `generate`, for the cluster `capabilities` describes when known),
/// completes and renders them. Returns the models with every check's diagnostics
/// (syntax to references, and the confinement: the Source's, when the daemon gives
/// one, narrowed by the repository's), and the objects when there is no error.
#[instrument(skip_all)]
pub async fn build(
    loaded: LoadedModels,
    inventory: &Inventory,
    generate: &Generate,
    capabilities: Option<&Capabilities>,
    source: Option<&SourceConfinement>,
    source_health: &HealthChecks,
) -> Result<(CheckedModels, Option<Rendered>), ReconcileError> {
    let settings = match &loaded.settings {
        Some(text) => settings::parse(SETTINGS_FILE, text)?,
        None => Settings::default(),
    };
    let health = HealthChecks::compile(SETTINGS_FILE, &settings.health_check_exprs)?
        .then(source_health)
        .with_library();
    tether_core::ignore::check(SETTINGS_FILE, &settings.ignore_differences)?;
    let prepared = tether_core::prepare(&loaded.files, settings.kustomize.remote_bases);
    let generated = if prepared.generators.is_empty() {
        Vec::new()
    } else {
        let (generate, generators, tree) = (
            generate.clone(),
            prepared.generators.clone(),
            loaded.tree.clone(),
        );
        let revision = loaded
            .revision
            .as_ref()
            .filter(|r| !r.dirty)
            .map(|r| r.commit.clone());
        let capabilities = capabilities.cloned();
        tokio::task::spawn_blocking(move || {
            generate.run(
                &generators,
                &tree,
                revision.as_deref(),
                capabilities.as_ref(),
            )
        })
        .await
        .map_err(|e| RepoError::Interrupted(e.to_string()))?
    };
    let analysis = tether_core::complete(prepared, &loaded.files, generated);
    let services = services(analysis.graph.as_ref(), &loaded.files);
    let dormant = dormant(&settings, &services);
    let mut diagnostics = analysis.diagnostics;
    if loaded.sops_rules {
        diagnostics.extend(tether_sops::plain_secret_values(
            &loaded.files,
            loaded.plain_secrets_are_errors,
        ));
    }
    let mut objects = analysis.graph.map(|graph| Rendered {
        objects: render(&graph, &loaded.files, inventory),
        hooks: tether_core::hook::hooks(render_hooks(&graph, &loaded.files, inventory)),
        workflow: graph.workflow,
        services,
    });
    if let Some(rendered) = &objects {
        let repository = settings.confine.as_ref().map(Confinement::from);
        diagnostics.extend(confine::check(
            &rendered.objects,
            source,
            repository.as_ref(),
        ));
    }
    if diagnostics.has_errors() {
        objects = None;
    }
    let checked = CheckedModels {
        loaded,
        diagnostics,
        documents: analysis.documents,
        dormant,
        settings,
        health,
    };
    Ok((checked, objects))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clusters_with_one_id_are_shared_and_unknown_ids_are_not() {
        let ids = |list: &[Option<&str>]| -> Vec<Option<String>> {
            list.iter().map(|id| id.map(str::to_string)).collect()
        };
        assert_eq!(
            super::shared_clusters(&ids(&[Some("a"), Some("b"), Some("a"), None, None])),
            vec![vec![0, 2]]
        );
        assert!(super::shared_clusters(&ids(&[Some("a"), Some("b"), None])).is_empty());
    }
}
