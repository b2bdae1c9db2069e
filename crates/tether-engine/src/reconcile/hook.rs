//! Running one phase of Argo CD's hooks ([`tether_core::hook`]): each sync-wave's
//! hooks made (created, so that the server completes a `generateName`), waited for
//! until each succeeds (a Job Complete, a Pod Succeeded, any other kind ready) or one
//! fails, and deleted by their `hook-delete-policy`. A phase stops at its first
//! sync-wave with a failure.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kube::Client;
use kube::ResourceExt;
use kube::api::{DeleteParams, DynamicObject, PostParams};

use super::outcome::{HookRun, ObjectFailure};
use super::wait;
use crate::cluster::Resources;
use tether_core::directive::HookPhase;
use tether_core::health::HealthChecks;
use tether_core::hook::{Hook, in_phase};
use tether_core::k8s::ObjectKey;
use tether_core::workflow::{Gate, Rule, WaveGate};

/// What running hooks takes.
pub(super) struct Hooks<'a> {
    pub client: &'a Client,
    pub hooks: &'a [Hook],
    pub checks: &'a HealthChecks,
    pub manager: &'a str,
    /// How long one sync-wave of hooks may take.
    pub timeout: Duration,
}

impl Hooks<'_> {
    /// Runs the hooks of `phase`; what each did, in order.
    pub async fn run(&self, phase: HookPhase) -> Vec<HookRun> {
        let mut runs = Vec::new();
        let groups = in_phase(self.hooks, phase);
        if groups.is_empty() {
            return runs;
        }
        tracing::info!(%phase, hooks = groups.iter().map(Vec::len).sum::<usize>(), "running hooks");
        let kinds: BTreeSet<(String, String)> = groups
            .iter()
            .flatten()
            .map(|h| (h.object.api_version.clone(), h.object.kind.clone()))
            .collect();
        let resources = match Resources::discover(self.client, &kinds).await {
            Ok(resources) => resources,
            Err(error) => {
                let failure = Some(tether_core::error_chain(&error));
                let first = groups.iter().flatten().next();
                runs.extend(first.map(|hook| HookRun {
                    phase,
                    key: hook.key(),
                    failure,
                    deleted: false,
                }));
                return runs;
            }
        };
        for group in groups {
            let mut made = Vec::new();
            for hook in group {
                match self.make(&resources, hook).await {
                    Ok(key) => made.push((hook, key)),
                    Err(failure) => runs.push(HookRun {
                        phase,
                        key: hook.key(),
                        failure: Some(failure.to_string()),
                        deleted: false,
                    }),
                }
            }
            let failures = self.outcomes(&made, phase).await;
            for (hook, key) in made {
                let failure = failures.get(&key).cloned();
                let deleted = hook.deleted_after(failure.is_none())
                    && self.delete(&resources, hook, &key).await;
                runs.push(HookRun {
                    phase,
                    key,
                    failure,
                    deleted,
                });
            }
            if runs.iter().any(|r| r.failure.is_some()) {
                break;
            }
        }
        runs
    }

    /// Makes one hook: the object of its name deleted first (unless its policy keeps
    /// it), then created. The key of the object made.
    async fn make(&self, resources: &Resources, hook: &Hook) -> Result<ObjectKey, ObjectFailure> {
        let object = &hook.object;
        let api = resources
            .api(
                &object.api_version,
                &object.kind,
                object.namespace.as_deref(),
            )
            .map_err(|e| ObjectFailure::Request {
                message: e.to_string(),
            })?;
        if !hook.generated() && hook.deleted_before_creation() {
            wait::deleted(&api, &hook.key(), "hook").await?;
        }
        let body: DynamicObject =
            serde_json::from_value(object.body.clone()).map_err(|e| ObjectFailure::Request {
                message: format!("hook: {e}"),
            })?;
        let params = PostParams {
            field_manager: Some(self.manager.to_string()),
            ..PostParams::default()
        };
        let created = api
            .create(&params, &body)
            .await
            .map_err(|e| ObjectFailure::of_request("create", &e))?;
        let key = ObjectKey::new(
            &object.api_version,
            &object.kind,
            object.namespace.as_deref(),
            &created.name_any(),
        );
        tracing::info!(hook = %key, "hook made");
        Ok(key)
    }

    /// Waits for the hooks made; why each that did not succeed failed.
    async fn outcomes(
        &self,
        made: &[(&Hook, ObjectKey)],
        phase: HookPhase,
    ) -> HashMap<ObjectKey, String> {
        let gates: Vec<WaveGate> = made
            .iter()
            .map(|(hook, key)| WaveGate {
                gate: Gate {
                    api_version: hook.object.api_version.clone(),
                    key: key.clone(),
                    rule: Rule::BuiltIn,
                },
                external: false,
                needed_by: vec![format!("{phase} hook")],
            })
            .collect();
        let waited = wait::wait_for(
            self.client,
            self.checks,
            &gates,
            self.timeout,
            &HashMap::new(),
            &|_| {},
        )
        .await;
        let blockers = waited.err().unwrap_or_default();
        let one_failed = blockers.iter().any(|b| b.failed);
        blockers
            .into_iter()
            .map(|b| {
                let why = match (b.failed, one_failed) {
                    (true, _) => b.state,
                    (false, true) => format!("stopped with a hook that failed: {}", b.state),
                    (false, false) => {
                        format!("not done within {}s: {}", self.timeout.as_secs(), b.state)
                    }
                };
                (b.key, why)
            })
            .collect()
    }

    /// Deletes a hook that ran, with its pods; whether it went.
    async fn delete(&self, resources: &Resources, hook: &Hook, key: &ObjectKey) -> bool {
        let object = &hook.object;
        let Ok(api) = resources.api(&object.api_version, &object.kind, key.namespace.as_deref())
        else {
            return false;
        };
        match api.delete(&key.name, &DeleteParams::background()).await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(hook = %key, error = %error, "a hook was not deleted");
                false
            }
        }
    }
}
