//! One source's loop: what it is made of (the [`Settings`] of its passes, the
//! [`Memory`] between them, the [`Observers`] of each, and the reconciler that acts
//! for it), how it runs under the engine's driver registered with the daemon's
//! endpoints, and what wakes it: a trigger (a saved model file, a webhook, a
//! requested pass), drift a watch saw, or the interval with jitter.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tether_core::source::is_model_path;
use tether_engine::cluster::Tenure;
use tether_engine::driver::{Backoff, Loop, Schedule, drive};
use tether_engine::reconcile::Reconciler;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::loop_settings::Settings;
use super::memory::Memory;
use super::observers::{NoStatus, Observers, StatusSink};
use super::pass_outcome::{PassError, PassOutcome};
use crate::attestation::AttestationSecret;
use crate::clock::now;
use crate::decryption::DecryptionSecret;
use crate::drift::Drift;
use crate::loop_views::Attesting;
use crate::loop_views::Handle;
use crate::shared::Shared;
use crate::switchboard::Trigger;
use crate::verify::VerifySecret;
use tether_trust::dsse::RecordKey;

/// Where a source's models come from, as the daemon's endpoints show it (webhooks
/// find their sources by it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Origin {
    /// The Git repository's URL; `None` for a directory.
    pub(crate) url: Option<String>,
    pub(crate) reference: Option<String>,
}

/// After a change, how long more changes are gathered into the same pass: saving
/// several files at once, or a burst of webhooks, is one pass. Short, since it is
/// the least time from a push to its apply.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// One source, reconciled pass after pass.
pub(crate) struct SourceLoop<S = NoStatus> {
    pub(super) id: String,
    /// What each pass does, fixed for the loop's life.
    pub(super) settings: Settings,
    /// Acts for the source: its repository, inventory, identity and clusters.
    pub(super) reconciler: Reconciler,
    /// Where the keys of the encrypted files are read before each pass that loads
    /// the models (a Source's decryption Secret).
    pub(super) decryption: Option<DecryptionSecret>,
    /// Where the keys its commits must be signed by are read before each pass that
    /// loads the models (a Source's `spec.verify` Secret).
    pub(super) verify: Option<VerifySecret>,
    /// The Secret the keys its charts must be signed by are read from.
    pub(super) verify_charts: Option<VerifySecret>,
    /// Where the key that signs its deployment attestations is read before each pass
    /// that loads the models (a Source's `spec.attestation` Secret), and the key read.
    pub(super) attestation: Option<Arc<AttestationSecret>>,
    pub(super) attestation_key: Option<RecordKey>,
    /// What the passes remember between them.
    pub(super) memory: Memory,
    /// Who learns of each pass.
    pub(super) observers: Observers<S>,
    /// Requests for a pass (one pending is enough: a pass reads the whole source).
    triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
    /// Drift the watch cache saw on the source's objects.
    pub(super) drift: (mpsc::Sender<Drift>, mpsc::Receiver<Drift>),
    /// File changes of a models directory (the watcher is kept alive beside it).
    directory: Option<notify::RecommendedWatcher>,
    /// Becomes true when the first pass has finished (whatever its result).
    first_pass: tokio::sync::watch::Sender<bool>,
    pub(super) stop: PassStop,
    /// The metrics, the endpoints' switchboard, the shared watches.
    pub(super) shared: Arc<Shared>,
}

/// What stops a pass in progress between objects, so that it records nothing: the
/// Source deleted or changed (`pass`), or the end of the tenure of the replica's
/// Lease the loop runs in.
pub(crate) struct PassStop {
    pub(crate) pass: CancellationToken,
    pub(crate) tenure: Tenure,
}

impl<S: StatusSink> SourceLoop<S> {
    /// A loop of the source `id`, acting through `reconciler`, that starts from
    /// `memory` and tells `observers` of each pass.
    pub(crate) fn new(
        id: &str,
        reconciler: Reconciler,
        settings: Settings,
        memory: Memory,
        observers: Observers<S>,
        shared: Arc<Shared>,
    ) -> Self {
        SourceLoop {
            id: id.to_string(),
            settings,
            reconciler,
            decryption: None,
            verify: None,
            attestation: None,
            verify_charts: None,
            attestation_key: None,
            memory,
            observers,
            triggers: mpsc::channel(1),
            drift: mpsc::channel(256),
            directory: None,
            first_pass: tokio::sync::watch::Sender::new(false),
            stop: PassStop {
                pass: CancellationToken::new(),
                tenure: shared.fence.tenure(),
            },
            shared,
        }
    }

    /// Takes its triggers from this channel (made before the loop, so that a trigger
    /// sent while it starts is not lost).
    pub(crate) fn with_triggers(
        mut self,
        triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
    ) -> Self {
        self.triggers = triggers;
        self
    }

    /// Stops a pass in progress as `stop` says: a plan is dropped, an apply stops
    /// between objects, and the pass records nothing.
    pub(crate) fn stopped_by(mut self, stop: PassStop) -> Self {
        self.stop = stop;
        self
    }

    /// Opens the encrypted files with the keys of `secret`, read before each pass.
    pub(crate) fn with_decryption(mut self, secret: Option<DecryptionSecret>) -> Self {
        self.decryption = secret;
        self
    }

    /// Attests each pass that changed the cluster with the key of `secret`, read
    /// before each pass.
    pub(crate) fn with_attestation(mut self, secret: Option<AttestationSecret>) -> Self {
        self.attestation = secret.map(Arc::new);
        self
    }

    /// Applies only commits signed by the keys of `secret`, read before each pass.
    pub(crate) fn with_verify_keys(mut self, secret: Option<VerifySecret>) -> Self {
        self.verify = secret;
        self
    }

    /// Reads the keys its charts must be signed by from `secret` before each pass.
    pub(crate) fn with_chart_keys(mut self, secret: Option<VerifySecret>) -> Self {
        self.verify_charts = secret;
        self
    }

    /// Runs the loop until `shutdown`, registered with the daemon's endpoints
    /// (webhooks, requests, the source list) meanwhile; each pass's outcome goes to
    /// `observe`. The one way a source runs: `tether run` runs one from flags with it,
    /// the controller each Source. On shutdown, a pass in progress may finish within
    /// `grace`.
    pub(crate) async fn run(
        mut self,
        origin: Origin,
        grace: Duration,
        shutdown: &CancellationToken,
        observe: impl FnMut(&Result<PassOutcome, PassError>),
    ) {
        let shared = self.shared.clone();
        let id = self.id.clone();
        if let Some(shown) = &self.observers.shown {
            let handle = Handle {
                trigger: self.trigger(),
                writeback: shown.writeback.clone(),
                url: origin.url.clone(),
                reference: origin.reference.clone(),
                path: shown.path.clone(),
                attestation: self.attestation.as_ref().map(|secret| Attesting {
                    inventory: self.reconciler.inventory().clone(),
                    secret: secret.clone(),
                }),
            };
            shared.views.register(&shown.name, handle);
            if let Some(row) = &shown.last_revert {
                shared.views.revert(&shown.name, row.clone());
            }
        }
        shared.switchboard.register(
            &id,
            origin.url,
            origin.reference,
            self.settings.interval,
            self.trigger(),
        );
        let schedule = Schedule {
            name: "source",
            debounce: DEBOUNCE,
            backoff: Backoff::pass(),
            grace,
        };
        drive(&mut self, &schedule, shutdown, observe).await;
        shared.switchboard.unregister(&id);
        if let Some(shown) = &self.observers.shown {
            shared.views.unregister(&shown.name);
        }
    }

    /// Says when the first pass has finished: work that can wait (discovery's first
    /// large commit) starts then, so that start-up does not hold both at once.
    pub(crate) fn first_pass(&self) -> tokio::sync::watch::Receiver<bool> {
        self.first_pass.subscribe()
    }

    /// Where webhooks and requests send their triggers.
    pub(crate) fn trigger(&self) -> mpsc::Sender<Trigger> {
        self.triggers.0.clone()
    }

    /// Also pass as soon as a model file (or the settings file) under `directory`
    /// changes. Editors' temporary and backup files are ignored.
    pub(crate) fn watch_directory(mut self, directory: &Path) -> Result<Self, notify::Error> {
        let sender = self.triggers.0.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let Ok(event) = event else {
                    return;
                };
                let relevant = !matches!(event.kind, EventKind::Access(_))
                    && event.paths.iter().any(|p| is_models_change(p.as_path()));
                if relevant {
                    let _ = sender.try_send(Trigger::Changed);
                }
            })?;
        watcher.watch(directory, RecursiveMode::Recursive)?;
        self.directory = Some(watcher);
        Ok(self)
    }
}

/// A model file or the settings file. Editors' temporary and backup files (`.#x.yaml`,
/// `x.yaml~`, `.x.yaml.swp`) are neither: hidden, or not `.yaml`/`.yml`.
fn is_models_change(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    is_model_path(path) || name == tether_engine::repo::SETTINGS_FILE
}

impl<S: StatusSink> Loop for SourceLoop<S> {
    type Output = PassOutcome;
    type Error = PassError;

    async fn pass(&mut self) -> Result<PassOutcome, PassError> {
        let started = std::time::Instant::now();
        let requested = self.memory.requested.take();
        // The revision is this pass's field, on a span of its own: a field recorded
        // on the source's long-lived span would be kept (and logged) once per pass.
        let span = tracing::info_span!("pass", revision = tracing::field::Empty);
        let result = self.reconcile(requested.is_some()).instrument(span).await;
        if matches!(result, Err(PassError::Stopped)) {
            // The Source is gone or changed: its status and metrics are the next
            // loop's, if any.
            return result;
        }
        let label = match &result {
            Ok(outcome) if outcome.report.succeeded() => "success",
            _ => "failure",
        };
        let report = match &result {
            // A quiet pass applied nothing (a stalled one only repeats its refusals).
            Ok(outcome) if outcome.quiet => None,
            Ok(outcome) => Some(&outcome.report),
            Err(PassError::ObjectsFailed(outcome)) => Some(&outcome.report),
            Err(PassError::Clusters { outcome, .. }) => Some(&outcome.report),
            Err(_) => None,
        };
        self.shared
            .metrics
            .pass(&self.id, label, started.elapsed(), report);
        self.observers
            .record(&result, requested, started.elapsed())
            .await;
        self.shared.switchboard.passed(&self.id);
        self.first_pass.send_replace(true);
        result
    }

    async fn changed(&mut self) {
        // ±10% jitter, so that many sources started together do not pass together.
        let jitter = 0.9 + fastrand::f64() * 0.2;
        let tick = Instant::now() + self.settings.interval.mul_f64(jitter);
        // The one timer of this wait: the interval's tick, moved sooner by drift on an
        // object that is backing off, which waits for its turn.
        let wake = tokio::time::sleep_until(tick);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                () = &mut wake => return,
                Some(trigger) = self.triggers.1.recv() => {
                    if let Trigger::Requested(value) = trigger {
                        self.memory.requested = Some(value);
                    }
                    return;
                }
                Some(drift) = self.drift.1.recv() => {
                    if self.memory.is_own_deletion(&drift) {
                        // Seen once: a later deletion is someone else's.
                        self.memory.own_deletions.remove(&drift.key);
                        continue;
                    }
                    tracing::debug!(object = %drift.key, by = %drift.manager, "drift seen");
                    self.observers.show(|views, name| views.drifted(name, &drift.key, &drift.manager, &now()));
                    let not_before = self.memory.backoff.not_before(&drift.key, Instant::now());
                    self.memory.drifted.insert(drift.key.clone(), drift);
                    match not_before {
                        None => return,
                        Some(at) if at < wake.deadline() => wake.as_mut().reset(at),
                        Some(_) => {}
                    }
                }
            }
        }
    }
}
