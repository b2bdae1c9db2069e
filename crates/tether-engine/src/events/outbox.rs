//! The outbox: events on disk until every sink has them, so a broker that is down or a
//! tether that is restarted loses none (delivery is at least once, in order).
//!
//! A directory holds `log.jsonl` (one event per line, with its sequence number,
//! appended and synced before any sink sees it), `state.json` (the pods as last seen,
//! and the next sequence number, replaced atomically at most once a second and when
//! the outbox closes) and `delivered/<sink>` (the last sequence number each sink has).
//! When every sink has every event, the log is emptied.
//!
//! The log, not the state, is the record of what was said: opening replays the events
//! the saved state does not include yet, and the log is only emptied after the state
//! is saved, so the state is always exact. Blocking (file I/O): call off the async
//! runtime.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use tether_core::events::{PodEvent, PodState, Status, pod_events};

#[derive(Debug, Error)]
pub enum OutboxError {
    #[error("cannot use the event outbox {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the event outbox file {path} is damaged")]
    Damaged {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// An event and its place in the outbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub sequence: u64,
    pub event: PodEvent,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    next_sequence: u64,
    pods: BTreeMap<String, PodState>,
}

struct Inner {
    state: State,
    /// When `state.json` was last written, and whether `state` changed since.
    state_saved: Option<Instant>,
    state_dirty: bool,
    /// Events some sink has not delivered yet, in order.
    records: Vec<Record>,
    delivered: BTreeMap<String, u64>,
    log: File,
}

pub struct Outbox {
    dir: PathBuf,
    sinks: Vec<String>,
    /// The cluster whose pods it watches, named in each event.
    cluster: String,
    inner: Mutex<Inner>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutboxError + '_ {
    move |source| OutboxError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Replaces `path` with `bytes` in one step: a crash leaves the old or the new file.
fn replace(path: &Path, bytes: &[u8]) -> Result<(), OutboxError> {
    let temporary = path.with_extension("tmp");
    let mut file = File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(bytes).map_err(io(&temporary))?;
    file.sync_all().map_err(io(&temporary))?;
    std::fs::rename(&temporary, path).map_err(io(path))
}

impl Outbox {
    /// Opens (or creates) the outbox in `dir` for the named sinks, for the pods of
    /// `cluster` (its events name it).
    pub fn open(dir: &Path, sinks: &[String], cluster: &str) -> Result<Outbox, OutboxError> {
        std::fs::create_dir_all(dir.join("delivered")).map_err(io(dir))?;
        let state_path = dir.join("state.json");
        let state: State = match std::fs::read(&state_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| OutboxError::Damaged {
                path: state_path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(io(&state_path)(e)),
        };
        let log_path = dir.join("log.jsonl");
        let mut records = Vec::new();
        if let Ok(file) = File::open(&log_path) {
            for line in BufReader::new(file).lines() {
                let line = line.map_err(io(&log_path))?;
                // A line cut short by a crash while appending was never acknowledged
                // to anyone; the events it held are found again from the pods' state.
                if let Ok(record) = serde_json::from_str::<Record>(&line) {
                    records.push(record);
                }
            }
        }
        let mut delivered = BTreeMap::new();
        for sink in sinks {
            let path = dir.join("delivered").join(sink);
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(sequence) = text.trim().parse::<u64>()
            {
                delivered.insert(sink.clone(), sequence);
            }
        }
        // Events the saved state is older than: replay them onto it.
        let mut state = state;
        let mut replayed = false;
        let saved_up_to = state.next_sequence;
        for record in records.iter().filter(|r| r.sequence >= saved_up_to) {
            let pod = &record.event.pod;
            match record.event.status {
                Status::Deleted => state.pods.remove(&pod.key()),
                _ => state.pods.insert(pod.key(), pod.clone()),
            };
            state.next_sequence = record.sequence + 1;
            replayed = true;
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path))?;
        let outbox = Outbox {
            dir: dir.to_path_buf(),
            sinks: sinks.to_vec(),
            cluster: cluster.to_string(),
            inner: Mutex::new(Inner {
                state,
                state_saved: None,
                state_dirty: replayed,
                records,
                delivered,
                log,
            }),
        };
        // Rewrite a log that ended in a torn line, so appends start on a fresh line.
        outbox.compact(&mut outbox.lock(), true)?;
        Ok(outbox)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves data that was written in order; go on.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what is known of pods now (`None`: gone) and appends the events that
    /// makes; returns how many.
    pub fn observe(
        &self,
        changes: impl IntoIterator<Item = (String, Option<PodState>)>,
    ) -> Result<usize, OutboxError> {
        let mut inner = self.lock();
        let mut events = Vec::new();
        for (key, now) in changes {
            let before = inner.state.pods.get(&key);
            events.extend(pod_events(&self.cluster, before, now.as_ref()));
            match now {
                Some(now) => inner.state.pods.insert(key, now),
                None => inner.state.pods.remove(&key),
            };
        }
        let count = self.append(&mut inner, events)?;
        if count > 0 {
            inner.state_dirty = true;
        }
        if inner.state_dirty
            && inner
                .state_saved
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            self.save_state(&mut inner)?;
        }
        Ok(count)
    }

    /// Records a full listing of the pods of `in_scope` namespaces: pods known before
    /// but not listed are deleted. What happened while tether was stopped is told so.
    pub(crate) fn observe_all(
        &self,
        pods: Vec<PodState>,
        in_scope: impl Fn(&str) -> bool,
    ) -> Result<usize, OutboxError> {
        let listed: BTreeMap<String, PodState> = pods.into_iter().map(|p| (p.key(), p)).collect();
        let gone: Vec<(String, Option<PodState>)> = self
            .lock()
            .state
            .pods
            .iter()
            .filter(|(key, pod)| in_scope(&pod.namespace) && !listed.contains_key(*key))
            .map(|(key, _)| (key.clone(), None))
            .collect();
        self.observe(
            gone.into_iter()
                .chain(listed.into_iter().map(|(k, p)| (k, Some(p)))),
        )
    }

    fn append(&self, inner: &mut Inner, events: Vec<PodEvent>) -> Result<usize, OutboxError> {
        if events.is_empty() {
            return Ok(0);
        }
        let count = events.len();
        let mut text = String::new();
        for event in events {
            let record = Record {
                sequence: inner.state.next_sequence,
                event,
            };
            inner.state.next_sequence += 1;
            // Records are strings and numbers: serializing cannot fail.
            text.push_str(&serde_json::to_string(&record).unwrap_or_default());
            text.push('\n');
            inner.records.push(record);
        }
        let log_path = self.dir.join("log.jsonl");
        inner
            .log
            .write_all(text.as_bytes())
            .and_then(|()| inner.log.sync_data())
            .map_err(io(&log_path))?;
        Ok(count)
    }

    fn save_state(&self, inner: &mut Inner) -> Result<(), OutboxError> {
        let state = serde_json::to_vec(&inner.state).unwrap_or_default();
        replace(&self.dir.join("state.json"), &state)?;
        inner.state_saved = Some(Instant::now());
        inner.state_dirty = false;
        Ok(())
    }

    /// Up to `limit` events that `sink` has not delivered, oldest first.
    pub fn pending(&self, sink: &str, limit: usize) -> Vec<Record> {
        let inner = self.lock();
        let after = inner.delivered.get(sink).copied();
        inner
            .records
            .iter()
            .filter(|r| after.is_none_or(|a| r.sequence > a))
            .take(limit)
            .cloned()
            .collect()
    }

    /// `sink` has delivered every event up to `sequence`.
    pub(crate) fn acknowledge(&self, sink: &str, sequence: u64) -> Result<(), OutboxError> {
        let mut inner = self.lock();
        replace(
            &self.dir.join("delivered").join(sink),
            sequence.to_string().as_bytes(),
        )?;
        inner.delivered.insert(sink.to_string(), sequence);
        self.compact(&mut inner, false)
    }

    /// Drops the events every sink has; rewrites the log when it was emptied (or when
    /// `rewrite` asks for it).
    fn compact(&self, inner: &mut Inner, rewrite: bool) -> Result<(), OutboxError> {
        let done = self
            .sinks
            .iter()
            .map(|s| inner.delivered.get(s).copied())
            .min()
            .flatten();
        let before = inner.records.len();
        if let Some(done) = done {
            inner.records.retain(|r| r.sequence > done);
        }
        if rewrite || (before > 0 && inner.records.is_empty()) {
            // The state must hold what the dropped events told before they go.
            if inner.state_dirty {
                self.save_state(inner)?;
            }
            let mut text = String::new();
            for record in &inner.records {
                text.push_str(&serde_json::to_string(record).unwrap_or_default());
                text.push('\n');
            }
            let log_path = self.dir.join("log.jsonl");
            replace(&log_path, text.as_bytes())?;
            inner.log = OpenOptions::new()
                .append(true)
                .open(&log_path)
                .map_err(io(&log_path))?;
        }
        Ok(())
    }

    /// Events not yet delivered by every sink.
    pub(crate) fn backlog(&self) -> usize {
        self.lock().records.len()
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let mut inner = self.lock();
        if inner.state_dirty
            && let Err(error) = self.save_state(&mut inner)
        {
            tracing::warn!(error = %tether_core::error_chain(&error), "cannot save the pods' state; some events may be told again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn pending_events(outbox: &Outbox) -> Vec<(String, Status)> {
        outbox
            .pending("jsonl", 10)
            .into_iter()
            .map(|r| (r.event.pod.name, r.event.status))
            .collect()
    }

    fn observe(outbox: &Outbox, pod: PodState) {
        outbox.observe([(pod.key(), Some(pod))]).unwrap();
    }

    #[test]
    fn undelivered_events_survive_a_restart_and_go_once_every_sink_has_them() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = vec!["kafka".to_string(), "jsonl".to_string()];
        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", None));
        observe(&outbox, pod("a", Some("10.0.0.1")));
        outbox.acknowledge("jsonl", 1).unwrap();
        drop(outbox);

        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
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
        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", Some("10.0.0.1")));
        observe(&outbox, pod("b", Some("10.0.0.2")));
        outbox.acknowledge("jsonl", 1).unwrap();
        drop(outbox);

        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
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
        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", None));
        // Within a second of the first: the state file is not written again.
        observe(&outbox, pod("b", None));
        // Killed: no chance to save the state on the way out.
        std::mem::forget(outbox);

        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
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
        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("a", None));
        drop(outbox);
        let log = dir.path().join("log.jsonl");
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(b"{\"sequence\":1,\"ev").unwrap();
        drop(file);
        let outbox = Outbox::open(dir.path(), &sinks, "east").unwrap();
        observe(&outbox, pod("b", None));
        let names: Vec<String> = outbox
            .pending("jsonl", 10)
            .into_iter()
            .map(|r| r.event.pod.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        drop(outbox);
        let reopened = Outbox::open(dir.path(), &sinks, "east").unwrap();
        assert_eq!(reopened.backlog(), 2);
    }
}
