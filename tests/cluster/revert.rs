//! Revert that sticks (`spec.revert`) in the daemon, on the shared control plane with
//! the node simulator's pods: a commit whose Deployment never becomes ready blocks the
//! next sync-wave until the Source's timeout, and tether reverts it in Git, so the
//! later wave's change never reaches the cluster; the web page shows the revert. The
//! real node's probes are `tests/control_plane/revert.rs`.

use std::process::Command;
use std::time::Duration;

use crate::daemon::{Daemon, install_crd, kubectl_apply_text, source_yaml, status};
use crate::harness::eventually;
use crate::reconcile::{base, live_config_map, setup};
use crate::web::{http_get, json};
use tether_testkit::remote::Remote;

/// A Deployment at sync-wave 0 (its pods unready under `ready: "false"`) and a
/// ConfigMap at sync-wave 1 holding `value`.
fn web(ns: &str, ready: &str, value: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
  annotations: {{argocd.argoproj.io/sync-wave: \"0\"}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata:
      labels: {{app: web}}
      annotations: {{sim.tether.dev/ready: \"{ready}\"}}
    spec:
      containers: [{{name: web, image: registry.example.org/web:1.0.0}}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: after
  namespace: {ns}
  annotations: {{argocd.argoproj.io/sync-wave: \"1\"}}
data: {{value: {value}}}
"
    )
}

/// `git log -1 --format=FORMAT main` of the remote (the git CLI, beside tether's git2).
fn last_commit(remote: &Remote, format: &str) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(remote.bare())
        .args(["log", "-1", &format!("--format={format}"), "main"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn a_commit_whose_deployment_blocks_the_next_wave_is_reverted_and_the_wave_never_applied() {
    install_crd();
    let (client, ns, _) = setup("revert-blocked").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("web.yaml", &web(&ns, "true", "v1")),
    ]);
    let daemon = Daemon::start(&[
        "--sources",
        "--sources-namespace",
        &ns,
        "--web-anonymous-read-only",
    ]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 2s\n  timeout: 10s\n  revert: true\n",
    ));
    eventually(Duration::from_secs(60), || async {
        live_config_map(&client, &ns, "after").await.is_some()
    })
    .await;

    let bad = remote.push("main", &[("web.yaml", &web(&ns, "false", "v2"))]);
    eventually(Duration::from_secs(90), || async {
        last_commit(&remote, "%(trailers:key=Tether-Revert,valueonly)") == bad
    })
    .await;
    let message = last_commit(&remote, "%B");
    assert!(
        message.contains(&format!("- Deployment {ns}/web: ")),
        "the revert names the Deployment: {message}"
    );
    let revert = remote.head_of_bare("main");
    let last = status(&ns, "web")["lastRevert"].clone();
    assert!(
        last["failed"].as_str().is_some_and(|f| f.ends_with(&bad))
            && last["revert"]
                .as_str()
                .is_some_and(|r| r.ends_with(&revert)),
        "{last}"
    );
    // The page says so too: its API, and its section of the Source's page.
    let shown = json(&http_get(&daemon, &format!("/api/v1/sources/{ns}/web"), None).1);
    assert!(
        shown["lastRevert"]["revert"]
            .as_str()
            .is_some_and(|r| r.ends_with(&revert)),
        "{shown}"
    );
    let (code, page) = http_get(&daemon, &format!("/sources/{ns}/web"), None);
    assert_eq!(code, 200);
    assert!(
        page.contains("<section id=\"revert\">") && page.contains(&revert),
        "{page}"
    );
    // The revert applied: the template as before; the later wave never saw v2.
    eventually(Duration::from_secs(60), || async {
        let status = status(&ns, "web");
        status["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| r.ends_with(&revert))
    })
    .await;
    let after = live_config_map(&client, &ns, "after").await.unwrap();
    assert_eq!(
        after
            .data
            .unwrap_or_default()
            .get("value")
            .map(String::as_str),
        Some("v1")
    );
    assert_eq!(remote.head_of_bare("main"), revert, "one revert, not two");

    // A restarted daemon's page shows the last failed rollout from the status.
    drop(daemon);
    let daemon = Daemon::start(&[
        "--sources",
        "--sources-namespace",
        &ns,
        "--web-anonymous-read-only",
    ]);
    eventually(Duration::from_secs(30), || async {
        let (code, body) = http_get(&daemon, &format!("/api/v1/sources/{ns}/web"), None);
        code == 200
            && json(&body)["lastRevert"]["revert"]
                .as_str()
                .is_some_and(|r| r.ends_with(&revert))
    })
    .await;
    assert_eq!(remote.head_of_bare("main"), revert, "one revert, not two");
}

/// The Deployment alone: its pass ends at once, and the rollout is waited for beside
/// the loop.
fn deployment(ns: &str, ready: &str) -> String {
    web(ns, ready, "unused")
        .split("\n---\n")
        .next()
        .unwrap_or_default()
        .replace("  annotations: {argocd.argoproj.io/sync-wave: \"0\"}\n", "")
}

#[tokio::test]
async fn a_daemon_killed_while_it_waits_for_a_rollout_resumes_the_wait_and_reverts() {
    install_crd();
    let (client, ns, _) = setup("revert-restart").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("web.yaml", &deployment(&ns, "true")),
    ]);
    let args = ["--sources", "--sources-namespace", &ns];
    let daemon = Daemon::start(&args);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 2s\n  timeout: 25s\n  revert: true\n",
    ));
    let applied = |commit: String| {
        let ns = ns.clone();
        move || {
            let ns = ns.clone();
            let commit = commit.clone();
            async move {
                status(&ns, "web")["lastAppliedRevision"]
                    .as_str()
                    .is_some_and(|r| r.ends_with(&commit))
            }
        }
    };
    eventually(
        Duration::from_secs(60),
        applied(remote.head_of_bare("main")),
    )
    .await;

    // The bad commit applied, its rollout waited for: the daemon is killed then.
    let bad = remote.push("main", &[("web.yaml", &deployment(&ns, "false"))]);
    eventually(Duration::from_secs(30), applied(bad.clone())).await;
    drop(daemon);
    let _daemon = Daemon::start(&args);

    // The new daemon's pass changes nothing, yet it waits the time left and reverts.
    eventually(Duration::from_secs(60), || async {
        last_commit(&remote, "%(trailers:key=Tether-Revert,valueonly)") == bad
    })
    .await;
    let revert = remote.head_of_bare("main");
    eventually(Duration::from_secs(30), applied(revert.clone())).await;
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), &ns);
    let template = deployments.get("web").await.unwrap().spec.unwrap().template;
    assert_eq!(
        template.metadata.unwrap().annotations.unwrap()["sim.tether.dev/ready"],
        "true"
    );
    assert_eq!(remote.head_of_bare("main"), revert, "one revert, not two");
}
