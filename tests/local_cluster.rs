//! scripts/local-cluster itself: up and down leave nothing behind, and two control
//! planes in different state directories run side by side.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-cluster")
}

fn run(args: &[&str], state_dir: &Path) -> String {
    let output = Command::new(script())
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

fn assert_gone(pids: &[u32], ports: &[u16]) {
    for pid in pids {
        assert!(!running(*pid), "process {pid} is still running");
    }
    for port in ports {
        assert!(!listening(*port), "port {port} is still open");
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
            3,
            "etcd, kube-apiserver, kube-controller-manager"
        );
        assert_eq!(
            ports.len(),
            3,
            "etcd client and peer ports, apiserver port: {ports:?}"
        );
        assert!(ports.iter().any(|p| listening(*p)));
        run(&["down"], dir.path());
        assert_gone(&pids, &ports);
    }
}

#[test]
fn two_control_planes_in_different_state_dirs_do_not_collide() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = std::thread::spawn({
        let a = a.path().to_path_buf();
        move || run(&["up"], &a)
    });
    run(&["up"], b.path());
    first.join().unwrap();
    let (pids_a, ports_a) = started(a.path());
    let (pids_b, ports_b) = started(b.path());
    assert!(
        ports_a.iter().all(|p| !ports_b.contains(p)),
        "{ports_a:?} vs {ports_b:?}"
    );
    let status = Command::new(script())
        .arg("status")
        .arg("--state-dir")
        .arg(a.path())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    run(&["down"], a.path());
    assert_gone(&pids_a, &ports_a);
    // The other one is untouched by the first one's down.
    assert!(pids_b.iter().all(|pid| running(*pid)));
    run(&["down"], b.path());
    assert_gone(&pids_b, &ports_b);
}
