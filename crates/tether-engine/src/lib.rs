//! tether's I/O edges, thin around the pure core (`tether_core`): the cluster
//! ([`cluster`], [`watch`]), Git ([`git`], [`writeback`]), the models' sources
//! ([`repo`], [`directory`]), and the long-running work built from them: the one loop
//! driver ([`driver`]), a reconcile pass ([`reconcile`]), a discovery session
//! ([`discovery`]), the event pipeline ([`events`]) and day-2 actions ([`actions`]).
//! [`config`] resolves the CLI's and `.tether.yaml`'s settings into typed
//! configurations. The CLI and the daemon call the same entry points here.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

pub mod actions;
pub mod attestation;
pub mod cluster;
pub mod config;
pub mod directory;
pub mod discovery;
pub mod driver;
pub mod events;
pub mod feedback;
pub mod generate;
pub mod git;
pub mod handover;
pub mod image_automation;
pub mod key_lookup;
pub mod oci;
pub mod outbox;
pub mod reconcile;
pub mod record;
pub mod repo;
pub mod revert;
pub mod watch;
pub mod writeback;
