//! What tether's tests and benchmarks share (a dev-dependency only):
//!
//! - [`snapshot`]: a snapshot file per test ([`snapshot::check`]) and directories of
//!   data-driven cases ([`snapshot::Cases`]), rewritten with `TETHER_BLESS=1`;
//! - [`nodesim_binary`]: where the node simulator is that `cargo test` built.

pub mod snapshot;

use std::path::PathBuf;

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
