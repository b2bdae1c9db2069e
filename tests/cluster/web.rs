//! The daemon's web API against the control plane and a `git daemon` remote, as its
//! users meet it: ServiceAccount tokens from the TokenRequest API bound to the Roles
//! `deploy/` ships, Kubernetes deciding who sees and does what, each Git action one
//! commit on the remote (read back with the `git` CLI) that the cluster then follows,
//! and the live stream saying so.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

use tether_admin::install::manifests::{InstallOptions, PEOPLE_ROLES, manifests};

use crate::daemon::{Daemon, Remote, install_crd, kubectl_apply_text, kubectl_ok, source_yaml};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, setup};

/// The models of the tests: the ConfigMap `settings`, the Deployment slice `web`, and
/// with `host`, the simulated node (one test of the run may own it: a Node is the
/// cluster's, and only one inventory may apply it).
pub fn models(ns: &str, replicas: u32, value: &str, host: bool) -> Vec<(String, String)> {
    let mut files = vec![
        ("base.yaml".into(), base(ns)),
        ("cm.yaml".into(), config_map("settings", ns, value)),
        (
            "web.yaml".into(),
            format!(
                "kind: Image\nname: nginx\ntag: \"1.25\"\n---\n# The front end.\nkind: Slice\nname: web\ntrust_domain: {ns}\ncontroller_kind: Deployment\ncontroller_replica_count: {replicas}   # keep it small\ndefault_image: nginx\n"
            ),
        ),
    ];
    if host {
        let node = format!(
            "kind: Node\nname: tether-sim-1\nlabels:\n  web-test.example.com/{ns}: \"one\"\n"
        );
        files.push(("hosts.yaml".into(), node));
    }
    files
}

fn as_files(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect()
}

/// A token of the ServiceAccount `name` of `ns` (made if needed), bound in `ns` to
/// each of `roles` (ClusterRoles of deploy/).
pub async fn user(client: &kube::Client, ns: &str, name: &str, roles: &[&str]) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some(name.into());
    let _ = accounts.create(&PostParams::default(), &account).await;
    for role in roles {
        kubectl_ok(&[
            "create",
            "rolebinding",
            &format!("{name}-{role}"),
            "-n",
            ns,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:{name}"),
        ]);
    }
    let user = format!("system:serviceaccount:{ns}:{name}");
    if roles
        .iter()
        .any(|r| *r == "tether-viewer" || *r == "tether-operator")
    {
        wait_until_allowed(&user, "get", "sources.tether.dev", ns);
    }
    if roles.contains(&"tether-operator") {
        wait_until_allowed(&user, "scale", "sources.tether.dev", ns);
    }
    if roles.contains(&"tether-host-admin") {
        wait_until_allowed(&user, "label", "sources.tether.dev", ns);
    }
    let request = TokenRequest {
        spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    token.status.unwrap().token
}

pub fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The session's CSRF token for `token`.
pub fn csrf(daemon: &Daemon, token: &str) -> String {
    let (status, body) = http_get(daemon, "/api/v1/session", Some(token));
    assert_eq!(status, 200, "{body}");
    json(&body)["csrfToken"].as_str().unwrap().to_string()
}

pub fn http_get(daemon: &Daemon, path: &str, token: Option<&str>) -> (u16, String) {
    let headers: Vec<_> = token.map(bearer).into_iter().collect();
    crate::daemon::http(daemon.port, "GET", path, &headers, b"")
}

/// A JSON POST as `token`, with `csrf` when given.
pub fn http_post(
    daemon: &Daemon,
    path: &str,
    token: &str,
    csrf: Option<&str>,
    body: &Value,
) -> (u16, String) {
    let mut headers = vec![
        bearer(token),
        ("Content-Type", "application/json".to_string()),
    ];
    if let Some(csrf) = csrf {
        headers.push(("X-CSRF-Token", csrf.to_string()));
    }
    crate::daemon::http(
        daemon.port,
        "POST",
        path,
        &headers,
        body.to_string().as_bytes(),
    )
}

/// The ClusterRoles the page's users are bound to, as `tether install` (and deploy/)
/// ships them.
pub fn install_roles() {
    let shipped = manifests(&InstallOptions::new());
    let roles: Vec<&Value> = shipped
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .filter(|o| PEOPLE_ROLES.contains(&o["metadata"]["name"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(roles.len(), PEOPLE_ROLES.len());
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": roles});
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), list.to_string()).unwrap();
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        file.path().to_str().unwrap(),
    ]);
}

/// RBAC learns of a new binding from a watch, and the daemon remembers its answers
/// for a while: waits until the API server says `user` may `verb` sources in `ns`.
pub fn wait_until_allowed(user: &str, verb: &str, resource: &str, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // `can-i` exits 1 for "no": asked again until "yes".
        let answer = crate::discover::kubectl_command()
            .args(["auth", "can-i", verb, resource, "-n", ns, "--as", user])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&answer.stdout).trim() == "yes" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user} never allowed to {verb} {resource} in {ns}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A namespace with a daemon of its Sources and the Source `web` applied from a
/// remote holding [`models`].
pub struct Site {
    pub client: kube::Client,
    pub ns: String,
    pub remote: Remote,
    pub daemon: Daemon,
}

pub async fn site(test: &str, host: bool) -> Site {
    site_with(test, host, "").await
}

/// [`site`] with `extra` (indented lines) in the Source's spec.
pub async fn site_with(test: &str, host: bool, extra: &str) -> Site {
    install_crd();
    install_roles();
    let (client, ns, _) = setup(test).await;
    let files = models(&ns, 1, "v1", host);
    let remote = Remote::new(&as_files(&files));
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    let spec = format!("  prune: true\n{extra}");
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, &spec));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    eventually(Duration::from_secs(60), || async {
        deployments.get_opt("web").await.ok().flatten().is_some()
    })
    .await;
    Site {
        client,
        ns,
        remote,
        daemon,
    }
}

/// The remote's main as `git log --format=FORMAT` says it, newest first.
pub fn log(remote: &Remote, format: &str) -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["log", &format!("--format={format}"), "main"])
        .current_dir(remote.bare())
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

async fn replicas(client: &kube::Client, ns: &str) -> i32 {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .unwrap();
    deployment.spec.unwrap().replicas.unwrap_or(1)
}

/// Reads the live stream as `token` until an event's data satisfies `wanted`.
fn stream_until(
    daemon: &Daemon,
    token: &str,
    timeout: Duration,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let mut stream = TcpStream::connect(("127.0.0.1", daemon.port)).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    write!(
        stream,
        "GET /api/v1/stream HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let deadline = Instant::now() + timeout;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while Instant::now() < deadline {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(data) = line.trim_end().strip_prefix("data: ")
            && let Ok(value) = serde_json::from_str::<Value>(data)
            && wanted(&value)
        {
            return value;
        }
    }
    panic!("no such event on the stream within {timeout:?}");
}

#[tokio::test]
async fn kubernetes_decides_who_sees_and_does_what_and_each_action_is_one_commit() {
    let Site {
        client,
        ns,
        remote,
        daemon,
    } = site("web-api", true).await;
    let viewer = user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let operator = user(&client, &ns, "operator", &["tether-operator"]).await;
    let hosts = user(&client, &ns, "hosts", &["tether-host-admin"]).await;
    // An operator of another namespace sees nothing of this one.
    let (_, elsewhere, _) = setup("web-api-other").await;
    let outsider = user(&client, &elsewhere, "outsider", &["tether-operator"]).await;

    // No token: 401; a token Kubernetes does not know: 401.
    assert_eq!(http_get(&daemon, "/api/v1/sources", None).0, 401);
    assert_eq!(
        http_get(&daemon, "/api/v1/sources", Some("not-a-token")).0,
        401
    );
    // The viewer sees the Source, ready at the remote's commit.
    let head = remote.head_of_bare("main");
    eventually(Duration::from_secs(30), || async {
        let (status, body) = http_get(&daemon, "/api/v1/sources", Some(&viewer));
        let sources = json(&body)["sources"].clone();
        status == 200
            && sources[0]["name"] == "web"
            && sources[0]["state"] == "ready"
            && sources[0]["applied"] == head.as_str()
            && sources[0]["wanted"] == head.as_str()
    })
    .await;
    let detail = json(&http_get(&daemon, &format!("/api/v1/sources/{ns}/web"), Some(&viewer)).1);
    let objects: Vec<String> = detail["models"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["objects"].as_array().unwrap().iter())
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["name"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        objects.contains(&"Deployment/web".to_string()),
        "{objects:?}"
    );
    // The last plan, as `tether diff -o markdown` says it, of the commit applied (the
    // pass that applied it, or a later one that found nothing to change).
    let report = detail["reportMarkdown"].as_str().unwrap();
    assert!(
        report.starts_with("### tether diff\n") && report.contains(&format!("@ {head}")),
        "{report}"
    );
    // The outsider: an empty list, 403 on the Source.
    let (status, body) = http_get(&daemon, "/api/v1/sources", Some(&outsider));
    assert_eq!(
        (status, json(&body)["sources"].as_array().unwrap().len()),
        (200, 0),
        "{body}"
    );
    assert_eq!(
        http_get(
            &daemon,
            &format!("/api/v1/sources/{ns}/web"),
            Some(&outsider)
        )
        .0,
        403
    );

    // Scale: refused without the CSRF token, for the viewer and the outsider; nothing
    // is committed.
    let commits = log(&remote, "%s|%an|%ae").len();
    let scale = format!("/api/v1/sources/{ns}/web/slices/web/scale");
    let to_three = serde_json::json!({"replicas": "3"});
    let (status, body) = http_post(&daemon, &scale, &operator, None, &to_three);
    assert_eq!(status, 403, "{body}");
    let (status, body) = http_post(&daemon, &scale, &operator, Some("forged"), &to_three);
    assert_eq!(status, 403, "{body}");
    let viewer_csrf = csrf(&daemon, &viewer);
    let (status, body) = http_post(&daemon, &scale, &viewer, Some(&viewer_csrf), &to_three);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("scale"),
        "the refusal says what was refused: {body}"
    );
    let outsider_csrf = csrf(&daemon, &outsider);
    assert_eq!(
        http_post(&daemon, &scale, &outsider, Some(&outsider_csrf), &to_three).0,
        403
    );
    // Another session's token is not this one's.
    assert_eq!(
        http_post(&daemon, &scale, &operator, Some(&viewer_csrf), &to_three).0,
        403
    );
    assert_eq!(
        log(&remote, "%s|%an|%ae").len(),
        commits,
        "a refused action commits nothing"
    );

    // The operator scales: one commit, authored as the ServiceAccount, and the
    // Deployment follows; the stream says the Source took the new commit.
    let operator_csrf = csrf(&daemon, &operator);
    let (status, body) = http_post(&daemon, &scale, &operator, Some(&operator_csrf), &to_three);
    assert_eq!(status, 200, "{body}");
    let answer = json(&body);
    assert_eq!(answer["summary"], "scale: Slice/web 1 → 3", "{body}");
    assert_eq!(answer["pushed"], true);
    let history = log(&remote, "%s|%an|%ae");
    assert_eq!(history.len(), commits + 1, "{history:?}");
    let operator_name = format!("system:serviceaccount:{ns}:operator");
    assert!(
        history[0].starts_with(&format!("scale: Slice/web 1 → 3|{operator_name}|")),
        "{history:?}"
    );
    let scaled = answer["commit"].as_str().unwrap().to_string();
    let event = stream_until(&daemon, &viewer, Duration::from_secs(30), |summary| {
        summary["applied"] == scaled.as_str()
    });
    assert_eq!(event["state"], "ready", "{event:#}");
    let detail = json(&http_get(&daemon, &format!("/api/v1/sources/{ns}/web"), Some(&viewer)).1);
    let report = detail["reportMarkdown"].as_str().unwrap();
    assert!(
        report.contains("replicas"),
        "the plan that applied the commit: {report}"
    );
    eventually(Duration::from_secs(30), || async {
        replicas(&client, &ns).await == 3
    })
    .await;
    // The model file kept its comments: one value changed.
    let text = std::process::Command::new("git")
        .args(["show", "main:models/web.yaml"])
        .current_dir(remote.bare())
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("controller_replica_count: 3   # keep it small"),
        "{text}"
    );

    // A host label through StarlingX's resource: one commit, and the node carries it.
    let labels = format!("/api/v1/sources/{ns}/web/hosts/tether-sim-1/labels");
    let key = format!("web-test.example.com/{ns}-zone");
    let (status, body) = http_post(
        &daemon,
        &labels,
        &operator,
        Some(&operator_csrf),
        &serde_json::json!({&key: "z2"}),
    );
    assert_eq!(status, 403, "the operator may not label hosts: {body}");
    let hosts_csrf = csrf(&daemon, &hosts);
    let (status, body) = http_post(
        &daemon,
        &labels,
        &hosts,
        Some(&hosts_csrf),
        &serde_json::json!({&key: "z2"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(log(&remote, "%s|%an|%ae").len(), commits + 2);
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(Duration::from_secs(30), || async {
        let node = nodes.get("tether-sim-1").await.unwrap();
        node.metadata
            .labels
            .unwrap_or_default()
            .get(&key)
            .map(String::as_str)
            == Some("z2")
    })
    .await;
    let (status, body) = http_get(&daemon, &labels, Some(&viewer));
    assert_eq!(status, 200, "{body}");
    let listed = json(&body)["labels"].clone();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["label_key"] == key.as_str() && l["label_value"] == "z2"),
        "{listed:#}"
    );
    // Removing it: one more commit, and the node loses it.
    let remove = format!("{labels}/{}", key.replace('/', "%2F"));
    let removed = crate::daemon::http(
        daemon.port,
        "DELETE",
        &remove,
        &[bearer(&hosts), ("X-CSRF-Token", hosts_csrf.clone())],
        b"",
    );
    assert_eq!(removed.0, 200, "{}", removed.1);
    assert_eq!(log(&remote, "%s|%an|%ae").len(), commits + 3);
    eventually(Duration::from_secs(30), || async {
        let node = nodes.get("tether-sim-1").await.unwrap();
        !node.metadata.labels.unwrap_or_default().contains_key(&key)
    })
    .await;
}

#[tokio::test]
async fn tether_ui_serves_one_source_on_loopback_as_its_user_and_commits_to_the_checkout() {
    let (client, ns, inventory) = setup("web-ui").await;
    let checkout = tempfile::tempdir().unwrap();
    let dir = checkout.path();
    for (name, text) in models(&ns, 1, "v1", false) {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let git = |args: &[&str]| crate::reconcile::git(dir, args);
    git(&["init", "-q"]);
    git(&["config", "user.name", "Ada Operator"]);
    git(&["config", "user.email", "ada@example.org"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "models"]);
    let ui = |listen: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tether"));
        command
            .args(["ui", dir.to_str().unwrap(), "--listen", listen])
            .args(["--inventory-name", &inventory, "--inventory-namespace", &ns])
            .arg("--kubeconfig")
            .arg(crate::harness::cluster().kubeconfig())
            .arg("--cache-dir")
            .arg(dir.join(".cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        command
    };
    // Anyone who reaches it acts as its user: it serves this machine only.
    let refused = ui("0.0.0.0:0").output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("serves only this machine"), "{said}");

    let port = crate::daemon::free_port();
    let mut serving = ui(&format!("127.0.0.1:{port}"));
    let _ui = crate::harness::Running(serving.stderr(std::process::Stdio::null()).spawn().unwrap());
    let get = |path: &str| crate::daemon::http(port, "GET", path, &[], b"");
    eventually(Duration::from_secs(60), || async {
        let (status, body) = get("/api/v1/sources");
        status == 200 && {
            let sources = json(&body)["sources"].clone();
            sources[0]["namespace"] == ns.as_str()
                && sources[0]["name"] == inventory.as_str()
                && sources[0]["state"] == "ready"
        }
    })
    .await;
    let (status, page) = get("/");
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!("data-source=\"{ns}/{inventory}\"")),
        "{page}"
    );
    // An action still needs the page's CSRF token; then it is a commit of the checkout,
    // by the checkout's own author, and the Deployment follows.
    let session = json(&get("/api/v1/session").1);
    let csrf = session["csrfToken"].as_str().unwrap();
    let scale = format!("/api/v1/sources/{ns}/{inventory}/slices/web/scale");
    let body = serde_json::json!({"replicas": "+1"}).to_string();
    let json_type = ("Content-Type", "application/json".to_string());
    let refused = crate::daemon::http(
        port,
        "POST",
        &scale,
        std::slice::from_ref(&json_type),
        body.as_bytes(),
    );
    assert_eq!(refused.0, 403, "{}", refused.1);
    let (status, answer) = crate::daemon::http(
        port,
        "POST",
        &scale,
        &[json_type, ("X-CSRF-Token", csrf.to_string())],
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let subjects = git(&["log", "--format=%s", "-2"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        ["scale: Slice/web 1 → 2", "models"]
    );
    eventually(Duration::from_secs(30), || async {
        replicas(&client, &ns).await == 2
    })
    .await;
}

#[tokio::test]
async fn a_replica_that_does_not_lead_says_so_instead_of_an_empty_list() {
    install_crd();
    install_roles();
    let (client, ns, _) = setup("web-follower").await;
    let viewer = user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let replicas = [
        crate::daemon::replica(&ns, &[]),
        crate::daemon::replica(&ns, &[]),
    ];
    let leads = |d: &Daemon| d.metric("tether_leader") == Some(1.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !replicas.iter().any(leads) {
        assert!(Instant::now() < deadline, "no replica leads");
        std::thread::sleep(Duration::from_millis(100));
    }
    for daemon in &replicas {
        let (status, body) = http_get(daemon, "/api/v1/sources", Some(&viewer));
        match leads(daemon) {
            true => assert_eq!(status, 200, "{body}"),
            false => {
                assert_eq!(status, 503, "{body}");
                assert!(body.contains("this replica does not lead"), "{body}");
            }
        }
    }
}

#[tokio::test]
async fn a_source_that_proposes_actions_gets_a_branch_per_action_and_main_stays() {
    let Site {
        client,
        ns,
        remote,
        daemon,
    } = site_with("web-propose", false, "  proposeActions: true\n").await;
    let operator = user(&client, &ns, "operator", &["tether-operator"]).await;
    let main = remote.head_of_bare("main");
    let scale = format!("/api/v1/sources/{ns}/web/slices/web/scale");
    let csrf = csrf(&daemon, &operator);
    let (status, body) = http_post(
        &daemon,
        &scale,
        &operator,
        Some(&csrf),
        &serde_json::json!({"replicas": "2"}),
    );
    assert_eq!(status, 200, "{body}");
    let answer = json(&body);
    assert_eq!(answer["proposed"], true, "{body}");
    let branch = answer["branch"].as_str().unwrap();
    assert!(branch.starts_with("tether/web/scale-web-"), "{body}");
    // The proposal is on its own branch, authored as the operator; main and the
    // cluster stay as they were until it is merged.
    let proposal = std::process::Command::new("git")
        .args(["log", "--format=%s|%an", "-1", branch])
        .current_dir(remote.bare())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(proposal.stdout).unwrap().trim(),
        format!("scale: Slice/web 1 → 2|system:serviceaccount:{ns}:operator")
    );
    assert_eq!(remote.head_of_bare("main"), main);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(replicas(&client, &ns).await, 1);
}

#[tokio::test]
async fn recreate_from_the_api_acts_on_a_pod_kubectl_made_only_for_whom_rbac_lets_delete_it() {
    let Site {
        client,
        ns,
        daemon,
        remote: _remote,
    } = site("web-recreate", false).await;
    // Another team's Deployment, made with kubectl: its pod is the cluster's, not the
    // Source's; recreating it is RBAC's call.
    kubectl_ok(&[
        "create",
        "deployment",
        "reports",
        "--image=nginx:1.25",
        "-n",
        &ns,
    ]);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let selector = kube::api::ListParams::default().labels("app=reports");
    let running = |p: &k8s_openapi::api::core::v1::Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    };
    eventually(Duration::from_secs(60), || async {
        pods.list(&selector)
            .await
            .unwrap()
            .items
            .iter()
            .any(running)
    })
    .await;
    let pod = pods
        .list(&selector)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(running)
        .unwrap();
    let (name, uid) = (pod.metadata.name.unwrap(), pod.metadata.uid.unwrap());
    let viewer = user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let operator = user(&client, &ns, "operator", &["tether-operator"]).await;
    let recreate = format!("/api/v1/sources/{ns}/web/pods/{ns}/{name}/recreate");
    let recreate_as = |token: &str| {
        let csrf = csrf(&daemon, token);
        http_post(
            &daemon,
            &recreate,
            token,
            Some(&csrf),
            &serde_json::json!({}),
        )
    };
    let (status, body) = recreate_as(&viewer);
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        pods.get(&name).await.unwrap().metadata.uid.unwrap(),
        uid,
        "nothing deleted"
    );
    let (status, body) = recreate_as(&operator);
    assert_eq!(status, 200, "{body}");
    assert!(
        json(&body)["summary"]
            .as_str()
            .unwrap()
            .contains("recreated as"),
        "{body}"
    );
    // The old pod goes (its kubelet ends it), and its Deployment's new one runs.
    eventually(Duration::from_secs(60), || async {
        pods.get_opt(&name).await.unwrap().is_none()
            && pods
                .list(&selector)
                .await
                .unwrap()
                .items
                .iter()
                .any(running)
    })
    .await;
}

#[tokio::test]
async fn any_replica_of_a_shard_shows_every_source_and_acts_through_the_one_that_runs_it() {
    install_crd();
    install_roles();
    let (client, ns, _) = setup("web-shard").await;
    let replica = |identity: &str| crate::daemon::sharded_replica(&ns, identity);
    let (a, b) = (replica("a"), replica("b"));
    // Two Sources, one run by each replica.
    let members = std::collections::BTreeSet::from(["a".to_string(), "b".to_string()]);
    let owner = |name: &str| {
        tether_daemon::shard::owner(&members, &format!("{ns}/{name}"))
            .unwrap()
            .to_string()
    };
    let names: Vec<String> = (0..)
        .map(|i| format!("s{i}"))
        .filter(|name| owner(name) == "a")
        .take(1)
        .chain(
            (0..)
                .map(|i| format!("s{i}"))
                .filter(|name| owner(name) == "b")
                .take(1),
        )
        .collect();
    let (on_a, on_b) = (&names[0], &names[1]);
    let files: Vec<(String, String)> = names
        .iter()
        .map(|name| {
            let domain = format!("{ns}-{name}");
            (
                format!("{name}/m.yaml"),
                format!("{}---\n{}", base(&domain), config_map("c", &domain, "v1")),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let remote = Remote::new(&borrowed);
    for name in &names {
        kubectl_apply_text(&format!(
            "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  url: {}\n  ref: main\n  path: models/{name}\n  interval: 1h\n",
            remote.url
        ));
    }
    eventually(Duration::from_secs(60), || async {
        names.iter().all(|name| {
            let status = crate::daemon::status(&ns, name);
            status["owner"] == owner(name) && status["lastAppliedRevision"].is_string()
        })
    })
    .await;

    let viewer = user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let operator = user(&client, &ns, "operator", &["tether-operator"]).await;
    let outsider = user(&client, &ns, "outsider", &[]).await;
    // Each replica lists both.
    for daemon in [&a, &b] {
        let (status, body) = http_get(daemon, "/api/v1/sources", Some(&viewer));
        assert_eq!(status, 200, "{body}");
        let listed: Vec<String> = json(&body)["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(names.iter().all(|n| listed.contains(n)), "{listed:?}");
        let (status, page) = http_get(daemon, "/", Some(&viewer));
        assert_eq!(status, 200);
        assert!(
            page.contains(on_a.as_str()) && page.contains(on_b.as_str()),
            "{page}"
        );
    }
    // Replica a answers for b's Source, as b does: the API, the page, an action.
    let (status, body) = http_get(&a, &format!("/api/v1/sources/{ns}/{on_b}"), Some(&viewer));
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["summary"]["name"], on_b.as_str(), "{body}");
    let (status, page) = http_get(&a, &format!("/sources/{ns}/{on_b}"), Some(&viewer));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(on_b.as_str()));
    let passes = format!("tether_reconciles_total{{source=\"{ns}/{on_b}\",result=\"success\"}}");
    let before = b.metric(&passes).unwrap_or(0.0);
    let token = csrf(&a, &operator);
    let reconcile = format!("/api/v1/sources/{ns}/{on_b}/reconcile");
    let (status, body) = http_post(
        &a,
        &reconcile,
        &operator,
        Some(&token),
        &serde_json::json!({}),
    );
    assert_eq!(status, 200, "{body}");
    eventually(Duration::from_secs(30), || async {
        b.metric(&passes).unwrap_or(0.0) > before
    })
    .await;
    // Each replica still decides by the requester's own rights, and says no more than
    // it would about a Source of its own.
    let (status, _) = http_get(&a, &format!("/api/v1/sources/{ns}/{on_b}"), Some(&outsider));
    assert_eq!(status, 403);
    let (status, _) = http_post(
        &a,
        &reconcile,
        &viewer,
        Some(&csrf(&a, &viewer)),
        &serde_json::json!({}),
    );
    assert_eq!(status, 403);
    let (status, _) = http_get(&a, &format!("/api/v1/sources/{ns}/nothing"), Some(&viewer));
    assert_eq!(status, 404);
}
