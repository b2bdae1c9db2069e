//! A sharded replica's claim on a Source: `status.owner`, written before the
//! Source's loop starts and cleared after it stops, each write conditional on the
//! Source's resourceVersion so that of two replicas writing at once one is refused.
//! A claim held by a live member is waited for ([`shard::claim`]); one whose holder
//! died is taken. This, not the hash alone, is what keeps two replicas from running a
//! Source at once while their views of the members differ.
//!
//! The fence finishes it: a replica writes only until its own Lease could expire, less
//! a second ([`shard::fence`], set by `members`, checked by the Sources' clients before
//! each write). A fence moved on after it lapsed begins a new tenure; an apply writes
//! only in the tenure its loop began in, and the loops of an ended tenure are
//! restarted and claim again, so a replica paused past its Lease does not go on with
//! its old pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use tether_engine::driver::{Backoff, Retries};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::shard::{self, Claim, Members, Share};
use crate::clock::now;
use crate::source_status::{Handover, handed_over};
use tether_api::source_spec::{Condition, Source, SourceStatus};

/// How often a waiting replica looks at the claim again (in its watch's cache: no
/// request).
const LOOK_AGAIN: Duration = Duration::from_millis(250);

/// The members' Leases (`<group>-<identity>` in their namespace): a claim whose holder
/// this replica's watch shows gone is taken only once the holder's Lease, read
/// afresh, says it may be ([`shard::may_take_from`]). A replica whose watch lags
/// (starved, or its watch reconnecting) would otherwise take the Sources of a member
/// that renews in time and goes on running them. A read serves every Source of that
/// holder for [`LEASE_READ_KEPT`]: a dead replica's hundreds of Sources ask once.
#[derive(Clone)]
pub(crate) struct MemberLeases {
    pub(crate) api: Api<Lease>,
    pub(crate) group: String,
    read: Arc<Mutex<HashMap<String, LeaseRead>>>,
}

/// A holder's Lease as last read, and when (`None`: there was none).
type LeaseRead = (Instant, Option<Lease>);

/// How long a read of a holder's Lease serves the claims of its Sources.
const LEASE_READ_KEPT: Duration = Duration::from_secs(1);

impl MemberLeases {
    pub(crate) fn new(api: Api<Lease>, group: String) -> Self {
        MemberLeases {
            api,
            group,
            read: Arc::default(),
        }
    }

    /// Whether `holder`'s claim may be taken, by its Lease read now or within
    /// [`LEASE_READ_KEPT`] (gone: yes). Not known (the read failed): no.
    async fn may_take_from(&self, holder: &str) -> bool {
        let kept = self
            .read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(holder)
            .filter(|(at, _)| at.elapsed() < LEASE_READ_KEPT)
            .map(|(_, lease)| lease.clone());
        let lease = match kept {
            Some(lease) => lease,
            None => match self.api.get_opt(&format!("{}-{holder}", self.group)).await {
                Ok(lease) => {
                    let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
                    read.insert(holder.to_string(), (Instant::now(), lease.clone()));
                    lease
                }
                Err(error) => {
                    tracing::debug!(%error, holder, "cannot read the holder's Lease; not taking its claim");
                    return false;
                }
            },
        };
        lease.is_none_or(|lease| shard::may_take_from(&lease, holder, SystemTime::now()))
    }
}

/// Waits until this replica holds the claim on `source`, taking it when free. The
/// Source to run: `source` with its status as read when the claim was held (so that
/// the loop's first status write follows what the last holder wrote, its handover
/// included), or as given when the share needs no claims; `None` when `stop` came
/// first or the Source is gone.
pub(crate) async fn acquire(
    api: &Api<Source>,
    leases: Option<&MemberLeases>,
    store: &Store<Source>,
    source: &Source,
    share: &watch::Receiver<Share>,
    stop: &CancellationToken,
) -> Option<Source> {
    let (namespace, name) = (source.namespace().unwrap_or_default(), source.name_any());
    let key = ObjectRef::<Source>::new(&name).within(&namespace);
    let id = format!("{namespace}/{name}");
    let mut looks = Retries::endless(Backoff::new(LOOK_AGAIN, LOOK_AGAIN));
    loop {
        let members = match &*share.borrow() {
            Share::Everything => return Some(source.clone()),
            // Not (or no longer) this replica's: the controller stops this loop.
            Share::Part(members) if members.own(&id) => Some(members.clone()),
            Share::Part(_) | Share::Nothing => None,
        };
        if let Some(members) = members {
            let cached = store.get(&key)?;
            match claim_once(api, leases, &cached, &members).await {
                Tried::Held(status) => {
                    let mut held = source.clone();
                    held.status = status.map(|status| *status);
                    return Some(held);
                }
                Tried::Gone => return None,
                Tried::NotYet => {}
            }
        }
        if !looks.again_unless(stop).await {
            return None;
        }
    }
}

/// What one look at a Source's claim came to.
enum Tried {
    /// Held, with the Source's status as read then.
    Held(Option<Box<SourceStatus>>),
    NotYet,
    /// The Source was deleted.
    Gone,
}

/// Decides on the claim of `cached` (the Source as the watch's cache has it) and
/// takes it when free.
async fn claim_once(
    api: &Api<Source>,
    leases: Option<&MemberLeases>,
    cached: &Source,
    members: &Members,
) -> Tried {
    // Waiting costs no request: the cache shows the holder, live; and a holder the
    // cache shows gone is asked about through its Lease (read once for all its
    // Sources) before the Source is read.
    let cached_holder = holder_of(cached);
    match shard::claim(cached_holder, members) {
        Claim::Wait => {
            tracing::debug!(holder = ?cached_holder, "waiting for the Source's claim");
            return Tried::NotYet;
        }
        Claim::Take
            if let (Some(holder), Some(leases)) = (cached_holder, leases)
                && !leases.may_take_from(holder).await =>
        {
            tracing::debug!(
                holder,
                "the holder's Lease is live, or expired too recently; waiting"
            );
            return Tried::NotYet;
        }
        Claim::Held | Claim::Take => {}
    }
    // The cache may not yet show a claim another replica took while this one was
    // away (paused, cut off), nor the handover of the last holder: a claim to run on
    // or to take is read afresh first.
    let source = match api.get_status(&cached.name_any()).await {
        Ok(read) => read,
        Err(kube::Error::Api(response)) if response.code == 404 => return Tried::Gone,
        Err(error) => {
            tracing::debug!(%error, "cannot read the Source's claim; again");
            return Tried::NotYet;
        }
    };
    let holder = holder_of(&source);
    match shard::claim(holder, members) {
        // Held already (a loop of an earlier tenure, or before a restart): claimed
        // again, on the resourceVersion just read, so that another replica taking it
        // at this moment on an older one is refused, or this claim is.
        Claim::Held => match write_owner(api, &source, Some(&members.me), None).await {
            Ok(written) => Tried::Held(written.status.map(Box::new)),
            Err(error) => {
                tracing::debug!(%error, "the claim changed as it was taken again; again");
                Tried::NotYet
            }
        },
        Claim::Take
            if let (Some(holder), Some(leases)) = (holder, leases)
                && !leases.may_take_from(holder).await =>
        {
            tracing::debug!(
                holder,
                "the holder's Lease is live, or expired too recently; waiting"
            );
            Tried::NotYet
        }
        Claim::Take => match write_owner(api, &source, Some(&members.me), None).await {
            Ok(written) => {
                tracing::info!(owner = %members.me, was = ?holder, "claimed the Source");
                Tried::Held(written.status.map(Box::new))
            }
            // Another replica wrote first: look again.
            Err(error) => {
                tracing::debug!(%error, "the claim was not taken");
                Tried::NotYet
            }
        },
        Claim::Wait => {
            tracing::debug!(holder = ?holder, "waiting for the Source's claim");
            Tried::NotYet
        }
    }
}

/// Who claims `source`.
fn holder_of(source: &Source) -> Option<&str> {
    source.status.as_ref().and_then(|s| s.owner.as_deref())
}

/// Clears this replica's claim on the Source `name`, read afresh, and says in its
/// Ready condition why and who is to run it ([`handed_over`]); nothing when another
/// replica holds it (or nobody does). Tried a few times: a claim left behind is
/// cleared by the next sweep ([`stray`]).
pub(crate) async fn release(api: &Api<Source>, name: &str, me: &str, handover: &Handover) {
    let mut retries = Retries::new(Backoff::request(), 5);
    loop {
        match api.get_status(name).await {
            Ok(source) if holder_of(&source) != Some(me) => {
                return;
            }
            Ok(source) => {
                let status = source.status.clone().unwrap_or_default();
                let conditions = handed_over(&status, me, handover, &now());
                match write_owner(api, &source, None, Some(conditions)).await {
                    Ok(_) => {
                        tracing::info!(source = name, owner = me, ?handover, "released the Source");
                        return;
                    }
                    Err(error) => {
                        tracing::debug!(%error, source = name, "the release was refused; again");
                    }
                }
            }
            Err(kube::Error::Api(response)) if response.code == 404 => return,
            Err(error) => {
                tracing::warn!(%error, source = name, "cannot read the Source to release its claim");
            }
        }
        if !retries.again().await {
            return;
        }
    }
}

/// Whether `source` carries this replica's claim though this replica does not run
/// it (a release that failed, a loop that ended): such a claim is released.
pub(crate) fn stray(source: &Source, me: &str, running: bool) -> bool {
    !running && holder_of(source) == Some(me)
}

/// Writes `owner` (or clears it), and `conditions` if given, on the resourceVersion
/// `source` was read at: a Source changed since (another replica's claim) refuses it
/// with a conflict. The Source as written.
async fn write_owner(
    api: &Api<Source>,
    source: &Source,
    owner: Option<&str>,
    conditions: Option<Vec<Condition>>,
) -> Result<Source, kube::Error> {
    let name = source.metadata.name.as_deref().unwrap_or_default();
    // A new time with each claim: a claim taken again changes the Source too.
    let since = owner.map(|_| now());
    let mut status = serde_json::json!({"owner": owner, "ownerSince": since});
    if let Some(conditions) = conditions {
        status["conditions"] = serde_json::json!(conditions);
    }
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": source.metadata.resource_version},
        "status": status,
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}
