//! What the daemon gives each Source's loop: its directories, the process's shared
//! state, the identities Sources act as, its own cluster's name, and what stops the
//! loop and its pass.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::identity::Identities;
use crate::shared::Shared;
use crate::source_loop::PassStop;

/// The daemon's directories: a cache it may lose, and state it must not.
#[derive(Clone, Debug)]
pub(crate) struct Directories {
    /// Git clones, fetched again when lost.
    pub cache: PathBuf,
    /// The Sources' event outboxes: events recorded and not yet delivered, which a
    /// restart on the same volume delivers.
    pub state: PathBuf,
}

/// What stops one Source's loop.
pub(super) struct Stops {
    /// The loop (a pass in progress may finish within the shutdown timeout).
    pub(super) loop_: CancellationToken,
    /// The pass in progress, between objects, and writes once the replica's tenure
    /// ends.
    pub(super) pass: PassStop,
}

/// What a Source's loop has of the daemon.
pub(super) struct Daemon {
    pub(super) directories: Directories,
    pub(super) shared: Arc<Shared>,
    /// How long a pass in progress may go on after shutdown.
    pub(super) shutdown_timeout: Duration,
    pub(super) identities: Identities,
    /// The KubernetesService the daemon's own cluster is.
    pub(super) cluster_name: Option<String>,
    /// What a Source that acts as the daemon applies with.
    pub(super) sources_client: Client,
}
