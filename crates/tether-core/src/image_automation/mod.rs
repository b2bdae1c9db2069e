//! Image automation's pure part: what an [`ImagePolicy`](policy::ImagePolicy) admits
//! and how it ranks tags ([`policy`]), the never-backwards decision for one value
//! written in the repo ([`choose`]), where policies write (Image models and marker
//! comments: [`markers`]) and the format-preserving edit that writes their choice
//! ([`update`]). The registry is listed by the engine; this module is given the tags
//! (page by page) and the time, never a cache of earlier decisions.

pub mod choose;
pub mod markers;
pub mod policy;
pub mod update;
