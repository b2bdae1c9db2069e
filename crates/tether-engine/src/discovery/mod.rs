//! A discovery pass end to end, as a library type that `discover` (once or `--watch`)
//! and the daemon drive alike: the watch caches' pods → `tether_core::discovery::plan`
//! on the branch's models → `writeback` commit (and push). Git work runs off the
//! async runtime.

pub mod caches;
pub mod session;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use thiserror::Error;
use tracing::instrument;

use crate::config::{SETTINGS_FILE, Settings};
use crate::discovery::caches::ClusterWatch;
use crate::driver::Loop;
use crate::git::Credentials;
use crate::writeback::{Author, Synced, Workspace, WritebackError};
use tether_core::discovery::{ClusterChoice, ClusterChoiceError, Outcome, plan};
use tether_core::k8s::Scope;
use tether_core::remedy::Remedy;
use tether_core::settings;
use tether_trust::sign::SigningKey;

#[derive(Debug, Error)]
pub enum DiscoverError {
    #[error("cannot open the repository to write discovered models to")]
    Open(#[source] WritebackError),
    #[error(transparent)]
    Settings(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Writeback(#[from] WritebackError),
    #[error(transparent)]
    Cluster(#[from] ClusterChoiceError),
    #[error("discovery stopped: {0}")]
    Interrupted(String),
}

impl DiscoverError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            DiscoverError::Open(error) | DiscoverError::Writeback(error) => error.remedy(),
            DiscoverError::Cluster(_) => Some(Remedy::NameKubernetesService),
            _ => None,
        }
    }
}

/// Where discovered models are committed.
#[derive(Clone, Debug)]
pub enum Destination {
    /// The branch of the Git checkout around a models directory; commits signed with
    /// `signing_key`, when given.
    Checkout {
        path: PathBuf,
        signing_key: Option<Arc<SigningKey>>,
    },
    /// tether's own clone of a remote, in `cache`; `path` is the models root inside it.
    Remote {
        url: String,
        path: PathBuf,
        cache: PathBuf,
        credentials: Credentials,
    },
}

impl Destination {
    /// The workspace on `branch` (default: the checked-out one; main for a remote),
    /// a remote fetched now. Blocking (git2).
    pub fn open(&self, branch: Option<&str>) -> Result<Workspace, WritebackError> {
        match self {
            Destination::Remote {
                url,
                path,
                cache,
                credentials,
            } => Workspace::open_clone(
                url,
                branch.unwrap_or("main"),
                path,
                cache,
                credentials.clone(),
            ),
            Destination::Checkout { path, signing_key } => {
                Workspace::open_local(path, branch, signing_key.clone())
            }
        }
    }
}

/// Opens the workspace on `branch` (else the settings file's `discover.branch`, else
/// the checked-out branch, or main for a remote) and reads its settings file.
pub(crate) async fn open_workspace(
    destination: Destination,
    branch: Option<String>,
) -> Result<(Workspace, Settings), DiscoverError> {
    blocking(move || match &destination {
        Destination::Remote { .. } => {
            let mut workspace = destination
                .open(branch.as_deref())
                .map_err(DiscoverError::Open)?;
            let settings = match workspace.committed_text(SETTINGS_FILE) {
                Some(text) => settings::parse(SETTINGS_FILE, &text)
                    .map_err(crate::config::ConfigError::from)?,
                None => Settings::default(),
            };
            if let (None, Some(b)) = (&branch, &settings.discover.branch) {
                workspace.set_branch(b);
            }
            Ok((workspace, settings))
        }
        Destination::Checkout { path, .. } => {
            let settings = crate::config::read_settings(&path.join(SETTINGS_FILE))?;
            let branch = branch.or_else(|| settings.discover.branch.clone());
            let workspace = destination
                .open(branch.as_deref())
                .map_err(DiscoverError::Open)?;
            workspace.update_working_tree()?;
            Ok((workspace, settings))
        }
    })
    .await?
}

/// One pass's result.
#[derive(Debug)]
pub struct PassReport {
    pub synced: Synced,
    /// How many pods the pass saw.
    pub pods: usize,
    pub branch: String,
    pub took: Duration,
}

/// Discovery against one cluster watch and one workspace.
pub struct Discoverer {
    workspace: Arc<Mutex<Workspace>>,
    watch: ClusterWatch,
    scope: Scope,
    /// Which KubernetesService the watched cluster is.
    cluster: ClusterChoice,
    applyset: String,
    author: Author,
    push: bool,
}

impl Discoverer {
    /// `watch` must be ready (its caches full).
    pub fn new(
        workspace: Workspace,
        watch: ClusterWatch,
        scope: Scope,
        cluster: ClusterChoice,
        applyset: String,
        author: Author,
        push: bool,
    ) -> Self {
        Discoverer {
            workspace: Arc::new(Mutex::new(workspace)),
            watch,
            scope,
            cluster,
            applyset,
            author,
            push,
        }
    }

    /// What a pass would commit now, changing nothing.
    pub async fn preview(&mut self) -> Result<Outcome, DiscoverError> {
        let pods = self.watch.snapshot();
        let (workspace, scope, cluster, applyset) = self.parts();
        blocking(move || {
            let workspace = lock(&workspace)?;
            let files = workspace.models()?;
            Ok(plan(&pods, &files, &scope, &applyset, &cluster)?)
        })
        .await?
    }

    /// Plans on the branch's models from the cluster's pods now, commits what
    /// changed, and pushes (planning again on the new tip when the remote moved).
    #[instrument(skip_all)]
    pub async fn pass(&mut self) -> Result<PassReport, DiscoverError> {
        let started = Instant::now();
        let pods = self.watch.snapshot();
        let count = pods.len();
        let (workspace, scope, cluster, applyset) = self.parts();
        let (author, push) = (self.author.clone(), self.push);
        let (synced, branch) = blocking(move || {
            let mut workspace = lock(&workspace)?;
            let synced = workspace.sync(
                |files| Ok::<_, DiscoverError>(plan(&pods, files, &scope, &applyset, &cluster)?),
                &author,
                push,
            )?;
            Ok::<_, DiscoverError>((synced, workspace.branch().to_string()))
        })
        .await??;
        Ok(PassReport {
            synced,
            pods: count,
            branch,
            took: started.elapsed(),
        })
    }

    fn parts(&self) -> (Arc<Mutex<Workspace>>, Scope, ClusterChoice, String) {
        (
            self.workspace.clone(),
            self.scope.clone(),
            self.cluster.clone(),
            self.applyset.clone(),
        )
    }
}

impl Loop for Discoverer {
    type Output = PassReport;
    type Error = DiscoverError;

    fn pass(&mut self) -> impl Future<Output = Result<PassReport, DiscoverError>> + Send {
        Discoverer::pass(self)
    }

    async fn changed(&mut self) {
        self.watch.changed().await;
    }
}

fn lock(
    workspace: &Mutex<Workspace>,
) -> Result<std::sync::MutexGuard<'_, Workspace>, DiscoverError> {
    workspace
        .lock()
        .map_err(|_| DiscoverError::Interrupted("an earlier pass failed midway".into()))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, DiscoverError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| DiscoverError::Interrupted(e.to_string()))
}
