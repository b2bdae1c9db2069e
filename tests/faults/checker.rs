//! The invariants of a sharded daemon, checked on what a run recorded: the API
//! server's audit log (each replica's Lease writes and its writes to the Sources'
//! objects, named by the replica in their User-Agent) and samples of the Sources'
//! statuses and of what each replica runs. Pure: a run records a [`Timeline`], the
//! checks read it, and each violation comes with the timeline that shows it.
//!
//! 1. No two replicas write objects of one Source at once: each write falls while
//!    its writer holds the Source's claim (`status.owner`, from its claim to the
//!    next change of the claim).
//! 2. After the faults end, within a bound, every Source has an owner that is a live
//!    member and runs it, and no other replica runs it.
//! 3. Every commit pushed is applied everywhere within a bound after the heal.
//! 4. No write after its tenure ended: its Lease's last renewal plus its duration,
//!    and the half duration more that others wait before they take its Sources (a
//!    write checked against the fence by a replica starved of CPU may arrive that
//!    late; invariant 1 holds the claim to it).
//! 5. After the heal, within a bound, no Source whose owner is live keeps a status
//!    that is not Ready (a message of the faults, say).
//!
//! A replica's tenure is a stretch of its Lease held without a lapse: writes of its
//! Lease each less than a Lease's duration after the one before.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Milliseconds since the Unix epoch.
pub type Ms = i64;

/// A successful write to one Source's objects (or its inventory record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub at: Ms,
    pub replica: String,
    pub source: String,
    /// What was written, for the timeline (`patch configmaps ns-s1/c`).
    pub what: String,
}

/// A change of a Source's claim, as the audit log has its status write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimChange {
    pub at: Ms,
    pub source: String,
    /// Who wrote it.
    pub by: String,
    /// The new holder (`None`: released).
    pub owner: Option<String>,
}

/// A Source as a sample saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceState {
    pub owner: Option<String>,
    /// The commit last applied.
    pub applied: Option<String>,
    /// The Ready condition: status, then message.
    pub ready: Option<(String, String)>,
}

/// One look at the Sources and the replicas.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub at: Ms,
    pub sources: BTreeMap<String, SourceState>,
    /// The replicas running and free of any fault.
    pub live: BTreeSet<String>,
    /// The Sources each live replica runs (its metrics have their series).
    pub running: BTreeMap<String, BTreeSet<String>>,
}

/// A fault, as done.
#[derive(Clone, Debug)]
pub struct FaultSpan {
    pub from: Ms,
    pub to: Ms,
    pub label: String,
}

/// One episode: its faults, then the heal (when the last one ended).
#[derive(Clone, Debug)]
pub struct EpisodeSpan {
    pub faults: Vec<FaultSpan>,
    pub heal: Ms,
    /// When the next episode began (or the run ended).
    pub until: Ms,
}

/// A commit pushed (and announced by a webhook to one replica).
#[derive(Clone, Debug)]
pub struct Push {
    pub at: Ms,
    pub commit: String,
}

/// What a run recorded.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub lease_duration: Ms,
    /// Each replica's successful Lease writes, in order.
    pub renewals: BTreeMap<String, Vec<Ms>>,
    pub writes: Vec<Write>,
    pub claims: Vec<ClaimChange>,
    pub episodes: Vec<EpisodeSpan>,
    pub pushes: Vec<Push>,
    pub samples: Vec<Sample>,
}

/// The bounds the checks hold a run to, after the heal.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Every Source run by one live owner (invariant 2).
    pub owned: Ms,
    /// Every push applied (invariant 3).
    pub applied: Ms,
    /// Every status Ready (invariant 5).
    pub ready: Ms,
}

/// An invariant broken, and the timeline that shows it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub invariant: u8,
    pub what: String,
    pub timeline: String,
}

/// What the checks found: the violations, and how long each episode took to heal
/// (invariant 2's time, by the episode's index).
#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub recovered: Vec<(usize, Option<Ms>)>,
    pub applied_after: Vec<Option<Ms>>,
}

/// All five invariants on `timeline`.
pub fn check(timeline: &Timeline, bounds: Bounds) -> Verdict {
    let mut verdict = Verdict::default();
    verdict
        .violations
        .extend(writes_without_the_claim(timeline));
    verdict.violations.extend(writes_outside_tenures(timeline));
    for (index, episode) in timeline.episodes.iter().enumerate() {
        let (recovered, violations) = owned_after_heal(timeline, episode, bounds.owned);
        verdict.recovered.push((index, recovered));
        verdict.violations.extend(violations);
        verdict
            .violations
            .extend(ready_after_heal(timeline, episode, bounds.ready));
    }
    let (applied, violations) = pushes_applied(timeline, bounds.applied);
    verdict.applied_after = applied;
    verdict.violations.extend(violations);
    verdict
}

/// The stretches `replica` held its Lease without a lapse: `(first write, last
/// write + duration)`.
pub fn tenures(timeline: &Timeline, replica: &str) -> Vec<(Ms, Ms)> {
    let mut tenures: Vec<(Ms, Ms)> = Vec::new();
    let lapse = timeline.lease_duration;
    let end = lapse + lapse / 2;
    for &at in timeline.renewals.get(replica).into_iter().flatten() {
        match tenures.last_mut() {
            Some((_, until)) if at < *until - (end - lapse) => *until = at + end,
            _ => tenures.push((at, at + end)),
        }
    }
    tenures
}

/// The tenure of `replica` a write at `at` falls in, by index.
fn tenure_at(tenures: &[(Ms, Ms)], at: Ms) -> Option<usize> {
    tenures
        .iter()
        .position(|(from, until)| *from <= at && at < *until)
}

fn writes_by_source(timeline: &Timeline) -> BTreeMap<&str, Vec<&Write>> {
    let mut by_source: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for write in &timeline.writes {
        by_source.entry(&write.source).or_default().push(write);
    }
    for writes in by_source.values_mut() {
        writes.sort_by_key(|w| w.at);
    }
    by_source
}

/// The stretches `replica` held `source`'s claim: from its claim to the next change.
pub fn holds(timeline: &Timeline, source: &str, replica: &str) -> Vec<(Ms, Ms)> {
    let mut changes: Vec<&ClaimChange> = timeline
        .claims
        .iter()
        .filter(|c| c.source == source)
        .collect();
    changes.sort_by_key(|c| c.at);
    let mut holds = Vec::new();
    for (i, change) in changes.iter().enumerate() {
        if change.owner.as_deref() == Some(replica) {
            let until = changes.get(i + 1).map_or(Ms::MAX, |next| next.at);
            holds.push((change.at, until));
        }
    }
    holds
}

/// Invariant 1: every write to a Source's objects falls while its writer holds the
/// Source's claim, so no two replicas write one Source at once.
pub fn writes_without_the_claim(timeline: &Timeline) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (source, writes) in writes_by_source(timeline) {
        let mut held: BTreeMap<&str, Vec<(Ms, Ms)>> = BTreeMap::new();
        for write in writes {
            let holds = held
                .entry(&write.replica)
                .or_insert_with(|| holds(timeline, source, &write.replica));
            if holds
                .iter()
                .any(|(from, until)| *from <= write.at && write.at < *until)
            {
                continue;
            }
            let holder = timeline
                .claims
                .iter()
                .filter(|c| c.source == source && c.at <= write.at)
                .max_by_key(|c| c.at)
                .and_then(|c| c.owner.clone());
            violations.push(Violation {
                invariant: 1,
                what: format!(
                    "{source}: {} wrote at {} ({}) while {} held its claim",
                    write.replica,
                    write.at,
                    write.what,
                    holder.as_deref().unwrap_or("nobody")
                ),
                timeline: explain(
                    timeline,
                    source,
                    &[&write.replica],
                    (write.at - 15_000, write.at + 1_000),
                ),
            });
        }
    }
    violations
}

/// Invariant 4: every write falls in a tenure of its replica.
pub fn writes_outside_tenures(timeline: &Timeline) -> Vec<Violation> {
    let mut violations = Vec::new();
    for write in &timeline.writes {
        let tenures = tenures(timeline, &write.replica);
        if tenure_at(&tenures, write.at).is_none() {
            let last = tenures
                .iter()
                .rev()
                .find(|(from, _)| *from <= write.at)
                .map(|(_, until)| *until);
            violations.push(Violation {
                invariant: 4,
                what: format!(
                    "{}: {} wrote at {} ({}), its tenure ended at {}",
                    write.source,
                    write.replica,
                    write.at,
                    write.what,
                    last.map_or("never began".to_string(), |t| t.to_string())
                ),
                timeline: explain(
                    timeline,
                    &write.source,
                    &[&write.replica],
                    (write.at - 15_000, write.at + 1_000),
                ),
            });
        }
    }
    violations
}

/// Whether, in `sample`, every Source has a live owner that runs it, and no other
/// replica runs it; else the first Source that does not, and why.
pub fn all_owned(sample: &Sample) -> Result<(), (String, String)> {
    for (source, state) in &sample.sources {
        let Some(owner) = &state.owner else {
            return Err((source.clone(), "no owner".into()));
        };
        if !sample.live.contains(owner) {
            return Err((source.clone(), format!("its owner {owner} is not live")));
        }
        for (replica, running) in &sample.running {
            let runs = running.contains(source);
            if replica == owner && !runs {
                return Err((source.clone(), format!("its owner {owner} does not run it")));
            }
            if replica != owner && runs {
                return Err((
                    source.clone(),
                    format!("{replica} runs it, though {owner} owns it"),
                ));
            }
        }
    }
    Ok(())
}

/// The samples of an episode's heal: from the heal until the next episode.
fn healing<'t>(timeline: &'t Timeline, episode: &EpisodeSpan) -> Vec<&'t Sample> {
    timeline
        .samples
        .iter()
        .filter(|s| s.at >= episode.heal && s.at <= episode.until)
        .collect()
}

/// The first sample of `samples` from which `holds` holds on every later one.
fn holds_from<'s>(samples: &[&'s Sample], holds: impl Fn(&Sample) -> bool) -> Option<&'s Sample> {
    let mut from = None;
    for sample in samples {
        match holds(sample) {
            true => from = from.or(Some(*sample)),
            false => from = None,
        }
    }
    from
}

/// Invariant 2 for one episode: how long after the heal every Source was run by
/// one live owner (and stayed so), or the violation.
pub fn owned_after_heal(
    timeline: &Timeline,
    episode: &EpisodeSpan,
    bound: Ms,
) -> (Option<Ms>, Vec<Violation>) {
    let samples = healing(timeline, episode);
    let from = holds_from(&samples, |s| all_owned(s).is_ok());
    let recovered = from.map(|s| s.at - episode.heal);
    if recovered.is_some_and(|r| r <= bound) {
        return (recovered, Vec::new());
    }
    // The sample at the bound (or the last one) says what was wrong.
    let late = samples
        .iter()
        .find(|s| s.at >= episode.heal + bound)
        .or(samples.last());
    let why = late.and_then(|s| all_owned(s).err());
    let (source, reason) = why.unwrap_or_else(|| ("?".into(), "no sample".into()));
    let faults: Vec<&str> = episode.faults.iter().map(|f| f.label.as_str()).collect();
    (
        recovered,
        vec![Violation {
            invariant: 2,
            what: format!(
                "{} s after the heal of {faults:?}, {source}: {reason}",
                bound / 1000
            ),
            timeline: explain(
                timeline,
                &source,
                &[],
                (
                    episode
                        .faults
                        .iter()
                        .map(|f| f.from)
                        .min()
                        .unwrap_or(episode.heal),
                    episode.heal + bound,
                ),
            ),
        }],
    )
}

/// Invariant 5 for one episode: from the bound after the heal, every Source whose
/// owner is live says Ready.
pub fn ready_after_heal(timeline: &Timeline, episode: &EpisodeSpan, bound: Ms) -> Vec<Violation> {
    let after = episode.heal + bound;
    for sample in healing(timeline, episode).iter().filter(|s| s.at >= after) {
        for (source, state) in &sample.sources {
            let owner_live = state
                .owner
                .as_ref()
                .is_some_and(|o| sample.live.contains(o));
            let ready = state
                .ready
                .as_ref()
                .is_some_and(|(status, _)| status == "True");
            if owner_live && !ready {
                return vec![Violation {
                    invariant: 5,
                    what: format!(
                        "{source} at {}, {} s after the heal: Ready {:?}",
                        sample.at,
                        (sample.at - episode.heal) / 1000,
                        state.ready
                    ),
                    timeline: explain(timeline, source, &[], (episode.heal, sample.at)),
                }];
            }
        }
    }
    Vec::new()
}

/// Invariant 3: each push is applied to every Source within `bound` after it was
/// made, or after the heal of the episode it was made in; how long each took.
pub fn pushes_applied(timeline: &Timeline, bound: Ms) -> (Vec<Option<Ms>>, Vec<Violation>) {
    let mut took = Vec::new();
    let mut violations = Vec::new();
    for (i, push) in timeline.pushes.iter().enumerate() {
        // A later push applied counts: the Sources follow the branch.
        let good: BTreeSet<&str> = timeline.pushes[i..]
            .iter()
            .map(|p| p.commit.as_str())
            .collect();
        let applied = timeline.samples.iter().find(|s| {
            s.at >= push.at
                && s.sources
                    .values()
                    .all(|state| state.applied.as_deref().is_some_and(|c| good.contains(c)))
        });
        let heal = timeline
            .episodes
            .iter()
            .find(|e| {
                e.faults.iter().map(|f| f.from).min().unwrap_or(e.heal) <= push.at
                    && push.at < e.heal
            })
            .map_or(push.at, |e| e.heal);
        let deadline = heal.max(push.at) + bound;
        took.push(applied.map(|s| s.at - push.at));
        let late = applied.is_none_or(|s| s.at > deadline);
        let ended = timeline.samples.last().is_some_and(|s| s.at >= deadline);
        if late && (applied.is_some() || ended) {
            let behind = timeline
                .samples
                .iter()
                .find(|s| s.at >= deadline)
                .and_then(|s| {
                    s.sources.iter().find(|(_, state)| {
                        !state.applied.as_deref().is_some_and(|c| good.contains(c))
                    })
                })
                .map(|(name, state)| (name.clone(), state.clone()));
            let source = behind.as_ref().map_or("?".to_string(), |(n, _)| n.clone());
            violations.push(Violation {
                invariant: 3,
                what: format!(
                    "the push of {} at {} not applied by {deadline}: {source} at {:?}",
                    short(&push.commit),
                    push.at,
                    behind.and_then(|(_, s)| s.applied).as_deref().map(short)
                ),
                timeline: explain(timeline, &source, &[], (push.at, deadline)),
            });
        }
    }
    (took, violations)
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(8)]
}

/// What happened to `source` (and to `replicas`) in `(from, to)`, in order: the
/// faults, the Lease writes of the replicas named, the Source's writes, and each
/// change of its owner or status the samples saw.
pub fn explain(
    timeline: &Timeline,
    source: &str,
    replicas: &[&str],
    (from, to): (Ms, Ms),
) -> String {
    let mut lines: Vec<(Ms, String)> = Vec::new();
    for episode in &timeline.episodes {
        for fault in &episode.faults {
            if fault.to >= from && fault.from <= to {
                lines.push((fault.from, format!("fault begins: {}", fault.label)));
                lines.push((fault.to, format!("fault ends: {}", fault.label)));
            }
        }
    }
    for replica in replicas {
        for &at in timeline.renewals.get(*replica).into_iter().flatten() {
            if (from..=to).contains(&at) {
                lines.push((at, format!("{replica} wrote its Lease")));
            }
        }
    }
    for write in timeline.writes.iter().filter(|w| w.source == source) {
        if (from..=to).contains(&write.at) {
            lines.push((write.at, format!("{} wrote {}", write.replica, write.what)));
        }
    }
    for claim in timeline.claims.iter().filter(|c| c.source == source) {
        if (from..=to).contains(&claim.at) {
            let what = match &claim.owner {
                Some(owner) if *owner == claim.by => format!("{owner} claimed {source}"),
                Some(owner) => format!("{} wrote {owner} as {source}'s holder", claim.by),
                None => format!("{} released {source}", claim.by),
            };
            lines.push((claim.at, what));
        }
    }
    for push in &timeline.pushes {
        if (from..=to).contains(&push.at) {
            lines.push((push.at, format!("push {}", short(&push.commit))));
        }
    }
    let mut seen: Option<(SourceState, BTreeSet<&str>)> = None;
    for sample in timeline
        .samples
        .iter()
        .filter(|s| (from..=to).contains(&s.at))
    {
        let Some(state) = sample.sources.get(source) else {
            continue;
        };
        let runs: BTreeSet<&str> = sample
            .running
            .iter()
            .filter(|(_, r)| r.contains(source))
            .map(|(name, _)| name.as_str())
            .collect();
        let now = (state.clone(), runs);
        if seen.as_ref() != Some(&now) {
            lines.push((
                sample.at,
                format!(
                    "{source}: owner {:?}, applied {:?}, ready {:?}; run by {:?} (live {:?})",
                    now.0.owner,
                    now.0.applied.as_deref().map(short),
                    now.0.ready,
                    now.1,
                    sample.live
                ),
            ));
            seen = Some(now);
        }
    }
    lines.sort_by_key(|(at, _)| *at);
    let mut text = String::new();
    for (at, line) in lines {
        let _ = writeln!(text, "  {:>+9.3} s  {line}", (at - from) as f64 / 1000.0);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Ms = 1_000;

    fn write(at: Ms, replica: &str, source: &str) -> Write {
        Write {
            at,
            replica: replica.into(),
            source: source.into(),
            what: "patch configmaps c".into(),
        }
    }

    /// Two replicas each renewing every 3 s from 0 to `until`.
    fn leases(until: Ms) -> Timeline {
        let renewals = (0..until).step_by(3_000).collect::<Vec<_>>();
        Timeline {
            lease_duration: 10 * SECOND,
            renewals: BTreeMap::from([("r0".into(), renewals.clone()), ("r1".into(), renewals)]),
            ..Timeline::default()
        }
    }

    fn claim(at: Ms, source: &str, by: &str, owner: Option<&str>) -> ClaimChange {
        ClaimChange {
            at,
            source: source.into(),
            by: by.into(),
            owner: owner.map(str::to_string),
        }
    }

    #[test]
    fn writes_while_holding_the_claim_pass_and_one_after_it_moved_is_found() {
        let mut timeline = leases(60 * SECOND);
        // r0 holds s1, releases it, r1 takes it, r0 takes it back: each writes in
        // its holds, r0 in two (in one tenure of its Lease).
        timeline.claims = vec![
            claim(500, "s1", "r0", Some("r0")),
            claim(4_000, "s1", "r0", None),
            claim(4_500, "s1", "r1", Some("r1")),
            claim(9_000, "s1", "r1", None),
            claim(9_500, "s1", "r0", Some("r0")),
        ];
        timeline.writes = vec![
            write(1_000, "r0", "s1"),
            write(5_000, "r1", "s1"),
            write(10_000, "r0", "s1"),
        ];
        assert!(writes_without_the_claim(&timeline).is_empty());
        // r0 writes again after r1 took the claim: two writers at once (the fence
        // disabled, or a claim taken from a live holder).
        timeline.writes.push(write(6_000, "r0", "s1"));
        let found = writes_without_the_claim(&timeline);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].invariant, 1);
        assert!(
            found[0].what.contains("r0 wrote at 6000"),
            "{}",
            found[0].what
        );
        assert!(
            found[0].what.ends_with("while r1 held its claim"),
            "{}",
            found[0].what
        );
        assert!(
            found[0].timeline.contains("r1 claimed s1"),
            "{}",
            found[0].timeline
        );
        // A write with no claim at all.
        timeline.writes = vec![write(100, "r2", "s1")];
        let found = writes_without_the_claim(&timeline);
        assert!(
            found[0].what.ends_with("while nobody held its claim"),
            "{}",
            found[0].what
        );
        // Another Source's claim does not count.
        timeline.writes = vec![write(1_000, "r0", "s2")];
        assert_eq!(writes_without_the_claim(&timeline).len(), 1);
    }

    #[test]
    fn a_write_back_after_a_lapse_is_a_new_tenure_and_one_past_the_lease_a_violation() {
        let mut timeline = leases(60 * SECOND);
        // r0's Lease lapses from 20 s to 40 s (paused), r1 takes over meanwhile.
        timeline
            .renewals
            .get_mut("r0")
            .unwrap()
            .retain(|at| !(20_000..40_000).contains(at));
        timeline.writes = vec![
            write(10_000, "r0", "s1"),
            write(30_000, "r1", "s1"),
            write(43_000, "r0", "s1"),
        ];
        assert!(writes_outside_tenures(&timeline).is_empty());
        // A write by r0 at 31 s, past its Lease (18 s + 10 s), may still be on its way
        // from a starved replica; one at 34 s, past half a Lease more, is the fence
        // broken.
        timeline.writes.push(write(31_000, "r0", "s1"));
        assert!(writes_outside_tenures(&timeline).is_empty());
        timeline.writes.push(write(34_000, "r0", "s1"));
        let found = writes_outside_tenures(&timeline);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].invariant, 4);
        assert!(
            found[0].what.contains("its tenure ended at 33000"),
            "{}",
            found[0].what
        );
    }

    fn sample(at: Ms, owners: &[(&str, Option<&str>)], running: &[(&str, &[&str])]) -> Sample {
        Sample {
            at,
            sources: owners
                .iter()
                .map(|(source, owner)| {
                    (
                        source.to_string(),
                        SourceState {
                            owner: owner.map(str::to_string),
                            applied: Some("c2".into()),
                            ready: Some(("True".into(), String::new())),
                        },
                    )
                })
                .collect(),
            live: ["r0", "r1"].map(String::from).into(),
            running: running
                .iter()
                .map(|(r, s)| (r.to_string(), s.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    fn episode(heal: Ms, until: Ms) -> EpisodeSpan {
        EpisodeSpan {
            faults: vec![FaultSpan {
                from: heal - 20 * SECOND,
                to: heal,
                label: "pause r1 20 s".into(),
            }],
            heal,
            until,
        }
    }

    #[test]
    fn a_source_nobody_runs_after_the_heal_is_found_with_its_reason() {
        let good = |at| {
            sample(
                at,
                &[("s1", Some("r0")), ("s2", Some("r1"))],
                &[("r0", &["s1"]), ("r1", &["s2"])],
            )
        };
        // Released and never run again: the loss.
        let lost = |at| {
            sample(
                at,
                &[("s1", Some("r0")), ("s2", None)],
                &[("r0", &["s1"]), ("r1", &[])],
            )
        };
        let mut timeline = leases(200 * SECOND);
        timeline.episodes = vec![episode(100 * SECOND, 200 * SECOND)];
        timeline.samples = (100..200).map(|s| good(s * SECOND)).collect();
        timeline.samples[..5]
            .iter_mut()
            .for_each(|s| *s = lost(s.at));
        let (recovered, found) = owned_after_heal(&timeline, &timeline.episodes[0], 30 * SECOND);
        assert_eq!(recovered, Some(5 * SECOND));
        assert!(found.is_empty());
        timeline.samples = (100..200).map(|s| lost(s * SECOND)).collect();
        let (recovered, found) = owned_after_heal(&timeline, &timeline.episodes[0], 30 * SECOND);
        assert_eq!(recovered, None);
        assert_eq!(found[0].invariant, 2);
        assert!(found[0].what.ends_with("s2: no owner"), "{}", found[0].what);
        // Two replicas running one Source is no recovery either.
        let twice = sample(
            150 * SECOND,
            &[("s1", Some("r0")), ("s2", Some("r1"))],
            &[("r0", &["s1", "s2"]), ("r1", &["s2"])],
        );
        assert_eq!(
            all_owned(&twice),
            Err(("s2".into(), "r0 runs it, though r1 owns it".into()))
        );
    }

    #[test]
    fn a_push_never_applied_and_a_status_left_failing_are_found() {
        let mut timeline = leases(200 * SECOND);
        timeline.episodes = vec![episode(100 * SECOND, 200 * SECOND)];
        timeline.pushes = vec![Push {
            at: 90 * SECOND,
            commit: "c3".into(),
        }];
        let all = |at| {
            sample(
                at,
                &[("s1", Some("r0")), ("s2", Some("r1"))],
                &[("r0", &["s1"]), ("r1", &["s2"])],
            )
        };
        timeline.samples = (90..200).map(|s| all(s * SECOND)).collect();
        // Pushed during the faults: due 60 s after the heal; never applied (c2 stays).
        let (took, found) = pushes_applied(&timeline, 60 * SECOND);
        assert_eq!(took, vec![None]);
        assert_eq!(found[0].invariant, 3);
        assert!(
            found[0].what.contains("not applied by 160000"),
            "{}",
            found[0].what
        );
        // Applied 20 s after the heal: in time.
        for sample in timeline.samples.iter_mut().filter(|s| s.at >= 120 * SECOND) {
            sample
                .sources
                .values_mut()
                .for_each(|s| s.applied = Some("c3".into()));
        }
        let (took, found) = pushes_applied(&timeline, 60 * SECOND);
        assert_eq!(took, vec![Some(30 * SECOND)]);
        assert!(found.is_empty());
        // A fence message left in a status while its owner lives.
        assert!(ready_after_heal(&timeline, &timeline.episodes[0], 30 * SECOND).is_empty());
        let stale = (
            "False".to_string(),
            "this replica may not write".to_string(),
        );
        timeline
            .samples
            .last_mut()
            .unwrap()
            .sources
            .get_mut("s1")
            .unwrap()
            .ready = Some(stale);
        let found = ready_after_heal(&timeline, &timeline.episodes[0], 30 * SECOND);
        assert_eq!(found[0].invariant, 5);
        assert!(
            found[0].timeline.contains("may not write"),
            "{}",
            found[0].timeline
        );
    }
}
