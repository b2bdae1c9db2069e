//! What a Source's page reads from its cluster when it is opened, as the Source's
//! own identity: its objects (for readiness), the pods of its namespaces, its hosts'
//! nodes and the Events about its objects. A few requests per page (one per object
//! up to [`MAX_OBJECTS_READ`], one list of pods and of Events per namespace, one of
//! nodes), read at once; then the views are made by the pure functions of
//! [`tether_web::build`].

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tether_core::k8s::ObjectKey;
use tether_web::{EventRow, HostRow, SourceDetail, build};

use crate::loop_views::Snapshot;

/// Past this many objects, a page shows the plan without each object's readiness
/// (its readiness is one read per object).
pub(crate) const MAX_OBJECTS_READ: usize = 200;
/// How many objects are read at once.
const READS_AT_ONCE: usize = 16;
/// How many Events a page shows.
const MAX_EVENTS: usize = 50;

/// The whole of a Source, as its page shows it.
pub(crate) async fn detail(snapshot: &Snapshot) -> SourceDetail {
    let mut detail = SourceDetail {
        summary: snapshot.summary.clone(),
        images: snapshot.images.clone(),
        last_revert: snapshot.last_revert.clone(),
        ..SourceDetail::default()
    };
    let Some(last) = &snapshot.last else {
        return detail;
    };
    let plan = &last.plan;
    let mut models = build::model_nodes(plan, &snapshot.applied, &snapshot.failed, &snapshot.drift);
    detail.graph = build::graph(&last.workflow);
    detail.report_markdown = Some(tether_core::report::markdown(
        plan,
        crate::source_status::remedy_words,
    ));
    let files = &last.models.loaded.files;
    let read = tether_core::operation::read_models(files);
    let commit = plan.revision.as_ref().map(|r| r.commit.as_str());
    detail.discovered = build::discovered(&read, files, commit);
    if let Some(url) = &snapshot.handle.url {
        for pod in &mut detail.discovered {
            pod.commit_link = pod
                .commit
                .as_deref()
                .and_then(|c| crate::loop_views::commit_link(url, c));
        }
    }
    let Some(client) = &snapshot.client else {
        detail.models = models;
        return detail;
    };
    let namespaces: BTreeSet<String> = plan
        .changes
        .iter()
        .filter_map(|c| c.key.namespace.clone())
        .collect();
    let keys: Vec<(String, ObjectKey)> = plan
        .changes
        .iter()
        .map(|c| (c.api_version.clone(), c.key.clone()))
        .collect();
    let want_nodes = !read.hosts.is_empty();
    let (objects, pods, events, nodes) = futures::join!(
        objects(client, &keys),
        pods(client, &namespaces, want_nodes),
        events(client, &namespaces, &keys),
        nodes(client, want_nodes),
    );
    build::with_live(&mut models, &objects, &pods, &last.models.health);
    detail.models = models;
    detail.events = events;
    detail.hosts = build::hosts(&read, files, &nodes, &pods);
    detail
}

/// The Source's hosts (its Node models); with `live`, each node's readiness and the
/// pods on it (one list of nodes and one of pods), else what the models say alone.
pub(crate) async fn hosts(snapshot: &Snapshot, live: bool) -> Vec<HostRow> {
    let Some(last) = &snapshot.last else {
        return Vec::new();
    };
    let files = &last.models.loaded.files;
    let read = tether_core::operation::read_models(files);
    let everywhere = BTreeSet::new();
    let (nodes, pods) = match (&snapshot.client, live && !read.hosts.is_empty()) {
        (Some(client), true) => {
            futures::join!(nodes(client, true), pods(client, &everywhere, true))
        }
        _ => (BTreeMap::new(), Vec::new()),
    };
    build::hosts(&read, files, &nodes, &pods)
}

/// The live objects of the plan, by key (none past [`MAX_OBJECTS_READ`]); an object
/// that cannot be read is left out (its readiness is not known).
async fn objects(client: &Client, keys: &[(String, ObjectKey)]) -> BTreeMap<ObjectKey, Value> {
    if keys.len() > MAX_OBJECTS_READ {
        return BTreeMap::new();
    }
    // Owned values: the reads run at once, each with its own key and client.
    futures::stream::iter(keys.to_vec())
        .map(|(api_version, key)| read_object(client.clone(), api_version, key))
        .buffer_unordered(READS_AT_ONCE)
        .filter_map(|read| async move { read })
        .collect()
        .await
}

async fn read_object(
    client: Client,
    api_version: String,
    key: ObjectKey,
) -> Option<(ObjectKey, Value)> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &key.kind));
    let api: Api<DynamicObject> = match &key.namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object = api.get_opt(&key.name).await.ok().flatten()?;
    Some((key, serde_json::to_value(object).ok()?))
}

/// The pods of the namespaces (and, for hosts, of every namespace: the pods on a
/// node are anyone's).
async fn pods(client: &Client, namespaces: &BTreeSet<String>, everywhere: bool) -> Vec<Value> {
    let lists: Vec<Api<Pod>> = match everywhere {
        true => vec![Api::all(client.clone())],
        false => namespaces
            .iter()
            .map(|n| Api::namespaced(client.clone(), n))
            .collect(),
    };
    let mut pods = Vec::new();
    for api in lists {
        if let Ok(list) = api.list(&ListParams::default()).await {
            pods.extend(
                list.items
                    .iter()
                    .filter_map(|p| serde_json::to_value(p).ok()),
            );
        }
    }
    pods
}

async fn nodes(client: &Client, wanted: bool) -> BTreeMap<String, Value> {
    if !wanted {
        return BTreeMap::new();
    }
    let api: Api<Node> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter_map(|n| Some((n.name_any(), serde_json::to_value(n).ok()?)))
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// The Events about the plan's objects, newest first.
async fn events(
    client: &Client,
    namespaces: &BTreeSet<String>,
    keys: &[(String, ObjectKey)],
) -> Vec<EventRow> {
    let wanted: BTreeSet<(&str, &str)> = keys
        .iter()
        .map(|(_, k)| (k.kind.as_str(), k.name.as_str()))
        .collect();
    let mut rows = Vec::new();
    for namespace in namespaces {
        let api: Api<Event> = Api::namespaced(client.clone(), namespace);
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for event in list.items {
            let involved = &event.involved_object;
            let (kind, name) = (
                involved.kind.as_deref().unwrap_or_default(),
                involved.name.as_deref().unwrap_or_default(),
            );
            if !wanted.contains(&(kind, name)) {
                continue;
            }
            let time = event
                .last_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()));
            rows.push(EventRow {
                time,
                type_: event.type_.clone().unwrap_or_default(),
                reason: event.reason.clone().unwrap_or_default(),
                object: format!("{kind}/{namespace}/{name}"),
                message: event.message.clone().unwrap_or_default(),
                count: event.count.unwrap_or(1),
            });
        }
    }
    rows.sort_by(|a, b| b.time.cmp(&a.time));
    rows.truncate(MAX_EVENTS);
    rows
}
