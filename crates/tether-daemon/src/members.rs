//! A sharded daemon's membership (`--shard`): each replica holds a Lease of its own,
//! `<group>-<identity>`, labelled as a member of the group, and reads the group's
//! Leases to know who is alive. The Lease is held and released as the leader
//! election holds its one ([`leader::run`] on a Lease nobody else wants); a replica
//! that stops releases it, so its Sources move at once, and one that dies drops out
//! when its Lease expires. What this replica may run ([`Share`]) is sent on a watch
//! channel: its part among the live members while it holds its own Lease, nothing
//! otherwise.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use tether_engine::driver::{Backoff, Retries};
use tether_engine::reconcile::Tenure;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::leader::{self, Election};
use super::shard::{self, MEMBER_LABEL, Members, Share, live_members};
use crate::shared::Shared;
use crate::watch_backoff::WatchBackoff;

/// Where the members' Leases are and who this replica is.
#[derive(Clone, Debug)]
pub(crate) struct Membership {
    pub namespace: String,
    /// The group's name: each member's Lease is `<group>-<identity>`.
    pub group: String,
    /// This replica's identity, as Lease names may hold it ([`super::shard::lease_safe`]).
    pub identity: String,
    /// How long a member's Lease stays valid without renewal: a replica that dies
    /// hands its Sources over after this.
    pub duration: Duration,
    /// Where the other members reach this replica's webhooks (`http://IP:PORT`),
    /// announced on its Lease; none: webhooks are not passed on to it.
    pub address: Option<String>,
}

/// The annotation on a member's Lease that says where its webhooks are reached.
pub(crate) const ADDRESS_ANNOTATION: &str = "tether.dev/address";

impl Membership {
    fn lease_name(&self) -> String {
        format!("{}-{}", self.group, self.identity)
    }
}

/// Takes part in the group until `release` is cancelled, then releases this
/// replica's Lease. `share` says which Sources this replica may run.
pub(crate) async fn run(
    client: Client,
    membership: Membership,
    shared: Arc<Shared>,
    share: watch::Sender<Share>,
    release: CancellationToken,
) {
    if !labelled(&client, &membership, &release).await {
        return;
    }
    let (holding_tx, mut holding) = watch::channel(false);
    let election = tokio::spawn(leader::run(
        client.clone(),
        Election {
            namespace: membership.namespace.clone(),
            lease: membership.lease_name(),
            identity: membership.identity.clone(),
            duration: membership.duration,
        },
        shared.clone(),
        holding_tx,
        release.clone(),
    ));
    let leases: Api<Lease> = Api::namespaced(client, &membership.namespace);
    let selector = format!("{MEMBER_LABEL}={}", membership.group);
    let (store, writer) = reflector::store();
    let mut events = reflector::reflector(
        writer,
        watcher::watcher(leases.clone(), watcher::Config::default().labels(&selector)),
    )
    .backoff(WatchBackoff::new())
    .boxed();
    let mut next_expiry: Option<SystemTime> = None;
    let mut was_fenced = false;
    let mut own = OwnLease {
        store: store.clone(),
        api: leases,
        name: membership.lease_name(),
        identity: membership.identity.clone(),
        duration: membership.duration,
        read_back: None,
    };
    loop {
        let until_expiry = next_expiry
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
            .unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            () = release.cancelled() => break,
            changed = holding.changed() => if changed.is_err() { break },
            // The next Lease event, or the next expiry, which changes no Lease: then
            // the members are counted again.
            event = tokio::time::timeout(until_expiry + Duration::from_millis(50), events.next()) => match event {
                Ok(Some(Ok(_))) | Err(_) => {}
                Ok(Some(Err(error))) => tracing::warn!(%error, "the members' Lease watch failed; retrying"),
                Ok(None) => break,
            },
        }
        let holds = *holding.borrow();
        let fence = own.fence(holds).await;
        let tenure = shared.fence.until(fence);
        let fenced = holds && fence <= SystemTime::now();
        if fenced && !was_fenced {
            tracing::warn!(
                "this replica's Lease was not seen renewed in time: it writes nothing and runs no Source until it is"
            );
        }
        was_fenced = fenced;
        let (now_share, expiry) = share_of(&store, &membership.identity, holds && !fenced, tenure);
        next_expiry = next_look(holds, fenced, fence, expiry);
        shared
            .peers
            .set(peer_addresses(&store.state(), &membership.identity));
        share.send_if_modified(|current| {
            let changed = *current != now_share;
            if changed {
                tracing::info!(share = ?now_share, "the members changed");
                *current = now_share;
            }
            changed
        });
    }
    let _ = share.send(Share::Nothing);
    let _ = election.await;
}

/// This replica's own Lease: as the members' watch shows it, and as last read back.
/// The watch may lag behind its renewals (reconnecting after the API server was away,
/// or starved), and a replica that renews in time counts as live to the others, who
/// then leave its Sources to it: so it is read back when its fence is about to close.
struct OwnLease {
    store: Store<Lease>,
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    read_back: Option<Lease>,
}

impl OwnLease {
    /// Until when this replica may write ([`shard::fence`]), from the newest renewal
    /// seen: the watch's, or one read back now if the watch's closes the fence soon.
    async fn fence(&mut self, holds: bool) -> SystemTime {
        let watched = self
            .store
            .state()
            .into_iter()
            .find(|l| l.metadata.name.as_deref() == Some(self.name.as_str()));
        let fence_of = |read_back: Option<&Lease>| {
            let own = shard::newest_renewal(watched.as_deref(), read_back);
            shard::fence(own, &self.identity, holds, self.duration)
        };
        let fence = fence_of(self.read_back.as_ref());
        if !(holds && shard::read_back_due(fence, SystemTime::now())) {
            return fence;
        }
        if let Some(read) = self.read().await {
            self.read_back = Some(read);
        }
        fence_of(self.read_back.as_ref())
    }

    /// The Lease read afresh; `None` when it cannot be within a second (a replica cut
    /// from the API server stays fenced).
    async fn read(&self) -> Option<Lease> {
        match tokio::time::timeout(Duration::from_secs(1), self.api.get_opt(&self.name)).await {
            Ok(Ok(lease)) => lease,
            Ok(Err(error)) => {
                tracing::debug!(%error, "cannot read this replica's Lease back");
                None
            }
            Err(_) => None,
        }
    }
}

/// When the members are counted again without a Lease event: at the next expiry of a
/// member's Lease, and before this replica's fence closes (no event may come before
/// it: its Lease is read back then); while fenced, each second.
fn next_look(
    holds: bool,
    fenced: bool,
    fence: SystemTime,
    expiry: Option<SystemTime>,
) -> Option<SystemTime> {
    match (holds, fenced) {
        (true, false) => {
            let read_back_at = fence.checked_sub(shard::READ_BACK_AHEAD).unwrap_or(fence);
            Some(expiry.map_or(read_back_at, |e| e.min(read_back_at)))
        }
        (true, true) => Some(SystemTime::now() + shard::READ_BACK_AHEAD * 2),
        (false, _) => expiry,
    }
}

/// This replica's share: its part among the live members while it holds its own
/// Lease (itself counted even before the watch shows its Lease), else nothing.
fn share_of(
    store: &Store<Lease>,
    me: &str,
    holding: bool,
    tenure: Tenure,
) -> (Share, Option<SystemTime>) {
    if !holding {
        return (Share::Nothing, None);
    }
    let leases = store.state();
    let (mut live, next_expiry) = live_members(leases.iter().map(|l| &**l), SystemTime::now());
    live.insert(me.to_string());
    (
        Share::Part(Members {
            me: me.to_string(),
            live,
            tenure,
        }),
        next_expiry,
    )
}

/// Where the other live members are reached, as their Leases announce it.
fn peer_addresses(leases: &[Arc<Lease>], me: &str) -> Vec<String> {
    let (live, _) = live_members(leases.iter().map(|l| &**l), SystemTime::now());
    leases
        .iter()
        .filter(|lease| {
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_ref());
            holder.is_some_and(|h| h != me && live.contains(h))
        })
        .filter_map(|lease| {
            lease
                .metadata
                .annotations
                .as_ref()?
                .get(ADDRESS_ANNOTATION)
                .cloned()
        })
        .collect()
}

/// Makes this replica's Lease carry the group's label and its address (server-side
/// apply of those alone: the Lease manager creates Leases without them and patches
/// only their spec). False when `release` came first.
async fn labelled(client: &Client, membership: &Membership, release: &CancellationToken) -> bool {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &membership.namespace);
    let name = membership.lease_name();
    let patch = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "labels": {
                MEMBER_LABEL: membership.group,
                "app.kubernetes.io/managed-by": "tether",
            },
            "annotations": membership.address.as_ref().map(|address| {
                serde_json::json!({ ADDRESS_ANNOTATION: address })
            }),
        },
    });
    let mut retries =
        Retries::endless(Backoff::new(Duration::from_secs(1), Duration::from_secs(5)));
    loop {
        match leases
            .patch(
                &name,
                &PatchParams::apply("tether-members"),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => return true,
            Err(error) => {
                tracing::warn!(%error, lease = %name, "cannot label this replica's Lease; retrying");
                if !retries.again_unless(release).await {
                    return false;
                }
            }
        }
    }
}
