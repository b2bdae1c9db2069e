//! What the benchmarks share: a local control plane of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-cluster")
}

/// Starts a control plane that stops when this process exits; returns its state
/// directory (keep it alive) and kubeconfig.
pub fn start_cluster() -> (tempfile::TempDir, PathBuf) {
    let state = tempfile::tempdir().expect("state dir");
    let up = Command::new(script())
        .args([
            "up",
            "--owner-pid",
            &std::process::id().to_string(),
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
    (state, kubeconfig)
}
