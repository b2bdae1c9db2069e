//! Image automation's edges: reading image repositories at their registries
//! ([`scan`]) and the registries' announcements of pushes ([`notification`]).

pub mod notification;
pub mod scan;
