//! The server's floor: a minimal client applying objects with server-side apply as
//! fast as the server takes them, what a tool's apply is measured against. A
//! benchmark that uses it includes `common/kube.rs` as `kube_helpers` too.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// The field manager of the floor's applies.
const MANAGER: &str = "floor";

/// The concurrency (of 8, 16, 32 and 64 applies in flight) that applies `count`
/// ConfigMaps fastest, each trial in a namespace of its own (`prefix-N`): ConfigMaps,
/// which no controller acts on, so that the trials leave the controllers idle. With
/// the trials' rates, for the table ("558 at 8, 767 at 16, …").
pub async fn best_concurrency(client: &Client, count: usize, prefix: &str) -> (usize, String) {
    let mut best: Option<(usize, Duration)> = None;
    let mut trials = Vec::new();
    for concurrency in [8, 16, 32, 64] {
        let namespace = format!("{prefix}-{concurrency}");
        crate::kube_helpers::namespace(client, &namespace).await;
        let configmaps = (0..count)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("c-{i}"), "namespace": namespace},
                    "data": {"value": "trial"}})
            })
            .collect();
        let started = Instant::now();
        apply_all(client, configmaps, concurrency).await;
        let took = started.elapsed();
        let rate = count as f64 / took.as_secs_f64();
        trials.push(format!("{rate:.0} at {concurrency}"));
        if best.is_none_or(|(_, b)| took < b) {
            best = Some((concurrency, took));
        }
    }
    let (concurrency, _) = best.expect("a concurrency");
    (
        concurrency,
        format!("ConfigMaps applied a second: {}", trials.join(", ")),
    )
}

/// Server-side applies `objects`, `concurrency` at once: the cluster-scoped ones
/// (Namespaces) first, since the others may be in them.
pub async fn apply_all(client: &Client, objects: Vec<Value>, concurrency: usize) {
    let (cluster, namespaced): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|o| o["metadata"]["namespace"].as_str().is_none());
    for objects in [cluster, namespaced] {
        stream::iter(objects)
            .for_each_concurrent(concurrency, |object| async move {
                apply(client, &object).await;
            })
            .await;
    }
}

async fn apply(client: &Client, object: &Value) {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().expect("kind");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let name = object["metadata"]["name"].as_str().expect("a name");
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .expect("server-side apply");
}
