//! Discovery: the pods that others run (Helm, kubectl, controllers), and the pods of
//! controllers tether applied, written back to the repo as models with
//! `xos_managed: false`, under the watched cluster's KubernetesService ([`cluster_choice`]).
//! [`facts`] takes what matters from the Kubernetes objects, [`files`] turns it into
//! the files under `discovered/`. The engine's discovery session
//! (`tether_engine::discovery`) watches the cluster and commits them.

pub mod cluster_choice;
pub mod facts;
pub mod files;

pub use cluster_choice::{ClusterChoice, ClusterChoiceError};
pub use facts::{ControllerFacts, Controllers, PodFacts};
pub use files::{DISCOVERED_DIR, Outcome, PodChanges, plan, watched_service};
