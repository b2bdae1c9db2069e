//! The decision for one value written in the repo, never backwards: when the policy
//! admits the current tag, only a tag ranked strictly above it may replace it; when
//! it does not (the policy changed, or someone wrote a value by hand), the best tag
//! it admits does. The tags come from the registry on every pass, never from an
//! earlier decision; a [`Shortlist`] folds them, page by page, in bounded memory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::Duration;

use super::policy::{ImagePolicy, Rank};
use crate::model::is_digest;

/// Folds a tag list page by page in bounded memory: keeps only admitted tags ranked
/// above `current` (all admitted tags when `current` is not admitted: the policy
/// changed), at most `limit` best. It also keeps the one best admitted tag that is
/// not above `current` (the current tag itself, while the registry lists it), last
/// in [`Shortlist::finish`], so that [`decide`] can tell a value that is up to date
/// from one whose tag left the registry.
pub struct Shortlist<'p> {
    policy: &'p ImagePolicy,
    /// The current tag's rank: only tags above it are kept.
    floor: Option<Rank>,
    limit: usize,
    /// The best so far, the worst on top (to be dropped first).
    best: BinaryHeap<Reverse<(Rank, String)>>,
    /// The best admitted tag at or below `floor`.
    not_above: Option<(Rank, String)>,
    seen: usize,
}

impl<'p> Shortlist<'p> {
    pub fn new(policy: &'p ImagePolicy, current: &str, limit: usize) -> Self {
        Shortlist {
            policy,
            floor: policy.rank(current),
            limit,
            best: BinaryHeap::with_capacity(limit.min(1024)),
            not_above: None,
            seen: 0,
        }
    }

    pub fn offer(&mut self, tag: &str) {
        self.seen += 1;
        let Some(rank) = self.policy.rank(tag) else {
            return;
        };
        if self.floor.as_ref().is_some_and(|floor| rank <= *floor) {
            let better = self
                .not_above
                .as_ref()
                .is_none_or(|(r, t)| (&rank, tag) > (r, t.as_str()));
            if better {
                self.not_above = Some((rank, tag.to_string()));
            }
            return;
        }
        if self.best.len() >= self.limit {
            let worst = self.best.peek().map(|Reverse(worst)| worst);
            if self.limit == 0 || worst.is_some_and(|(r, t)| (&rank, tag) <= (r, t.as_str())) {
                return;
            }
        }
        // A registry lists a tag once; a repeated one takes no second place.
        if self.best.iter().any(|Reverse((_, kept))| kept == tag) {
            return;
        }
        if self.best.len() >= self.limit {
            self.best.pop();
        }
        self.best.push(Reverse((rank, tag.to_string())));
    }

    /// Tags offered.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The listing had more tags than the policy's `max_tags`: nothing may be chosen.
    pub fn too_many_tags(&self) -> Option<KeepReason> {
        (self.seen > self.policy.max_tags).then_some(KeepReason::TooManyTags {
            listed: self.seen,
            max: self.policy.max_tags,
        })
    }

    /// Best first (the best tag not above the current one last).
    pub fn finish(self) -> Vec<String> {
        // Sorted ascending in `Reverse`: the best tag first.
        self.best
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse((_, tag))| tag)
            .chain(self.not_above.map(|(_, tag)| tag))
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Update {
        from: String,
        to: String,
        /// Which rule chose `to`, and from what: for the commit message.
        why: String,
    },
    Keep {
        reason: KeepReason,
    },
}

/// Why a value stays as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeepReason {
    UpToDate,
    NothingAdmitted,
    /// The best admitted tag ranks below the current one (which was admitted).
    WouldGoBackwards {
        best: String,
    },
    /// Every tag above the current one is younger than `min_age`; `tag` is the best.
    TooYoung {
        tag: String,
        age: Duration,
        min_age: Duration,
    },
    TooManyTags {
        listed: usize,
        max: usize,
    },
    /// The registry answered something that is not a digest: nothing is written.
    NotADigest {
        answered: String,
    },
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |d: &Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
        match self {
            KeepReason::UpToDate => f.write_str("the value written is the best the policy admits"),
            KeepReason::NothingAdmitted => {
                f.write_str("the registry lists no tag the policy admits")
            }
            KeepReason::WouldGoBackwards { best } => write!(
                f,
                "the best tag the registry lists, {best}, ranks below the value written, and a policy never goes backwards"
            ),
            KeepReason::TooYoung { tag, age, min_age } => write!(
                f,
                "{tag} is {} old, younger than the policy's min_age of {}",
                shown(age),
                shown(min_age)
            ),
            KeepReason::TooManyTags { listed, max } => write!(
                f,
                "the repository lists {listed} tags, more than max_tags ({max}): nothing is chosen; narrow the repository or raise max_tags"
            ),
            KeepReason::NotADigest { answered } => write!(
                f,
                "the registry answered \"{answered}\" for the tag's digest, which is not a sha256 digest"
            ),
        }
    }
}

/// The decision for one target's `current` value, given the candidates best first
/// with their ages (None = age unknown/not needed).
pub fn decide(
    policy: &ImagePolicy,
    current: &str,
    candidates: &[(String, Option<Duration>)],
) -> Decision {
    let floor = policy.rank(current);
    let mut too_young: Option<KeepReason> = None;
    // The best admitted candidate, with its rank, whatever its age: what the
    // registry offers when nothing may be chosen.
    let mut ranked: Vec<(Rank, &str, Option<Duration>)> = candidates
        .iter()
        .filter_map(|(tag, age)| Some((policy.rank(tag)?, tag.as_str(), *age)))
        .collect();
    // Best first whatever order they came in: never backwards must not rest on the caller.
    ranked.sort_by(|a, b| (&b.0, b.1).cmp(&(&a.0, a.1)));
    for (rank, tag, age) in &ranked {
        if let Some(floor) = &floor
            && rank <= floor
        {
            break;
        }
        if let (Some(min_age), Some(age)) = (policy.min_age, age)
            && *age < min_age
        {
            too_young.get_or_insert(KeepReason::TooYoung {
                tag: (*tag).to_string(),
                age: *age,
                min_age,
            });
            continue;
        }
        return Decision::Update {
            from: current.to_string(),
            to: (*tag).to_string(),
            why: why(policy, current, tag, floor.is_some()),
        };
    }
    let reason = too_young.unwrap_or_else(|| match (&floor, ranked.first()) {
        (Some(floor), Some((best, tag, _))) if best < floor => KeepReason::WouldGoBackwards {
            best: (*tag).to_string(),
        },
        (Some(_), Some(_)) => KeepReason::UpToDate,
        (_, None) | (None, _) => KeepReason::NothingAdmitted,
    });
    Decision::Keep { reason }
}

fn why(policy: &ImagePolicy, current: &str, to: &str, current_admitted: bool) -> String {
    let rule = policy.describe();
    if current_admitted {
        format!("{rule} ranks {to} above {current}")
    } else {
        format!("{current} is outside the policy ({rule}); {to} is the best tag it admits")
    }
}

/// A digest policy: update when the tag's digest in the registry differs from the
/// one written.
pub fn decide_digest(policy: &ImagePolicy, current: Option<&str>, in_registry: &str) -> Decision {
    if !is_digest(in_registry) {
        return Decision::Keep {
            reason: KeepReason::NotADigest {
                answered: in_registry.to_string(),
            },
        };
    }
    if current == Some(in_registry) {
        return Decision::Keep {
            reason: KeepReason::UpToDate,
        };
    }
    let rule = policy.describe();
    let why = match current {
        Some(written) => format!("{rule} moved from {written} to {in_registry}"),
        None => format!("{rule} is {in_registry}; no digest was written"),
    };
    Decision::Update {
        from: current.unwrap_or_default().to_string(),
        to: in_registry.to_string(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image_automation::policy::tests::policy;
    use proptest::prelude::*;

    const MIN: Duration = Duration::from_secs(60);

    /// One row: the policy's fields, the current value, the registry's tags with
    /// their ages in minutes (None: unknown), and the decision's `to` or keep reason.
    struct Row {
        policy: &'static str,
        current: &'static str,
        tags: &'static [(&'static str, Option<u64>)],
        expected: Result<&'static str, KeepReason>,
    }

    fn run(row: &Row) -> Decision {
        let policy = policy(row.policy);
        let mut shortlist = Shortlist::new(&policy, row.current, 10);
        for (tag, _) in row.tags {
            shortlist.offer(tag);
        }
        let ages = |tag: &str| {
            row.tags
                .iter()
                .find(|(t, _)| *t == tag)
                .and_then(|(_, minutes)| minutes.map(|m| MIN * m as u32))
        };
        let candidates: Vec<(String, Option<Duration>)> = shortlist
            .finish()
            .into_iter()
            .map(|tag| {
                let age = ages(&tag);
                (tag, age)
            })
            .collect();
        decide(&policy, row.current, &candidates)
    }

    fn young(tag: &str, minutes: u64, min_age_minutes: u64) -> KeepReason {
        KeepReason::TooYoung {
            tag: tag.into(),
            age: MIN * minutes as u32,
            min_age: MIN * min_age_minutes as u32,
        }
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "a table: one row per case")]
    fn every_row_decides_as_written() {
        let semver = "semver: '>=1.0.0 <2.0.0'\n";
        let rows = [
            // semver: the highest in range; out of range and junk ignored.
            Row {
                policy: semver,
                current: "1.0.0",
                tags: &[
                    ("1.0.0", None),
                    ("1.2.0", None),
                    ("1.10.1", None),
                    ("2.0.0", None),
                    ("latest", None),
                ],
                expected: Ok("1.10.1"),
            },
            Row {
                policy: semver,
                current: "1.10.1",
                tags: &[("1.0.0", None), ("1.10.1", None), ("2.0.0", None)],
                expected: Err(KeepReason::UpToDate),
            },
            // Pre-releases: not unless the range names one, then in semver order.
            Row {
                policy: semver,
                current: "1.2.0",
                tags: &[("1.3.0-rc.1", None), ("1.2.0", None)],
                expected: Err(KeepReason::UpToDate),
            },
            Row {
                policy: "semver: '>=1.0.0-0'\n",
                current: "1.2.0",
                tags: &[("1.3.0-rc.1", None), ("1.3.0-rc.2", None), ("1.2.0", None)],
                expected: Ok("1.3.0-rc.2"),
            },
            Row {
                policy: "semver: '>=1.0.0-0'\n",
                current: "1.3.0-rc.2",
                tags: &[("1.3.0-rc.2", None), ("1.3.0", None)],
                expected: Ok("1.3.0"),
            },
            // A `v` prefix: v1.2.3 and 1.2.3 tie, and a tie keeps the current value.
            Row {
                policy: semver,
                current: "1.2.3",
                tags: &[("v1.2.3", None), ("1.2.3", None)],
                expected: Err(KeepReason::UpToDate),
            },
            Row {
                policy: semver,
                current: "v1.2.3",
                tags: &[("v1.2.4", None), ("1.2.3", None)],
                expected: Ok("v1.2.4"),
            },
            // Numerical with extract: build timestamps.
            Row {
                policy: "numerical: asc\ntag_pattern: '^main-(?P<ts>[0-9]+)-[0-9a-f]+$'\nextract: '$ts'\n",
                current: "main-1700000000-abc",
                tags: &[
                    ("main-1700000000-abc", None),
                    ("main-1700000500-def", None),
                    ("main-1700000100-fff", None),
                    ("pr-1800000000-aaa", None),
                ],
                expected: Ok("main-1700000500-def"),
            },
            Row {
                policy: "numerical: desc\n",
                current: "5",
                tags: &[("3", None), ("7", None), ("5", None)],
                expected: Ok("3"),
            },
            // Alphabetical, descending: the first in order wins.
            Row {
                policy: "alphabetical: desc\n",
                current: "bravo",
                tags: &[("alpha", None), ("charlie", None)],
                expected: Ok("alpha"),
            },
            Row {
                policy: "alphabetical: asc\ntag_pattern: '^release-'\n",
                current: "release-b",
                tags: &[("release-a", None), ("zzz", None)],
                expected: Err(KeepReason::WouldGoBackwards {
                    best: "release-a".into(),
                }),
            },
            // The current tag removed from the registry: still never backwards.
            Row {
                policy: semver,
                current: "1.5.0",
                tags: &[("1.2.0", None), ("1.4.9", None)],
                expected: Err(KeepReason::WouldGoBackwards {
                    best: "1.4.9".into(),
                }),
            },
            // The policy changed: the current value is outside it, the best admitted wins even if lower.
            Row {
                policy: semver,
                current: "2.3.0",
                tags: &[("2.3.0", None), ("1.9.0", None), ("1.8.0", None)],
                expected: Ok("1.9.0"),
            },
            Row {
                policy: semver,
                current: "hand-written",
                tags: &[("1.1.0", None)],
                expected: Ok("1.1.0"),
            },
            Row {
                policy: semver,
                current: "2.3.0",
                tags: &[("2.3.0", None), ("3.0.0", None)],
                expected: Err(KeepReason::NothingAdmitted),
            },
            Row {
                policy: semver,
                current: "1.0.0",
                tags: &[],
                expected: Err(KeepReason::NothingAdmitted),
            },
            // min_age: too young is skipped to the next best; all too young keeps.
            Row {
                policy: "semver: '>=1.0.0'\nmin_age: 10m\n",
                current: "1.0.0",
                tags: &[
                    ("1.2.0", Some(3)),
                    ("1.1.0", Some(30)),
                    ("1.0.0", Some(999)),
                ],
                expected: Ok("1.1.0"),
            },
            Row {
                policy: "semver: '>=1.0.0'\nmin_age: 10m\n",
                current: "1.0.0",
                tags: &[("1.2.0", Some(3)), ("1.1.0", Some(5))],
                expected: Err(young("1.2.0", 3, 10)),
            },
            Row {
                policy: "semver: '>=1.0.0'\nmin_age: 10m\n",
                current: "1.0.0",
                tags: &[("1.2.0", None)],
                expected: Ok("1.2.0"),
            },
        ];
        for (i, row) in rows.iter().enumerate() {
            let decision = run(row);
            match (&row.expected, &decision) {
                (
                    Ok(to),
                    Decision::Update {
                        to: chosen, from, ..
                    },
                ) => {
                    assert_eq!(
                        (chosen.as_str(), from.as_str()),
                        (*to, row.current),
                        "row {i}"
                    );
                }
                (Err(reason), Decision::Keep { reason: kept }) => {
                    assert_eq!(kept, reason, "row {i}");
                }
                _ => panic!("row {i}: expected {:?}, decided {decision:?}", row.expected),
            }
        }
    }

    #[test]
    fn why_says_which_rule_chose_what_from_what() {
        let p = policy("semver: '>=1.0.0 <2.0.0'\n");
        let candidates = [("1.4.0".to_string(), None)];
        let Decision::Update { why, .. } = decide(&p, "1.3.0", &candidates) else {
            panic!("an update");
        };
        assert_eq!(why, "semver >=1.0.0 <2.0.0 ranks 1.4.0 above 1.3.0");
        let Decision::Update { why, .. } = decide(&p, "2.1.0", &candidates) else {
            panic!("an update");
        };
        assert_eq!(
            why,
            "2.1.0 is outside the policy (semver >=1.0.0 <2.0.0); 1.4.0 is the best tag it admits"
        );
    }

    #[test]
    fn keep_reasons_read_as_one_sentence() {
        let reason = young("1.2.0", 3, 10);
        assert_eq!(
            reason.to_string(),
            "1.2.0 is 3m old, younger than the policy's min_age of 10m"
        );
        assert_eq!(
            KeepReason::TooManyTags {
                listed: 6000,
                max: 5000
            }
            .to_string(),
            "the repository lists 6000 tags, more than max_tags (5000): nothing is chosen; narrow the repository or raise max_tags"
        );
    }

    #[test]
    fn a_shortlist_keeps_the_best_few_above_the_current_tag() {
        let p = policy("numerical: asc\nmax_tags: 3\n");
        let mut shortlist = Shortlist::new(&p, "5", 2);
        for tag in ["1", "9", "x", "7", "5", "8", "9"] {
            shortlist.offer(tag);
        }
        assert_eq!(shortlist.seen(), 7);
        assert_eq!(
            shortlist.too_many_tags(),
            Some(KeepReason::TooManyTags { listed: 7, max: 3 })
        );
        assert_eq!(shortlist.finish(), ["9", "8", "5"], "the current tag last");
        // The current value outside the policy: every admitted tag counts.
        let mut changed = Shortlist::new(&p, "latest", 10);
        for tag in ["1", "3", "2"] {
            changed.offer(tag);
        }
        assert_eq!(changed.finish(), ["3", "2", "1"]);
    }

    #[test]
    fn a_digest_policy_follows_its_tag() {
        let p = policy("digest: latest\n");
        let old = format!("sha256:{}", "a".repeat(64));
        let new = format!("sha256:{}", "b".repeat(64));
        assert_eq!(
            decide_digest(&p, Some(&old), &old),
            Decision::Keep {
                reason: KeepReason::UpToDate
            }
        );
        let Decision::Update { from, to, why } = decide_digest(&p, Some(&old), &new) else {
            panic!("an update");
        };
        assert_eq!((from.as_str(), to.as_str()), (old.as_str(), new.as_str()));
        assert_eq!(
            why,
            format!("the digest of tag latest moved from {old} to {new}")
        );
        assert!(matches!(
            decide_digest(&p, None, &new),
            Decision::Update { .. }
        ));
        assert_eq!(
            decide_digest(&p, Some(&old), "<html>"),
            Decision::Keep {
                reason: KeepReason::NotADigest {
                    answered: "<html>".into()
                }
            }
        );
    }

    const POLICIES: [&str; 7] = [
        "semver: '>=1.0.0 <3.0.0'\n",
        "semver: '>=0.0.0-0'\n",
        "semver: '~1.2 || ^2.1.0-0'\n",
        "numerical: asc\ntag_pattern: '^b-(?P<n>[0-9]+)$'\nextract: '$n'\n",
        "numerical: desc\n",
        "alphabetical: asc\n",
        "alphabetical: desc\nmin_age: 5m\n",
    ];

    fn tag() -> impl Strategy<Value = String> {
        prop_oneof![
            (
                0u64..4,
                0u64..4,
                0u64..4,
                any::<bool>(),
                prop::option::of("(alpha|rc\\.[0-9])")
            )
                .prop_map(|(a, b, c, v, pre)| {
                    let pre = pre.map(|p| format!("-{p}")).unwrap_or_default();
                    format!("{}{a}.{b}.{c}{pre}", if v { "v" } else { "" })
                }),
            (0u32..50).prop_map(|n| format!("b-{n}")),
            (0u32..50).prop_map(|n| n.to_string()),
            "[a-d]{1,3}",
        ]
    }

    proptest! {
        #[test]
        fn decide_never_returns_a_tag_ranked_below_an_admitted_current(
            which in 0..POLICIES.len(),
            tags in prop::collection::vec((tag(), prop::option::of(0u64..20)), 0..30),
            current in tag(),
            limit in 1usize..8,
        ) {
            let p = policy(POLICIES[which]);
            let ages: Vec<(String, Option<Duration>)> =
                tags.iter().map(|(t, m)| (t.clone(), m.map(|m| MIN * m as u32))).collect();
            let mut shortlist = Shortlist::new(&p, &current, limit);
            for (tag, _) in &ages {
                shortlist.offer(tag);
            }
            let short: Vec<(String, Option<Duration>)> = shortlist
                .finish()
                .into_iter()
                .map(|t| { let age = ages.iter().find(|(x, _)| *x == t).and_then(|(_, a)| *a); (t, age) })
                .collect();
            // Through the shortlist, and straight from the unsorted listing.
            for candidates in [&short, &ages] {
                if let Decision::Update { to, .. } = decide(&p, &current, candidates) {
                    let chosen = p.rank(&to);
                    prop_assert!(chosen.is_some(), "{to} is admitted");
                    if let Some(floor) = p.rank(&current) {
                        prop_assert!(chosen > Some(floor), "{to} above {current}");
                    }
                }
            }
        }
    }
}
