//! The offline commands never look for a cluster: with the kubeconfig a FIFO (opening
//! it for reading blocks until a writer comes, so any read of it hangs) and the
//! in-cluster variables pointing at an address that never answers, `validate`,
//! `render`, `graph`, `schema` and `crd` finish at once.
//! A command that does need the cluster (`diff`) is caught by the same trap, which
//! shows the trap works.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The command with every way to a cluster leading into the trap.
fn trapped(home: &Path, fifo: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("KUBECONFIG", fifo)
        .env("KUBERNETES_SERVICE_HOST", "10.255.255.1")
        .env("KUBERNETES_SERVICE_PORT", "443")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The exit code, or `None` when it did not end within `limit` (then it is killed).
fn finish(mut child: Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn offline_commands_never_read_a_kubeconfig_or_reach_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kubeconfig");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    for args in [
        &["validate", "examples/models"][..],
        &["render", "examples/models"],
        &["render", "examples/openstack", "-o", "json"],
        &["graph", "examples/openstack", "--format", "dot"],
        &["schema"],
        &["crd"],
    ] {
        let code = finish(trapped(&home, &fifo, args), Duration::from_secs(20));
        assert_eq!(code, Some(0), "tether {args:?} did not finish offline");
    }
    // The trap catches a command that looks for the cluster.
    let diff = trapped(&home, &fifo, &["diff", "examples/models"]);
    assert_eq!(
        finish(diff, Duration::from_secs(3)),
        None,
        "diff should have blocked on the kubeconfig"
    );
}
