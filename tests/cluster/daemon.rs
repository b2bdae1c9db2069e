//! `tether run --sources`, the daemon, as an operator runs it: Sources declared as
//! custom resources, a real Git remote served by `git daemon` and pushed to with the
//! `git` CLI, webhooks over real HTTP, drift made with kubectl, replicas electing a
//! leader, and the API server's audit log counting every write.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::harness::{Running, cluster, eventually, repo_root};
use crate::operations::tether_plain;
use crate::reconcile::{base, config_map, live_config_map, setup};

pub use tether_testkit::remote::{GitDaemon, Remote, free_port, http};

pub const SECRET: &str = "the-webhook-secret-of-the-tests";

/// A `tether run` process with its HTTP port.
pub struct Daemon {
    pub process: Running,
    pub port: u16,
    _secret: tempfile::NamedTempFile,
}

impl Daemon {
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::start_with_env(args, &[])
    }

    /// A daemon with these environment variables besides the test's (the tools it runs).
    pub fn start_with_env(args: &[&str], envs: &[(&str, &std::path::Path)]) -> Daemon {
        // TETHER_TEST_DAEMON_LOG=debug shows what each daemon did.
        let level = std::env::var("TETHER_TEST_DAEMON_LOG").unwrap_or_else(|_| "warn".into());
        Daemon::spawn(args, "json", &level, Stdio::inherit(), envs)
    }

    /// A daemon of another control plane than the run's shared one.
    pub fn start_on(kubeconfig: &std::path::Path, args: &[&str]) -> Daemon {
        let level = std::env::var("TETHER_TEST_DAEMON_LOG").unwrap_or_else(|_| "warn".into());
        Daemon::spawn_on(kubeconfig, args, "json", &level, Stdio::inherit(), &[])
    }

    /// A daemon whose log, at `level`, goes to `log`.
    pub fn start_logging(args: &[&str], level: &str, log: Stdio) -> Daemon {
        Daemon::start_with_log(args, "json", level, log)
    }

    /// A daemon whose log, in `format` (json or text) at `level`, goes to `log`.
    pub fn start_with_log(args: &[&str], format: &str, level: &str, log: Stdio) -> Daemon {
        Daemon::spawn(args, format, level, log, &[])
    }

    fn spawn(
        args: &[&str],
        format: &str,
        level: &str,
        log: Stdio,
        envs: &[(&str, &std::path::Path)],
    ) -> Daemon {
        Daemon::spawn_on(cluster().kubeconfig(), args, format, level, log, envs)
    }

    fn spawn_on(
        kubeconfig: &std::path::Path,
        args: &[&str],
        format: &str,
        level: &str,
        log: Stdio,
        envs: &[(&str, &std::path::Path)],
    ) -> Daemon {
        let port = free_port();
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), format!("{SECRET}\n")).unwrap();
        let cache = tempfile::tempdir().unwrap().keep();
        let child = Command::new(crate::harness::tether_binary())
            .args(["run", "--log-format", format, "--log-level", level])
            .args(args)
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg("--webhook-secret-file")
            .arg(secret.path())
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("TETHER_COLOR", "never")
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let daemon = Daemon {
            process: Running(child),
            port,
            _secret: secret,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while daemon.get("/readyz").0 != 200 {
            assert!(Instant::now() < deadline, "the daemon never got ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        daemon
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(self.port, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, String) {
        http(self.port, "POST", path, headers, body)
    }

    /// The value of one metric line (`name{labels}`), if present.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    }

    /// Sends SIGTERM; returns the exit code and how long it took.
    pub fn terminate(&mut self) -> (Option<i32>, Duration) {
        let started = Instant::now();
        signal(&self.process, "TERM");
        let deadline = started + Duration::from_secs(40);
        loop {
            if let Some(status) = self.process.0.try_wait().unwrap() {
                return (status.code(), started.elapsed());
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn signal(process: &Running, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &process.0.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// The generic webhook of a push to `reference` of `url`, signed with `secret`.
pub fn push_hook(
    url: &str,
    reference: &str,
    secret: &str,
) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let body = serde_json::json!({"repository": url, "ref": reference})
        .to_string()
        .into_bytes();
    let signature = tether_api::webhook::sign(&body, secret.as_bytes());
    (
        vec![
            ("X-Signature-256", signature),
            ("Content-Type", "application/json".into()),
        ],
        body,
    )
}

/// kubectl (the control plane's own build); its output, success or not.
/// kubectl's standard output; it must succeed.
pub fn kubectl_ok(args: &[&str]) -> String {
    String::from_utf8(crate::discover::kubectl(args).stdout).unwrap()
}

pub fn kubectl_apply_text(yaml: &str) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    kubectl_ok(&["apply", "-f", file.path().to_str().unwrap()]);
}

/// The CRD of deploy/, applied and established.
pub fn install_crd() {
    let crd = repo_root().join("deploy/base/crd.yaml");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &crd.display().to_string(),
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/sources.tether.dev",
        "--timeout=30s",
    ]);
}

/// A replica named `identity` sharing the Sources of `ns` with the others (`--shard`,
/// its Lease in `ns`).
pub fn sharded_replica(ns: &str, identity: &str) -> Daemon {
    Daemon::start(&[
        "--sources",
        "--sources-namespace",
        ns,
        "--shard",
        "--identity",
        identity,
        "--lease-namespace",
        ns,
    ])
}

pub fn source_yaml(name: &str, namespace: &str, url: &str, extra: &str) -> String {
    format!(
        "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  url: {url}\n  ref: main\n  path: models\n{extra}"
    )
}

/// A Source's status as JSON.
pub fn status(namespace: &str, name: &str) -> serde_json::Value {
    let text = kubectl_ok(&["get", "source", name, "-n", namespace, "-o", "json"]);
    let source: serde_json::Value = serde_json::from_str(&text).unwrap();
    source["status"].clone()
}

/// The message of a Source status's condition `type_` ("" when it has none).
pub fn condition_message(status: &serde_json::Value, type_: &str) -> String {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

pub fn condition(status: &serde_json::Value, type_: &str) -> Option<(String, String)> {
    status["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == type_).then(|| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
    })
}

/// `kubectl patch` of the ConfigMap's value, as someone editing it by hand.
fn edit_by_hand(namespace: &str, value: &str) {
    let patch = serde_json::json!({"data": {"key": value}}).to_string();
    kubectl_ok(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        namespace,
        "-p",
        &patch,
    ]);
}

pub async fn value_of(client: &kube::Client, namespace: &str) -> Option<String> {
    live_config_map(client, namespace, "settings")
        .await
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove("key"))
}

/// Write requests the API server logged for `namespace` since `offset` (bytes of
/// the audit log), as "verb resource name (request URI)".
pub fn writes_since(offset: u64, namespace: &str) -> Vec<String> {
    audited_since(offset, |entry| {
        entry["verb"] != "list" && entry["objectRef"]["namespace"] == namespace
    })
}

/// The LIST requests for objects labelled for `inventory` since `offset`.
pub fn lists_since(offset: u64, inventory: &tether_core::ownership::Inventory) -> Vec<String> {
    let selector = format!("part-of%3D{}", inventory.applyset_id());
    audited_since(offset, |entry| {
        entry["verb"] == "list"
            && entry["requestURI"]
                .as_str()
                .is_some_and(|uri| uri.contains(&selector))
    })
}

fn audited_since(offset: u64, wanted: impl Fn(&serde_json::Value) -> bool) -> Vec<String> {
    audit_entries_since(offset)
        .into_iter()
        .filter(|entry| wanted(entry))
        .map(|entry| {
            format!(
                "{} {} {} ({})",
                entry["verb"].as_str().unwrap_or_default(),
                entry["objectRef"]["resource"].as_str().unwrap_or_default(),
                entry["objectRef"]["name"].as_str().unwrap_or_default(),
                entry["requestURI"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The API server's audit entries (one per request) since `offset` (bytes of the log).
pub fn audit_entries_since(offset: u64) -> Vec<serde_json::Value> {
    let log = cluster().state_dir().join("logs/audit.log");
    tether_testkit::audit::entries_since(&log, offset)
        .into_iter()
        .map(|entry| entry.0)
        .collect()
}

pub fn audit_offset() -> u64 {
    std::fs::metadata(cluster().state_dir().join("logs/audit.log"))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// A replica of the daemon for the Sources of `ns`, electing its leader on a Lease
/// there.
pub fn replica(ns: &str, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--sources",
        "--sources-namespace",
        ns,
        "--leader-elect",
        "--lease-namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

/// What most tests start from: a namespace, a remote whose models hold the ConfigMap
/// `settings` at v1, a daemon running the namespace's Sources, and the Source `web`
/// (its spec ends with `extra`) applied.
pub struct Fixture {
    pub client: kube::Client,
    pub ns: String,
    pub remote: Remote,
    pub daemon: Daemon,
}

/// Applies the Source `web` of `url` and waits until its ConfigMap is at v1.
async fn apply_web_source(client: &kube::Client, ns: &str, url: &str, extra: &str) {
    kubectl_apply_text(&source_yaml("web", ns, url, extra));
    eventually(Duration::from_secs(30), || async {
        value_of(client, ns).await.as_deref() == Some("v1")
    })
    .await;
}

pub async fn web_source_at_v1(test: &str, extra: &str) -> Fixture {
    install_crd();
    let (client, ns, _) = setup(test).await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    apply_web_source(&client, &ns, &remote.url, extra).await;
    Fixture {
        client,
        ns,
        remote,
        daemon,
    }
}

#[tokio::test]
async fn a_source_follows_pushes_webhooks_and_requests_and_says_so_in_its_status() {
    // Applied at once, and the status says which revision.
    let Fixture {
        client,
        ns,
        remote,
        mut daemon,
    } = web_source_at_v1("daemon-source", "  interval: 1h\n").await;
    let first = format!("main@sha1:{}", remote.head("main"));
    eventually(Duration::from_secs(10), || async {
        status(&ns, "web")["lastAppliedRevision"] == first.as_str()
    })
    .await;
    let now = status(&ns, "web");
    assert_eq!(
        condition(&now, "Ready"),
        Some(("True".into(), "ReconciliationSucceeded".into()))
    );
    assert_eq!(now["lastAttemptedRevision"], first.as_str());
    // The ConfigMap is created; the namespace (made by the test) is adopted.
    assert_eq!(now["lastPlan"]["created"], 1, "{now}");
    assert_eq!(now["lastPlan"]["configured"], 1, "{now}");
    assert!(now["lastSuccessTime"].is_string());
    let table = kubectl_ok(&["get", "sources", "-n", &ns]);
    assert!(
        table.contains("READY") && table.contains("REVISION"),
        "{table}"
    );
    assert!(table.contains("True") && table.contains(&first), "{table}");

    // A push, announced by a webhook, is applied within seconds (the interval is an hour).
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    let pushed = Instant::now();
    let (code, answer) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202, "{answer}");
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    let took = pushed.elapsed();
    eprintln!("push to applied: {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "applied {took:?} after the webhook"
    );

    // GitHub's and GitLab's own webhooks of a push, each properly signed, are taken;
    // a burst of them for one push makes one fetch.
    let fetches = format!("tether_git_fetch_duration_seconds_count{{source=\"{ns}/web\"}}");
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2b"))]);
    let fetched = daemon.metric(&fetches).unwrap_or(0.0);
    let github = serde_json::json!({
        "ref": "refs/heads/main",
        "repository": {"clone_url": remote.url, "default_branch": "main"}
    })
    .to_string();
    let gitlab = serde_json::json!({
        "ref": "refs/heads/main",
        "project": {"git_http_url": remote.url}
    })
    .to_string();
    for _ in 0..5 {
        let signed = vec![
            ("X-GitHub-Event", "push".to_string()),
            (
                "X-Hub-Signature-256",
                tether_api::webhook::sign(github.as_bytes(), SECRET.as_bytes()),
            ),
        ];
        let (code, answer) = daemon.post("/hook/github", &signed, github.as_bytes());
        assert_eq!(code, 202, "{answer}");
        let token = vec![
            ("X-Gitlab-Event", "Push Hook".to_string()),
            ("X-Gitlab-Token", SECRET.to_string()),
        ];
        let (code, answer) = daemon.post("/hook/gitlab", &token, gitlab.as_bytes());
        assert_eq!(code, 202, "{answer}");
    }
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2b")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        daemon.metric(&fetches).unwrap_or(0.0) - fetched,
        1.0,
        "ten webhooks of one push fetched more than once"
    );

    // A push to another branch changes nothing.
    remote.push("other", &[("cm.yaml", &config_map("settings", &ns, "v3"))]);
    let (headers, body) = push_hook(&remote.url, "refs/heads/other", SECRET);
    let (code, answer) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("no source follows"), "{answer}");

    // Requests that do not prove the secret, or are too large, reach neither Git nor
    // the cluster.
    let connections = remote.connections();
    let offset = audit_offset();
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", "a-wrong-secret-for-sure");
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 401);
    assert_eq!(daemon.post("/hook/generic", &[], &body).0, 401);
    let github = [
        ("X-GitHub-Event", "push".to_string()),
        ("X-Hub-Signature-256", "sha256=00".into()),
    ];
    assert_eq!(daemon.post("/hook/github", &github, &body).0, 401);
    assert_eq!(
        daemon
            .post(
                "/hook/gitlab",
                &[("X-Gitlab-Token", "nope".to_string())],
                &body
            )
            .0,
        401
    );
    let huge = vec![b'x'; 2 * 1024 * 1024];
    let (headers, _) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &huge).0, 413);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        remote.connections(),
        connections,
        "a refused webhook made a Git request"
    );
    assert_eq!(
        writes_since(offset, &ns),
        Vec::<String>::new(),
        "a refused webhook wrote"
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2b"));

    // A requested reconcile is handled and echoed.
    let reconcile = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "reconcile",
            "web",
            "-n",
            &ns,
            "--timeout",
            "30s",
            "--kubeconfig",
        ])
        .arg(cluster().kubeconfig())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&reconcile.stdout);
    assert_eq!(
        reconcile.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&reconcile.stderr)
    );
    assert!(said.contains("is ready at main@sha1:"), "{said}");

    // A broken commit stalls, keeping the applied revision; the next good one wins.
    let bad = remote.push(
        "main",
        &[(
            "cm.yaml",
            "kind: KubernetesConfigMap\nname: settings\ntrust_domain: nowhere\n",
        )],
    );
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(15), || async {
        status(&ns, "web")["lastAttemptedRevision"] == format!("main@sha1:{bad}").as_str()
    })
    .await;
    let stalled = status(&ns, "web");
    assert_eq!(
        condition(&stalled, "Ready").map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(
        condition(&stalled, "Stalled"),
        Some(("True".into(), "InvalidModels".into()))
    );
    assert_ne!(
        stalled["lastAppliedRevision"],
        stalled["lastAttemptedRevision"]
    );
    let good = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v4"))]);
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(15), || async {
        status(&ns, "web")["lastAppliedRevision"] == format!("main@sha1:{good}").as_str()
    })
    .await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v4"));
    assert_eq!(condition(&status(&ns, "web"), "Stalled"), None);

    // Operations.
    let series = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"success\"}}");
    assert!(
        daemon.metric(&series).unwrap_or(0.0) >= 3.0,
        "{}",
        daemon.get("/metrics").1
    );
    assert!(
        daemon
            .metric("tether_webhook_requests_total{provider=\"generic\",outcome=\"unauthorized\"}")
            >= Some(2.0)
    );
    assert_eq!(daemon.get("/healthz").0, 200);
    let (code, took) = daemon.terminate();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(25), "stopped in {took:?}");
}

#[tokio::test]
async fn drift_is_corrected_within_seconds_with_an_event_and_a_fighting_writer_is_backed_off() {
    let Fixture {
        client,
        ns,
        remote: _remote,
        daemon,
    } = web_source_at_v1("daemon-drift", "  interval: 1h\n").await;

    edit_by_hand(&ns, "drifted");
    let changed = Instant::now();
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    let took = changed.elapsed();
    eprintln!("drift corrected after {took:?}");
    assert!(took < Duration::from_secs(5), "corrected after {took:?}");
    eventually(Duration::from_secs(10), || async {
        let events = kubectl_ok(&["get", "events", "-n", &ns, "-o", "json"]);
        events.contains("DriftCorrected") && events.contains("kubectl-patch")
    })
    .await;

    // A writer that fights for 14 s: without backoff, some 50 corrections.
    let fighting = Instant::now();
    let mut writes = 0;
    while fighting.elapsed() < Duration::from_secs(14) {
        edit_by_hand(&ns, &format!("fight-{writes}"));
        writes += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let corrected = corrections(&ns, "web", &daemon);
    eprintln!("{writes} fighting writes, {corrected} corrections");
    // 1 before the fight; then at most at 0, 2, 8 s (and 26 s is beyond the fight).
    assert!(
        (2.0..=5.0).contains(&corrected),
        "{corrected} corrections against {writes} writes"
    );
    // The fight ended: the next correction comes when its backoff allows.
    eventually(Duration::from_secs(60), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
}

#[tokio::test]
async fn a_source_that_reports_drift_leaves_it_and_says_so() {
    let Fixture {
        client,
        ns,
        remote,
        daemon,
    } = web_source_at_v1("daemon-report", "  interval: 1h\n  drift: Report\n").await;
    edit_by_hand(&ns, "by-hand");
    eventually(Duration::from_secs(10), || async {
        let events = kubectl_ok(&["get", "events", "-n", &ns, "-o", "json"]);
        events.contains("DriftDetected") && events.contains("kubectl-patch")
    })
    .await;
    let reported = format!("tether_drift_total{{source=\"{ns}/web\",action=\"reported\"}}");
    assert!(daemon.metric(&reported) >= Some(1.0));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("by-hand"));
    // A new commit is still applied, and takes the field back.
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
}

#[tokio::test]
async fn a_failing_source_does_not_hold_up_another() {
    install_crd();
    let (client, ns, _) = setup("daemon-independent").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    // A repository that is not there (retried with backoff), and one that is.
    kubectl_apply_text(&source_yaml(
        "gone",
        &ns,
        "git://127.0.0.1:9/nothing.git",
        "  interval: 1s\n",
    ));
    apply_web_source(&client, &ns, &remote.url, "  interval: 1h\n").await;
    eventually(Duration::from_secs(15), || async {
        condition(&status(&ns, "gone"), "Ready").is_some_and(|c| c.0 == "False")
    })
    .await;
    let gone = status(&ns, "gone");
    assert_eq!(
        condition(&gone, "Reconciling").map(|c| c.1),
        Some("RetryingAfterFailure".into()),
        "{gone}"
    );
    assert_eq!(
        condition(&status(&ns, "web"), "Ready").map(|c| c.0),
        Some("True".into())
    );
}

/// Another declarative applier (Helm, under its own field manager) takes the value of
/// the ConfigMap `settings` that the Source `web` applies; the Source stalls on the
/// conflict.
pub async fn helm_takes_the_value(ns: &str) {
    let theirs = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  key: helm-value\n"
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), theirs).unwrap();
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=helm",
        "-f",
        file.path().to_str().unwrap(),
    ]);
    eventually(Duration::from_secs(15), || async {
        condition(&status(ns, "web"), "Stalled").is_some_and(|c| c.1 == "ObjectsRefused")
    })
    .await;
}

#[tokio::test]
async fn a_field_another_applier_took_is_a_conflict_not_drift() {
    // Helm 4 and Argo CD apply server-side under their own manager: what they set is a
    // decision, not drift, and the daemon does not take it back.
    let Fixture {
        client,
        ns,
        remote: _remote,
        daemon: _daemon,
    } = web_source_at_v1("daemon-applier", "  interval: 1h\n").await;
    helm_takes_the_value(&ns).await;
    let stalled = status(&ns, "web");
    let ready = stalled["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert!(
        ready["message"].as_str().unwrap().contains("helm"),
        "{stalled}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("helm-value"));
}

#[tokio::test]
async fn a_pruning_source_deletes_its_removed_model_and_nothing_another_team_made() {
    install_crd();
    let (client, ns, _) = setup("daemon-prune").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
        ("old.yaml", &config_map("old", &ns, "v1")),
    ]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    apply_web_source(&client, &ns, &remote.url, "  interval: 1h\n  prune: true\n").await;
    // Another team's ConfigMap, made with kubectl beside ours.
    kubectl_ok(&[
        "-n",
        &ns,
        "create",
        "configmap",
        "theirs",
        "--from-literal=a=b",
    ]);
    remote.remove("main", "old.yaml");
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(15), || async {
        live_config_map(&client, &ns, "old").await.is_none()
    })
    .await;
    assert!(live_config_map(&client, &ns, "theirs").await.is_some());
    assert!(live_config_map(&client, &ns, "settings").await.is_some());
    eventually(Duration::from_secs(10), || async {
        status(&ns, "web")["lastPlan"]["pruned"] == 1
    })
    .await;
}

fn corrections(ns: &str, name: &str, daemon: &Daemon) -> f64 {
    daemon
        .metric(&format!(
            "tether_drift_total{{source=\"{ns}/{name}\",action=\"corrected\"}}"
        ))
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_pass_over_an_unchanged_source_fetches_nothing_and_writes_nothing() {
    let Fixture {
        ns,
        remote: _remote,
        daemon,
        ..
    } = web_source_at_v1("daemon-quiet", "  interval: 1s\n").await;
    let series = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"success\"}}");
    let fetches = format!("tether_git_fetch_duration_seconds_count{{source=\"{ns}/web\"}}");
    eventually(Duration::from_secs(10), || async {
        daemon.metric(&series) >= Some(2.0)
    })
    .await;
    let passes = daemon.metric(&series).unwrap_or(0.0);
    let fetched = daemon.metric(&fetches);
    let offset = audit_offset();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let quiet_passes = daemon.metric(&series).unwrap_or(0.0) - passes;
    assert!(
        quiet_passes >= 3.0,
        "only {quiet_passes} passes in 6 s at a 1 s interval"
    );
    assert_eq!(
        daemon.metric(&fetches),
        fetched,
        "an unmoved ref was fetched"
    );
    let inventory = tether_core::ownership::Inventory {
        name: "web".into(),
        namespace: ns.clone(),
    };
    assert!(
        !lists_since(0, &inventory).is_empty(),
        "the first pass lists: the audit log must show it"
    );
    assert_eq!(
        lists_since(offset, &inventory),
        Vec::<String>::new(),
        "quiet passes listed instead of reading the watch cache"
    );
    assert_eq!(
        writes_since(offset, &ns),
        Vec::<String>::new(),
        "{quiet_passes} quiet passes wrote"
    );
}

#[tokio::test]
async fn a_source_with_discovery_commits_the_pods_others_made_and_publishes_their_events() {
    install_crd();
    let (client, ns, _) = setup("daemon-discovery").await;
    let settings = format!("discover:\n  namespaces: [{ns}]\nevents:\n  kube_events: true\n");
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
        (".tether.yaml", &settings),
    ]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.file_url(),
        "  interval: 1h\n  discovery: {}\n",
    ));
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;

    // Another team's pod, made with kubectl: committed to the Source's branch, and its
    // creation published as a Kubernetes Event.
    kubectl_ok(&["-n", &ns, "run", "solo", "--image=busybox:1.36"]);
    let pod_file = format!("models/discovered/{ns}/pods/solo.yaml");
    eventually(Duration::from_secs(30), || async {
        remote.files_of_bare("main", &pod_file) == 1
    })
    .await;
    eventually(Duration::from_secs(30), || async {
        let events = kubectl_ok(&["get", "events", "-n", &ns, "-o", "json"]);
        events.contains("PodCreated") && events.contains("solo")
    })
    .await;
    // The discovered models are models of the Source: its next pass reads them and
    // applies nothing for them (tether never manages what it discovered).
    let (headers, body) = push_hook(&remote.file_url(), "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    let applied = format!("main@sha1:{}", remote.head_of_bare("main"));
    eventually(Duration::from_secs(15), || async {
        status(&ns, "web")["lastAppliedRevision"] == applied.as_str()
    })
    .await;
    assert_eq!(
        condition(&status(&ns, "web"), "Ready").map(|c| c.0),
        Some("True".into())
    );
}

/// At least once survives the process: events recorded in a Source's outbox while
/// its sink was broken, then the daemon killed (SIGKILL, nothing flushed), are
/// delivered by a new process on the same state directory, as a replica's volume
/// gives its next pod.
#[tokio::test]
async fn events_a_killed_daemon_recorded_are_delivered_by_the_next_process_on_its_state() {
    install_crd();
    let (_client, ns, _) = setup("daemon-outbox").await;
    let sink = tempfile::tempdir().unwrap();
    let jsonl = sink.path().join("events.jsonl");
    // The sink is broken: its file's place is taken by a directory.
    std::fs::create_dir(&jsonl).unwrap();
    let settings = format!(
        "discover:\n  namespaces: [{ns}]\nevents:\n  jsonl: {}\n",
        jsonl.display()
    );
    // Two KubernetesServices: the daemon is told which one its cluster is.
    let clusters = format!(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: KubernetesService\nname: elsewhere\n---\n\
         kind: TrustDomain\nname: {ns}\nowner: kubernetes\n"
    );
    let remote = Remote::new(&[("base.yaml", &clusters), (".tether.yaml", &settings)]);
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().display().to_string();
    let args = [
        "--sources",
        "--sources-namespace",
        &ns,
        "--state-dir",
        &state_dir,
        "--cluster-name",
        "kubernetes",
    ];
    let daemon = Daemon::start(&args);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.file_url(),
        "  interval: 1h\n  discovery: {}\n",
    ));
    kubectl_ok(&["-n", &ns, "run", "solo", "--image=busybox:1.36"]);
    let log = state
        .path()
        .join("outbox")
        .join(format!("{ns}-web"))
        .join("log.jsonl");
    eventually(Duration::from_secs(30), || async {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("\"name\":\"solo\""))
    })
    .await;
    drop(daemon); // SIGKILL
    assert!(
        jsonl.is_dir(),
        "nothing was delivered while the sink was broken"
    );

    std::fs::remove_dir(&jsonl).unwrap();
    let _daemon = Daemon::start(&args);
    eventually(Duration::from_secs(30), || async {
        std::fs::read_to_string(&jsonl).is_ok_and(|events| {
            events.lines().any(|line| {
                line.contains("\"name\":\"solo\"")
                    && line.contains("\"status\":\"created\"")
                    && line.contains("\"cluster\":\"kubernetes\"")
            })
        })
    })
    .await;
}

#[tokio::test]
async fn of_two_replicas_one_leads_and_the_other_takes_over_after_sigterm_and_sigkill() {
    install_crd();
    let (client, ns, _) = setup("daemon-leader").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let replica = || replica(&ns, &["--lease-duration", "4s"]);
    let leads = |d: &Daemon| d.metric("tether_leader") == Some(1.0);
    let mut a = replica();
    let mut b = replica();
    apply_web_source(&client, &ns, &remote.url, "  interval: 1h\n").await;
    eventually(Duration::from_secs(10), || async { leads(&a) || leads(&b) }).await;
    assert!(!(leads(&a) && leads(&b)), "two leaders");
    let (leader, follower) = if leads(&a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let series = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"success\"}}");
    assert_eq!(follower.metric(&series), None, "the follower reconciled");
    // A webhook that reaches the follower is passed on to the leader.
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v1b"))]);
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(follower.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1b")
    })
    .await;
    assert_eq!(follower.metric(&series), None, "the follower reconciled");

    // SIGTERM: the leader releases the Lease; the follower takes it within 3 s.
    let (code, stopping) = leader.terminate();
    assert_eq!(code, Some(0));
    let stopped = Instant::now();
    while !leads(follower) {
        assert!(stopped.elapsed() < Duration::from_secs(10), "no takeover");
        std::thread::sleep(Duration::from_millis(50));
    }
    // From the signal: the old leader's stop, then the new one's start.
    let takeover = stopping + stopped.elapsed();
    eprintln!("takeover after SIGTERM: {takeover:?} (the old leader stopped in {stopping:?})");
    assert!(
        takeover < Duration::from_secs(3),
        "took over after {takeover:?}"
    );
    // The new leader reconciles: a push arrives.
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(follower.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;

    // SIGKILL: the Lease expires (4 s) and a third replica takes it.
    let c = replica();
    signal(&follower.process, "KILL");
    let killed = Instant::now();
    while !leads(&c) {
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "no takeover after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let takeover = killed.elapsed();
    eprintln!("takeover after SIGKILL: {takeover:?}");
    assert!(
        takeover < Duration::from_secs(6),
        "took over after {takeover:?}"
    );
}

#[tokio::test]
async fn sigterm_in_the_middle_of_a_pass_exits_cleanly_and_the_next_leader_converges() {
    const OBJECTS: usize = 1000;
    install_crd();
    let (client, ns, _) = setup("daemon-sigterm").await;
    let mut models = base(&ns);
    for i in 0..OBJECTS {
        models.push_str(&format!(
            "---\n{}",
            config_map(&format!("c-{i}"), &ns, "v1")
        ));
    }
    let remote = Remote::new(&[("all.yaml", &models)]);
    let replica = || replica(&ns, &["--shutdown-timeout", "0s"]);
    let mut first = replica();
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, "  interval: 1h\n"));
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &ns);
    let is_ours = |c: &ConfigMap| {
        c.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("c-"))
    };
    // Stopped while its first pass applies, as soon as the first objects are there;
    // with no shutdown grace, the pass is cancelled where it is.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !configmaps
        .list(&Default::default())
        .await
        .is_ok_and(|l| l.items.iter().any(is_ours))
    {
        assert!(Instant::now() < deadline, "nothing applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, took) = first.terminate();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    let when_stopped = configmaps
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| is_ours(c))
        .count();
    eprintln!("stopped after {took:?} with {when_stopped} ConfigMaps applied");
    assert!(
        when_stopped > 0 && when_stopped < OBJECTS,
        "SIGTERM came outside the pass ({when_stopped} applied)"
    );

    let _next = replica();
    let head = format!("main@sha1:{}", remote.head("main"));
    eventually(Duration::from_secs(60), || async {
        status(&ns, "web")["lastAppliedRevision"] == head.as_str()
    })
    .await;
    let live = configmaps.list(&Default::default()).await.unwrap();
    let ours = live.items.iter().filter(|c| is_ours(c)).count();
    assert_eq!(ours, OBJECTS);
    // The inventory records every object, each once.
    let inventory = live_config_map(&client, &ns, "tether-inventory-web")
        .await
        .unwrap();
    let objects = inventory
        .data
        .unwrap_or_default()
        .get("objects")
        .cloned()
        .unwrap_or_default();
    let recorded = objects.lines().filter(|l| l.contains("ConfigMap")).count();
    assert_eq!(recorded, OBJECTS, "{objects}");
}

/// The handover from `tether apply` to a Source: refused as another inventory's
/// before, owned and updated by the Source after, with the objects another
/// inventory took left alone and the CLI's inventory no longer able to touch what
/// it gave.
#[tokio::test]
async fn what_tether_apply_applied_is_handed_over_to_a_source_that_then_updates_it() {
    install_crd();
    let (client, ns, _) = setup("daemon-handover").await;
    let checkout = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(checkout.path().join(name), text).unwrap();
    write("base.yaml", &base(&ns));
    write("cm.yaml", &config_map("settings", &ns, "v1"));
    write("taken.yaml", &config_map("taken", &ns, "v1"));
    let dir = checkout.path().display().to_string();
    let cli_inventory = [
        "--inventory-namespace",
        ns.as_str(),
        "--inventory-name",
        "tether",
    ];
    let applied = tether_plain(&[&["apply", dir.as_str()][..], &cli_inventory].concat());
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    // Another inventory takes one of them.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("base.yaml"), base(&ns)).unwrap();
    std::fs::write(
        other.path().join("taken.yaml"),
        config_map("taken", &ns, "v2"),
    )
    .unwrap();
    let other_dir = other.path().display().to_string();
    let taken = tether_plain(&[
        "apply",
        &other_dir,
        "--inventory-namespace",
        &ns,
        "--inventory-name",
        "other",
        "--dangerous-override-ownership",
        "--only",
        "KubernetesConfigMap/taken",
        "--skip-dependencies",
    ]);
    assert_eq!(
        taken.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );

    // The Source's repository holds the same models, with a new value.
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v2")),
    ]);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    apply_web_source(&client, &ns, &remote.url, "  interval: 1h\n").await;
    eventually(Duration::from_secs(20), || async {
        condition(&status(&ns, "web"), "Ready").is_some_and(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        value_of(&client, &ns).await.as_deref(),
        Some("v1"),
        "refused before the handover"
    );

    let handover = || {
        tether_plain(&[
            "handover",
            "web",
            "-n",
            &ns,
            "--from-inventory-namespace",
            &ns,
        ])
    };
    let first = handover();
    let out = String::from_utf8_lossy(&first.stdout).into_owned();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        out.contains(&format!("ConfigMap {ns}/settings handed over")),
        "{out}"
    );
    assert!(
        out.contains(&format!("Namespace {ns} handed over")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ConfigMap {ns}/taken left: labelled as another inventory's"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "2 objects handed over from {ns}/tether to the Source {ns}/web"
        )),
        "{out}"
    );

    // The Source's next pass applies: no refusal, no conflict with the CLI's fields.
    let reconcile = tether_plain(&["reconcile", "web", "-n", &ns, "--timeout", "30s"]);
    assert_eq!(
        reconcile.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&reconcile.stdout)
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
    let settings = live_config_map(&client, &ns, "settings").await.unwrap();
    let managers: Vec<String> = settings
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.manager.clone())
        .collect();
    assert!(
        !managers.contains(&format!("tether:{ns}/tether")),
        "{managers:?}"
    );
    assert!(
        managers.contains(&format!("tether:{ns}/web")),
        "{managers:?}"
    );
    // The taken object is still the other inventory's, untouched.
    let taken = live_config_map(&client, &ns, "taken").await.unwrap();
    assert_eq!(taken.data.unwrap()["key"], "v2");

    // The CLI's inventory gave it away: applying it again is refused, not a fight.
    let again = tether_plain(&[&["apply", dir.as_str()][..], &cli_inventory].concat());
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains(&format!(
            "ConfigMap {ns}/settings: owned by the tether inventory {ns}/web"
        )),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
    // Run again, the handover finds nothing left to give.
    let rerun = handover();
    let rerun = String::from_utf8_lossy(&rerun.stdout).into_owned();
    assert!(rerun.contains("0 objects handed over"), "{rerun}");
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
}
