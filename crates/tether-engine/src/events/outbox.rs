//! The pods' outbox: pod events wait in an [`Outbox`] until every sink has them; its
//! state is the pods as last seen, so a restart tells what happened meanwhile and
//! nothing twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outbox::{Outbox, OutboxError, OutboxState};
use tether_core::events::{PodEvent, PodState, Status, pod_events};

/// A pod event and its place in the outbox.
pub type Record = crate::outbox::Record<PodEvent>;

/// The pods as the events told them, and the cluster they are in (named in each
/// event).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Pods {
    pods: BTreeMap<String, PodState>,
    #[serde(skip)]
    cluster: String,
}

impl OutboxState for Pods {
    type Event = PodEvent;

    fn fold(&mut self, event: &PodEvent) {
        let pod = &event.pod;
        match event.status {
            Status::Deleted => self.pods.remove(&pod.key()),
            _ => self.pods.insert(pod.key(), pod.clone()),
        };
    }
}

/// Opens (or creates) the pods' outbox in `dir` for the named sinks, for the pods of
/// `cluster` (its events name it).
pub fn open(
    dir: &std::path::Path,
    sinks: &[String],
    cluster: &str,
) -> Result<Outbox<Pods>, OutboxError> {
    let outbox = Outbox::<Pods>::open(dir, sinks)?;
    outbox.record(|pods| {
        pods.cluster = cluster.to_string();
        Vec::new()
    })?;
    Ok(outbox)
}

impl Outbox<Pods> {
    /// Records what is known of pods now (`None`: gone) and appends the events that
    /// makes; returns how many.
    pub fn observe(
        &self,
        changes: impl IntoIterator<Item = (String, Option<PodState>)>,
    ) -> Result<usize, OutboxError> {
        self.record(|state| {
            let mut events = Vec::new();
            for (key, now) in changes {
                let before = state.pods.get(&key);
                events.extend(pod_events(&state.cluster, before, now.as_ref()));
                match now {
                    Some(now) => state.pods.insert(key, now),
                    None => state.pods.remove(&key),
                };
            }
            events
        })
    }

    /// Records a full listing of the pods of `in_scope` namespaces: pods known before
    /// but not listed are deleted. What happened while tether was stopped is told so.
    pub(crate) fn observe_all(
        &self,
        pods: Vec<PodState>,
        in_scope: impl Fn(&str) -> bool,
    ) -> Result<usize, OutboxError> {
        let listed: BTreeMap<String, PodState> = pods.into_iter().map(|p| (p.key(), p)).collect();
        let gone: Vec<(String, Option<PodState>)> = self.state(|state| {
            state
                .pods
                .iter()
                .filter(|(key, pod)| in_scope(&pod.namespace) && !listed.contains_key(*key))
                .map(|(key, _)| (key.clone(), None))
                .collect()
        });
        self.observe(
            gone.into_iter()
                .chain(listed.into_iter().map(|(k, p)| (k, Some(p)))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;
    use tether_core::events::Status;

    fn pod(name: &str, ip: Option<&str>) -> PodState {
        PodState {
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ip: ip.map(str::to_string),
            labels: BTreeMap::new(),
            restart_counts: BTreeMap::new(),
            action: None,
        }
    }

    fn pending_events(outbox: &Outbox<Pods>) -> Vec<(String, Status)> {
        outbox
            .pending("jsonl", 10)
            .into_iter()
            .map(|r| (r.event.pod.name, r.event.status))
            .collect()
    }

    fn observe(outbox: &Outbox<Pods>, pod: PodState) {
        outbox.observe([(pod.key(), Some(pod))]).unwrap();
    }

    #[test]
    fn undelivered_events_survive_a_restart_and_go_once_every_sink_has_them() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = vec!["kafka".to_string(), "jsonl".to_string()];
        let outbox = open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", None));
        observe(&outbox, pod("a", Some("10.0.0.1")));
        outbox.acknowledge("jsonl", 1).unwrap();
        drop(outbox);

        let outbox = open(dir.path(), &sinks, "east").unwrap();
        let kafka: Vec<(u64, Status)> = outbox
            .pending("kafka", 10)
            .iter()
            .map(|r| (r.sequence, r.event.status))
            .collect();
        assert_eq!(kafka, [(0, Status::Created), (1, Status::Updated)]);
        assert!(
            outbox
                .pending("kafka", 10)
                .iter()
                .all(|r| r.event.cluster == "east")
        );
        assert!(outbox.pending("jsonl", 10).is_empty());
        // Restarted: the pods' state came back, so the same pod makes no new event.
        observe(&outbox, pod("a", Some("10.0.0.1")));
        assert_eq!(outbox.backlog(), 2);
        outbox.acknowledge("kafka", 1).unwrap();
        assert_eq!(outbox.backlog(), 0);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log.jsonl")).unwrap(),
            ""
        );
        // Sequence numbers go on after the log was emptied.
        observe(&outbox, pod("b", None));
        assert_eq!(outbox.pending("kafka", 10)[0].sequence, 2);
    }

    #[test]
    fn a_listing_after_a_restart_tells_what_happened_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = vec!["jsonl".to_string()];
        let outbox = open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", Some("10.0.0.1")));
        observe(&outbox, pod("b", Some("10.0.0.2")));
        outbox.acknowledge("jsonl", 1).unwrap();
        drop(outbox);

        let outbox = open(dir.path(), &sinks, "east").unwrap();
        outbox
            .observe_all(vec![pod("b", Some("10.0.0.9")), pod("c", None)], |_| true)
            .unwrap();
        let events = pending_events(&outbox);
        assert_eq!(
            events,
            [
                ("a".into(), Status::Deleted),
                ("b".into(), Status::Updated),
                ("c".into(), Status::Created)
            ]
        );
    }

    #[test]
    fn a_state_older_than_the_log_is_caught_up_so_no_deletion_is_missed() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = vec!["jsonl".to_string()];
        let outbox = open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", None));
        // Within a second of the first: the state file is not written again.
        observe(&outbox, pod("b", None));
        // Killed: no chance to save the state on the way out.
        std::mem::forget(outbox);

        let outbox = open(dir.path(), &sinks, "east").unwrap();
        outbox.observe_all(vec![], |_| true).unwrap();
        let events = pending_events(&outbox);
        assert_eq!(
            events,
            [
                ("a".into(), Status::Created),
                ("b".into(), Status::Created),
                ("a".into(), Status::Deleted),
                ("b".into(), Status::Deleted)
            ]
        );
    }

    #[test]
    fn a_line_torn_by_a_crash_is_dropped_and_appends_start_on_a_fresh_line() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = vec!["jsonl".to_string()];
        let outbox = open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", None));
        drop(outbox);
        let log = dir.path().join("log.jsonl");
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(b"{\"sequence\":1,\"ev").unwrap();
        drop(file);
        let outbox = open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("b", None));
        let names: Vec<String> = outbox
            .pending("jsonl", 10)
            .into_iter()
            .map(|r| r.event.pod.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        drop(outbox);
        let reopened = open(dir.path(), &sinks, "east").unwrap();
        assert_eq!(reopened.backlog(), 2);
    }
}
