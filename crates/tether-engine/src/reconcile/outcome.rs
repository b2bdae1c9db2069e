//! What an apply did, object by object: the typed report that the CLI prints and the
//! daemon will put in a Source's status. Pure.

use thiserror::Error;

use tether_core::directive::HookPhase;
use tether_core::inventory::budget::PruneHold;
use tether_core::inventory::contents::Guard;
use tether_core::k8s::ObjectKey;
use tether_core::plan::FieldConflict;

/// What happened to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Configured,
    Unchanged,
    Pruned,
    /// Its model is gone and tether had adopted it: tether's labels and field
    /// ownership were removed, the object kept.
    Released,
    /// Its model is gone, but the apply did not prune.
    Prunable,
    /// Deleted and created again: a field the server does not let change changed.
    Replaced,
    Failed(ObjectFailure),
}

/// Why an object was not applied or pruned.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ObjectFailure {
    /// Another field manager owns fields the apply would set; forcing takes them.
    #[error("conflict: {}", fields(.0))]
    Conflict(Vec<FieldConflict>),
    /// The server refused the object (invalid): the same apply fails again.
    #[error("{message}")]
    Refused { code: u16, message: String },
    /// The identity tether acts as may not do this to the object (the API server's
    /// 403, RBAC), or the cluster's policy denies it (a ValidatingAdmissionPolicy, an
    /// admission webhook): `verb` is what tether was doing (apply, delete), `identity`
    /// who it acted as (a Source's ServiceAccount; none for the client's own user).
    #[error("{verb} refused{}: {message}", as_identity(.identity.as_deref()))]
    Forbidden {
        verb: &'static str,
        identity: Option<String>,
        message: String,
    },
    /// The server was busy or not ready for it after every retry.
    #[error("{message}")]
    Unavailable { message: String },
    /// The server stopped answering; the object was not sent.
    #[error("not applied: the API server stopped answering")]
    Unreachable,
    /// The request failed on tether's side (a kind the server does not serve, a
    /// body it could not send).
    #[error("{message}")]
    Request { message: String },
    /// The deletion of a pruned object failed.
    #[error("prune: {message}")]
    Prune { message: String, retryable: bool },
    /// The object belongs to another tether inventory: it was not sent.
    #[error("owned by the tether inventory {inventory}")]
    OwnedByInventory { inventory: String },
    /// A deletion that would take more than this inventory made (a Namespace's or a
    /// definition's objects, a claim's volume): kept.
    #[error("{0}")]
    Kept(Guard),
    /// A deletion of a prune beyond the deletion budget that nobody approved: kept.
    #[error("held: the prune is beyond the deletion budget")]
    PruneHeld,
    /// The object could not be planned (its dry run was refused): it was not sent.
    #[error("not applied: {message}")]
    Unplanned { message: String },
    /// A host removal stopped (a disruption budget that did not allow the eviction
    /// in time, a refusal): the node stays, cordoned, for the next prune.
    #[error("host removal: {message}")]
    HostKept { message: String },
}

fn as_identity(identity: Option<&str>) -> String {
    identity.map(|i| format!(" for {i}")).unwrap_or_default()
}

fn fields(conflicts: &[FieldConflict]) -> String {
    conflicts
        .iter()
        .map(|c| format!("{} (owned by {})", c.field, c.manager))
        .collect::<Vec<_>>()
        .join(", ")
}

impl ObjectFailure {
    /// Can the same apply, tried again later, succeed without anyone changing anything?
    pub fn retryable(&self) -> bool {
        match self {
            ObjectFailure::Unavailable { .. }
            | ObjectFailure::Unreachable
            | ObjectFailure::HostKept { .. } => true,
            ObjectFailure::Prune { retryable, .. } => *retryable,
            ObjectFailure::Conflict(_)
            | ObjectFailure::OwnedByInventory { .. }
            | ObjectFailure::Kept(_)
            | ObjectFailure::PruneHeld
            | ObjectFailure::Refused { .. }
            | ObjectFailure::Forbidden { .. }
            | ObjectFailure::Request { .. }
            | ObjectFailure::Unplanned { .. } => false,
        }
    }

    /// Can a request the server refused pass when tried again? When the server was
    /// busy (429, most 5xx), or not ready for the object yet (a namespace's `default`
    /// service account, made by a controller moments after the namespace). Not a
    /// body the server cannot read ("failed to create typed patch object", a 500):
    /// it refuses the same body every time.
    pub(super) fn may_pass_later(status: &kube::core::Status) -> bool {
        let unreadable_body = status
            .message
            .contains("failed to create typed patch object");
        let awaits_service_account =
            status.code == 403 && status.message.contains("error looking up service account");
        ((status.code >= 500 || status.code == 429) && !unreadable_body) || awaits_service_account
    }

    /// The failure of a request the server answered or did not.
    pub(super) fn of_kube_error(error: &kube::Error) -> Self {
        Self::of_request("", error)
    }

    /// Whether the cluster's admission policy denied the request: a
    /// ValidatingAdmissionPolicy (422 "… with binding … denied request: …") or an
    /// admission webhook ("admission webhook … denied the request: …").
    fn denied_by_policy(status: &kube::core::Status) -> bool {
        let message = &status.message;
        (message.contains("ValidatingAdmissionPolicy") && message.contains("denied request"))
            || (message.contains("admission webhook") && message.contains("denied the request"))
    }

    /// The failure of a request made to `verb` an object: a 403 that will not pass, or
    /// a policy's denial, is [`ObjectFailure::Forbidden`] (worded as a refusal of the
    /// identity), the rest as [`ObjectFailure::of_kube_error`] says.
    pub(super) fn of_request(verb: &'static str, error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status)
                if !verb.is_empty()
                    && ((status.code == 403 && !Self::may_pass_later(status))
                        || Self::denied_by_policy(status)) =>
            {
                ObjectFailure::Forbidden {
                    verb,
                    identity: None,
                    message: status_text(status),
                }
            }
            kube::Error::Api(status) if Self::may_pass_later(status) => {
                ObjectFailure::Unavailable {
                    message: status_text(status),
                }
            }
            kube::Error::Api(status) => ObjectFailure::Refused {
                code: status.code,
                message: status_text(status),
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => ObjectFailure::Unavailable {
                message: error.to_string(),
            },
            _ => ObjectFailure::Request {
                message: error.to_string(),
            },
        }
    }
}

/// The server's refusal in words: its message, without the raw status.
pub(super) fn status_text(status: &kube::core::Status) -> String {
    match status.message.is_empty() {
        true => format!("the server refused it ({} {})", status.code, status.reason),
        false => status.message.clone(),
    }
}

/// What one Argo CD hook did ([`tether_core::hook`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookRun {
    pub phase: HookPhase,
    /// The object made: its name as the server completed it.
    pub key: ObjectKey,
    /// Why it failed (or was not made, or not done in time); `None` once it succeeded.
    pub failure: Option<String>,
    /// Deleted after it ran, by its `hook-delete-policy`.
    pub deleted: bool,
}

/// One object of an apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectReport {
    pub key: ObjectKey,
    pub outcome: Outcome,
}

/// What an apply did, in the order objects were done (apply order, deletions last).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub objects: Vec<ObjectReport>,
    /// The wave that did not start: what it waited for was not ready in time, or
    /// failed. Nothing after it was applied or pruned.
    pub blocked: Option<BlockedWave>,
    /// The apply was stopped ([`super::ApplyOptions::stop`]): the objects after the
    /// last one reported were not applied, and nothing was pruned.
    pub stopped: bool,
    /// The prune was beyond the deletion budget and not approved: its deletions
    /// were held ([`ObjectFailure::PruneHeld`]).
    pub prune_held: Option<PruneHold>,
    /// The Argo CD hooks it ran, in the order they were made.
    pub hooks: Vec<HookRun>,
}

/// A wave that did not start, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedWave {
    /// 0-based.
    pub wave: usize,
    pub waves: usize,
    /// What was not ready.
    pub blockers: Vec<Blocker>,
    /// The objects of this wave and the later ones that were not applied.
    pub not_applied: usize,
}

/// An object a wave waited for that was not ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    pub key: ObjectKey,
    /// Its state, or why it will not become ready.
    pub state: String,
    /// It failed (a failed Job, an object whose apply failed): waiting longer does
    /// not help.
    pub failed: bool,
    /// Not made by a model of the repo.
    pub external: bool,
    /// The models that wait for it.
    pub needed_by: Vec<String>,
}

impl ApplyReport {
    pub fn count(&self, outcome: fn(&Outcome) -> bool) -> usize {
        self.objects.iter().filter(|o| outcome(&o.outcome)).count()
    }

    pub fn created(&self) -> usize {
        self.count(|o| *o == Outcome::Created)
    }

    pub fn configured(&self) -> usize {
        self.count(|o| *o == Outcome::Configured)
    }

    pub fn unchanged(&self) -> usize {
        self.count(|o| *o == Outcome::Unchanged)
    }

    pub fn pruned(&self) -> usize {
        self.count(|o| *o == Outcome::Pruned)
    }

    pub fn released(&self) -> usize {
        self.count(|o| *o == Outcome::Released)
    }

    pub fn prunable(&self) -> usize {
        self.count(|o| *o == Outcome::Prunable)
    }

    pub fn replaced(&self) -> usize {
        self.count(|o| *o == Outcome::Replaced)
    }

    /// Did the apply change the cluster (create, configure, replace, prune, release)?
    pub fn changed(&self) -> bool {
        self.objects.iter().any(|o| {
            matches!(
                o.outcome,
                Outcome::Created
                    | Outcome::Configured
                    | Outcome::Replaced
                    | Outcome::Pruned
                    | Outcome::Released
            )
        })
    }

    /// Is the object in the cluster as the apply left it (created, configured,
    /// replaced or unchanged)?
    pub fn applied(&self, key: &ObjectKey) -> bool {
        self.objects.iter().any(|o| {
            o.key == *key
                && matches!(
                    o.outcome,
                    Outcome::Created | Outcome::Configured | Outcome::Replaced | Outcome::Unchanged
                )
        })
    }

    /// The objects that failed, with why.
    pub fn failures(&self) -> impl Iterator<Item = (&ObjectKey, &ObjectFailure)> {
        self.objects.iter().filter_map(|o| match &o.outcome {
            Outcome::Failed(failure) => Some((&o.key, failure)),
            _ => None,
        })
    }

    pub fn succeeded(&self) -> bool {
        self.failures().next().is_none()
            && self.blocked.is_none()
            && !self.stopped
            && self.hook_failure().is_none()
    }

    /// The first hook that failed, when one did.
    pub fn hook_failure(&self) -> Option<&HookRun> {
        self.hooks.iter().find(|h| h.failure.is_some())
    }

    /// Says who was refused: `identity` on each [`ObjectFailure::Forbidden`].
    pub(super) fn refused_as(&mut self, identity: &str) {
        for object in &mut self.objects {
            if let Outcome::Failed(ObjectFailure::Forbidden { identity: who, .. }) =
                &mut object.outcome
            {
                *who = Some(identity.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_say_whether_a_retry_can_help() {
        let conflict = ObjectFailure::Conflict(vec![FieldConflict {
            manager: "helm".into(),
            field: ".data.key".into(),
        }]);
        assert_eq!(conflict.to_string(), "conflict: .data.key (owned by helm)");
        assert!(!conflict.retryable());
        assert!(ObjectFailure::Unreachable.retryable());
        assert!(
            !ObjectFailure::Refused {
                code: 422,
                message: "invalid".into()
            }
            .retryable()
        );
    }

    #[test]
    fn a_forbidden_request_names_the_verb_and_the_identity_and_waits_for_a_change() {
        let forbidden = |code: u16, message: &str| {
            ObjectFailure::of_request(
                "apply",
                &kube::Error::Api(Box::new(kube::core::Status {
                    code,
                    message: message.into(),
                    ..kube::core::Status::default()
                })),
            )
        };
        let mut report = ApplyReport {
            objects: vec![ObjectReport {
                key: ObjectKey::new("v1", "ConfigMap", Some("team-b"), "x"),
                outcome: Outcome::Failed(forbidden(403, "configmaps \"x\" is forbidden")),
            }],
            ..ApplyReport::default()
        };
        report.refused_as("system:serviceaccount:team-a:deployer");
        let (key, failure) = report.failures().next().unwrap();
        assert_eq!(
            format!("{key}: {failure}"),
            "ConfigMap team-b/x: apply refused for system:serviceaccount:team-a:deployer: configmaps \"x\" is forbidden"
        );
        assert!(!failure.retryable());
        // A namespace's default service account not made yet: it passes.
        assert!(forbidden(403, "error looking up service account team-a/default").retryable());
        // The cluster's policies refuse as RBAC does, in the words of the API server.
        for (code, message) in [
            (
                422,
                "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replicas' with binding 'replicas' denied request: at most 5 replicas",
            ),
            (
                400,
                "admission webhook \"validate.kyverno.svc\" denied the request: resource Deployment/team/web was blocked",
            ),
        ] {
            let failure = forbidden(code, message);
            assert_eq!(failure.to_string(), format!("apply refused: {message}"));
            assert!(!failure.retryable());
        }
    }

    #[test]
    fn counts_by_outcome() {
        let key = ObjectKey::new("v1", "ConfigMap", Some("a"), "b");
        let report = ApplyReport {
            objects: [
                Outcome::Created,
                Outcome::Created,
                Outcome::Pruned,
                Outcome::Failed(ObjectFailure::Unreachable),
            ]
            .into_iter()
            .map(|outcome| ObjectReport {
                key: key.clone(),
                outcome,
            })
            .collect(),
            ..ApplyReport::default()
        };
        assert_eq!((report.created(), report.pruned()), (2, 1));
        assert!(!report.succeeded());
        assert_eq!(report.failures().count(), 1);
    }
}
