//! Commit statuses (pure): the context of a (cluster, Source), a description cut to
//! the host's limit, and the [`Ledger`] that decides which status is sent at all:
//! one request per (commit, context, state), and never a state after a final one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{CommitState, CommitStatus};

/// GitHub refuses a longer description.
pub const DESCRIPTION_LIMIT: usize = 140;

/// How many commits per context the ledger remembers: enough that a commit the ref
/// left is not taken up again unknowingly, little enough to stay small.
const COMMITS_REMEMBERED: usize = 50;

/// `tether/<cluster>/<source>`: the context of a Source's commits on one cluster.
pub fn context(cluster: &str, source: &str) -> String {
    format!("tether/{cluster}/{source}")
}

/// `tether/diff/<cluster>/<source>`: the context of a pull request's plan.
pub fn diff_context(cluster: &str, source: &str) -> String {
    format!("tether/diff/{cluster}/{source}")
}

/// `text` on one line, cut to [`DESCRIPTION_LIMIT`] characters (an ellipsis says so).
pub fn description(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(DESCRIPTION_LIMIT - 1) {
        Some((end, _)) if line.chars().count() > DESCRIPTION_LIMIT => {
            format!("{}…", &line[..end])
        }
        _ => line,
    }
}

impl CommitStatus {
    pub fn new(commit: &str, context: &str, state: CommitState, text: &str) -> Self {
        CommitStatus {
            commit: commit.to_string(),
            context: context.to_string(),
            state,
            description: description(text),
            target_url: None,
        }
    }
}

/// What was last said of each (commit, context), kept across restarts: the rule that
/// makes at most one request per (commit, context, state) and never success then
/// failure for one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// By context: each commit's last state, the newest commit last.
    contexts: BTreeMap<String, Vec<(String, CommitState)>>,
}

impl Ledger {
    /// Whether `status` is news (then it is recorded as said): a first state for its
    /// commit and context, or a final one after pending.
    pub fn admit(&mut self, status: &CommitStatus) -> bool {
        let commits = self.contexts.entry(status.context.clone()).or_default();
        let position = commits.iter().position(|(c, _)| *c == status.commit);
        let admitted = match position.map(|p| commits[p].1) {
            None => true,
            Some(said) => !said.is_final() && said != status.state,
        };
        if admitted {
            if let Some(position) = position {
                commits.remove(position);
            }
            commits.push((status.commit.clone(), status.state));
            if commits.len() > COMMITS_REMEMBERED {
                commits.remove(0);
            }
        }
        admitted
    }

    /// The last state said of `commit` under `context`.
    pub fn said(&self, commit: &str, context: &str) -> Option<CommitState> {
        self.contexts
            .get(context)?
            .iter()
            .find(|(c, _)| c == commit)
            .map(|(_, state)| *state)
    }

    /// The commits of `context` still pending, oldest first.
    pub fn pending(&self, context: &str) -> Vec<&str> {
        self.contexts.get(context).map_or_else(Vec::new, |commits| {
            commits
                .iter()
                .filter(|(_, s)| *s == CommitState::Pending)
                .map(|(c, _)| c.as_str())
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(commit: &str, context: &str, state: CommitState) -> CommitStatus {
        CommitStatus::new(commit, context, state, "")
    }

    #[test]
    fn each_state_is_said_once_and_nothing_after_a_final_one() {
        use CommitState::*;
        let mut ledger = Ledger::default();
        let east = context("east", "shop/web");
        let said: Vec<bool> = [Pending, Pending, Success, Failure, Success, Pending]
            .into_iter()
            .map(|state| ledger.admit(&status("c1", &east, state)))
            .collect();
        assert_eq!(said, [true, false, true, false, false, false]);
        assert_eq!(ledger.said("c1", &east), Some(Success));
    }

    #[test]
    fn contexts_of_two_clusters_are_apart() {
        use CommitState::*;
        let mut ledger = Ledger::default();
        let (east, west) = (context("east", "shop/web"), context("west", "shop/web"));
        assert!(ledger.admit(&status("c1", &east, Pending)));
        assert!(ledger.admit(&status("c1", &west, Pending)));
        assert!(ledger.admit(&status("c1", &east, Failure)));
        assert!(ledger.admit(&status("c1", &west, Success)));
        assert_eq!(ledger.pending(&east), Vec::<&str>::new());
        assert!(ledger.admit(&status("c2", &east, Pending)));
        assert_eq!(ledger.pending(&east), ["c2"]);
    }

    #[test]
    fn the_ledger_forgets_old_commits_but_not_recent_ones() {
        let mut ledger = Ledger::default();
        let east = context("east", "shop/web");
        for n in 0..=COMMITS_REMEMBERED {
            assert!(ledger.admit(&status(&format!("c{n}"), &east, CommitState::Success)));
        }
        assert_eq!(ledger.said("c0", &east), None);
        assert!(!ledger.admit(&status("c1", &east, CommitState::Failure)));
    }

    #[test]
    fn descriptions_fit_on_the_host() {
        assert_eq!(
            description("wave 2 →\n  Deployment shop/web"),
            "wave 2 → Deployment shop/web"
        );
        let long = "é".repeat(200);
        let cut = description(&long);
        assert_eq!(cut.chars().count(), DESCRIPTION_LIMIT);
        assert!(cut.ends_with('…'));
        assert_eq!(description(&"a".repeat(140)), "a".repeat(140));
    }
}
