//! Carrying out a plan: the inventory written first, server-side apply rank by rank
//! (independent objects in parallel), prune, and the inventory written again.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};
use tracing::instrument;

use super::live::CONCURRENCY;
use super::outcome::{ApplyReport, ObjectFailure, ObjectReport, Outcome};
use super::{ApplyOptions, Planned, Step};
use crate::cluster::{ClusterError, Resources, write_inventory};
use crate::driver::Backoff;
use crate::inventory::{InventoryEntry, by_rank};
use crate::k8s::ObjectKey;
use crate::ownership::{Inventory, MANAGER};
use crate::plan::{Action, conflicts_of};

/// How often one object's apply is tried when the server is busy or not ready for it.
const ATTEMPTS: u32 = 6;

pub(super) async fn apply(
    client: &Client,
    inventory: &Inventory,
    planned: &Planned,
    options: &ApplyOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<ApplyReport, ClusterError> {
    let commit = planned.plan.revision.as_ref().map(|r| r.commit.clone());
    // Record every object about to be applied before applying any.
    let applying = planned.steps.iter().filter(|s| s.desired.is_some());
    let before = planned
        .record
        .before_apply(applying.clone().map(|s| InventoryEntry {
            api_version: s.change.api_version.clone(),
            kind: s.change.key.kind.clone(),
            namespace: s.change.key.namespace.clone(),
            name: s.change.key.name.clone(),
        }));
    write_inventory(client, inventory, &before).await?;

    let total = planned.steps.len();
    let mut report = ApplyReport::default();
    let mut resources = planned.resources.clone();
    let unreachable = &AtomicBool::new(false);
    for (_, batch) in by_rank(applying, |s| &s.change.key.kind) {
        resources = await_definitions(client, resources, planned, &batch).await?;
        let resources = &resources;
        let results: Vec<ObjectReport> =
            futures::stream::iter(batch.into_iter().map(|step| async move {
                let outcome = match apply_one(resources, step, options, unreachable).await {
                    Ok(()) => match step.change.action {
                        Action::Create => Outcome::Created,
                        Action::Update | Action::Conflict => Outcome::Configured,
                        _ => Outcome::Unchanged,
                    },
                    Err(failure) => Outcome::Failed(failure),
                };
                ObjectReport {
                    key: step.change.key.clone(),
                    outcome,
                }
            }))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for result in results {
            report.objects.push(result);
            progress(report.objects.len(), total);
        }
    }
    for step in planned
        .steps
        .iter()
        .filter(|s| s.change.action == Action::Error)
    {
        report.objects.push(ObjectReport {
            key: step.change.key.clone(),
            outcome: Outcome::Failed(ObjectFailure::Unplanned {
                message: step.change.error.clone().unwrap_or_default(),
            }),
        });
        progress(report.objects.len(), total);
    }
    let deletions = planned
        .steps
        .iter()
        .filter(|s| s.change.action == Action::Delete);
    let mut pruned = BTreeSet::new();
    let mut done = report.objects.len();
    for step in deletions {
        done += 1;
        progress(done, total);
        let outcome = match options.prune {
            false => Some(Outcome::Prunable),
            true => prune_one(&resources, step).await?,
        };
        if matches!(outcome, None | Some(Outcome::Pruned)) {
            pruned.insert(step.change.key.clone());
        }
        // An object found gone was deleted by someone else: not counted as pruned.
        if let Some(outcome) = outcome {
            report.objects.push(ObjectReport {
                key: step.change.key.clone(),
                outcome,
            });
        }
    }
    let after = before.after_apply(
        &pruned,
        commit,
        planned.record.commit.clone(),
        report.succeeded(),
    );
    write_inventory(client, inventory, &after).await?;
    Ok(report)
}

/// Deletes one object whose model is gone; `None` when it was gone already.
async fn prune_one(resources: &Resources, step: &Step) -> Result<Option<Outcome>, ClusterError> {
    let key = &step.change.key;
    let api = resources.api(
        &step.change.api_version,
        &key.kind,
        key.namespace.as_deref(),
    )?;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    Ok(match api.delete(&key.name, &params).await {
        Ok(_) => Some(Outcome::Pruned),
        Err(kube::Error::Api(status)) if status.is_not_found() => None,
        Err(e) => Some(Outcome::Failed(ObjectFailure::Prune {
            retryable: ObjectFailure::of_kube_error(&e).retryable(),
            message: e.to_string(),
        })),
    })
}

/// Waits (up to a minute) until the server serves the kinds of `batch`, which
/// CustomResourceDefinitions applied moments ago define; returns the refreshed
/// resources. Kinds still not served then fail when their objects are applied.
async fn await_definitions(
    client: &Client,
    mut resources: Resources,
    planned: &Planned,
    batch: &[&Step],
) -> Result<Resources, ClusterError> {
    let unserved = |resources: &Resources| {
        batch.iter().any(|s| {
            resources
                .namespaced(&s.change.api_version, &s.change.key.kind)
                .is_none()
        })
    };
    if !unserved(&resources) {
        return Ok(resources);
    }
    let all_kinds: BTreeSet<(String, String)> = planned
        .steps
        .iter()
        .map(|s| (s.change.api_version.clone(), s.change.key.kind.clone()))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while unserved(&resources) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        resources = Resources::discover(client, &all_kinds).await?;
    }
    Ok(resources)
}

/// Server-side apply of one object, retrying what may pass on a second try (the
/// server busy, a namespace's service account token not made yet). When the server
/// stops answering altogether, `unreachable` is set and the remaining objects fail
/// at once instead of each waiting out its own retries.
#[instrument(skip_all, fields(object = %step.change.key))]
async fn apply_one(
    resources: &Resources,
    step: &Step,
    options: &ApplyOptions,
    unreachable: &AtomicBool,
) -> Result<(), ObjectFailure> {
    let Some(desired) = &step.desired else {
        return Ok(());
    };
    match step.change.action {
        Action::Unchanged if !step.force => return Ok(()),
        Action::Conflict if !options.force_conflicts => {
            return Err(ObjectFailure::Conflict(step.change.conflicts.clone()));
        }
        _ => {}
    }
    let key: &ObjectKey = &step.change.key;
    let api = resources
        .api(
            &step.change.api_version,
            &key.kind,
            key.namespace.as_deref(),
        )
        .map_err(|e| ObjectFailure::Request {
            message: e.to_string(),
        })?;
    let mut params = PatchParams::apply(MANAGER);
    if options.force_conflicts || step.force {
        params = params.force();
    }
    if let Some(hand_over) = &step.hand_over {
        // Without it the apply still succeeds; kubectl's manager then keeps co-owning
        // the fields, and a later change of them is a conflict.
        if let Err(error) = api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(hand_over))
            .await
        {
            tracing::warn!(%error, "could not take over the fields kubectl applied client-side");
        }
    }
    let mut backoff = Backoff::request();
    for attempt in 1.. {
        if unreachable.load(Ordering::Relaxed) {
            return Err(ObjectFailure::Unreachable);
        }
        let Err(error) = api.patch(&key.name, &params, &Patch::Apply(desired)).await else {
            return Ok(());
        };
        let retry = match &error {
            kube::Error::Api(status) if status.is_conflict() => {
                return Err(ObjectFailure::Conflict(conflicts_of(status)));
            }
            // The server answered: busy, or not ready for this object yet.
            kube::Error::Api(status) => ObjectFailure::may_pass_later(status) && attempt < ATTEMPTS,
            // No answer (timeout, connection refused): one more try, then give up on
            // the server for every object.
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                if attempt >= 2 {
                    unreachable.store(true, Ordering::Relaxed);
                }
                attempt < 2
            }
            _ => false,
        };
        if !retry {
            return Err(ObjectFailure::of_kube_error(&error));
        }
        tracing::debug!(attempt, error = %error, "apply failed; retrying");
        tokio::time::sleep(backoff.next_delay()).await;
    }
    Ok(())
}
