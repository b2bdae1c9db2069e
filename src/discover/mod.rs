//! Discovery: the pods that others run (Helm, kubectl, controllers), and the pods of
//! controllers tether applied, written back to the repo as models with
//! `xos_managed: false`. [`facts`] takes what matters from the Kubernetes objects,
//! [`files`] turns it into the files under `discovered/` (both pure); [`watch`] lists
//! or watches the cluster.

pub mod facts;
pub mod files;
pub mod watch;

pub use facts::{ControllerFacts, Controllers, PodFacts};
pub use files::{DISCOVERED_DIR, Outcome, PodChanges, plan};
