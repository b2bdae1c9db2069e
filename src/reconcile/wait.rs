//! `--wait`: polling the workloads among the rendered objects until they are ready.

use std::collections::HashMap;
use std::time::Duration;

use kube::Client;

use crate::k8s::ObjectKey;
use crate::render::RenderedObject;

/// What `--wait` is told after each look: the workloads not ready yet with their
/// state, and how many workloads there are.
pub type WaitProgress<'a> = dyn Fn(&[(ObjectKey, String)], usize) + Sync + 'a;

/// Waits until the workloads among `objects` are ready (Deployments available,
/// StatefulSets and DaemonSets ready, Pods running, Jobs complete) and returns the
/// ones that were not when `timeout` ran out, with their state. After each look,
/// `progress` gets the ones still waited for and the number of workloads.
pub(super) async fn wait_ready(
    client: &Client,
    objects: &[RenderedObject],
    timeout: Duration,
    progress: &WaitProgress<'_>,
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
    let workloads = waiting.len();
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
        let not_ready: Vec<(ObjectKey, String)> = waiting
            .iter()
            .map(|o| {
                let key = ObjectKey::new(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name);
                let state = states.get(&key).cloned().unwrap_or_default();
                (key, state)
            })
            .collect();
        progress(&not_ready, workloads);
        if waiting.is_empty() || tokio::time::Instant::now() >= deadline {
            return not_ready;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
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
