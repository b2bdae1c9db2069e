//! Commit statuses against the control plane, a `git daemon` remote and a local HTTPS
//! Git host that checks each request against GitHub's own API description
//! (`@octokit/openapi`): what a team sees on its commits after a push.

use std::time::{Duration, Instant};

use tether_testkit::githost::{Availability, GitHost, GitHostServer};

use crate::daemon::{
    Daemon, Remote, install_crd, kubectl_apply_text, kubectl_ok, source_yaml, value_of,
};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, setup};

const TOKEN: &str = "ghp_tetherTestToken0123456789abcdefABCDEF";

/// The commit statuses the host took for `commit`: (state, context, description), in
/// the order they came.
fn statuses(host: &GitHostServer, commit: &str) -> Vec<(String, String, String)> {
    host.statuses(commit)
        .into_iter()
        .map(|s| (s.state, s.context, s.description.unwrap_or_default()))
        .collect()
}

fn states(host: &GitHostServer, commit: &str) -> Vec<String> {
    statuses(host, commit).into_iter().map(|s| s.0).collect()
}

/// The Secret of the host's token and CA, and the Source's `spec.feedback`.
fn feedback_of(ns: &str, host: &GitHostServer) -> String {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, host.ca_pem()).unwrap();
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "githost",
        "-n",
        ns,
        &format!("--from-literal=token={TOKEN}"),
        &format!("--from-file=ca.crt={}", ca.display()),
    ]);
    format!(
        "  interval: 1h\n  timeout: 20s\n  feedback:\n    provider: github\n    apiURL: {}\n    repository: team/models\n    secretRef:\n      name: githost\n",
        host.api_url()
    )
}

#[tokio::test]
async fn a_push_is_pending_then_successful_and_a_broken_commit_fails_naming_its_line() {
    install_crd();
    let (client, ns, _) = setup("feedback-status").await;
    let host = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let daemon = Daemon::start(&[
        "--sources",
        "--sources-namespace",
        &ns,
        "--cluster-name",
        "east",
    ]);
    let feedback = feedback_of(&ns, &host);
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, &feedback));
    let context = format!("tether/east/{ns}/web");

    // The first commit: pending when taken up, success once applied and ready.
    let first = remote.head("main");
    eventually(Duration::from_secs(30), || async {
        states(&host, &first) == ["pending", "success"]
    })
    .await;
    assert!(
        statuses(&host, &first).iter().all(|s| s.1 == context),
        "{:?}",
        statuses(&host, &first)
    );

    // A push: its status is seen within seconds of the apply.
    let second = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) =
        crate::daemon::push_hook(&remote.url, "refs/heads/main", crate::daemon::SECRET);
    let pushed = Instant::now();
    let (code, answer) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202, "{answer}");
    eventually(Duration::from_secs(15), || async {
        states(&host, &second) == ["pending", "success"]
    })
    .await;
    eprintln!("push to success status: {:?}", pushed.elapsed());
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));

    // A broken commit: pending, then failure naming the file and line; nothing applied.
    let broken = remote.push(
        "main",
        &[("cm.yaml", &format!("kind: KubernetesConfigMap\nname: settings\ntrust_domain: {ns}\ndata:\n  key: \"v3\"\nreplicas: 2\n"))],
    );
    let (code, _) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(15), || async {
        states(&host, &broken) == ["pending", "failure"]
    })
    .await;
    let failure = &statuses(&host, &broken)[1];
    assert!(
        failure.2.contains("cm.yaml:6"),
        "the failure names the file and line: {failure:?}"
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));

    // At most one request per (commit, context, state); every request as GitHub's
    // description says; the token only ever in the Authorization header.
    for commit in [&first, &second, &broken] {
        let sent = host
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with(&format!("/statuses/{commit}")))
            .count();
        assert!(sent <= 3, "{sent} requests for {commit}");
    }
    assert_eq!(host.violations(), Vec::<String>::new());
    for request in host.requests() {
        assert!(!format!("{:?}", request.body).contains(TOKEN));
    }
    let source = kubectl_ok(&["get", "source", "web", "-n", &ns, "-o", "yaml"]);
    assert!(!source.contains(TOKEN));
}

#[tokio::test]
async fn statuses_made_while_the_host_is_down_arrive_once_it_is_back_and_the_apply_does_not_wait() {
    install_crd();
    let (client, ns, _) = setup("feedback-outage").await;
    let host = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    // The outboxes live in the state directory, kept across the restart.
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    let args = [
        "--sources",
        "--sources-namespace",
        &ns,
        "--cluster-name",
        "east",
        "--state-dir",
        state_dir,
    ];
    let daemon = Daemon::start(&args);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        &feedback_of(&ns, &host),
    ));
    let first = remote.head("main");
    eventually(Duration::from_secs(30), || async {
        states(&host, &first) == ["pending", "success"]
    })
    .await;

    // Down for a minute: the push is applied as fast as ever.
    host.set_availability(Availability::Refusing);
    let second = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) =
        crate::daemon::push_hook(&remote.url, "refs/heads/main", crate::daemon::SECRET);
    let pushed = Instant::now();
    let (code, _) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    let applied = pushed.elapsed();
    assert!(
        applied < Duration::from_secs(5),
        "applied {applied:?} after the webhook, host down"
    );
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(pushed.elapsed())).await;
    assert_eq!(states(&host, &second), Vec::<String>::new());

    // A restart while the host is still down loses nothing.
    drop(daemon);
    let _daemon = Daemon::start(&args);
    host.set_availability(Availability::Up);
    eventually(Duration::from_secs(60), || async {
        states(&host, &second) == ["pending", "success"]
    })
    .await;
    // Nothing doubled: the first commit's statuses were not sent again.
    assert_eq!(states(&host, &first), ["pending", "success"]);
    assert_eq!(host.violations(), Vec::<String>::new());
}
