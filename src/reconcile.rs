//! The reconcile pass against a live cluster: plan (list, compare, dry-run), then
//! apply (server-side apply in dependency order, independent objects in parallel),
//! then prune (only objects in the inventory, carrying tether's labels, whose model is
//! gone). The inventory is written before anything is applied, so an interrupted
//! apply leaves nothing untracked, and the next apply completes it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::cluster::{ClusterError, Resources, write_inventory};
use crate::git::Revision;
use crate::inventory::{InventoryEntry, InventoryRecord};
use crate::k8s::{ObjectKey, api_group, apply_rank};
use crate::ownership::carries_tether_labels;
use crate::ownership::{Inventory, MANAGER, PART_OF_LABEL};
use crate::plan::{
    Action, Change, Plan, change_diff, conflicts_of, provably_unchanged, with_applied_hash,
};
use crate::render::RenderedObject;

/// How many requests are in flight at once.
const CONCURRENCY: usize = 16;

/// A change and what carrying it out needs.
pub struct Planned {
    pub change: Change,
    /// The body to apply (with the applied-hash annotation); none for deletions.
    desired: Option<Value>,
}

/// The plan and the work behind it.
pub struct Reconciliation {
    pub plan: Plan,
    planned: Vec<Planned>,
    record: InventoryRecord,
    resources: Resources,
}

fn api_error(action: String) -> impl FnOnce(kube::Error) -> ClusterError {
    move |source| ClusterError::Api { action, source }
}

/// Compares the rendered objects with the cluster. Deletions are planned for objects
/// that the inventory records, that carry tether's labels, and that no model renders;
/// never when there are no rendered objects at all.
pub async fn plan(
    client: &Client,
    inventory: &Inventory,
    objects: &[RenderedObject],
    record: InventoryRecord,
    source: String,
    revision: Option<Revision>,
    prune: bool,
) -> Result<Reconciliation, ClusterError> {
    let mut kinds: BTreeSet<(String, String)> = objects
        .iter()
        .map(|o| (o.api_version.clone(), o.kind.clone()))
        .collect();
    kinds.extend(
        record
            .entries
            .iter()
            .map(|e| (e.api_version.clone(), e.kind.clone())),
    );
    let start = std::time::Instant::now();
    let resources = Resources::discover(client, &kinds).await?;
    tracing::debug!(elapsed_ms = start.elapsed().as_millis(), "discovered");
    // A kind the server does not serve yet is fine when a CustomResourceDefinition in
    // this same apply defines it: it is created after the definition (apply order).
    let defined_here: BTreeSet<(String, String)> = objects
        .iter()
        .filter(|o| o.kind == "CustomResourceDefinition")
        .filter_map(|o| {
            let spec = &o.body["spec"];
            Some((
                spec["group"].as_str()?.to_string(),
                spec["names"]["kind"].as_str()?.to_string(),
            ))
        })
        .collect();
    for object in objects {
        let served = resources
            .namespaced(&object.api_version, &object.kind)
            .is_some();
        let defined = defined_here.contains(&(
            api_group(&object.api_version).to_string(),
            object.kind.clone(),
        ));
        if !served && !defined {
            return Err(ClusterError::UnknownKind {
                api_version: object.api_version.clone(),
                kind: object.kind.clone(),
            });
        }
    }
    // Everything labelled for this inventory, one list per kind.
    let selector =
        ListParams::default().labels(&format!("{PART_OF_LABEL}={}", inventory.applyset_id()));
    let mut live: HashMap<ObjectKey, Value> = HashMap::new();
    for (api_version, kind) in &kinds {
        if resources.namespaced(api_version, kind).is_none() {
            continue; // a kind only the inventory knows, no longer served: nothing to list
        }
        let api = resources.api_all(api_version, kind)?;
        let list = api
            .list(&selector)
            .await
            .map_err(api_error(format!("list {kind} objects")))?;
        for item in list.items {
            let key = ObjectKey::new(
                api_version,
                kind,
                item.namespace().as_deref(),
                &item.name_any(),
            );
            live.insert(key, live_value(item, api_version, kind));
        }
    }
    tracing::debug!(elapsed_ms = start.elapsed().as_millis(), "listed");
    let planned: Vec<Planned> = futures::stream::iter(
        objects
            .iter()
            .map(|object| plan_object(&resources, object, &live)),
    )
    .buffered(CONCURRENCY)
    .try_collect()
    .await?;
    let mut planned = planned;
    let rendered: BTreeSet<ObjectKey> = objects
        .iter()
        .map(|o| ObjectKey::new(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name))
        .collect();
    if !objects.is_empty() {
        let mut deletions: Vec<Planned> = record
            .entries
            .iter()
            .filter(|e| !rendered.contains(&e.key()))
            .filter_map(|e| {
                live.get(&e.key())
                    .filter(|l| carries_tether_labels(l, &inventory.applyset_id()))
                    .map(|l| (e, l))
            })
            .map(|(entry, object)| {
                let value = object.clone();
                Planned {
                    change: Change {
                        key: entry.key(),
                        api_version: entry.api_version.clone(),
                        action: Action::Delete,
                        model: annotation(&value, crate::ownership::MODEL_ANNOTATION),
                        source: annotation(&value, crate::ownership::SOURCE_ANNOTATION),
                        diff: change_diff(&entry.kind, Some(&value), None),
                        conflicts: Vec::new(),
                    },
                    desired: None,
                }
            })
            .collect();
        deletions.sort_by(|a, b| {
            (apply_rank(&b.change.key.kind), &b.change.key)
                .cmp(&(apply_rank(&a.change.key.kind), &a.change.key))
        });
        planned.extend(deletions);
    }
    let plan = Plan {
        source,
        revision,
        changes: planned.iter().map(|p| p.change.clone()).collect(),
        prune,
    };
    Ok(Reconciliation {
        plan,
        planned,
        record,
        resources,
    })
}

/// A live object as JSON, with the apiVersion and kind that list items come without,
/// and without managedFields (never compared, and the bulk of a listed object).
fn live_value(mut object: DynamicObject, api_version: &str, kind: &str) -> Value {
    object.metadata.managed_fields = None;
    let mut map = serde_json::Map::new();
    map.insert("apiVersion".into(), Value::String(api_version.into()));
    map.insert("kind".into(), Value::String(kind.into()));
    map.insert(
        "metadata".into(),
        serde_json::to_value(&object.metadata).unwrap_or_default(),
    );
    if let Value::Object(data) = object.data {
        map.extend(data);
    }
    Value::Object(map)
}

fn annotation(object: &Value, key: &str) -> Option<String> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

async fn plan_object(
    resources: &Resources,
    object: &RenderedObject,
    labelled: &HashMap<ObjectKey, Value>,
) -> Result<Planned, ClusterError> {
    let key = ObjectKey::new(
        &object.api_version,
        &object.kind,
        object.namespace.as_deref(),
        &object.name,
    );
    let desired = with_applied_hash(&object.body);
    if resources
        .namespaced(&object.api_version, &object.kind)
        .is_none()
    {
        // Defined by a CustomResourceDefinition of this apply: new by definition.
        return Ok(Planned {
            change: Change {
                key,
                api_version: object.api_version.clone(),
                action: Action::Create,
                model: Some(object.model.clone()),
                source: Some(object.source.clone()),
                diff: change_diff(&object.kind, None, Some(&object.body)),
                conflicts: Vec::new(),
            },
            desired: Some(desired),
        });
    }
    let api = resources.api(
        &object.api_version,
        &object.kind,
        object.namespace.as_deref(),
    )?;
    let live: Option<Cow<'_, Value>> = match labelled.get(&key) {
        Some(live) => Some(Cow::Borrowed(live)),
        // Not labelled for us: new, or someone else's object with the same name.
        None => api
            .get_opt(&object.name)
            .await
            .map_err(api_error(format!("read {key}")))?
            .map(|o| Cow::Owned(live_value(o, &object.api_version, &object.kind))),
    };
    let change = |action, diff, conflicts| Change {
        key: key.clone(),
        api_version: object.api_version.clone(),
        action,
        model: Some(object.model.clone()),
        source: Some(object.source.clone()),
        diff,
        conflicts,
    };
    let Some(live) = live else {
        let diff = change_diff(&object.kind, None, Some(&object.body));
        return Ok(Planned {
            change: change(Action::Create, diff, Vec::new()),
            desired: Some(desired),
        });
    };
    if provably_unchanged(&desired, &live) {
        return Ok(Planned {
            change: change(Action::Unchanged, String::new(), Vec::new()),
            desired: Some(desired),
        });
    }
    let dry_run = PatchParams::apply(MANAGER).dry_run();
    let (result, conflicts) = match api
        .patch(&object.name, &dry_run, &Patch::Apply(&desired))
        .await
    {
        Ok(result) => (result, Vec::new()),
        Err(kube::Error::Api(status)) if status.is_conflict() => {
            // Show what taking the fields would change, too.
            let forced = api
                .patch(
                    &object.name,
                    &dry_run.clone().force(),
                    &Patch::Apply(&desired),
                )
                .await
                .map_err(api_error(format!("dry-run apply {key}")))?;
            (forced, conflicts_of(&status))
        }
        Err(e) => return Err(api_error(format!("dry-run apply {key}"))(e)),
    };
    let result = live_value(result, &object.api_version, &object.kind);
    let diff = change_diff(&object.kind, Some(&live), Some(&result));
    let action = match (conflicts.is_empty(), diff.is_empty()) {
        (false, _) => Action::Conflict,
        (true, true) => Action::Unchanged,
        (true, false) => Action::Update,
    };
    Ok(Planned {
        change: change(action, diff, conflicts),
        desired: Some(desired),
    })
}

#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    pub prune: bool,
    pub force_conflicts: bool,
}

/// What an apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplySummary {
    pub created: usize,
    pub configured: usize,
    pub unchanged: usize,
    pub pruned: usize,
    /// Objects not applied or not pruned, with why.
    pub failed: Vec<(String, String)>,
    /// Deletions left for `--prune`.
    pub prunable: usize,
}

/// Carries out a plan. `progress` is called after each object with (done, total).
pub async fn apply(
    client: &Client,
    inventory: &Inventory,
    reconciliation: Reconciliation,
    options: &ApplyOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<ApplySummary, ClusterError> {
    let Reconciliation {
        plan,
        planned,
        record,
        mut resources,
    } = reconciliation;
    let commit = plan.revision.as_ref().map(|r| r.commit.clone());
    // Record every object about to be applied before applying any.
    let mut entries = record.entries.clone();
    for p in planned.iter().filter(|p| p.desired.is_some()) {
        entries.insert(InventoryEntry {
            api_version: p.change.api_version.clone(),
            kind: p.change.key.kind.clone(),
            namespace: p.change.key.namespace.clone(),
            name: p.change.key.name.clone(),
        });
    }
    write_inventory(
        client,
        inventory,
        &InventoryRecord {
            entries: entries.clone(),
            commit: record.commit.clone(),
        },
    )
    .await?;

    let mut summary = ApplySummary::default();
    let total = planned.len();
    let mut done = 0;
    // Apply rank by rank; within a rank, in parallel.
    let mut ranks: BTreeMap<u8, Vec<&Planned>> = BTreeMap::new();
    for p in planned.iter().filter(|p| p.desired.is_some()) {
        ranks
            .entry(apply_rank(&p.change.key.kind))
            .or_default()
            .push(p);
    }
    let all_kinds: BTreeSet<(String, String)> = planned
        .iter()
        .map(|p| (p.change.api_version.clone(), p.change.key.kind.clone()))
        .collect();
    let unreachable = &AtomicBool::new(false);
    for (_, batch) in ranks {
        let pending: Vec<&Planned> = batch
            .iter()
            .copied()
            .filter(|p| {
                resources
                    .namespaced(&p.change.api_version, &p.change.key.kind)
                    .is_none()
            })
            .collect();
        if !pending.is_empty() {
            resources = await_definitions(client, resources, &all_kinds, &pending).await?;
        }
        let resources = &resources;
        let results: Vec<(&Planned, Result<(), String>)> =
            futures::stream::iter(batch.into_iter().map(|p| async move {
                let result = apply_one(resources, p, options, unreachable).await;
                (p, result)
            }))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (p, result) in results {
            done += 1;
            progress(done, total);
            match (result, p.change.action) {
                (Ok(()), Action::Create) => summary.created += 1,
                (Ok(()), Action::Update | Action::Conflict) => summary.configured += 1,
                (Ok(()), _) => summary.unchanged += 1,
                (Err(why), _) => summary.failed.push((p.change.key.to_string(), why)),
            }
        }
    }
    let mut pruned = BTreeSet::new();
    for p in planned.iter().filter(|p| p.change.action == Action::Delete) {
        done += 1;
        progress(done, total);
        if !options.prune {
            summary.prunable += 1;
            continue;
        }
        let api = resources.api(
            &p.change.api_version,
            &p.change.key.kind,
            p.change.key.namespace.as_deref(),
        )?;
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match api.delete(&p.change.key.name, &params).await {
            Ok(_) => {
                summary.pruned += 1;
                pruned.insert(p.change.key.clone());
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                pruned.insert(p.change.key.clone());
            }
            Err(e) => summary
                .failed
                .push((p.change.key.to_string(), format!("prune: {e}"))),
        }
    }
    entries.retain(|e| !pruned.contains(&e.key()));
    let final_commit = if summary.failed.is_empty() {
        commit
    } else {
        record.commit
    };
    write_inventory(
        client,
        inventory,
        &InventoryRecord {
            entries,
            commit: final_commit,
        },
    )
    .await?;
    Ok(summary)
}

/// Waits (up to a minute) until the server serves the kinds of `pending`, which
/// CustomResourceDefinitions applied moments ago define; returns the refreshed
/// resources. Kinds still not served then fail when their objects are applied.
async fn await_definitions(
    client: &Client,
    mut resources: Resources,
    all_kinds: &BTreeSet<(String, String)>,
    pending: &[&Planned],
) -> Result<Resources, ClusterError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let served = pending.iter().all(|p| {
            resources
                .namespaced(&p.change.api_version, &p.change.key.kind)
                .is_some()
        });
        if served || tokio::time::Instant::now() >= deadline {
            return Ok(resources);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        resources = Resources::discover(client, all_kinds).await?;
    }
}

/// Server-side apply of one object, retrying what may pass on a second try (the
/// server busy, a namespace's service account token not made yet). When the server
/// stops answering altogether, `unreachable` is set and the remaining objects fail
/// at once instead of each waiting out its own retries.
async fn apply_one(
    resources: &Resources,
    planned: &Planned,
    options: &ApplyOptions,
    unreachable: &AtomicBool,
) -> Result<(), String> {
    let Some(desired) = &planned.desired else {
        return Ok(());
    };
    if planned.change.action == Action::Unchanged {
        return Ok(());
    }
    if planned.change.action == Action::Conflict && !options.force_conflicts {
        return Err(conflict_message(&planned.change.conflicts));
    }
    let key = &planned.change.key;
    let api = resources
        .api(
            &planned.change.api_version,
            &key.kind,
            key.namespace.as_deref(),
        )
        .map_err(|e| e.to_string())?;
    let mut params = PatchParams::apply(MANAGER);
    if options.force_conflicts {
        params = params.force();
    }
    let mut delay = Duration::from_millis(250);
    for attempt in 1.. {
        if unreachable.load(Ordering::Relaxed) {
            return Err("not applied: the API server stopped answering".into());
        }
        let error = match api.patch(&key.name, &params, &Patch::Apply(desired)).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let retry = match &error {
            kube::Error::Api(status) if status.is_conflict() => {
                return Err(conflict_message(&conflicts_of(status)));
            }
            // The server answered: busy, or not ready for this object yet.
            kube::Error::Api(status) => {
                (status.code >= 500 || status.code == 429 || awaits_service_account(status))
                    && attempt < 6
            }
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
            return Err(error.to_string());
        }
        tracing::debug!(object = %key, attempt, error = %error, "apply failed; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(4));
    }
    Ok(())
}

/// A pod refused because its service account does not exist yet: a namespace's
/// `default` account is made by a controller moments after the namespace.
fn awaits_service_account(status: &kube::core::Status) -> bool {
    status.code == 403 && status.message.contains("error looking up service account")
}

fn conflict_message(conflicts: &[crate::plan::FieldConflict]) -> String {
    let fields: Vec<String> = conflicts
        .iter()
        .map(|c| format!("{} (owned by {})", c.field, c.manager))
        .collect();
    format!(
        "conflict: {}; use --force-conflicts to take these fields",
        fields.join(", ")
    )
}

/// Waits until the workloads among `objects` are ready (Deployments available,
/// StatefulSets and DaemonSets ready, Pods running, Jobs complete) and returns the
/// ones that were not when `timeout` ran out, with their state.
pub async fn wait_ready(
    client: &Client,
    objects: &[RenderedObject],
    timeout: Duration,
) -> Vec<(ObjectKey, String)> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut waiting: Vec<&RenderedObject> = objects
        .iter()
        .filter(|o| {
            matches!(
                o.kind.as_str(),
                "Deployment" | "StatefulSet" | "DaemonSet" | "Pod" | "Job"
            )
        })
        .collect();
    let mut states: HashMap<ObjectKey, String> = HashMap::new();
    loop {
        let mut still = Vec::new();
        for object in waiting {
            let key = ObjectKey::new(
                &object.api_version,
                &object.kind,
                object.namespace.as_deref(),
                &object.name,
            );
            match readiness(client, object).await {
                Ok(None) => {}
                Ok(Some(state)) => {
                    states.insert(key, state);
                    still.push(object);
                }
                Err(e) => {
                    states.insert(key, e.to_string());
                    still.push(object);
                }
            }
        }
        waiting = still;
        if waiting.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    waiting
        .iter()
        .map(|o| {
            let key = ObjectKey::new(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name);
            let state = states.get(&key).cloned().unwrap_or_default();
            (key, state)
        })
        .collect()
}

/// `None` when ready, else what it is waiting for.
async fn readiness(
    client: &Client,
    object: &RenderedObject,
) -> Result<Option<String>, kube::Error> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    let namespace = object.namespace.as_deref().unwrap_or_default();
    let name = &object.name;
    Ok(match object.kind.as_str() {
        "Deployment" => {
            let d = kube::Api::<Deployment>::namespaced(client.clone(), namespace)
                .get(name)
                .await?;
            let want = d.spec.and_then(|s| s.replicas).unwrap_or(1);
            let status = d.status.unwrap_or_default();
            let fresh = status.observed_generation >= d.metadata.generation;
            let (available, updated) = (
                status.available_replicas.unwrap_or(0),
                status.updated_replicas.unwrap_or(0),
            );
            (!(fresh && available >= want && updated >= want))
                .then(|| format!("{available}/{want} replicas available"))
        }
        "StatefulSet" => {
            let s = kube::Api::<StatefulSet>::namespaced(client.clone(), namespace)
                .get(name)
                .await?;
            let want = s.spec.and_then(|s| s.replicas).unwrap_or(1);
            let ready = s.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            (ready < want).then(|| format!("{ready}/{want} replicas ready"))
        }
        "DaemonSet" => {
            let d = kube::Api::<DaemonSet>::namespaced(client.clone(), namespace)
                .get(name)
                .await?;
            let status = d.status.unwrap_or_default();
            let (ready, want) = (status.number_ready, status.desired_number_scheduled);
            (ready < want || status.observed_generation < d.metadata.generation)
                .then(|| format!("{ready}/{want} pods ready"))
        }
        "Pod" => {
            let p = kube::Api::<Pod>::namespaced(client.clone(), namespace)
                .get(name)
                .await?;
            let phase = p
                .status
                .and_then(|s| s.phase)
                .unwrap_or_else(|| "Pending".into());
            (!matches!(phase.as_str(), "Running" | "Succeeded")).then(|| format!("phase {phase}"))
        }
        "Job" => {
            let j = kube::Api::<Job>::namespaced(client.clone(), namespace)
                .get(name)
                .await?;
            let want = j.spec.and_then(|s| s.completions).unwrap_or(1);
            let done = j.status.and_then(|s| s.succeeded).unwrap_or(0);
            (done < want).then(|| format!("{done}/{want} completions"))
        }
        _ => None,
    })
}
