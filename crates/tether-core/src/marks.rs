//! Every label, annotation and taint tether writes or reads on Kubernetes objects, in
//! one table: what each is, what it is on, and what it means. The book's reference page
//! (`tether reference`) is generated from it. The core's own constants are the table's
//! names; the other crates' are written here, and the reference's drift test finds
//! every such name in the code and fails when one is missing.

use crate::directive;
use crate::events::ACTION_ANNOTATION;
use crate::generate::HOOK_REVISION_ANNOTATION;
use crate::host::TAINTS_ANNOTATION;
use crate::model::LOCK_TAINT_KEY;
use crate::ownership::{
    APPLYSET_ID_LABEL, HOOK_OF_LABEL, MANAGED_BY_LABEL, MODEL_ANNOTATION, PART_OF_LABEL,
    SHARD_OF_LABEL, SOURCE_ANNOTATION,
};
use crate::plan::APPLIED_HASH_ANNOTATION;
use crate::render::{
    CONFIG_HASH_ANNOTATION, DESCRIPTION_ANNOTATION, RESTARTED_AT_ANNOTATION, SERVICE_LABEL,
    SLICE_LABEL,
};

/// What a mark is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    Label,
    Annotation,
    Taint,
}

impl MarkKind {
    pub fn name(self) -> &'static str {
        match self {
            MarkKind::Label => "label",
            MarkKind::Annotation => "annotation",
            MarkKind::Taint => "taint",
        }
    }
}

/// One label, annotation or taint key.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    pub name: &'static str,
    pub kind: MarkKind,
    /// The objects that carry it.
    pub on: &'static str,
    pub meaning: &'static str,
}

const fn mark(name: &'static str, kind: MarkKind, on: &'static str, meaning: &'static str) -> Mark {
    Mark {
        name,
        kind,
        on,
        meaning,
    }
}

/// Every mark, labels first, each kind by name.
pub const MARKS: &[Mark] = &[
    mark(
        "tether.dev/attestation-of",
        MarkKind::Label,
        "the ConfigMaps of deployment attestations (a Source's `spec.attestation`, or an attested `tether apply`)",
        "The inventory attested: `tether verify` reads its newest; the oldest beyond the bound are deleted.",
    ),
    mark(
        MANAGED_BY_LABEL,
        MarkKind::Label,
        "every object tether applies; inventory records; fleet objects; member Leases",
        "`tether`: what tether manages.",
    ),
    mark(
        "app.kubernetes.io/name",
        MarkKind::Label,
        "every object `tether install` makes, and the daemon's pods",
        "`tether`: the daemon's Service and StatefulSet select its pods by it.",
    ),
    mark(
        "app.kubernetes.io/part-of",
        MarkKind::Label,
        "every object `tether install` makes",
        "`tether`: what `tether uninstall` and `tether check` find.",
    ),
    mark(
        "app.kubernetes.io/version",
        MarkKind::Label,
        "the daemon's StatefulSet",
        "The daemon's version, as `tether check` and `tether version` read it.",
    ),
    mark(
        APPLYSET_ID_LABEL,
        MarkKind::Label,
        "an inventory's record (its head ConfigMap)",
        "The inventory's ApplySet id.",
    ),
    mark(
        PART_OF_LABEL,
        MarkKind::Label,
        "every object tether applies",
        "The ApplySet id of the inventory that applied it: which Source (or `tether apply`) owns it.",
    ),
    mark(
        "fleet.tether.dev/cluster",
        MarkKind::Label,
        "what `tether fleet join` makes in the hub",
        "The cluster's name.",
    ),
    mark(
        SHARD_OF_LABEL,
        MarkKind::Label,
        "the shards of an inventory's record",
        "The ApplySet id of the inventory the shard belongs to, so that orphaned shards are found.",
    ),
    mark(
        "tether.dev/member-of",
        MarkKind::Label,
        "the member Leases of a sharded daemon",
        "The group (the daemon's Lease name): two daemons in one namespace never count each other.",
    ),
    mark(
        SERVICE_LABEL,
        MarkKind::Label,
        "the pods of a slice with a service",
        "The service's name: what its Kubernetes Service selects (as in XOS).",
    ),
    mark(
        SLICE_LABEL,
        MarkKind::Label,
        "the pods of a slice",
        "The slice's name: its controller's selector, and XOS's slice name.",
    ),
    mark(
        "applyset.kubernetes.io/contains-group-kinds",
        MarkKind::Annotation,
        "an inventory's record",
        "The kinds of the objects the inventory holds (ApplySet).",
    ),
    mark(
        "applyset.kubernetes.io/tooling",
        MarkKind::Annotation,
        "an inventory's record",
        "`tether/vVERSION` (ApplySet).",
    ),
    mark(
        directive::ARGO_SYNC_OPTIONS,
        MarkKind::Annotation,
        "any object tether applies (read only)",
        "Argo CD's per-object sync options: `Prune=false`, `Delete=false` keep it from prune; `Prune=confirm` holds the prune until a person approves its deletions; `Replace=true` makes it again when a change cannot be made in place. See the guide to Flux and Argo CD annotations.",
    ),
    mark(
        directive::ARGO_SYNC_WAVE,
        MarkKind::Annotation,
        "any object tether applies (read only)",
        "Argo CD's sync-wave, an integer (0 when absent): every object of a lower sync-wave is applied, and ready, before any of a higher one, together with the waves of `depends_on`.",
    ),
    mark(
        directive::ARGO_HOOK,
        MarkKind::Annotation,
        "objects of plain files and kustomizations (read only)",
        "Argo CD's hook phases (`PreSync`, `Sync`, `PostSync`, `SyncFail`, comma-separated): the object is made anew by each apply that changes something, in its phase, never recorded in the inventory nor pruned; it may have only a `generateName`. `Skip`: never applied.",
    ),
    mark(
        directive::ARGO_HOOK_DELETE_POLICY,
        MarkKind::Annotation,
        "Argo CD hooks (read only)",
        "When a hook's object is deleted: `BeforeHookCreation` (the default: the object of its name before it is made again), `HookSucceeded`, `HookFailed`.",
    ),
    mark(
        HOOK_OF_LABEL,
        MarkKind::Label,
        "Argo CD hook objects tether made",
        "The ApplySet id of the inventory whose apply made the hook. Not `applyset.kubernetes.io/part-of`: a hook is not one of the inventory's objects, and prune never deletes it.",
    ),
    mark(
        "kubectl.kubernetes.io/last-applied-configuration",
        MarkKind::Annotation,
        "objects applied earlier by `kubectl apply` (read only)",
        "Masked in diffs of Secrets: it holds their values in plain text.",
    ),
    mark(
        directive::FLUX_FORCE,
        MarkKind::Annotation,
        "any object tether applies (read only)",
        "`enabled`: made again when the server refuses a change as immutable.",
    ),
    mark(
        directive::FLUX_PRUNE,
        MarkKind::Annotation,
        "any object tether applies (read only; the live object's)",
        "`disabled`: never deleted; prune releases it.",
    ),
    mark(
        directive::FLUX_RECONCILE,
        MarkKind::Annotation,
        "any object tether applies (read only)",
        "`disabled`: as `kustomize.toolkit.fluxcd.io/ssa: Ignore`.",
    ),
    mark(
        directive::FLUX_SSA,
        MarkKind::Annotation,
        "any object tether applies (read only)",
        "`Merge`: kubectl's client-side fields stay kubectl's; `IfNotPresent`: created when absent, then skipped; `Ignore`: never applied.",
    ),
    mark(
        ACTION_ANNOTATION,
        MarkKind::Annotation,
        "a pod a day-2 action was taken on (`tether recreate`, `tether restart-containers`)",
        "What was done, when and by whom (`recreate at TIME by USER`); `tether events` carries it.",
    ),
    mark(
        "tether.dev/address",
        MarkKind::Annotation,
        "the member Lease of a sharded daemon's replica",
        "Where the replica's webhooks are reached, so that the others pass theirs on to it.",
    ),
    mark(
        APPLIED_HASH_ANNOTATION,
        MarkKind::Annotation,
        "every object tether applies",
        "The hash of the rendered body it was last applied from: an object already as rendered is not sent again.",
    ),
    mark(
        HOOK_REVISION_ANNOTATION,
        MarkKind::Annotation,
        "the pod template of a chart's hook Job",
        "Changes with the chart's objects, so that the hook runs again, as Helm runs hooks on every upgrade.",
    ),
    mark(
        CONFIG_HASH_ANNOTATION,
        MarkKind::Annotation,
        "the pod template of a slice that mounts ConfigMaps or Secrets",
        "A hash of their content (as Helm charts' `checksum/config`): a changed file rolls the pods.",
    ),
    mark(
        DESCRIPTION_ANNOTATION,
        MarkKind::Annotation,
        "objects rendered from a model with a `description`",
        "The model's description.",
    ),
    mark(
        "tether.dev/inventory",
        MarkKind::Annotation,
        "an inventory's record (its head ConfigMap)",
        "The inventory's name (the ConfigMap is `tether-inventory-NAME`, shortened with a hash when too long).",
    ),
    mark(
        MODEL_ANNOTATION,
        MarkKind::Annotation,
        "every object tether applies",
        "`Kind/name` of the model it was rendered from.",
    ),
    mark(
        "tether.dev/moved-from",
        MarkKind::Annotation,
        "an inventory's record, while it is being moved",
        "The record it was moved from, which may still exist if the move was interrupted.",
    ),
    mark(
        "tether.dev/prune",
        MarkKind::Annotation,
        "a Namespace, CustomResourceDefinition or PersistentVolumeClaim (written by its author, read only)",
        "`with-contents`: prune may delete it with what it holds (the Namespace's objects, the definition's custom resources, the claim's volume); without it, prune keeps a claim, and a Namespace or definition holding objects this inventory did not create.",
    ),
    mark(
        "tether.dev/approve-deletions",
        MarkKind::Annotation,
        "a Source (`tether approve`, the page's Approve)",
        "The digest of exactly the deletions a person approved, of a prune the Source holds beyond its deletion budget (`spec.deletionBudget`); a plan whose deletions differ stays held.",
    ),
    mark(
        "tether.dev/reconcile-requested-at",
        MarkKind::Annotation,
        "a Source (`tether reconcile`)",
        "When a pass was requested; the daemon echoes it in `status.lastHandledReconcileAt` when the pass is done.",
    ),
    mark(
        RESTARTED_AT_ANNOTATION,
        MarkKind::Annotation,
        "the pod template of a slice restarted with `tether restart`",
        "The slice's `restarted_at`, as `kubectl rollout restart` writes `kubectl.kubernetes.io/restartedAt`.",
    ),
    mark(
        SOURCE_ANNOTATION,
        MarkKind::Annotation,
        "every object tether applies",
        "The model's file, relative to the models root.",
    ),
    mark(
        TAINTS_ANNOTATION,
        MarkKind::Annotation,
        "a Node tether manages",
        "The taints tether set, as a JSON list: tether removes only those.",
    ),
    mark(
        LOCK_TAINT_KEY,
        MarkKind::Taint,
        "a locked host's Node (`locked: true`, `tether node lock`)",
        "`NoExecute`: the host's pods are evicted and no new ones are placed.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mark_is_listed_once() {
        let mut names: Vec<&str> = MARKS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a mark is listed twice");
    }
}
