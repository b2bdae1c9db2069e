//! Validate and resolve: every reference to its model, every rule of design.md
//! section 2, all problems in one pass. The result, when there is no error, is a
//! [`Graph`] whose links later stages follow without checking again.

mod collisions;
mod depends;
mod links;
mod mounts;
mod name_index;
mod names;
mod placement;
mod resolve_pass;
mod resolved_graph;
mod resolver;
mod rules;
mod services;

pub use resolve_pass::resolve;
pub use resolved_graph::{
    DataLinks, Graph, InstanceLinks, MountLinks, PrincipalLinks, ServiceLinks, SliceLinks,
};
