//! The daemon (`tether run --sources`) in steady state, against a local control plane
//! and a `git daemon` remote: one Source of 5,000 ConfigMaps in 200 namespaces, whose
//! discovery commits 1,000 pods another team runs. Measures the first apply, the
//! discovery of the pods, the CPU of a pass that finds nothing to do, push → applied
//! through a webhook (median, p99 and worst of 20), and the daemon's memory (steady,
//! and the peak during start-up).
//! Run with `cargo bench --bench daemon` (`-- --objects 1000 --namespaces 40 --pods
//! 200 --pushes 10`). A smoke run (`cargo test --bench daemon`): 50 ConfigMaps in 5
//! namespaces, 10 pods, 3 pushes, and the quiet passes counted over 6 s.

// Shared by the benchmarks; each uses part of it.
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use tether_api::source_spec::{DiscoverySpec, Source, SourceSpec};
use tether_api::webhook::sign;

use kube_helpers::Daemon;
use mode::arg;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::remote::{Remote, free_port, http};

const SECRET: &str = "a-webhook-secret-for-the-benchmark";
const SOURCE_NAMESPACE: &str = "tether-bench";
const PODS_NAMESPACE: &str = "bench-pods";

fn main() {
    let objects = arg("--objects", 5000, 50);
    let namespaces = arg("--namespaces", 200, 5).max(1);
    let pushes = arg("--pushes", 20, 3);
    let pods = arg("--pods", 1000, 10);
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let cluster = LocalCluster::start(0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(cluster.kubeconfig(), objects, namespaces, pushes, pods));
}

/// The models: a KubernetesService, `namespaces` TrustDomains, and `objects`
/// ConfigMaps spread over them (one file per namespace).
fn models(
    objects: usize,
    namespaces: usize,
    changed: Option<(usize, &str)>,
) -> Vec<(String, String)> {
    let mut files = vec![(
        "service.yaml".to_string(),
        "kind: KubernetesService\nname: kubernetes\n".to_string(),
    )];
    for n in 0..namespaces {
        let mut text = format!("kind: TrustDomain\nname: bench-{n}\n");
        for i in (0..objects).filter(|i| i % namespaces == n) {
            let value = match changed {
                Some((c, value)) if c == i => value.to_string(),
                _ => "v1".to_string(),
            };
            text.push_str(&format!(
                "---\nkind: KubernetesConfigMap\nname: c-{i}\ntrust_domain: bench-{n}\ndata:\n  key: \"{value}\"\n"
            ));
        }
        files.push((format!("ns-{n}.yaml"), text));
    }
    files
}

async fn run(
    kubeconfig: &std::path::Path,
    objects: usize,
    namespaces: usize,
    pushes: usize,
    pods: usize,
) {
    let client = tether_testkit::cluster::client(kubeconfig)
        .await
        .expect("client");
    kube_helpers::install_source_crd(&client).await;
    kube_helpers::namespace(&client, SOURCE_NAMESPACE).await;
    if pods > 0 {
        // Another team's pods, Running, for the Source's discovery to commit.
        kube_helpers::make_pods(&client, PODS_NAMESPACE, pods).await;
    }
    let mut files = models(objects, namespaces, None);
    files.push((
        ".tether.yaml".into(),
        format!("discover:\n  namespaces: [{PODS_NAMESPACE}]\n  debounce: 1s\n"),
    ));
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let remote = Remote::new(&borrowed);

    let port = free_port();
    let secret = tempfile::NamedTempFile::new().expect("secret");
    std::fs::write(secret.path(), SECRET).expect("secret");
    let cache = tempfile::tempdir().expect("cache");
    let child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["run", "--sources", "--sources-namespace", SOURCE_NAMESPACE])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg("--webhook-secret-file")
        .arg(secret.path())
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .spawn()
        .expect("tether run");
    let daemon = Daemon { child, port };

    let sources: Api<Source> = Api::namespaced(client.clone(), SOURCE_NAMESPACE);
    let mut source = Source::new(
        "bench",
        SourceSpec {
            url: remote.url.clone(),
            reference: Some("main".into()),
            insecure: false,
            path: Some("models".into()),
            interval: Some("2s".into()),
            prune: false,
            allow_empty: false,
            deletion_budget: None,
            health_check_exprs: Vec::new(),
            drift: Default::default(),
            rewrites: Default::default(),
            suspend: false,
            inventory: None,
            secret_ref: None,
            verify: None,
            signing_key: None,
            attestation: None,
            verify_charts: None,
            decryption: None,
            discovery: (pods > 0).then(DiscoverySpec::default),
            image_automation: None,
            service_account_name: None,
            confine: None,
            propose_actions: false,
            timeout: None,
            revert: false,
            feedback: None,
        },
    );
    source.metadata.namespace = Some(SOURCE_NAMESPACE.into());
    let started = Instant::now();
    sources
        .create(&PostParams::default(), &source)
        .await
        .expect("Source");
    let mut peak_start = 0.0f64;
    let last_object: Api<ConfigMap> = Api::namespaced(
        client.clone(),
        &format!("bench-{}", (objects - 1) % namespaces),
    );
    loop {
        peak_start = peak_start.max(daemon.proc_status("VmRSS:"));
        if last_object
            .get_opt(&format!("c-{}", objects - 1))
            .await
            .ok()
            .flatten()
            .is_some()
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "never applied"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_apply = started.elapsed();
    // Discovery commits the pods (a push to main), which the Source then applies.
    let discovered_at = Instant::now();
    loop {
        peak_start = peak_start.max(daemon.proc_status("VmRSS:"));
        let files =
            remote.files_of_bare("main", &format!("models/discovered/{PODS_NAMESPACE}/pods/"));
        let head = format!("main@sha1:{}", remote.head_of_bare("main"));
        let applied = sources
            .get_status("bench")
            .await
            .ok()
            .and_then(|s| s.status)
            .and_then(|s| s.last_applied_revision);
        if files >= pods && applied.as_deref() == Some(head.as_str()) {
            break;
        }
        assert!(
            discovered_at.elapsed() < Duration::from_secs(900),
            "the pods were never discovered and applied"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let discovered = discovered_at.elapsed();
    let peak_start = peak_start.max(daemon.proc_status("VmHWM:"));

    // Quiet passes: every 2 s, nothing to do.
    let passes = format!(
        "tether_reconciles_total{{source=\"{SOURCE_NAMESPACE}/bench\",result=\"success\"}}"
    );
    tokio::time::sleep(Duration::from_secs(mode::size(8, 2))).await;
    let (cpu0, passes0, git0) = (daemon.cpu(), daemon.metric(&passes), remote.connections());
    let window = mode::size(20, 6);
    tokio::time::sleep(Duration::from_secs(window)).await;
    let (cpu1, passes1, git1) = (daemon.cpu(), daemon.metric(&passes), remote.connections());
    let quiet = passes1 - passes0;
    let git_per_pass = (git1 - git0) as f64 / quiet.max(1.0);
    let cpu_per_pass = (cpu1 - cpu0).as_secs_f64() * 1000.0 / quiet.max(1.0);
    let steady = daemon.proc_status("VmRSS:");

    // Pushes of one changed model, announced by a webhook.
    let mut latencies = Vec::new();
    for round in 0..pushes {
        let changed = (round * 7919) % objects;
        let value = format!("push-{round}");
        let files = models(objects, namespaces, Some((changed, &value)));
        let name = format!("ns-{}.yaml", changed % namespaces);
        let file = files.iter().find(|(n, _)| *n == name).expect("file");
        remote.push("main", &[(file.0.as_str(), file.1.as_str())]);
        let body =
            serde_json::json!({"repository": remote.url, "ref": "refs/heads/main"}).to_string();
        let headers = [("X-Signature-256", sign(body.as_bytes(), SECRET.as_bytes()))];
        let pushed = Instant::now();
        let (code, _) = http(port, "POST", "/hook/generic", &headers, body.as_bytes());
        assert_eq!(code, 202);
        let namespaced: Api<ConfigMap> =
            Api::namespaced(client.clone(), &format!("bench-{}", changed % namespaces));
        loop {
            let live = namespaced.get(&format!("c-{changed}")).await.ok();
            if live
                .and_then(|c| c.data)
                .and_then(|d| d.get("key").cloned())
                .as_deref()
                == Some(value.as_str())
            {
                break;
            }
            assert!(
                pushed.elapsed() < Duration::from_secs(120),
                "push {round} never applied"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies.push(pushed.elapsed());
    }
    latencies.sort();
    let median = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();
    let worst = latencies.last().copied().unwrap_or_default();
    let p99 = latencies
        .get((latencies.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default();

    println!(
        "tether run --sources: one Source, {objects} ConfigMaps in {namespaces} namespaces, {pods} pods discovered"
    );
    println!(
        "  first apply (Source created → its last object there)  {:>8.0} ms",
        first_apply.as_secs_f64() * 1000.0
    );
    println!(
        "  {pods} pods discovered, committed, pushed and the commit applied  {:>8.0} ms",
        discovered.as_secs_f64() * 1000.0
    );
    println!(
        "  quiet pass, CPU per pass ({quiet:.0} passes in {window} s)      {cpu_per_pass:>8.1} ms"
    );
    println!("  quiet pass, Git connections per pass (ref listing only) {git_per_pass:>8.1}");
    println!(
        "  push → applied via webhook, median / p99 / worst of {}  {:>6.0} / {:.0} / {:.0} ms",
        latencies.len(),
        median.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0,
        worst.as_secs_f64() * 1000.0
    );
    println!(
        "  RSS steady {steady:.1} MiB, peak during start-up {peak_start:.1} MiB ({:.2}× steady)",
        peak_start / steady.max(1.0)
    );
}
