//! What the benchmarks share: a local control plane of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-cluster")
}

/// A control plane that stops when dropped (and, by the script's watchdog, when this
/// process exits however it exits).
pub struct LocalCluster {
    state: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

pub fn start_cluster() -> LocalCluster {
    let state = tempfile::tempdir().expect("state dir");
    let up = Command::new(script())
        .args([
            "up",
            "--owner-pid",
            &std::process::id().to_string(),
            // No simulated nodes: the benchmarks measure tether, not pods starting.
            "--nodes",
            "0",
            "--state-dir",
        ])
        .arg(state.path())
        .output()
        .expect("local-cluster up");
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let kubeconfig = PathBuf::from(String::from_utf8_lossy(&up.stdout).trim().to_string());
    LocalCluster { state, kubeconfig }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["down", "--state-dir"])
            .arg(self.state.path())
            .output();
    }
}
