//! The outbox: events on disk until every recipient has them, so a receiver that is
//! down or a tether that is restarted loses none (delivery is at least once, in
//! order). Pod events (`events`) and feedback (`feedback`) both go through one.
//!
//! A directory holds `log.jsonl` (one event per line, with its sequence number,
//! appended and synced before any recipient sees it), `state.json` (what the events
//! told so far, folded into the outbox's [`OutboxState`], and the next sequence
//! number; replaced atomically at most once a second and when the outbox closes) and
//! `delivered/<recipient>` (the last sequence number each recipient has). When every
//! recipient has every event, the log is emptied.
//!
//! The log, not the state, is the record of what was said: opening replays the events
//! the saved state does not include yet, and the log is only emptied after the state
//! is saved, so the state is always exact. Blocking (file I/O): call off the async
//! runtime; [`Delivery`] does.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch as signal;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::driver::{Backoff, Loop, Schedule, drive};

#[derive(Debug, Error)]
pub enum OutboxError {
    #[error("cannot use the outbox {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the outbox file {path} is damaged")]
    Damaged {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// What an outbox's events told so far, kept beside them: a fold of the events (the
/// pods as last seen; the commit statuses said).
pub trait OutboxState: Default + Serialize + DeserializeOwned + Send + 'static {
    type Event: Clone + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Takes in an event of the log that the saved state does not include yet
    /// (after a crash).
    fn fold(&mut self, event: &Self::Event);
}

/// An event and its place in the outbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record<E> {
    pub sequence: u64,
    pub event: E,
}

#[derive(Default, Serialize, Deserialize)]
struct Saved<S> {
    next_sequence: u64,
    #[serde(flatten)]
    state: S,
}

struct Inner<S: OutboxState> {
    saved: Saved<S>,
    /// When `state.json` was last written, and whether the state changed since.
    state_saved: Option<Instant>,
    state_dirty: bool,
    /// Events some recipient has not delivered yet, in order.
    records: Vec<Record<S::Event>>,
    delivered: BTreeMap<String, u64>,
    log: File,
}

pub struct Outbox<S: OutboxState> {
    dir: PathBuf,
    recipients: Vec<String>,
    inner: Mutex<Inner<S>>,
    /// Told of each append: the deliveries wait on it.
    appended: signal::Sender<u64>,
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

impl<S: OutboxState> Outbox<S> {
    /// Opens (or creates) the outbox in `dir` for the named recipients.
    pub fn open(dir: &Path, recipients: &[String]) -> Result<Self, OutboxError> {
        std::fs::create_dir_all(dir.join("delivered")).map_err(io(dir))?;
        let state_path = dir.join("state.json");
        let mut saved: Saved<S> = match std::fs::read(&state_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| OutboxError::Damaged {
                path: state_path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(e) => return Err(io(&state_path)(e)),
        };
        let log_path = dir.join("log.jsonl");
        let mut records = Vec::new();
        if let Ok(file) = File::open(&log_path) {
            for line in BufReader::new(file).lines() {
                let line = line.map_err(io(&log_path))?;
                // A line cut short by a crash while appending was never acknowledged
                // to anyone; what it held is found again by the state's owner.
                if let Ok(record) = serde_json::from_str::<Record<S::Event>>(&line) {
                    records.push(record);
                }
            }
        }
        let mut delivered = BTreeMap::new();
        for recipient in recipients {
            let path = dir.join("delivered").join(recipient);
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(sequence) = text.trim().parse::<u64>()
            {
                delivered.insert(recipient.clone(), sequence);
            }
        }
        // Events the saved state is older than: fold them into it.
        let mut replayed = false;
        let saved_up_to = saved.next_sequence;
        for record in records.iter().filter(|r| r.sequence >= saved_up_to) {
            saved.state.fold(&record.event);
            saved.next_sequence = record.sequence + 1;
            replayed = true;
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path))?;
        let outbox = Outbox {
            dir: dir.to_path_buf(),
            recipients: recipients.to_vec(),
            inner: Mutex::new(Inner {
                saved,
                state_saved: None,
                state_dirty: replayed,
                records,
                delivered,
                log,
            }),
            appended: signal::channel(0).0,
        };
        // Rewrite a log that ended in a torn line, so appends start on a fresh line.
        outbox.compact(&mut outbox.lock(), true)?;
        Ok(outbox)
    }

    fn lock(&self) -> MutexGuard<'_, Inner<S>> {
        // A panic while holding the lock leaves data that was written in order; go on.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides, from the state, which events to record (`decide` updates the state as
    /// it goes: the same lock covers both), appends them and returns how many.
    pub fn record(
        &self,
        decide: impl FnOnce(&mut S) -> Vec<S::Event>,
    ) -> Result<usize, OutboxError> {
        let mut inner = self.lock();
        let events = decide(&mut inner.saved.state);
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
        if count > 0 {
            self.appended.send_modify(|n| *n += 1);
        }
        Ok(count)
    }

    /// Reads the state.
    pub fn state<T>(&self, read: impl FnOnce(&S) -> T) -> T {
        read(&self.lock().saved.state)
    }

    fn append(&self, inner: &mut Inner<S>, events: Vec<S::Event>) -> Result<usize, OutboxError> {
        if events.is_empty() {
            return Ok(0);
        }
        let count = events.len();
        let mut text = String::new();
        for event in events {
            let record = Record {
                sequence: inner.saved.next_sequence,
                event,
            };
            inner.saved.next_sequence += 1;
            // Events are plain data: serializing cannot fail.
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

    fn save_state(&self, inner: &mut Inner<S>) -> Result<(), OutboxError> {
        let state = serde_json::to_vec(&inner.saved).unwrap_or_default();
        replace(&self.dir.join("state.json"), &state)?;
        inner.state_saved = Some(Instant::now());
        inner.state_dirty = false;
        Ok(())
    }

    /// Up to `limit` events that `recipient` has not delivered, oldest first.
    pub fn pending(&self, recipient: &str, limit: usize) -> Vec<Record<S::Event>> {
        let inner = self.lock();
        let after = inner.delivered.get(recipient).copied();
        inner
            .records
            .iter()
            .filter(|r| after.is_none_or(|a| r.sequence > a))
            .take(limit)
            .cloned()
            .collect()
    }

    /// `recipient` has delivered every event up to `sequence`.
    pub fn acknowledge(&self, recipient: &str, sequence: u64) -> Result<(), OutboxError> {
        let mut inner = self.lock();
        replace(
            &self.dir.join("delivered").join(recipient),
            sequence.to_string().as_bytes(),
        )?;
        inner.delivered.insert(recipient.to_string(), sequence);
        self.compact(&mut inner, false)
    }

    /// Drops the events every recipient has; rewrites the log when it was emptied (or
    /// when `rewrite` asks for it).
    fn compact(&self, inner: &mut Inner<S>, rewrite: bool) -> Result<(), OutboxError> {
        let done = self
            .recipients
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

    /// Events not yet delivered by every recipient.
    pub fn backlog(&self) -> usize {
        self.lock().records.len()
    }
}

impl<S: OutboxState> Drop for Outbox<S> {
    fn drop(&mut self) {
        let mut inner = self.lock();
        if inner.state_dirty
            && let Err(error) = self.save_state(&mut inner)
        {
            tracing::warn!(error = %tether_core::error_chain(&error), "cannot save the outbox's state; some events may be told again");
        }
    }
}

/// Runs a blocking outbox operation off the async runtime.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, OutboxError> + Send + 'static,
) -> Result<T, OutboxError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(OutboxError::Io {
            path: "outbox".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// Where an outbox's events go: delivers a batch in order, all or an error.
pub trait Recipient<E>: Send {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Its name in the outbox (its delivery position is kept under it).
    fn name(&self) -> String;

    fn deliver(
        &mut self,
        records: &[Record<E>],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// How many events a recipient takes in one delivery.
const BATCH: usize = 500;

/// The outbox delivered to one recipient, in order; the driver retries a failure
/// with backoff, on this recipient's task only (nothing else waits for it).
pub struct Delivery<S: OutboxState, R> {
    outbox: Arc<Outbox<S>>,
    recipient: R,
    appended: signal::Receiver<u64>,
}

impl<S: OutboxState, R: Recipient<S::Event>> Delivery<S, R> {
    pub fn new(outbox: Arc<Outbox<S>>, recipient: R) -> Self {
        let appended = outbox.appended.subscribe();
        Delivery {
            outbox,
            recipient,
            appended,
        }
    }
}

/// Why a delivery pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryFailed<E: std::error::Error + 'static> {
    #[error("events not delivered to {recipient} ({backlog} waiting)")]
    Recipient {
        recipient: String,
        backlog: usize,
        #[source]
        source: E,
    },
    #[error("cannot record a delivery to {recipient}")]
    Record {
        recipient: String,
        #[source]
        source: OutboxError,
    },
}

impl<S: OutboxState, R: Recipient<S::Event>> Loop for Delivery<S, R> {
    type Output = ();
    type Error = DeliveryFailed<R::Error>;

    /// Delivers everything pending, a batch at a time.
    async fn pass(&mut self) -> Result<(), Self::Error> {
        let name = self.recipient.name();
        loop {
            self.appended.borrow_and_update();
            let pending = self.outbox.pending(&name, BATCH);
            let Some(last) = pending.last().map(|r| r.sequence) else {
                return Ok(());
            };
            self.recipient
                .deliver(&pending)
                .await
                .map_err(|source| DeliveryFailed::Recipient {
                    recipient: name.clone(),
                    backlog: self.outbox.backlog(),
                    source,
                })?;
            let outbox = self.outbox.clone();
            let acknowledged = name.clone();
            blocking(move || outbox.acknowledge(&acknowledged, last))
                .await
                .map_err(|source| DeliveryFailed::Record {
                    recipient: name.clone(),
                    source,
                })?;
        }
    }

    /// The next event recorded, or a look again in a while.
    async fn changed(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.appended.changed()).await;
    }
}

/// Starts delivering `outbox` to `recipient` on a task of its own, until `stop`; the
/// logs call it `name`.
pub fn spawn_delivery<S, R>(
    outbox: Arc<Outbox<S>>,
    recipient: R,
    stop: CancellationToken,
    name: &'static str,
) -> JoinHandle<()>
where
    S: OutboxState,
    R: Recipient<S::Event> + 'static,
{
    let mut delivery = Delivery::new(outbox, recipient);
    tokio::spawn(async move {
        let schedule = Schedule {
            name,
            debounce: Duration::ZERO,
            backoff: Backoff::pass(),
            // A delivery in progress is finished: the outbox is flushed.
            grace: Duration::from_secs(5),
        };
        drive(&mut delivery, &schedule, &stop, |_| {}).await;
    })
}
