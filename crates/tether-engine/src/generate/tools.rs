//! Finding the real engines: `helm`, and `kustomize` or `kubectl kustomize`.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// The tools' variables: a path to the program.
pub const HELM_VARIABLE: &str = "TETHER_HELM";
/// A path to `kustomize`, or to `kubectl` (then `kubectl kustomize` builds).
pub const KUSTOMIZE_VARIABLE: &str = "TETHER_KUSTOMIZE";

/// The oldest Kustomize tether builds with (kubectl 1.27 embeds it).
pub const KUSTOMIZE_MINIMUM: &str = "v5.0.0";

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ToolError {
    #[error("{tool} is not installed: {variable} is not set and no `{program}` is on PATH")]
    Missing {
        tool: &'static str,
        what: String,
        variable: &'static str,
        program: &'static str,
    },
}

impl ToolError {
    pub fn hint(&self) -> String {
        match self {
            ToolError::Missing { variable, tool, .. } => format!(
                "install {tool} (or set {variable} to its path); this project's scripts/helm-tools installs pinned helm and kubectl (with Kustomize)"
            ),
        }
    }
}

/// How a kustomization is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KustomizeCommand {
    /// `kustomize build DIR`
    Kustomize(PathBuf),
    /// `kubectl kustomize DIR`
    Kubectl(PathBuf),
}

impl KustomizeCommand {
    pub fn command(&self, dir: &Path) -> std::process::Command {
        let (program, verb) = match self {
            KustomizeCommand::Kustomize(p) => (p, "build"),
            KustomizeCommand::Kubectl(p) => (p, "kustomize"),
        };
        let mut command = std::process::Command::new(program);
        command.arg(verb).arg(dir);
        command
    }
}

/// The tools, as the environment names them (found when first needed).
#[derive(Clone, Debug, Default)]
pub struct Tools {
    pub helm: Option<PathBuf>,
    pub kustomize: Option<KustomizeCommand>,
}

impl Tools {
    /// From `TETHER_HELM`, `TETHER_KUSTOMIZE` and PATH.
    pub fn from_environment() -> Tools {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let on_path = |program: &str| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        };
        let named = |variable: &str| {
            std::env::var_os(variable)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let helm = named(HELM_VARIABLE).or_else(|| on_path("helm"));
        let kustomize = match named(KUSTOMIZE_VARIABLE) {
            Some(path) if is_kubectl(&path) => Some(KustomizeCommand::Kubectl(path)),
            Some(path) => Some(KustomizeCommand::Kustomize(path)),
            None => on_path("kustomize")
                .map(KustomizeCommand::Kustomize)
                .or_else(|| on_path("kubectl").map(KustomizeCommand::Kubectl)),
        };
        Tools { helm, kustomize }
    }

    pub fn helm(&self, what: &str) -> Result<&Path, ToolError> {
        self.helm.as_deref().ok_or_else(|| ToolError::Missing {
            tool: "Helm",
            what: what.to_string(),
            variable: HELM_VARIABLE,
            program: "helm",
        })
    }

    pub fn kustomize(&self, what: &str) -> Result<&KustomizeCommand, ToolError> {
        self.kustomize.as_ref().ok_or_else(|| ToolError::Missing {
            tool: "Kustomize",
            what: what.to_string(),
            variable: KUSTOMIZE_VARIABLE,
            program: "kustomize",
        })
    }
}

fn is_kubectl(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("kubectl"))
}
