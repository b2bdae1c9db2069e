//! Image automation's pure part: what an [`ImagePolicy`](policy::ImagePolicy) admits
//! and how it ranks tags ([`policy`]), and the never-backwards decision for one value
//! written in the repo ([`choose`]). The registry is listed by the engine; this module
//! is given the tags (page by page) and the time, never a cache of earlier decisions.

pub mod choose;
pub mod policy;
