//! [`CheckedModels`]: a repository's models read and checked, with every diagnostic,
//! and the first errors in a line for a status or a log.

use tether_core::diagnostic::{Diagnostics, Severity};
use tether_core::health::HealthChecks;
use tether_core::settings::Settings;

use crate::repo::LoadedModels;

/// Models read and checked: the files, every diagnostic, and where they came from.
#[derive(Debug)]
pub struct CheckedModels {
    pub loaded: LoadedModels,
    pub diagnostics: Diagnostics,
    /// How many models (documents) were read.
    pub documents: usize,
    /// Why Kubernetes is off for these models, when it is.
    pub dormant: Option<String>,
    /// The repository's settings (`.tether.yaml`).
    pub settings: Settings,
    /// What its objects' health is judged by: its own checks (`healthCheckExprs`),
    /// then the shipped library's.
    pub health: HealthChecks,
}

impl CheckedModels {
    /// The first `limit` errors, a line each with values starred, and how many more.
    pub(crate) fn error_summary(&self, limit: usize) -> String {
        let files = &self.loaded.files;
        let errors: Vec<_> = self
            .diagnostics
            .sorted(files)
            .into_iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        let mut lines: Vec<String> = errors
            .iter()
            .take(limit)
            .map(|d| {
                let plain = d.render_plain(files);
                files.redact(plain.lines().next().unwrap_or_default())
            })
            .collect();
        if errors.len() > limit {
            lines.push(format!("and {} more errors", errors.len() - limit));
        }
        format!("the models are invalid: {}", lines.join("; "))
    }
}
