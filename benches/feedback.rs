//! Commit statuses, from a push to the status a Git host shows: the daemon (`tether
//! run --sources`) against a local control plane, a `git daemon` remote and the test
//! kit's HTTPS GitHub (which checks every request against GitHub's description). Each
//! push is announced by a webhook; measured from the push to `success` recorded by the
//! host (median, p99 and worst), and the requests per commit and context.
//! Run with `cargo bench --bench feedback` (`-- --pushes 20`); a smoke run (`cargo
//! test --bench feedback`) makes 3 pushes.

#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use tether_api::source_spec::{FeedbackSpec, LocalObjectReference, Source, SourceSpec};
use tether_api::webhook::sign;

use tether_core::feedback::GitHost as Provider;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::githost::{GitHost, GitHostServer};
use tether_testkit::remote::{Remote, free_port, http};

const SECRET: &str = "a-webhook-secret-for-the-benchmark";
const TOKEN: &str = "ghp_benchmarkTokenOfTheFeedbackBench01";
const NAMESPACE: &str = "tether-feedback-bench";

fn main() {
    let pushes = mode::arg("--pushes", 50, 3);
    let cluster = LocalCluster::start(0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(cluster.kubeconfig(), pushes));
}

fn models(value: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "service.yaml",
            "kind: KubernetesService\nname: kubernetes\n".into(),
        ),
        (
            "cm.yaml",
            format!(
                "kind: TrustDomain\nname: feedback-bench\n---\nkind: KubernetesConfigMap\nname: settings\ntrust_domain: feedback-bench\ndata:\n  key: \"{value}\"\n"
            ),
        ),
    ]
}

fn borrowed<'a>(files: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    files.iter().map(|(n, t)| (*n, t.as_str())).collect()
}

async fn run(kubeconfig: &std::path::Path, pushes: usize) {
    let client = tether_testkit::cluster::client(kubeconfig)
        .await
        .expect("client");
    kube_helpers::install_source_crd(&client).await;
    kube_helpers::namespace(&client, NAMESPACE).await;
    let host = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let mut secret = Secret::default();
    secret.metadata.name = Some("git-host".into());
    secret.data = Some(
        [
            ("token".to_string(), ByteString(TOKEN.into())),
            ("ca.crt".to_string(), ByteString(host.ca_pem().into_bytes())),
        ]
        .into(),
    );
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let remote = Remote::new(&borrowed(&models("v0")));

    let port = free_port();
    let secret_file = tempfile::NamedTempFile::new().expect("secret");
    std::fs::write(secret_file.path(), SECRET).expect("secret");
    let cache = tempfile::tempdir().expect("cache");
    let daemon = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "run",
            "--sources",
            "--sources-namespace",
            NAMESPACE,
            "--cluster-name",
            "bench",
        ])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg("--webhook-secret-file")
        .arg(secret_file.path())
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .spawn()
        .expect("tether run");
    let daemon = kube_helpers::Killed(daemon);

    let feedback = FeedbackSpec {
        provider: Some(Provider::GitHub),
        api_url: Some(host.api_url()),
        repository: Some("team/models".into()),
        secret_ref: Some(LocalObjectReference {
            name: "git-host".into(),
        }),
        commit_statuses: true,
        pull_requests: false,
        ..FeedbackSpec::default()
    };
    let spec: SourceSpec = serde_json::from_value(serde_json::json!({
        "url": remote.url, "ref": "main", "path": "models", "interval": "1h",
    }))
    .expect("spec");
    let mut source = Source::new(
        "bench",
        SourceSpec {
            feedback: Some(feedback),
            ..spec
        },
    );
    source.metadata.namespace = Some(NAMESPACE.into());
    Api::<Source>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &source)
        .await
        .expect("Source");
    let succeeded = |commit: &str| host.statuses(commit).iter().any(|s| s.state == "success");
    let first = remote.head("main");
    while !succeeded(&first) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut latencies = Vec::new();
    let mut requests_per_commit = Vec::new();
    for push in 1..=pushes {
        let files = models(&format!("v{push}"));
        let head = remote.push("main", &borrowed(&files));
        let pushed = Instant::now();
        let body = serde_json::json!({"repository": remote.url, "ref": "refs/heads/main"})
            .to_string()
            .into_bytes();
        let headers = [("X-Signature-256", sign(&body, SECRET.as_bytes()))];
        http(port, "POST", "/hook/generic", &headers, &body);
        while !succeeded(&head) {
            assert!(
                pushed.elapsed() < Duration::from_secs(120),
                "no success for {head}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies.push(pushed.elapsed());
        requests_per_commit.push(host.statuses(&head).len());
    }
    drop(daemon);
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!("feedback: {pushes} pushes, push → success status on the host:");
    println!(
        "  median {:?}, p99 {:?}, worst {:?}",
        at(0.5),
        at(0.99),
        latencies.last().copied().unwrap_or_default()
    );
    println!(
        "  requests per commit and context: at most {} (pending, success)",
        requests_per_commit.iter().max().copied().unwrap_or(0)
    );
    let violations = host.violations();
    println!(
        "  requests GitHub's description refuses: {}",
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:?}");
}
