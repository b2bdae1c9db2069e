//! Drift: another writer changing (or deleting) an object tether applied. The source's
//! watch cache ([`tether_engine::reconcile::WatchCache`]) tells the loop at once which object
//! changed and who changed it; the loop's next pass judges whether a
//! field tether owns differs (and corrects or reports it). Against a writer that keeps
//! fighting, each object's corrections back off (from 2 s, ×3, up to 5 min).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use kube::ResourceExt;
use kube::api::DynamicObject;
use tokio::sync::mpsc;
use tokio::time::Instant;

use tether_core::k8s::ObjectKey;
use tether_engine::reconcile::cache::OnChange;

/// An object someone other than tether changed or deleted.
#[derive(Clone, Debug)]
pub(crate) struct Drift {
    pub key: ObjectKey,
    /// The field manager of the newest write (or "a deletion").
    pub manager: String,
    /// The object was deleted: a pass that pruned or replaced it knows of its own
    /// deletions, which are not news.
    pub deleted: bool,
    pub reference: ObjectReference,
}

/// The object's newest write to what it is desired to be: its main resource or a
/// subresource that changes its spec (`scale`, as `kubectl scale` writes; a pod's
/// `resize`). Status writes are not drift. Times have whole seconds: of writes in the
/// same second, another manager's is taken as the newer, since a pass that finds
/// nothing to correct costs little and a missed drift stays.
pub(crate) fn newest_write<'o>(
    object: &'o DynamicObject,
    ours: &str,
) -> Option<&'o ManagedFieldsEntry> {
    object
        .managed_fields()
        .iter()
        .filter(|entry| entry.subresource.as_deref() != Some("status"))
        .max_by_key(|entry| {
            (
                entry.time.as_ref().map(|t| t.0),
                entry.manager.as_deref() != Some(ours),
            )
        })
}

/// A write as the drift reports remember it: who, and when.
type Write = (String, Option<Time>);

/// What a reconciler's watch cache calls on each change: a write by anyone but
/// `manager`, or a deletion, is sent to `drift`, once per write. A status update
/// changes the object but not its newest write to the main resource (a Deployment
/// rolling out is updated many times a second by kube-controller-manager, whose last
/// main write was its revision annotation): not drift again. A full channel drops the
/// report: the passes it would trigger are already due.
pub(crate) fn reporter(manager: String, drift: mpsc::Sender<Drift>) -> OnChange {
    let reported: Mutex<HashMap<ObjectKey, Write>> = Mutex::new(HashMap::new());
    Arc::new(move |api_version, kind, object, deleted| {
        let key = ObjectKey::new(
            api_version,
            kind,
            object.metadata.namespace.as_deref(),
            &object.name_any(),
        );
        let mut reported = reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let writer = match deleted {
            true => {
                reported.remove(&key);
                "a deletion".to_string()
            }
            false => match newest_write(object, &manager) {
                Some(write) if write.manager.as_deref() != Some(manager.as_str()) => {
                    let writer = write.manager.clone().unwrap_or_default();
                    let seen = (writer.clone(), write.time.clone());
                    if reported.get(&key) == Some(&seen) {
                        tracing::trace!(object = %key, writer, "not drift: this write was reported");
                        return;
                    }
                    reported.insert(key.clone(), seen);
                    writer
                }
                // tether wrote last: the next write of anyone else is news, even in
                // the same second as one reported before.
                newest => {
                    tracing::trace!(object = %key, newest = ?newest.map(|w| (&w.manager, &w.time)), "not drift: tether wrote last");
                    reported.remove(&key);
                    return;
                }
            },
        };
        drop(reported);
        let reference = ObjectReference {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
            name: object.metadata.name.clone(),
            namespace: object.metadata.namespace.clone(),
            uid: object.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let seen = Drift {
            key,
            manager: writer,
            deleted,
            reference,
        };
        let _ = drift.try_send(seen);
    })
}

/// When each object may be corrected again.
#[derive(Debug, Default)]
pub(crate) struct CorrectionBackoff {
    objects: HashMap<ObjectKey, Corrections>,
}

#[derive(Debug)]
struct Corrections {
    count: u32,
    last: Instant,
}

const FIRST_DELAY: Duration = Duration::from_secs(2);
const MAX_DELAY: Duration = Duration::from_secs(300);
/// After this long without a correction, an object starts from the first delay again.
const FORGET_AFTER: Duration = Duration::from_secs(600);

impl CorrectionBackoff {
    /// When `key` may be corrected next; `None`: now.
    pub(crate) fn not_before(&self, key: &ObjectKey, now: Instant) -> Option<Instant> {
        let corrections = self.objects.get(key)?;
        if now.duration_since(corrections.last) > FORGET_AFTER {
            return None;
        }
        let exponent = corrections.count.saturating_sub(1).min(10);
        let delay = FIRST_DELAY
            .saturating_mul(3u32.saturating_pow(exponent))
            .min(MAX_DELAY);
        let at = corrections.last + delay;
        (at > now).then_some(at)
    }

    /// `key` was corrected at `now`.
    pub(crate) fn corrected(&mut self, key: &ObjectKey, now: Instant) {
        let forgotten = self
            .objects
            .get(key)
            .is_some_and(|c| now.duration_since(c.last) > FORGET_AFTER);
        let entry = self.objects.entry(key.clone()).or_insert(Corrections {
            count: 0,
            last: now,
        });
        if forgotten {
            entry.count = 0;
        }
        entry.count += 1;
        entry.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrections_of_one_object_back_off_from_two_seconds_by_three_up_to_five_minutes() {
        let key = ObjectKey::new("v1", "ConfigMap", Some("n"), "c");
        let other = ObjectKey::new("v1", "ConfigMap", Some("n"), "d");
        let mut backoff = CorrectionBackoff::default();
        let start = Instant::now();
        assert_eq!(
            backoff.not_before(&key, start),
            None,
            "the first drift is corrected at once"
        );
        let mut now = start;
        let mut delays = Vec::new();
        for _ in 0..7 {
            backoff.corrected(&key, now);
            let next = backoff.not_before(&key, now).unwrap();
            delays.push((next - now).as_secs());
            now = next;
        }
        assert_eq!(delays, [2, 6, 18, 54, 162, 300, 300]);
        assert_eq!(
            backoff.not_before(&other, now),
            None,
            "objects back off alone"
        );
        let later = now + FORGET_AFTER + Duration::from_secs(1);
        assert_eq!(backoff.not_before(&key, later), None);
        backoff.corrected(&key, later);
        assert_eq!(
            backoff.not_before(&key, later),
            Some(later + FIRST_DELAY),
            "a quiet object starts over"
        );
    }

    #[test]
    fn the_newest_write_to_the_main_resource_names_the_writer() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": [
                {"manager": "tether:abc", "operation": "Apply", "time": "2026-11-22T10:00:00Z"},
                {"manager": "kubectl-patch", "operation": "Update", "time": "2026-11-22T10:05:00Z"},
                {"manager": "kube-controller-manager", "operation": "Update",
                 "subresource": "status", "time": "2026-11-22T10:09:00Z"}
            ]}
        }))
        .unwrap();
        let newest = newest_write(&object, "tether:abc").unwrap();
        assert_eq!(newest.manager.as_deref(), Some("kubectl-patch"));
    }

    /// `kubectl scale` writes through the `scale` subresource: the replicas changed,
    /// and that is drift (it went unseen while every subresource was taken for status).
    #[test]
    fn a_write_through_the_scale_subresource_is_drift() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "managedFields": [
                {"manager": "tether:abc", "operation": "Apply", "time": "2026-11-22T10:00:00Z"},
                {"manager": "kubectl", "operation": "Update", "subresource": "scale",
                 "time": "2026-11-22T10:05:00Z"},
                {"manager": "kube-controller-manager", "operation": "Update",
                 "subresource": "status", "time": "2026-11-22T10:05:01Z"}
            ]}
        }))
        .unwrap();
        let newest = newest_write(&object, "tether:abc").unwrap();
        assert_eq!(newest.manager.as_deref(), Some("kubectl"));
        assert_eq!(newest.subresource.as_deref(), Some("scale"));
    }

    fn deployment(writes: serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "managedFields": writes}
        }))
        .unwrap()
    }

    #[test]
    fn a_write_is_reported_once_and_status_updates_after_it_are_not_drift() {
        let (sender, mut reports) = mpsc::channel(16);
        let report = reporter("tether:abc".into(), sender);
        let applied = serde_json::json!({"manager": "tether:abc", "operation": "Apply", "time": "2026-11-22T10:00:00Z"});
        let revision = serde_json::json!({"manager": "kube-controller-manager", "operation": "Update", "time": "2026-11-22T10:00:01Z"});
        let status = |second: u32| {
            serde_json::json!({"manager": "kube-controller-manager", "operation": "Update",
            "subresource": "status", "time": format!("2026-11-22T10:00:{second:02}Z")})
        };
        // A rollout: the revision annotation, then status after status.
        for second in 2..12 {
            report(
                "apps/v1",
                "Deployment",
                &deployment(serde_json::json!([applied, revision, status(second)])),
                false,
            );
        }
        assert_eq!(
            reports.try_recv().unwrap().manager,
            "kube-controller-manager"
        );
        assert!(
            reports.try_recv().is_err(),
            "status updates are not drift again"
        );
        // Someone edits it: news.
        let edit = serde_json::json!({"manager": "kubectl-edit", "operation": "Update", "time": "2026-11-22T10:00:20Z"});
        report(
            "apps/v1",
            "Deployment",
            &deployment(serde_json::json!([applied, revision, edit])),
            false,
        );
        assert_eq!(reports.try_recv().unwrap().manager, "kubectl-edit");
        // tether corrects it, and the same editor writes again within the second.
        let corrected = serde_json::json!({"manager": "tether:abc", "operation": "Apply", "time": "2026-11-22T10:00:21Z"});
        report(
            "apps/v1",
            "Deployment",
            &deployment(serde_json::json!([corrected, revision, edit])),
            false,
        );
        assert!(reports.try_recv().is_err(), "tether's own write");
        report(
            "apps/v1",
            "Deployment",
            &deployment(serde_json::json!([corrected, revision, edit])),
            false,
        );
        assert!(reports.try_recv().is_err(), "nothing new");
        let again = serde_json::json!({"manager": "kubectl-edit", "operation": "Update", "time": "2026-11-22T10:00:21Z"});
        report(
            "apps/v1",
            "Deployment",
            &deployment(serde_json::json!([applied, revision, again])),
            false,
        );
        assert_eq!(reports.try_recv().unwrap().manager, "kubectl-edit");
        // A deletion is always news.
        report(
            "apps/v1",
            "Deployment",
            &deployment(serde_json::json!([applied, revision, again])),
            true,
        );
        let deletion = reports.try_recv().unwrap();
        assert_eq!(
            (deletion.manager.as_str(), deletion.deleted),
            ("a deletion", true)
        );
    }
}
