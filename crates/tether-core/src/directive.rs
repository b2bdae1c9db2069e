//! What an object's own annotations tell tether to do, in the spellings teams already
//! wrote for Flux (`kustomize.toolkit.fluxcd.io/prune`, `…/ssa`, `…/force`,
//! `…/reconcile`) and Argo CD (`argocd.argoproj.io/sync-options`), so a repository
//! migrates without rewriting them. A directive keeps an object from prune, applies it
//! only if it is absent, never applies it, leaves others' client-side fields to them,
//! or makes it again when a field cannot change in place.
//!
//! Reading is strict: a value tether does not know is an error (located in the file
//! by the loader, on the object by the plan), never a silent default, since a typo in
//! `Prune=flase` would otherwise delete what its author meant to keep.

use std::fmt;

use serde_json::Value;

/// Flux: `disabled` keeps the object from prune.
pub const FLUX_PRUNE: &str = "kustomize.toolkit.fluxcd.io/prune";
/// Flux: how the object is applied (`Override`, `Merge`, `IfNotPresent`, `Ignore`).
pub const FLUX_SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
/// Flux: `enabled` makes the object again when a field cannot change in place.
pub const FLUX_FORCE: &str = "kustomize.toolkit.fluxcd.io/force";
/// Flux's older spelling of `ssa: Ignore`: `disabled`.
pub const FLUX_RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
/// tether: `with-contents` lets prune delete a Namespace, a CustomResourceDefinition
/// or a PersistentVolumeClaim with what it holds ([`crate::inventory::contents`]).
pub const TETHER_PRUNE: &str = "tether.dev/prune";
/// Argo CD: the integer sync-wave an object is applied in (0 when absent); see
/// [`crate::workflow`].
pub const ARGO_SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";
/// Argo CD: the phases an object is a hook of (`PreSync,PostSync`), made anew by each
/// apply that runs them; `Skip` never applies it. See [`crate::hook`].
pub const ARGO_HOOK: &str = "argocd.argoproj.io/hook";
/// Argo CD: when a hook object is deleted.
pub const ARGO_HOOK_DELETE_POLICY: &str = "argocd.argoproj.io/hook-delete-policy";
/// Argo CD: comma-separated `Option=value` pairs.
pub const ARGO_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";

/// How an object is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplyMode {
    /// Applied, taking over the fields kubectl applied client-side that tether sets
    /// too (the default), so that they go when Git drops them.
    #[default]
    Override,
    /// Applied, sharing those fields with kubectl: they stay when Git drops them.
    Merge,
    /// Created when absent; an object that exists is left as it is.
    IfNotPresent,
    /// Never applied.
    Ignore,
}

/// When a hook runs, in Argo CD's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookPhase {
    /// Before anything is applied; a failure applies nothing.
    PreSync,
    /// Once every wave is applied.
    Sync,
    /// Once everything applied is ready and the prune is done.
    PostSync,
    /// When the apply, or a hook of another phase, fails.
    SyncFail,
}

impl HookPhase {
    pub fn name(self) -> &'static str {
        match self {
            HookPhase::PreSync => "PreSync",
            HookPhase::Sync => "Sync",
            HookPhase::PostSync => "PostSync",
            HookPhase::SyncFail => "SyncFail",
        }
    }
}

impl fmt::Display for HookPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When a hook object is deleted, in Argo CD's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookDeletion {
    /// The object of the name is deleted before the hook is made again (the default,
    /// as in Argo CD).
    BeforeHookCreation,
    /// Deleted once it succeeded.
    HookSucceeded,
    /// Deleted once it failed.
    HookFailed,
}

/// One annotation as written, `key: value`, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub key: &'static str,
    pub value: String,
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.value)
    }
}

/// What an object's annotations ask of tether; each with the annotation that asks it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// Prune keeps the object: it is released from the inventory, never deleted.
    pub keep: Option<Written>,
    /// Prune deletes the object only once a person approves the prune's deletions by
    /// their digest (Argo CD's `Prune=confirm`).
    pub confirm: Option<Written>,
    /// Prune may delete it with what it holds (its objects, custom resources, data).
    pub with_contents: Option<Written>,
    /// How it is applied, and the annotation that says so (none for the default).
    pub apply: (ApplyMode, Option<Written>),
    /// A change the server refuses in place makes the object again.
    pub replace: Option<Written>,
    /// The Argo CD sync-wave it is applied in.
    pub sync_wave: i64,
    /// The phases it is a hook of (none: it is an object, not a hook).
    pub hook: Vec<HookPhase>,
    /// When it is deleted, as a hook.
    pub hook_deletion: Vec<HookDeletion>,
}

/// Argo CD's per-object sync options that tether reads, and what it does with each
/// value; options of an Application (not of an object) are not among them.
const ARGO_OPTIONS: &str = "Prune=false|confirm|true, Delete=false|confirm|true, Replace=true|false, Force=true|false, ServerSideApply=true|false, Validate=true|false, SkipDryRunOnMissingResource=true|false, PruneLast=true|false, ClientSideApplyMigration=true|false";

/// The directives of an object (its `metadata.annotations`), or the first problem.
pub fn directives(object: &Value) -> Result<Directives, String> {
    let mut directives = Directives::default();
    let Some(annotations) = object["metadata"]["annotations"].as_object() else {
        return Ok(directives);
    };
    for (key, value) in annotations {
        if let Some(value) = value.as_str() {
            read(&mut directives, key, value)?;
        }
    }
    Ok(directives)
}

/// The problem with one annotation, if it is a directive tether cannot read.
pub fn problem(key: &str, value: &str) -> Option<String> {
    read(&mut Directives::default(), key, value).err()
}

fn read(directives: &mut Directives, key: &str, value: &str) -> Result<(), String> {
    let written = |key: &'static str| Written {
        key,
        value: value.to_string(),
    };
    match key {
        FLUX_PRUNE => match value {
            "disabled" => directives.keep = Some(written(FLUX_PRUNE)),
            "enabled" => {}
            _ => return Err(unknown(FLUX_PRUNE, value, "disabled or enabled")),
        },
        TETHER_PRUNE => match value {
            "with-contents" => directives.with_contents = Some(written(TETHER_PRUNE)),
            _ => return Err(unknown(TETHER_PRUNE, value, "with-contents")),
        },
        FLUX_SSA => {
            let mode = match value {
                "Override" => ApplyMode::Override,
                "Merge" => ApplyMode::Merge,
                "IfNotPresent" => ApplyMode::IfNotPresent,
                "Ignore" => ApplyMode::Ignore,
                _ => {
                    return Err(unknown(
                        FLUX_SSA,
                        value,
                        "Override, Merge, IfNotPresent or Ignore",
                    ));
                }
            };
            set_mode(directives, mode, written(FLUX_SSA));
        }
        FLUX_RECONCILE => match value {
            "disabled" => set_mode(directives, ApplyMode::Ignore, written(FLUX_RECONCILE)),
            "enabled" => {}
            _ => return Err(unknown(FLUX_RECONCILE, value, "disabled or enabled")),
        },
        FLUX_FORCE => match value {
            "enabled" => directives.replace = Some(written(FLUX_FORCE)),
            "disabled" => {}
            _ => return Err(unknown(FLUX_FORCE, value, "enabled or disabled")),
        },
        ARGO_SYNC_WAVE => {
            directives.sync_wave = value
                .parse()
                .map_err(|_| unknown(ARGO_SYNC_WAVE, value, "an integer, as \"-1\" or \"5\""))?;
        }
        ARGO_HOOK => read_hook(directives, value, || written(ARGO_HOOK))?,
        ARGO_HOOK_DELETE_POLICY => read_hook_deletion(directives, value)?,
        ARGO_SYNC_OPTIONS => {
            for option in value.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                read_argo_option(directives, option, &written(ARGO_SYNC_OPTIONS))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// `argocd.argoproj.io/hook`: the phases, comma-separated; `Skip` never applies it.
fn read_hook(
    directives: &mut Directives,
    value: &str,
    written: impl Fn() -> Written,
) -> Result<(), String> {
    for phase in value.split(',').map(str::trim) {
        let phase = match phase {
            "PreSync" => HookPhase::PreSync,
            "Sync" => HookPhase::Sync,
            "PostSync" => HookPhase::PostSync,
            "SyncFail" => HookPhase::SyncFail,
            "Skip" => {
                set_mode(directives, ApplyMode::Ignore, written());
                continue;
            }
            _ => {
                return Err(unknown(
                    ARGO_HOOK,
                    value,
                    "PreSync, Sync, PostSync, SyncFail or Skip, comma-separated; tether has no PostDelete",
                ));
            }
        };
        if !directives.hook.contains(&phase) {
            directives.hook.push(phase);
        }
    }
    Ok(())
}

/// `argocd.argoproj.io/hook-delete-policy`: the policies, comma-separated.
fn read_hook_deletion(directives: &mut Directives, value: &str) -> Result<(), String> {
    for policy in value.split(',').map(str::trim) {
        let policy = match policy {
            "BeforeHookCreation" => HookDeletion::BeforeHookCreation,
            "HookSucceeded" => HookDeletion::HookSucceeded,
            "HookFailed" => HookDeletion::HookFailed,
            _ => {
                return Err(unknown(
                    ARGO_HOOK_DELETE_POLICY,
                    value,
                    "BeforeHookCreation, HookSucceeded or HookFailed, comma-separated",
                ));
            }
        };
        if !directives.hook_deletion.contains(&policy) {
            directives.hook_deletion.push(policy);
        }
    }
    Ok(())
}

/// The stronger mode wins when two annotations set one: never applying over applying
/// only if absent over applying.
fn set_mode(directives: &mut Directives, mode: ApplyMode, written: Written) {
    let strength = |mode: ApplyMode| match mode {
        ApplyMode::Override => 0,
        ApplyMode::Merge => 1,
        ApplyMode::IfNotPresent => 2,
        ApplyMode::Ignore => 3,
    };
    if strength(mode) >= strength(directives.apply.0) && mode != ApplyMode::Override {
        directives.apply = (mode, Some(written));
    }
}

fn read_argo_option(
    directives: &mut Directives,
    option: &str,
    written: &Written,
) -> Result<(), String> {
    let unknown_option = || {
        format!(
            "{ARGO_SYNC_OPTIONS}: {option:?} is not an option of an object tether reads (it reads {ARGO_OPTIONS})"
        )
    };
    let (name, value) = option.split_once('=').ok_or_else(unknown_option)?;
    let flag = |allowed: &[&str]| {
        if allowed.contains(&value) {
            Ok(())
        } else {
            Err(unknown_option())
        }
    };
    match name {
        // A confirmed deletion waits for a person: the prune is held until its
        // deletions are approved by their digest.
        "Prune" | "Delete" => {
            flag(&["false", "confirm", "true"])?;
            match value {
                "false" => directives.keep = Some(written.clone()),
                "confirm" => directives.confirm = Some(written.clone()),
                _ => {}
            }
        }
        "Replace" => {
            flag(&["true", "false"])?;
            if value == "true" {
                directives.replace = Some(written.clone());
            }
        }
        // tether always applies server-side, validates with the server, prunes after
        // the last wave and hands kubectl's client-side fields over: nothing to change.
        "Force"
        | "ServerSideApply"
        | "Validate"
        | "SkipDryRunOnMissingResource"
        | "PruneLast"
        | "ClientSideApplyMigration" => flag(&["true", "false"])?,
        _ => return Err(unknown_option()),
    }
    Ok(())
}

fn unknown(key: &str, value: &str, allowed: &str) -> String {
    format!("{key}: {value:?} is not a value tether knows (it reads {allowed})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(annotations: Value) -> Result<Directives, String> {
        directives(&json!({"metadata": {"annotations": annotations}}))
    }

    fn written(key: &'static str, value: &str) -> Option<Written> {
        Some(Written {
            key,
            value: value.into(),
        })
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "a table: one row per case")]
    fn flux_and_argo_spellings_read_as_the_same_directives() {
        let cases = [
            (json!({}), Directives::default()),
            (
                json!({FLUX_PRUNE: "disabled"}),
                Directives {
                    keep: written(FLUX_PRUNE, "disabled"),
                    ..Directives::default()
                },
            ),
            (json!({FLUX_PRUNE: "enabled"}), Directives::default()),
            (
                json!({TETHER_PRUNE: "with-contents"}),
                Directives {
                    with_contents: written(TETHER_PRUNE, "with-contents"),
                    ..Directives::default()
                },
            ),
            (
                json!({ARGO_SYNC_OPTIONS: "Prune=false"}),
                Directives {
                    keep: written(ARGO_SYNC_OPTIONS, "Prune=false"),
                    ..Directives::default()
                },
            ),
            (
                json!({ARGO_SYNC_OPTIONS: "ServerSideApply=true, Prune=confirm"}),
                Directives {
                    confirm: written(ARGO_SYNC_OPTIONS, "ServerSideApply=true, Prune=confirm"),
                    ..Directives::default()
                },
            ),
            (
                json!({ARGO_SYNC_OPTIONS: "Replace=true,Validate=false"}),
                Directives {
                    replace: written(ARGO_SYNC_OPTIONS, "Replace=true,Validate=false"),
                    ..Directives::default()
                },
            ),
            (
                json!({FLUX_FORCE: "enabled"}),
                Directives {
                    replace: written(FLUX_FORCE, "enabled"),
                    ..Directives::default()
                },
            ),
            (
                json!({FLUX_SSA: "IfNotPresent"}),
                Directives {
                    apply: (ApplyMode::IfNotPresent, written(FLUX_SSA, "IfNotPresent")),
                    ..Directives::default()
                },
            ),
            (
                json!({FLUX_SSA: "Merge", FLUX_RECONCILE: "disabled"}),
                Directives {
                    apply: (ApplyMode::Ignore, written(FLUX_RECONCILE, "disabled")),
                    ..Directives::default()
                },
            ),
            (json!({FLUX_SSA: "Override"}), Directives::default()),
            (
                json!({ARGO_SYNC_WAVE: "-2"}),
                Directives {
                    sync_wave: -2,
                    ..Directives::default()
                },
            ),
            (
                json!({ARGO_HOOK: "PreSync, PostSync", ARGO_HOOK_DELETE_POLICY: "HookSucceeded"}),
                Directives {
                    hook: vec![HookPhase::PreSync, HookPhase::PostSync],
                    hook_deletion: vec![HookDeletion::HookSucceeded],
                    ..Directives::default()
                },
            ),
            (
                json!({ARGO_HOOK: "Skip"}),
                Directives {
                    apply: (ApplyMode::Ignore, written(ARGO_HOOK, "Skip")),
                    ..Directives::default()
                },
            ),
            // Other tools' annotations, and Argo CD's other keys, are not directives.
            (
                json!({"argocd.argoproj.io/compare-options": "IgnoreExtraneous", "example.com/x": "y"}),
                Directives::default(),
            ),
        ];
        for (annotations, expected) in cases {
            assert_eq!(of(annotations.clone()), Ok(expected), "{annotations}");
        }
    }

    #[test]
    fn a_value_tether_does_not_know_is_an_error_naming_what_it_reads() {
        let cases = [
            (json!({FLUX_PRUNE: "off"}), "disabled or enabled"),
            (json!({FLUX_SSA: "ifnotpresent"}), "IfNotPresent"),
            (json!({FLUX_FORCE: "true"}), "enabled or disabled"),
            (json!({TETHER_PRUNE: "with-contnets"}), "with-contents"),
            (
                json!({ARGO_SYNC_OPTIONS: "Prune=flase"}),
                "Prune=false|confirm",
            ),
            (
                json!({ARGO_SYNC_OPTIONS: "CreateNamespace=true"}),
                "Prune=false",
            ),
            (json!({ARGO_SYNC_OPTIONS: "Prune"}), "Prune=false"),
            (json!({ARGO_SYNC_WAVE: "first"}), "an integer"),
            (json!({ARGO_HOOK: "PostDelete"}), "no PostDelete"),
            (json!({ARGO_HOOK: "presync"}), "PreSync, Sync"),
            (
                json!({ARGO_HOOK_DELETE_POLICY: "HookSucceded"}),
                "HookSucceeded",
            ),
            (json!({ARGO_SYNC_WAVE: "1.5"}), "an integer"),
        ];
        for (annotations, names) in cases {
            let error = of(annotations.clone()).expect_err("refused");
            assert!(error.contains(names), "{annotations}: {error}");
        }
        assert_eq!(problem(FLUX_PRUNE, "disabled"), None);
        assert!(problem(FLUX_PRUNE, "no").is_some());
    }
}
