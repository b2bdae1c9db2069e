//! What tether's tests and benchmarks share (a dev-dependency only):
//!
//! - [`browser`] (feature `browser`): headless Chromium over WebDriver, for the web
//!   page;
//! - [`snapshot`]: a snapshot file per test ([`snapshot::check`]) and directories of
//!   data-driven cases ([`snapshot::Cases`]), rewritten with `TETHER_BLESS=1`;
//! - [`git`], [`remote`] and [`git_http`]: the `git` CLI as the tests' second Git client, a remote
//!   served by `git daemon` or over smart HTTP, a plain HTTP client;
//! - [`githost`] (feature `githost`): a fake GitHub/GitLab API over HTTPS that
//!   validates every request against the host's official description;
//! - [`broker`]: a Kafka-protocol broker and an independent consumer;
//! - [`audit`]: the local control plane's audit log, entry by entry;
//! - [`book`]: the book's pages as the shell scripts a reader would run;
//! - [`charts`]: a chart signing key made by gpg, a chart repository served over HTTP;
//! - [`registry`]: an OCI registry (Debian's docker-registry) with its access log;
//! - [`sigstore`]: a private Sigstore's authority (openssl, cosign), its certificates
//!   and the bundles cosign signs with them;
//! - [`tools`]: the pinned Helm and Kustomize (`scripts/helm-tools`);
//! - [`cluster`] (feature `cluster`): local control planes (`scripts/local-cluster`),
//!   a client for a kubeconfig, polling until a condition holds; [`proxy`], a TCP
//!   proxy whose connections a test cuts.
//!
//! Without the feature `cluster` the kit depends on no kube, Git library or TLS, so
//! that the pure core's tests stay pure.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

pub mod audit;
pub mod book;
pub mod broker;
#[cfg(feature = "browser")]
pub mod browser;
pub mod charts;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod git;
pub mod git_http;
#[cfg(feature = "githost")]
pub mod githost;
#[cfg(feature = "cluster")]
pub mod proxy;
pub mod registry;
pub mod remote;
pub mod sigstore;
pub mod snapshot;
pub mod tools;

use std::path::Path;

/// The workspace's root, where `scripts/` and the shared test data are.
fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/tether-testkit is two levels below the workspace's root")
}
