//! One local control plane per test run (scripts/local-cluster) with one simulated
//! node (the shipped tether-nodesim), and a namespace per test. The control plane
//! stops by itself when the test process exits, however it exits (the script's
//! --owner-pid watchdog).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub struct Cluster {
    pub kubeconfig: PathBuf,
    /// The control plane's files; `logs/audit.log` has every write request.
    pub state_dir: PathBuf,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The run's control plane, started (and, on a fresh machine, installed) on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let state_dir =
            std::env::temp_dir().join(format!("tether-test-cluster-{}", std::process::id()));
        let output = Command::new(repo_root().join("scripts/local-cluster"))
            .arg("up")
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .envs(tether_testkit::nodesim_binary().map(|path| ("TETHER_NODESIM", path)))
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run scripts/local-cluster");
        assert!(output.status.success(), "scripts/local-cluster up failed");
        let stdout = String::from_utf8(output.stdout).expect("utf-8");
        let kubeconfig = PathBuf::from(stdout.lines().last().expect("kubeconfig path").trim());
        Cluster {
            kubeconfig,
            state_dir,
        }
    })
}

pub async fn client_for(kubeconfig: &Path) -> Result<Client, kube::Error> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).map_err(kube::Error::InferKubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    Client::try_from(config)
}

impl Cluster {
    /// A client on the calling test's runtime.
    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig)
            .await
            .expect("client for the local cluster")
    }

    /// What the simulated node does to a pod's container (`scripts/local-cluster pod
    /// restart|fail|finish`, as a user runs it); the container's restart count after it.
    pub async fn pod_action(
        &self,
        client: &Client,
        action: &str,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> i32 {
        let output = tokio::process::Command::new(repo_root().join("scripts/local-cluster"))
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
            .arg(&self.state_dir)
            .envs(tether_testkit::nodesim_binary().map(|path| ("TETHER_NODESIM", path)))
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

    /// A fresh namespace for one test, ready for pods (its default service account exists).
    pub async fn namespace(&self, client: &Client, test: &str) -> String {
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
}

/// Waits until `namespace` admits pods: its default service account has its token.
pub async fn pods_admitted(client: &Client, namespace: &str) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    eventually(Duration::from_secs(30), || async {
        accounts
            .get_opt("default")
            .await
            .ok()
            .flatten()
            .and_then(|sa| sa.secrets)
            .is_some_and(|s| !s.is_empty())
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

/// Polls `check` until it holds; panics after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
