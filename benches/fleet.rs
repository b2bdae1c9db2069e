//! A fleet hub under 1,000 clusters' reports: a local control plane (kube-apiserver
//! and etcd) as the hub, every cluster joined (`tether_admin::fleet::join`:
//! its ServiceAccount, Role, RoleBinding, token and report), and simulated daemons,
//! each with its own token, writing a report of 20 Sources as `tether run
//! --fleet-hub-kubeconfig` does (a merge patch of the whole spec) at a 60 s heartbeat.
//! Measured: the hub's memory (RSS of kube-apiserver + etcd) and CPU while the
//! reports arrive, the time from a report's write to `tether fleet status` showing
//! it, and the time of `tether fleet status` itself.
//! Run with `cargo bench --bench fleet` (`-- --clusters 1000 --sources 20 --steady 60`);
//! a smoke run (`cargo test --bench fleet`): 10 clusters of 3 Sources, 10 s steady.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tether_testkit::cluster::LocalCluster;

#[path = "common/mode.rs"]
mod mode;
use mode::arg;

fn main() {
    let clusters = arg("--clusters", 1000, 10);
    let sources = arg("--sources", 20, 3);
    let steady = Duration::from_secs(arg("--steady", 60, 10) as u64);
    let tether = std::env::var_os("TETHER_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tether")));
    let hub = LocalCluster::start(0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(&hub, &tether, clusters, sources, steady));
}

/// The hub's processes: kube-apiserver and etcd, by pid.
fn hub_pids(hub: &LocalCluster) -> Vec<(String, u32)> {
    let text = std::fs::read_to_string(hub.state_dir().join("pids")).expect("pids");
    text.lines()
        .filter_map(|line| {
            let (pid, name) = line.split_once(' ')?;
            let pid = pid.parse().ok()?;
            matches!(name, "kube-apiserver" | "etcd").then(|| (name.to_string(), pid))
        })
        .collect()
}

/// CPU seconds (user + system) a process used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    let ticks: f64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    // USER_HZ is 100 on Linux.
    ticks / 100.0
}

/// A field of /proc/PID/status in MiB (VmRSS, VmHWM).
fn mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0)
        / 1024.0
}

fn hub_cpu(pids: &[(String, u32)]) -> f64 {
    pids.iter().map(|(_, pid)| cpu_seconds(*pid)).sum()
}

fn hub_rss(pids: &[(String, u32)]) -> f64 {
    pids.iter().map(|(_, pid)| mib(*pid, "VmRSS:")).sum()
}

fn reports(client: kube::Client) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("tether.dev", "v1alpha1", "ClusterReport");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "clusterreports");
    Api::namespaced_with(client, "tether-fleet", &resource)
}

/// Cluster `i`'s report of `sources` Sources at `round` (its revisions move with it).
fn report(i: usize, sources: usize, round: usize, marker: &str) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let sources: Vec<Value> = (0..sources)
        .map(|s| {
            let revision = format!("main@sha1:{:040x}", (i * 7919 + s * 31 + round) as u128);
            let failing = (i + s + round).is_multiple_of(97);
            json!({
                "namespace": format!("team-{}", s % 5),
                "name": format!("app-{s}"),
                "wanted": revision,
                "applied": revision,
                "ready": if failing { "False" } else { "True" },
                "reason": if failing { "ObjectsFailed" } else { "ReconciliationSucceeded" },
                "message": if failing {
                    format!("1 object failed: Deployment team/app-{s}: admission webhook denied the request {marker}")
                } else {
                    format!("Applied revision {revision} {marker}")
                },
                "stalled": false,
                "reconciling": false,
                "suspended": false,
                "counts": {"created": 0, "configured": round % 3, "unchanged": 40, "pruned": 0, "failed": u32::from(failing)},
                "lastSuccess": now,
            })
        })
        .collect();
    json!({"spec": {"reportedAt": now, "version": "0.1.0", "heartbeatSeconds": 60, "sources": sources}})
}

async fn write(api: &Api<DynamicObject>, name: &str, body: Value) -> Result<(), kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
}

async fn run(hub: &LocalCluster, tether: &Path, clusters: usize, sources: usize, steady: Duration) {
    let admin = hub.client().await;
    let pids = hub_pids(hub);
    let server = {
        let kubeconfig = kube::config::Kubeconfig::read_from(hub.kubeconfig()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("config");
        tether_admin::fleet::server_of(&config)
    };
    println!(
        "fleet hub: {clusters} clusters × {sources} Sources; kube-apiserver {} + etcd on one machine (2 cores shared)",
        hub.release()
    );
    println!(
        "hub at start: RSS {:.0} MiB (kube-apiserver + etcd)",
        hub_rss(&pids)
    );

    // Every cluster joins, 8 at a time; each gets its own token.
    let dir = tempfile::tempdir().expect("dir");
    let started = Instant::now();
    let names: Vec<String> = (0..clusters).map(|i| format!("c{i:04}")).collect();
    let joined: Vec<(String, PathBuf)> = futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let admin = admin.clone();
            let server = server.clone();
            let path = dir.path().join(format!("{name}.yaml"));
            async move {
                let joined = tether_admin::fleet::join(&admin, "tether-fleet", &name, &server)
                    .await
                    .unwrap_or_else(|e| panic!("join {name}: {e:?}"));
                std::fs::write(&path, joined.kubeconfig).expect("write kubeconfig");
                (name, path)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    println!(
        "joined {clusters} clusters in {:.1} s; hub RSS {:.0} MiB",
        started.elapsed().as_secs_f64(),
        hub_rss(&pids)
    );
    let mut writers = Vec::new();
    for (name, path) in &joined {
        let client = tether_testkit::cluster::client(path).await.expect("client");
        writers.push((name.clone(), reports(client)));
    }

    // The first report of each.
    let started = Instant::now();
    let cpu = hub_cpu(&pids);
    futures::stream::iter(writers.iter().enumerate())
        .for_each_concurrent(16, |(i, (name, api))| async move {
            write(api, name, report(i, sources, 0, ""))
                .await
                .expect("first report");
        })
        .await;
    let took = started.elapsed().as_secs_f64();
    println!(
        "first reports: {clusters} in {took:.1} s ({:.0}/s); hub CPU {:.2} cores; RSS {:.0} MiB",
        clusters as f64 / took,
        (hub_cpu(&pids) - cpu) / took,
        hub_rss(&pids)
    );

    // Steady state: each cluster reports once per 60 s heartbeat, spread evenly.
    let interval = Duration::from_secs(60).div_f64(clusters as f64);
    let cpu = hub_cpu(&pids);
    let started = Instant::now();
    let mut peak_rss: f64 = 0.0;
    let mut written = 0usize;
    let mut ticker = tokio::time::interval(interval);
    let mut sampled = Instant::now();
    let mut sent = Vec::new();
    while started.elapsed() < steady {
        ticker.tick().await;
        let i = written % clusters;
        let (name, api) = &writers[i];
        let (name, api, body) = (
            name.clone(),
            api.clone(),
            report(i, sources, 1 + written / clusters, ""),
        );
        sent.push(tokio::spawn(async move { write(&api, &name, body).await }));
        written += 1;
        if sampled.elapsed() > Duration::from_secs(1) {
            peak_rss = peak_rss.max(hub_rss(&pids));
            sampled = Instant::now();
        }
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = hub_cpu(&pids) - cpu;
    for report in sent {
        report
            .await
            .expect("a report's task")
            .expect("a steady report");
    }
    println!(
        "steady state ({:.0} s, {:.1} reports/s): hub CPU {:.2} cores (goal ≤ 0.5); RSS peak {:.0} MiB (goal ≤ 256), now {:.0} MiB",
        took,
        written as f64 / took,
        cpu / took,
        peak_rss.max(hub_rss(&pids)),
        hub_rss(&pids)
    );
    for (name, pid) in &pids {
        println!(
            "  {name}: RSS {:.0} MiB, peak {:.0} MiB",
            mib(*pid, "VmRSS:"),
            mib(*pid, "VmHWM:")
        );
    }

    // `tether fleet status`: its time, and from a report's write to the view showing it.
    let status = |format: &str| {
        let started = Instant::now();
        let output = Command::new(tether)
            .args(["fleet", "status", "-o", format, "--hub-kubeconfig"])
            .arg(hub.kubeconfig())
            .output()
            .expect("tether fleet status");
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (started.elapsed(), output.stdout)
    };
    let mut times: Vec<Duration> = (0..3).map(|_| status("text").0).collect();
    times.sort();
    let (_, json_out) = status("json");
    let view: Value = serde_json::from_slice(&json_out).expect("the view as JSON");
    println!(
        "tether fleet status: median {:.2} s over {} clusters, {} Sources ({:.1} MiB of JSON)",
        times[1].as_secs_f64(),
        view["summary"]["clusters"],
        view["summary"]["sources"],
        json_out.len() as f64 / (1024.0 * 1024.0)
    );
    let mut latencies = Vec::new();
    for round in 0..3 {
        let i = (round * 331) % clusters;
        let marker = format!("marker-{round}-{}", std::process::id());
        let (name, api) = &writers[i];
        let started = Instant::now();
        write(api, name, report(i, sources, 1000 + round, &marker))
            .await
            .expect("report");
        loop {
            let (_, out) = status("json");
            if String::from_utf8_lossy(&out).contains(&marker) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "cluster {name}'s report was not shown in 120 s"
            );
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "a report's write to the view showing it: median {:.2} s, worst {:.2} s (each a full `tether fleet status`)",
        latencies[1].as_secs_f64(),
        latencies[2].as_secs_f64()
    );
}
