//! The deletion budget: how much one prune may delete before a person approves it. A
//! commit that drops most of a repository (a bad merge, a path moved, a generator
//! that rendered nothing) would otherwise delete most of the cluster in one pass. A
//! prune beyond the budget is held: nothing is deleted until someone approves that
//! exact set of deletions by its digest, or the commit is fixed.

use crate::attestation;
use crate::k8s::ObjectKey;

/// How much one prune may delete: it is held when it deletes more than `count`
/// objects **and** more than `percent` of what the inventory records (a large repository
/// may drop a few dozen objects; a small one may drop most of its few).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeletionBudget {
    pub count: usize,
    pub percent: u8,
}

impl Default for DeletionBudget {
    /// Ten objects and a quarter of the inventory.
    fn default() -> Self {
        DeletionBudget {
            count: 10,
            percent: 25,
        }
    }
}

/// A prune beyond the budget: how many it would delete of how many recorded, and the
/// digest that approves exactly these deletions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneHold {
    pub deleting: usize,
    pub recorded: usize,
    pub budget: DeletionBudget,
    /// `sha256:` of the deletions (group, kind, namespace, name, uid), in any order.
    pub digest: String,
}

impl PruneHold {
    /// Does `approval` (a digest a person gave) approve these deletions?
    pub fn approved_by(&self, approval: Option<&str>) -> bool {
        approval.is_some_and(|a| a.trim() == self.digest)
    }

    /// `prune held: 45 of 50 recorded objects would be deleted, beyond …`.
    pub fn describe(&self) -> String {
        format!(
            "prune held: {} of {} recorded objects would be deleted, beyond the deletion budget ({} objects and {}% of the inventory), so nothing is deleted",
            self.deleting, self.recorded, self.budget.count, self.budget.percent
        )
    }
}

/// The hold on a prune that deletes `deletions` (each object with the uid it was
/// recorded with) of `recorded` objects, or `None` within the budget.
pub fn hold(
    budget: DeletionBudget,
    deletions: &[(&ObjectKey, Option<&str>)],
    recorded: usize,
) -> Option<PruneHold> {
    let deleting = deletions.len();
    let beyond_count = deleting > budget.count;
    let beyond_share = deleting * 100 > usize::from(budget.percent) * recorded;
    (beyond_count && beyond_share).then(|| PruneHold {
        deleting,
        recorded,
        budget,
        digest: digest(deletions),
    })
}

/// `sha256:` of the deletions' lines, sorted, as canonical JSON.
fn digest(deletions: &[(&ObjectKey, Option<&str>)]) -> String {
    let mut lines: Vec<String> = deletions
        .iter()
        .map(|(key, uid)| {
            format!(
                "{} {} {} {} {}",
                key.group,
                key.kind,
                key.namespace.as_deref().unwrap_or("-"),
                key.name,
                uid.unwrap_or("-")
            )
        })
        .collect();
    lines.sort();
    attestation::digest(&serde_json::json!(lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<ObjectKey> {
        (0..n)
            .map(|i| ObjectKey::new("v1", "ConfigMap", Some("shop"), &format!("cm-{i}")))
            .collect()
    }

    fn held(deleting: usize, recorded: usize) -> bool {
        let keys = keys(deleting);
        let deletions: Vec<_> = keys.iter().map(|k| (k, Some("uid"))).collect();
        hold(DeletionBudget::default(), &deletions, recorded).is_some()
    }

    #[test]
    fn a_prune_is_held_beyond_both_the_count_and_the_share() {
        // (deleting, recorded, held)
        let cases = [
            (45, 50, true),
            (412, 480, true),
            (11, 40, true),
            (10, 10, false),
            (6, 8, false),
            (60, 1000, false),
            (11, 44, false),
            (0, 0, false),
        ];
        for (deleting, recorded, expected) in cases {
            assert_eq!(
                held(deleting, recorded),
                expected,
                "{deleting} of {recorded}"
            );
        }
    }

    #[test]
    fn the_digest_names_exactly_these_deletions_in_any_order() {
        let keys = keys(12);
        let forward: Vec<_> = keys.iter().map(|k| (k, Some("u"))).collect();
        let backward: Vec<_> = forward.iter().rev().copied().collect();
        let budget = DeletionBudget::default();
        let a = hold(budget, &forward, 12).expect("held");
        let b = hold(budget, &backward, 12).expect("held");
        assert_eq!(a.digest, b.digest);
        assert!(a.digest.starts_with("sha256:") && a.digest.len() == 71);
        assert!(a.approved_by(Some(&format!(" {} ", a.digest))));
        assert!(!a.approved_by(None));
        // One object more, or one made again (another uid), is another set.
        let more = keys.iter().chain(std::iter::once(&keys[0]));
        let more: Vec<_> = more.map(|k| (k, Some("u"))).collect();
        assert!(!a.approved_by(Some(&hold(budget, &more, 13).expect("held").digest)));
        let mut again = forward.clone();
        again[3].1 = Some("another");
        assert!(!a.approved_by(Some(&hold(budget, &again, 12).expect("held").digest)));
    }
}
