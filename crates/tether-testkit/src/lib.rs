//! What tether's tests and benchmarks share (a dev-dependency only): for now, where
//! the binaries under test are that their own package does not build.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

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
