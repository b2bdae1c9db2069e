//! Running the real engines for the core's generators ([`tether_core::generate`]):
//! `kustomize build` of a kustomization and `helm template` of a chart, in the
//! models' directory on disk (a Git commit is checked out for them once). Blocking:
//! call [`Generate::run`] off the async runtime.
//!
//! What they make is kept per commit: a pass at the same commit (a retry, a drift
//! correction) builds nothing, and a chart of an exact version is fetched once.

mod helm;
mod kustomize;
mod tools;
mod verify;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tether_core::generate::{Failure, Generated, Generator};
use tether_trust::trusted_keys::TrustedKeys;

pub use helm::Capabilities;
pub use tools::{HELM_VARIABLE, KUSTOMIZE_VARIABLE};
use tools::{KustomizeCommand, ToolError, Tools};

/// The variable naming the directory Helm charts are cached in.
pub const CHART_CACHE_VARIABLE: &str = "TETHER_CHART_CACHE";

/// Where the models are on disk, for the tools that read files.
#[derive(Clone, Debug)]
pub enum ModelsTree {
    /// The models root (a directory, or the directory of one models file).
    Directory(PathBuf),
    /// A commit of a Git cache, checked out on first need; `path` is the models root
    /// inside the repository.
    Commit {
        git_dir: PathBuf,
        commit: String,
        path: PathBuf,
    },
}

/// The engines, the chart cache, and what was built at the last commit.
#[derive(Clone, Debug)]
pub struct Generate {
    tools: Tools,
    chart_cache: PathBuf,
    built: Arc<Mutex<Built>>,
    /// Kustomize's version, checked once.
    kustomize: Arc<std::sync::OnceLock<Result<KustomizeCommand, ToolError>>>,
    /// The keys every chart fetched from a repository or a registry must be signed
    /// by (a provenance file, a cosign signature); none: charts are not verified.
    chart_keys: Option<Arc<TrustedKeys>>,
}

#[derive(Debug, Default)]
struct Built {
    commit: Option<String>,
    outputs: HashMap<String, String>,
}

impl Generate {
    /// Tools from the environment (see [`Tools::from_environment`]); charts cached in
    /// `TETHER_CHART_CACHE`, else in tether's cache directory.
    pub fn from_environment() -> Generate {
        let chart_cache = std::env::var_os(CHART_CACHE_VARIABLE)
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::config::cache_home().join("charts"));
        Generate {
            tools: Tools::from_environment(),
            chart_cache,
            built: Arc::default(),
            kustomize: Arc::default(),
            chart_keys: None,
        }
    }

    /// Requires every chart fetched from a repository or a registry to be signed by
    /// one of `keys`, from the next build on (a Source's keys, read before each pass).
    pub fn set_chart_keys(&mut self, keys: Option<Arc<TrustedKeys>>) {
        self.chart_keys = keys;
    }

    /// Builds every generator; a failure is one generator's, with the tool's words.
    /// `revision`: the commit the models are at, when clean (what is built is kept for
    /// it). Blocking.
    pub fn run(
        &self,
        generators: &[Generator],
        tree: &ModelsTree,
        revision: Option<&str>,
        capabilities: Option<&Capabilities>,
    ) -> Vec<Generated> {
        if generators.is_empty() {
            return Vec::new();
        }
        let root = match materialize(tree) {
            Ok(root) => root,
            Err(message) => {
                let failure = Failure {
                    message,
                    hint:
                        "the repository's files could not be written to disk for Kustomize and Helm"
                            .into(),
                };
                return generators
                    .iter()
                    .map(|_| Generated {
                        output: Err(failure.clone()),
                    })
                    .collect();
            }
        };
        generators
            .iter()
            .map(|generator| {
                let keys = self.chart_keys.as_ref().map(|keys| keys.names());
                let key = format!("{generator:?}{capabilities:?}{keys:?}");
                if let Some(text) = revision.and_then(|r| self.kept(r, &key)) {
                    return Generated { output: Ok(text) };
                }
                let output = match generator {
                    Generator::Kustomize { dir, .. } => self
                        .kustomize()
                        .and_then(|command| kustomize::build(&command, &root, dir)),
                    Generator::Helm(request) => helm::template(
                        &self.tools,
                        &self.chart_cache,
                        &root,
                        request,
                        capabilities,
                        self.chart_keys.as_deref(),
                    ),
                };
                if let (Some(revision), Ok(text)) = (revision, &output) {
                    self.keep(revision, key, text.clone());
                }
                Generated { output }
            })
            .collect()
    }

    /// The Kustomize command, found and its version checked on first use.
    fn kustomize(&self) -> Result<KustomizeCommand, Failure> {
        self.kustomize
            .get_or_init(|| {
                let command = self.tools.kustomize()?.clone();
                command.check_version()?;
                Ok(command)
            })
            .clone()
            .map_err(|e| Failure {
                message: e.to_string(),
                hint: e.hint(),
            })
    }

    fn kept(&self, revision: &str, key: &str) -> Option<String> {
        let built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        (built.commit.as_deref() == Some(revision))
            .then(|| built.outputs.get(key).cloned())
            .flatten()
    }

    /// Keeps what a commit built; another commit's outputs are dropped, so what is
    /// kept stays one commit's.
    fn keep(&self, revision: &str, key: String, text: String) {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if built.commit.as_deref() != Some(revision) {
            *built = Built {
                commit: Some(revision.to_string()),
                outputs: HashMap::new(),
            };
        }
        built.outputs.insert(key, text);
    }
}

/// The models root on disk: a directory as it is, a commit checked out once (into
/// the Git cache, beside the repository, where the Sources of the repository keep
/// the trees of their commits while they use them).
fn materialize(tree: &ModelsTree) -> Result<PathBuf, String> {
    match tree {
        ModelsTree::Directory(root) => Ok(root.clone()),
        ModelsTree::Commit {
            git_dir,
            commit,
            path,
        } => {
            let trees = git_dir.join("tether-trees");
            let target = trees.join(commit);
            if !crate::git::tree_in_use(&target) {
                crate::git::check_out(git_dir, commit, &trees, &target)
                    .map_err(|e| tether_core::error_chain(&e))?;
            }
            Ok(target.join(path))
        }
    }
}
