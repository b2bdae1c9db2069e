//! `kustomize build` (or `kubectl kustomize`) of one kustomization directory.

use std::path::Path;

use tether_core::generate::{Failure, shown_dir};

use super::{Tools, run_tool};

pub(super) fn build(tools: &Tools, root: &Path, dir: &str, label: &str) -> Result<String, Failure> {
    let command = tools.kustomize(label).map_err(|e| Failure {
        message: e.to_string(),
        hint: e.hint(),
    })?;
    let path = if dir.is_empty() {
        root.to_path_buf()
    } else {
        root.join(dir)
    };
    let program = match command {
        super::KustomizeCommand::Kustomize(p) | super::KustomizeCommand::Kubectl(p) => p.clone(),
    };
    run_tool(command.command(&path), &program).map_err(|message| Failure {
        message,
        hint: format!(
            "Kustomize's own message: `kubectl kustomize {}` shows the same (Kustomize {} or later)",
            shown_dir(dir),
            super::KUSTOMIZE_MINIMUM
        ),
    })
}
