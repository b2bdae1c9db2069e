//! Writing tether's revert of a commit whose rollout did not become healthy (a
//! Source's `spec.revert`): fetched, decided on the branch as it is now
//! ([`tether_core::revert::decide`]: never a revert, never a newer commit, never a
//! person's answer to a revert), committed on top of it with its first parent's tree
//! (what `git revert` makes of the branch's tip), signed when the Source signs, and
//! pushed without force. A push the remote refuses (it moved meanwhile) is decided
//! again on the new tip, which then wins. Blocking (git2): call off the async runtime.

use std::time::Duration;

use tether_core::k8s::ObjectKey;
use tether_core::revert::{Kept, decide, message};

use crate::discovery::Destination;
use crate::writeback::{Author, WritebackError};

/// How many times a revert refused by the remote is decided again.
const ATTEMPTS: usize = 3;

/// A failed rollout, to revert.
#[derive(Clone, Debug)]
pub struct FailedRollout {
    /// The commit whose rollout failed.
    pub commit: String,
    /// The objects not healthy in time, and why.
    pub failing: Vec<(ObjectKey, String)>,
    /// How long the rollout was given.
    pub timeout: Duration,
}

/// What became of a revert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reverted {
    /// The revert commit, pushed; the image policies it holds.
    Committed { commit: String, held: Vec<String> },
    /// Not reverted, and why.
    Kept(Kept),
}

/// Reverts `failed` on `branch` of `destination`, as `author`.
pub fn revert(
    destination: &Destination,
    branch: Option<&str>,
    failed: &FailedRollout,
    author: &Author,
) -> Result<Reverted, WritebackError> {
    let workspace = destination.open(branch)?;
    for _ in 0..ATTEMPTS {
        let history = workspace.history(2)?;
        let reverted = match decide(&history, &failed.commit) {
            Ok(reverted) => reverted,
            Err(kept) => return Ok(Reverted::Kept(kept)),
        };
        let text = message(reverted, &failed.failing, failed.timeout);
        let Some(commit) = workspace.commit_parent_tree(&text, author)? else {
            // A root commit: there is nothing to go back to.
            return Ok(Reverted::Kept(Kept::Superseded {
                head: failed.commit.clone(),
            }));
        };
        if workspace.push_unless_moved()? {
            return Ok(Reverted::Committed {
                commit: commit.to_string(),
                held: reverted
                    .policies()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            });
        }
    }
    let head = workspace
        .history(1)?
        .first()
        .map(|h| h.id.clone())
        .unwrap_or_default();
    Ok(Reverted::Kept(Kept::Superseded { head }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;
    use crate::git::Credentials;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                "user.name=Person",
                "-c",
                "user.email=person@example.org",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A bare remote and a person's clone of it, with one commit of `models/web.yaml`.
    fn remote() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("models.git");
        let work = dir.path().join("work");
        git(
            dir.path(),
            &["init", "-q", "--bare", "-b", "main", "models.git"],
        );
        git(dir.path(), &["clone", "-q", "models.git", "work"]);
        std::fs::create_dir_all(work.join("models")).unwrap();
        std::fs::write(work.join("models/web.yaml"), "probe: /ready\n").unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "web"]);
        git(&work, &["push", "-q", "origin", "HEAD:main"]);
        (dir, bare, work)
    }

    fn push_change(work: &Path, text: &str, message: &str) -> String {
        git(work, &["pull", "-q", "--ff-only", "origin", "main"]);
        std::fs::write(work.join("models/web.yaml"), text).unwrap();
        git(work, &["commit", "-qam", message]);
        git(work, &["push", "-q", "origin", "HEAD:main"]);
        git(work, &["rev-parse", "HEAD"])
    }

    fn failed(commit: &str) -> FailedRollout {
        FailedRollout {
            commit: commit.to_string(),
            failing: vec![(
                ObjectKey::new("apps/v1", "Deployment", Some("hello"), "web"),
                "0 of 2 replicas available".into(),
            )],
            timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_failed_commit_is_reverted_once_and_a_newer_commit_wins() {
        let (dir, bare, work) = remote();
        let destination = Destination::Remote {
            url: format!("file://{}", bare.display()),
            path: "models".into(),
            cache: dir.path().join("cache"),
            credentials: Credentials::default(),
        };
        let bad = push_change(&work, "probe: /missing\n", "probe /missing");
        let author = Author::default();
        let Reverted::Committed { commit, held } =
            revert(&destination, Some("main"), &failed(&bad), &author).unwrap()
        else {
            panic!("not reverted")
        };
        assert!(held.is_empty());
        // The git CLI reads what git2 wrote: on the remote's branch, the file as before.
        git(&work, &["pull", "-q", "--ff-only", "origin", "main"]);
        assert_eq!(git(&work, &["rev-parse", "HEAD"]), commit);
        assert_eq!(git(&work, &["log", "-1", "--format=%an"]), "tether");
        assert_eq!(
            git(
                &work,
                &[
                    "log",
                    "-1",
                    "--format=%(trailers:key=Tether-Revert,valueonly)"
                ]
            ),
            bad
        );
        let body = git(&work, &["log", "-1", "--format=%B"]);
        assert!(
            body.starts_with("Revert \"probe /missing\"")
                && body.contains("- Deployment hello/web: 0 of 2 replicas available"),
            "{body}"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("models/web.yaml")).unwrap(),
            "probe: /ready\n"
        );
        // The revert is never reverted.
        assert_eq!(
            revert(&destination, Some("main"), &failed(&commit), &author).unwrap(),
            Reverted::Kept(Kept::IsRevert {
                reverted: bad.clone()
            })
        );
        // A person's answer to it (bringing the change back) is never reverted.
        git(&work, &["revert", "--no-edit", "HEAD"]);
        git(&work, &["push", "-q", "origin", "HEAD:main"]);
        let answer = git(&work, &["rev-parse", "HEAD"]);
        assert_eq!(
            revert(&destination, Some("main"), &failed(&answer), &author).unwrap(),
            Reverted::Kept(Kept::AnswersRevert {
                revert: commit.clone()
            })
        );
        // A newer commit on the branch wins over the revert of an older one.
        let older = push_change(&work, "probe: /nowhere\n", "probe /nowhere");
        push_change(&work, "probe: /ready\n", "fixed");
        assert!(matches!(
            revert(&destination, Some("main"), &failed(&older), &author).unwrap(),
            Reverted::Kept(Kept::Superseded { .. })
        ));
    }
}
