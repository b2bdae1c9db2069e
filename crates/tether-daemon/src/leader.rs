//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager): with
//! several replicas, only the leader runs the source loops. The leader releases the
//! Lease when it stops, and a follower watches the Lease so that it takes a released
//! Lease at once instead of at its expiry; a leader that dies is replaced when its
//! Lease expires.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tether_engine::driver::{Backoff, Retries};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::shared::Shared;

/// Where the Lease is and who this process is.
#[derive(Clone, Debug)]
pub(crate) struct Election {
    pub namespace: String,
    pub lease: String,
    pub identity: String,
    /// How long a Lease stays valid without renewal (the takeover time after a crash).
    pub duration: Duration,
}

/// Takes part in the election until `release` is cancelled, then releases the Lease
/// if held. `leading` says whether this process leads.
pub(crate) async fn run(
    client: Client,
    election: Election,
    shared: Arc<Shared>,
    leading: watch::Sender<bool>,
    release: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &election.namespace);
    let selector = format!("metadata.name={}", election.lease);
    let mut lease_events = watcher::watcher(leases, watcher::Config::default().fields(&selector))
        .default_backoff()
        .boxed();
    let mut manager: Option<LeaseManager> = None;
    let mut retries =
        Retries::endless(Backoff::new(Duration::from_secs(1), Duration::from_secs(2)));
    loop {
        let current = match &manager {
            Some(current) => current,
            None => match build(&client, &election).await {
                Ok(built) => {
                    retries.succeeded();
                    manager.insert(built)
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot prepare the leader election; retrying");
                    if retries.again_unless(&release).await {
                        continue;
                    }
                    return;
                }
            },
        };
        // One `changed()` at a time, kept across the Lease's events: each new call
        // reads the Lease again and may renew it, so making one per event (our own
        // renewals are events too) renewed the Lease several times a second.
        let next = {
            let changed = current.changed();
            tokio::pin!(changed);
            loop {
                tokio::select! {
                    result = &mut changed => break Next::Changed(result),
                    Some(event) = lease_events.next() => {
                        // A released Lease (no holder) is free now: a fresh manager reads it
                        // and takes it, instead of sleeping until the old expiry.
                        let released = matches!(&event, Ok(Event::Apply(lease)) if lease.spec.as_ref().is_none_or(|s| s.holder_identity.is_none()));
                        if released && !*leading.borrow() {
                            break Next::Released;
                        }
                    }
                    () = release.cancelled() => {
                        if *leading.borrow()
                            && let Err(error) = current.release().await
                        {
                            tracing::warn!(%error, "cannot release the Lease; it expires by itself");
                        }
                        let _ = leading.send(false);
                        shared.metrics.set_leader(false);
                        return;
                    }
                }
            }
        };
        match next {
            Next::Changed(Ok(leader)) => {
                tracing::info!(leader, identity = %election.identity, "leadership changed");
                shared.metrics.set_leader(leader);
                let _ = leading.send(leader);
            }
            Next::Released => manager = None,
            Next::Changed(Err(error)) => {
                tracing::warn!(%error, "leader election failed; retrying");
                let _ = leading.send(false);
                shared.metrics.set_leader(false);
                manager = None;
                retries.again().await;
            }
        }
    }
}

/// What ends a wait of the election.
enum Next {
    /// The manager says who leads now, or that it failed.
    Changed(Result<bool, kube_lease_manager::LeaseManagerError>),
    /// The holder released the Lease while this process follows.
    Released,
}

async fn build(
    client: &Client,
    election: &Election,
) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
    let seconds = election.duration.as_secs().max(2);
    LeaseManagerBuilder::new(client.clone(), &election.lease)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(seconds)
        // Renew when a third of the Lease is left.
        .with_grace((seconds / 3).max(1))
        .build()
        .await
}
