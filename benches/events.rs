//! Pod events to Kafka, against a local control plane and a tansu broker this
//! benchmark starts, read with kafka-python (the tests' independent client):
//! - latency: a pod's IP changes → its `updated` event is read by the consumer;
//! - throughput: 1,000 pod changes (IP updates, 16 at a time) → all 1,000 read.
//!
//! Pods sit on a node nobody runs; the benchmark writes their status as a kubelet
//! would. Run with `cargo bench --bench events` (`-- --pods 1000 --samples 20`); a
//! smoke run (`cargo test --bench events`) takes 10 pods and 3 samples.

// Shared by the benchmarks; each uses part of it.
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tether_testkit::broker::Broker;
use tether_testkit::cluster::LocalCluster;

fn main() {
    let pods = mode::arg("--pods", 1000, 10);
    let samples = mode::arg("--samples", 20, 3);
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let cluster = LocalCluster::start(0);
    let broker = Broker::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = runtime.block_on(cluster.client());
    let ns = "bench-events";
    runtime.block_on(kube_helpers::namespace(&client, ns));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    runtime.block_on(create_pods(&api, pods));

    let outbox = tempfile::tempdir().expect("outbox");
    let topic = "bench.pod-details";
    let tether = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["events", "--watch", "-n", ns])
        .args(["--kafka-brokers", &broker.address(), "--kafka-topic", topic])
        .arg("--outbox")
        .arg(outbox.path())
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .spawn()
        .expect("tether");
    let tether = kube_helpers::Killed(tether);
    // The consumer reads every message as it comes; each is stamped on arrival.
    let total = pods + samples + pods;
    let mut consumer = broker
        .consumer(topic, total, Duration::from_secs(600))
        .stdout(Stdio::piped())
        .spawn()
        .expect("consumer");
    let (sender, arrivals) = mpsc::channel::<(Instant, Value)>();
    let stdout = consumer.stdout.take().expect("stdout");
    let consumer = kube_helpers::Killed(consumer);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let value: Value = serde_json::from_str(&line).expect("json");
            if sender.send((Instant::now(), value)).is_err() {
                break;
            }
        }
    });
    // The created events of the pods made before tether started.
    wait_for(&arrivals, pods, |_| true);
    println!(
        "tether events → Kafka (tansu 0.6) on a local kube-apiserver {} (2 cores), read with kafka-python",
        cluster.release()
    );

    let mut latencies = Vec::new();
    for i in 0..samples {
        let name = format!("pod-{:05}", i % pods);
        let ip = format!("10.200.0.{}", i + 1);
        let started = Instant::now();
        runtime.block_on(set_ip(&api, &name, &ip));
        let arrived = wait_for(&arrivals, 1, |m| {
            m["value"]["netinterfaces"][0]["addresses"][0] == ip.as_str()
        });
        latencies.push(arrived - started);
    }
    latencies.sort();
    println!(
        "latency: pod IP change → event read by the consumer, {samples} samples: median {} ms, p90 {} ms, max {} ms",
        latencies[samples / 2].as_millis(),
        latencies[samples * 9 / 10].as_millis(),
        latencies[samples - 1].as_millis()
    );

    let started = Instant::now();
    runtime.block_on(async {
        stream::iter(0..pods)
            .for_each_concurrent(16, |i| {
                let api = api.clone();
                async move {
                    let ip = format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256);
                    set_ip(&api, &format!("pod-{i:05}"), &ip).await;
                }
            })
            .await;
    });
    let changed = started.elapsed();
    let last = wait_for(&arrivals, pods, |m| m["value"]["status"] == "updated");
    let took = last - started;
    println!(
        "throughput: {pods} pod changes (made in {} ms) → all {pods} events read in {} ms: {:.0} events/s",
        changed.as_millis(),
        took.as_millis(),
        pods as f64 / took.as_secs_f64()
    );
    drop((tether, consumer));
}

/// Waits for `count` messages that match; returns when the last one arrived.
fn wait_for(
    arrivals: &mpsc::Receiver<(Instant, Value)>,
    count: usize,
    matches: impl Fn(&Value) -> bool,
) -> Instant {
    let mut seen = 0;
    loop {
        let (at, message) = arrivals
            .recv_timeout(Duration::from_secs(120))
            .expect("events stopped coming");
        if matches(&message) {
            seen += 1;
            if seen == count {
                return at;
            }
        }
    }
}

async fn create_pods(api: &Api<Pod>, count: usize) {
    stream::iter(0..count)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("pod-{i:05}")},
                    "spec": {"nodeName": "bench-node", "containers": [{"name": "app", "image": "nginx:1.25"}]},
                }))
                .expect("pod");
                api.create(&PostParams::default(), &pod)
                    .await
                    .expect("create pod");
            }
        })
        .await;
}

async fn set_ip(api: &Api<Pod>, name: &str, ip: &str) {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status");
}
