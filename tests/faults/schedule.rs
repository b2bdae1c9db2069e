//! The faults of a run, drawn from a seed: a run is episodes, each one or two faults
//! that overlap, then a heal in which the checker asks every Source to be run again
//! and the latest push applied. The same seed draws the same schedule, so a failure
//! replays (`TETHER_FAULTS_SEED`).

use std::time::Duration;

/// What goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A replica gets 5% of a core (a CPU quota of its cgroup), as a throttled pod
    /// on a busy node.
    Starve,
    /// A replica is stopped (SIGSTOP) and continued (SIGCONT): a long pause of the
    /// whole process, as a frozen VM.
    Pause,
    /// A replica is killed (SIGKILL) and started again after the fault's time.
    Kill,
    /// A replica's traffic to the API server is dropped (no byte passes, nothing is
    /// closed) while the others' flows.
    CutFromApi,
    /// A replica's webhooks are dropped: the others cannot pass pushes on to it.
    CutFromPeers,
    /// The API server is stopped, then started again on the same state.
    ApiServerDown,
    /// etcd gets 5% of a core: every request is slow.
    EtcdSlow,
    /// The far cluster's API server (a third of the Sources apply there, through a
    /// Cluster resource) is stopped, then started again.
    FarDown,
    /// The far cluster drops every replica's traffic (no byte passes, nothing is
    /// closed).
    FarCut,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Starve,
        Kind::Pause,
        Kind::Kill,
        Kind::CutFromApi,
        Kind::CutFromPeers,
        Kind::ApiServerDown,
        Kind::EtcdSlow,
        Kind::FarDown,
        Kind::FarCut,
    ];

    /// Whether the fault is done to one replica.
    pub fn of_a_replica(self) -> bool {
        !matches!(
            self,
            Kind::ApiServerDown | Kind::EtcdSlow | Kind::FarDown | Kind::FarCut
        )
    }

    /// How long it may last: starvation 20–60 s as the issue saw it, the others
    /// long enough to outlast a Lease (10 s) or not.
    fn lasts(self, rng: &mut fastrand::Rng) -> Duration {
        let seconds = match self {
            Kind::Starve => rng.u64(20..=60),
            Kind::Pause | Kind::CutFromApi | Kind::CutFromPeers => rng.u64(4..=30),
            Kind::Kill => rng.u64(1..=10),
            Kind::ApiServerDown | Kind::FarDown => rng.u64(5..=20),
            Kind::EtcdSlow => rng.u64(10..=30),
            Kind::FarCut => rng.u64(4..=30),
        };
        Duration::from_secs(seconds)
    }
}

/// One fault of an episode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: Kind,
    /// The replica it is done to (an index), for a replica's fault.
    pub replica: Option<usize>,
    /// When it begins, after the episode's start.
    pub after: Duration,
    pub lasts: Duration,
}

impl Fault {
    pub fn ends(&self) -> Duration {
        self.after + self.lasts
    }
}

/// Faults that overlap, then a heal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode {
    pub faults: Vec<Fault>,
    /// Whether a push is made while the faults last (else before the heal).
    pub push_during: bool,
}

impl Episode {
    /// When its last fault ends, after its start.
    pub fn heals_after(&self) -> Duration {
        self.faults
            .iter()
            .map(Fault::ends)
            .max()
            .unwrap_or_default()
    }
}

/// `count` episodes for `replicas` replicas from `seed`: each kind comes in turn at
/// first (so a short run meets every kind), then at random; one fault in two
/// episodes has a second beside it, on another replica or the control plane.
pub fn episodes(seed: u64, count: usize, replicas: usize) -> Vec<Episode> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut order = Kind::ALL.to_vec();
    rng.shuffle(&mut order);
    (0..count)
        .map(|i| {
            let first = match order.get(i) {
                Some(kind) => *kind,
                None => Kind::ALL[rng.usize(..Kind::ALL.len())],
            };
            let mut faults = vec![fault(first, None, Duration::ZERO, replicas, &mut rng)];
            if rng.bool() {
                let second = Kind::ALL[rng.usize(..Kind::ALL.len())];
                let after = Duration::from_secs(rng.u64(0..=10));
                let busy = faults[0].replica;
                let control_plane_twice = !first.of_a_replica() && !second.of_a_replica();
                if !control_plane_twice {
                    faults.push(fault(second, busy, after, replicas, &mut rng));
                }
            }
            Episode {
                faults,
                push_during: rng.bool(),
            }
        })
        .collect()
}

/// A fault of `kind` beginning `after` the episode's start, on a replica other than
/// `busy`.
fn fault(
    kind: Kind,
    busy: Option<usize>,
    after: Duration,
    replicas: usize,
    rng: &mut fastrand::Rng,
) -> Fault {
    let replica = kind.of_a_replica().then(|| {
        let mut pick = rng.usize(..replicas);
        if Some(pick) == busy {
            pick = (pick + 1) % replicas;
        }
        pick
    });
    Fault {
        kind,
        replica,
        after,
        lasts: kind.lasts(rng),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_and_a_short_one_meets_every_kind() {
        assert_eq!(episodes(7, 9, 3), episodes(7, 9, 3));
        assert_ne!(episodes(7, 9, 3), episodes(8, 9, 3));
        let kinds: std::collections::BTreeSet<Kind> = episodes(7, Kind::ALL.len(), 3)
            .iter()
            .flat_map(|e| e.faults.iter().map(|f| f.kind))
            .collect();
        assert_eq!(kinds.len(), Kind::ALL.len());
    }

    #[test]
    fn two_faults_of_an_episode_never_hit_one_replica_nor_the_control_plane_twice() {
        for seed in 0..200 {
            for episode in episodes(seed, 12, 3) {
                if let [a, b] = &episode.faults[..] {
                    if a.replica.is_some() {
                        assert_ne!(a.replica, b.replica, "seed {seed}: {episode:?}");
                    }
                    assert!(a.kind.of_a_replica() || b.kind.of_a_replica());
                }
                for fault in &episode.faults {
                    assert_eq!(fault.replica.is_some(), fault.kind.of_a_replica());
                    assert!(fault.replica.is_none_or(|r| r < 3));
                }
            }
        }
    }
}
