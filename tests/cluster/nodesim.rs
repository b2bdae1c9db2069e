//! The node simulator (crates/tether-nodesim) as the local control plane runs it
//! beside the real kube-scheduler and kube-controller-manager: pods bound and Running,
//! containers restarted, failed and finished on request, Jobs' pods completing, and
//! placement by selectors, cordons and taints, with `NoExecute` taints evicting.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::{LocalCluster, cluster, eventually, pods_admitted};

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "main", "image": "busybox:1.36"}]);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The pod once `check` holds of it.
async fn pod_when(api: &Api<Pod>, name: &str, check: impl Fn(&Pod) -> bool) -> Pod {
    eventually(Duration::from_secs(30), || async {
        api.get_opt(name).await.unwrap().is_some_and(|p| check(&p))
    })
    .await;
    api.get(name).await.unwrap()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn main_container(pod: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    pod.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone()
}

#[tokio::test]
async fn pods_run_and_their_containers_restart_fail_and_finish_on_request() {
    let client = cluster().client().await;
    let ns = crate::harness::fresh_namespace(&client, "sim-lifecycle").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod("server", json!({})))
        .await
        .unwrap();
    let running = pod_when(&pods, "server", |p| phase(p) == "Running").await;
    assert_eq!(node_of(&running), "tether-sim-1");
    let status = running.status.as_ref().unwrap();
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.244."))
    );
    assert_eq!(status.host_ip.as_deref(), Some("127.0.1.1"));
    assert!(main_container(&running).ready);

    let count = crate::harness::pod_action(&client, "restart", &ns, "server", "main").await;
    assert_eq!(count, 1);
    let count = crate::harness::pod_action(&client, "fail", &ns, "server", "main").await;
    assert_eq!(
        count, 2,
        "a failing container under restartPolicy Always is restarted"
    );
    let crashing = pods.get("server").await.unwrap();
    let waiting = main_container(&crashing).state.unwrap().waiting.unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(!main_container(&crashing).ready);
    assert_eq!(phase(&crashing), "Running");

    pods.create(
        &PostParams::default(),
        &pod("once", json!({"restartPolicy": "Never"})),
    )
    .await
    .unwrap();
    pod_when(&pods, "once", |p| phase(p) == "Running").await;
    crate::harness::pod_action(&client, "finish", &ns, "once", "main").await;
    let done = pods.get("once").await.unwrap();
    assert_eq!(phase(&done), "Succeeded");
    let exited = main_container(&done).state.unwrap().terminated.unwrap();
    assert_eq!(exited.exit_code, 0);
    // The simulator leaves a finished pod as it is (it does not start it again).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(phase(&pods.get("once").await.unwrap()), "Succeeded");

    // A pod annotated `sim.tether.dev/ready: "false"` runs unready until told.
    let mut warming = pod("warming", json!({}));
    warming.metadata.annotations =
        Some([("sim.tether.dev/ready".to_string(), "false".to_string())].into());
    pods.create(&PostParams::default(), &warming).await.unwrap();
    let unready = pod_when(&pods, "warming", |p| phase(p) == "Running").await;
    assert!(!main_container(&unready).ready);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!main_container(&pods.get("warming").await.unwrap()).ready);
    crate::harness::pod_action(&client, "ready", &ns, "warming", "main").await;
    let ready = pods.get("warming").await.unwrap();
    assert!(main_container(&ready).ready);
    let conditions = ready.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
}

fn job(name: &str, annotations: serde_json::Value) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
        }},
    }))
    .unwrap()
}

/// Whether the Job has the condition `outcome` (`Complete`, `Failed`), which a
/// current job controller sets after `SuccessCriteriaMet` or `FailureTarget`.
fn job_is(job: &Job, outcome: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == outcome && c.status == "True"))
}

#[tokio::test]
async fn jobs_pods_succeed_by_themselves_or_fail_with_their_exit_code() {
    let client = cluster().client().await;
    let ns = crate::harness::fresh_namespace(&client, "sim-jobs").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&PostParams::default(), &job("migrate", json!({})))
        .await
        .unwrap();
    jobs.create(
        &PostParams::default(),
        &job("broken", json!({"sim.tether.dev/exit-code": "3"})),
    )
    .await
    .unwrap();
    for (name, outcome) in [("migrate", "Complete"), ("broken", "Failed")] {
        eventually(Duration::from_secs(60), || async {
            job_is(&jobs.get(name).await.unwrap(), outcome)
        })
        .await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let broken = pods
        .list(&ListParams::default().labels("job-name=broken"))
        .await
        .unwrap();
    let exited = main_container(&broken.items[0])
        .state
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(exited.exit_code, 3);
}

async fn patch_node(client: &Client, name: &str, spec: serde_json::Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn selectors_cordons_and_taints_place_pods_and_no_execute_taints_evict_them() {
    // A control plane of this test's own with two simulated nodes: tainting and
    // cordoning the shared one's would disturb the tests running beside this one.
    let own = LocalCluster::start(2);
    let client = own.client().await;
    pods_admitted(&client, "default").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let post = PostParams::default();
    // Two pods that must spread over the nodes (a topology spread constraint, as a
    // Deployment's pods are spread): kube-scheduler scores two empty nodes alike.
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}}}]});
    for name in ["a", "b"] {
        let mut spread_pod = pod(name, spread.clone());
        spread_pod.metadata.labels = Some([("app".to_string(), "spread".to_string())].into());
        pods.create(&post, &spread_pod).await.unwrap();
    }
    let pinned = json!({"nodeSelector": {"kubernetes.io/hostname": "tether-sim-2"}});
    pods.create(&post, &pod("pinned", pinned)).await.unwrap();
    let mut nodes = Vec::new();
    for name in ["a", "b", "pinned"] {
        let running = pod_when(&pods, name, |p| phase(p) == "Running").await;
        nodes.push((node_of(&running).to_string(), name));
    }
    let pinned_node = nodes.pop().unwrap().0;
    assert_eq!(pinned_node, "tether-sim-2");
    nodes.sort();
    let spread: Vec<&str> = nodes.iter().map(|(node, _)| node.as_str()).collect();
    assert_eq!(
        spread,
        ["tether-sim-1", "tether-sim-2"],
        "one pod on each node"
    );
    let (on_first, on_second) = (nodes[0].1, nodes[1].1);

    // A cordoned node takes no new pod; the other one does.
    patch_node(&client, "tether-sim-1", json!({"unschedulable": true})).await;
    pods.create(&post, &pod("after-cordon", json!({})))
        .await
        .unwrap();
    let placed = pod_when(&pods, "after-cordon", |p| phase(p) == "Running").await;
    assert_eq!(node_of(&placed), "tether-sim-2");

    // A NoExecute taint evicts what does not tolerate it, at once or after the
    // toleration's seconds, and leaves a pod that tolerates it for good.
    let for_two_seconds = json!({"tolerations": [{"key": "maintenance", "operator": "Exists",
        "effect": "NoExecute", "tolerationSeconds": 2}]});
    pods.create(&post, &pod("patient", for_two_seconds.clone()))
        .await
        .unwrap();
    let forever = json!({"tolerations": [{"key": "maintenance", "operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/hostname": "tether-sim-2"}});
    pods.create(&post, &pod("tolerant", forever)).await.unwrap();
    let patient = pod_when(&pods, "patient", |p| phase(p) == "Running").await;
    assert_eq!(node_of(&patient), "tether-sim-2");
    pod_when(&pods, "tolerant", |p| phase(p) == "Running").await;
    patch_node(
        &client,
        "tether-sim-2",
        json!({"taints": [{"key": "maintenance", "value": "disk", "effect": "NoExecute"}]}),
    )
    .await;
    let tainted_at = tokio::time::Instant::now();
    for evicted in ["pinned", "after-cordon", on_second] {
        eventually(Duration::from_secs(10), || async {
            pods.get_opt(evicted).await.unwrap().is_none()
        })
        .await;
    }
    assert!(pods.get_opt("patient").await.unwrap().is_some());
    eventually(Duration::from_secs(10), || async {
        pods.get_opt("patient").await.unwrap().is_none()
    })
    .await;
    assert!(
        tainted_at.elapsed() >= Duration::from_secs(2),
        "evicted after its toleration: {:?}",
        tainted_at.elapsed()
    );
    assert_eq!(phase(&pods.get("tolerant").await.unwrap()), "Running");
    // The pod on the cordoned node stays: a cordon does not evict.
    assert_eq!(phase(&pods.get(on_first).await.unwrap()), "Running");

    // With one node cordoned and the other tainted, a new pod waits, and says why.
    pods.create(&post, &pod("waiting", json!({})))
        .await
        .unwrap();
    let waiting = pod_when(&pods, "waiting", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.reason.as_deref() == Some("Unschedulable"))
            })
    })
    .await;
    let condition = waiting.status.unwrap().conditions.unwrap()[0].clone();
    // kube-scheduler's own words.
    let message = condition.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "0/2 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable."
        ),
        "{message}"
    );
    // Lifting the cordon places it.
    patch_node(&client, "tether-sim-1", json!({"unschedulable": null})).await;
    let placed = pod_when(&pods, "waiting", |p| phase(p) == "Running").await;
    assert_eq!(node_of(&placed), "tether-sim-1");

    // A taint lifted within the toleration's seconds evicts nothing.
    let reprieved = json!({"tolerations": [{"key": "maintenance", "operator": "Exists",
        "effect": "NoExecute", "tolerationSeconds": 2}],
        "nodeSelector": {"kubernetes.io/hostname": "tether-sim-1"}});
    pods.create(&post, &pod("reprieved", reprieved))
        .await
        .unwrap();
    pod_when(&pods, "reprieved", |p| phase(p) == "Running").await;
    let taint = json!({"taints": [{"key": "maintenance", "effect": "NoExecute"}]});
    patch_node(&client, "tether-sim-1", taint).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    patch_node(&client, "tether-sim-1", json!({"taints": null})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(phase(&pods.get("reprieved").await.unwrap()), "Running");
}
