//! tether's web page and JSON API, as data and text: what the daemon (and `tether ui`)
//! shows of its Sources, their objects and the hosts. Pure, like `tether-core`
//! (`clippy.toml` forbids the clock, the environment, files and connections): the
//! daemon asks the cluster and its loops, builds these views, and this crate turns
//! them into JSON (serde) and HTML. Every text that came from a repository, a cluster
//! or a user is escaped on the way into HTML (maud escapes by default; the Markdown
//! report's raw HTML is shown as text).

pub mod assets;
pub mod build;
pub mod graph;
pub mod html;
pub mod markdown;
pub mod paths;
pub mod view;

pub use view::*;
