//! Local control planes (`scripts/local-cluster`: etcd, kube-apiserver,
//! kube-controller-manager and the node simulator on loopback, or the machine's real
//! node) and clients for them.
//! Every control plane started here is owned by the test process (`--owner-pid`): the
//! script's watchdog stops it when the process exits, however it exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// `scripts/local-cluster`, given the node simulator `cargo test` built
/// (as `TETHER_NODESIM`) so that it does not build one.
pub fn script() -> Command {
    let mut command = Command::new(crate::workspace_root().join("scripts/local-cluster"));
    command.envs(nodesim_binary().map(|path| ("TETHER_NODESIM", path)));
    command
}

/// The node simulator `cargo test` built beside the running test binary
/// (`target/<profile>/tether-nodesim`); `None` when it was not built, and then
/// `scripts/local-cluster` builds it itself.
fn nodesim_binary() -> Option<PathBuf> {
    let test_binary = std::env::current_exe().ok()?;
    // target/<profile>/deps/<test> or target/<profile>/<test>
    test_binary
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("tether-nodesim"))
        .find(|path| path.is_file())
}

/// The directory of the control plane's binaries, kubectl among them
/// (`scripts/local-cluster env`).
pub fn binaries() -> PathBuf {
    let output = script()
        .arg("env")
        .output()
        .expect("run scripts/local-cluster env");
    PathBuf::from(String::from_utf8(output.stdout).expect("utf-8").trim())
}

/// The PATH of a reader's shell, as the book's pages assume it: the directory of the
/// `tether` under test first, then the control plane's binaries (kubectl), then the
/// machine's.
pub fn reader_path(tether: &Path) -> String {
    format!(
        "{}:{}:{}",
        tether.parent().unwrap_or(tether).display(),
        binaries().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A control plane: the shared one of the test process ([`LocalCluster::shared`]), or
/// one of the caller's own ([`LocalCluster::start`]), stopped and removed when dropped.
pub struct LocalCluster {
    kubeconfig: PathBuf,
    state_dir: PathBuf,
    /// An own control plane's state directory, removed when dropped.
    own: Option<tempfile::TempDir>,
}

static SHARED: OnceLock<LocalCluster> = OnceLock::new();

impl LocalCluster {
    /// The test process's control plane with one simulated node, started (and, on a
    /// fresh machine, installed) on first use; the tests share it, each in namespaces
    /// of its own. It runs until the process exits.
    pub fn shared() -> &'static LocalCluster {
        SHARED.get_or_init(|| {
            let state_dir =
                std::env::temp_dir().join(format!("tether-test-cluster-{}", std::process::id()));
            let kubeconfig = up(&state_dir, "1");
            LocalCluster {
                kubeconfig,
                state_dir,
                own: None,
            }
        })
    }

    /// A control plane of the caller's own with `nodes` simulated nodes (0: none), for
    /// a test that changes what others would see (nodes, the API server itself) or a
    /// benchmark; stopped and its state directory removed when dropped.
    pub fn start(nodes: usize) -> LocalCluster {
        LocalCluster::own(&nodes.to_string())
    }

    /// A control plane of the caller's own with the machine's real node (kubelet,
    /// containerd, runc, a CNI bridge and kube-proxy; `scripts/local-cluster up --nodes
    /// real`): containers run. One real node per machine: take [`real_node`] first.
    pub fn start_real(_node: &RealNode) -> LocalCluster {
        LocalCluster::own("real")
    }

    /// `up --nodes NODES` in a temporary state directory of its own.
    fn own(nodes: &str) -> LocalCluster {
        let state = tempfile::tempdir().expect("a state directory");
        let kubeconfig = up(state.path(), nodes);
        LocalCluster {
            kubeconfig,
            state_dir: state.path().to_path_buf(),
            own: Some(state),
        }
    }

    /// The real node's registry, where a test pushes an image (`127.0.0.1:PORT`); pods
    /// pull from it as `registry.tether.test/…`.
    pub fn registry(&self) -> String {
        let output = script()
            .args(["registry", "--state-dir"])
            .arg(&self.state_dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/local-cluster registry");
        assert!(output.status.success(), "scripts/local-cluster registry");
        String::from_utf8(output.stdout)
            .expect("utf-8")
            .trim()
            .to_string()
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The Kubernetes release it runs, as its `/version` says it (`v1.37.2`).
    pub fn release(&self) -> String {
        let file = self.state_dir.join("release");
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        text.trim().to_string()
    }

    /// The control plane's files; `logs/audit.log` has every write request, `pids`
    /// the processes `up` started.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// A client on the calling test's runtime.
    pub async fn client(&self) -> Client {
        client(&self.kubeconfig)
            .await
            .expect("a client for the local control plane")
    }

    /// The API server's address (`127.0.0.1:PORT`), as the kubeconfig names it.
    pub fn api_server_address(&self) -> std::net::SocketAddr {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("the kubeconfig");
        text.lines()
            .find_map(|line| line.trim().strip_prefix("server: https://"))
            .and_then(|address| address.parse().ok())
            .expect("the kubeconfig names the API server at https://IP:PORT")
    }

    /// A kubeconfig like this control plane's that reaches it through `127.0.0.1:port`
    /// (a [`crate::proxy::CutProxy`] in front of it).
    pub fn kubeconfig_through(&self, port: u16) -> tempfile::NamedTempFile {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("the kubeconfig");
        let through = text.replace(
            &format!("server: https://{}", self.api_server_address()),
            &format!("server: https://127.0.0.1:{port}"),
        );
        let file = tempfile::NamedTempFile::new().expect("a kubeconfig file");
        std::fs::write(file.path(), through).expect("the kubeconfig written");
        file
    }

    /// kubectl (the control plane's own build) with `args`, which must succeed.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        let output = Command::new(binaries().join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// Stops the API server alone (`scripts/local-cluster apiserver stop`): clients get
    /// their connections refused; etcd keeps the state for [`LocalCluster::start_api_server`].
    pub fn stop_api_server(&self) {
        self.api_server("stop");
    }

    /// Starts the stopped API server again, on the same port with the same state, and
    /// waits until it is ready.
    pub fn start_api_server(&self) {
        self.api_server("start");
    }

    fn api_server(&self, action: &str) {
        let output = script()
            .args(["apiserver", action, "--state-dir"])
            .arg(&self.state_dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/local-cluster apiserver");
        assert!(
            output.status.success(),
            "scripts/local-cluster apiserver {action} failed"
        );
    }

    /// Stops the control plane (`scripts/local-cluster down`), which must succeed.
    pub fn down(&self) {
        let output = script()
            .args(["down", "--state-dir"])
            .arg(&self.state_dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/local-cluster down");
        assert!(output.status.success(), "scripts/local-cluster down failed");
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if self.own.is_some() {
            let _ = script()
                .args(["down", "--state-dir"])
                .arg(&self.state_dir)
                .output();
        }
    }
}

/// The machine's one real node, held by one test of this process at a time (the
/// script refuses a second one while the first runs).
pub struct RealNode {
    _held: std::sync::MutexGuard<'static, ()>,
}

/// Waits until no other test of this process holds the real node, and holds it.
pub fn real_node() -> RealNode {
    static NODE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    RealNode {
        _held: NODE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    }
}

/// `scripts/local-cluster up --nodes NODES` in `state_dir`, owned by this process; the
/// kubeconfig's path.
fn up(state_dir: &Path, nodes: &str) -> PathBuf {
    let output = script()
        .args(["up", "--nodes", nodes, "--owner-pid"])
        .arg(std::process::id().to_string())
        .arg("--state-dir")
        .arg(state_dir)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/local-cluster");
    assert!(
        output.status.success(),
        "scripts/local-cluster up failed (its messages are above)"
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    PathBuf::from(stdout.lines().last().expect("the kubeconfig's path").trim())
}

/// A client for the cluster of a kubeconfig file.
pub async fn client(kubeconfig: &Path) -> Result<Client, kube::Error> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).map_err(kube::Error::InferKubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    Client::try_from(config)
}

/// Polls `check` every 200 ms until it holds; panics after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
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

/// One kubeconfig with a context per control plane, each context (and its cluster and
/// user) named as given, the first one current: what a user with several clusters
/// has. Written to `path` (JSON, which is YAML).
pub fn kubeconfig_of(clusters: &[(&str, &LocalCluster)], path: &Path) {
    let mut merged = Kubeconfig::default();
    for (name, cluster) in clusters {
        let mut one = Kubeconfig::read_from(cluster.kubeconfig()).expect("a kubeconfig");
        for named in &mut one.clusters {
            named.name = (*name).to_string();
        }
        for named in &mut one.auth_infos {
            named.name = (*name).to_string();
        }
        for named in &mut one.contexts {
            named.name = (*name).to_string();
            if let Some(context) = &mut named.context {
                context.cluster = (*name).to_string();
                context.user = Some((*name).to_string());
            }
        }
        merged.clusters.extend(one.clusters);
        merged.auth_infos.extend(one.auth_infos);
        merged.contexts.extend(one.contexts);
    }
    merged.current_context = clusters.first().map(|(name, _)| (*name).to_string());
    merged.api_version = Some("v1".into());
    merged.kind = Some("Config".into());
    let text = serde_json::to_string_pretty(&merged).expect("a kubeconfig as JSON");
    std::fs::write(path, text).expect("write the kubeconfig");
}
