//! Deployment attestations against the control plane: `apply --attestation-key` with a
//! key made by `openssl`, `tether verify` clean, after a real `kubectl edit`, after a
//! deletion, with a forged envelope and with another key's; cosign checks the same
//! envelope; the bound on how many are kept.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use tether_testkit::registry::Registry;

use crate::discover::{kubectl, kubectl_command};
use crate::reconcile::{Repo, base, config_map, setup, tether_command};

/// An ECDSA P-256 key pair made by openssl: the private key's and public key's paths.
fn openssl_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub"));
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(&private)
        .status()
        .unwrap();
    assert!(made.success());
    let public_made = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public)
        .status()
        .unwrap();
    assert!(public_made.success());
    (private, public)
}

/// A key made by openssl, its private half in the Secret `attest` of `namespace`
/// (`spec.attestation`'s): the key's directory and its public half.
fn attestation_secret(namespace: &str) -> (tempfile::TempDir, PathBuf) {
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = openssl_key(keys.path(), "attestation");
    kubectl(&[
        "-n",
        namespace,
        "create",
        "secret",
        "generic",
        "attest",
        &format!("--from-file=attestation.pem={}", private.display()),
    ]);
    (keys, public)
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn run(inventory: &str, namespace: &str, args: &[&str]) -> Output {
    tether_command(inventory, args)
        .args(["--inventory-namespace", namespace])
        .output()
        .unwrap()
}

/// The attestations' ConfigMaps of `inventory`, oldest first, as kubectl lists them.
fn attestations(namespace: &str, inventory: &str) -> Vec<Value> {
    let listed = kubectl(&[
        "get",
        "configmap",
        "-n",
        namespace,
        "-l",
        &format!("tether.dev/attestation-of={inventory}"),
        "--sort-by=.metadata.creationTimestamp",
        "-o",
        "json",
    ]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    listed["items"].as_array().unwrap().clone()
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
";

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: hunter2-attested
";

#[tokio::test]
async fn an_attested_apply_verifies_until_kubectl_edit_and_a_forgery_is_refused() {
    let (_client, ns, inventory) = setup("attest").await;
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = openssl_key(keys.path(), "attestation");
    let (other, _) = openssl_key(keys.path(), "other");
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("menu.yaml", &config_map("menu", &ns, "soup")),
        ("deployment.yaml", &in_namespace(DEPLOYMENT, &ns)),
        ("secret.yaml", &in_namespace(SECRET, &ns)),
    ]);
    let path = repo.path().to_str().unwrap();
    let key = private.to_str().unwrap();
    let public = public.to_str().unwrap();

    let applied = run(&inventory, &ns, &["apply", path, "--attestation-key", key]);
    assert!(applied.status.success(), "{}", text(&applied));
    assert!(
        text(&applied).contains(&format!(
            "attested: ConfigMap {ns}/tether-attestation-{inventory}-"
        )),
        "{}",
        text(&applied)
    );
    let kept = attestations(&ns, &inventory);
    assert_eq!(kept.len(), 1);
    let envelope_text = kept[0]["data"]["envelope.json"]
        .as_str()
        .unwrap()
        .to_string();
    // Digests only: the Secret's value is in it neither plain nor base64.
    let envelope: Value = serde_json::from_str(&envelope_text).unwrap();
    let payload = base64_decode(envelope["payload"].as_str().unwrap());
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    assert!(!payload.windows(16).any(|w| w == b"hunter2-attested"));
    assert!(!envelope_text.contains("aHVudGVyMi1hdHRlc3RlZA"));
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(
        statement["predicateType"],
        "https://tether.dev/attestation/deployment/v1"
    );
    let subjects: Vec<&str> = statement["subject"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        subjects.contains(&format!("apps/v1 Deployment {ns}/nginx-deployment").as_str()),
        "{subjects:?}"
    );
    assert!(
        subjects.contains(&format!("v1 Secret {ns}/db").as_str()),
        "{subjects:?}"
    );

    // Clean.
    let verified = run(&inventory, &ns, &["verify", "--key", public]);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(
        text(&verified).contains("the cluster holds what it attests"),
        "{}",
        text(&verified)
    );
    assert!(
        text(&verified).contains("signed by cosign sha256:"),
        "{}",
        text(&verified)
    );

    // Nothing changed: nothing new attested.
    let again = run(&inventory, &ns, &["apply", path, "--attestation-key", key]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(!text(&again).contains("attested:"), "{}", text(&again));
    assert_eq!(attestations(&ns, &inventory).len(), 1);

    // A real kubectl edit: a value tether set, and a label of its own.
    let edited = kubectl_command()
        .args(["edit", "deployment", "nginx-deployment", "-n", &ns])
        .env(
            "KUBE_EDITOR",
            "sed -i -e 's/image: nginx:1.14.2/image: nginx:1.99.0/' -e 's/^  labels:$/  labels:\\n    edited-by: hand/'",
        )
        .output()
        .unwrap();
    assert!(edited.status.success(), "{}", text(&edited));
    let drifted = run(&inventory, &ns, &["verify", "--key", public]);
    assert_eq!(drifted.status.code(), Some(1), "{}", text(&drifted));
    let said = text(&drifted);
    assert!(
        said.contains(&format!(
            "apps/v1 Deployment {ns}/nginx-deployment: spec.template.spec.containers[name=nginx].image changed by kubectl-edit"
        )),
        "{said}"
    );
    assert!(
        said.contains("kubectl-edit set metadata.labels.edited-by since"),
        "{said}"
    );
    let drift: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains(": "))
        .collect();
    assert_eq!(
        drift.len(),
        2,
        "only the edited object's two changes: {said}"
    );

    // A deletion.
    kubectl(&["delete", "secret", "db", "-n", &ns]);
    let deleted = run(&inventory, &ns, &["verify", "--key", public]);
    assert!(
        text(&deleted).contains(&format!("v1 Secret {ns}/db: deleted")),
        "{}",
        text(&deleted)
    );

    // Forged: the statement changed under the signature (the Deployment's digest
    // made to match the edit); and signed by a key that is not trusted.
    let mut forged_statement = statement.clone();
    forged_statement["predicate"]["deployment"]["revision"] = "0000000".into();
    let mut forged = envelope.clone();
    forged["payload"] = base64_encode(forged_statement.to_string().as_bytes()).into();
    let forged_file = keys.path().join("forged.json");
    std::fs::write(&forged_file, forged.to_string()).unwrap();
    let refused = run(
        &inventory,
        &ns,
        &[
            "verify",
            "--key",
            public,
            "--attestation",
            forged_file.to_str().unwrap(),
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        flat(&text(&refused)).contains("doesnotmatchitscontent"),
        "{}",
        text(&refused)
    );
    let by_other = run(
        &inventory,
        &ns,
        &[
            "verify",
            "--key",
            other.with_extension("pub").to_str().unwrap(),
        ],
    );
    assert_eq!(by_other.status.code(), Some(2), "{}", text(&by_other));
    assert!(
        flat(&text(&by_other)).contains("notamongthetrustedkeys"),
        "{}",
        text(&by_other)
    );

    // cosign checks the same envelope with the same public key.
    let envelope_file = keys.path().join("envelope.json");
    std::fs::write(&envelope_file, &envelope_text).unwrap();
    let cosign = cosign_verify(public, &envelope_file);
    assert!(cosign.status.success(), "{}", text(&cosign));
    let cosign_forged = cosign_verify(public, &forged_file);
    assert!(!cosign_forged.status.success(), "{}", text(&cosign_forged));
}

#[tokio::test]
async fn only_the_newest_attestations_are_kept_and_a_bad_key_applies_nothing() {
    let (client, ns, inventory) = setup("attest-keep").await;
    let keys = tempfile::tempdir().unwrap();
    let (private, _) = openssl_key(keys.path(), "attestation");
    let key = private.to_str().unwrap();
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("menu.yaml", &config_map("menu", &ns, "v0")),
    ]);
    let path = repo.path().to_str().unwrap();

    // An SSH key is not an attestation key: refused before anything is applied.
    let ssh = keys.path().join("id");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&ssh)
        .status()
        .unwrap();
    assert!(made.success());
    let refused = run(
        &inventory,
        &ns,
        &["apply", path, "--attestation-key", ssh.to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        flat(&text(&refused)).contains("notanECDSAP-256privatekey"),
        "{}",
        text(&refused)
    );
    assert!(
        crate::reconcile::live_config_map(&client, &ns, "menu")
            .await
            .is_none()
    );

    for value in ["v1", "v2", "v3", "v4"] {
        repo.write("menu.yaml", &config_map("menu", &ns, value));
        let applied = run(
            &inventory,
            &ns,
            &[
                "apply",
                path,
                "--attestation-key",
                key,
                "--attestations-kept",
                "2",
            ],
        );
        assert!(applied.status.success(), "{}", text(&applied));
    }
    let kept = attestations(&ns, &inventory);
    assert_eq!(kept.len(), 2, "{kept:#?}");
    // The newest is the last apply's.
    let newest: Value =
        serde_json::from_str(kept[1]["data"]["envelope.json"].as_str().unwrap()).unwrap();
    let statement: Value =
        serde_json::from_slice(&base64_decode(newest["payload"].as_str().unwrap())).unwrap();
    let menu = statement["predicate"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "menu")
        .unwrap();
    assert!(menu["fields"]["data.key"].is_string(), "{menu}");
}

#[tokio::test]
async fn attestations_pushed_to_a_registry_verify_from_there_and_only_the_newest_stay() {
    let (_client, ns, inventory) = setup("attest-oci").await;
    let registry = Registry::start();
    let host = registry.host();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = openssl_key(keys.path(), "attestation");
    let (other, _) = openssl_key(keys.path(), "other");
    let public = public.to_str().unwrap();
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("menu.yaml", &config_map("menu", &ns, "v0")),
    ]);
    let path = repo.path().to_str().unwrap();
    let repository = format!("oci://{host}/team/attestations");
    let apply = |key: &Path| {
        run(
            &inventory,
            &ns,
            &[
                "apply",
                path,
                "--attestation-key",
                key.to_str().unwrap(),
                "--attestations-kept",
                "2",
                "--attestation-registry",
                &repository,
                "--attestation-registry-insecure",
                "--attestation-registry-only",
            ],
        )
    };
    for value in ["v1", "v2", "v3"] {
        // A second apart: the tags sort by the second they were made in.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        repo.write("menu.yaml", &config_map("menu", &ns, value));
        let applied = apply(&private);
        assert!(applied.status.success(), "{}", text(&applied));
        assert!(
            text(&applied).contains(&format!("attested: {repository}:{inventory}-")),
            "{}",
            text(&applied)
        );
    }
    // In the registry only, and only the newest two (and the inventory's own tag).
    assert!(attestations(&ns, &inventory).is_empty());
    let tags: Value = serde_json::from_slice(&curl(&format!(
        "http://{host}/v2/team/attestations/tags/list"
    )))
    .unwrap();
    let mut tags: Vec<&str> = tags["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    tags.sort_unstable();
    assert_eq!(tags.len(), 3, "{tags:?}");
    assert_eq!(tags[0], inventory.as_str());
    assert!(
        tags[1..]
            .iter()
            .all(|t| t.starts_with(&format!("{inventory}-")))
    );

    // tether verify reads the newest from the registry; cosign checks the same
    // envelope, fetched by curl.
    let verify = |attestation: &str| {
        run(
            &inventory,
            &ns,
            &[
                "verify",
                "--key",
                public,
                "--attestation",
                attestation,
                "--insecure-registry",
            ],
        )
    };
    let verified = verify(&repository);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(
        text(&verified).contains("the cluster holds what it attests")
            && text(&verified).contains(&format!("{repository}:{inventory} (sha256:")),
        "{}",
        text(&verified)
    );
    let manifest: Value = serde_json::from_slice(&curl_accepting(
        &format!("http://{host}/v2/team/attestations/manifests/{inventory}"),
        "application/vnd.oci.image.manifest.v1+json",
    ))
    .unwrap();
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.dsse.envelope.v1+json"
    );
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let envelope = keys.path().join("envelope.json");
    std::fs::write(
        &envelope,
        curl(&format!("http://{host}/v2/team/attestations/blobs/{layer}")),
    )
    .unwrap();
    let cosigned = cosign_verify(public, &envelope);
    assert!(cosigned.status.success(), "{}", text(&cosigned));
    // An older one, by its tag, is still there: verified, and the later apply is
    // what changed since.
    let older = verify(&format!("{repository}:{}", tags[1]));
    assert_eq!(older.status.code(), Some(1), "{}", text(&older));
    assert!(
        text(&older).contains(&format!(
            "v1 ConfigMap {ns}/menu: data.key changed by a later apply"
        )),
        "{}",
        text(&older)
    );

    // Someone who can push to the repository, with another key: refused.
    repo.write("menu.yaml", &config_map("menu", &ns, "v4"));
    let forged = apply(&other);
    assert!(forged.status.success(), "{}", text(&forged));
    let refused = verify(&repository);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        flat(&text(&refused)).contains("notamongthetrustedkeys"),
        "{}",
        text(&refused)
    );
}

/// A Source whose attestations go to a registry that asks for credentials (from a
/// Secret), not to ConfigMaps; the page's API checks the newest there.
#[tokio::test]
async fn a_source_pushes_its_attestations_to_a_registry_and_the_page_checks_them_there() {
    crate::daemon::install_crd();
    let (client, ns, _) = setup("attest-oci-source").await;
    let crate::verify::Signed {
        _keys,
        remote,
        commit,
        ..
    } = crate::verify::signed_remote(&ns);
    let registry = Registry::start_for_user("bot", "s3cret-push");
    let host = registry.host();
    let (_attestation_keys, _) = attestation_secret(&ns);
    kubectl(&[
        "-n",
        &ns,
        "create",
        "secret",
        "generic",
        "registry-creds",
        "--from-literal=username=bot",
        "--from-literal=password=s3cret-push",
    ]);
    let daemon = crate::daemon::Daemon::start(&["--sources", "--sources-namespace", &ns]);
    crate::daemon::kubectl_apply_text(&crate::daemon::source_yaml(
        "web",
        &ns,
        &remote.url,
        &format!(
            "  interval: 1s\n  verify:\n    mode: HEAD\n    secretRef:\n      name: trusted\n  attestation:\n    secretRef:\n      name: attest\n    inCluster: false\n    registry:\n      url: oci://{host}/team/attestations\n      insecure: true\n      secretRef:\n        name: registry-creds\n"
        ),
    ));
    let tags = || {
        let out = Command::new("curl")
            .args(["-sS", "-u", "bot:s3cret-push"])
            .arg(format!("http://{host}/v2/team/attestations/tags/list"))
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()["tags"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        tags().iter().any(|tag| tag == "web")
    })
    .await;
    assert!(attestations(&ns, "web").is_empty());
    assert!(
        crate::daemon::value_of(&client, &ns).await.is_some(),
        "the Source applied its commit"
    );

    crate::web::install_roles();
    let viewer = crate::web::user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let (code, body) = crate::web::http_get(
        &daemon,
        &format!("/api/v1/sources/{ns}/web/attestation"),
        Some(&viewer),
    );
    assert_eq!(code, 200, "{body}");
    let answer = crate::web::json(&body);
    assert_eq!(answer["verified"], true, "{answer:#}");
    assert_eq!(answer["clean"], true, "{answer:#}");
    assert_eq!(
        answer["deployment"]["revision"],
        commit.as_str(),
        "{answer:#}"
    );
    assert!(
        answer["attestation"]
            .as_str()
            .unwrap()
            .starts_with(&format!("oci://{host}/team/attestations:web (sha256:")),
        "{answer:#}"
    );
    // The registry's password is in neither the answer nor the Source's status.
    assert!(!body.contains("s3cret-push"));
    let source = kubectl(&["-n", &ns, "get", "source", "web", "-o", "json"]);
    assert!(!String::from_utf8_lossy(&source.stdout).contains("s3cret-push"));
}

fn curl(url: &str) -> Vec<u8> {
    curl_accepting(url, "*/*")
}

fn curl_accepting(url: &str, accept: &str) -> Vec<u8> {
    let out = Command::new("curl")
        .args(["-sSf", "-H", &format!("Accept: {accept}"), url])
        .output()
        .unwrap();
    assert!(out.status.success(), "curl {url}: {}", text(&out));
    out.stdout
}

/// `cosign verify-blob-attestation` of an envelope with a public key, offline.
fn cosign_verify(public: &str, envelope: &Path) -> Output {
    Command::new(tether_testkit::tools::cosign())
        .args(["verify-blob-attestation", "--key", public, "--signature"])
        .arg(envelope)
        .args([
            "--type",
            "https://tether.dev/attestation/deployment/v1",
            "--check-claims=false",
            "--insecure-ignore-tlog=true",
        ])
        .output()
        .unwrap()
}

/// A manifest of the Kubernetes docs, in `namespace`.
fn in_namespace(manifest: &str, namespace: &str) -> String {
    manifest.replacen(
        "metadata:\n",
        &format!("metadata:\n  namespace: {namespace}\n"),
        1,
    )
}

/// A Source that verifies its commits and attests what it applied, run by the daemon:
/// the attestation names the commit and its signer, verifies clean, and a Secret
/// without the key stops the next pass before anything is applied.
#[tokio::test]
async fn a_source_attests_each_pass_that_changed_the_cluster_with_who_signed_it() {
    crate::daemon::install_crd();
    let (client, ns, _) = setup("attest-source").await;
    let crate::verify::Signed {
        _keys,
        dev,
        fingerprint,
        remote,
        commit,
    } = crate::verify::signed_remote(&ns);
    let (_attestation_keys, public) = attestation_secret(&ns);
    let daemon = crate::daemon::Daemon::start(&["--sources", "--sources-namespace", &ns]);
    crate::daemon::kubectl_apply_text(&crate::daemon::source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 1s\n  verify:\n    mode: HEAD\n    secretRef:\n      name: trusted\n  attestation:\n    keep: 2\n    secretRef:\n      name: attest\n",
    ));
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        attestations(&ns, "web").len() == 1
    })
    .await;
    let verified = run("web", &ns, &["verify", "--key", public.to_str().unwrap()]);
    let said = text(&verified);
    assert!(verified.status.success(), "{said}");
    assert!(said.contains(&format!("at {commit}")), "{said}");
    assert!(
        said.contains(&format!(
            "verified then: commit signed by {fingerprint} (dev@example.org)"
        )),
        "{said}"
    );
    assert!(said.contains("the cluster holds what it attests"), "{said}");

    // Two more signed commits: two more attestations, two kept.
    for value in ["v3", "v4"] {
        remote.push_signed(
            "main",
            &[("cm.yaml", &config_map("settings", &ns, value))],
            &dev,
        );
        crate::harness::eventually(std::time::Duration::from_secs(30), || async {
            crate::daemon::value_of(&client, &ns).await.as_deref() == Some(value)
        })
        .await;
    }
    crate::harness::eventually(std::time::Duration::from_secs(10), || async {
        let kept = attestations(&ns, "web");
        kept.len() == 2
            && kept[1]["data"]["envelope.json"].as_str().is_some_and(|e| {
                statement_of(e)["predicate"]["deployment"]["revision"] == remote.head("main")
            })
    })
    .await;

    // The page's API answers the same check to whoever may see the Source.
    crate::web::install_roles();
    let viewer = crate::web::user(&client, &ns, "viewer", &["tether-viewer"]).await;
    let stranger = crate::web::user(&client, &ns, "stranger", &[]).await;
    let path = format!("/api/v1/sources/{ns}/web/attestation");
    let checked = |token: &str| {
        let (code, body) = crate::web::http_get(&daemon, &path, Some(token));
        assert_eq!(code, 200, "{body}");
        crate::web::json(&body)
    };
    let answer = checked(&viewer);
    assert_eq!(answer["verified"], true, "{answer:#}");
    assert_eq!(answer["clean"], true, "{answer:#}");
    assert_eq!(
        answer["deployment"]["revision"],
        remote.head("main").as_str()
    );
    assert!(
        answer["signer"]
            .as_str()
            .unwrap()
            .contains("attestation key"),
        "{answer:#}"
    );
    let (code, body) = crate::web::http_get(&daemon, &path, Some(&stranger));
    assert_eq!(code, 403, "{body}");
    // A label added by hand is named with its writer.
    kubectl(&["-n", &ns, "label", "configmap", "settings", "hotfix=yes"]);
    let answer = checked(&viewer);
    assert_eq!(answer["clean"], false, "{answer:#}");
    assert!(
        answer["drift"].as_array().unwrap().iter().any(|d| d
            .as_str()
            .unwrap()
            .ends_with("settings: kubectl-label set metadata.labels.hotfix since")),
        "{answer:#}"
    );
    // A newer attestation written by someone without the key (its statement changed
    // under the old signature): refused, not believed.
    let newest = attestations(&ns, "web").pop().unwrap();
    let mut forged: Value =
        serde_json::from_str(newest["data"]["envelope.json"].as_str().unwrap()).unwrap();
    let mut statement = statement_of(&forged.to_string());
    statement["predicate"]["deployment"]["revision"] = "0000000".into();
    forged["payload"] = base64_encode(statement.to_string().as_bytes()).into();
    let mut labels = serde_json::Map::new();
    labels.insert("tether.dev/attestation-of".into(), "web".into());
    let configmap = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "tether-attestation-web-forged", "namespace": ns, "labels": labels},
        "data": {"envelope.json": forged.to_string()},
    });
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    crate::daemon::kubectl_apply_text(&configmap.to_string());
    let answer = checked(&viewer);
    assert_eq!(answer["verified"], false, "{answer:#}");
    assert!(
        flat(answer["reason"].as_str().unwrap()).contains("doesnotmatchitscontent"),
        "{answer:#}"
    );
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "configmap",
        "tether-attestation-web-forged",
    ]);

    // The key's entry removed: the next commit is not applied.
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "secret",
        "attest",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/data/attestation.pem"}]"#,
    ]);
    remote.push_signed(
        "main",
        &[("cm.yaml", &config_map("settings", &ns, "v5"))],
        &dev,
    );
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        crate::daemon::status(&ns, "web")["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["reason"] == "AttestationKeyUnavailable"))
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        crate::daemon::value_of(&client, &ns).await.as_deref(),
        Some("v4")
    );
}

/// The statement of an envelope's JSON.
fn statement_of(envelope: &str) -> Value {
    let envelope: Value = serde_json::from_str(envelope).unwrap();
    serde_json::from_slice(&base64_decode(envelope["payload"].as_str().unwrap())).unwrap()
}

fn flat(text: &str) -> String {
    text.split_whitespace().collect()
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
