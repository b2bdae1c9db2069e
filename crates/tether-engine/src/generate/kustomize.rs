//! `kustomize build` (or `kubectl kustomize`) of one kustomization directory.

use std::path::Path;

use tether_core::generate::{Failure, shown_dir};

use super::tools::{KustomizeCommand, run_tool};

/// Builds the kustomization `dir` (relative to `root`) with `command`, whose version
/// was checked.
pub(super) fn build(command: &KustomizeCommand, root: &Path, dir: &str) -> Result<String, Failure> {
    let path = if dir.is_empty() {
        root.to_path_buf()
    } else {
        root.join(dir)
    };
    run_tool(command.command(&path), command.program()).map_err(|message| Failure {
        message,
        hint: format!(
            "Kustomize's own message: `kubectl kustomize {}` shows the same",
            shown_dir(dir)
        ),
    })
}
