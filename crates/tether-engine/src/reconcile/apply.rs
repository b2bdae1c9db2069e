//! Carrying out a plan: the inventory written first, server-side apply rank by rank
//! (independent objects in parallel), prune, and the inventory written again. Also the
//! retries of a busy server and the stop when it stops answering, the hand-over of
//! kubectl's fields, the release of adopted objects, and the replacement of a Job.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::hook::Hooks;
use super::in_flight;
use super::nodes;
use super::options::{ApplyOptions, ApplyProgress};
use super::outcome::{ApplyReport, BlockedWave, HookRun, ObjectFailure, ObjectReport, Outcome};
use super::planned::{Planned, Step};
use super::wait;
use crate::cluster::{ClusterError, Resources};
use crate::driver::{Backoff, Poll, Retries};
use crate::record::update_inventory;
use tether_core::directive::HookPhase;
use tether_core::hook::{Hook, in_phase};
use tether_core::inventory::contents::guard;
use tether_core::inventory::{InventoryEntry, Provenance, by_rank};
use tether_core::k8s::ObjectKey;
use tether_core::ownership::{
    Inventory, MANAGED_BY_LABEL, MANAGER, MODEL_ANNOTATION, PART_OF_LABEL, SOURCE_ANNOTATION,
};
use tether_core::plan::APPLIED_HASH_ANNOTATION;
use tether_core::plan::{Action, conflicts_of};

/// How often one object's apply is tried when the server is busy or not ready for it.
const ATTEMPTS: u32 = 6;
/// How long a wave waits for what it needs, unless told otherwise.
pub const DEFAULT_WAVE_TIMEOUT: Duration = Duration::from_secs(300);

#[expect(
    clippy::too_many_lines,
    reason = "the apply's steps in their order (record, each wave: wait then apply by rank, prune, record), each a call"
)]
pub(super) async fn apply(
    client: &Client,
    inventory: &Inventory,
    planned: &Planned,
    options: &ApplyOptions,
    progress: &(dyn Fn(ApplyProgress<'_>) + Sync),
) -> Result<ApplyReport, ClusterError> {
    let commit = planned.plan.revision.as_ref().map(|r| r.commit.clone());
    if stopped(options) {
        return Ok(ApplyReport {
            stopped: true,
            ..ApplyReport::default()
        });
    }
    let applying = record_before_apply(client, inventory, planned).await?;
    let manager = inventory.field_manager();
    let manager = manager.as_str();
    let total = planned.steps.len();
    let applied = |done: usize| progress(ApplyProgress::Applied { done, total });
    let mut report = ApplyReport::default();
    let mut resources = planned.resources.clone();
    let unreachable = &AtomicBool::new(false);
    // The uids of the objects: as planned, then as the applies returned them.
    let mut uids = planned.uids.clone();
    let hooks = runs_hooks(planned).then(|| Hooks {
        client,
        hooks: &planned.hooks,
        checks: &planned.models.health,
        manager,
        timeout: options.wave_timeout.unwrap_or(DEFAULT_WAVE_TIMEOUT),
    });
    let mut failed_here: HashMap<ObjectKey, String> = HashMap::new();
    let mut applying = applying;
    if let Some(hooks) = &hooks {
        // The Namespaces the PreSync hooks go into come first, as Argo CD's
        // CreateNamespace makes them before its hooks.
        let (first, rest) = presync_namespaces(applying, &planned.hooks);
        applying = rest;
        let results = apply_batch(planned, &resources, first, manager, options, unreachable).await;
        for (result, uid) in results {
            take_result(result, uid, &mut report, &mut uids, &mut failed_here);
            applied(report.objects.len());
        }
        report.hooks = hooks.run(HookPhase::PreSync).await;
    }
    // A PreSync hook that failed applies nothing more.
    let waves = match report.hook_failure() {
        None => by_wave(applying),
        Some(_) => BTreeMap::new(),
    };
    let mut remaining: usize = waves.values().map(Vec::len).sum();
    'waves: for (wave, steps) in waves {
        // A wait only reads: stopping drops it at once.
        let gates = await_wave(
            client,
            planned,
            wave,
            &steps,
            options,
            &failed_here,
            progress,
        );
        let Some(gates) = unless_stopped(&options.stop, gates).await else {
            report.stopped = true;
            break;
        };
        if let Err(blocked) = gates {
            report.blocked = Some(BlockedWave {
                not_applied: remaining,
                ..blocked
            });
            break;
        }
        remaining -= steps.len();
        for (_, batch) in by_rank(steps, |s| &s.change.key.kind) {
            let served = await_definitions(client, resources.clone(), planned, &batch);
            let Some(served) = unless_stopped(&options.stop, served).await else {
                report.stopped = true;
                break 'waves;
            };
            resources = served?;
            let resources = &resources;
            let results =
                apply_batch(planned, resources, batch, manager, options, unreachable).await;
            report.stopped = stopped(options);
            for (result, uid) in results {
                take_result(result, uid, &mut report, &mut uids, &mut failed_here);
                applied(report.objects.len());
            }
            if report.stopped {
                break 'waves;
            }
        }
    }
    for step in planned
        .steps
        .iter()
        .filter(|s| s.change.action == Action::Error)
    {
        report.objects.push(ObjectReport {
            key: step.change.key.clone(),
            outcome: Outcome::Failed(step.refusal.clone().unwrap_or_else(|| {
                ObjectFailure::Unplanned {
                    message: step.change.error.clone().unwrap_or_default(),
                }
            })),
        });
        applied(report.objects.len());
    }
    let mut removed = planned.forgotten.clone();
    // A blocked workflow prunes nothing: its later waves may still need what would go.
    // A stopped one neither: its source no longer wants this pass.
    if report.blocked.is_none() && !report.stopped && report.hook_failure().is_none() {
        let pruning = Pruning {
            client,
            resources: &resources,
            manager,
            options,
        };
        prune_all(&pruning, planned, &mut report, &mut removed, &applied).await?;
    }
    if let Some(hooks) = &hooks {
        later_hooks(hooks, planned, &mut report).await;
    }
    // A replica past its fence writes nothing more: the record written before the
    // apply holds every object it may have made, and the Source's new owner goes on.
    if !options.fence.holds() {
        report.stopped = true;
        return Ok(report);
    }
    let succeeded = report.succeeded();
    update_inventory(client, inventory, |current| {
        current.after_apply(
            &removed,
            &uids,
            commit.clone(),
            current.commit.clone(),
            succeeded,
        )
    })
    .await?;
    Ok(report)
}

/// One object's apply, into the report: its uid, and its failure for the waves
/// after it.
fn take_result(
    result: ObjectReport,
    uid: Option<String>,
    report: &mut ApplyReport,
    uids: &mut BTreeMap<ObjectKey, String>,
    failed_here: &mut HashMap<ObjectKey, String>,
) {
    if let Some(uid) = uid {
        uids.insert(result.key.clone(), uid);
    }
    if let Outcome::Failed(failure) = &result.outcome {
        failed_here.insert(result.key.clone(), failure.to_string());
    }
    report.objects.push(result);
}

/// The steps that make the Namespaces the PreSync hooks go into, and the others.
fn presync_namespaces<'s>(steps: Vec<&'s Step>, hooks: &[Hook]) -> (Vec<&'s Step>, Vec<&'s Step>) {
    let wanted: BTreeSet<&str> = in_phase(hooks, HookPhase::PreSync)
        .into_iter()
        .flatten()
        .filter_map(|hook| hook.object.namespace.as_deref())
        .collect();
    steps.into_iter().partition(|step| {
        let key = &step.change.key;
        key.kind == "Namespace" && key.group.is_empty() && wanted.contains(key.name.as_str())
    })
}

/// Whether the apply runs the plan's hooks: when it changes something, as Argo CD
/// runs them on a sync of what is out of sync.
fn runs_hooks(planned: &Planned) -> bool {
    !planned.hooks.is_empty()
        && planned
            .steps
            .iter()
            .any(|s| s.change.action != Action::Unchanged || s.force)
}

/// The hooks after the waves and the prune: Sync; PostSync once everything applied
/// is ready; SyncFail when anything failed (a hook too).
async fn later_hooks(hooks: &Hooks<'_>, planned: &Planned, report: &mut ApplyReport) {
    if report.succeeded() {
        let ran = hooks.run(HookPhase::Sync).await;
        report.hooks.extend(ran);
    }
    let post_sync = in_phase(&planned.hooks, HookPhase::PostSync);
    if let (true, Some(first)) = (
        report.succeeded(),
        post_sync.first().and_then(|g| g.first()),
    ) {
        let gates = planned.workflow.rollout(planned.members.as_ref());
        let ready = wait::wait_for(
            hooks.client,
            hooks.checks,
            &gates,
            hooks.timeout,
            &HashMap::new(),
            &|_| {},
        )
        .await;
        match ready {
            Ok(()) => {
                let ran = hooks.run(HookPhase::PostSync).await;
                report.hooks.extend(ran);
            }
            Err(blockers) => {
                let not_ready = blockers
                    .iter()
                    .map(|b| format!("{}: {}", b.key, b.state))
                    .collect::<Vec<_>>()
                    .join("; ");
                report.hooks.push(HookRun {
                    phase: HookPhase::PostSync,
                    key: first.key(),
                    failure: Some(format!("not run: not ready: {not_ready}")),
                    deleted: false,
                });
            }
        }
    }
    if !report.succeeded() && !report.stopped {
        let ran = hooks.run(HookPhase::SyncFail).await;
        report.hooks.extend(ran);
    }
}

/// Prunes (or releases, or reports as prunable) the objects whose model is gone.
/// What prune works with.
struct Pruning<'a> {
    client: &'a Client,
    resources: &'a Resources,
    manager: &'a str,
    options: &'a ApplyOptions,
}

async fn prune_all(
    pruning: &Pruning<'_>,
    planned: &Planned,
    report: &mut ApplyReport,
    removed: &mut BTreeSet<ObjectKey>,
    applied: &(dyn Fn(usize) + Sync),
) -> Result<(), ClusterError> {
    let deletions = planned.steps.iter().filter(|s| {
        matches!(
            s.change.action,
            Action::Delete | Action::Release | Action::RemoveHost
        )
    });
    // Beyond the deletion budget, and not approved: nothing is deleted.
    let held = pruning.options.prune
        && planned.plan.prune_hold.as_ref().is_some_and(|hold| {
            let by_commit = planned.plan.revision.iter().flat_map(|r| &r.approvals);
            let approvals = pruning.options.approved_deletions.iter().chain(by_commit);
            !hold.approved_by(approvals.map(String::as_str))
        });
    if held {
        report.prune_held = planned.plan.prune_hold.clone();
    }
    let mut done = report.objects.len();
    for step in deletions {
        if stopped(pruning.options) {
            report.stopped = true;
            break;
        }
        done += 1;
        applied(done);
        let outcome = match step.change.action {
            Action::Delete | Action::RemoveHost if held => {
                Some(Outcome::Failed(ObjectFailure::PruneHeld))
            }
            _ => prune_step(pruning, step).await?,
        };
        if matches!(
            outcome,
            None | Some(Outcome::Pruned) | Some(Outcome::Released)
        ) {
            removed.insert(step.change.key.clone());
        }
        // An object found gone was deleted by someone else: not counted as pruned.
        if let Some(outcome) = outcome {
            report.objects.push(ObjectReport {
                key: step.change.key.clone(),
                outcome,
            });
        }
    }
    Ok(())
}

/// The steps by the wave of the workflow they are applied in.
fn by_wave(steps: Vec<&Step>) -> BTreeMap<usize, Vec<&Step>> {
    let mut waves: BTreeMap<usize, Vec<&Step>> = BTreeMap::new();
    for step in steps {
        waves
            .entry(step.change.wave.unwrap_or(0))
            .or_default()
            .push(step);
    }
    waves
}

/// Records every object about to be applied in the inventory before any is applied;
/// returns the steps that apply.
async fn record_before_apply<'p>(
    client: &Client,
    inventory: &Inventory,
    planned: &'p Planned,
) -> Result<Vec<&'p Step>, ClusterError> {
    let applying = planned.steps.iter().filter(|s| s.object.is_some());
    let recording: Vec<(InventoryEntry, Provenance)> = applying
        .clone()
        .filter_map(|s| {
            let entry = InventoryEntry {
                api_version: s.change.api_version.clone(),
                kind: s.change.key.kind.clone(),
                namespace: s.change.key.namespace.clone(),
                name: s.change.key.name.clone(),
            };
            Some((entry, s.provenance.clone()?))
        })
        .collect();
    update_inventory(client, inventory, |current| {
        current.before_apply(recording.iter().cloned())
    })
    .await?;

    Ok(applying.collect())
}

/// Waits until what wave `wave` waits for is ready, unless the wave changes
/// nothing (then there is nothing to hold back).
async fn await_wave(
    client: &Client,
    planned: &Planned,
    wave: usize,
    steps: &[&Step],
    options: &ApplyOptions,
    failed_here: &HashMap<ObjectKey, String>,
    progress: &(dyn Fn(ApplyProgress<'_>) + Sync),
) -> Result<(), BlockedWave> {
    let changes = steps
        .iter()
        .any(|s| s.change.action != Action::Unchanged || s.force);
    let gates = planned.workflow.gates(wave, planned.members.as_ref());
    if !changes || gates.is_empty() {
        return Ok(());
    }
    let waves = planned.workflow.wave_count();
    tracing::info!(
        wave = wave + 1,
        waves,
        gates = gates.len(),
        "waiting for what the wave needs"
    );
    let shown = |not_ready: &[(ObjectKey, String)]| {
        progress(ApplyProgress::Waiting {
            wave,
            waves,
            not_ready,
        })
    };
    let timeout = options.wave_timeout.unwrap_or(DEFAULT_WAVE_TIMEOUT);
    wait::wait_for(
        client,
        &planned.models.health,
        &gates,
        timeout,
        failed_here,
        &shown,
    )
    .await
    .map_err(|blockers| BlockedWave {
        wave,
        waves,
        blockers,
        not_applied: 0,
    })
}

/// The API of a step's object.
fn api_of(resources: &Resources, step: &Step) -> Result<Api<DynamicObject>, ClusterError> {
    let key = &step.change.key;
    resources.api(
        &step.change.api_version,
        &key.kind,
        key.namespace.as_deref(),
    )
}

/// Applies the objects of one rank, as many at a time as `options.writes` says: each
/// one's report, and the uid the server gave it.
async fn apply_batch<'s>(
    planned: &Planned,
    resources: &Resources,
    batch: Vec<&'s Step>,
    manager: &str,
    options: &ApplyOptions,
    unreachable: &AtomicBool,
) -> Vec<(ObjectReport, Option<String>)> {
    let apply = |step: &'s Step| async move {
        // Checked as each object starts: those sent before the stop finish (and are
        // reported, their uid recorded); none starts after it.
        if stopped(options) {
            return Ok::<_, Infallible>(None);
        }
        // Made as it is applied: a pass holds one copy of each object's body.
        let desired = planned.desired(step);
        let applying = (step, desired.as_ref());
        let (outcome, uid) =
            match apply_one(resources, applying, manager, options, unreachable).await {
                Ok(uid) => {
                    let outcome = match step.change.action {
                        Action::Create => Outcome::Created,
                        Action::Replace => Outcome::Replaced,
                        Action::Update | Action::Conflict => Outcome::Configured,
                        _ => Outcome::Unchanged,
                    };
                    (outcome, uid)
                }
                Err(failure) => (Outcome::Failed(failure), None),
            };
        let report = ObjectReport {
            key: step.change.key.clone(),
            outcome,
        };
        Ok(Some((report, uid)))
    };
    let applied = in_flight::try_each(batch, options.writes.in_flight(), apply).await;
    applied.into_iter().flatten().flatten().collect()
}

/// Whether the apply must stop: its Source no longer wants it, or this process may not
/// write any more.
fn stopped(options: &ApplyOptions) -> bool {
    options.stop.is_cancelled() || !options.fence.holds()
}

/// `work`'s result, or `None` as soon as `stop` is cancelled (then `work`, which
/// must only read, is dropped).
async fn unless_stopped<T>(stop: &CancellationToken, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        result = work => Some(result),
        () = stop.cancelled() => None,
    }
}

/// What prune does with one object whose model is gone (`None`: it was gone).
async fn prune_step(pruning: &Pruning<'_>, step: &Step) -> Result<Option<Outcome>, ClusterError> {
    let Pruning {
        client,
        resources,
        manager,
        options,
    } = *pruning;
    Ok(match (options.prune, step.change.action) {
        (false, _) => Some(Outcome::Prunable),
        (true, Action::RemoveHost) => {
            let timeout = options.wave_timeout.unwrap_or(DEFAULT_WAVE_TIMEOUT);
            nodes::remove_host(client, &step.change.key.name, manager, timeout).await?
        }
        // What its annotation keeps is released even when adopted objects are deleted.
        (true, Action::Release) if !options.delete_adopted || step.change.directive.is_some() => {
            release_one(resources, step, manager).await?
        }
        (true, _)
            if let Some(kept) = guard(step.change.deletion(), options.delete_foreign_objects) =>
        {
            Some(Outcome::Failed(ObjectFailure::Kept(kept)))
        }
        (true, _) => prune_one(resources, step).await?,
    })
}

/// Releases an adopted object whose model is gone: tether's labels and annotations
/// removed, its field manager's entry dropped (so no field is removed with it), the
/// object kept. `None` when it was gone already.
async fn release_one(
    resources: &Resources,
    step: &Step,
    manager: &str,
) -> Result<Option<Outcome>, ClusterError> {
    let key = &step.change.key;
    let api = api_of(resources, step)?;
    let failed = |e: kube::Error| {
        Some(Outcome::Failed(ObjectFailure::Prune {
            retryable: ObjectFailure::of_kube_error(&e).retryable(),
            message: format!("release: {}", ObjectFailure::of_kube_error(&e)),
        }))
    };
    let live = match api.get_opt(&key.name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(None),
        Err(e) => return Ok(failed(e)),
    };
    let mut kept: Vec<_> = live
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !matches!(e.manager.as_deref(), Some(m) if m == manager || m == MANAGER))
        .collect();
    if kept.is_empty() {
        // An empty list would leave the server's tracking as it is: one empty entry
        // clears it.
        kept.push(Default::default());
    }
    let nothing = serde_json::Value::Null;
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": live.metadata.resource_version,
        "labels": {MANAGED_BY_LABEL: nothing, PART_OF_LABEL: nothing},
        "annotations": {
            MODEL_ANNOTATION: nothing,
            SOURCE_ANNOTATION: nothing,
            APPLIED_HASH_ANNOTATION: nothing,
        },
        "managedFields": kept,
    }});
    Ok(
        match api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Some(Outcome::Released),
            Err(kube::Error::Api(status)) if status.is_not_found() => None,
            Err(e) => failed(e),
        },
    )
}

/// Deletes one object whose model is gone; `None` when it was gone already.
async fn prune_one(resources: &Resources, step: &Step) -> Result<Option<Outcome>, ClusterError> {
    let key = &step.change.key;
    let api = api_of(resources, step)?;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    Ok(match api.delete(&key.name, &params).await {
        Ok(_) => Some(Outcome::Pruned),
        Err(kube::Error::Api(status)) if status.is_not_found() => None,
        Err(e) => Some(Outcome::Failed(
            match ObjectFailure::of_request("delete", &e) {
                forbidden @ ObjectFailure::Forbidden { .. } => forbidden,
                other => ObjectFailure::Prune {
                    retryable: other.retryable(),
                    message: e.to_string(),
                },
            },
        )),
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
    let mut poll = Poll::new(Duration::from_millis(500), Duration::from_secs(60));
    while unserved(&resources) && poll.next().await {
        resources = Resources::discover(client, &all_kinds).await?;
    }
    Ok(resources)
}

/// Server-side apply of one object, retrying what may pass on a second try (the
/// server busy, a namespace's service account token not made yet). When the server
/// stops answering altogether, `unreachable` is set and the remaining objects fail
/// at once instead of each waiting out its own retries.
/// Drops `manager`'s entry from the object's managed fields, on the object's
/// resourceVersion (looked up again when a controller's status write came first).
async fn forget_manager(api: &Api<DynamicObject>, object: &DynamicObject, manager: &str) {
    let name = object.metadata.name.clone().unwrap_or_default();
    let mut object = object.clone();
    for _ in 0..5 {
        let entries = object.metadata.managed_fields.clone().unwrap_or_default();
        let kept: Vec<_> = entries
            .iter()
            .filter(|e| e.manager.as_deref() != Some(manager))
            .cloned()
            .collect();
        if kept.len() == entries.len() || kept.is_empty() {
            return;
        }
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": object.metadata.resource_version,
            "managedFields": kept,
        }});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(status)) if status.is_conflict() => {}
            Err(error) => {
                // The type stays co-owned: a later switch back is refused by the server.
                tracing::warn!(%error, "could not forget the strategy switch's field manager");
                return;
            }
            Ok(_) => return,
        }
        object = match api.get(&name).await {
            Ok(object) => object,
            Err(_) => return,
        };
    }
}

/// What to do with one planned step, decided before any request (Flux's
/// `shouldSkipApply` and `shouldForceApply`).
#[derive(Debug, PartialEq)]
enum ApplyDecision {
    /// Nothing to write: no object, or one unchanged that takes no field.
    Skip,
    /// Not written, for this reason.
    Refuse(ObjectFailure),
    /// Written; `force` takes the fields other managers own.
    Apply { force: bool },
}

fn decide_apply(step: &Step, options: &ApplyOptions) -> ApplyDecision {
    if step.object.is_none() {
        return ApplyDecision::Skip;
    }
    let correcting = options.correct_drift && step.change.drift;
    match (&step.change.owned_by, step.change.action) {
        (Some(inventory), _) if !options.take_ownership => {
            return ApplyDecision::Refuse(ObjectFailure::OwnedByInventory {
                inventory: inventory.clone(),
            });
        }
        (None, Action::Unchanged) if !step.force => return ApplyDecision::Skip,
        (None, Action::Conflict) if !options.force_conflicts && !correcting => {
            return ApplyDecision::Refuse(ObjectFailure::Conflict(step.change.conflicts.clone()));
        }
        _ => {}
    }
    let taking = step.change.owned_by.is_some() && options.take_ownership;
    ApplyDecision::Apply {
        force: options.force_conflicts || step.force || taking || correcting,
    }
}

/// What follows a failed apply request.
#[derive(Debug, PartialEq)]
enum AfterFailure {
    /// Try again after the backoff: the server was busy, or not ready for the object.
    Retry,
    /// The object fails.
    Fail,
    /// The object fails, and the server is taken as gone for every object left.
    ServerGone,
}

/// Decides what follows a failed apply, the `attempt`th (`left`: more are allowed).
/// A server that answered is retried only when its answer may pass; one that did
/// not answer (a timeout, a refused connection) is tried once more, then given up
/// on for every object, so that each does not wait out its own retries.
fn after_failure(error: &kube::Error, attempt: u32, left: bool) -> AfterFailure {
    match error {
        kube::Error::Api(status) if status.is_conflict() => AfterFailure::Fail,
        kube::Error::Api(status) if ObjectFailure::may_pass_later(status) && left => {
            AfterFailure::Retry
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) if attempt < 2 => AfterFailure::Retry,
        kube::Error::HyperError(_) | kube::Error::Service(_) => AfterFailure::ServerGone,
        _ => AfterFailure::Fail,
    }
}

/// How a failed apply request shows in the report.
fn failure_of(error: &kube::Error) -> ObjectFailure {
    match error {
        kube::Error::Api(status) if status.is_conflict() => {
            ObjectFailure::Conflict(conflicts_of(status))
        }
        other => ObjectFailure::of_request("apply", other),
    }
}

#[instrument(skip_all, fields(object = %step.change.key))]
async fn apply_one(
    resources: &Resources,
    (step, desired): (&Step, Option<&serde_json::Value>),
    manager: &str,
    options: &ApplyOptions,
    unreachable: &AtomicBool,
) -> Result<Option<String>, ObjectFailure> {
    let force = match decide_apply(step, options) {
        ApplyDecision::Skip => return Ok(None),
        ApplyDecision::Refuse(failure) => return Err(failure),
        ApplyDecision::Apply { force } => force,
    };
    let (Some(desired), key) = (desired, &step.change.key) else {
        return Ok(None);
    };
    let api = api_of(resources, step).map_err(|e| ObjectFailure::Request {
        message: e.to_string(),
    })?;
    let params = crate::cluster::apply_params(manager, force);
    if step.change.action == Action::Replace {
        wait::deleted(&api, key, "replace").await?;
    }
    if nodes::is_node(key) {
        // Before the apply, which records the taints as set.
        nodes::sync_taints(&api.clone().into_client(), &key.name, desired, manager).await?;
    }
    let switch_manager = format!("{manager}-strategy-switch");
    prepare(&api, step, &switch_manager).await;
    let mut retries = Retries::new(Backoff::request(), ATTEMPTS);
    loop {
        if unreachable.load(Ordering::Relaxed) {
            return Err(ObjectFailure::Unreachable);
        }
        let error = match api.patch(&key.name, &params, &Patch::Apply(desired)).await {
            Ok(applied) => {
                if step.clear_rolling.is_some() {
                    // The switch's manager co-owns the type it set: forgotten, so that
                    // the type is the apply's alone (and goes with it later).
                    forget_manager(&api, &applied, &switch_manager).await;
                }
                return Ok(applied.metadata.uid);
            }
            Err(error) => error,
        };
        match after_failure(&error, retries.attempt(), retries.left()) {
            AfterFailure::Retry => {
                tracing::debug!(attempt = retries.attempt(), error = %error, "apply failed; retrying");
                retries.again().await;
                // A retry is a new write: none starts once the apply stopped.
                if stopped(options) {
                    return Err(failure_of(&error));
                }
            }
            AfterFailure::ServerGone => {
                unreachable.store(true, Ordering::Relaxed);
                return Err(failure_of(&error));
            }
            AfterFailure::Fail => return Err(failure_of(&error)),
        }
    }
}

/// The writes a step needs before its apply: the rolling update parameters cleared
/// (a strategy switch, as `switch_manager`), and the fields kubectl applied
/// client-side handed over. Either failing is logged: the apply then says why.
async fn prepare(api: &Api<DynamicObject>, step: &Step, switch_manager: &str) {
    let key = &step.change.key;
    if let Some(patch) = &step.clear_rolling {
        // A failure shows as the apply's own refusal.
        let switch = PatchParams {
            field_manager: Some(switch_manager.to_string()),
            ..PatchParams::default()
        };
        if let Err(error) = api.patch(&key.name, &switch, &Patch::Merge(patch)).await {
            tracing::debug!(%error, "could not clear the rolling update parameters");
        }
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
}

#[cfg(test)]
mod tests {
    use tether_core::plan::{Change, FieldConflict};

    use super::*;

    fn step(action: Action, owned_by: Option<&str>, drift: bool, force: bool) -> Step {
        Step {
            change: Change {
                conflicts: vec![FieldConflict {
                    manager: "kubectl-edit".into(),
                    field: ".data.key".into(),
                }],
                owned_by: owned_by.map(str::to_string),
                drift,
                ..Change::new(
                    ObjectKey::new("v1", "ConfigMap", Some("team"), "settings"),
                    "v1".into(),
                    action,
                )
            },
            object: Some(0),
            force,
            hand_over: None,
            clear_rolling: None,
            provenance: None,
            refusal: None,
            pins: Vec::new(),
        }
    }

    #[test]
    fn a_step_is_skipped_refused_or_applied_with_force_only_when_asked() {
        let plain = ApplyOptions::default();
        let correcting = ApplyOptions {
            correct_drift: true,
            ..ApplyOptions::default()
        };
        let forcing = ApplyOptions {
            force_conflicts: true,
            ..ApplyOptions::default()
        };
        let taking = ApplyOptions {
            take_ownership: true,
            ..ApplyOptions::default()
        };
        use ApplyDecision::{Apply, Refuse, Skip};
        let other = Some("team-b/tether");
        let cases = [
            (step(Action::Unchanged, None, false, false), &plain, Skip),
            (
                step(Action::Unchanged, None, false, true),
                &plain,
                Apply { force: true },
            ),
            (
                step(Action::Update, None, false, false),
                &plain,
                Apply { force: false },
            ),
            (
                step(Action::Create, None, false, false),
                &forcing,
                Apply { force: true },
            ),
            (
                step(Action::Conflict, None, true, false),
                &correcting,
                Apply { force: true },
            ),
            (
                step(Action::Conflict, None, false, false),
                &forcing,
                Apply { force: true },
            ),
            (
                step(Action::Update, other, false, false),
                &taking,
                Apply { force: true },
            ),
        ];
        for (step, options, expected) in cases {
            assert_eq!(
                decide_apply(&step, options),
                expected,
                "{:?}",
                step.change.action
            );
        }
        assert!(matches!(
            decide_apply(&step(Action::Conflict, None, true, false), &plain),
            Refuse(ObjectFailure::Conflict(_))
        ));
        assert!(matches!(
            decide_apply(&step(Action::Update, other, false, false), &correcting),
            Refuse(ObjectFailure::OwnedByInventory { .. })
        ));
        let deletion = Step {
            object: None,
            ..step(Action::Delete, None, false, false)
        };
        assert_eq!(decide_apply(&deletion, &forcing), Skip);
    }

    /// The server's answer, with the reason it gives with each code.
    fn answered(code: u16, message: &str) -> kube::Error {
        let reason = match code {
            409 => "Conflict",
            422 => "Invalid",
            _ => "",
        };
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..kube::core::Status::default()
        }))
    }

    #[test]
    fn a_busy_server_is_retried_a_refusal_is_not_and_a_silent_one_is_given_up_on() {
        use AfterFailure::{Fail, Retry};
        assert_eq!(after_failure(&answered(503, "busy"), 1, true), Retry);
        assert_eq!(after_failure(&answered(429, "slow down"), 5, true), Retry);
        assert_eq!(after_failure(&answered(503, "busy"), 6, false), Fail);
        assert_eq!(after_failure(&answered(409, "conflict"), 1, true), Fail);
        assert_eq!(after_failure(&answered(422, "invalid"), 1, true), Fail);
        assert_eq!(
            after_failure(
                &answered(403, "error looking up service account team/default"),
                1,
                true
            ),
            Retry
        );
        assert!(matches!(
            failure_of(&answered(409, "conflict")),
            ObjectFailure::Conflict(_)
        ));
    }
}
