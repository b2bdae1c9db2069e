//! Revert that sticks (a Source's `spec.revert`), its pure part: whether a commit
//! whose rollout failed may be reverted ([`decide`]), what tether's revert commit
//! says ([`message`]: the failing objects, and trailers a reader and tether itself
//! find it by), and which image policies a revert holds ([`held_policies`]) until a
//! person commits.
//!
//! Everything is read from the branch's history, never from memory: a restarted
//! daemon, another replica, or a person reading `git log` sees the same.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::discovery::files::DISCOVERY_TRAILER;
use crate::image_automation::update::POLICY_TRAILER;
use crate::k8s::ObjectKey;

/// The trailer of tether's revert commit that names the commit it reverts.
pub const REVERT_TRAILER: &str = "Tether-Revert";
/// The trailer of tether's revert commit that names an image policy it holds (the
/// reverted commit was that policy's).
pub const HOLD_TRAILER: &str = "Tether-Hold-Policy";

/// A commit as the decisions read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitFacts {
    pub id: String,
    /// The first line of its message.
    pub summary: String,
    /// Its trailers, as Git reads them (`Key: value`).
    pub trailers: Vec<(String, String)>,
}

impl CommitFacts {
    fn values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.trailers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.trim())
    }

    /// The commit it reverts, when it is tether's revert.
    pub fn reverts(&self) -> Option<&str> {
        self.values(REVERT_TRAILER).next()
    }

    /// The image policies whose update it is (image automation's commit).
    pub fn policies(&self) -> Vec<&str> {
        self.values(POLICY_TRAILER).collect()
    }

    /// The image policies it holds (tether's revert of an image update).
    pub fn holds(&self) -> Vec<&str> {
        self.values(HOLD_TRAILER).collect()
    }

    /// Written by a person (or any other tool): neither tether's revert, image
    /// automation's update nor discovery's commit.
    pub fn by_person(&self) -> bool {
        self.reverts().is_none()
            && self.policies().is_empty()
            && self.values(DISCOVERY_TRAILER).next().is_none()
    }

    fn short(&self) -> &str {
        short(&self.id)
    }
}

/// Why a commit whose rollout failed is not reverted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Kept {
    /// The branch holds a newer commit: that one is applied next, and wins.
    #[error("the branch moved on to {}: the newer commit is applied instead", short(.head))]
    Superseded { head: String },
    /// It is tether's own revert: a revert is never reverted.
    #[error("it is tether's revert of {}; a revert is never reverted", short(.reverted))]
    IsRevert { reverted: String },
    /// A person's first commit after tether's revert (tether's own commits between
    /// them do not count): their answer to it (which may bring the change back on
    /// purpose), never fought.
    #[error("it is a person's commit after tether's revert {}; tether does not revert it in turn", short(.revert))]
    AnswersRevert { revert: String },
}

/// Whether the commit `failed` (whose rollout did not become healthy) may be
/// reverted, given the branch's first-parent `history` now (newest first): the
/// commit to revert, when it may.
pub fn decide<'h>(history: &'h [CommitFacts], failed: &str) -> Result<&'h CommitFacts, Kept> {
    let Some(head) = history.first().filter(|head| head.id == failed) else {
        return Err(Kept::Superseded {
            head: history.first().map(|h| h.id.clone()).unwrap_or_default(),
        });
    };
    if let Some(reverted) = head.reverts() {
        return Err(Kept::IsRevert {
            reverted: reverted.to_string(),
        });
    }
    if !head.by_person() {
        return Ok(head);
    }
    let since_last_person = history.iter().skip(1).take_while(|c| !c.by_person());
    match since_last_person
        .into_iter()
        .find(|c| c.reverts().is_some())
    {
        Some(revert) => Err(Kept::AnswersRevert {
            revert: revert.id.clone(),
        }),
        None => Ok(head),
    }
}

/// The message of tether's revert of `failed`: Git's own first line and body, the
/// objects that were not healthy in time and why, and the trailers (the commit
/// reverted; the image policies held, those `failed` updated).
pub fn message(failed: &CommitFacts, failing: &[(ObjectKey, String)], timeout: Duration) -> String {
    let mut text = format!(
        "Revert \"{}\"\n\nThis reverts commit {}.\n\nIts rollout did not become healthy within {}:\n",
        failed.summary,
        failed.id,
        humantime::format_duration(timeout)
    );
    for (key, state) in failing {
        text.push_str(&format!("- {key}: {state}\n"));
    }
    let policies = failed.policies();
    if !policies.is_empty() {
        text.push_str(
            "\nImage automation holds the policies below until a person commits to the branch.\n",
        );
    }
    text.push_str(&format!("\n{REVERT_TRAILER}: {}\n", failed.id));
    for policy in policies {
        text.push_str(&format!("{HOLD_TRAILER}: {policy}\n"));
    }
    text
}

/// The image policies held now, each with the revert that holds it: those of tether's
/// reverts since the branch's last commit by a person. `history` is the branch's
/// first-parent history, newest first.
pub fn held_policies(history: &[CommitFacts]) -> BTreeMap<String, String> {
    let mut held = BTreeMap::new();
    for commit in history.iter().take_while(|c| !c.by_person()) {
        for policy in commit.holds() {
            held.entry(policy.to_string())
                .or_insert_with(|| commit.id.clone());
        }
    }
    held
}

/// What image automation says of a policy `revert` holds.
pub fn held_reason(revert: &str) -> String {
    format!(
        "held: tether reverted its update in {} (the rollout failed); a person's commit to the branch releases it",
        short(revert)
    )
}

/// The first 10 digits of a commit id.
fn short(id: &str) -> &str {
    id.get(..10).unwrap_or(id)
}

impl std::fmt::Display for CommitFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.short(), self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(id: &str, trailers: &[(&str, &str)]) -> CommitFacts {
        CommitFacts {
            id: id.repeat(40 / id.len()),
            summary: format!("commit {id}"),
            trailers: trailers
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_failed_commit_is_reverted_unless_it_is_a_revert_superseded_or_a_persons_answer() {
        let person = commit("a", &[]);
        let image = commit("b", &[(POLICY_TRAILER, "web")]);
        let revert = commit("c", &[(REVERT_TRAILER, &person.id)]);
        let after_revert = commit("d", &[]);
        let image_after_revert = commit("e", &[(POLICY_TRAILER, "api")]);
        let discovery_after_revert = commit("f", &[(DISCOVERY_TRAILER, "shop")]);
        let answer_after_discovery = commit("1", &[]);
        let second_person = commit("2", &[]);
        let history = |commits: &[&CommitFacts]| -> Vec<CommitFacts> {
            commits.iter().map(|c| (*c).clone()).collect()
        };
        let cases: [(Vec<CommitFacts>, &CommitFacts, Result<(), Kept>); 9] = [
            (history(&[&person]), &person, Ok(())),
            (history(&[&image, &person]), &image, Ok(())),
            (
                history(&[&image, &person]),
                &person,
                Err(Kept::Superseded {
                    head: image.id.clone(),
                }),
            ),
            (
                history(&[&revert, &person]),
                &revert,
                Err(Kept::IsRevert {
                    reverted: person.id.clone(),
                }),
            ),
            (
                history(&[&after_revert, &revert, &person]),
                &after_revert,
                Err(Kept::AnswersRevert {
                    revert: revert.id.clone(),
                }),
            ),
            // Image automation is no person: its next update after a revert may fail too.
            (
                history(&[&image_after_revert, &revert, &person]),
                &image_after_revert,
                Ok(()),
            ),
            // Discovery is no person either, and tether's commits between the revert
            // and a person's do not hide the answer.
            (
                history(&[&discovery_after_revert, &revert, &person]),
                &discovery_after_revert,
                Ok(()),
            ),
            (
                history(&[
                    &answer_after_discovery,
                    &discovery_after_revert,
                    &image_after_revert,
                    &revert,
                    &person,
                ]),
                &answer_after_discovery,
                Err(Kept::AnswersRevert {
                    revert: revert.id.clone(),
                }),
            ),
            // Only a person's first commit after the revert answers it.
            (
                history(&[&second_person, &after_revert, &revert, &person]),
                &second_person,
                Ok(()),
            ),
        ];
        for (history, failed, expected) in cases {
            let decided = decide(&history, &failed.id).map(|c| assert_eq!(c, failed));
            assert_eq!(decided, expected, "{failed}");
        }
        assert_eq!(
            Kept::AnswersRevert {
                revert: revert.id.clone()
            }
            .to_string(),
            "it is a person's commit after tether's revert cccccccccc; tether does not revert it in turn"
        );
    }

    #[test]
    fn the_revert_names_the_failing_objects_and_holds_the_policies_of_the_commit() {
        let image = CommitFacts {
            summary: "web: 2.0.0 → 3.0.0".into(),
            ..commit("b", &[(POLICY_TRAILER, "web"), (POLICY_TRAILER, "api")])
        };
        let failing = [(
            ObjectKey::new("apps/v1", "Deployment", Some("hello"), "web"),
            "0 of 2 replicas available".to_string(),
        )];
        let text = message(&image, &failing, Duration::from_secs(90));
        assert_eq!(
            text,
            format!(
                "Revert \"web: 2.0.0 → 3.0.0\"\n\nThis reverts commit {id}.\n\nIts rollout did not become healthy within 1m 30s:\n- Deployment hello/web: 0 of 2 replicas available\n\nImage automation holds the policies below until a person commits to the branch.\n\nTether-Revert: {id}\nTether-Hold-Policy: web\nTether-Hold-Policy: api\n",
                id = image.id
            )
        );
        // Read back as Git reads trailers.
        let trailers = git_trailers(&text);
        let revert = CommitFacts {
            id: "f".repeat(40),
            summary: String::new(),
            trailers,
        };
        assert_eq!(revert.reverts(), Some(image.id.as_str()));
        assert_eq!(revert.holds(), ["web", "api"]);
        assert!(!revert.by_person());
    }

    /// Trailers as `git interpret-trailers --parse` reads them: the last paragraph's
    /// `Key: value` lines.
    fn git_trailers(message: &str) -> Vec<(String, String)> {
        let last = message.trim_end().rsplit("\n\n").next().unwrap_or_default();
        last.lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_revert_holds_its_policies_until_a_persons_commit() {
        let revert_web = commit("c", &[(REVERT_TRAILER, "b"), (HOLD_TRAILER, "web")]);
        let other_update = commit("d", &[(POLICY_TRAILER, "api")]);
        let older_revert = commit("9", &[(REVERT_TRAILER, "8"), (HOLD_TRAILER, "db")]);
        let person = commit("a", &[]);
        // Newest first: an update of another policy after the revert keeps the hold.
        let history = [
            other_update.clone(),
            revert_web.clone(),
            person.clone(),
            older_revert,
        ];
        assert_eq!(
            held_policies(&history),
            BTreeMap::from([("web".to_string(), revert_web.id.clone())])
        );
        // A person's commit after the revert releases it; discovery's does not.
        assert!(held_policies(&[person, revert_web.clone(), other_update]).is_empty());
        let discovery = commit("e", &[(DISCOVERY_TRAILER, "shop")]);
        assert_eq!(
            held_policies(&[discovery, revert_web.clone()]),
            BTreeMap::from([("web".to_string(), revert_web.id)])
        );
        assert!(
            held_reason(&"c".repeat(40))
                .starts_with("held: tether reverted its update in cccccccccc")
        );
    }
}
