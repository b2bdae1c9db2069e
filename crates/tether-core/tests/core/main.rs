//! The core's tests on data, in one test binary: each module needs nothing but
//! `tether_core` and its data directory beside this one (`tests/<module>/`), so that
//! `cargo test -p tether-core` builds no client, Git or TLS. Data-driven cases compare
//! with `.expected` files (`tether_testkit::snapshot`; `TETHER_BLESS=1` rewrites them).

// clippy.toml keeps the core's own code off the clock and the filesystem; its tests
// read their data files and time the input budgets.
#![allow(clippy::disallowed_methods)]

mod edit;
mod hostile_yaml;
mod image;
mod inventory;
mod normalize;
mod readiness;
