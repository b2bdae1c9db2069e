//! The run's shared control plane (the test kit's `LocalCluster::shared`: one per test
//! process, one simulated node) and a namespace per test. The control plane stops by
//! itself when the test process exits, however it exits (the script's --owner-pid
//! watchdog).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
pub use tether_testkit::cluster::{LocalCluster, eventually};

pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The run's control plane, started (and, on a fresh machine, installed) on first use.
pub fn cluster() -> &'static LocalCluster {
    LocalCluster::shared()
}

/// What the simulated node does to a pod's container (`scripts/local-cluster pod
/// restart|fail|finish`, as a user runs it) on the run's control plane; the
/// container's restart count after it.
pub async fn pod_action(
    client: &Client,
    action: &str,
    namespace: &str,
    pod: &str,
    container: &str,
) -> i32 {
    let mut command = tether_testkit::cluster::script();
    command
        .args([
            "pod",
            action,
            pod,
            "-n",
            namespace,
            "-c",
            container,
            "--state-dir",
        ])
        .arg(cluster().state_dir());
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .expect("run scripts/local-cluster pod");
    assert!(
        output.status.success(),
        "local-cluster pod {action} {namespace}/{pod}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let status = pods.get_status(pod).await.expect("the pod").status;
    status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .find(|s| s.name == container)
        .map_or(0, |s| s.restart_count)
}

/// A fresh namespace for one test on the run's control plane, ready for pods (its
/// default service account exists).
pub async fn fresh_namespace(client: &Client, test: &str) -> String {
    let suffix: u32 = rand_suffix();
    let name = format!("{}-{suffix:08x}", test.replace('_', "-"))
        .chars()
        .take(63)
        .collect::<String>();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.clone());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");
    pods_admitted(client, &name).await;
    name
}

/// Waits until `namespace` admits pods: its default service account exists (the
/// ServiceAccount admission refuses pods before; the token is projected, no Secret).
pub async fn pods_admitted(client: &Client, namespace: &str) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    eventually(Duration::from_secs(30), || async {
        accounts.get_opt("default").await.ok().flatten().is_some()
    })
    .await;
}

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish() as u32
}

/// The tether binary the tests run: `CARGO_BIN_EXE_tether`, or `TETHER_TEST_BIN`
/// (a copy of it, when several checkouts share one target directory and another
/// build may replace the binary while the tests run).
pub fn tether_binary() -> std::path::PathBuf {
    std::env::var_os("TETHER_TEST_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_tether")))
}

/// A process a test started (tether --watch), killed when dropped, also when the test
/// fails.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
