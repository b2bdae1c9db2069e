//! The daemon following an OCI artifact: a Source of `oci://` on a real registry
//! (Debian's docker-registry), pushed to with `tether push artifact` as CI would.
//! Each push to the tag is applied and named `TAG@sha256:…` in the status; a pass
//! over an unmoved tag asks the registry for the digest and nothing else (its access
//! log counts the requests). An artifact whose layer does not match its digest
//! stalls the Source, and the last good revision stays applied.

use std::process::Command;
use std::time::Duration;

use tether_testkit::registry::Registry;
use tether_testkit::sigstore::PrivateSigstore;

use crate::daemon::{Daemon, condition, http, install_crd, kubectl_apply_text, status, value_of};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, setup};

/// Writes the models (the namespace, and the ConfigMap `settings` at `value`) and
/// pushes them to `reference`; returns the digest.
fn push_models(dir: &std::path::Path, ns: &str, value: &str, reference: &str) -> String {
    std::fs::write(dir.join("base.yaml"), base(ns)).unwrap();
    std::fs::write(dir.join("cm.yaml"), config_map("settings", ns, value)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "push",
            "artifact",
            reference,
            "--insecure-registry",
            "--path",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let (_, digest) = printed.trim().split_once('@').unwrap();
    digest.to_string()
}

#[tokio::test]
async fn a_source_follows_an_artifact_tag_and_a_quiet_pass_asks_only_for_the_digest() {
    install_crd();
    let (client, ns, _) = setup("oci-source").await;
    let registry = Registry::start();
    let models = tempfile::tempdir().unwrap();
    let reference = format!("oci://{}/team/models:stable", registry.host());
    let first = push_models(models.path(), &ns, "v1", &reference);

    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&format!(
        "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  url: oci://{}/team/models\n  ref: stable\n  insecure: true\n  interval: 1s\n",
        registry.host()
    ));
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    let applied = format!("stable@{first}");
    eventually(Duration::from_secs(10), || async {
        status(&ns, "web")["lastAppliedRevision"] == applied.as_str()
    })
    .await;

    // A new push to the same tag is the next revision.
    let second = push_models(models.path(), &ns, "v2", &reference);
    assert_ne!(second, first);
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    let applied = format!("stable@{second}");
    eventually(Duration::from_secs(10), || async {
        status(&ns, "web")["lastAppliedRevision"] == applied.as_str()
    })
    .await;

    // Quiet passes: each asks for the tag's digest (HEAD of the manifest), and no
    // manifest or blob is downloaded.
    let series = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"success\"}}");
    let downloads = format!("tether_git_fetch_duration_seconds_count{{source=\"{ns}/web\"}}");
    eventually(Duration::from_secs(10), || async {
        daemon.metric(&series) >= Some(3.0)
    })
    .await;
    let passes = daemon.metric(&series).unwrap_or(0.0);
    let downloaded = daemon.metric(&downloads);
    let seen = registry.requests().len();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet_passes = daemon.metric(&series).unwrap_or(0.0) - passes;
    assert!(
        quiet_passes >= 3.0,
        "only {quiet_passes} passes in 5 s at a 1 s interval"
    );
    let requests = registry.requests().split_off(seen);
    assert!(
        requests.len() as f64 >= quiet_passes,
        "{quiet_passes} passes, requests: {requests:#?}"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.contains("\"HEAD /v2/team/models/manifests/stable HTTP/1.1\"")),
        "a quiet pass asked for more than the digest: {requests:#?}"
    );
    assert_eq!(
        daemon.metric(&downloads),
        downloaded,
        "a quiet pass downloaded"
    );
    assert_eq!(
        status(&ns, "web")["lastAppliedRevision"],
        applied.as_str(),
        "the revision stays"
    );

    // v3 reaches the tag with its layer tampered with in the registry's storage: the
    // Source stalls on it, naming the reference, and v2 stays applied.
    let third = push_models(
        models.path(),
        &ns,
        "v3",
        &format!("oci://{}/team/models:next", registry.host()),
    );
    let (found, manifest) = http(
        registry.port,
        "GET",
        &format!("/v2/team/models/manifests/{third}"),
        &[("Accept", OCI_MANIFEST.into())],
        b"",
    );
    assert_eq!(found, 200, "{manifest}");
    let layer: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    let blob = registry.blob_path(layer["layers"][0]["digest"].as_str().unwrap());
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let (created, _) = http(
        registry.port,
        "PUT",
        "/v2/team/models/manifests/stable",
        &[("Content-Type", OCI_MANIFEST.into())],
        manifest.as_bytes(),
    );
    assert_eq!(created, 201);
    eventually(Duration::from_secs(30), || async {
        condition(&status(&ns, "web"), "Stalled").is_some_and(|(s, _)| s == "True")
    })
    .await;
    let stalled = status(&ns, "web");
    assert_eq!(
        condition(&stalled, "Ready").map(|(_, reason)| reason),
        Some("ArtifactRefused".to_string()),
        "{stalled}"
    );
    let message = stalled["conditions"].to_string();
    assert!(
        message.contains(&format!("oci://{}/team/models:stable", registry.host()))
            && message.contains("has digest"),
        "{message}"
    );
    assert_eq!(stalled["lastAppliedRevision"], applied.as_str());
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

#[tokio::test]
async fn a_source_applies_only_an_artifact_a_trusted_cosign_key_signed() {
    install_crd();
    let (client, ns, _) = setup("oci-verify").await;
    let registry = Registry::start();
    let models = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let cosign = |args: &[&str]| {
        let out = Command::new(tether_testkit::tools::cosign())
            .args(args)
            .current_dir(keys.path())
            .env("COSIGN_PASSWORD", "")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cosign {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let host = registry.host();
    let sign = |digest: &str| {
        tether_testkit::tools::cosign_sign(
            keys.path(),
            "cosign.key",
            &format!("{host}/team/models@{digest}"),
        );
    };
    cosign(&["generate-key-pair"]);
    // The Secret `trusted` with the cosign key and `more` of kubectl's arguments;
    // with --dry-run, applied (to replace it).
    let trusted = |more: &[&str]| {
        let cosign_pub = format!(
            "--from-file=cosign.pub={}",
            keys.path().join("cosign.pub").display()
        );
        let mut args = vec![
            "-n",
            &ns,
            "create",
            "secret",
            "generic",
            "trusted",
            &cosign_pub,
        ];
        args.extend(more);
        let out = crate::daemon::kubectl_ok(&args);
        if more.contains(&"--dry-run=client") {
            kubectl_apply_text(&out);
        }
    };
    trusted(&[]);
    let reference = format!("oci://{host}/team/models:stable");
    let first = push_models(models.path(), &ns, "v1", &reference);
    sign(&first);

    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&format!(
        "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  url: oci://{host}/team/models\n  ref: stable\n  insecure: true\n  interval: 1s\n  verify:\n    secretRef:\n      name: trusted\n"
    ));
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;

    // An unsigned push to the tag: the Source stalls naming the digest; v1 stays.
    let second = push_models(models.path(), &ns, "v2", &reference);
    eventually(Duration::from_secs(30), || async {
        condition(&status(&ns, "web"), "Ready").is_some_and(|c| c.1 == "Unverified")
    })
    .await;
    let message = status(&ns, "web")["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
        .unwrap();
    assert!(
        message.contains(&format!("({second}) is not verified: it is not signed")),
        "{message}"
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v1"));
    assert_eq!(
        status(&ns, "web")["lastAppliedRevision"],
        format!("stable@{first}").as_str()
    );

    // Signed afterwards: the next retry applies it.
    sign(&second);
    eventually(Duration::from_secs(40), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;

    // A push signed by a private Sigstore's certificate (a bundle, no key): applied
    // once the Secret holds its trusted root and the Source trusts that identity,
    // not before; v2 stays meanwhile.
    let sigstore = PrivateSigstore::new("fulcio");
    let third = push_models(models.path(), &ns, "v3", &reference);
    sigstore
        .issue("ci@example.org", "https://issuer.example.org")
        .sign(&format!("{host}/team/models@{third}"));
    trusted(&[
        &format!(
            "--from-file=trusted_root.json={}",
            sigstore.trusted_root().display()
        ),
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    let trust = |subject: &str| {
        kubectl_apply_text(&format!(
            "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  url: oci://{host}/team/models\n  ref: stable\n  insecure: true\n  interval: 1s\n  verify:\n    secretRef:\n      name: trusted\n    matchOIDCIdentity:\n      - issuer: https://issuer\\.example\\.org\n        subject: {subject}\n"
        ));
    };
    trust("release@example\\.org");
    eventually(Duration::from_secs(30), || async {
        let message = crate::daemon::condition_message(&status(&ns, "web"), "Ready");
        message.contains(&format!("({third}) is not verified"))
            && message.contains("its identity is none of the trusted ones")
    })
    .await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
    trust("ci@example\\.org");
    eventually(Duration::from_secs(40), || async {
        value_of(&client, &ns).await.as_deref() == Some("v3")
    })
    .await;
}
