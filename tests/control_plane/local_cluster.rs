//! scripts/local-cluster itself: up and down leave nothing behind, and two control
//! planes in different state directories run side by side.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tether_testkit::cluster::{LocalCluster, binaries, script};

fn run(args: &[&str], state_dir: &Path) -> String {
    let output = script()
        .args(args)
        .arg("--state-dir")
        .arg(state_dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "local-cluster {args:?} failed");
    String::from_utf8(output.stdout).unwrap()
}

/// The pids `up` recorded, and the ports in its kubeconfig and command lines.
fn started(state_dir: &Path) -> (Vec<u32>, Vec<u16>) {
    let pids: Vec<u32> = std::fs::read_to_string(state_dir.join("pids"))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    let mut ports = Vec::new();
    for pid in &pids {
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        for arg in cmdline.split('\0') {
            for part in arg.split(',') {
                if let Some(port) = part.strip_prefix("http://127.0.0.1:") {
                    ports.push(port.parse().unwrap());
                }
            }
        }
        if let Some(i) = cmdline.split('\0').position(|a| a == "--secure-port")
            && let Some(port) = cmdline
                .split('\0')
                .nth(i + 1)
                .and_then(|p| p.parse().ok())
                .filter(|p| *p != 0)
        {
            ports.push(port);
        }
    }
    ports.sort();
    ports.dedup();
    (pids, ports)
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Is the process running? A zombie (exited, not yet reaped by init) is not.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The processes listening on `port` (TCP, any address), with their command lines:
/// the LISTEN sockets of `/proc/net/tcp` and `tcp6`, and the processes that hold them.
fn listeners(port: u16) -> Vec<(u32, String)> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|table| {
            std::fs::read_to_string(table)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit_once(':')?.1;
            let listening = fields.get(3) == Some(&"0A");
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| fields.get(9).map(|i| (*i).to_string()))
                .flatten()
        })
        .collect();
    let mut holders = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.filter_map(Result::ok).any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| {
                inodes
                    .iter()
                    .any(|inode| target.to_string_lossy() == format!("socket:[{inode}]"))
            })
        });
        if holds {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            holders.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    holders
}

/// The control plane of `state_dir` is gone: its processes, and any listener on its
/// ports that is its own (every process it starts names its state directory). Another
/// test's control plane may have been given one of the ports since.
fn assert_gone(state_dir: &Path, pids: &[u32], ports: &[u16]) {
    for pid in pids {
        assert!(!running(*pid), "process {pid} is still running");
    }
    let state_dir = state_dir.to_string_lossy();
    for port in ports {
        if !listening(*port) {
            continue;
        }
        let own: Vec<(u32, String)> = listeners(*port)
            .into_iter()
            .filter(|(_, cmdline)| {
                cmdline.split(' ').any(|arg| {
                    arg.contains(&format!("{state_dir}/")) || arg.ends_with(state_dir.as_ref())
                })
            })
            .collect();
        assert!(own.is_empty(), "port {port} is still open: {own:?}");
    }
}

#[test]
fn up_and_down_ten_times_leave_no_process_and_no_port() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let kubeconfig = run(&["up"], dir.path());
        assert!(
            kubeconfig.trim().ends_with("kubeconfig"),
            "round {round}: {kubeconfig}"
        );
        let (pids, ports) = started(dir.path());
        assert_eq!(
            pids.len(),
            5,
            "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, tether-nodesim"
        );
        assert_eq!(
            ports.len(),
            3,
            "etcd client and peer ports, apiserver port: {ports:?}"
        );
        assert!(ports.iter().any(|p| listening(*p)));
        run(&["down"], dir.path());
        assert_gone(dir.path(), &pids, &ports);
    }
}

#[test]
fn two_control_planes_in_different_state_dirs_do_not_collide() {
    // Each in its own state directory, stopped and removed when dropped (also when
    // the test panics), and by the watchdog if the test process dies.
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| LocalCluster::start(1));
        let b = LocalCluster::start(1);
        (a.join().unwrap(), b)
    });
    let (pids_a, ports_a) = started(a.state_dir());
    let (pids_b, ports_b) = started(b.state_dir());
    assert!(
        ports_a.iter().all(|p| !ports_b.contains(p)),
        "{ports_a:?} vs {ports_b:?}"
    );
    let status = script()
        .arg("status")
        .arg("--state-dir")
        .arg(a.state_dir())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let (dir_a, dir_b) = (a.state_dir().to_path_buf(), b.state_dir().to_path_buf());
    a.down();
    assert_gone(&dir_a, &pids_a, &ports_a);
    // The other one is untouched by the first one's down.
    assert!(pids_b.iter().all(|pid| running(*pid)));
    b.down();
    assert_gone(&dir_b, &pids_b, &ports_b);
}

/// tether against its own control plane (this test stops the API server).
fn tether(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--request-timeout", "3s"])
        .output()
        .unwrap()
}

#[test]
fn an_api_server_stopped_mid_apply_gives_exit_2_and_the_next_apply_converges() {
    let cluster = LocalCluster::start(1);
    let kubeconfig = cluster.kubeconfig();
    let apiserver: u32 = std::fs::read_to_string(cluster.state_dir().join("pids"))
        .unwrap()
        .lines()
        .find(|l| l.ends_with(" kube-apiserver"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap();
    // Enough objects that the apply takes a while.
    let models = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: big\n",
    );
    for i in 0..1500 {
        text.push_str(&format!(
            "---\nkind: KubernetesConfigMap\nname: cm-{i}\ntrust_domain: big\ndata:\n  i: \"{i}\"\n"
        ));
    }
    std::fs::write(models.path().join("models.yaml"), text).unwrap();
    let path = models.path().to_str().unwrap();

    let child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["apply", path, "--request-timeout", "3s", "--kubeconfig"])
        .arg(kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Stop the API server once the first objects exist.
    let kubectl = binaries().join("kubectl");
    let started = std::time::Instant::now();
    loop {
        let count = Command::new(&kubectl)
            .args([
                "get",
                "configmaps",
                "-n",
                "big",
                "-o",
                "name",
                "--kubeconfig",
            ])
            .arg(kubeconfig)
            .output()
            .unwrap();
        if String::from_utf8_lossy(&count.stdout).lines().count() > 10 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the apply never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Command::new("kill")
        .args(["-STOP", &apiserver.to_string()])
        .status()
        .unwrap();
    // The server stays stopped while tether gives up (it must, within its timeouts).
    let waited = std::time::Instant::now();
    let interrupted = child.wait_with_output().unwrap();
    Command::new("kill")
        .args(["-CONT", &apiserver.to_string()])
        .status()
        .unwrap();
    assert!(
        waited.elapsed() < Duration::from_secs(120),
        "tether took {:?} to give up",
        waited.elapsed()
    );
    let stdout = String::from_utf8_lossy(&interrupted.stdout);
    let stderr = String::from_utf8_lossy(&interrupted.stderr);
    assert_eq!(
        interrupted.status.code(),
        Some(2),
        "stdout: {stdout}\nstderr: {stderr}"
    );

    let again = tether(kubeconfig, &["apply", path]);
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let diff = tether(kubeconfig, &["diff", path]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "converged: {}",
        String::from_utf8_lossy(&diff.stdout)
    );
}

/// A process that stands for the control plane's owner; killed (and reaped) when
/// dropped, so that a failing test does not keep a watchdog waiting.
struct Owner(std::process::Child);

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How the owner ends: killed and reaped, or exited and left a zombie (an orphan under
/// an init that does not reap looks the same to the watchdog).
#[derive(Clone, Copy, Debug)]
enum OwnerEnd {
    Reaped,
    Zombie,
}

#[test]
fn the_watchdog_stops_the_control_plane_when_its_owner_dies_even_without_its_state_dir() {
    for (delete_state, end) in [
        (false, OwnerEnd::Reaped),
        (true, OwnerEnd::Reaped),
        (false, OwnerEnd::Zombie),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let mut owner = Owner(Command::new("sleep").arg("600").spawn().unwrap());
        let up = script()
            .args([
                "up",
                "--owner-pid",
                &owner.0.id().to_string(),
                "--state-dir",
            ])
            .arg(&state)
            .output()
            .unwrap();
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
        let (pids, ports) = started(&state);
        assert_eq!(pids.len(), 5, "the control plane and the node simulator");
        if delete_state {
            std::fs::remove_dir_all(&state).unwrap();
        }
        match end {
            OwnerEnd::Reaped => {
                owner.0.kill().unwrap();
                owner.0.wait().unwrap();
            }
            // Killed, not waited for: it stays a zombie until the end of the case.
            OwnerEnd::Zombie => owner.0.kill().unwrap(),
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while pids.iter().any(|p| running(*p)) {
            assert!(
                std::time::Instant::now() < deadline,
                "{end:?} owner: still running: {pids:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_gone(&state, &pids, &ports);
    }
}

/// What the machine holds of a real node: its bridge, kube-proxy's and the kubelet's
/// iptables chains, mounts under the state directory, and the processes of its pods.
fn machine_traces(state_dir: &Path) -> Vec<String> {
    let mut traces = Vec::new();
    let link = Command::new("ip")
        .args(["link", "show", "tether0"])
        .output()
        .unwrap();
    if link.status.success() {
        traces.push("the bridge tether0".to_string());
    }
    for tool in ["iptables-save", "ip6tables-save"] {
        let rules = Command::new(tool).output().unwrap();
        let rules = String::from_utf8_lossy(&rules.stdout).into_owned();
        traces.extend(
            rules
                .lines()
                .filter(|l| l.contains("KUBE-"))
                .map(|l| format!("{tool}: {l}")),
        );
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let prefix = format!(" {}/", state_dir.display());
    traces.extend(
        mounts
            .lines()
            .filter(|l| l.contains(&prefix))
            .map(|l| format!("mount: {l}")),
    );
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.starts_with("httpd -f -p 8080")
            || cmdline.contains(&format!("{}/node", state_dir.display()))
        {
            traces.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    traces
}

#[test]
fn the_real_node_runs_containers_and_down_leaves_nothing_behind() {
    let _node = tether_testkit::cluster::real_node();
    let dir = tempfile::tempdir().unwrap();
    let forward_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let kubeconfig = run(&["up", "--nodes", "real"], dir.path());
    let kubeconfig = Path::new(kubeconfig.trim());
    let (pids, ports) = started(dir.path());
    let names = std::fs::read_to_string(dir.path().join("pids")).unwrap();
    for name in ["kubelet", "containerd", "kube-proxy", "docker-registry"] {
        assert!(
            names.lines().any(|l| l.ends_with(&format!(" {name}"))),
            "{names}"
        );
    }

    // A second real node on this machine is refused while this one runs, with why.
    let other = tempfile::tempdir().unwrap();
    let refused = script()
        .args(["up", "--nodes", "real", "--state-dir"])
        .arg(other.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("this machine's real node belongs to the control plane in"),
        "{said}"
    );
    assert!(
        !other.path().join("pids").exists()
            || std::fs::read_to_string(other.path().join("pids"))
                .unwrap()
                .is_empty()
    );

    // A container runs, as the workload image's own process.
    let cli = crate::cli::Cli { kubeconfig };
    let kubectl = |args: &[&str]| cli.kubectl_ok(args);
    kubectl(&[
        "run",
        "web",
        "--image=registry.tether.test/workload:1.0.0",
        "--port=8080",
    ]);
    kubectl(&["wait", "pod/web", "--for=condition=Ready", "--timeout=90s"]);
    let ip = kubectl(&["get", "pod", "web", "-o", "jsonpath={.status.podIP}"]);
    let answer = Command::new("curl")
        .args(["-fsS", &format!("http://{ip}:8080/version")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&answer.stdout).trim(),
        "workload 1.0.0"
    );
    assert!(
        !machine_traces(dir.path()).is_empty(),
        "the node left traces to clear"
    );

    run(&["down"], dir.path());
    assert_gone(dir.path(), &pids, &ports);
    assert_eq!(machine_traces(dir.path()), Vec::<String>::new());
    assert!(
        !Path::new("/run/tether-real-node").exists(),
        "the machine's claim is released"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        forward_before
    );
}
