//! Planning against the cluster: the live objects (one list per kind, by the
//! inventory's label), and a server-side dry run for each object that is not provably
//! unchanged. The comparisons themselves are in the pure `crate::plan`.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tracing::instrument;

use super::Step;
use crate::cluster::{ClusterError, Resources};
use crate::inventory::{InventoryRecord, prune_candidates};
use crate::k8s::{ObjectKey, api_group};
use crate::ownership::{
    Inventory, MANAGER, MODEL_ANNOTATION, PART_OF_LABEL, SOURCE_ANNOTATION, annotation,
};
use crate::plan::{
    Action, Change, change_diff, conflicts_of, provably_unchanged, with_applied_hash,
};
use crate::render::RenderedObject;

/// How many requests are in flight at once.
pub(super) const CONCURRENCY: usize = 16;

/// The steps of a plan, with what they were planned from.
pub(super) struct Planning {
    pub steps: Vec<Step>,
    pub record: InventoryRecord,
    pub resources: Resources,
}

pub(super) fn api_error(action: String) -> impl FnOnce(kube::Error) -> ClusterError {
    move |source| ClusterError::Api { action, source }
}

/// Compares the rendered objects with the cluster; deletions (last, in reverse apply
/// order) are the inventory's prune candidates.
#[instrument(skip_all, fields(objects = objects.len(), recorded = record.entries.len()))]
pub(super) async fn plan(
    client: &Client,
    inventory: &Inventory,
    objects: &[RenderedObject],
    record: InventoryRecord,
) -> Result<Planning, ClusterError> {
    let mut kinds: BTreeSet<(String, String)> = objects
        .iter()
        .map(|o| (o.api_version.clone(), o.kind.clone()))
        .collect();
    kinds.extend(record.kinds());
    let resources = Resources::discover(client, &kinds).await?;
    check_served(&resources, objects)?;
    let live = list_labelled(&resources, &kinds, &inventory.applyset_id()).await?;
    let mut steps: Vec<Step> = futures::stream::iter(
        objects
            .iter()
            .map(|object| plan_object(&resources, object, &live)),
    )
    .buffered(CONCURRENCY)
    .try_collect()
    .await?;
    let rendered: BTreeSet<ObjectKey> = objects.iter().map(RenderedObject::key).collect();
    let applyset = inventory.applyset_id();
    steps.extend(
        prune_candidates(&record, &rendered, &live, &applyset)
            .into_iter()
            .filter_map(|entry| {
                let key = entry.key();
                let object = live.get(&key)?;
                Some(Step {
                    change: Change {
                        diff: change_diff(&entry.kind, Some(object), None),
                        model: annotation(object, MODEL_ANNOTATION),
                        source: annotation(object, SOURCE_ANNOTATION),
                        key,
                        api_version: entry.api_version.clone(),
                        action: Action::Delete,
                        conflicts: Vec::new(),
                    },
                    desired: None,
                })
            }),
    );
    Ok(Planning {
        steps,
        record,
        resources,
    })
}

/// Every kind rendered is served, or defined by a CustomResourceDefinition of this
/// same apply (then it is created after the definition, by apply order).
fn check_served(resources: &Resources, objects: &[RenderedObject]) -> Result<(), ClusterError> {
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
    Ok(())
}

/// Everything labelled for this inventory, one list per kind.
#[instrument(skip_all)]
async fn list_labelled(
    resources: &Resources,
    kinds: &BTreeSet<(String, String)>,
    applyset: &str,
) -> Result<HashMap<ObjectKey, Value>, ClusterError> {
    let selector = ListParams::default().labels(&format!("{PART_OF_LABEL}={applyset}"));
    let mut live = HashMap::new();
    for (api_version, kind) in kinds {
        if resources.namespaced(api_version, kind).is_none() {
            continue; // a kind only the inventory knows, no longer served: nothing to list
        }
        let list = resources
            .api_all(api_version, kind)?
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
    Ok(live)
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

async fn plan_object(
    resources: &Resources,
    object: &RenderedObject,
    labelled: &HashMap<ObjectKey, Value>,
) -> Result<Step, ClusterError> {
    let key = object.key();
    let desired = with_applied_hash(&object.body);
    let step = |action, diff, conflicts| Step {
        change: Change {
            key: key.clone(),
            api_version: object.api_version.clone(),
            action,
            model: Some(object.model.clone()),
            source: Some(object.source.clone()),
            diff,
            conflicts,
        },
        desired: Some(desired.clone()),
    };
    let created = || change_diff(&object.kind, None, Some(&object.body));
    if resources
        .namespaced(&object.api_version, &object.kind)
        .is_none()
    {
        // Defined by a CustomResourceDefinition of this apply: new by definition.
        return Ok(step(Action::Create, created(), Vec::new()));
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
    let Some(live) = live else {
        return Ok(step(Action::Create, created(), Vec::new()));
    };
    if provably_unchanged(&desired, &live) {
        return Ok(step(Action::Unchanged, String::new(), Vec::new()));
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
    Ok(step(action, diff, conflicts))
}
