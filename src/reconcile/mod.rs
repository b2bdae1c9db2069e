//! The reconcile pass, as a library type the CLI and the daemon drive alike: a
//! [`Reconciler`] reads its source, checks and renders the models, plans against the
//! cluster ([`live`]: list, compare, dry-run), and applies the plan ([`apply`]:
//! server-side apply in dependency order, then prune), reporting each object's
//! [`outcome`]. What to record and what to prune is decided by the pure
//! [`crate::inventory`]; this module carries it out.

mod apply;
pub mod cache;
mod contents;
mod live;
pub mod outcome;
mod wait;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::Client;
use thiserror::Error;
use tokio::sync::OnceCell;
use tracing::instrument;

use crate::cluster::{ClusterError, Resources, Target, connect, read_inventory_version};
use crate::config::settings::{self, Settings, SettingsError};
use crate::confine::{self, Confinement};
use crate::diagnostic::Diagnostics;
use crate::inventory::Provenance;
use crate::k8s::ObjectKey;
use crate::ownership::Inventory;
use crate::plan::{Change, Plan};
use crate::render::{RenderedObject, render};
use crate::repo::{LoadedModels, Repo, RepoError, SETTINGS_FILE};
pub use cache::WatchCache;
pub use outcome::{ApplyReport, ObjectFailure, ObjectReport, Outcome};
pub use wait::WaitProgress;

/// Reconciles one source with one cluster, recording in one inventory. Holds its
/// client once connected, so a long-running caller connects once.
pub struct Reconciler {
    repo: Repo,
    target: Target,
    inventory: Inventory,
    client: OnceCell<Client>,
}

/// How an apply treats what the plan found.
#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    /// Delete the objects whose model is gone.
    pub prune: bool,
    /// Take fields that other field managers own.
    pub force_conflicts: bool,
    /// Take back the fields of drift (see [`crate::plan::Change::drift`]): changed in
    /// place by another writer on an object this inventory applied.
    pub correct_drift: bool,
    /// Take objects that belong to another tether inventory (dangerous: that
    /// inventory loses them).
    pub take_ownership: bool,
    /// Delete a Namespace even when it holds objects this inventory did not create
    /// (dangerous: they go with it).
    pub delete_foreign_objects: bool,
    /// Delete adopted objects whose model is gone, instead of releasing them.
    pub delete_adopted: bool,
}

/// How a plan treats what the inventory recorded and the source no longer renders.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanOptions {
    /// Deletions will be carried out (the reports say so).
    pub prune: bool,
    /// A source that renders nothing may prune everything the inventory recorded.
    pub allow_empty: bool,
    /// Ask the server's dry run about new objects too, so that a refusal shows in the
    /// plan (for a review); an apply learns it from the apply and saves the round trips.
    pub dry_run_new: bool,
}

#[derive(Debug, Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Source(#[from] RepoError),
    #[error("{}: {}", .0.path, .0.message)]
    Settings(#[from] SettingsError),
    /// The models have errors: nothing is compared or applied.
    #[error("the models are invalid")]
    Invalid(Box<CheckedModels>),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A prune was asked of a source that renders no object: a wrong path more often
    /// than a wish to delete everything.
    #[error("the source renders no object, so nothing was applied or pruned")]
    NothingRendered,
}

/// Models read and checked: the files, every diagnostic, and where they came from.
#[derive(Debug)]
pub struct CheckedModels {
    pub loaded: LoadedModels,
    pub diagnostics: Diagnostics,
    /// How many models (documents) were read.
    pub documents: usize,
}

/// A plan, and what carrying it out needs.
pub struct Planned {
    pub models: CheckedModels,
    pub plan: Plan,
    /// The rendered objects, in apply order.
    pub objects: Vec<RenderedObject>,
    steps: Vec<Step>,
    forgotten: BTreeSet<ObjectKey>,
    uids: BTreeMap<ObjectKey, String>,
    resources: Resources,
    allow_empty: bool,
}

impl Planned {
    /// The API resources of the kinds the plan touches (as discovery found them).
    pub fn resources(&self) -> &Resources {
        &self.resources
    }
}

/// One change and the body to apply (none for deletions and errors).
struct Step {
    change: Change,
    desired: Option<serde_json::Value>,
    /// Apply with force: fields other managers own are set to the values they have.
    force: bool,
    /// A merge patch of the object's managed fields to send before applying: the
    /// hand-over of fields `kubectl apply` set client-side (see
    /// [`crate::managed_fields`]).
    hand_over: Option<serde_json::Value>,
    /// How the object comes into the inventory if it is not recorded yet.
    provenance: Option<Provenance>,
}

impl Reconciler {
    pub fn new(repo: Repo, target: Target, inventory: Inventory) -> Self {
        Reconciler {
            repo,
            target,
            inventory,
            client: OnceCell::new(),
        }
    }

    /// Uses `client` instead of connecting to the target (a daemon shares one client
    /// among its sources).
    pub fn with_client(self, client: Client) -> Self {
        Reconciler {
            client: OnceCell::new_with(Some(client)),
            ..self
        }
    }

    /// The client, connecting on first use.
    pub async fn client(&self) -> Result<&Client, ClusterError> {
        self.client.get_or_try_init(|| connect(&self.target)).await
    }

    /// Reads and checks the models, and compares what they render with the cluster.
    /// `prune` only tells the plan's reports whether deletions will be carried out.
    /// Invalid models are reported before any cluster error: they make the cluster
    /// irrelevant.
    pub async fn plan(&self, options: PlanOptions) -> Result<Planned, ReconcileError> {
        self.plan_cached(options, None).await
    }

    /// [`Reconciler::plan`], reading the live objects of the kinds `cache` watches
    /// from it instead of listing them.
    #[instrument(skip_all, fields(source = %self.repo.label()))]
    pub async fn plan_cached(
        &self,
        options: PlanOptions,
        cache: Option<&WatchCache>,
    ) -> Result<Planned, ReconcileError> {
        // The models and the cluster do not depend on each other: both at once.
        let models = async {
            let loaded = self.repo.load().await?;
            check(loaded, &self.inventory)
        };
        let cluster = async {
            let client = self.client().await?;
            let (record, version) = read_inventory_version(client, &self.inventory).await?;
            tracing::debug!(recorded = record.entries.len(), "inventory read");
            Ok::<_, ReconcileError>((client, record, version.is_some()))
        };
        let (models, cluster) = tokio::join!(models, cluster);
        let (models, objects) = models?;
        let Some(mut objects) = objects else {
            return Err(ReconcileError::Invalid(Box::new(models)));
        };
        let (client, record, recorded) = cluster?;
        let revision = models.loaded.revision.clone();
        let planning = live::plan(
            client,
            &self.inventory,
            &mut objects,
            record,
            options,
            cache,
        )
        .await?;
        let mut warnings = Vec::new();
        if !recorded && planning.labelled > 0 {
            warnings.push(format!(
                "the inventory {} does not exist, but {} objects carry its labels: was it deleted? What it recorded and no model renders is not pruned",
                self.inventory.display(),
                planning.labelled
            ));
        }
        let plan = Plan {
            warnings,
            source: models.loaded.label.clone(),
            revision,
            changes: planning.steps.iter().map(|s| s.change.clone()).collect(),
            prune: options.prune,
        };
        Ok(Planned {
            models,
            plan,
            objects,
            steps: planning.steps,
            forgotten: planning.forgotten,
            uids: planning.uids,
            resources: planning.resources,
            allow_empty: options.allow_empty,
        })
    }

    /// The source's commit, when the remote says it did not move since the cache
    /// last fetched (see [`Repo::unmoved_commit`]).
    pub async fn unmoved_commit(&self) -> Option<String> {
        self.repo.unmoved_commit().await
    }

    /// The inventory the reconciler records in.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
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
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<ApplyReport, ReconcileError> {
        if options.prune && planned.objects.is_empty() && !planned.allow_empty {
            return Err(ReconcileError::NothingRendered);
        }
        let client = self.client().await?;
        Ok(apply::apply(client, &self.inventory, planned, options, progress).await?)
    }

    /// Waits until the workloads of the plan are ready (Deployments available,
    /// StatefulSets and DaemonSets ready, Pods running, Jobs complete); returns those
    /// that were not when `timeout` ran out, with their state. `progress` gets those
    /// still waited for, and the number of workloads, after each look.
    pub async fn wait_ready(
        &self,
        planned: &Planned,
        timeout: Duration,
        progress: &wait::WaitProgress<'_>,
    ) -> Result<Vec<(ObjectKey, String)>, ReconcileError> {
        let client = self.client().await?;
        Ok(wait::wait_ready(client, &planned.objects, timeout, progress).await)
    }
}

/// The offline checks of loaded models (syntax to references, and the repository's
/// confinement), and the rendered objects when there is no error.
#[instrument(skip_all)]
pub fn check(
    loaded: LoadedModels,
    inventory: &Inventory,
) -> Result<(CheckedModels, Option<Vec<RenderedObject>>), ReconcileError> {
    let settings = match &loaded.settings {
        Some(text) => settings::parse(SETTINGS_FILE, text)?,
        None => Settings::default(),
    };
    let analysis = crate::analyze(&loaded.files);
    let mut diagnostics = analysis.diagnostics;
    let mut objects = analysis
        .graph
        .as_ref()
        .map(|graph| render(graph, &loaded.files, inventory));
    if let (Some(confine), Some(rendered)) = (&settings.confine, &objects) {
        diagnostics.extend(confine::check(rendered, &Confinement::from(confine)));
        if diagnostics.has_errors() {
            objects = None;
        }
    }
    let checked = CheckedModels {
        loaded,
        diagnostics,
        documents: analysis.documents,
    };
    Ok((checked, objects))
}
