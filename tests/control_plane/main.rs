//! Tests of the scripts that start heavy things of their own: `scripts/local-cluster`
//! itself (`local_cluster`: up, down and watchdog, two side by side, an API server
//! stopped mid-apply), `scripts/demo` (`demo`), `tether install` and
//! `uninstall` (`install`), `scripts/image` (`image`: the
//! release build, pushed to a registry and run from its own root filesystem), and the
//! real node (`real_node`: containers, and the daemon in a pod of that image;
//! `revert`: a rollout that fails its probes, reverted), and the
//! book's pages that need a cluster, run as written (`getting_started`: on your own
//! cluster, on the real node; `install_page`). A
//! binary of their own, so that `cargo test` runs them after the shared control
//! plane's tests (`tests/cluster`) instead of beside them: a dozen control planes
//! starting at once on two cores made the timing of the cluster tests' waves and
//! placements flaky.

mod cli;
mod demo;
mod getting_started;
mod image;
mod install;
mod install_page;
mod local_cluster;
mod real_node;
mod revert;
