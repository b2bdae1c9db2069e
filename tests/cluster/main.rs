//! Tests against a real kube-apiserver and kube-controller-manager (the newest release
//! tools/go pins, or TETHER_KUBERNETES's, from scripts/local-cluster), with the node simulator standing in for a kubelet, in one
//! test binary. Most share the run's control plane (`harness::cluster`), each in
//! namespaces of its own; a test starts one of its own only when it changes what the
//! others would see: `nodes` and `nodesim`'s placement (nodes tainted, cordoned,
//! removed). The tests of the control plane itself are `tests/control_plane`.

mod annotations;
mod argo_sync;
mod attestation;
mod budget;
mod clusters;
mod current;
mod daemon;
mod deletion_guard;
mod discover;
mod discover_clusters;
mod events;
mod feedback;
mod fidelity;
mod fleet;
mod generate;
mod harness;
mod health;
mod identity;
mod ignore;
mod images;
mod lifetime;
mod nodes;
mod nodesim;
mod oci;
mod operations;
mod ownership;
mod prune_quiet;
mod reconcile;
mod record;
mod revert;
mod run;
mod secrets;
mod shard;
mod verify;
mod web;
mod web_access;
mod web_page;
mod workflow;

use std::time::Duration;

use harness::{cluster, eventually, repo_root};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use tether_core::ownership::Inventory;
use tether_core::render::{RenderedObject, render};
use tether_core::source::SourceFiles;
use tether_engine::directory::read_models_dir;

fn render_files(files: &SourceFiles, inventory: &str) -> Vec<RenderedObject> {
    let analysis = tether_core::analyze(files);
    let graph = analysis
        .graph
        .unwrap_or_else(|| panic!("{}", analysis.diagnostics.render_plain(files)));
    let inventory = Inventory {
        name: inventory.into(),
        namespace: "default".into(),
    };
    render(&graph, files, &inventory)
}

async fn api_for(
    client: &Client,
    discovery: &Discovery,
    object: &RenderedObject,
) -> Api<DynamicObject> {
    let (group, version) = match object.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", object.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &object.kind);
    let (resource, capabilities) = discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("server has no {gvk:?}"));
    match (&capabilities.scope, &object.namespace) {
        (Scope::Namespaced, Some(namespace)) => {
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    }
}

/// Is every field of `expected` in `actual`? Lists match element by element, each
/// expected element against some actual element (the server adds volumes, labels...).
fn is_subset(expected: &serde_json::Value, actual: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| is_subset(v, av))),
        (Value::Array(e), Value::Array(a)) => {
            e.iter().all(|ev| a.iter().any(|av| is_subset(ev, av)))
        }
        (e, a) => e == a,
    }
}

#[tokio::test]
async fn examples_apply_read_back_and_then_show_no_changes() {
    let client = cluster().client().await;
    let inventory = "examples";
    let first = reconcile::tether(inventory, &["apply", "examples/models"]);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}{}",
        reconcile::stdout(&first),
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        reconcile::stdout(&first),
        "19 created, 0 configured, 0 unchanged, 0 pruned, 0 failed\n"
    );

    let files = read_models_dir(&repo_root().join("examples/models")).unwrap();
    let objects = render_files(&files, inventory);
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    for object in &objects {
        let api = api_for(&client, &discovery, object).await;
        let live = api
            .get(&object.name)
            .await
            .unwrap_or_else(|e| panic!("get {}: {e}", object.display_name()));
        let live = serde_json::to_value(&live).unwrap();
        assert!(
            is_subset(&object.body, &live),
            "{} differs from what was applied:\n{live:#}",
            object.display_name()
        );
        let managers: Vec<&str> = live["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        let manager = Inventory {
            name: "examples".into(),
            namespace: "default".into(),
        }
        .field_manager();
        assert!(
            managers.contains(&manager.as_str()),
            "{}: managers {managers:?}",
            object.display_name()
        );
    }

    let second = reconcile::tether(inventory, &["apply", "examples/models"]);
    assert_eq!(
        reconcile::stdout(&second),
        "0 created, 0 configured, 19 unchanged, 0 pruned, 0 failed\n"
    );
    for format in ["text", "markdown", "json"] {
        let diff = reconcile::tether(inventory, &["diff", "examples/models", "-o", format]);
        assert_eq!(
            diff.status.code(),
            Some(0),
            "{format}: {}",
            reconcile::stdout(&diff)
        );
    }
}

#[tokio::test]
async fn a_deployment_becomes_running_pods_with_ips() {
    let cluster = cluster();
    let client = cluster.client().await;
    let namespace = crate::harness::fresh_namespace(&client, "deployment-running").await;
    let models = format!(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {namespace}\n---\n\
         kind: Image\nname: k8s.gcr.io/pause-amd64\ntag: \"3.0\"\n---\n\
         kind: Slice\nname: web\ntrust_domain: {namespace}\ncontroller_kind: Deployment\n\
         controller_replica_count: 3\ndefault_image: k8s.gcr.io/pause-amd64:3.0\n"
    );
    let repo = reconcile::Repo::new(&[("models.yaml", &models)]);
    let applied = reconcile::tether(
        &format!("inv-{namespace}"),
        &["apply", repo.path().to_str().unwrap()],
    );
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let running = || async {
        let list = pods
            .list(&ListParams::default().labels("xos_slice_name=web"))
            .await
            .unwrap();
        list.items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect::<Vec<_>>()
    };
    eventually(Duration::from_secs(60), || async {
        running().await.len() == 3
    })
    .await;
    let pods_now = running().await;
    let mut ips: Vec<String> = pods_now
        .iter()
        .map(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .expect("pod IP")
        })
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 3, "three distinct pod IPs: {ips:?}");
    for pod in &pods_now {
        let owner = &pod.owner_references()[0];
        assert_eq!(
            owner.kind,
            "ReplicaSet",
            "{} is made by the Deployment's ReplicaSet",
            pod.name_any()
        );
        let status = &pod
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert!(status.ready && status.restart_count == 0, "{status:?}");
    }

    // The simulator restarts a container on request: the restart count rises.
    let first = pods_now[0].name_any();
    let count = crate::harness::pod_action(&client, "restart", &namespace, &first, "web").await;
    assert_eq!(count, 1);
    let pod = pods.get(&first).await.unwrap();
    assert_eq!(
        pod.status.unwrap().container_statuses.unwrap()[0].restart_count,
        1
    );

    // Scaling down deletes pods, and the simulator finishes their deletion.
    let scale = serde_json::json!({"spec": {"replicas": 1}});
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &namespace);
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    eventually(Duration::from_secs(60), || async {
        pods.list(&ListParams::default().labels("xos_slice_name=web"))
            .await
            .unwrap()
            .items
            .len()
            == 1
    })
    .await;
}

#[tokio::test]
async fn kubectl_accepts_the_rendered_yaml() {
    let cluster = cluster();
    let render = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["render", "examples/models"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(render.status.success());
    let kubectl = tether_testkit::cluster::binaries().join("kubectl");
    let mut child = std::process::Command::new(kubectl)
        .args([
            "apply",
            "--dry-run=client",
            "-o",
            "name",
            "-f",
            "-",
            "--kubeconfig",
        ])
        .arg(cluster.kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&render.stdout)
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names = String::from_utf8(output.stdout).unwrap();
    assert_eq!(names.lines().count(), 19, "{names}");
    assert!(names.contains("deployment.apps/web"), "{names}");
}
