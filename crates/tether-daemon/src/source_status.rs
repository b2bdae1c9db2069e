//! A Source's status after a pass, computed from the previous status and what the
//! pass did (pure). kstatus conditions: `Ready` always; `Reconciling` while a new
//! revision is being applied or a failure is retried; `Stalled` when retrying cannot
//! help until someone changes the models or the cluster. And how the status names a
//! revision ([`revision_name`]), which the revert and the feedback use too.

use tether_api::source_spec::{Condition, PlanCounts, SourceStatus};
use tether_core::inventory::budget::PruneHold;
use tether_core::remedy::Remedy;
use tether_engine::oci;
use tether_engine::reconcile::outcome::{ApplyReport, ObjectFailure};

/// How a revision is named in the status: `<ref>@sha1:<hex>` (`HEAD` for the remote's
/// default branch); an artifact's revision (`<tag>@sha256:<hex>`) names itself.
pub(crate) fn revision_name(reference: Option<&str>, commit: &str) -> String {
    if oci::is_artifact_revision(commit) {
        return commit.to_string();
    }
    format!("{}@sha1:{commit}", reference.unwrap_or("HEAD"))
}

/// The commit of a [`revision_name`], when it names `reference` (a revision of
/// another ref says nothing of this one's history); an artifact's revision is its own
/// commit (its tag is part of it).
pub(crate) fn commit_of_revision<'r>(
    revision: &'r str,
    reference: Option<&str>,
) -> Option<&'r str> {
    if oci::is_artifact_revision(revision) {
        return Some(revision);
    }
    let (named, commit) = revision.split_once("@sha1:")?;
    (named == reference.unwrap_or("HEAD")).then_some(commit)
}

/// What the pass came to, as the status tells it.
#[derive(Debug)]
pub(crate) enum PassResult<'a> {
    /// Applied without error.
    Applied {
        revision: String,
        report: &'a ApplyReport,
    },
    /// Applied, but some objects failed.
    ObjectsFailed {
        revision: String,
        report: &'a ApplyReport,
    },
    /// The pass stopped.
    Failed {
        revision: Option<String>,
        reason: &'static str,
        message: String,
        /// Retrying cannot help before the models or the cluster change.
        stalled: bool,
    },
    /// The Source is suspended.
    Suspended,
    /// A new revision (or spec) is being applied.
    Progressing { revision: String },
}

/// The status after `result`, at `now` (RFC 3339). Conditions keep their transition
/// time while their status does not change.
pub(crate) fn next_status(
    previous: &SourceStatus,
    generation: Option<i64>,
    result: &PassResult,
    now: &str,
) -> SourceStatus {
    let mut status = previous.clone();
    status.observed_generation = generation;
    let mut set = |type_: &str, value: Option<(&str, &str, String)>| {
        set_condition(&mut status.conditions, type_, value, generation, now);
    };
    match result {
        PassResult::Applied { revision, .. } => {
            set(
                "Ready",
                Some((
                    "True",
                    "ReconciliationSucceeded",
                    format!("Applied revision {revision}"),
                )),
            );
            set("Reconciling", None);
            set("Stalled", None);
        }
        PassResult::ObjectsFailed { report, .. } => {
            let (reason, message, retryable) = apply_failed(report);
            set("Ready", Some(("False", reason, message.clone())));
            if retryable {
                set(
                    "Reconciling",
                    Some(("True", "RetryingAfterFailure", message)),
                );
                set("Stalled", None);
            } else {
                set("Reconciling", None);
                let stalled = match reason {
                    "PruneHeld" => "PruneHeld",
                    _ => "ObjectsRefused",
                };
                set("Stalled", Some(("True", stalled, message)));
            }
        }
        PassResult::Failed {
            reason,
            message,
            stalled,
            ..
        } => {
            set("Ready", Some(("False", reason, message.clone())));
            if *stalled {
                set("Reconciling", None);
                set("Stalled", Some(("True", reason, message.clone())));
            } else {
                set(
                    "Reconciling",
                    Some(("True", "RetryingAfterFailure", message.clone())),
                );
                set("Stalled", None);
            }
        }
        PassResult::Suspended => {
            set(
                "Ready",
                Some(("Unknown", "Suspended", "reconciliation is suspended".into())),
            );
            set("Reconciling", None);
            set("Stalled", None);
        }
        PassResult::Progressing { revision } => {
            set(
                "Reconciling",
                Some(("True", "Progressing", format!("applying {revision}"))),
            );
        }
    }
    record_revisions(&mut status, result, now);
    status
}

/// The revisions, counts and success time a pass leaves in the status.
fn record_revisions(status: &mut SourceStatus, result: &PassResult, now: &str) {
    match result {
        PassResult::Applied { revision, report } => {
            status.last_attempted_revision = Some(revision.clone());
            status.last_applied_revision = Some(revision.clone());
            status.last_plan = Some(counts(report));
            status.last_success_time = Some(now.to_string());
        }
        PassResult::ObjectsFailed { revision, report } => {
            status.last_attempted_revision = Some(revision.clone());
            status.last_plan = Some(counts(report));
        }
        PassResult::Failed {
            revision: Some(revision),
            ..
        } => status.last_attempted_revision = Some(revision.clone()),
        PassResult::Failed { revision: None, .. }
        | PassResult::Suspended
        | PassResult::Progressing { .. } => {}
    }
}

/// The Warning Event a refused pass records on its Source, beside its status: the
/// reason and the note. Refused are objects the identity may not change (the API
/// server's 403: each names its object, the verb and the identity; on another
/// cluster of the Source, the pass fails with reason `Forbidden`) and models the
/// checks refuse (the Source's confinement among them: the message names the same),
/// and a commit (or tag) no trusted key signed (`spec.verify`: the message names the
/// commit, its signer and the keys).
pub(crate) fn refusal_event(result: &PassResult) -> Option<(&'static str, String)> {
    match result {
        PassResult::ObjectsFailed {
            report:
                ApplyReport {
                    prune_held: Some(hold),
                    ..
                },
            ..
        } => Some(("PruneHeld", note(&prune_held(hold)))),
        PassResult::ObjectsFailed { report, .. } => {
            let forbidden: Vec<String> = report
                .failures()
                .filter(|(_, f)| matches!(f, ObjectFailure::Forbidden { .. }))
                .map(|(key, failure)| format!("{key}: {failure}"))
                .collect();
            (!forbidden.is_empty()).then(|| ("Forbidden", note(&forbidden.join("; "))))
        }
        PassResult::Failed {
            reason: reason @ ("InvalidModels" | "Forbidden" | "Unverified"),
            message,
            ..
        } => Some((reason, note(message))),
        _ => None,
    }
}

/// An Event's note is at most 1 kB (the API server refuses a longer one): `text`,
/// cut at a character boundary with an ellipsis when longer.
fn note(text: &str) -> String {
    const MOST: usize = 1024 - '…'.len_utf8();
    if text.len() <= 1024 {
        return text.to_string();
    }
    let cut = (0..=MOST)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}…", &text[..cut])
}

/// Whether two statuses differ in more than the time of the last success: a pass
/// that changed nothing writes nothing.
pub(crate) fn worth_writing(previous: &SourceStatus, next: &SourceStatus) -> bool {
    let mut next = next.clone();
    next.last_success_time = previous.last_success_time.clone();
    // The counts of a pass that found everything unchanged say nothing new.
    if next
        .last_plan
        .as_ref()
        .is_some_and(|p| p.created + p.configured + p.pruned + p.released + p.failed == 0)
        && next.last_applied_revision == previous.last_applied_revision
    {
        next.last_plan = previous.last_plan.clone();
    }
    next != *previous
}

/// Why a replica stops running a Source it held, for the Source's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Handover {
    /// Another live member owns it now (in this replica's view).
    To(String),
    /// This replica's Lease was not seen renewed in time: it runs nothing until it is.
    Lapsed,
    /// This replica stops (a signal).
    Stopping,
}

/// The conditions of a Source whose claim `me` releases at `now`: Ready is Unknown,
/// saying who stopped running it, since when, why, and who is to run it, so that a
/// Source nobody runs never shows a message of its last pass for minutes.
pub(crate) fn handed_over(
    status: &SourceStatus,
    me: &str,
    handover: &Handover,
    now: &str,
) -> Vec<Condition> {
    let next = match handover {
        Handover::To(owner) => format!("{owner} owns it now and runs it once it has claimed it"),
        Handover::Lapsed => "its Lease was not seen renewed in time; the member that owns it once the Lease expires runs it".to_string(),
        Handover::Stopping => "it is stopping; the other members take it over".to_string(),
    };
    let mut conditions = status.conditions.clone();
    let message = format!("{me} stopped running it at {now}: {next}");
    let generation = status.observed_generation;
    set_condition(
        &mut conditions,
        "Ready",
        Some(("Unknown", "HandedOver", message)),
        generation,
        now,
    );
    conditions
}

fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    value: Option<(&str, &str, String)>,
    generation: Option<i64>,
    now: &str,
) {
    let Some((status, reason, message)) = value else {
        conditions.retain(|c| c.type_ != type_);
        return;
    };
    let transition = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.to_string(), |c| c.last_transition_time.clone());
    let condition = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: transition,
        observed_generation: generation,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

fn counts(report: &ApplyReport) -> PlanCounts {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    PlanCounts {
        created: count(report.created()),
        configured: count(report.configured()),
        unchanged: count(report.unchanged()),
        pruned: count(report.pruned()),
        released: count(report.released()),
        failed: count(report.failures().count()),
    }
}

/// Why an apply did not succeed, as the status says it: the reason, the message, and
/// whether retrying can help.
pub(crate) fn apply_failed(report: &ApplyReport) -> (&'static str, String, bool) {
    let retryable = report.failures().any(|(_, f)| f.retryable());
    match (&report.blocked, &report.prune_held, report.hook_failure()) {
        (Some(blocked), _, _) => blocked_status(blocked),
        // Held until a person approves it: retrying cannot help.
        (None, Some(hold), _) => ("PruneHeld", prune_held(hold), false),
        // A hook is made anew by each try: not again before something changes.
        (None, None, Some(hook)) if report.failures().next().is_none() => {
            ("HookFailed", hook_failed(hook), false)
        }
        _ => ("ObjectsFailed", objects_failed(report), retryable),
    }
}

/// `PreSync hook Job shop/db-migrate-x7k2p: Job failed: BackoffLimitExceeded`.
pub(crate) fn hook_failed(hook: &tether_engine::reconcile::outcome::HookRun) -> String {
    let why = hook.failure.as_deref().unwrap_or_default();
    format!("{} hook {}: {why}", hook.phase, hook.key)
}

/// A wave whose dependencies are not ready yet (a later pass resumes), or failed:
/// the reason, the message, and whether retrying can help.
fn blocked_status(blocked: &tether_engine::reconcile::BlockedWave) -> (&'static str, String, bool) {
    let first = blocked
        .blockers
        .first()
        .map(|b| format!("{}: {}", b.key, b.state))
        .unwrap_or_default();
    let message = format!(
        "wave {} of {} waits for what it depends on; {first}",
        blocked.wave + 1,
        blocked.waves
    );
    let retryable = !blocked.blockers.iter().any(|b| b.failed);
    ("DependencyNotReady", message, retryable)
}

/// How many of an apply's objects failed, and the first with why: what a status says
/// of a pass (or of one cluster) whose objects failed.
/// A prune held beyond the Source's deletion budget, and how a person approves it:
/// `tether approve SOURCE DIGEST` (or the page: both set the Source's annotation), or
/// a fixed commit.
pub(crate) fn prune_held(hold: &PruneHold) -> String {
    tether_core::report::held_text(hold, remedy_words)
}

pub(crate) fn objects_failed(report: &ApplyReport) -> String {
    let first = report
        .failures()
        .next()
        .map(|(key, failure)| format!("{key}: {failure}"))
        .unwrap_or_default();
    format!(
        "{} of {} objects failed; {first}",
        report.failures().count(),
        report.objects.len()
    )
}

/// How a Source's status (and the page) words a remedy: in the Source's terms, not the CLI's flags.
pub(crate) fn remedy_words(remedy: Remedy) -> &'static str {
    match remedy {
        Remedy::Prune => "set spec.prune: true on the Source",
        Remedy::AllowEmpty => "set spec.allowEmpty: true on the Source to prune everything",
        // "… approve exactly these deletions with tether approve SOURCE sha256:…"
        Remedy::ApproveDeletions => "tether approve SOURCE",
        _ => "run tether diff on the repository for what to do",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::k8s::ObjectKey;
    use tether_engine::reconcile::{ObjectFailure, ObjectReport, Outcome};

    fn report(outcomes: Vec<Outcome>) -> ApplyReport {
        ApplyReport {
            objects: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, outcome)| ObjectReport {
                    key: ObjectKey::new("v1", "ConfigMap", Some("team"), &format!("c{i}")),
                    outcome,
                })
                .collect(),
            blocked: None,
            stopped: false,
            prune_held: None,
            hooks: Vec::new(),
        }
    }

    fn condition<'a>(status: &'a SourceStatus, type_: &str) -> Option<&'a Condition> {
        status.conditions.iter().find(|c| c.type_ == type_)
    }

    #[test]
    fn a_handover_says_who_ran_the_source_since_when_and_who_runs_it_next() {
        let before = next_status(
            &SourceStatus::default(),
            Some(1),
            &PassResult::Applied {
                revision: "main@sha1:abc".into(),
                report: &report(vec![]),
            },
            "2026-11-29T08:00:00Z",
        );
        let at = "2026-11-29T09:00:00Z";
        for (handover, says) in [
            (
                Handover::To("r2".into()),
                "r0 stopped running it at 2026-11-29T09:00:00Z: r2 owns it now",
            ),
            (Handover::Lapsed, "its Lease was not seen renewed in time"),
            (
                Handover::Stopping,
                "it is stopping; the other members take it over",
            ),
        ] {
            let conditions = handed_over(&before, "r0", &handover, at);
            let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("Unknown", "HandedOver")
            );
            assert!(ready.message.contains(says), "{}", ready.message);
            assert_eq!(ready.last_transition_time, at);
            // The other conditions stay as the last pass wrote them.
            assert_eq!(conditions.len(), before.conditions.len());
        }
    }

    #[test]
    fn a_failed_hook_or_a_blocked_wave_is_named_not_counted_as_failed_objects() {
        let mut hooked = report(vec![Outcome::Unchanged]);
        hooked.hooks.push(tether_engine::reconcile::HookRun {
            phase: tether_core::directive::HookPhase::PreSync,
            key: ObjectKey::new("batch/v1", "Job", Some("shop"), "db-migrate-x7k2p"),
            failure: Some("Job failed: BackoffLimitExceeded".into()),
            deleted: false,
        });
        let result = PassResult::ObjectsFailed {
            revision: "main@sha1:abc".into(),
            report: &hooked,
        };
        let status = next_status(&SourceStatus::default(), Some(1), &result, "T1");
        let ready = condition(&status, "Ready").unwrap();
        assert_eq!(
            (ready.reason.as_str(), ready.message.as_str()),
            (
                "HookFailed",
                "PreSync hook Job shop/db-migrate-x7k2p: Job failed: BackoffLimitExceeded"
            )
        );
        // Made anew by each try: stalled until something changes.
        assert_eq!(condition(&status, "Stalled").unwrap().status, "True");
        let mut blocked = report(vec![Outcome::Configured]);
        blocked.blocked = Some(tether_engine::reconcile::BlockedWave {
            wave: 1,
            waves: 2,
            blockers: vec![tether_engine::reconcile::Blocker {
                key: ObjectKey::new("apps/v1", "Deployment", Some("shop"), "web"),
                state: "1/2 updated".into(),
                failed: false,
                external: false,
                needed_by: Vec::new(),
            }],
            not_applied: 1,
        });
        assert_eq!(
            apply_failed(&blocked).1,
            "wave 2 of 2 waits for what it depends on; Deployment shop/web: 1/2 updated"
        );
    }

    #[test]
    fn success_is_ready_with_revision_counts_and_time() {
        let applied = report(vec![Outcome::Created, Outcome::Unchanged]);
        let result = PassResult::Applied {
            revision: "main@sha1:abc".into(),
            report: &applied,
        };
        let status = next_status(&SourceStatus::default(), Some(2), &result, "T1");
        let ready = condition(&status, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "ReconciliationSucceeded")
        );
        assert_eq!(
            status.last_applied_revision.as_deref(),
            Some("main@sha1:abc")
        );
        assert_eq!(
            status.last_attempted_revision.as_deref(),
            Some("main@sha1:abc")
        );
        assert_eq!(status.last_plan.as_ref().map(|p| p.created), Some(1));
        assert_eq!(status.last_success_time.as_deref(), Some("T1"));
        assert_eq!(status.observed_generation, Some(2));
        assert!(condition(&status, "Reconciling").is_none());
    }

    #[test]
    fn invalid_models_stall_and_keep_the_applied_revision() {
        let applied = report(vec![Outcome::Created]);
        let good = next_status(
            &SourceStatus::default(),
            Some(1),
            &PassResult::Applied {
                revision: "main@sha1:good".into(),
                report: &applied,
            },
            "T1",
        );
        let bad = next_status(
            &good,
            Some(1),
            &PassResult::Failed {
                revision: Some("main@sha1:bad".into()),
                reason: "InvalidModels",
                message: "2 errors".into(),
                stalled: true,
            },
            "T2",
        );
        assert_eq!(bad.last_applied_revision.as_deref(), Some("main@sha1:good"));
        assert_eq!(
            bad.last_attempted_revision.as_deref(),
            Some("main@sha1:bad")
        );
        let ready = condition(&bad, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.last_transition_time.as_str()),
            ("False", "T2")
        );
        assert_eq!(condition(&bad, "Stalled").unwrap().reason, "InvalidModels");
        assert!(condition(&bad, "Reconciling").is_none());
    }

    #[test]
    fn a_retryable_failure_is_reconciling_not_stalled() {
        let failed = report(vec![Outcome::Failed(ObjectFailure::Unreachable)]);
        let status = next_status(
            &SourceStatus::default(),
            None,
            &PassResult::ObjectsFailed {
                revision: "v1@sha1:abc".into(),
                report: &failed,
            },
            "T",
        );
        assert_eq!(
            condition(&status, "Reconciling").unwrap().reason,
            "RetryingAfterFailure"
        );
        assert!(condition(&status, "Stalled").is_none());
        assert!(
            condition(&status, "Ready")
                .unwrap()
                .message
                .starts_with("1 of 1 objects failed")
        );
        assert!(status.last_applied_revision.is_none());
    }

    #[test]
    fn a_pass_that_changed_nothing_is_not_written() {
        let first = report(vec![Outcome::Created]);
        let applied = |report| PassResult::Applied {
            revision: "main@sha1:abc".into(),
            report,
        };
        let before = next_status(&SourceStatus::default(), Some(1), &applied(&first), "T1");
        let quiet = report(vec![Outcome::Unchanged]);
        let after = next_status(&before, Some(1), &applied(&quiet), "T2");
        assert_eq!(
            condition(&after, "Ready").unwrap().last_transition_time,
            "T1",
            "a condition keeps its transition time"
        );
        assert!(!worth_writing(&before, &after));
        let changed = report(vec![Outcome::Configured]);
        assert!(worth_writing(
            &before,
            &next_status(&before, Some(1), &applied(&changed), "T3")
        ));
        assert!(worth_writing(
            &before,
            &next_status(&before, Some(2), &applied(&quiet), "T3")
        ));
    }

    #[test]
    fn a_refused_pass_records_an_event_naming_the_object_the_verb_and_the_identity() {
        let forbidden = Outcome::Failed(ObjectFailure::Forbidden {
            verb: "apply",
            identity: Some("system:serviceaccount:team-a:deployer".into()),
            message: "configmaps \"x\" is forbidden".into(),
        });
        let invalid = Outcome::Failed(ObjectFailure::Refused {
            code: 422,
            message: "invalid".into(),
        });
        let refused = report(vec![Outcome::Created, forbidden, invalid.clone()]);
        let result = PassResult::ObjectsFailed {
            revision: "main@sha1:abc".into(),
            report: &refused,
        };
        assert_eq!(
            refusal_event(&result),
            Some((
                "Forbidden",
                "ConfigMap team/c1: apply refused for system:serviceaccount:team-a:deployer: configmaps \"x\" is forbidden".into()
            ))
        );
        // An invalid object is the status's, not a refusal of the identity.
        let only_invalid = report(vec![invalid]);
        let result = PassResult::ObjectsFailed {
            revision: "main@sha1:abc".into(),
            report: &only_invalid,
        };
        assert_eq!(refusal_event(&result), None);
        let long = PassResult::Failed {
            revision: None,
            reason: "InvalidModels",
            message: "é".repeat(1000),
            stalled: true,
        };
        let (reason, note) = refusal_event(&long).unwrap();
        assert_eq!(reason, "InvalidModels");
        assert!(note.len() <= 1024 && note.ends_with('…'), "{}", note.len());
    }
}
