//! Verified charts, offline, with the real tools: a chart repository served over HTTP
//! whose charts `helm package --sign` signed with a key `gpg` made, and a local
//! registry whose chart `helm push` put there and `cosign sign` signed. What is not
//! vouched for (another key, no signature, a changed archive, an index whose digest
//! differs) renders nothing, and the error names the chart and why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tether_testkit::charts::{ChartSigner, serve};
use tether_testkit::tools::helm_tools;

use crate::generate::{models_dir, objects, run, tether, text, write};
use crate::oci::cosign;

fn chart_model(models: &Path, repository: &str, version: &str) {
    write(
        &models.join("models.yaml"),
        &format!(
            "kind: HelmChart\nname: hello\nchart: hello\nrepository: {repository}\nversion: \"{version}\"\ntrust_domain: shop\n"
        ),
    );
}

/// `tether render` of `models` with tether's home (and chart cache) in `home`, with
/// `--chart-keys` when given.
fn render(home: &Path, models: &Path, keys: Option<&Path>) -> Output {
    let mut args = vec!["render", models.to_str().unwrap()];
    if let Some(keys) = keys {
        args.extend(["--chart-keys", keys.to_str().unwrap()]);
    }
    tether(home, &args)
}

fn chart_label(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objects = objects(&text(&out.stdout));
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    deployment["metadata"]["labels"]["helm.sh/chart"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Refused: exit 1, nothing printed, the report says each of `expected` (compared
/// without whitespace: the report wraps its lines).
fn assert_refused(out: &Output, expected: &[&str]) {
    let report = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        out.stdout.is_empty(),
        "nothing rendered: {}",
        text(&out.stdout)
    );
    let flat = |s: &str| s.split_whitespace().collect::<String>();
    for expected in expected {
        assert!(
            flat(&report).contains(&flat(expected)),
            "{expected}\n---\n{report}"
        );
    }
}

#[test]
fn a_chart_repositorys_provenance_files_and_index_digests_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let gpg = ChartSigner::new(
        &dir.path().join("charts-key"),
        "Charts <charts@example.org>",
    );
    let other = ChartSigner::new(&dir.path().join("other-key"), "Other <other@example.org>");
    let charts = dir.path().join("charts");
    std::fs::create_dir_all(&charts).unwrap();
    let helm = &helm_tools().helm;
    run(Command::new(helm)
        .args(["create", "hello"])
        .current_dir(&charts));
    let secring = gpg.secring.to_str().unwrap();
    run(Command::new(helm)
        .args([
            "package",
            "hello",
            "--version",
            "1.2.3",
            "--sign",
            "--key",
            "Charts",
        ])
        .args(["--keyring", secring])
        .current_dir(&charts));
    run(Command::new(helm)
        .args(["package", "hello", "--version", "1.3.0"])
        .current_dir(&charts));
    let served = serve(&charts);
    let index = |charts: &Path| {
        run(Command::new(helm)
            .args(["repo", "index", ".", "--url", &served.url])
            .current_dir(charts));
    };
    index(&charts);
    // The provenance file as Helm itself checks it.
    run(Command::new(helm)
        .args(["verify", "hello-1.2.3.tgz", "--keyring"])
        .arg(&gpg.pubring)
        .current_dir(&charts));

    let (home, models) = models_dir();
    chart_model(&models, &served.url, "1.2.3");
    let signed = render(home.path(), &models, Some(&gpg.public));
    assert_eq!(chart_label(&signed), "hello-1.2.3");
    // From the cache, checked again: the same, with no request.
    let again = render(home.path(), &models, Some(&gpg.public));
    assert_eq!(again.stdout, signed.stdout);

    // Another key, from the cache and from a fresh one: refused, naming the key.
    let fresh = tempfile::tempdir().unwrap();
    for home in [home.path(), fresh.path()] {
        assert_refused(
            &render(home, &models, Some(&other.public)),
            &[
                "HelmChart \"hello\": cannot build it: the chart hello-1.2.3.tgz is not verified: its provenance file: it is signed by",
                "which is not among the trusted keys; trusted keys:",
                "Other",
            ],
        );
    }
    // A chart with no provenance file.
    chart_model(&models, &served.url, "1.3.0");
    assert_refused(
        &render(home.path(), &models, Some(&gpg.public)),
        &["the chart hello-1.3.0.tgz is not verified: it has no provenance file"],
    );
    // Without keys it renders: the index's digest is its archive's.
    assert_eq!(
        chart_label(&render(home.path(), &models, None)),
        "hello-1.3.0"
    );

    // The signed archive replaced by another and the index made again to match (who
    // can write the repository can do both): its provenance file refuses it.
    std::fs::rename(
        charts.join("hello-1.2.3.tgz.prov"),
        dir.path().join("kept.prov"),
    )
    .unwrap();
    run(Command::new(helm)
        .args([
            "package",
            "hello",
            "--version",
            "1.2.3",
            "--app-version",
            "6.6.6",
        ])
        .current_dir(&charts));
    std::fs::rename(
        dir.path().join("kept.prov"),
        charts.join("hello-1.2.3.tgz.prov"),
    )
    .unwrap();
    index(&charts);
    chart_model(&models, &served.url, "1.2.3");
    let fresh = tempfile::tempdir().unwrap();
    assert_refused(
        &render(fresh.path(), &models, Some(&gpg.public)),
        &[
            "the chart hello-1.2.3.tgz is not verified: the archive is not the hello-1.2.3.tgz its provenance file signed by",
            "vouches for: its digest is sha256:",
        ],
    );
    // An archive changed under an index that still lists the old digest: refused,
    // keys or not, and nothing of it enters the cache.
    let listed = std::fs::read_to_string(charts.join("index.yaml")).unwrap();
    run(Command::new(helm)
        .args([
            "package",
            "hello",
            "--version",
            "1.3.0",
            "--app-version",
            "7.7.7",
        ])
        .current_dir(&charts));
    assert!(std::fs::read_to_string(charts.join("index.yaml")).unwrap() == listed);
    chart_model(&models, &served.url, "1.3.0");
    let fresh = tempfile::tempdir().unwrap();
    assert_refused(
        &render(fresh.path(), &models, None),
        &[
            "HelmChart \"hello\": cannot build it: the chart archive hello-1.3.0.tgz is not the one the repository's index lists: its digest is sha256:",
            "the index says",
        ],
    );
    let cached: Vec<PathBuf> = walk(fresh.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "tgz"))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_chart_in_a_registry_renders_only_with_a_trusted_cosign_signature() {
    let registry = tether_testkit::registry::Registry::start();
    let dir = tempfile::tempdir().unwrap();
    cosign(dir.path(), &["generate-key-pair"]);
    cosign(
        dir.path(),
        &["generate-key-pair", "--output-key-prefix", "other"],
    );
    let helm = &helm_tools().helm;
    run(Command::new(helm)
        .args(["create", "hello"])
        .current_dir(dir.path()));
    let charts = format!("oci://{}/charts", registry.host());
    let push = |version: &str| -> String {
        run(Command::new(helm)
            .args(["package", "hello", "--version", version])
            .current_dir(dir.path()));
        let out = Command::new(helm)
            .args([
                "push",
                &format!("hello-{version}.tgz"),
                &charts,
                "--plain-http",
            ])
            .env("HELM_CONFIG_HOME", dir.path().join("helm-config"))
            .env("HELM_CACHE_HOME", dir.path().join("helm-cache"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
        printed
            .lines()
            .find_map(|l| l.strip_prefix("Digest: "))
            .unwrap()
            .trim()
            .to_string()
    };
    let digest = push("0.4.0");
    tether_testkit::tools::cosign_sign(
        dir.path(),
        "cosign.key",
        &format!("{}/charts/hello@{digest}", registry.host()),
    );
    push("0.5.0");
    let (home, models) = models_dir();
    chart_model(&models, &charts, "0.4.0");
    let trusted = dir.path().join("cosign.pub");
    assert_eq!(
        chart_label(&render(home.path(), &models, Some(&trusted))),
        "hello-0.4.0"
    );
    // Another key, even with the chart in the cache: the registry is asked again.
    assert_refused(
        &render(home.path(), &models, Some(&dir.path().join("other.pub"))),
        &[&format!(
            "HelmChart \"hello\": cannot build it: the chart {charts}/hello:0.4.0 ({digest}) is not verified: it is signed by a cosign key, which is not among the trusted keys"
        )],
    );
    // A version nobody signed.
    chart_model(&models, &charts, "0.5.0");
    assert_refused(
        &render(home.path(), &models, Some(&trusted)),
        &["is not verified: it is not signed"],
    );

    // A release job's certificate of a private Sigstore, in a bundle: its trusted root
    // and the job's identity read it; another identity does not.
    let sigstore = tether_testkit::sigstore::PrivateSigstore::new("fulcio");
    let digest = push("0.6.0");
    sigstore
        .issue("charts@example.org", "https://issuer.example.org")
        .sign(&format!("{}/charts/hello@{digest}", registry.host()));
    chart_model(&models, &charts, "0.6.0");
    let root = sigstore.trusted_root();
    let by_identity = |subject: &str| {
        tether(
            home.path(),
            &[
                "render",
                models.to_str().unwrap(),
                "--chart-keys",
                root.to_str().unwrap(),
                "--chart-certificate-identity",
                subject,
                "--chart-certificate-oidc-issuer",
                r"https://issuer\.example\.org",
            ],
        )
    };
    assert_eq!(
        chart_label(&by_identity(r"charts@example\.org")),
        "hello-0.6.0"
    );
    assert_refused(
        &by_identity(r"release@example\.org"),
        &[&format!(
            "the chart {charts}/hello:0.6.0 ({digest}) is not verified: it is signed by charts@example.org (issuer https://issuer.example.org, certificate of https://fulcio.example.org), which may not sign it: its identity is none of the trusted ones"
        )],
    );
}
