//! The simulator's loop: registers the nodes, then does for every pod the real
//! scheduler bound to one of them what the kubelet would: reports it Running, finishes
//! Jobs' pods and completes deletions. (Placement and `NoExecute` evictions are the
//! control plane's own: kube-scheduler and kube-controller-manager's taint-eviction
//! controller.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{self, Action};

/// A pod annotation: how long its containers run before they finish ("2s", "500ms").
/// Jobs' pods finish after one second without it.
pub const RUN_FOR: &str = "sim.tether.dev/run-for";
/// A pod annotation: the exit code its containers finish with (default 0).
pub const EXIT_CODE: &str = "sim.tether.dev/exit-code";
/// A pod annotation: `"false"` starts its containers unready, until `pod ready`.
pub const READY: &str = "sim.tether.dev/ready";
/// The label on every simulated node.
pub const SIMULATED: &str = "sim.tether.dev/simulated";

pub fn node_name(index: usize) -> String {
    format!("tether-sim-{index}")
}

enum Seen {
    Pod(Box<Pod>),
    Node,
}

struct Kubelet {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    ips: Mutex<IpAllocator>,
    /// Pods with a completion pending, so an event does not start a second.
    timers: Mutex<HashSet<String>>,
    /// The pods this simulator started, by uid, before the watch shows them Running:
    /// a pod seen again as Pending from a stale cache is not started a second time
    /// (which would move its Ready condition's transition time).
    started: Mutex<HashSet<String>>,
}

/// Registers `count` nodes and keeps pods moving until the watch ends.
pub async fn run(client: Client, count: usize) -> Result<(), kube::Error> {
    for index in 1..=count {
        register_node(&client, &node_name(index), index).await?;
    }
    let (pods, pod_writer) = reflector::store();
    let (nodes, node_writer) = reflector::store();
    let pod_events = reflector::reflector(
        pod_writer,
        watcher::watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects()
    .map_ok(|pod| Seen::Pod(Box::new(pod)));
    let node_events = reflector::reflector(
        node_writer,
        watcher::watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .map_ok(|_| Seen::Node);
    let kubelet = Arc::new(Kubelet {
        client,
        pods,
        nodes,
        ips: Mutex::default(),
        timers: Mutex::default(),
        started: Mutex::default(),
    });
    let mut events = std::pin::pin!(futures::stream::select(pod_events, node_events));
    while let Some(seen) = events.next().await {
        let seen = seen.map_err(|e| kube::Error::Service(Box::new(e)))?;
        let pods = match seen {
            Seen::Pod(pod) => vec![Arc::new(*pod)],
            // A node came (or changed): its pods, bound before it was seen, are looked at.
            Seen::Node => kubelet.pods.state(),
        };
        for pod in pods {
            if let Err(error) = kubelet.step(&pod).await {
                // Mostly a conflict with a newer version of the pod, which the watch brings.
                tracing::debug!(pod = %pod.name_any(), %error, "step failed");
            }
        }
    }
    Ok(())
}

async fn register_node(client: &Client, name: &str, index: usize) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let labels = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        (SIMULATED, "true"),
    ];
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.map(|(k, v)| (k.to_string(), v.to_string())).into()),
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
    // A loopback address: what the API server dials for a node (exec, logs) stays on
    // this machine, and is refused there (no kubelet listens).
    let address = format!("127.0.1.{index}");
    // A kubelet of the control plane's own release, as a cluster's nodes usually are.
    let version = format!("{}-sim", client.apiserver_version().await?.git_version);
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated",
                        "lastHeartbeatTime": lifecycle::now(), "lastTransitionTime": lifecycle::now()}],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        "nodeInfo": {"kubeletVersion": version, "kubeProxyVersion": version, "architecture": "amd64",
                     "operatingSystem": "linux", "osImage": "simulated", "kernelVersion": "", "containerRuntimeVersion": "sim://1",
                     "machineID": "", "systemUUID": "", "bootID": ""},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    // The API server taints a new node not-ready; the node lifecycle controller (not
    // run here) lifts the taint once the node reports Ready. Taints that a user set
    // stay.
    let current = nodes.get(name).await?;
    let taints = current.spec.and_then(|s| s.taints).unwrap_or_default();
    let kept: Vec<_> = taints
        .iter()
        .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
        .collect();
    if kept.len() != taints.len() {
        let patch = json!({"spec": {"taints": kept}});
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

impl Kubelet {
    fn our_nodes(&self) -> Vec<Node> {
        self.nodes
            .state()
            .iter()
            .filter(|n| n.labels().get(SIMULATED).is_some_and(|v| v == "true"))
            .map(|n| (**n).clone())
            .collect()
    }

    async fn step(self: &Arc<Self>, pod: &Pod) -> Result<(), kube::Error> {
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let name = pod.name_any();
        let nodes = self.our_nodes();
        // Pods the scheduler has not bound yet, or bound to another node, are not ours.
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let Some(node) = nodes.iter().find(|n| Some(n.name_any().as_str()) == bound) else {
            return Ok(());
        };
        if pod.metadata.deletion_timestamp.is_some() {
            // What the kubelet does once the containers are stopped.
            if let Ok(mut ips) = self.ips.lock() {
                ips.release(&namespace, &name);
            }
            if let Ok(mut started) = self.started.lock() {
                started.remove(&pod.uid().unwrap_or_default());
            }
            let now = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            api.delete(&name, &now).await?;
            return Ok(());
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let first_start = |uid: String| self.started.lock().is_ok_and(|mut s| s.insert(uid));
        match phase {
            None | Some("Pending") if first_start(pod.uid().unwrap_or_default()) => {
                // IPs of pods this simulator did not start (before a restart of it).
                let in_use: HashSet<String> = self
                    .pods
                    .state()
                    .iter()
                    .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
                    .collect();
                let ip = self.ips.lock().map_or_else(
                    |_| String::new(),
                    |mut ips| ips.assign(&namespace, &name, &in_use),
                );
                let host_ip = node_address(node);
                let ready = pod.annotations().get(READY).is_none_or(|v| v != "false");
                let status = lifecycle::started(pod, &host_ip, &ip, ready);
                let patched = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
                if let Err(error) = patched {
                    // Not started after all: the next look tries again.
                    if let Ok(mut started) = self.started.lock() {
                        started.remove(&pod.uid().unwrap_or_default());
                    }
                    return Err(error);
                }
            }
            Some("Running") => {
                if let Some(run_for) = run_time(pod) {
                    self.finish_later(pod, run_for);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Finishes `pod`'s containers after `delay`, once per pod.
    fn finish_later(self: &Arc<Self>, pod: &Pod, delay: Duration) {
        let key = pod.uid().unwrap_or_default();
        let first = self
            .timers
            .lock()
            .is_ok_and(|mut timers| timers.insert(key.clone()));
        if !first {
            return;
        }
        let kubelet = Arc::clone(self);
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let exit_code = exit_code(pod);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let action = if exit_code == 0 {
                Action::Finish
            } else {
                Action::Fail
            };
            let result = act(&kubelet.client, &namespace, &name, None, action, exit_code).await;
            if let Err(error) = result {
                tracing::debug!(pod = %name, %error, "finishing failed");
            }
            if let Ok(mut timers) = kubelet.timers.lock() {
                timers.remove(&key);
            }
        });
    }
}

fn node_address(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default()
}

/// How long the pod's containers run: its annotation, or one second for a Job's pod.
fn run_time(pod: &Pod) -> Option<Duration> {
    if let Some(value) = pod.annotations().get(RUN_FOR) {
        return humantime::parse_duration(value).ok();
    }
    pod.owner_references()
        .iter()
        .any(|o| o.kind == "Job")
        .then_some(Duration::from_secs(1))
}

fn exit_code(pod: &Pod) -> i32 {
    pod.annotations()
        .get(EXIT_CODE)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Restarts, fails or finishes a container of a running pod (all of them without
/// `container`), retrying when the pod changed meanwhile. Returns the pod's new status.
pub async fn act(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    action: Action,
    exit_code: i32,
) -> Result<Pod, ActError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut attempts = 0;
    loop {
        let current = api.get_status(pod).await?;
        let mut patch = lifecycle::after(&current, container, action, exit_code)
            .map_err(|reason| ActError::Refused(format!("{namespace}/{pod}: {reason}")))?;
        // Written only over the version read, so a concurrent change is not lost.
        patch["metadata"] = json!({"resourceVersion": current.resource_version()});
        match api
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(pod) => return Ok(pod),
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Refused(String),
}

/// Pod IPs from 10.244.0.0/16, one per pod, reused after the pod is gone; an IP that
/// a live pod already has is never handed out.
#[derive(Default)]
struct IpAllocator {
    assigned: HashMap<(String, String), u32>,
    next: u32,
    free: Vec<u32>,
}

fn address(n: u32) -> String {
    format!("10.244.{}.{}", n / 254, n % 254 + 1)
}

impl IpAllocator {
    fn assign(&mut self, namespace: &str, name: &str, in_use: &HashSet<String>) -> String {
        let key = (namespace.to_string(), name.to_string());
        if let Some(n) = self.assigned.get(&key) {
            return address(*n);
        }
        let n = loop {
            let n = self.free.pop().unwrap_or_else(|| {
                self.next += 1;
                self.next
            });
            if !in_use.contains(&address(n)) {
                break n;
            }
        };
        self.assigned.insert(key, n);
        address(n)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ips_are_distinct_and_reused_after_release() {
        let none = HashSet::new();
        let mut ips = IpAllocator::default();
        let a = ips.assign("n", "a", &none);
        let b = ips.assign("n", "b", &none);
        assert_ne!(a, b);
        assert_eq!(ips.assign("n", "a", &none), a);
        ips.release("n", "a");
        assert_eq!(ips.assign("n", "c", &none), a);
    }

    #[test]
    fn an_ip_a_live_pod_has_is_not_handed_out_again() {
        // A restarted simulator starts with an empty allocator.
        let in_use: HashSet<String> = ["10.244.0.2".to_string(), "10.244.0.3".to_string()].into();
        let mut ips = IpAllocator::default();
        assert_eq!(ips.assign("n", "new", &in_use), "10.244.0.4");
    }
}
