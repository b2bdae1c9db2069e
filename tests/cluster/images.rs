//! Image automation in the daemon, against the control plane, a `git daemon` remote
//! and a real registry (Debian's docker-registry) that announces each push to the
//! daemon's `/hook/registry` as Docker distribution does; images pushed by skopeo. What
//! a team sees: a new matching tag committed within seconds and rolled out, a tag
//! outside the policy or too young changing nothing, and each policy's state in the
//! Source's status and the metrics.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use tether_daemon::shard;
use tether_testkit::registry::Registry;

use crate::daemon::{
    Daemon, Remote, SECRET, install_crd, kubectl_apply_text, kubectl_ok, source_yaml, status,
};
use crate::harness::eventually;
use crate::reconcile::{base, setup};
use crate::web::{http_get, install_roles, json, user};

/// An Image of `host/shop/app` at 1.0.0, a Deployment Slice of two replicas running
/// it, and the policy: 1.x, at least an hour old.
fn models(ns: &str, host: &str) -> Vec<(String, String)> {
    vec![
        ("base.yaml".into(), base(ns)),
        (
            "app.yaml".into(),
            format!(
                "kind: Image\nname: {host}/shop/app\ntag: 1.0.0\n---\nkind: Slice\nname: app\ntrust_domain: {ns}\ncontroller_kind: Deployment\ncontroller_replica_count: 2\ndefault_image: {host}/shop/app:1.0.0\n"
            ),
        ),
        (
            "policy.yaml".into(),
            format!(
                "kind: ImagePolicy\nname: app\nimage: {host}/shop/app\nsemver: \">=1.0.0 <2.0.0\"\nmin_age: 1h\ninterval: 1h\ninsecure: true\n"
            ),
        ),
    ]
}

async fn image_of(client: &kube::Client, ns: &str) -> Option<String> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt("app")
        .await
        .ok()??;
    deployment
        .spec?
        .template
        .spec?
        .containers
        .first()?
        .image
        .clone()
}

/// A remote of [`models`] with `policy` instead of its policy file.
fn remote_with_policy(files: &[(String, String)], policy: &str) -> Remote {
    Remote::new(&[
        ("base.yaml", &files[0].1),
        ("app.yaml", &files[1].1),
        ("policy.yaml", policy),
    ])
}

/// The Source `web` of `remote`, with image automation, reconciled hourly.
fn apply_source(ns: &str, remote: &Remote) {
    kubectl_apply_text(&source_yaml(
        "web",
        ns,
        &remote.url,
        "  interval: 1h\n  imageAutomation: {}\n",
    ));
}

/// The `app` policy's entry in the Source's status.
fn policy_status(ns: &str) -> serde_json::Value {
    status(ns, "web")["images"]
        .as_array()
        .and_then(|images| images.iter().find(|i| i["policy"] == "app").cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_pushed_tag_is_committed_within_seconds_of_the_registry_webhook_then_rolled_out() {
    install_crd();
    let (client, ns, _) = setup("images-hook").await;
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    let registry = Registry::start_with_notifications(
        &format!("http://127.0.0.1:{}/hook/registry", daemon.port),
        &[("Authorization", &format!("Bearer {SECRET}"))],
    );
    let a_day_ago = Utc::now() - chrono::Duration::days(1);
    let remote = applied_at_1_0_0(&client, &ns, &registry).await;

    // A matching tag, a day old: committed within 10 s of the registry's webhook, then
    // applied like any push, and the Deployment rolls to it.
    pushed_1_0_1_committed_within_10_s(&client, &ns, &remote, &registry).await;
    let rolled = kubectl_ok(&[
        "rollout",
        "status",
        "deployment/app",
        "-n",
        &ns,
        "--timeout=60s",
    ]);
    assert!(rolled.contains("successfully rolled out"), "{rolled}");
    // The status says what was chosen, from what, and when, and keeps it through the
    // scans that follow (each later push's notification is a scan too).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let entry = loop {
        let entry = policy_status(&ns);
        if entry["lastUpdate"].is_string() || std::time::Instant::now() > deadline {
            break entry;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(entry["lastUpdate"], "1.0.0 → 1.0.1 on main", "{entry}");
    assert!(entry["lastUpdateTime"].is_string(), "{entry}");

    // Outside the range (2.0.0), and too young (1.0.2, pushed now): scanned, nothing
    // committed, and the status says why.
    let head = remote.head_of_bare("main");
    registry.push_image("shop/app", "2.0.0", a_day_ago);
    registry.push_image("shop/app", "1.0.2", Utc::now());
    eventually(Duration::from_secs(20), || async {
        let entry = policy_status(&ns);
        entry["result"] == "Kept" && entry["message"].as_str().unwrap_or("").contains("1.0.2")
    })
    .await;
    assert_eq!(remote.head_of_bare("main"), head);
    let entry = policy_status(&ns);
    assert!(
        entry["message"].as_str().unwrap().contains("young"),
        "{entry}"
    );
    let wide = kubectl_ok(&["get", "source", "web", "-n", &ns, "-o", "wide"]);
    assert!(wide.contains("1 policy: 0 updated, 0 failed"), "{wide}");
    // The web page and its API show the policy as the status says it.
    install_roles();
    let viewer = user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let (code, body) = http_get(&daemon, &format!("/api/v1/sources/{ns}/web"), Some(&viewer));
    assert_eq!(code, 200, "{body}");
    let shown = &json(&body)["images"][0];
    assert_eq!(shown["policy"], "app", "{body}");
    assert_eq!(shown["result"], entry["result"], "{body}");
    assert_eq!(shown["message"], entry["message"], "{body}");
    assert_eq!(shown["candidate"], entry["candidate"], "{body}");
    let (code, page) = http_get(&daemon, &format!("/sources/{ns}/web"), Some(&viewer));
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("data-policy=\"app\""), "{page}");
    let scans = daemon
        .metric(&format!(
            "tether_image_policy_scans_total{{source=\"{ns}/web\",policy=\"app\",result=\"kept\"}}"
        ))
        .unwrap_or(0.0);
    assert!(scans >= 2.0, "{scans}");
}

#[tokio::test]
async fn a_registry_that_refuses_the_credentials_is_said_in_the_status_and_nothing_is_committed() {
    install_crd();
    let (_client, ns, _) = setup("images-creds").await;
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    let registry = Registry::start_for_user("ci", "right-password");
    let host = registry.host();
    kubectl_ok(&[
        "create",
        "secret",
        "docker-registry",
        "regcred",
        "-n",
        &ns,
        &format!("--docker-server={host}"),
        "--docker-username=ci",
        "--docker-password=Wr0ngPassw0rd",
    ]);
    let files = models(&ns, &host);
    let policy = files[2]
        .1
        .replace("insecure: true\n", "insecure: true\nsecret: regcred\n");
    let remote = remote_with_policy(&files, &policy);
    let before = remote.head_of_bare("main");
    apply_source(&ns, &remote);
    eventually(Duration::from_secs(60), || async {
        policy_status(&ns)["result"] == "Failed"
    })
    .await;
    let entry = policy_status(&ns);
    let message = entry["message"].as_str().unwrap();
    assert!(message.contains("refused the credentials"), "{entry}");
    assert!(!message.contains("Wr0ngPassw0rd"));
    assert_eq!(remote.head_of_bare("main"), before);
    let wide = kubectl_ok(&["get", "source", "web", "-n", &ns, "-o", "wide"]);
    assert!(wide.contains("1 failed (app)"), "{wide}");
    drop(daemon);
}

#[tokio::test]
async fn without_a_webhook_a_pushed_tag_is_committed_within_one_interval_listing_once_a_run() {
    install_crd();
    let (client, ns, _) = setup("images-interval").await;
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    let registry = Registry::start();
    let host = registry.host();
    let a_day_ago = Utc::now() - chrono::Duration::days(1);
    registry.push_image("shop/app", "1.0.0", a_day_ago);
    let files = models(&ns, &host);
    // Listed every 10 s (the shortest interval a policy may have), no webhook.
    let policy = files[2].1.replace("interval: 1h", "interval: 10s");
    let remote = remote_with_policy(&files, &policy);
    apply_source(&ns, &remote);
    eventually(Duration::from_secs(60), || async {
        policy_status(&ns)["result"] == "Kept"
    })
    .await;
    let before = remote.head_of_bare("main");
    let lists_before = tag_lists(&registry);
    registry.push_image("shop/app", "1.0.1", a_day_ago);
    let pushed = std::time::Instant::now();
    // One interval, and the time a run and its push take.
    committed_then_applied(
        &client,
        &ns,
        &remote,
        &before,
        Duration::from_secs(20),
        &host,
    )
    .await;
    // One list call per run: no more than one per interval since the push.
    let runs = pushed.elapsed().as_secs() / 10 + 1;
    let lists = tag_lists(&registry) - lists_before;
    assert!(
        (1..=runs as usize).contains(&lists),
        "{lists} tag lists in {runs} intervals"
    );
}

#[tokio::test]
async fn a_registry_webhook_reaching_a_replica_that_does_not_run_the_source_reaches_its_owner() {
    install_crd();
    let (client, ns, _) = setup("images-shard").await;
    let replica = |identity: &str| crate::daemon::sharded_replica(&ns, identity);
    let replicas = [("a", replica("a")), ("b", replica("b"))];
    let members = BTreeSet::from(["a".to_string(), "b".to_string()]);
    let owner = shard::owner(&members, &format!("{ns}/web")).unwrap();
    let (_, elsewhere) = replicas.iter().find(|(id, _)| *id != owner).unwrap();
    let (_, running) = replicas.iter().find(|(id, _)| *id == owner).unwrap();
    // The registry announces its pushes to the replica that does not run the Source.
    let registry = Registry::start_with_notifications(
        &format!("http://127.0.0.1:{}/hook/registry", elsewhere.port),
        &[("Authorization", &format!("Bearer {SECRET}"))],
    );
    let remote = applied_at_1_0_0(&client, &ns, &registry).await;
    assert_eq!(status(&ns, "web")["owner"], owner);

    // The policy scans hourly: only the webhook, passed on, can commit within 10 s.
    pushed_1_0_1_committed_within_10_s(&client, &ns, &remote, &registry).await;
    let scans = |replica: &Daemon| {
        replica
            .metric(&format!(
                "tether_image_policy_scans_total{{source=\"{ns}/web\",policy=\"app\",result=\"updated\"}}"
            ))
            .unwrap_or(0.0)
    };
    assert_eq!(scans(running), 1.0, "the owner scanned and updated");
    assert_eq!(
        scans(elsewhere),
        0.0,
        "the replica the webhook reached runs nothing of it"
    );
}

/// The Source `web` of [`models`] with its policy, the registry holding 1.0.0 (a day
/// old): waits until it runs 1.0.0 and its policy was scanned; returns its remote.
async fn applied_at_1_0_0(client: &kube::Client, ns: &str, registry: &Registry) -> Remote {
    let host = registry.host();
    registry.push_image("shop/app", "1.0.0", Utc::now() - chrono::Duration::days(1));
    let files = models(ns, &host);
    let remote = remote_with_policy(&files, &files[2].1);
    apply_source(ns, &remote);
    eventually(Duration::from_secs(60), || async {
        image_of(client, ns).await == Some(format!("{host}/shop/app:1.0.0"))
            && policy_status(ns)["result"] == "Kept"
    })
    .await;
    remote
}

/// Pushes 1.0.1 (a day old) to the registry: its commit within 10 s, then its rollout.
async fn pushed_1_0_1_committed_within_10_s(
    client: &kube::Client,
    ns: &str,
    remote: &Remote,
    registry: &Registry,
) {
    let before = remote.head_of_bare("main");
    registry.push_image("shop/app", "1.0.1", Utc::now() - chrono::Duration::days(1));
    committed_then_applied(
        client,
        ns,
        remote,
        &before,
        Duration::from_secs(10),
        &registry.host(),
    )
    .await;
}

/// Waits `within` for the commit of `1.0.0 → 1.0.1` on the remote's main (which was
/// at `before`), then for the Deployment to run `host`'s 1.0.1.
async fn committed_then_applied(
    client: &kube::Client,
    ns: &str,
    remote: &Remote,
    before: &str,
    within: Duration,
    host: &str,
) {
    eventually(within, || async { remote.head_of_bare("main") != before }).await;
    let message = tether_testkit::git::git(&remote.bare(), &["log", "-1", "--format=%B", "main"]);
    assert!(message.contains("1.0.0 → 1.0.1"), "{message}");
    eventually(Duration::from_secs(60), || async {
        image_of(client, ns).await == Some(format!("{host}/shop/app:1.0.1"))
    })
    .await;
}

/// How many times the registry was asked for `shop/app`'s tags.
fn tag_lists(registry: &Registry) -> usize {
    registry
        .requests()
        .iter()
        .filter(|r| r.contains("/v2/shop/app/tags/list"))
        .count()
}
