//! Which replica runs which Source: the decisions, pure. The replicas of a sharded
//! daemon (`--shard`) are the holders of live member Leases ([`live_members`]); each
//! Source belongs to one of them by rendezvous hashing ([`owner`]), so a replica that
//! joins takes about 1/N of the Sources, and one that leaves gives away only its own.
//! Before a replica runs a Source it claims it in the Source's `status.owner`
//! ([`claim`]): a claim held by a live replica is waited for, so two replicas never
//! run a Source at once even while their views of the members differ.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use sha2::{Digest, Sha256};
use tether_api::source_spec::Source;
use tether_engine::reconcile::Tenure;

/// The label every member Lease of a sharded daemon carries: its value is the group
/// (`--lease-name`), so that two daemons in one namespace never count each other.
pub const MEMBER_LABEL: &str = "tether.dev/member-of";

/// Which Sources this process may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Share {
    /// None: a follower of the leader election, or a member whose own Lease is lost.
    Nothing,
    /// All: the only replica, or the elected leader.
    Everything,
    /// Its part among the live members (itself among them).
    Part(Members),
}

impl Share {
    /// Does this process run the Source `id` (`namespace/name`)?
    pub fn owns(&self, id: &str) -> bool {
        match self {
            Share::Nothing => false,
            Share::Everything => true,
            Share::Part(members) => members.own(id),
        }
    }

    /// Whether Sources are claimed in their status before they run (sharded only:
    /// the leader's Lease already keeps others out).
    pub fn claims(&self) -> Option<&Members> {
        match self {
            Share::Part(members) => Some(members),
            _ => None,
        }
    }
}

/// The live members of a sharded daemon, as one replica sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    /// This replica's identity.
    pub me: String,
    /// Every live member's identity, this replica's included.
    pub live: BTreeSet<String>,
    /// The stretch of holding its own Lease that this view belongs to: a replica whose
    /// Lease lapsed (paused, cut off) starts its loops again under a new one, claims
    /// first, since others may have run its Sources meanwhile.
    pub tenure: Tenure,
}

impl Members {
    /// Does this replica own the Source `id`?
    pub fn own(&self, id: &str) -> bool {
        owner(&self.live, id) == Some(self.me.as_str())
    }
}

/// The member that owns `key`: the highest of `hash(member, key)` (rendezvous
/// hashing). The same on every replica for the same members; a member that leaves
/// moves only its own keys, one that joins takes only keys that become its own.
pub fn owner<'m>(live: &'m BTreeSet<String>, key: &str) -> Option<&'m str> {
    live.iter()
        .max_by_key(|member| (weight(member, key), *member))
        .map(String::as_str)
}

fn weight(member: &str, key: &str) -> u64 {
    let mut hash = Sha256::new();
    hash.update(member.as_bytes());
    // A separator no identity holds: ("ab", "c") and ("a", "bc") hash apart.
    hash.update([0]);
    hash.update(key.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The identities of the member Leases held now, and when the next of them expires
/// unless renewed (the time to look again: an expiry makes no watch event).
pub fn live_members<'l>(
    leases: impl IntoIterator<Item = &'l Lease>,
    now: SystemTime,
) -> (BTreeSet<String>, Option<SystemTime>) {
    let mut live = BTreeSet::new();
    let mut next_expiry: Option<SystemTime> = None;
    for lease in leases {
        let Some(spec) = &lease.spec else { continue };
        let (Some(holder), Some(renewed), Some(seconds)) = (
            &spec.holder_identity,
            &spec.renew_time,
            spec.lease_duration_seconds,
        ) else {
            continue;
        };
        let Ok(seconds) = u64::try_from(seconds) else {
            continue;
        };
        let expires = SystemTime::from(renewed.0) + Duration::from_secs(seconds);
        if expires > now {
            live.insert(holder.clone());
            next_expiry = Some(next_expiry.map_or(expires, |next| next.min(expires)));
        }
    }
    (live, next_expiry)
}

/// How long before its own Lease could expire a replica stops writing: the others
/// take its Sources only once it expired, and then claim them before they write.
pub const FENCE_MARGIN: Duration = Duration::from_secs(1);

/// Whether a claim held by `holder` may be taken at `now`, by its Lease as read
/// afresh: held by someone else or nobody, or expired for half its duration more.
/// The fence stops the holder's writes before its Lease expires, but a replica
/// starved of CPU (a throttled pod) checks a write against its fence and may send it
/// seconds later: a fault run saw one arrive 5.5 s after the Lease expired. The half
/// duration (5 s by default, and the fence's second) is the time such a write has to
/// arrive before another replica writes the Source; a crashed replica's Sources move
/// that much later.
pub fn may_take_from(lease: &Lease, holder: &str, now: SystemTime) -> bool {
    let Some(spec) = &lease.spec else {
        return true;
    };
    if spec.holder_identity.as_deref() != Some(holder) {
        return true;
    }
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return true;
    };
    let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    SystemTime::from(renewed.0) + duration + duration / 2 <= now
}

/// Until when a member may write: while it holds its Lease, the Lease's last renewal
/// as the watch shows it, held by `me`, plus its duration, less [`FENCE_MARGIN`]: as
/// long as the others count it live (they read the same Lease), and not a moment
/// more. Not at all otherwise, and not from the moment the election says it holds
/// the Lease: a Lease manager that reads back its own expired Lease after the API
/// server was away says so before it renews it, while the others may already run
/// its Sources.
pub fn fence(own: Option<&Lease>, me: &str, holding: bool, duration: Duration) -> SystemTime {
    let spec = own.and_then(|lease| lease.spec.as_ref());
    let renewed = spec
        .filter(|spec| holding && spec.holder_identity.as_deref() == Some(me))
        .and_then(|spec| spec.renew_time.as_ref());
    let Some(renewed) = renewed else {
        return SystemTime::UNIX_EPOCH;
    };
    // The shorter of this replica's duration and the one the Lease says, which the
    // others count by.
    let written = spec
        .and_then(|spec| spec.lease_duration_seconds)
        .and_then(|seconds| u64::try_from(seconds).ok())
        .map_or(duration, |seconds| {
            duration.min(Duration::from_secs(seconds))
        });
    (SystemTime::from(renewed.0) + written)
        .checked_sub(FENCE_MARGIN)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// How long before its fence a replica whose watch has not shown a newer renewal
/// reads its Lease back (and, while fenced, how often: twice that).
pub const READ_BACK_AHEAD: Duration = Duration::from_millis(500);

/// Whether a replica holding its Lease reads it back now: its fence closes within
/// [`READ_BACK_AHEAD`] (or has closed), so the watch has shown no renewal in time.
pub fn read_back_due(fence: SystemTime, now: SystemTime) -> bool {
    fence <= now + READ_BACK_AHEAD
}

/// Of two copies of one Lease (as the watch shows it, and as read back), the one
/// renewed last.
pub fn newest_renewal<'l>(a: Option<&'l Lease>, b: Option<&'l Lease>) -> Option<&'l Lease> {
    let renewed = |lease: &Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0)
    };
    match (a, b) {
        (Some(a), Some(b)) if renewed(b) > renewed(a) => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

/// What a replica that owns a Source does with the Source's claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// It holds the claim: the loop may run.
    Held,
    /// Nobody holds it, or its holder is no longer a member: write this replica's.
    Take,
    /// Another live member holds it: that replica is still stopping the Source's
    /// loop (it no longer owns it, or has not yet seen that).
    Wait,
}

/// The decision on a Source whose `status.owner` is `holder`.
pub fn claim(holder: Option<&str>, members: &Members) -> Claim {
    match holder {
        Some(holder) if holder == members.me => Claim::Held,
        Some(holder) if members.live.contains(holder) => Claim::Wait,
        _ => Claim::Take,
    }
}

/// An identity as a Lease's name may hold it (lowercase letters, digits, `-`, `.`):
/// other characters become `-`.
pub fn lease_safe(identity: &str) -> String {
    let safe: String = identity
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    safe.trim_matches(|c| c == '-' || c == '.').to_string()
}

/// The id replicas share a Source by: `namespace/name`.
pub(crate) fn source_id(source: &Source) -> String {
    format!(
        "{}/{}",
        source.namespace().unwrap_or_default(),
        source.name_any()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_may_write_until_a_margin_before_the_others_count_it_gone() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let duration = Duration::from_secs(10);
        let renewed_at = |renewed: SystemTime| lease(Some("me"), 0, 10, renewed);
        let nine = Duration::from_secs(9);
        // Its Lease as the watch shows it, renewed: until a second before it expires.
        assert_eq!(
            fence(Some(&renewed_at(start)), "me", true, duration),
            start + nine
        );
        // Each renewal moves it on.
        let later = start + Duration::from_secs(7);
        assert_eq!(
            fence(Some(&renewed_at(later)), "me", true, duration),
            later + nine
        );
        // Not holding it, or the watch not showing it yet, or showing another holder:
        // no writes at all.
        for (own, holding) in [
            (Some(renewed_at(start)), false),
            (None, true),
            (Some(lease(Some("other"), 0, 10, start)), true),
            (Some(lease(None, 0, 10, start)), true),
        ] {
            assert_eq!(
                fence(own.as_ref(), "me", holding, duration),
                SystemTime::UNIX_EPOCH
            );
        }
        // The API server was away for a minute: the election reads back its own
        // Lease, last renewed a minute ago, and says it holds it before renewing. The
        // others count it gone and run its Sources: the fence stays closed (it was
        // open for 9 s from the moment the election said so).
        let a_minute_ago = lease(Some("me"), 60, 10, start);
        assert!(fence(Some(&a_minute_ago), "me", true, duration) < start);
        // A Lease that says a shorter duration than this replica's: the others count
        // by the Lease.
        let short = lease(Some("me"), 0, 5, start);
        assert_eq!(
            fence(Some(&short), "me", true, duration),
            start + Duration::from_secs(4)
        );
    }

    #[test]
    fn a_lease_is_read_back_just_before_its_fence_and_the_newest_renewal_counts() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ms = Duration::from_millis;
        for (fence, due) in [
            (now + ms(2_000), false),
            (now + ms(501), false),
            (now + ms(500), true),
            (now, true),
            (now - ms(30_000), true),
        ] {
            assert_eq!(read_back_due(fence, now), due, "{fence:?}");
        }
        let old = lease(Some("me"), 20, 10, now);
        let new = lease(Some("me"), 1, 10, now);
        for (a, b, newest) in [
            (Some(&old), Some(&new), Some(&new)),
            (Some(&new), Some(&old), Some(&new)),
            (None, Some(&old), Some(&old)),
            (Some(&old), None, Some(&old)),
            (None, None, None),
        ] {
            assert_eq!(newest_renewal(a, b), newest);
        }
        // The watch lags 20 s behind (reconnecting after an outage); read back, the
        // Lease renewed a second ago opens the fence.
        let watched = fence(Some(&old), "me", true, Duration::from_secs(10));
        assert!(watched < now);
        let read = fence(
            newest_renewal(Some(&old), Some(&new)),
            "me",
            true,
            Duration::from_secs(10),
        );
        assert_eq!(read, now + Duration::from_secs(8));
    }

    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn keys(count: usize) -> Vec<String> {
        (0..count)
            .map(|i| format!("team-{}/source-{i}", i % 7))
            .collect()
    }

    #[test]
    fn the_owner_of_a_source_is_pinned_for_given_members() {
        // Pinned: replicas of two versions in a rolling upgrade must agree, so a
        // change of the hash fails here.
        let live = members(&["tether-0", "tether-1", "tether-2"]);
        let owners: Vec<&str> = ["a/web", "a/api", "b/web", "shop/site"]
            .iter()
            .map(|key| owner(&live, key).unwrap())
            .collect();
        assert_eq!(owners, ["tether-1", "tether-2", "tether-2", "tether-0"]);
        assert_eq!(owner(&BTreeSet::new(), "a/web"), None);
    }

    #[test]
    fn a_member_that_leaves_moves_only_its_own_sources_and_one_that_joins_about_a_share() {
        let three = members(&["r0", "r1", "r2"]);
        let four = members(&["r0", "r1", "r2", "r3"]);
        let two = members(&["r0", "r2"]);
        let keys = keys(3000);
        let mut moved_in = 0;
        let mut moved_out = 0;
        for key in &keys {
            let before = owner(&three, key).unwrap();
            let joined = owner(&four, key).unwrap();
            if joined != before {
                assert_eq!(joined, "r3", "{key} moved between old members");
                moved_in += 1;
            }
            let left = owner(&two, key).unwrap();
            if left != before {
                assert_eq!(before, "r1", "{key} moved though its owner stayed");
                moved_out += 1;
            }
        }
        // About a quarter join r3 (750 ± 5 σ); r1's third leaves with it.
        assert!((650..=850).contains(&moved_in), "{moved_in} moved to r3");
        assert!(
            (900..=1100).contains(&moved_out),
            "{moved_out} moved from r1"
        );
    }

    #[test]
    fn the_sources_are_shared_about_evenly() {
        let live = members(&["tether-0", "tether-1", "tether-2"]);
        let keys = keys(300);
        for member in &live {
            let owned = keys
                .iter()
                .filter(|k| owner(&live, k) == Some(member.as_str()))
                .count();
            assert!((70..=130).contains(&owned), "{member} owns {owned} of 300");
        }
    }

    fn lease(holder: Option<&str>, renewed_ago: u64, seconds: i32, now: SystemTime) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(
                    (now - Duration::from_secs(renewed_ago)).try_into().unwrap(),
                )),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn members_are_the_holders_of_leases_not_yet_expired() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let leases = [
            lease(Some("fresh"), 2, 10, now),
            lease(Some("expired"), 11, 10, now),
            lease(None, 0, 10, now),
            lease(Some("older"), 8, 10, now),
            Lease::default(),
        ];
        let (live, next) = live_members(&leases, now);
        assert_eq!(live, members(&["fresh", "older"]));
        assert_eq!(next, Some(now + Duration::from_secs(2)));
    }

    #[test]
    fn a_claim_of_a_live_member_is_waited_for_and_a_dead_ones_taken() {
        let me = Members {
            me: "r0".into(),
            live: members(&["r0", "r1"]),
            tenure: Tenure::default(),
        };
        assert_eq!(claim(Some("r0"), &me), Claim::Held);
        assert_eq!(claim(Some("r1"), &me), Claim::Wait);
        assert_eq!(claim(Some("r2"), &me), Claim::Take);
        assert_eq!(claim(None, &me), Claim::Take);
    }

    #[test]
    fn a_claim_is_taken_from_a_holder_half_a_lease_after_its_lease_expired() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for (lease, may) in [
            // Renewed 2 s ago: live.
            (lease(Some("r1"), 2, 10, now), false),
            // Expired 1 s ago (renewed 11 s ago): a write it checked before its fence
            // may still be on its way.
            (lease(Some("r1"), 11, 10, now), false),
            (lease(Some("r1"), 14, 10, now), false),
            // Expired for half its duration: taken.
            (lease(Some("r1"), 15, 10, now), true),
            // Released, or held by another identity (the replica came back as one).
            (lease(None, 2, 10, now), true),
            (lease(Some("r9"), 2, 10, now), true),
            (Lease::default(), true),
        ] {
            assert_eq!(may_take_from(&lease, "r1", now), may, "{lease:?}");
        }
    }

    #[test]
    fn identities_become_lease_names() {
        assert_eq!(lease_safe("tether-0"), "tether-0");
        assert_eq!(lease_safe("Build_Host-1234"), "build-host-1234");
        assert_eq!(lease_safe("-x:y/"), "x-y");
    }
}
