//! The API tether serves, as types: the custom resources `Source`, `Cluster` and
//! `ClusterReport` (`tether.dev/v1alpha1`), from which their CRDs are generated
//! (`tether crd`, `deploy/`), and the contract of its webhook endpoints. No client,
//! no runtime (`tests/architecture.rs`): the daemon serves these, the administration
//! commands install and read them, and both depend on this crate alone for them, as
//! Flux's controllers keep `api/` apart.

pub mod cluster_report;
pub mod cluster_spec;
pub mod crd;
pub mod source_spec;
pub mod webhook;
