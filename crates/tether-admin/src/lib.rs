//! tether's administration: what an operator runs against a cluster around the
//! daemon, never inside `tether run`: `install` and `uninstall` ([`install`]), the
//! health check `tether check` ([`check`]), the server's version, a fleet hub's
//! `join`, `revoke` and `status` ([`fleet`]), and the request for a pass
//! ([`reconcile_request`]). It shares the resources' types with the daemon through
//! `tether-api` and depends on no daemon code, nor the daemon on it
//! (`tests/architecture.rs`).

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`).
#![warn(clippy::too_many_lines)]

pub mod check;
pub mod fleet;
pub mod install;
pub mod reconcile_request;
