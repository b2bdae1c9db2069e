//! Scale-out: many Sources shared by sharded replicas (`tether run --sources
//! --shard`), against `--clusters` local control planes of the benchmark's own (each
//! with its audit log) and one `git daemon` remote. The replicas run in the first
//! cluster, which holds the Sources; each Source is a namespace of its own holding
//! `--objects` ConfigMaps, in the first cluster or, through a `Cluster` resource, in
//! one of the others (round robin). Measures the first apply of all, the replicas'
//! memory at steady state (per Source), the quiet state (CPU, and the API requests the
//! replicas make in every cluster, from the audit logs), and one push that changes
//! every Source, announced by a webhook to one replica: each Source's time to apply
//! it, p50, p99 and worst.
//! Run with `cargo bench --bench scale` (`-- --sources 300 --objects 20 --replicas 3
//! --clusters 3`). A smoke run (`cargo test --bench scale`): 6 Sources of 3 ConfigMaps,
//! 2 replicas, 2 control planes (a Source on another cluster is a step of its own),
//! and a quiet state of 6 s.

// Shared by the benchmarks; each uses part of it.
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::CustomResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use tether_api::cluster_spec::Cluster;
use tether_api::source_spec::Source;
use tether_api::webhook::sign;

use kube_helpers::Daemon;
use mode::arg;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::remote::{Remote, free_port, http};

const SECRET: &str = "a-webhook-secret-for-the-benchmark";
const NAMESPACE: &str = "tether-scale";

fn main() {
    let sources = arg("--sources", 1000, 6);
    let objects = arg("--objects", 20, 3);
    let replicas = arg("--replicas", 3, 2).max(1);
    let clusters: Vec<LocalCluster> = (0..arg("--clusters", 3, 2).max(1))
        .map(|_| LocalCluster::start(0))
        .collect();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(&clusters, sources, objects, replicas));
}

/// The KubernetesService of Source `s`: the replicas' own cluster, or one of the
/// others (`far-N`, reached through the Cluster resource of that name).
fn service_of(s: usize, clusters: usize) -> String {
    match s % clusters {
        0 => "kubernetes".to_string(),
        n => format!("far-{n}"),
    }
}

/// Each Source's models, at `value`: its namespace and `objects` ConfigMaps, in the
/// cluster of its KubernetesService. One placed on another cluster names the
/// replicas' own too: a Source whose models name one KubernetesService is applied to
/// the daemon's own cluster whatever its name, as the CLI applies it to the current
/// context; with several, each is reached by its name.
fn models(sources: usize, objects: usize, clusters: usize, value: &str) -> Vec<(String, String)> {
    (0..sources)
        .map(|s| {
            let service = service_of(s, clusters);
            let mut text = format!(
                "kind: KubernetesService\nname: {service}\n---\nkind: TrustDomain\nname: scale-{s}\nowner: {service}\n"
            );
            if service != "kubernetes" {
                text.push_str("---\nkind: KubernetesService\nname: kubernetes\n");
            }
            for i in 0..objects {
                text.push_str(&format!(
                    "---\nkind: KubernetesConfigMap\nname: c-{i}\ntrust_domain: scale-{s}\ndata:\n  key: \"{value}\"\n"
                ));
            }
            (format!("s{s}/m.yaml"), text)
        })
        .collect()
}

/// A replica named `identity`, sharding the Sources with the others.
fn replica(kubeconfig: &std::path::Path, identity: &str, secret: &std::path::Path) -> Daemon {
    let port = free_port();
    let cache = tempfile::tempdir().expect("cache").keep();
    let child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "run",
            "--sources",
            "--sources-namespace",
            NAMESPACE,
            "--shard",
        ])
        .args(["--identity", identity, "--lease-namespace", NAMESPACE])
        .args(["--cluster-name", "kubernetes"])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg("--webhook-secret-file")
        .arg(secret)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--log-level", "error"])
        .stdout(Stdio::null())
        .spawn()
        .expect("tether run");
    Daemon { child, port }
}

/// The Sources whose last applied revision is `revision`, by name. A Source that
/// stalled ends the benchmark: it would never be applied.
async fn applied(api: &Api<Source>, revision: &str) -> BTreeSet<String> {
    let Ok(list) = api.list(&ListParams::default()).await else {
        return BTreeSet::new();
    };
    let stalled = list.items.iter().find(|s| {
        s.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.status == "True")
        })
    });
    if let Some(source) = stalled {
        panic!("a Source stalled: {:?}", source.status);
    }
    list.items
        .into_iter()
        .filter(|s| {
            s.status
                .as_ref()
                .and_then(|s| s.last_applied_revision.as_deref())
                == Some(revision)
        })
        .filter_map(|s| s.metadata.name)
        .collect()
}

/// The requests tether's replicas made from the audit log's `offset` on, by resource
/// and verb.
fn requests_since(audit: &std::path::Path, offset: u64) -> BTreeMap<String, usize> {
    let mut file = std::fs::File::open(audit).expect("the audit log");
    file.seek(SeekFrom::Start(offset)).expect("seek");
    let mut counts = BTreeMap::new();
    for line in BufReader::new(file).lines().map_while(Result::ok) {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if entry["stage"] != "ResponseComplete"
            || !entry["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("tether/"))
        {
            continue;
        }
        let resource = entry["objectRef"]["resource"].as_str().unwrap_or("-");
        let verb = entry["verb"].as_str().unwrap_or("-");
        *counts.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    counts
}

fn audit_size(audit: &std::path::Path) -> u64 {
    std::fs::metadata(audit).map(|m| m.len()).unwrap_or(0)
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    sorted
        .get((sorted.len() * percent).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

/// The Cluster resource `far-N` for each cluster but the first, with the Secret
/// holding its kubeconfig, in the Sources' namespace.
async fn register_far_clusters(client: &kube::Client, clusters: &[LocalCluster]) {
    kube_helpers::install_crd(client, Cluster::crd()).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let resources: Api<Cluster> = Api::namespaced(client.clone(), NAMESPACE);
    for (n, far) in clusters.iter().enumerate().skip(1) {
        // The inventory's namespace, the Source's, on every cluster it applies to.
        kube_helpers::namespace(&far.client().await, NAMESPACE).await;
        let kubeconfig = std::fs::read_to_string(far.kubeconfig()).expect("a kubeconfig");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("far-{n}-kubeconfig")},
            "stringData": {"value": kubeconfig},
        }))
        .expect("Secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("Secret");
        let cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "tether.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": format!("far-{n}")},
            "spec": {"kubeConfig": {"secretRef": {"name": format!("far-{n}-kubeconfig")}}},
        }))
        .expect("Cluster");
        resources
            .create(&PostParams::default(), &cluster)
            .await
            .expect("Cluster");
    }
}

async fn run(clusters: &[LocalCluster], sources: usize, objects: usize, replicas: usize) {
    let kubeconfig = clusters[0].kubeconfig();
    let audits: Vec<std::path::PathBuf> = clusters
        .iter()
        .map(|c| c.state_dir().join("logs/audit.log"))
        .collect();
    let client = tether_testkit::cluster::client(kubeconfig)
        .await
        .expect("client");
    kube_helpers::install_source_crd(&client).await;
    kube_helpers::namespace(&client, NAMESPACE).await;
    register_far_clusters(&client, clusters).await;
    let files = models(sources, objects, clusters.len(), "v1");
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let remote = Remote::new(&borrowed);
    let secret = tempfile::NamedTempFile::new().expect("secret");
    std::fs::write(secret.path(), SECRET).expect("secret");
    let replicas: Vec<Daemon> = (0..replicas)
        .map(|r| replica(kubeconfig, &format!("r{r}"), secret.path()))
        .collect();
    let idle: f64 = replicas.iter().map(|r| r.proc_status("VmRSS:")).sum();

    let api: Api<Source> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    for s in 0..sources {
        let source = serde_json::json!({
            "apiVersion": "tether.dev/v1alpha1", "kind": "Source",
            "metadata": {"name": format!("s{s}"), "namespace": NAMESPACE},
            "spec": {"url": remote.url, "ref": "main", "path": format!("models/s{s}"), "interval": "1h"},
        });
        api.patch(
            &format!("s{s}"),
            &PatchParams::apply("bench"),
            &Patch::Apply(&source),
        )
        .await
        .expect("Source");
    }
    let head = format!("main@sha1:{}", remote.head_of_bare("main"));
    loop {
        if applied(&api, &head).await.len() == sources {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "never all applied"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let first_apply = started.elapsed();
    let start_peak: f64 = replicas.iter().map(|r| r.proc_status("VmHWM:")).sum();

    // Quiet: nothing changes for 30 s (6 s in a smoke run).
    tokio::time::sleep(Duration::from_secs(mode::size(10, 2))).await;
    let steady: Vec<f64> = replicas.iter().map(|r| r.proc_status("VmRSS:")).collect();
    let watches: Vec<f64> = replicas
        .iter()
        .map(|r| r.metric("tether_watches "))
        .collect();
    let cpu0: Vec<Duration> = replicas.iter().map(Daemon::cpu).collect();
    let offsets: Vec<u64> = audits.iter().map(|a| audit_size(a)).collect();
    let quiet = Duration::from_secs(mode::size(30, 6));
    tokio::time::sleep(quiet).await;
    let cpu1: Vec<Duration> = replicas.iter().map(Daemon::cpu).collect();
    let mut quiet_requests: BTreeMap<String, usize> = BTreeMap::new();
    for (audit, offset) in audits.iter().zip(offsets) {
        for (what, n) in requests_since(audit, offset) {
            *quiet_requests.entry(what).or_default() += n;
        }
    }

    // One commit changing every Source, announced to one replica.
    let changed = models(sources, objects, clusters.len(), "v2");
    let changed: Vec<(&str, &str)> = changed
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    remote.push("main", &changed);
    let head = format!("main@sha1:{}", remote.head_of_bare("main"));
    let body = serde_json::json!({"repository": remote.url, "ref": "refs/heads/main"}).to_string();
    let headers = [("X-Signature-256", sign(body.as_bytes(), SECRET.as_bytes()))];
    let pushed = Instant::now();
    let (code, _) = http(
        replicas[0].port,
        "POST",
        "/hook/generic",
        &headers,
        body.as_bytes(),
    );
    assert_eq!(code, 202, "the webhook is taken");
    let mut when: BTreeMap<String, Duration> = BTreeMap::new();
    while when.len() < sources {
        for name in applied(&api, &head).await {
            when.entry(name).or_insert_with(|| pushed.elapsed());
        }
        assert!(
            pushed.elapsed() < Duration::from_secs(1800),
            "the push was never applied everywhere ({} of {sources})",
            when.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut latencies: Vec<Duration> = when.into_values().collect();
    latencies.sort();

    let total: f64 = steady.iter().sum();
    println!(
        "tether run --sources --shard: {sources} Sources of {objects} ConfigMaps each, {} replicas, {} control planes",
        replicas.len(),
        clusters.len()
    );
    println!(
        "  first apply of all (Sources created → all applied)     {:>8.1} s",
        first_apply.as_secs_f64()
    );
    println!(
        "  RSS steady per replica {} MiB; {:.1} MiB in all, {:.0} KiB per Source beyond the idle replicas' {idle:.1} MiB; peak {start_peak:.1} MiB in all",
        steady
            .iter()
            .map(|m| format!("{m:.1}"))
            .collect::<Vec<_>>()
            .join(" / "),
        total,
        (total - idle).max(0.0) * 1024.0 / sources as f64
    );
    println!(
        "  watches per replica: {}",
        watches
            .iter()
            .map(|w| format!("{w:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    let cpu: Vec<String> = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(a, b)| {
            format!(
                "{:.1}",
                (*b - *a).as_secs_f64() * 1000.0 / quiet.as_secs_f64()
            )
        })
        .collect();
    println!(
        "  quiet state: CPU per replica {} ms per s; API requests in {} s by all replicas, in all clusters: {}",
        cpu.join(" / "),
        quiet.as_secs(),
        if quiet_requests.is_empty() {
            "none".to_string()
        } else {
            quiet_requests
                .iter()
                .map(|(what, n)| format!("{n} {what}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    println!(
        "  one push changing all {sources} → each applied, p50 / p99 / worst  {:.1} / {:.1} / {:.1} s",
        percentile(&latencies, 50).as_secs_f64(),
        percentile(&latencies, 99).as_secs_f64(),
        latencies.last().copied().unwrap_or_default().as_secs_f64()
    );
}
