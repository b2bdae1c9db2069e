//! What a run is made of and what it does to it: a control plane of its own, a Git
//! remote, sharded replicas of `tether run` (each reaching the API server through a
//! proxy of its own, and announced to the others through another), and the faults:
//! a cgroup CPU quota, signals, silenced proxies, the API server stopped.

use std::collections::BTreeSet;
use std::io::{Read, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tether_testkit::cluster::LocalCluster;
use tether_testkit::proxy::CutProxy;
use tether_testkit::remote::free_port;

use crate::schedule::Kind;

pub const NAMESPACE: &str = "faults";
pub const SECRET: &str = "the-webhook-secret-of-the-fault-run";
/// The replicas' Lease duration (the daemon's default).
pub const LEASE: Duration = Duration::from_secs(10);
/// The Sources' interval: what applies a push a replica missed the webhook of.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// One replica of the sharded daemon.
pub struct Replica {
    pub name: String,
    pub port: u16,
    /// Its way to the API server.
    pub to_api: CutProxy,
    /// The others' way to its webhooks (its announced address).
    pub from_peers: CutProxy,
    kubeconfig: tempfile::NamedTempFile,
    secret: tempfile::NamedTempFile,
    cache: tempfile::TempDir,
    pub log: PathBuf,
    process: Option<Child>,
}

impl Replica {
    pub fn new(cluster: &LocalCluster, name: &str, logs: &Path) -> Replica {
        let to_api = CutProxy::start(cluster.api_server_address());
        let kubeconfig = cluster.kubeconfig_through(to_api.port());
        let port = free_port();
        let from_peers = CutProxy::start(([127, 0, 0, 1], port).into());
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), format!("{SECRET}\n")).unwrap();
        let mut replica = Replica {
            name: name.into(),
            port,
            to_api,
            from_peers,
            kubeconfig,
            secret,
            cache: tempfile::tempdir().unwrap(),
            log: logs.join(format!("{name}.log")),
            process: None,
        };
        replica.start();
        replica
    }

    /// Starts the process (again), logging at info (appended to its log).
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        // TETHER_TEST_BIN runs another build (today's main, to see a fix's test fail).
        let binary = std::env::var_os("TETHER_TEST_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_tether")),
            PathBuf::from,
        );
        let child = Command::new(binary)
            .args(["run", "--log-format", "json", "--log-level", "info"])
            .args(["--sources", "--sources-namespace", NAMESPACE, "--shard"])
            .args(["--identity", &self.name, "--lease-namespace", NAMESPACE])
            // Its own cluster's KubernetesService: the far one is a Cluster resource.
            .args(["--cluster-name", "kubernetes"])
            .arg(format!("--lease-duration={}s", LEASE.as_secs()))
            .arg(format!("--listen=127.0.0.1:{}", self.port))
            .arg(format!(
                "--advertise-url=http://127.0.0.1:{}",
                self.from_peers.port()
            ))
            .arg("--webhook-secret-file")
            .arg(self.secret.path())
            .arg("--cache-dir")
            .arg(self.cache.path())
            .arg("--kubeconfig")
            .arg(self.kubeconfig.path())
            .env("TETHER_COLOR", "never")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.process = Some(child);
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    pub fn signal(&self, name: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([&format!("-{name}"), &pid.to_string()])
                .status();
        }
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM; how long the process took to exit (`None`: not within `within`, and
    /// then killed).
    pub fn terminate(&mut self, within: Duration) -> Option<Duration> {
        let mut child = self.process.take()?;
        let started = std::time::Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        while started.elapsed() < within {
            if let Ok(Some(_)) = child.try_wait() {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    pub fn is_running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Announces a push of `url`'s `main` to this replica's webhook.
    pub fn announce(&self, url: &str) -> Option<u16> {
        let body = serde_json::json!({"repository": url, "ref": "refs/heads/main"}).to_string();
        let signature = tether_api::webhook::sign(body.as_bytes(), SECRET.as_bytes());
        let request = format!(
            "POST /hook/generic HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nX-Signature-256: {signature}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        request_with_timeout(self.port, &request, Duration::from_secs(3)).map(|(code, _)| code)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill();
    }
}

/// The Sources whose series the metrics of the replica on `port` hold (it ran a pass
/// of them since it took them); `None` when it does not answer within 2 s.
pub fn running(port: u16) -> Option<BTreeSet<String>> {
    let (code, text) = get(port, "/metrics", Duration::from_secs(2))?;
    if code != 200 {
        return None;
    }
    let prefix = format!("tether_reconciles_total{{source=\"{NAMESPACE}/");
    Some(
        text.lines()
            .filter_map(|line| line.strip_prefix(&prefix)?.split_once('"'))
            .map(|(name, _)| name.to_string())
            .collect(),
    )
}

/// A GET of `path` on 127.0.0.1:`port`, given up after `timeout`.
fn get(port: u16, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    request_with_timeout(port, &request, timeout)
}

fn request_with_timeout(port: u16, request: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// A cgroup (v1 `cpu` controller) whose processes get 5% of a core while starved.
pub struct Quota {
    dir: PathBuf,
    /// Where its processes go back to: the test process's own cgroup.
    home: PathBuf,
}

const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";

impl Quota {
    pub fn new(name: &str) -> Quota {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own
            .lines()
            .find_map(|line| {
                let (_, rest) = line.split_once(':')?;
                let (controllers, path) = rest.split_once(':')?;
                controllers
                    .split(',')
                    .any(|c| c == "cpu")
                    .then(|| path.to_string())
            })
            .expect("this process's cpu cgroup (cgroup v1)");
        let home = Path::new(CPU_CGROUPS).join(path.trim_start_matches('/'));
        let dir = home.join(format!("tether-faults-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (the fault run needs root)", dir.display()));
        Quota { dir, home }
    }

    /// `pid` (all its threads) gets 5% of a core.
    pub fn starve(&self, pid: u32) {
        write(&self.dir.join("cpu.cfs_period_us"), "100000");
        write(&self.dir.join("cpu.cfs_quota_us"), "5000");
        write(&self.dir.join("cgroup.procs"), &pid.to_string());
    }

    /// Every process of the cgroup back home, unlimited.
    pub fn feed(&self) {
        write(&self.dir.join("cpu.cfs_quota_us"), "-1");
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.home.join("cgroup.procs"), pid);
        }
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        self.feed();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The pid of etcd of `cluster`, as `scripts/local-cluster` recorded it.
pub fn etcd_pid(cluster: &LocalCluster) -> u32 {
    let pids = std::fs::read_to_string(cluster.state_dir().join("pids")).unwrap();
    pids.lines()
        .find_map(|line| {
            let (pid, name) = line.split_once(' ')?;
            (name.trim() == "etcd").then(|| pid.parse().ok())?
        })
        .expect("etcd's pid")
}

/// Which replicas a fault holds now (by name), for the samples' `live`.
#[derive(Clone, Default)]
pub struct Faulted(Arc<Mutex<BTreeSet<String>>>);

impl Faulted {
    pub fn set(&self, replica: &str, faulted: bool) {
        let mut set = self.0.lock().unwrap();
        match faulted {
            true => set.insert(replica.to_string()),
            false => set.remove(replica),
        };
    }

    pub fn get(&self) -> BTreeSet<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A fault's words, for the timeline.
pub fn label(kind: Kind, replica: Option<&str>, lasts: Duration) -> String {
    let what = match kind {
        Kind::Starve => "CPU quota of 5% on",
        Kind::Pause => "SIGSTOP of",
        Kind::Kill => "SIGKILL of",
        Kind::CutFromApi => "API server unreachable from",
        Kind::CutFromPeers => "webhooks unreachable on",
        Kind::ApiServerDown => "API server stopped",
        Kind::EtcdSlow => "CPU quota of 5% on etcd",
        Kind::FarDown => "the far cluster's API server stopped",
        Kind::FarCut => "the far cluster unreachable from every replica",
    };
    match replica {
        Some(replica) => format!("{what} {replica} for {} s", lasts.as_secs()),
        None => format!("{what} for {} s", lasts.as_secs()),
    }
}
