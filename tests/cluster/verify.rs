//! A Source that applies only signed commits (`spec.verify`), run by the daemon against
//! a real Git remote: commits signed by `git` with `ssh-keygen`'s keys, the trusted
//! ones in a Secret made with kubectl; an unsigned commit pushed while the daemon was
//! killed is never applied (the API server's audit log), and the Source says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::daemon::{
    Daemon, Remote, audit_offset, condition, condition_message, install_crd, kubectl_apply_text,
    kubectl_ok, signal, source_yaml, status, value_of, writes_since,
};
use crate::feedback::{TOKEN, feedback_of, states, statuses};
use crate::harness::eventually;
use crate::operations::tether_plain;
use crate::reconcile::{base, config_map, setup};
use tether_testkit::charts::{ChartSigner, serve};
use tether_testkit::githost::{GitHost, GitHostServer};
use tether_testkit::tools::helm_tools;

/// An SSH key made by ssh-keygen: its private key's path and fingerprint.
fn ssh_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", name])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(made.success());
    let listed = Command::new("ssh-keygen")
        .args(["-l", "-f", &format!("{name}.pub")])
        .current_dir(dir)
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    let fingerprint = listed.split_whitespace().nth(1).unwrap().to_string();
    (dir.join(name), fingerprint)
}

/// A key `dev` (ssh-keygen) that the Secret `trusted` of `ns` trusts, as an
/// allowed signer `dev@example.org`; a remote whose first commit (ConfigMap
/// `settings` at v1) nobody signed, and a second (v2) that `dev` signed. The key's
/// directory, the key, its fingerprint, the remote and the signed commit.
pub(crate) struct Signed {
    pub _keys: tempfile::TempDir,
    pub dev: PathBuf,
    pub fingerprint: String,
    pub remote: Remote,
    pub commit: String,
}

pub(crate) fn signed_remote(ns: &str) -> Signed {
    let keys = tempfile::tempdir().unwrap();
    let (dev, fingerprint) = ssh_key(keys.path(), "dev");
    let signers = keys.path().join("allowed_signers");
    let public = std::fs::read_to_string(dev.with_extension("pub")).unwrap();
    std::fs::write(&signers, format!("dev@example.org {public}")).unwrap();
    kubectl_ok(&[
        "-n",
        ns,
        "create",
        "secret",
        "generic",
        "trusted",
        &format!("--from-file=allowed_signers={}", signers.display()),
    ]);
    let remote = Remote::new(&[
        ("base.yaml", &base(ns)),
        ("cm.yaml", &config_map("settings", ns, "v1")),
    ]);
    let commit = remote.push_signed(
        "main",
        &[("cm.yaml", &config_map("settings", ns, "v2"))],
        &dev,
    );
    Signed {
        _keys: keys,
        dev,
        fingerprint,
        remote,
        commit,
    }
}

fn ready(ns: &str) -> Option<(String, String, String)> {
    let status = status(ns, "web");
    status["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == "Ready").then(|| {
            let text = |field: &str| c[field].as_str().unwrap_or_default().to_string();
            (text("status"), text("reason"), text("message"))
        })
    })
}

#[tokio::test]
async fn a_source_applies_only_commits_a_trusted_key_signed_through_a_kill_and_restart() {
    install_crd();
    let (client, ns, _) = setup("verify-source").await;
    let Signed {
        _keys,
        dev,
        fingerprint: dev_fingerprint,
        remote,
        commit: signed,
    } = signed_remote(&ns);

    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 1s\n  verify:\n    mode: HEAD\n    secretRef:\n      name: trusted\n",
    ));
    eventually(Duration::from_secs(20), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        status(&ns, "web")["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| r.contains(&signed))
    })
    .await;

    // Killed; meanwhile someone pushes a commit nobody signed, then the daemon starts
    // again.
    signal(&daemon.process, "KILL");
    drop(daemon);
    let offset = audit_offset();
    let unsigned = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v3"))]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    eventually(Duration::from_secs(20), || async {
        ready(&ns).is_some_and(|(_, reason, _)| reason == "Unverified")
    })
    .await;
    let (state, _, message) = ready(&ns).unwrap();
    assert_eq!(state, "False");
    for part in [
        format!(
            "commit {} is not verified: it is not signed",
            &unsigned[..12]
        ),
        format!("trusted keys: {dev_fingerprint} (dev@example.org)"),
    ] {
        assert!(message.contains(&part), "{part:?} in {message}");
    }
    assert_eq!(
        condition(&status(&ns, "web"), "Stalled").map(|c| c.0),
        Some("True".into())
    );
    let events = kubectl_ok(&[
        "-n",
        &ns,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=web",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(events.contains(&unsigned[..12]), "{events}");
    let tree = tether_plain(&["tree", "web", "-n", &ns]);
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(
        tree.contains(&format!(
            "not ready (Unverified): commit {} is not verified",
            &unsigned[..12]
        )),
        "{tree}"
    );
    // The last verified commit stays applied: nothing of the unsigned one was written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
    let writes = writes_since(offset, &ns);
    assert!(
        !writes.iter().any(|w| w.contains("configmaps settings")),
        "{writes:?}"
    );
    assert!(
        status(&ns, "web")["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| r.contains(&signed))
    );

    // A signed commit on top: applied, and the Source is ready again.
    let again = remote.push_signed(
        "main",
        &[("cm.yaml", &config_map("settings", &ns, "v4"))],
        &dev,
    );
    eventually(Duration::from_secs(20), || async {
        value_of(&client, &ns).await.as_deref() == Some("v4")
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        ready(&ns).is_some_and(|(state, _, _)| state == "True")
    })
    .await;
    assert!(
        status(&ns, "web")["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| r.contains(&again))
    );
    drop(daemon);
}

#[tokio::test]
async fn an_unverified_commit_fails_its_commit_status_naming_why() {
    install_crd();
    let (_, ns, _) = setup("verify-status").await;
    let host = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let Signed {
        _keys,
        remote,
        commit: signed,
        ..
    } = signed_remote(&ns);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    let spec = format!(
        "{}  verify:\n    secretRef:\n      name: trusted\n",
        feedback_of(&ns, &host)
    );
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, &spec));
    eventually(Duration::from_secs(30), || async {
        states(&host, &signed) == ["pending", "success"]
    })
    .await;
    let unsigned = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v3"))]);
    kubectl_ok(&[
        "annotate",
        "source",
        "web",
        "-n",
        &ns,
        "--overwrite",
        &format!("tether.dev/reconcile-requested-at={unsigned}"),
    ]);
    eventually(Duration::from_secs(30), || async {
        states(&host, &unsigned).last().map(String::as_str) == Some("failure")
    })
    .await;
    let failure = statuses(&host, &unsigned).pop().unwrap();
    assert!(
        failure.2.contains("is not verified: it is not signed"),
        "{failure:?}"
    );
    assert_eq!(host.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_source_whose_signing_key_cannot_be_read_says_so_and_applies_nothing() {
    install_crd();
    let (client, ns, _) = setup("verify-signing").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    kubectl_ok(&[
        "-n",
        &ns,
        "create",
        "secret",
        "generic",
        "signing",
        "--from-literal=ssh-privatekey=not a key",
    ]);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 1s\n  signingKey:\n    secretRef:\n      name: signing\n",
    ));
    eventually(Duration::from_secs(20), || async {
        ready(&ns).is_some_and(|(_, reason, _)| reason == "CredentialsUnavailable")
    })
    .await;
    let (_, _, message) = ready(&ns).unwrap();
    assert!(
        message.contains(&format!(
            "the Secret {ns}/signing, entry ssh-privatekey is not an OpenSSH private key"
        )),
        "{message}"
    );
    assert!(
        !message.contains("not a key"),
        "the key's text is not shown: {message}"
    );
    assert_eq!(value_of(&client, &ns).await, None);
}

/// The daemon signs what it commits: a Source that verifies its commits and discovers
/// pods, with its own key among the trusted ones, commits a discovered pod signed by
/// that key (`git verify-commit` agrees), then applies its own commit like any
/// verified one.
#[tokio::test]
async fn a_source_signs_its_discovery_commit_and_then_applies_it_as_verified() {
    install_crd();
    let (client, ns, _) = setup("verify-signs").await;
    let Signed {
        _keys,
        dev,
        fingerprint,
        remote,
        commit: _,
    } = signed_remote(&ns);
    let settings = format!("discover:\n  namespaces: [{ns}]\n");
    remote.push_signed("main", &[(".tether.yaml", &settings)], &dev);
    kubectl_ok(&[
        "-n",
        &ns,
        "create",
        "secret",
        "generic",
        "signing",
        "--type=kubernetes.io/ssh-auth",
        &format!("--from-file=ssh-privatekey={}", dev.display()),
    ]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.file_url(),
        "  interval: 1h\n  discovery: {}\n  verify:\n    mode: HEAD\n    secretRef:\n      name: trusted\n  signingKey:\n    secretRef:\n      name: signing\n",
    ));
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;

    kubectl_ok(&["-n", &ns, "run", "solo", "--image=busybox:1.36"]);
    let pod_file = format!("models/discovered/{ns}/pods/solo.yaml");
    eventually(Duration::from_secs(30), || async {
        remote.files_of_bare("main", &pod_file) == 1
    })
    .await;
    let head = remote.head_of_bare("main");
    let signers = _keys.path().join("allowed_signers");
    let checked = Command::new("git")
        .arg("-C")
        .arg(remote.bare())
        .args([
            "-c",
            &format!("gpg.ssh.allowedSignersFile={}", signers.display()),
        ])
        .args(["verify-commit", "-v", &head])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "Good \"git\" signature for dev@example.org with ED25519 key {fingerprint}"
        )),
        "{said}"
    );

    // Its own commit is verified and applied like any other.
    let (headers, body) =
        crate::daemon::push_hook(&remote.file_url(), "refs/heads/main", crate::daemon::SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    let applied = format!("main@sha1:{head}");
    eventually(Duration::from_secs(15), || async {
        status(&ns, "web")["lastAppliedRevision"] == applied.as_str()
    })
    .await;
    assert_eq!(ready(&ns).map(|(state, _, _)| state), Some("True".into()));
}

/// The `helm.sh/chart` label of the Deployment `hello` in `ns`, if it exists.
fn chart_of_hello(ns: &str) -> Option<String> {
    let out = Command::new("kubectl")
        .args(["get", "deployment", "hello", "-n", ns, "-o", "json"])
        .env("KUBECONFIG", crate::harness::cluster().kubeconfig())
        .output()
        .unwrap();
    let deployment: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    deployment["metadata"]["labels"]["helm.sh/chart"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn a_source_renders_only_charts_a_trusted_key_signed() {
    install_crd();
    let (_, ns, _) = setup("verify-charts").await;
    let dir = tempfile::tempdir().unwrap();
    let signer = ChartSigner::new(&dir.path().join("key"), "Charts <charts@example.org>");
    let charts = dir.path().join("charts");
    std::fs::create_dir_all(&charts).unwrap();
    let helm = |args: &[&str]| {
        let out = Command::new(&helm_tools().helm)
            .args(args)
            .current_dir(&charts)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    helm(&["create", "hello"]);
    let secring = signer.secring.to_str().unwrap();
    helm(&[
        "package",
        "hello",
        "--version",
        "1.2.3",
        "--sign",
        "--key",
        "Charts",
        "--keyring",
        secring,
    ]);
    helm(&["package", "hello", "--version", "1.3.0"]);
    let served = serve(&charts);
    helm(&["repo", "index", ".", "--url", &served.url]);
    kubectl_ok(&[
        "-n",
        &ns,
        "create",
        "secret",
        "generic",
        "chart-keys",
        &format!("--from-file=charts.asc={}", signer.public.display()),
    ]);
    let chart = |version: &str| {
        format!(
            "kind: HelmChart\nname: hello\nchart: hello\nrepository: {}\nversion: \"{version}\"\ntrust_domain: {ns}\n",
            served.url
        )
    };
    let remote = Remote::new(&[("base.yaml", &base(&ns)), ("hello.yaml", &chart("1.2.3"))]);
    let _daemon = Daemon::start_with_env(
        &["--sources", "--sources-namespace", &ns],
        &[("TETHER_HELM", helm_tools().helm.as_path())],
    );
    kubectl_apply_text(&source_yaml(
        "charts",
        &ns,
        &remote.url,
        "  interval: 1s\n  verifyCharts:\n    secretRef:\n      name: chart-keys\n",
    ));
    eventually(Duration::from_secs(60), || async {
        chart_of_hello(&ns).as_deref() == Some("hello-1.2.3")
    })
    .await;

    // A commit naming a version nobody signed: nothing of it is applied, and the
    // Source names the chart and why.
    let unsigned = remote.push("main", &[("hello.yaml", &chart("1.3.0"))]);
    let attempted = format!("main@sha1:{unsigned}");
    eventually(Duration::from_secs(60), || async {
        status(&ns, "charts")["lastAttemptedRevision"] == attempted.as_str()
    })
    .await;
    let status = status(&ns, "charts");
    assert_eq!(
        condition(&status, "Ready").map(|c| c.0).as_deref(),
        Some("False"),
        "{status:#}"
    );
    assert!(
        condition_message(&status, "Ready")
            .contains("the chart hello-1.3.0.tgz is not verified: it has no provenance file"),
        "{status:#}"
    );
    assert_eq!(chart_of_hello(&ns).as_deref(), Some("hello-1.2.3"));
    assert_ne!(status["lastAppliedRevision"], attempted.as_str());
}
