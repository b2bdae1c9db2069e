//! The deletion budget: how much one prune may delete before a person approves it. A
//! commit that drops most of a repository (a bad merge, a path moved, a generator
//! that rendered nothing) would otherwise delete most of the cluster in one pass. A
//! prune beyond the budget is held: nothing is deleted until someone approves that
//! exact set of deletions by its digest, or the commit is fixed.

use crate::attestation;
use crate::k8s::ObjectKey;

/// The commit trailer that approves a held prune's deletions by their digest
/// (`Tether-Approve-Deletions: sha256:…`): an approval written, reviewed and kept in
/// Git, read from the commit a pass applies.
pub const APPROVE_DELETIONS_TRAILER: &str = "Tether-Approve-Deletions";

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

impl DeletionBudget {
    /// `COUNT,PERCENT%` (`10,25%`) as a bound, or `off` for none: the spelling of
    /// `--deletion-budget` and of a Source's `spec.deletionBudget`.
    pub fn parse(text: &str) -> Result<Option<DeletionBudget>, String> {
        let text = text.trim();
        if text == "off" {
            return Ok(None);
        }
        let wrong = || format!("{text:?} is not COUNT,PERCENT% (such as 10,25%) or off");
        let (count, percent) = text.split_once(',').ok_or_else(wrong)?;
        let count = count.trim().parse().map_err(|_| wrong())?;
        let percent: u8 = percent
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.parse().ok())
            .filter(|p| *p <= 100)
            .ok_or_else(wrong)?;
        Ok(Some(DeletionBudget { count, percent }))
    }
}

/// A prune held until a person approves it: beyond the budget, or with deletions
/// whose objects ask for confirmation (Argo CD's `Prune=confirm`). How many it would
/// delete of how many recorded, and the digest that approves exactly these deletions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneHold {
    pub deleting: usize,
    pub recorded: usize,
    /// The budget it is beyond, if it is.
    pub beyond: Option<DeletionBudget>,
    /// How many of the deletions ask for confirmation.
    pub confirming: usize,
    /// `sha256:` of the deletions (group, kind, namespace, name, uid), in any order.
    pub digest: String,
}

impl PruneHold {
    /// Does one of `approvals` (digests people gave: a flag, a Source's annotation, a
    /// commit's trailers) approve these deletions?
    pub fn approved_by<'a>(&self, approvals: impl IntoIterator<Item = &'a str>) -> bool {
        approvals.into_iter().any(|a| a.trim() == self.digest)
    }

    /// `prune held: 45 of 50 recorded objects would be deleted, beyond …`, or
    /// `prune held: 1 of the 3 deletions asks …`.
    pub fn describe(&self) -> String {
        let why = match self.beyond {
            Some(budget) => format!(
                "{} of {} recorded objects would be deleted, beyond the deletion budget ({} objects and {}% of the inventory)",
                self.deleting, self.recorded, budget.count, budget.percent
            ),
            None => format!(
                "{} of the {} deletions {} a person to confirm (Prune=confirm)",
                self.confirming,
                self.deleting,
                if self.confirming == 1 { "asks" } else { "ask" }
            ),
        };
        format!("prune held: {why}, so nothing is deleted")
    }
}

/// Is `text` a digest of deletions as [`PruneHold::digest`] spells it (`sha256:` and
/// 64 lowercase hexadecimal digits)?
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The hold on a prune that deletes `deletions` (each object with the uid it was
/// recorded with, and whether it asks for confirmation) of `recorded` objects: when it
/// is beyond `budget` (none: no bound), or when any deletion asks for confirmation;
/// else `None`.
pub fn hold(
    budget: Option<DeletionBudget>,
    deletions: &[Deletion],
    recorded: usize,
) -> Option<PruneHold> {
    let deleting = deletions.len();
    let beyond = budget.filter(|budget| {
        deleting > budget.count && deleting * 100 > usize::from(budget.percent) * recorded
    });
    let confirming = deletions.iter().filter(|d| d.confirm).count();
    (beyond.is_some() || confirming > 0).then(|| PruneHold {
        deleting,
        recorded,
        beyond,
        confirming,
        digest: digest(deletions),
    })
}

/// One deletion of a prune, as its hold weighs it.
#[derive(Clone, Copy, Debug)]
pub struct Deletion<'k> {
    pub key: &'k ObjectKey,
    /// The uid the object was recorded with.
    pub uid: Option<&'k str>,
    /// Its annotation asks a person to confirm its deletion.
    pub confirm: bool,
}

/// `sha256:` of the deletions' lines, sorted, as canonical JSON.
fn digest(deletions: &[Deletion]) -> String {
    let mut lines: Vec<String> = deletions
        .iter()
        .map(|Deletion { key, uid, .. }| {
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

    fn deletions<'k>(keys: &'k [ObjectKey], uid: &'k str) -> Vec<Deletion<'k>> {
        keys.iter()
            .map(|key| Deletion {
                key,
                uid: Some(uid),
                confirm: false,
            })
            .collect()
    }

    fn held(deleting: usize, recorded: usize) -> bool {
        let keys = keys(deleting);
        hold(
            Some(DeletionBudget::default()),
            &deletions(&keys, "uid"),
            recorded,
        )
        .is_some()
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
    fn a_deletion_that_asks_for_confirmation_holds_the_prune_whatever_the_budget() {
        let keys = keys(3);
        let mut three = deletions(&keys, "u");
        three[1].confirm = true;
        for budget in [Some(DeletionBudget::default()), None] {
            let hold = hold(budget, &three, 20).expect("held");
            assert_eq!((hold.beyond, hold.confirming), (None, 1));
            assert_eq!(
                hold.describe(),
                "prune held: 1 of the 3 deletions asks a person to confirm (Prune=confirm), so nothing is deleted"
            );
        }
        assert!(hold(None, &deletions(&keys, "u"), 20).is_none());
    }

    #[test]
    fn a_budget_is_a_count_and_a_share_or_off() {
        let bound = |count, percent| Ok(Some(DeletionBudget { count, percent }));
        assert_eq!(DeletionBudget::parse("10,25%"), bound(10, 25));
        assert_eq!(DeletionBudget::parse(" 2, 50% "), bound(2, 50));
        assert_eq!(DeletionBudget::parse("off"), Ok(None));
        for wrong in ["ten", "10", "10,25", "10,101%", "-1,5%", ""] {
            let error = DeletionBudget::parse(wrong).expect_err(wrong);
            assert!(error.contains("is not COUNT,PERCENT%"), "{error}");
        }
    }

    #[test]
    fn the_digest_names_exactly_these_deletions_in_any_order() {
        let keys = keys(12);
        let forward = deletions(&keys, "u");
        let backward: Vec<_> = forward.iter().rev().copied().collect();
        let budget = Some(DeletionBudget::default());
        let a = hold(budget, &forward, 12).expect("held");
        let b = hold(budget, &backward, 12).expect("held");
        assert_eq!(a.digest, b.digest);
        assert!(is_digest(&a.digest), "{}", a.digest);
        assert!(!is_digest("sha256:abc") && !is_digest(&a.digest.to_uppercase()));
        assert!(a.approved_by([format!(" {} ", a.digest).as_str()]));
        assert!(a.approved_by(["sha256:another", a.digest.as_str()]));
        assert!(!a.approved_by([]));
        // One object more, or one made again (another uid), is another set.
        let mut more = forward.clone();
        more.push(forward[0]);
        assert!(!a.approved_by([hold(budget, &more, 13).expect("held").digest.as_str()]));
        let mut again = forward.clone();
        again[3].uid = Some("another");
        assert!(!a.approved_by([hold(budget, &again, 12).expect("held").digest.as_str()]));
    }
}
