//! The book's "On your own cluster" page (`docs/book/src/getting-started/your-cluster.md`),
//! followed as written: its commands, in order, in one shell, against a local control
//! plane with the real node, whose registry serves the page's podinfo image under its
//! public name. The prerequisites the page installs (tether, a kind or minikube
//! cluster) are what the test provides: the binary under test and this cluster.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tether_testkit::book;
use tether_testkit::cluster::{LocalCluster, reader_path, real_node};

use crate::cli::{Cli, text};

#[test]
fn the_your_cluster_page_runs_as_written_and_its_source_keeps_the_repository_applied() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = book::page(root, "getting-started/your-cluster.md");
    let script = book::script(
        &page,
        &["cargo install", "kind create cluster", "minikube start"],
    );
    let node = real_node();
    let cluster = LocalCluster::start_real(&node);
    let home = tempfile::tempdir().unwrap();
    let path = reader_path(Path::new(env!("CARGO_BIN_EXE_tether")));
    let child = Command::new("bash")
        .args(["-c", &script])
        .current_dir(home.path())
        .env("PATH", path)
        .env("HOME", home.path())
        .env("KUBECONFIG", cluster.kubeconfig())
        // The daemon's log, shown when the page fails, says what each pass did.
        .env(
            "TETHER_LOG_LEVEL",
            "info,tether_daemon=debug,tether_engine::reconcile::cache=debug",
        )
        // Its own process group: the daemon the page starts in the background goes
        // with it, whatever happens.
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let group = format!("-{}", child.id());
    let out = child.wait_with_output().unwrap();
    // The page stops its daemon itself (`kill %1`, a SIGTERM): it exits within its
    // shutdown timeout and 5 s (25 s). Is any of the group left after that?
    let deadline = Instant::now() + Duration::from_secs(30);
    let left = loop {
        let left = Command::new("pgrep")
            .args(["-g", &group[1..]])
            .output()
            .unwrap();
        if !left.status.success() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let daemon_log =
        std::fs::read_to_string(home.path().join("hello-daemon.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- the daemon's log\n{daemon_log}"
    );

    // No warning from the API server on the way (the CRDs once carried integer
    // formats it does not know: `Warning: unrecognized format "uint32"`).
    assert!(!stderr.contains("Warning:"), "{stderr}");
    // What the page says the reader sees, and what the cluster holds after it.
    assert!(
        stdout.contains("Running"),
        "kubectl get pods shows podinfo running: {stdout}"
    );
    assert!(
        stdout.contains("No resources found") || stderr.contains("No resources found"),
        "the Service was pruned: {stdout}{stderr}"
    );
    let cli = Cli {
        kubeconfig: cluster.kubeconfig(),
    };
    let deployment = cli.json(&["get", "deployment", "podinfo", "-n", "hello"]);
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "Git's replicas, drift taken back"
    );
    assert_eq!(deployment["status"]["readyReplicas"], 2, "{deployment}");
    let pods = cli.json(&["get", "pods", "-n", "hello"]);
    for pod in pods["items"].as_array().unwrap() {
        assert_eq!(pod["spec"]["nodeName"], "tether-node", "on the real node");
        let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
        assert!(
            ip.starts_with("10.245.0."),
            "a real pod IP from the node's bridge: {ip}"
        );
    }
    let services = cli.json(&["get", "services", "-n", "hello"]);
    assert_eq!(services["items"].as_array().unwrap().len(), 0, "{services}");
    assert!(
        !left.status.success(),
        "the page's daemon still ran after the page stopped it: {}",
        text(&left.stdout)
    );
}
