//! A node simulator, in the spirit of kwok: the local control plane has no scheduler
//! and no kubelet, so this registers a Node, binds pending pods to it, reports them
//! Running with a pod IP and container statuses, finishes the deletion of pods on it,
//! and can bump a container's restart count.

use std::collections::HashMap;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

pub const NODE_NAME: &str = "tether-sim";

/// Registers the node and keeps pods moving until the runtime stops.
pub async fn run(client: Client) -> Result<(), kube::Error> {
    register_node(&client).await?;
    let pods: Api<Pod> = Api::all(client.clone());
    let mut ips = IpAllocator::default();
    let mut events =
        std::pin::pin!(watcher::watcher(pods, watcher::Config::default()).default_backoff());
    while let Some(event) = events
        .try_next()
        .await
        .map_err(|e| kube::Error::Service(Box::new(e)))?
    {
        let pods = match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => vec![pod],
            _ => continue,
        };
        for pod in pods {
            // Errors are conflicts with a newer version of the pod; the watch brings it.
            let _ = step(&client, &pod, &mut ips).await;
        }
    }
    Ok(())
}

async fn register_node(client: &Client) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(NODE_NAME.into()),
            labels: Some([("kubernetes.io/hostname".to_string(), NODE_NAME.to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": "500"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated",
                        "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE_NAME}],
        "nodeInfo": {"kubeletVersion": "v1.20.2-sim", "kubeProxyVersion": "v1.20.2-sim", "architecture": "amd64",
                     "operatingSystem": "linux", "osImage": "simulated", "kernelVersion": "", "containerRuntimeVersion": "sim://1",
                     "machineID": "", "systemUUID": "", "bootID": ""},
    }});
    nodes
        .patch_status(NODE_NAME, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    // The API server taints a new node not-ready; the node lifecycle controller (not
    // run here) lifts the taint once the node reports Ready, so DaemonSets place pods.
    nodes
        .patch(
            NODE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": null}})),
        )
        .await?;
    Ok(())
}

async fn step(client: &Client, pod: &Pod, ips: &mut IpAllocator) -> Result<(), kube::Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let name = pod.name_any();
    let spec = pod.spec.as_ref();
    let node = spec.and_then(|s| s.node_name.as_deref());
    if pod.metadata.deletion_timestamp.is_some() {
        if node == Some(NODE_NAME) {
            // What the kubelet does once the containers are stopped.
            ips.release(&namespace, &name);
            api.delete(
                &name,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await?;
        }
        return Ok(());
    }
    match node {
        None => {
            let binding = Binding {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                target: ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(NODE_NAME.into()),
                    ..ObjectReference::default()
                },
            };
            api.create_subresource::<Binding, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await?;
        }
        Some(NODE_NAME) => {
            let status = pod.status.as_ref();
            if status.and_then(|s| s.phase.as_deref()) == Some("Running") {
                return Ok(());
            }
            let ip = ips.assign(&namespace, &name);
            let containers: Vec<serde_json::Value> = spec
                .map(|s| s.containers.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name, "image": c.image, "imageID": format!("sim://{}", c.image.clone().unwrap_or_default()),
                        "containerID": format!("sim://{namespace}/{name}/{}", c.name),
                        "ready": true, "started": true, "restartCount": 0,
                        "state": {"running": {"startedAt": now()}},
                    })
                })
                .collect();
            let patch = json!({"status": {
                "phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now(),
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
                    {"type": "Ready", "status": "True", "lastTransitionTime": now()},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now()},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
                ],
                "containerStatuses": containers,
            }});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Some(_) => {}
    }
    Ok(())
}

/// Makes a container of a running pod restart: its restart count goes up by one.
pub async fn restart_container(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<i32, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let current = api.get_status(pod).await?;
    let mut statuses = current
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    let Some(status) = statuses.iter_mut().find(|s| s.name == container) else {
        return Err(kube::Error::Service(
            format!("pod {namespace}/{pod} has no container {container}").into(),
        ));
    };
    status.restart_count += 1;
    let count = status.restart_count;
    let patch = json!({"status": {"containerStatuses": statuses}});
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(count)
}

fn now() -> String {
    // RFC 3339 in UTC, with the time type k8s-openapi itself uses.
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map_or_else(|_| String::new(), |t| t.to_string())
}

/// Pod IPs from 10.244.0.0/16, one per pod, reused after the pod is gone.
#[derive(Default)]
struct IpAllocator {
    assigned: HashMap<(String, String), u32>,
    next: u32,
    free: Vec<u32>,
}

impl IpAllocator {
    fn assign(&mut self, namespace: &str, name: &str) -> String {
        let key = (namespace.to_string(), name.to_string());
        let n = match self.assigned.get(&key) {
            Some(n) => *n,
            None => {
                let n = self.free.pop().unwrap_or_else(|| {
                    self.next += 1;
                    self.next
                });
                self.assigned.insert(key, n);
                n
            }
        };
        format!("10.244.{}.{}", n / 254, n % 254 + 1)
    }

    fn release(&mut self, namespace: &str, name: &str) {
        if let Some(n) = self
            .assigned
            .remove(&(namespace.to_string(), name.to_string()))
        {
            self.free.push(n);
        }
    }
}
