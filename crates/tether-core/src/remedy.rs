//! What a user can do about a report or an error, typed: the libraries say which
//! remedy applies, and only the front end words it (the CLI names its own flags and
//! commands: `src/cli/terminal.rs`), so that no library names a CLI flag
//! (`tests/architecture.rs`).

/// One thing the user can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// Deletions, releases and host removals happen only when pruning is asked for.
    Prune,
    /// A prune beyond the deletion budget: approve exactly its deletions by their
    /// digest (or fix the commit).
    ApproveDeletions,
    /// Prune although the source renders nothing (every object of the inventory goes).
    AllowEmpty,
    /// No cluster was found: name one.
    GiveCluster,
    /// A KubernetesService's cluster has no kubeconfig context of its name: map it
    /// to one.
    MapCluster,
    /// The inventory is another's: record this source's objects under another name.
    ChooseAnotherInventory,
    /// The inventory's namespace does not exist.
    CreateInventoryNamespace,
    /// The inventory's name is not a valid ConfigMap name.
    ValidInventoryName,
    /// A reference that is no branch, tag or full commit id of the repository.
    GiveBranchTagOrCommit,
    /// A checkout on no branch: name the branch to commit to.
    GiveBranch,
    /// A proposal's branch exists already at the remote.
    ChooseAnotherProposalBranch,
    /// A container cannot be restarted in place (exec refused).
    RecreateInstead,
    /// Nothing makes the pod again if it is deleted.
    DeleteItYourself,
    /// The object is not tether's: change it where it is managed, or take it over.
    ChangeWhereManaged,
    /// No such slice among the models.
    ListModels,
    /// A host without a Node model is not managed.
    AddNodeModel,
    /// The repo has several KubernetesServices: say which one the cluster is.
    NameKubernetesService,
}

/// How a front end names each [`Remedy`] inside a sentence of a report.
pub type RemedyNames = fn(Remedy) -> &'static str;
