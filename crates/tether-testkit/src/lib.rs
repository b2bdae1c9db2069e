//! What tether's tests and benchmarks share (a dev-dependency only): where the
//! workspace and the binaries under test are.

use std::path::PathBuf;

/// The workspace root (where `scripts/` and `examples/` are).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// The node simulator `cargo test` built beside the running test binary
/// (`target/<profile>/tether-nodesim`); `None` when it was not built, and then
/// `scripts/local-cluster` builds it itself.
pub fn nodesim_binary() -> Option<PathBuf> {
    let test_binary = std::env::current_exe().ok()?;
    // target/<profile>/deps/<test> or target/<profile>/<test>
    test_binary
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("tether-nodesim"))
        .find(|path| path.is_file())
}
