//! `tether run`, its first part: one source reconciled continuously by the driver. A
//! pass plans and applies (and prunes, when asked); the next pass comes after the
//! interval, or, for a models directory, as soon as a model file is saved (a
//! development loop). Sources declared as custom resources, drift correction from
//! watch caches, webhooks and leader election build on this loop.

use std::path::Path;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::driver::Loop;
use crate::reconcile::{ApplyOptions, ApplyReport, PlanOptions, ReconcileError, Reconciler};
use crate::source::is_model_path;

/// One source, reconciled pass after pass.
pub struct SourceLoop {
    reconciler: Reconciler,
    plan: PlanOptions,
    apply: ApplyOptions,
    interval: Duration,
    /// File changes of a models directory (the watcher is kept alive beside it).
    changes: Option<(mpsc::Receiver<()>, notify::RecommendedWatcher)>,
}

/// What one pass did.
#[derive(Debug)]
pub struct PassOutcome {
    /// The commit applied, for a Git source or a directory in a checkout.
    pub revision: Option<String>,
    pub report: ApplyReport,
}

impl SourceLoop {
    pub fn new(
        reconciler: Reconciler,
        plan: PlanOptions,
        apply: ApplyOptions,
        interval: Duration,
    ) -> Self {
        SourceLoop {
            reconciler,
            plan,
            apply,
            interval,
            changes: None,
        }
    }

    /// Also pass as soon as a model file (or the settings file) under `directory`
    /// changes. Editors' temporary and backup files are ignored.
    pub fn watch_directory(mut self, directory: &Path) -> Result<Self, notify::Error> {
        // One pending notification is enough: a pass reads the whole directory.
        let (sender, receiver) = mpsc::channel(1);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let Ok(event) = event else {
                    return;
                };
                let relevant = !matches!(event.kind, EventKind::Access(_))
                    && event.paths.iter().any(|p| is_models_change(p.as_path()));
                if relevant {
                    let _ = sender.try_send(());
                }
            })?;
        watcher.watch(directory, RecursiveMode::Recursive)?;
        self.changes = Some((receiver, watcher));
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
    is_model_path(path) || name == crate::repo::SETTINGS_FILE
}

impl Loop for SourceLoop {
    type Output = PassOutcome;
    type Error = ReconcileError;

    async fn pass(&mut self) -> Result<PassOutcome, ReconcileError> {
        let planned = self.reconciler.plan(self.plan).await?;
        let revision = planned.plan.revision.as_ref().map(|r| r.to_string());
        let report = self
            .reconciler
            .apply(&planned, &self.apply, &|_, _| {})
            .await?;
        Ok(PassOutcome { revision, report })
    }

    async fn changed(&mut self) {
        // ±10% jitter, so that many sources started together do not pass together.
        let jitter = 0.9 + fastrand::f64() * 0.2;
        let tick = tokio::time::sleep(self.interval.mul_f64(jitter));
        match &mut self.changes {
            Some((changes, _)) => {
                tokio::select! {
                    () = tick => {}
                    _ = changes.recv() => {}
                }
            }
            None => tick.await,
        }
    }
}
