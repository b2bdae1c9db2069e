//! For the benchmarks against a control plane: namespaces ready for pods, pods
//! reported Running, the Source CRD established, a daemon's memory, and the processes
//! they start killed when they end.

use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::json;
use tether_api::source_spec::Source;

/// A namespace, once pods may be made in it (its default service account exists: the
/// ServiceAccount admission refuses pods before; its token is projected, no Secret).
pub async fn namespace(client: &Client, name: &str) {
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    while accounts.get_opt("default").await.ok().flatten().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Pending pod on a node nobody runs.
pub async fn create_pod(api: &Api<Pod>, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": "bench-node", "containers": [{"name": "app", "image": "nginx:1.25"}]},
    }))
    .expect("pod");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// The pod Running with an IP, as a kubelet would report it.
pub async fn report_running(api: &Api<Pod>, name: &str, ip: &str) {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status");
}

pub async fn make_pods(client: &Client, ns: &str, count: usize) {
    namespace(client, ns).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    stream::iter(0..count)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let ip = format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256);
                let name = format!("pod-{i:05}");
                create_pod(&api, &name).await;
                report_running(&api, &name, &ip).await;
            }
        })
        .await;
}

/// The Source CRD, created and waited for until established.
pub async fn install_source_crd(client: &Client) {
    install_crd(client, Source::crd()).await;
}

/// Creates `crd` and waits until it is served.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("a CRD's name");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("CRD");
    loop {
        let established = crds
            .get(&name)
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A field of a process's /proc/PID/status (`VmRSS:`, `VmHWM:`), in MiB; 0 when it
/// cannot be read.
pub fn process_memory(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// User and system CPU time a process and the children it waited for used so far
/// (/proc/PID/stat); zero when it cannot be read.
pub fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // utime and stime, then cutime and cstime: the children it waited for (the
    // `helm` and `kustomize` a tool runs) count as its own.
    let ticks: u64 = [11, 12, 13, 14]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// A process the benchmark started, killed when dropped (also when the benchmark
/// panics: a failed step leaves nothing running).
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `tether run` the benchmark started, killed when dropped.
pub struct Daemon {
    pub child: std::process::Child,
    /// Its `--listen` port on 127.0.0.1.
    pub port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// A field of its /proc/PID/status (`VmRSS:`, `VmHWM:`), in MiB.
    pub fn proc_status(&self, field: &str) -> f64 {
        process_memory(self.child.id(), field)
    }

    /// User and system CPU time so far.
    pub fn cpu(&self) -> Duration {
        process_cpu(self.child.id())
    }

    /// A series of its /metrics; 0 when it has none.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, text) = tether_testkit::remote::http(self.port, "GET", "/metrics", &[], b"");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}
