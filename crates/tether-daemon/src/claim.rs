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

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use tether_engine::driver::{Backoff, Retries};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::shard::{self, Claim, Members, Share};
use tether_api::source_spec::Source;

/// How often a waiting replica looks at the claim again (in its watch's cache: no
/// request).
const LOOK_AGAIN: Duration = Duration::from_millis(250);

/// Waits until this replica holds the claim on `source` (`namespace`, `name`), taking
/// it when free. True when held (or when the share needs no claims); false when
/// `stop` came first or the Source is gone.
pub(crate) async fn acquire(
    api: &Api<Source>,
    store: &Store<Source>,
    (namespace, name): (&str, &str),
    share: &watch::Receiver<Share>,
    stop: &CancellationToken,
) -> bool {
    let key = ObjectRef::<Source>::new(name).within(namespace);
    let id = format!("{namespace}/{name}");
    let mut looks = Retries::endless(Backoff::new(LOOK_AGAIN, LOOK_AGAIN));
    loop {
        let members = match &*share.borrow() {
            Share::Everything => return true,
            // Not (or no longer) this replica's: the controller stops this loop.
            Share::Part(members) if members.own(&id) => Some(members.clone()),
            Share::Part(_) | Share::Nothing => None,
        };
        if let Some(members) = members {
            let Some(cached) = store.get(&key) else {
                return false;
            };
            match claim_once(api, &cached, &members).await {
                Tried::Held => return true,
                Tried::Gone => return false,
                Tried::NotYet => {}
            }
        }
        if !looks.again_unless(stop).await {
            return false;
        }
    }
}

/// What one look at a Source's claim came to.
enum Tried {
    Held,
    NotYet,
    /// The Source was deleted.
    Gone,
}

/// Decides on the claim of `cached` (the Source as the watch's cache has it) and
/// takes it when free.
async fn claim_once(api: &Api<Source>, cached: &Source, members: &Members) -> Tried {
    let fresh;
    let source = match shard::claim(holder_of(cached), members) {
        // The cache may not yet show a claim another replica took while this one was
        // away (paused, cut off): a claim the loop is to run on is read afresh first.
        Claim::Held => match api.get_status(&cached.name_any()).await {
            Ok(read) => {
                fresh = read;
                &fresh
            }
            Err(kube::Error::Api(response)) if response.code == 404 => return Tried::Gone,
            Err(error) => {
                tracing::debug!(%error, "cannot read the Source's claim; again");
                return Tried::NotYet;
            }
        },
        Claim::Take | Claim::Wait => cached,
    };
    let holder = holder_of(source);
    match shard::claim(holder, members) {
        Claim::Held => Tried::Held,
        Claim::Take => match write_owner(api, source, Some(&members.me)).await {
            Ok(()) => {
                tracing::info!(owner = %members.me, was = ?holder, "claimed the Source");
                Tried::Held
            }
            // Another replica wrote first, or the cache is behind: look again.
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

/// Clears this replica's claim on the Source `name`, read afresh; nothing when
/// another replica holds it (or nobody does). Tried a few times: a claim left behind
/// is cleared by the next sweep ([`stray`]).
pub(crate) async fn release(api: &Api<Source>, name: &str, me: &str) {
    let mut retries = Retries::new(Backoff::request(), 5);
    loop {
        match api.get_status(name).await {
            Ok(source) if holder_of(&source) != Some(me) => {
                return;
            }
            Ok(source) => match write_owner(api, &source, None).await {
                Ok(()) => {
                    tracing::info!(source = name, owner = me, "released the Source");
                    return;
                }
                Err(error) => {
                    tracing::debug!(%error, source = name, "the release was refused; again");
                }
            },
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

/// Writes `owner` (or clears it) on the resourceVersion `source` was read at: a
/// Source changed since (another replica's claim) refuses it with a conflict.
async fn write_owner(
    api: &Api<Source>,
    source: &Source,
    owner: Option<&str>,
) -> Result<(), kube::Error> {
    let name = source.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": source.metadata.resource_version},
        "status": {"owner": owner},
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}
