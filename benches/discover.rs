//! Discovery against a local control plane this benchmark starts:
//! - latency in `--watch` mode: from a pod's status turning Running (with its IP) to
//!   the commit that records it on the local branch, with `--debounce 0s` (add the
//!   window you configure);
//! - a full `--once` discovery of 1,000 pods into a repo (first commit, then a run
//!   with nothing changed).
//!
//! Pods are bound to a node that does not exist and their status is written by the
//! benchmark, standing in for a kubelet. Run with `cargo bench --bench discover`
//! (`-- --pods 1000 --samples 20` to change the sizes); a smoke run (`cargo test
//! --bench discover`) takes 10 pods and 3 samples.

// Shared by the benchmarks; each uses part of it.
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use tether_testkit::cluster::LocalCluster;

fn main() {
    let pods = mode::arg("--pods", 1000, 10);
    let samples = mode::arg("--samples", 20, 3);
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let cluster = LocalCluster::start(0);
    let kubeconfig = cluster.kubeconfig().to_path_buf();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = runtime.block_on(cluster.client());
    println!(
        "tether discover on a local kube-apiserver {} (2 cores)",
        cluster.release()
    );

    runtime.block_on(kube_helpers::namespace(&client, "bench-watch"));
    let latencies = runtime.block_on(watch_latency(&client, &kubeconfig, "bench-watch", samples));
    report_latency(
        &format!("{samples} pods, one at a time, in an empty namespace"),
        latencies,
    );

    runtime.block_on(kube_helpers::make_pods(&client, "bench-once", pods));
    let repo = Repo::new();
    let first = time(|| repo.discover(&kubeconfig, &["--once", "-n", "bench-once"]));
    let again = time(|| repo.discover(&kubeconfig, &["--once", "-n", "bench-once"]));
    let files = repo.pod_files("bench-once");
    assert_eq!(files, pods, "every pod has its file");
    println!(
        "once: {pods} pods: first discovery (writes and commits {files} pod files) {} ms; again, nothing changed (no commit) {} ms",
        first.as_millis(),
        again.as_millis()
    );

    let latencies = runtime.block_on(watch_latency(&client, &kubeconfig, "bench-once", samples));
    report_latency(
        &format!("{samples} pods, one at a time, beside {pods} others"),
        latencies,
    );
}

fn report_latency(what: &str, mut latencies: Vec<Duration>) {
    latencies.sort();
    println!(
        "watch: pod Running → commit on the local branch (debounce 0s), {what}: median {} ms, p90 {} ms, max {} ms",
        latencies[latencies.len() / 2].as_millis(),
        latencies[latencies.len() * 9 / 10].as_millis(),
        latencies[latencies.len() - 1].as_millis()
    );
}

async fn watch_latency(
    client: &Client,
    kubeconfig: &Path,
    ns: &str,
    samples: usize,
) -> Vec<Duration> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let repo = Repo::new();
    let watch = kube_helpers::Killed(
        repo.spawn_discover(kubeconfig, &["--watch", "--debounce", "0s", "-n", ns]),
    );
    // Let the watch start and make its first (empty) pass.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        let name = format!("watched-{i:03}");
        let ip = format!("10.9.0.{}", i + 1);
        kube_helpers::create_pod(&api, &name).await;
        // Let the Pending pod be committed first: what is timed is the Running update.
        repo.wait_for(&format!("discovered/{ns}/pods/{name}.yaml"), "xos_managed")
            .await;
        let started = Instant::now();
        kube_helpers::report_running(&api, &name, &ip).await;
        repo.wait_for(
            &format!("discovered/{ns}/pods/{name}.yaml"),
            &format!("pod_ip: \"{ip}\""),
        )
        .await;
        latencies.push(started.elapsed());
    }
    drop(watch);
    latencies
}

fn time(f: impl FnOnce()) -> Duration {
    let started = Instant::now();
    f();
    started.elapsed()
}

/// A local models repo that discovery commits to.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("repo dir");
        let git = |args: &[&str]| {
            let status = Command::new("git")
                .args([
                    "-c",
                    "user.name=b",
                    "-c",
                    "user.email=b@x",
                    "-c",
                    "init.defaultBranch=main",
                ])
                .args(args)
                .current_dir(dir.path())
                .status()
                .expect("git");
            assert!(status.success());
        };
        git(&["init", "-q"]);
        std::fs::write(
            dir.path().join("base.yaml"),
            "kind: KubernetesService\nname: kubernetes\n",
        )
        .expect("write");
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "models"]);
        Repo { dir }
    }

    fn command(&self, kubeconfig: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
        command
            .arg("discover")
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg(self.dir.path())
            .stdout(Stdio::null());
        command
    }

    fn discover(&self, kubeconfig: &Path, args: &[&str]) {
        let status = self.command(kubeconfig, args).status().expect("tether");
        assert!(status.success());
    }

    fn spawn_discover(&self, kubeconfig: &Path, args: &[&str]) -> Child {
        self.command(kubeconfig, args).spawn().expect("tether")
    }

    /// Waits until the branch's committed file at `path` contains `text` (read with
    /// git2 from the commit, not from the working tree).
    async fn wait_for(&self, path: &str, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.committed(path).is_some_and(|t| t.contains(text)) {
                return;
            }
            assert!(Instant::now() < deadline, "{path} never had {text}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn committed(&self, path: &str) -> Option<String> {
        let repo = git2::Repository::open(self.dir.path()).ok()?;
        let tree = repo.head().ok()?.peel_to_tree().ok()?;
        let blob = repo
            .find_blob(tree.get_path(Path::new(path)).ok()?.id())
            .ok()?;
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    }

    fn pod_files(&self, ns: &str) -> usize {
        let dir: PathBuf = self.dir.path().join(format!("discovered/{ns}/pods"));
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }
}
