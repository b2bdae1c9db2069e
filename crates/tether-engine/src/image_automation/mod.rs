//! Image automation's edges: reading image repositories at their registries
//! ([`scan`]) and the registries' announcements of pushes ([`notification`]); one
//! run of the automation over a models branch ([`automation`]), for the CLI and the
//! daemon.

pub mod automation;
pub mod notification;
pub mod scan;
