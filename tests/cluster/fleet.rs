//! A fleet view that holds no cluster's keys (`tether fleet`, `tether run
//! --fleet-hub-kubeconfig`), against real control planes: a hub of its own, and two
//! clusters (the run's shared one and one of the test's own), each with a daemon
//! following a Git remote and reporting to the hub as its own ServiceAccount. The hub
//! goes away for a minute while pushes land; the hub's API server refuses a revoked
//! credential and a cluster writing another's report; a report's strings are data
//! that `tether fleet status` prints as text and never follows.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tether_testkit::cluster::{LocalCluster, client, eventually};

use crate::daemon::{Daemon, Remote, source_yaml};
use crate::harness::{cluster, repo_root};
use crate::reconcile::{base, config_map, setup};

/// The daemons' heartbeat in these tests.
const HEARTBEAT: &str = "5s";

/// `tether ARGS` with the hub's kubeconfig.
fn tether_fleet(hub: &Path, args: &[&str]) -> Output {
    Command::new(crate::harness::tether_binary())
        .arg("fleet")
        .args(args)
        .arg("--hub-kubeconfig")
        .arg(hub)
        .env("TETHER_COLOR", "never")
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `tether fleet join NAME`: the cluster's kubeconfig for the hub, written in `dir`.
fn join(hub: &LocalCluster, name: &str, dir: &Path) -> PathBuf {
    let path = dir.join(format!("{name}-hub.yaml"));
    let joined = tether_fleet(
        hub.kubeconfig(),
        &["join", name, "-o", path.to_str().unwrap()],
    );
    assert!(joined.status.success(), "{}", text(&joined));
    path
}

/// `tether fleet status -o json` (extra arguments after), parsed; and its exit code.
fn status_json(hub: &LocalCluster, extra: &[&str]) -> (Value, Option<i32>) {
    let mut args = vec!["status", "-o", "json"];
    args.extend_from_slice(extra);
    let output = tether_fleet(hub.kubeconfig(), &args);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        text(&output)
    );
    let view =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&output)));
    (view, output.status.code())
}

fn cluster_of<'v>(view: &'v Value, name: &str) -> Option<&'v Value> {
    view["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// Whether the view shows `cluster` reporting, its Source `namespace/source` ready
/// at `commit`.
fn shows_applied(view: &Value, cluster: &str, namespace: &str, commit: &str) -> bool {
    let Some(cluster) = cluster_of(view, cluster) else {
        return false;
    };
    cluster["reporting"]["state"] == "reporting"
        && cluster["sources"].as_array().is_some_and(|sources| {
            sources.iter().any(|s| {
                s["namespace"] == namespace
                    && s["name"] == "web"
                    && s["state"] == "ready"
                    && s["applied"].as_str() == Some(&format!("main@sha1:{commit}"))
            })
        })
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let kubectl = tether_testkit::cluster::binaries().join("kubectl");
    let mut command = Command::new(kubectl);
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let output = match stdin {
        Some(input) => {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), input).unwrap();
            command.args(["-f", file.path().to_str().unwrap()]).output()
        }
        None => command.output(),
    }
    .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        text(&output)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn install_source_crd(kubeconfig: &Path) {
    let crd = repo_root().join("deploy/base/crd.yaml");
    kubectl(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            crd.to_str().unwrap(),
        ],
        None,
    );
    kubectl(
        kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "crd/sources.tether.dev",
            "--timeout=30s",
        ],
        None,
    );
}

/// The Source `web` in `namespace`, following `remote` every 2 s.
fn declare_source(kubeconfig: &Path, namespace: &str, remote: &Remote) {
    let yaml = source_yaml("web", namespace, &remote.file_url(), "  interval: 2s\n");
    kubectl(kubeconfig, &["apply"], Some(&yaml));
}

fn models(namespace: &str, value: &str) -> Vec<(String, String)> {
    vec![(
        "m.yaml".to_string(),
        format!(
            "{}---\n{}",
            base(namespace),
            config_map("settings", namespace, value)
        ),
    )]
}

fn files(models: &[(String, String)]) -> Vec<(&str, &str)> {
    models
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect()
}

async fn value_on(client: &kube::Client, namespace: &str) -> Option<String> {
    crate::reconcile::live_config_map(client, namespace, "settings")
        .await?
        .data?
        .get("key")
        .cloned()
}

/// A daemon of the cluster `kubeconfig` reaches, named `name`, reporting to the hub.
fn reporting_daemon(kubeconfig: &Path, namespace: &str, name: &str, hub: &Path) -> Daemon {
    Daemon::start_on(
        kubeconfig,
        &[
            "--sources",
            "--sources-namespace",
            namespace,
            "--cluster-name",
            name,
            "--fleet-hub-kubeconfig",
            hub.to_str().unwrap(),
            "--fleet-heartbeat",
            HEARTBEAT,
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_two_clusters_apply_through_a_hub_outage_and_the_view_is_complete_within_10s_of_its_return()
 {
    let hub = LocalCluster::start(0);
    let far = LocalCluster::start(0);
    let (near_client, ns, _) = setup("fleet").await;
    let far_client = far.client().await;
    let dir = tempfile::tempdir().unwrap();
    let near_hub = join(&hub, "near", dir.path());
    let far_hub = join(&hub, "far", dir.path());

    // Before any report: both joined, never reported, and that needs attention.
    let (view, code) = status_json(&hub, &[]);
    assert_eq!(code, Some(1), "{view:#}");
    for name in ["near", "far"] {
        assert_eq!(
            cluster_of(&view, name).unwrap()["reporting"]["state"],
            "never-reported",
            "{view:#}"
        );
    }

    install_source_crd(cluster().kubeconfig());
    install_source_crd(far.kubeconfig());
    kubectl(far.kubeconfig(), &["create", "namespace", &ns], None);
    let near_remote = Remote::new(&files(&models(&ns, "v1")));
    let far_remote = Remote::new(&files(&models(&ns, "v1")));
    declare_source(cluster().kubeconfig(), &ns, &near_remote);
    declare_source(far.kubeconfig(), &ns, &far_remote);
    let _near_daemon = reporting_daemon(cluster().kubeconfig(), &ns, "near", &near_hub);
    let mut far_daemon = reporting_daemon(far.kubeconfig(), &ns, "far", &far_hub);

    let (near_v1, far_v1) = (
        near_remote.head_of_bare("main"),
        far_remote.head_of_bare("main"),
    );
    eventually(Duration::from_secs(60), || async {
        let (view, _) = status_json(&hub, &[]);
        shows_applied(&view, "near", &ns, &near_v1) && shows_applied(&view, "far", &ns, &far_v1)
    })
    .await;
    let (view, code) = status_json(&hub, &[]);
    assert_eq!(code, Some(0), "nothing needs attention: {view:#}");

    // The hub goes away for a minute; pushes land meanwhile, and both clusters apply
    // them without it.
    hub.stop_api_server();
    let down = Instant::now();
    let near_v2 = near_remote.push("main", &files(&models(&ns, "v2")));
    let far_v2 = far_remote.push("main", &files(&models(&ns, "v2")));
    eventually(Duration::from_secs(50), || async {
        value_on(&near_client, &ns).await.as_deref() == Some("v2")
            && value_on(&far_client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    let applied_after = down.elapsed();
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(down.elapsed())).await;
    hub.start_api_server();
    let back = Instant::now();
    eventually(Duration::from_secs(10), || async {
        let (view, _) = status_json(&hub, &[]);
        shows_applied(&view, "near", &ns, &near_v2) && shows_applied(&view, "far", &ns, &far_v2)
    })
    .await;
    let complete_after = back.elapsed();
    eprintln!(
        "fleet: both clusters applied the pushes {applied_after:?} into the hub's outage; \
         the view was complete {complete_after:?} after its return"
    );
    assert!(complete_after <= Duration::from_secs(10));

    // The JSON and the text hold the same clusters and Sources.
    let (view, _) = status_json(&hub, &[]);
    let printed = tether_fleet(hub.kubeconfig(), &["status"]);
    let printed = String::from_utf8(printed.stdout).unwrap();
    for cluster in view["clusters"].as_array().unwrap() {
        let name = cluster["name"].as_str().unwrap();
        assert!(
            printed.contains(&format!("\n{name}: reporting (last report ")),
            "{printed}"
        );
        for source in cluster["sources"].as_array().unwrap() {
            let line = format!(
                "  {}/{}  {}  at {}",
                source["namespace"].as_str().unwrap(),
                source["name"].as_str().unwrap(),
                source["state"].as_str().unwrap(),
                source["applied"].as_str().unwrap()
            );
            assert!(printed.contains(&line), "{line:?} in {printed}");
        }
    }

    // A cluster that stops reporting is shown so, with the time of its last report,
    // first.
    let last = cluster_of(&view, "far").unwrap()["lastReport"]
        .as_str()
        .unwrap()
        .to_string();
    far_daemon.terminate();
    let stale_after = "8s";
    eventually(Duration::from_secs(30), || async {
        let (view, _) = status_json(&hub, &["--stale-after", stale_after]);
        view["clusters"][0]["name"] == "far"
            && view["clusters"][0]["reporting"]["state"] == "not-reporting"
    })
    .await;
    let (view, code) = status_json(&hub, &["--stale-after", stale_after]);
    assert_eq!(code, Some(1));
    // Its last report may be the one its shutdown wrote, no later.
    let far_view = cluster_of(&view, "far").unwrap();
    let last_now = far_view["lastReport"].as_str().unwrap();
    assert!(last_now >= last.as_str(), "{last_now} < {last}");
    assert_eq!(view["summary"]["clustersNotReporting"], 1, "{view:#}");
    let printed = tether_fleet(hub.kubeconfig(), &["status", "--stale-after", stale_after]);
    let printed = String::from_utf8(printed.stdout).unwrap();
    assert!(
        printed.contains(&format!(
            "\nfar: NOT REPORTING since {last_now} (older than 8s)"
        )),
        "{printed}"
    );
    assert!(
        printed.find("\nfar:") < printed.find("\nnear:"),
        "the silent cluster first: {printed}"
    );
}

/// A client acting as a joined cluster, with the kubeconfig `join` wrote.
async fn as_cluster(kubeconfig: &Path) -> kube::Client {
    client(kubeconfig).await.unwrap()
}

fn reports_api(client: kube::Client) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("tether.dev", "v1alpha1", "ClusterReport");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "clusterreports");
    Api::namespaced_with(client, "tether-fleet", &resource)
}

fn a_report(at: &str, message: &str) -> Value {
    json!({"spec": {
        "reportedAt": at,
        "version": "0.1.0",
        "heartbeatSeconds": 3600,
        "sources": [{"namespace": "team", "name": "web", "ready": "False",
                     "reason": "Failed", "message": message}],
    }})
}

fn refused_with(result: Result<DynamicObject, kube::Error>, code: u16) {
    match result {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, code, "{status:?}"),
        other => panic!("not refused with {code}: {other:?}"),
    }
}

/// The view without its own time: what a refused write must leave as it was.
fn view_data(hub: &LocalCluster) -> Value {
    let (mut view, _) = status_json(hub, &[]);
    view.as_object_mut().unwrap().remove("at");
    view
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_the_hub_refuses_a_revoked_credential_and_a_cluster_writing_another_clusters_report()
{
    let hub = LocalCluster::start(0);
    let dir = tempfile::tempdir().unwrap();
    let alpha = as_cluster(&join(&hub, "alpha", dir.path())).await;
    let beta = as_cluster(&join(&hub, "beta", dir.path())).await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let merge = PatchParams::default();

    // Each writes its own report.
    reports_api(alpha.clone())
        .patch(
            "alpha",
            &merge,
            &Patch::Merge(a_report(&now, "alpha's own")),
        )
        .await
        .unwrap();
    reports_api(beta.clone())
        .patch("beta", &merge, &Patch::Merge(a_report(&now, "beta's own")))
        .await
        .unwrap();
    let before = view_data(&hub);
    assert_eq!(
        cluster_of(&before, "beta").unwrap()["sources"][0]["message"],
        "beta's own"
    );

    // alpha writes beta's report, makes a report of its own choosing, reads the others.
    let alphas = reports_api(alpha.clone());
    refused_with(
        alphas
            .patch(
                "beta",
                &merge,
                &Patch::Merge(a_report(&now, "alpha was here")),
            )
            .await,
        403,
    );
    let mut forged: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "ClusterReport",
        "metadata": {"name": "gamma", "namespace": "tether-fleet"},
    }))
    .unwrap();
    forged.data = a_report(&now, "forged");
    refused_with(alphas.create(&PostParams::default(), &forged).await, 403);
    refused_with(alphas.get("beta").await, 403);
    match alphas.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => panic!("alpha listed the reports: {other:?}"),
    }
    assert_eq!(view_data(&hub), before);

    // Revoked, alpha's token is refused, even for its own report.
    let revoked = tether_fleet(hub.kubeconfig(), &["revoke", "alpha"]);
    assert!(revoked.status.success(), "{}", text(&revoked));
    // The token authenticator caches a token's answer for a few seconds at most.
    eventually(Duration::from_secs(15), || async {
        matches!(
            alphas
                .patch("alpha", &merge, &Patch::Merge(a_report(&now, "after revoke")))
                .await,
            Err(kube::Error::Api(ref status)) if status.code == 401
        )
    })
    .await;
    refused_with(
        alphas
            .patch(
                "alpha",
                &merge,
                &Patch::Merge(a_report(&now, "after revoke")),
            )
            .await,
        401,
    );
    assert_eq!(view_data(&hub), before, "a refused write changed the view");
    // beta still reports.
    reports_api(beta)
        .patch("beta", &merge, &Patch::Merge(a_report(&now, "beta again")))
        .await
        .unwrap();
}

/// A listener on loopback that counts the connections made to it.
fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            counted.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut stream) = stream {
                let mut buffer = [0u8; 1024];
                let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
                let _ = stream.read(&mut buffer);
            }
        }
    });
    (port, count)
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_status_prints_a_reports_hostile_strings_as_text_and_contacts_nothing() {
    let hub = LocalCluster::start(0);
    let dir = tempfile::tempdir().unwrap();
    let evil = as_cluster(&join(&hub, "evil", dir.path())).await;
    let (port, connections) = counting_listener();
    let url = format!("https://127.0.0.1:{port}/");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let report = json!({"spec": {
        "reportedAt": now,
        "version": format!("{url}version"),
        "heartbeatSeconds": 60,
        // Not in the schema: the API server drops it.
        "server": url,
        "kubeconfig": format!("apiVersion: v1\nclusters:\n- cluster:\n    server: {url}\n"),
        "sources": [{
            "namespace": format!("{url}ns"),
            "name": format!("git://127.0.0.1:{port}/repo"),
            "wanted": format!("ssh://127.0.0.1:{port}/x@sha1:0"),
            "ready": "False",
            "reason": "Failed",
            "message": format!("see {url}\u{1b}[2J\u{1b}]8;;{url}\u{7}click\nfake: line"),
            "blockedOn": format!("{url}blocked"),
        }],
    }});
    reports_api(evil)
        .patch("evil", &PatchParams::default(), &Patch::Merge(report))
        .await
        .unwrap();

    let printed = tether_fleet(hub.kubeconfig(), &["status"]);
    assert_eq!(printed.status.code(), Some(1), "{}", text(&printed));
    let out = String::from_utf8(printed.stdout).unwrap();
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(
        out.contains(&format!("  {url}ns/git://127.0.0.1:{port}/repo  blocked")),
        "{out}"
    );
    assert!(out.contains(&format!("waiting on: {url}blocked")), "{out}");
    assert!(
        !out.contains("\nfake: line"),
        "a message cannot make a line: {out}"
    );

    let (view, _) = status_json(&hub, &[]);
    let source = &cluster_of(&view, "evil").unwrap()["sources"][0];
    assert_eq!(source["name"], format!("git://127.0.0.1:{port}/repo"));
    assert!(
        source["message"].as_str().unwrap().contains('\u{1b}'),
        "JSON keeps the data as it is: {source}"
    );
    assert!(view.to_string().find("\"server\"").is_none(), "{view}");

    // Nothing followed an address: give a stray connection time to land, then count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 0);
}
