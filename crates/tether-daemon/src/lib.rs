//! `tether run`: the continuous reconciler. Each source runs as its own loop
//! ([`source_loop`], under the engine's driver, one task each, so that a slow or
//! failing source never delays another); sources come from flags or from `Source`
//! resources ([`controller`]), with leader election ([`leader`]) or sharding
//! ([`members`], [`shard`]) when replicas run side by side. Drift is seen by watches
//! ([`drift`]), pushes arrive by webhook and go through the [`switchboard`] to the
//! loops, and [`http`] serves them with `/metrics`, `/readyz`, `/healthz` and the web
//! page ([`web`]).
//!
//! The crate's face is [`entry`]'s: the daemon's configuration as plain data and the
//! calls that run it. Beside it, two modules are public for what checks the daemon
//! from outside: [`shard`]'s pure decision of which replica runs a Source, and the
//! web page's access checks ([`web::auth`]). Everything else is the crate's own
//! (`tests/architecture.rs` holds the CLI to this face).

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]
// The face is `entry`, `shard` and `web::auth`: everything else says `pub(crate)`.
#![warn(unreachable_pub)]

mod attestation;
mod claim;
mod clock;
mod clusters;
mod controller;
mod decryption;
mod discovery;
mod drift;
mod entry;
mod feedback;
mod fleet;
mod forward;
mod http;
mod identity;
mod image_automation;
mod leader;
mod loop_views;
mod members;
mod metrics;
mod peers;
mod pull_request;
mod refusal_log;
mod registry_secrets;
mod revert;
pub mod shard;
mod shared;
mod source_loop;
mod source_status;
mod switchboard;
mod verify;
mod watch_backoff;
pub mod web;

pub use entry::*;
pub use metrics::metrics_sample;
