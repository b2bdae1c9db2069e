//! Hosts as models against a control plane of the test's own with three simulated
//! nodes: labels assigned and removed as commits (a label someone else set stays),
//! a lock that moves a pod without a toleration off its node and keeps a tolerating
//! one, and a host removal that honours a disruption budget, deletes the node, and
//! leaves the other nodes' pods and an unmanaged node alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::harness::{LocalCluster, eventually};
use crate::reconcile::{all_output, git};

fn tether(cluster: &LocalCluster, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .current_dir(dir)
        .env("TETHER_COLOR", "never")
        .output()
        .unwrap()
}

fn kubectl(cluster: &LocalCluster, args: &[&str]) -> Output {
    cluster.kubectl(args)
}

async fn node(client: &Client, name: &str) -> Option<Node> {
    Api::<Node>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

async fn labels(client: &Client, name: &str) -> BTreeMap<String, String> {
    node(client, name).await.unwrap().labels().clone()
}

/// The running pods of namespace default, by name, with their node and uid.
async fn pods(client: &Client) -> Vec<(String, String, String)> {
    let list = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            (p.name_any(), node, p.uid().unwrap_or_default())
        })
        .collect()
}

fn log(dir: &Path) -> Vec<String> {
    let out = git(dir, &["log", "--format=%s|%an"]);
    out.lines().map(str::to_string).collect()
}

const MODELS: &str = "\
kind: KubernetesService
name: kubernetes
---
# Hosts of the lab; tether-sim-1 is not managed here.
kind: Node
name: tether-sim-2
labels:
  openstack-compute-node: enabled   # where Nova runs
---
kind: Node
name: tether-sim-3
";

#[tokio::test]
async fn hosts_are_labelled_locked_and_removed_through_their_models() {
    let cluster = LocalCluster::start(3);
    let client = cluster.client().await;
    crate::harness::pods_admitted(&client, "default").await;
    // Someone else's labels on a managed node and on an unmanaged one.
    kubectl(
        &cluster,
        &[
            "label",
            "node",
            "tether-sim-2",
            "topology.example.com/zone=z2",
        ],
    );
    kubectl(
        &cluster,
        &["label", "node", "tether-sim-1", "ops.example.com/owner=ada"],
    );
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    std::fs::write(dir.join("hosts.yaml"), MODELS).unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.name", "Ada Operator"]);
    git(dir, &["config", "user.email", "ada@example.org"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "hosts"]);
    let applied = tether(&cluster, dir, &["apply", "."]);
    assert!(applied.status.success(), "{}", all_output(&applied));

    // Labels: one commit each, the other label kept.
    let assign = tether(
        &cluster,
        dir,
        &["node", "label", "assign", "tether-sim-2", "sriov=enabled"],
    );
    assert!(assign.status.success(), "{}", all_output(&assign));
    let live = labels(&client, "tether-sim-2").await;
    assert_eq!(live.get("sriov").map(String::as_str), Some("enabled"));
    assert_eq!(
        live.get("openstack-compute-node").map(String::as_str),
        Some("enabled")
    );
    assert_eq!(
        live.get("topology.example.com/zone").map(String::as_str),
        Some("z2")
    );
    let text = std::fs::read_to_string(dir.join("hosts.yaml")).unwrap();
    assert!(
        text.contains("  openstack-compute-node: enabled   # where Nova runs\n  sriov: enabled\n"),
        "{text}"
    );
    let list = tether(&cluster, dir, &["node", "label", "list"]);
    let listed = all_output(&list);
    assert!(
        listed.contains("sriov") && listed.contains("yes"),
        "{listed}"
    );
    let remove = tether(
        &cluster,
        dir,
        &["node", "label", "remove", "tether-sim-2", "sriov"],
    );
    assert!(remove.status.success(), "{}", all_output(&remove));
    let live = labels(&client, "tether-sim-2").await;
    assert!(!live.contains_key("sriov"), "{live:?}");
    assert_eq!(
        live.get("topology.example.com/zone").map(String::as_str),
        Some("z2")
    );
    assert_eq!(
        log(dir)[..2],
        [
            "unlabel: Node/tether-sim-2 sriov|Ada Operator".to_string(),
            "label: Node/tether-sim-2 sriov=enabled|Ada Operator".to_string(),
        ]
    );
    // A bad label is refused where it would be written, and nothing is committed.
    let bad = tether(
        &cluster,
        dir,
        &["node", "label", "assign", "tether-sim-2", "zone=the web"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        all_output(&bad).contains("hosts.yaml:9:9"),
        "{}",
        all_output(&bad)
    );
    assert_eq!(log(dir).len(), 3);
    // A host without a model is not tether's to lock.
    let refused = tether(&cluster, dir, &["node", "lock", "tether-sim-1"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(all_output(&refused).contains("no Node model named \"tether-sim-1\""));

    // Lock: the pod without a toleration leaves tether-sim-2, the tolerating one stays.
    kubectl(
        &cluster,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    );
    let tolerant = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tolerant"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": "tether-sim-2"},
        "tolerations": [{"key": "tether.dev/locked", "operator": "Exists", "effect": "NoExecute"}],
        "containers": [{"name": "c", "image": "busybox"}]}}"#;
    std::fs::write(dir.join("tolerant.json"), tolerant).unwrap();
    kubectl(
        &cluster,
        &["create", "-f", dir.join("tolerant.json").to_str().unwrap()],
    );
    eventually(Duration::from_secs(30), || async {
        let pods = pods(&client).await;
        pods.len() == 4
            && pods
                .iter()
                .any(|(n, node, _)| n.starts_with("web-") && node == "tether-sim-2")
    })
    .await;
    let tolerant_uid = pods(&client)
        .await
        .into_iter()
        .find(|p| p.0 == "tolerant")
        .unwrap()
        .2;
    let lock = tether(&cluster, dir, &["node", "lock", "tether-sim-2"]);
    assert!(lock.status.success(), "{}", all_output(&lock));
    eventually(Duration::from_secs(60), || async {
        let pods = pods(&client).await;
        let web: Vec<_> = pods.iter().filter(|p| p.0.starts_with("web-")).collect();
        web.len() == 3 && web.iter().all(|p| p.1 != "tether-sim-2")
    })
    .await;
    let tolerant_now = pods(&client)
        .await
        .into_iter()
        .find(|p| p.0 == "tolerant")
        .unwrap();
    assert_eq!(
        (tolerant_now.1.as_str(), tolerant_now.2.as_str()),
        ("tether-sim-2", tolerant_uid.as_str())
    );
    let locked = node(&client, "tether-sim-2").await.unwrap();
    let spec = locked.spec.unwrap();
    assert_eq!(spec.unschedulable, Some(true));
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "tether.dev/locked" && t.effect == "NoExecute")
    );
    let unlock = tether(&cluster, dir, &["node", "unlock", "tether-sim-2"]);
    assert!(unlock.status.success(), "{}", all_output(&unlock));
    let unlocked = node(&client, "tether-sim-2").await.unwrap().spec.unwrap();
    assert_ne!(unlocked.unschedulable, Some(true));
    assert!(unlocked.taints.unwrap_or_default().is_empty());
    // A taint set with kubectl stays through a lock and an unlock: tether takes out
    // only the taint it set.
    kubectl(
        &cluster,
        &[
            "taint",
            "node",
            "tether-sim-2",
            "maintenance.example.com/window=night:PreferNoSchedule",
        ],
    );
    for command in ["lock", "unlock"] {
        let done = tether(&cluster, dir, &["node", command, "tether-sim-2"]);
        assert!(done.status.success(), "{}", all_output(&done));
    }
    let taints = node(&client, "tether-sim-2")
        .await
        .unwrap()
        .spec
        .unwrap()
        .taints
        .unwrap_or_default();
    let kept: Vec<(&str, Option<&str>, &str)> = taints
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
        .collect();
    assert_eq!(
        kept,
        [(
            "maintenance.example.com/window",
            Some("night"),
            "PreferNoSchedule"
        )]
    );

    // Removal: a budget that allows no eviction stops it, with the node cordoned.
    kubectl(
        &cluster,
        &[
            "create",
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=3",
        ],
    );
    let text = std::fs::read_to_string(dir.join("hosts.yaml")).unwrap();
    let kept = text
        .split("---\nkind: Node\nname: tether-sim-3\n")
        .next()
        .unwrap()
        .to_string();
    std::fs::write(dir.join("hosts.yaml"), &kept).unwrap();
    git(dir, &["commit", "-qam", "tether-sim-3 leaves"]);
    let on_three: Vec<String> = pods(&client)
        .await
        .into_iter()
        .filter(|p| p.1 == "tether-sim-3")
        .map(|p| p.0)
        .collect();
    assert!(!on_three.is_empty());
    let diff = tether(&cluster, dir, &["diff", "."]);
    let shown = all_output(&diff);
    assert!(
        shown.contains("remove host (with --prune) Node tether-sim-3"),
        "{shown}"
    );
    for pod in &on_three {
        assert!(
            shown.contains(&format!("- evict  pod default/{pod}")),
            "{shown}"
        );
    }
    assert!(!shown.contains("tolerant"), "{shown}");
    let blocked = tether(&cluster, dir, &["apply", ".", "--prune", "--timeout", "4s"]);
    assert_eq!(blocked.status.code(), Some(2), "{}", all_output(&blocked));
    let said = all_output(&blocked);
    assert!(
        said.contains("The disruption budget web needs 3 healthy pods"),
        "{said}"
    );
    assert!(said.contains("it protects default/web-"), "{said}");
    let cordoned = node(&client, "tether-sim-3")
        .await
        .expect("kept")
        .spec
        .unwrap();
    assert_eq!(cordoned.unschedulable, Some(true));
    // A budget that allows one at a time lets the removal through.
    kubectl(
        &cluster,
        &[
            "patch",
            "poddisruptionbudget",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":2}}"#,
        ],
    );
    let removed = tether(
        &cluster,
        dir,
        &["apply", ".", "--prune", "--timeout", "90s"],
    );
    assert!(removed.status.success(), "{}", all_output(&removed));
    assert!(
        node(&client, "tether-sim-3").await.is_none(),
        "the node is deleted"
    );
    let after = pods(&client).await;
    assert!(after.iter().all(|p| p.1 != "tether-sim-3"), "{after:?}");
    let tolerant_after = after.iter().find(|p| p.0 == "tolerant").unwrap();
    assert_eq!(
        tolerant_after.2, tolerant_uid,
        "another node's pod is left alone"
    );
    // The unmanaged node is untouched, and the next diff is clean.
    let one = labels(&client, "tether-sim-1").await;
    assert_eq!(
        one.get("ops.example.com/owner").map(String::as_str),
        Some("ada")
    );
    assert!(!one.contains_key("app.kubernetes.io/managed-by"));
    assert!(
        node(&client, "tether-sim-1")
            .await
            .unwrap()
            .spec
            .unwrap()
            .unschedulable
            != Some(true)
    );
    let clean = tether(&cluster, dir, &["diff", "."]);
    assert_eq!(clean.status.code(), Some(0), "{}", all_output(&clean));
}
