//! A Source's revert that sticks (`spec.revert`): the rollout of each commit a pass
//! applied is waited for beside the loop (once per commit; a newer commit's wait
//! replaces it). When it does not become healthy within the Source's timeout (or a
//! wave of the pass was blocked by what did not), the engine's
//! [`revert`](tether_engine::revert) commits Git's revert of it to the branch, unless
//! the history says not to; then the loop is nudged to apply it, and the log,
//! `status.lastRevert`, the web page, a notice and the commit status say what happened. It stops with the loop.
//!
//! A wait cut short by a restart resumes: the commit the status says was applied
//! within the timeout before the loop started is waited for the time left
//! ([`resumed_wait`]), though its next pass changes nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use tether_api::source_spec::{RevertStatus, Source};
use tether_core::feedback::notice::NoticeKind;
use tether_core::k8s::ObjectKey;
use tether_engine::discovery::Destination;
use tether_engine::reconcile::{Blocker, Rollout};
use tether_engine::revert::{FailedRollout, Reverted, revert};
use tether_engine::writeback::Author;
use tether_web::RevertRow;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::feedback::{Draft, SourceFeedback};
use crate::switchboard::Trigger;

/// What a Source's reverts need, for the loop's life.
pub(crate) struct SourceRevert {
    pub(crate) destination: Destination,
    /// The branch reverted on (the Source's ref, else main).
    pub(crate) branch: String,
    pub(crate) author: Author,
    /// How long a rollout may take: the Source's `spec.timeout`.
    pub(crate) timeout: Duration,
    /// `ref@sha1:commit`, as the status names a revision.
    pub(crate) reference: Option<String>,
    pub(crate) sources: Api<Source>,
    pub(crate) name: String,
    pub(crate) feedback: Option<Arc<SourceFeedback>>,
    /// The daemon's shared state and the Source's name there: the web page's view.
    pub(crate) shown: (Arc<crate::shared::Shared>, crate::loop_views::SourceName),
    /// The Source's loop, nudged after a revert.
    pub(crate) trigger: mpsc::Sender<Trigger>,
    /// The commit whose rollout is (or was last) watched, and its wait.
    pub(crate) watched: Mutex<Option<(String, JoinHandle<()>)>>,
    /// The wait an earlier loop left unfinished, as of when the loop started; taken
    /// by the first pass.
    pub(crate) resumed: Mutex<Option<(Resumed, Instant)>>,
}

/// A rollout an earlier loop (another process, before a restart) was waiting for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resumed {
    pub(crate) commit: String,
    /// What is left of its timeout.
    pub(crate) left: Duration,
}

/// The wait to resume: the commit applied last (`applied`, at `applied_at`, RFC
/// 3339), when its timeout had not run out `now`; none otherwise (its rollout was
/// judged, or was due while no one watched: a commit deployed long ago is never
/// reverted for a later failure).
pub(crate) fn resumed_wait(
    applied: Option<&str>,
    applied_at: Option<&str>,
    timeout: Duration,
    now: Timestamp,
) -> Option<Resumed> {
    let at: Timestamp = applied_at?.parse().ok()?;
    let elapsed = Duration::try_from(now.duration_since(at)).ok()?;
    Some(Resumed {
        commit: applied?.to_string(),
        left: timeout
            .checked_sub(elapsed)
            .filter(|left| !left.is_zero())?,
    })
}

impl Drop for SourceRevert {
    fn drop(&mut self) {
        if let Some((_, waiting)) = self.lock().take() {
            waiting.abort();
        }
    }
}

/// How a commit's rollout fared.
pub(crate) enum RolloutOf {
    /// Applied: to be waited for.
    Applied(Rollout),
    /// A wave of the pass waited the timeout for these, and they were not healthy.
    Blocked(Vec<Blocker>),
}

impl SourceRevert {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(String, JoinHandle<()>)>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time left of an earlier loop's wait for `commit`, once: the first pass
    /// takes it, whatever its commit.
    pub(crate) fn resume(&self, commit: &str) -> Option<Duration> {
        let (resumed, as_of) = self
            .resumed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let left = resumed.left.checked_sub(as_of.elapsed())?;
        (resumed.commit == commit && !left.is_zero()).then_some(left)
    }

    /// Watches the rollout of `commit` for up to `timeout`, unless it is watched
    /// already (each pass of the same commit would otherwise start the wait again).
    pub(crate) fn watch(self: &Arc<Self>, commit: &str, rollout: RolloutOf, timeout: Duration) {
        let mut watched = self.lock();
        if watched.as_ref().is_some_and(|(c, _)| c == commit) {
            return;
        }
        let this = Arc::downgrade(self);
        let id = commit.to_string();
        let waiting = tokio::spawn(async move {
            let result = match rollout {
                RolloutOf::Applied(rollout) => rollout.wait(timeout).await,
                RolloutOf::Blocked(blockers) => Err(blockers),
            };
            if let Some(this) = this.upgrade() {
                this.ended(&id, result).await;
            }
        });
        if let Some((_, replaced)) = watched.replace((commit.to_string(), waiting)) {
            replaced.abort();
        }
    }

    /// The rollout of `commit` ended: healthy, or reverted, or kept with the reason.
    async fn ended(&self, commit: &str, result: Result<(), Vec<Blocker>>) {
        let blockers = match &result {
            Ok(()) => {
                if let Some(feedback) = &self.feedback {
                    feedback.rollout_ended(commit, None, None).await;
                }
                return;
            }
            Err(blockers) => blockers,
        };
        let failed = FailedRollout {
            commit: commit.to_string(),
            failing: blockers
                .iter()
                .map(|b| (b.key.clone(), b.state.clone()))
                .collect(),
            timeout: self.timeout,
        };
        let (destination, branch, author) = (
            self.destination.clone(),
            self.branch.clone(),
            self.author.clone(),
        );
        let failed_copy = failed.clone();
        let reverted = tokio::task::spawn_blocking(move || {
            revert(&destination, Some(&branch), &failed_copy, &author)
        })
        .await;
        let reverted = match reverted {
            Ok(Ok(reverted)) => reverted,
            Ok(Err(error)) => {
                let error = tether_core::error_chain(&error);
                tracing::error!(%commit, %error, "the failed rollout could not be reverted");
                self.say(&failed, None, &format!("not reverted: {error}"), &[])
                    .await;
                return;
            }
            Err(error) => {
                tracing::error!(%commit, %error, "the revert's task failed");
                return;
            }
        };
        match reverted {
            Reverted::Committed {
                commit: revert,
                held,
            } => {
                tracing::warn!(%commit, %revert, ?held, failing = %failing_text(&failed.failing), "the rollout failed: reverted");
                let said = format!("reverted in {}", short(&revert));
                self.say(&failed, Some(&revert), &said, &held).await;
                // A full channel already holds a trigger: the pass will see the revert.
                let _ = self.trigger.try_send(Trigger::Changed);
            }
            Reverted::Kept(kept) => {
                tracing::warn!(%commit, failing = %failing_text(&failed.failing), reason = %kept, "the rollout failed: not reverted");
                self.say(&failed, None, &format!("not reverted: {kept}"), &[])
                    .await;
            }
        }
    }

    /// Says what became of a failed rollout: the status, a notice (an Event on the
    /// Source, with a `kubernetes-events` receiver) and the commit status.
    async fn say(&self, failed: &FailedRollout, revert: Option<&str>, what: &str, held: &[String]) {
        let failing = failing_text(&failed.failing);
        let message = format!("{failing}: {what}");
        let status = RevertStatus {
            failed: self.revision(&failed.commit),
            revert: revert.map(|r| self.revision(r)),
            message: message.clone(),
            held: held.to_vec(),
            time: crate::clock::now(),
        };
        let (shared, name) = &self.shown;
        shared.views.revert(name, row(&status));
        // A merge patch: a field left out would keep an earlier revert's value.
        let patch = serde_json::json!({ "status": { "lastRevert": {
            "failed": status.failed,
            "revert": status.revert,
            "message": status.message,
            "held": status.held,
            "time": status.time,
        } } });
        if let Err(error) = self
            .sources
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(%error, "cannot write the Source's last revert");
        }
        let note = format!(
            "the rollout of {} did not become healthy within {}: {message}",
            short(&failed.commit),
            humantime::format_duration(self.timeout)
        );
        if let Some(feedback) = &self.feedback {
            let kind = match revert {
                Some(_) => NoticeKind::Reverted,
                None => NoticeKind::Failed,
            };
            let revision = self.revision(&failed.commit);
            let draft = Draft::new(kind, note).because("RolloutFailed");
            feedback.notify(vec![draft], Some(&revision)).await;
            feedback
                .rollout_ended(&failed.commit, Some(&failed.failing), Some(what))
                .await;
        }
    }

    fn revision(&self, commit: &str) -> String {
        crate::source_status::revision_name(self.reference.as_deref(), commit)
    }
}

/// `Deployment hello/web: 0 of 2 replicas available; …`.
/// How the web page shows a failed rollout the status records.
pub(crate) fn row(status: &RevertStatus) -> RevertRow {
    RevertRow {
        failed: status.failed.clone(),
        revert: status.revert.clone(),
        message: status.message.clone(),
        held: status.held.clone(),
        time: status.time.clone(),
    }
}

fn failing_text(failing: &[(ObjectKey, String)]) -> String {
    failing
        .iter()
        .map(|(key, state)| format!("{key}: {state}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A commit's first 10 characters.
fn short(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_resumes_for_the_time_left_of_the_timeout_and_never_after_it() {
        let applied_at = "2026-12-01T10:00:00Z";
        let at = |time: &str| time.parse::<Timestamp>().unwrap();
        let minute = Duration::from_secs(60);
        let cases = [
            // Restarted 20 s after the apply, of a 1 min timeout: 40 s left.
            (
                Some("abc"),
                Some(applied_at),
                "2026-12-01T10:00:20Z",
                Some(Duration::from_secs(40)),
            ),
            // The timeout ran out while no one watched: never judged late.
            (Some("abc"), Some(applied_at), "2026-12-01T10:01:00Z", None),
            (Some("abc"), Some(applied_at), "2026-12-01T11:00:00Z", None),
            // A clock behind the status, a time that does not parse, nothing applied.
            (Some("abc"), Some(applied_at), "2026-12-01T09:59:00Z", None),
            (Some("abc"), Some("yesterday"), "2026-12-01T10:00:20Z", None),
            (None, Some(applied_at), "2026-12-01T10:00:20Z", None),
            (Some("abc"), None, "2026-12-01T10:00:20Z", None),
        ];
        for (applied, applied_at, now, left) in cases {
            assert_eq!(
                resumed_wait(applied, applied_at, minute, at(now)),
                left.map(|left| Resumed {
                    commit: "abc".into(),
                    left
                }),
                "{applied:?} at {applied_at:?}, now {now}"
            );
        }
    }
}
