//! Argo CD's hooks (`argocd.argoproj.io/hook`), run as Argo CD runs them: objects (a
//! migration Job, a smoke-test Pod) made anew by each apply that changes something,
//! in their phase (PreSync before anything is applied, Sync once every wave is,
//! PostSync once everything applied is ready and the prune is done, SyncFail when
//! any of that failed), by sync-wave within it. A hook is never recorded in an
//! inventory and never pruned: it is tracked by the apply that made it, deleted by
//! its `hook-delete-policy`, and may have only a `generateName`.
//!
//! Pure: [`separate`] takes the hooks out of the models before resolve (nothing that
//! plans objects sees them), [`hooks`] reads the rendered ones
//! ([`crate::render::render_hooks`]), [`in_phase`] orders a phase's; the engine
//! (`tether_engine::reconcile::hook`) makes them and waits for them.

use crate::directive::{self, HookDeletion, HookPhase};
use crate::k8s::{self, ObjectKey};
use crate::model::{Models, ResourceObject};
use crate::render::RenderedObject;

/// A hook, rendered.
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    /// Its object; `name` is its `generateName` when it has no name.
    pub object: RenderedObject,
    pub phases: Vec<HookPhase>,
    pub deletion: Vec<HookDeletion>,
    pub sync_wave: i64,
}

impl Hook {
    /// Whether the server names it (`metadata.generateName`, no name).
    pub fn generated(&self) -> bool {
        self.object.body["metadata"]["name"]
            .as_str()
            .is_none_or(str::is_empty)
    }

    /// Whether the object of its name is deleted before it is made again: Argo CD's
    /// default, when no policy is written.
    pub fn deleted_before_creation(&self) -> bool {
        self.deletion.is_empty() || self.deletion.contains(&HookDeletion::BeforeHookCreation)
    }

    /// Whether it is deleted once it succeeded (or failed).
    pub fn deleted_after(&self, succeeded: bool) -> bool {
        let policy = match succeeded {
            true => HookDeletion::HookSucceeded,
            false => HookDeletion::HookFailed,
        };
        self.deletion.contains(&policy)
    }

    /// Its key as written: a generated name ends in `*`.
    pub fn key(&self) -> ObjectKey {
        let name = match self.generated() {
            true => format!("{}*", self.object.name),
            false => self.object.name.clone(),
        };
        ObjectKey::new(
            &self.object.api_version,
            &self.object.kind,
            self.object.namespace.as_deref(),
            &name,
        )
    }
}

fn is_hook(object: &ResourceObject) -> bool {
    directive::directives(&object.value).is_ok_and(|d| !d.hook.is_empty())
}

/// Moves each resource's hooks from its objects to its hooks.
pub fn separate(models: &mut Models) {
    for resource in &mut models.resources {
        let (hooks, objects) = std::mem::take(&mut resource.objects)
            .into_iter()
            .partition(is_hook);
        resource.objects = objects;
        resource.hooks.extend(hooks);
    }
}

/// The rendered hooks, with what their annotations say (read strictly by the
/// loader: a hook whose annotations cannot be read never gets here).
pub fn hooks(objects: Vec<RenderedObject>) -> Vec<Hook> {
    objects
        .into_iter()
        .filter_map(|object| {
            let directives = directive::directives(&object.body).ok()?;
            Some(Hook {
                phases: directives.hook,
                deletion: directives.hook_deletion,
                sync_wave: directives.sync_wave,
                object,
            })
        })
        .filter(|hook| !hook.phases.is_empty())
        .collect()
}

/// The hooks of `phase`, in the groups they run in: by sync-wave, each group made
/// together and waited for before the next; within one, as objects are applied.
pub fn in_phase(hooks: &[Hook], phase: HookPhase) -> Vec<Vec<&Hook>> {
    let mut of_phase: Vec<&Hook> = hooks.iter().filter(|h| h.phases.contains(&phase)).collect();
    of_phase.sort_by(|a, b| {
        let order = |h: &Hook| {
            (
                h.sync_wave,
                k8s::apply_rank(&h.object.kind),
                h.object.kind.clone(),
                h.object.name.clone(),
            )
        };
        order(a).cmp(&order(b))
    });
    of_phase
        .chunk_by(|a, b| a.sync_wave == b.sync_wave)
        .map(<[&Hook]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Span;
    use crate::model::Kind;
    use crate::workflow::ModelId;
    use serde_json::json;

    fn hook(kind: &str, name: &str, annotations: serde_json::Value) -> RenderedObject {
        let (field, written) = match name.strip_suffix('-') {
            Some(_) => ("generateName", name),
            None => ("name", name),
        };
        RenderedObject {
            api_version: "batch/v1".into(),
            kind: kind.into(),
            namespace: Some("shop".into()),
            name: written.into(),
            model: "Manifest/hooks.yaml".into(),
            source: "hooks.yaml".into(),
            span: Span {
                file: crate::source::FileId(0),
                line: 1,
                column: 1,
                offset: 0,
                len: 0,
            },
            model_id: ModelId {
                kind: Kind::Manifest,
                index: 0,
            },
            wave: 0,
            body: json!({"kind": kind, "metadata": {field: written, "annotations": annotations}}),
        }
    }

    #[test]
    fn a_phase_runs_its_hooks_by_sync_wave_and_each_is_deleted_by_its_policy() {
        let hooks = hooks(vec![
            hook(
                "Job",
                "migrate-",
                json!({"argocd.argoproj.io/hook": "PreSync", "argocd.argoproj.io/sync-wave": "2"}),
            ),
            hook(
                "Job",
                "backup",
                json!({"argocd.argoproj.io/hook": "PreSync,PostSync", "argocd.argoproj.io/sync-wave": "-1", "argocd.argoproj.io/hook-delete-policy": "HookSucceeded"}),
            ),
            hook(
                "ConfigMap",
                "marker",
                json!({"argocd.argoproj.io/hook": "PreSync", "argocd.argoproj.io/sync-wave": "2"}),
            ),
            hook(
                "Pod",
                "notify-",
                json!({"argocd.argoproj.io/hook": "SyncFail"}),
            ),
            hook("Job", "plain", json!({})),
        ]);
        assert_eq!(
            hooks.len(),
            4,
            "an object without the annotation is no hook"
        );
        let names = |phase| {
            in_phase(&hooks, phase)
                .iter()
                .map(|group| group.iter().map(|h| h.key().name).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(HookPhase::PreSync),
            vec![vec!["backup"], vec!["marker", "migrate-*"]],
            "by sync-wave, then a ConfigMap before a Job as objects are applied"
        );
        assert_eq!(names(HookPhase::PostSync), vec![vec!["backup"]]);
        assert_eq!(names(HookPhase::Sync), Vec::<Vec<String>>::new());
        let by_name = |name: &str| hooks.iter().find(|h| h.object.name == name).unwrap();
        let backup = by_name("backup");
        assert!(!backup.generated() && !backup.deleted_before_creation());
        assert!(backup.deleted_after(true) && !backup.deleted_after(false));
        let migrate = by_name("migrate-");
        assert!(migrate.generated() && migrate.deleted_before_creation());
        assert!(!migrate.deleted_after(true) && !migrate.deleted_after(false));
    }
}
