//! How a pass is asked for: the models selected ([`Selection`]), how a plan and an
//! apply treat what they find ([`PlanOptions`], [`ApplyOptions`]), and what an apply
//! tells its caller as it goes ([`ApplyProgress`]).

use std::time::Duration;

use tether_core::inventory::budget::DeletionBudget;
use tether_core::k8s::ObjectKey;
use tokio_util::sync::CancellationToken;

use super::in_flight;
use crate::cluster::{Reads, Tenure};

/// Some models only (`--only`): those and what they wait for and require, or with
/// `skip_dependencies`, those alone (what they wait for must still be ready).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `Kind/name`, or `name` when one model has it.
    pub models: Vec<String>,
    pub skip_dependencies: bool,
}

/// What an apply tells its caller as it goes.
#[derive(Clone, Copy, Debug)]
pub enum ApplyProgress<'a> {
    /// `done` of `total` objects applied or pruned.
    Applied { done: usize, total: usize },
    /// Before wave `wave` (0-based) of `waves`: what is not ready yet, and why.
    Waiting {
        wave: usize,
        waves: usize,
        not_ready: &'a [(ObjectKey, String)],
    },
}

/// How an apply treats what the plan found.
#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    /// Delete the objects whose model is gone.
    pub prune: bool,
    /// Take fields that other field managers own.
    pub force_conflicts: bool,
    /// Take back the fields of drift (see [`tether_core::plan::Change::drift`]): changed in
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
    /// The digest of the deletions a person approved, for a prune beyond the
    /// deletion budget ([`tether_core::plan::Plan::prune_hold`]).
    pub approved_deletions: Option<String>,
    /// How long a wave of the workflow waits for what it needs (default five
    /// minutes); then the apply stops there.
    pub wave_timeout: Option<Duration>,
    /// Stops the apply between objects (a Source deleted, suspended or changed while
    /// its pass applies): the objects already sent finish, no other is applied or
    /// pruned, and the inventory keeps every object that may exist
    /// ([`ApplyReport::stopped`](super::outcome::ApplyReport::stopped)).
    pub stop: CancellationToken,
    /// How many writes it keeps in flight.
    pub writes: Writes,
    /// The stretch of this process's right to write that the apply began in (see
    /// [`Tenure`]): once it ends, the apply stops as it does on `stop`, and writes no
    /// inventory record either.
    pub fence: Tenure,
}

/// How many writes an apply keeps in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writes {
    /// 16: a long-running daemon's passes share the server with other clients, and at
    /// most these are on their way when its fence closes.
    #[default]
    Shared,
    /// 64: what the server takes fastest (a one-off apply from the command line).
    Fastest,
}

impl Writes {
    pub(super) fn in_flight(self) -> usize {
        match self {
            Writes::Shared => in_flight::WRITES_SHARED,
            Writes::Fastest => in_flight::WRITES_FASTEST,
        }
    }
}

/// How a plan treats what the inventory recorded and the source no longer renders.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanOptions {
    /// Deletions will be carried out (the reports say so).
    pub prune: bool,
    /// Only some models are planned (a [`Selection`]): nothing is planned for
    /// deletion, since what is not selected is not gone.
    pub partial: bool,
    /// A source that renders nothing may prune everything the inventory recorded.
    pub allow_empty: bool,
    /// Ask the server's dry run about new objects too, so that a refusal shows in the
    /// plan (for a review); an apply learns it from the apply and saves the round trips.
    pub dry_run_new: bool,
    /// What the plan's lists read (the kinds a watch cache has not synced): the
    /// newest state, or the API server's cache (a long-running daemon's passes).
    pub reads: Reads,
    /// How much a prune may delete before a person approves it; `None`: no bound.
    pub budget: Option<DeletionBudget>,
}
