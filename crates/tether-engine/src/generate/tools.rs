//! Finding the real engines: `helm`, and `kustomize` or `kubectl kustomize`, from
//! `TETHER_HELM`, `TETHER_KUSTOMIZE` or PATH; and running one to completion.

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
        variable: &'static str,
        program: &'static str,
    },
    #[error(
        "{program} builds with Kustomize {found}, older than {KUSTOMIZE_MINIMUM}, the oldest tether takes"
    )]
    TooOld { program: String, found: String },
    #[error("cannot tell the version of {program}: {reason}")]
    UnknownVersion { program: String, reason: String },
}

impl ToolError {
    pub fn hint(&self) -> String {
        match self {
            ToolError::Missing { variable, tool, .. } => format!(
                "install {tool} (or set {variable} to its path); this project's scripts/helm-tools installs pinned helm and kubectl (with Kustomize)"
            ),
            ToolError::TooOld { .. } | ToolError::UnknownVersion { .. } => format!(
                "older Kustomize builds overlays differently: install kustomize {KUSTOMIZE_MINIMUM} or later, or kubectl 1.27 or later, and name it with {KUSTOMIZE_VARIABLE}"
            ),
        }
    }
}

impl KustomizeCommand {
    pub fn program(&self) -> &Path {
        match self {
            KustomizeCommand::Kustomize(p) | KustomizeCommand::Kubectl(p) => p,
        }
    }

    /// Asks the program for the Kustomize it builds with, and refuses one older than
    /// [`KUSTOMIZE_MINIMUM`] (kubectl 1.20's, say, which builds overlays differently).
    /// Blocking.
    pub fn check_version(&self) -> Result<(), ToolError> {
        let program = self.program().display().to_string();
        let unknown = |reason: String| ToolError::UnknownVersion {
            program: program.clone(),
            reason,
        };
        let mut command = std::process::Command::new(self.program());
        match self {
            KustomizeCommand::Kustomize(_) => command.arg("version"),
            KustomizeCommand::Kubectl(_) => command.args(["version", "--client", "-o", "json"]),
        };
        let output = command.output().map_err(|e| unknown(e.to_string()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let found = match self {
            KustomizeCommand::Kustomize(_) => text.trim().to_string(),
            KustomizeCommand::Kubectl(_) => {
                let json: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| unknown(e.to_string()))?;
                // kubectl before 1.24 does not say; 1.27 is the first with Kustomize 5.
                json["kustomizeVersion"].as_str().map_or_else(
                    || {
                        format!(
                            "of kubectl {}",
                            json["clientVersion"]["gitVersion"].as_str().unwrap_or("?")
                        )
                    },
                    str::to_string,
                )
            }
        };
        match major_version(&found) {
            Some(major) if major >= 5 => Ok(()),
            _ => Err(ToolError::TooOld { program, found }),
        }
    }
}

/// The major version in a version text: `v5.7.1`, `{Version:kustomize/v4.5.7 …}`.
fn major_version(text: &str) -> Option<u64> {
    let at = text
        .find("kustomize/v")
        .map(|i| i + "kustomize/v".len())
        .or_else(|| text.strip_prefix('v').map(|_| 1))?;
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::major_version;

    #[test]
    fn kustomize_versions_as_the_tools_print_them() {
        assert_eq!(major_version("v5.7.1"), Some(5));
        assert_eq!(
            major_version("{Version:kustomize/v4.5.7 GitCommit:56d82a8}"),
            Some(4)
        );
        assert_eq!(major_version("of kubectl v1.20.2"), None);
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

    pub fn helm(&self) -> Result<&Path, ToolError> {
        self.helm.as_deref().ok_or(ToolError::Missing {
            tool: "Helm",
            variable: HELM_VARIABLE,
            program: "helm",
        })
    }

    pub fn kustomize(&self) -> Result<&KustomizeCommand, ToolError> {
        self.kustomize.as_ref().ok_or(ToolError::Missing {
            tool: "Kustomize",
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

/// The last lines of a tool's standard error: its own message, without a usage text.
fn tool_message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(6);
    lines[start..].join(" / ")
}

/// Runs a tool to completion: its standard output, or its own words.
pub(super) fn run_tool(command: std::process::Command, program: &Path) -> Result<String, String> {
    run_tool_saying(command, program).map(|(printed, _)| printed)
}

/// As [`run_tool`], with what the tool said on standard error besides (Helm prints a
/// pulled chart's digest there).
pub(super) fn run_tool_saying(
    mut command: std::process::Command,
    program: &Path,
) -> Result<(String, String), String> {
    command.stdin(std::process::Stdio::null());
    let output = command
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !output.status.success() {
        return Err(tool_message(&output.stderr));
    }
    let printed = String::from_utf8(output.stdout)
        .map_err(|_| format!("{} printed text that is not UTF-8", program.display()))?;
    Ok((
        printed,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}
