//! Tests that start control planes of their own to test them: `scripts/local-cluster`
//! itself (`local_cluster`: up, down and watchdog, two side by side, an API server
//! stopped mid-apply) and `scripts/demo` (`demo`). A binary of their own, so that
//! `cargo test` runs them after the shared control plane's tests (`tests/cluster`)
//! instead of beside them: a dozen control planes starting at once on two cores
//! made the timing of the cluster tests' waves and placements flaky.

mod demo;
mod install;
mod local_cluster;
