//! Discovery and events on two clusters at once, as a user with two kubeconfig
//! contexts runs them: the shared control plane is `east`, one of the test's own is
//! `west`, each with a pod made by kubectl in a namespace of the same name, and one
//! repository with a KubernetesService for each. Each cluster's pods are committed
//! under its own KubernetesService (read back with the `git` CLI), and each pod
//! event names its cluster.

use std::path::Path;
use std::process::{Command, Output};

use tether_testkit::cluster::kubeconfig_of;

use crate::discover::{fresh_clone, kubectl_for, remote_with_models, running_pods};
use crate::events::{events_of, lines};
use crate::harness::{LocalCluster, Running, cluster, pods_admitted};
use crate::reconcile::{Repo, git, setup};

const CLUSTERS: &str =
    "kind: KubernetesService\nname: east\n---\nkind: KubernetesService\nname: west\n";

/// tether with the merged kubeconfig (its current context: east).
fn tether(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("TETHER_COLOR", "never");
    command
}

fn succeeded(output: Output) -> String {
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// A bare pod made with kubectl on the cluster of `kubeconfig`.
fn kubectl_run(kubeconfig: &Path, namespace: &str, pod: &str) {
    let output = kubectl_for(kubeconfig)
        .args([
            "-n",
            namespace,
            "run",
            pod,
            "--image=busybox:1.36",
            "--restart=Never",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl run {pod}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn each_clusters_pods_are_committed_under_its_kubernetes_service_and_events_name_it() {
    let (east_client, ns, _) = setup("discover-clusters").await;
    let west = LocalCluster::start(1);
    let west_client = west.client().await;
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    kubeconfig_of(&[("east", cluster()), ("west", &west)], &kubeconfig);

    // The same namespace name on both clusters, a pod of its own on each.
    let created = kubectl_for(west.kubeconfig())
        .args(["create", "namespace", &ns])
        .output()
        .unwrap();
    assert!(created.status.success());
    pods_admitted(&west_client, &ns).await;
    kubectl_run(cluster().kubeconfig(), &ns, "web-east");
    kubectl_run(west.kubeconfig(), &ns, "web-west");
    let east_ip = running_pods(&east_client, &ns, 1).await["web-east"].clone();
    let west_ip = running_pods(&west_client, &ns, 1).await["web-west"].clone();

    // Events first, so that each pod's creation is seen as it is listed.
    let jsonl = |name: &str| work.path().join(format!("{name}.jsonl"));
    let events = |context: &str| {
        let outbox = work.path().join(format!("outbox-{context}"));
        let sink = jsonl(context);
        Running(
            tether(
                &kubeconfig,
                &["events", "--watch", "-n", &ns, "--context", context],
            )
            .arg("--events-jsonl")
            .arg(&sink)
            .arg("--outbox")
            .arg(&outbox)
            .spawn()
            .unwrap(),
        )
    };
    let watching = [events("east"), events("west")];

    let repo = Repo::new(&[]);
    let url = remote_with_models(&repo, CLUSTERS);
    let cache = repo.path().join("cache");
    // `context`: the cluster to discover, after the current one (east).
    let discover = |context: &[&str]| {
        let args = [
            "discover", "--repo", &url, "--branch", "main", "--push", "-n", &ns,
        ];
        succeeded(
            tether(&kubeconfig, &args)
                .args(context)
                .arg("--cache-dir")
                .arg(&cache)
                .arg("models")
                .output()
                .unwrap(),
        )
    };
    // The current context (east) names the cluster, then --context west.
    let out = discover(&[]);
    assert!(out.contains(&format!("+1 pods in east/{ns}")), "{out}");
    let out = discover(&["--context", "west"]);
    assert!(out.contains(&format!("+1 pods in west/{ns}")), "{out}");
    // East again: nothing of west's is touched.
    let out = discover(&["--context", "east"]);
    assert!(out.starts_with("no changes"), "{out}");

    let checkout = fresh_clone(&repo, &url);
    let files = git(
        &checkout,
        &["ls-tree", "-r", "--name-only", "HEAD", "models/discovered"],
    );
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [
            format!("models/discovered/east/{ns}/namespace.yaml"),
            format!("models/discovered/east/{ns}/pods/web-east.yaml"),
            "models/discovered/images.yaml".to_string(),
            format!("models/discovered/west/{ns}/namespace.yaml"),
            format!("models/discovered/west/{ns}/pods/web-west.yaml"),
        ]
    );
    // The namespace's name is east's TrustDomain's, discovered first; west's is
    // qualified by its cluster.
    let west_trust_domain = format!("west-{ns}");
    for (service, trust_domain, pod, ip) in [
        ("east", &ns, "web-east", &east_ip),
        ("west", &west_trust_domain, "web-west", &west_ip),
    ] {
        let show = |path: String| git(&checkout, &["show", &format!("HEAD:{path}")]);
        let namespace = show(format!("models/discovered/{service}/{ns}/namespace.yaml"));
        assert!(
            namespace.contains(&format!(
                "kind: TrustDomain\nname: {trust_domain}\nowner: {service}\nxos_managed: false\n"
            )),
            "{namespace}"
        );
        let pod_file = show(format!("models/discovered/{service}/{ns}/pods/{pod}.yaml"));
        assert!(
            pod_file.contains(&format!(
                "image: busybox:1.36\nowner: {service}\nxos_managed: false\npod_ip: \"{ip}\"\n"
            )),
            "{pod_file}"
        );
    }

    // Both clusters' models validate together.
    let validated = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("validate")
        .arg(checkout.join("models"))
        .output()
        .unwrap();
    succeeded(validated);

    for (context, pod) in [("east", "web-east"), ("west", "web-west")] {
        let about = events_of(&jsonl(context), pod, 1).await;
        assert_eq!(about[0]["status"], "created", "{about:?}");
        assert_eq!(about[0]["namespace"], ns.as_str());
        assert_eq!(about[0]["cluster"], context, "{about:?}");
        // Every event of this cluster's watch names it, none the other.
        let all = lines(&jsonl(context));
        assert!(all.iter().all(|e| e["cluster"] == context), "{all:?}");
    }
    drop(watching);
}
