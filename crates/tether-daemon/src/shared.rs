//! What the parts of one daemon process share: the metrics, the page's views of the
//! loops, the [`Switchboard`] that routes what the endpoints receive to them, the
//! watches of the Sources' objects, this replica's write fence and its peers, and
//! whether it is ready; and who it records Events as. Shared by the loops and the
//! HTTP endpoints; it owns none of them (the web page's own state is the web
//! server's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tether_engine::reconcile::{Fence, Watches};

use crate::forward::Forwarder;
use crate::loop_views::Views;
use crate::metrics::Metrics;
use crate::peers::Peers;
use crate::refusal_log::RefusalLog;
use crate::switchboard::Switchboard;

/// What the loops of one process share with its HTTP endpoints.
pub(crate) struct Shared {
    pub(crate) metrics: Metrics,
    /// What the web page shows of the source loops.
    pub(crate) views: Views,
    /// Where pushes, pull requests and registry pushes go among the loops.
    pub(crate) switchboard: Switchboard,
    /// The secret webhooks must prove they know; without one they are refused.
    pub(crate) webhook_secret: Option<Vec<u8>>,
    ready: AtomicBool,
    /// Where a webhook for a source this process does not run goes (a follower
    /// replica asks the leader through the Source's annotation).
    forward: Mutex<Option<Forwarder>>,
    /// Refused webhooks, counted for the log's summary lines (see
    /// [`crate::refusal_log`]).
    refused_webhooks: Mutex<RefusalLog>,
    /// The other replicas of a sharded group, which pull-request and registry
    /// webhooks are passed on to.
    pub(crate) peers: Peers,
    /// The watches of the Sources' objects, one per kind and identity on a cluster.
    pub(crate) watches: Watches,
    /// Until when this replica may write (sharded: its own Lease, less a margin).
    pub(crate) fence: Fence,
}

impl Shared {
    pub(crate) fn new(webhook_secret: Option<Vec<u8>>) -> Self {
        let watches = Watches::default();
        Shared {
            metrics: Metrics::counting(watches.clone()),
            views: Views::default(),
            switchboard: Switchboard::default(),
            webhook_secret,
            ready: AtomicBool::new(false),
            forward: Mutex::new(None),
            refused_webhooks: Mutex::new(RefusalLog::default()),
            peers: Peers::default(),
            watches,
            fence: Fence::default(),
        }
    }

    /// The log of refused webhooks. A panic while it was held leaves counts at worst
    /// off by one: the log goes on.
    pub(crate) fn refused_webhooks(&self) -> MutexGuard<'_, RefusalLog> {
        self.refused_webhooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The caches are synced and the loops started: `/readyz` says yes.
    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn set_forwarder(&self, forwarder: Forwarder) {
        if let Ok(mut forward) = self.forward.lock() {
            *forward = Some(forwarder);
        }
    }

    pub(crate) fn forwarder(&self) -> Option<Forwarder> {
        self.forward.lock().ok().and_then(|f| f.clone())
    }

    /// The client that reads and annotates the Sources (`--sources`; none for one
    /// source from flags).
    pub(crate) fn sources_client(&self) -> Option<kube::Client> {
        self.forwarder().map(|f| f.client)
    }
}

/// Who records the daemon's Events: tether, and the replica (its pod) when known.
pub(crate) fn event_reporter() -> kube::runtime::events::Reporter {
    kube::runtime::events::Reporter {
        controller: "tether".into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}
