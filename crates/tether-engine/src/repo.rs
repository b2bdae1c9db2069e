//! Where the models come from, and reading them: a directory (with the commit of the
//! Git checkout around it, if any), a Git repository at a branch, tag or commit,
//! read from that commit's tree, or an OCI artifact ([`crate::oci`]) unpacked into
//! the cache of its digest. Reading is blocking (file walks, git2) and runs off
//! the async runtime. Every file's size is known before it is read, and a file past
//! the core's limit is not read (see [`crate::directory`], [`crate::git`]). A
//! [`CommitCache`] keeps the last commit's models, so a retried pass at the same commit
//! reads no blob.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use thiserror::Error;
use tracing::instrument;

use crate::directory::{Contents, SourceError, read_models_dir, read_within_limit};
use crate::generate::ModelsTree;
use crate::git::verify::{Verification, Verified};
use crate::git::{
    CommitModels, Credentials, GitError, fetch_commit, local_revision, read_commit_models,
    revision_of,
};
use crate::oci::{Access, OciError, Reference};
use tether_core::remedy::Remedy;
use tether_core::source::{Revision, SourceFile, SourceFiles};
use tether_trust::trusted_keys::TrustedKeys;

/// A models source.
#[derive(Clone, Debug)]
pub enum Repo {
    /// A models directory (or one file).
    Directory(PathBuf),
    /// A remote repository, fetched into `cache`.
    Git {
        url: String,
        /// Branch, tag or commit; the remote's default branch when absent.
        reference: Option<String>,
        /// The models directory inside the repository.
        path: PathBuf,
        cache: PathBuf,
        credentials: Credentials,
        /// The signatures the commit (or its tag) must carry; none checked when absent.
        verify: Option<Verification>,
    },
    /// An OCI artifact in Flux's format, unpacked into `cache` by its digest.
    Oci {
        reference: Reference,
        /// The models directory inside the artifact.
        path: PathBuf,
        cache: PathBuf,
        access: Access,
        /// The cosign keys one of which must have signed the artifact; none checked
        /// when absent.
        verify: Option<Arc<TrustedKeys>>,
    },
}

#[derive(Debug, Error)]
pub enum RepoError {
    #[error("cannot read the models")]
    Read(#[from] SourceError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Oci(#[from] OciError),
    #[error("reading the models stopped: {0}")]
    Interrupted(String),
}

impl RepoError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            RepoError::Git(error) => error.remedy(),
            _ => None,
        }
    }
}

/// The models of a source, with where they came from.
#[derive(Debug)]
pub struct LoadedModels {
    pub files: SourceFiles,
    /// The path or URL (and ref), as reports name the source.
    pub label: String,
    /// The commit the models were read at, if they come from Git.
    pub revision: Option<Revision>,
    /// Who signed that commit (or its tag), when the source verifies signatures.
    pub verified: Option<Verified>,
    /// The text of the settings file (`.tether.yaml`) at the models root, if any.
    pub settings: Option<String>,
    /// How long fetching the repository took; none when nothing was fetched.
    pub fetch_took: Option<std::time::Duration>,
    /// Does the repository keep sops creation rules (`.sops.yaml` at the models root,
    /// or above it in a directory)? Then a Secret's value in plain text is reported.
    pub sops_rules: bool,
    /// Is a Secret's value in plain text an error (rather than a warning)?
    pub plain_secrets_are_errors: bool,
    /// Where the models are on disk, for Kustomize and Helm.
    pub tree: ModelsTree,
}

/// The settings file at the root of a models directory.
pub const SETTINGS_FILE: &str = tether_core::settings::SETTINGS_FILE;

/// The models a Git source read at its last commit, so that reading the same commit
/// again reads no blob: the daemon retries a failed pass (a cluster error, invalid
/// models) with backoff, and each retry would otherwise inflate the whole tree again.
/// A commit's content never changes, so the entry is never stale; it is replaced when
/// the source reads another commit. Clones share the entry.
#[derive(Clone, Debug, Default)]
pub struct CommitCache {
    last: Arc<Mutex<Option<CachedCommit>>>,
}

#[derive(Debug)]
struct CachedCommit {
    key: CommitKey,
    models: Arc<CommitModels>,
}

/// What a commit's models are read for: the remote, the models root, the commit.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CommitKey {
    url: String,
    path: PathBuf,
    commit: git2::Oid,
}

impl CommitCache {
    fn get(&self, key: &CommitKey) -> Option<Arc<CommitModels>> {
        // A panic while the lock was held cannot leave a half-written entry: it is
        // replaced whole.
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.as_ref()
            .filter(|cached| cached.key == *key)
            .map(|cached| Arc::clone(&cached.models))
    }

    fn keep(&self, key: CommitKey, models: Arc<CommitModels>) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(CachedCommit { key, models });
    }
}

impl Repo {
    /// The path or URL (and ref), as reports name the source.
    pub fn label(&self) -> String {
        match self {
            Repo::Directory(path) => path.display().to_string(),
            Repo::Git {
                url,
                reference: Some(r),
                ..
            } => format!("{url} ({r})"),
            Repo::Git { url, .. } => url.clone(),
            Repo::Oci { reference, .. } => reference.to_string(),
        }
    }

    /// For a Git source: the commit its ref names, if the remote says it did not move
    /// from what the cache holds (nothing is fetched); for an artifact, its revision
    /// (`<tag>@sha256:…`) when the cache holds the digest its tag names (one HEAD
    /// request, nothing downloaded). `None` for a directory, or when the ref moved or
    /// the remote could not be asked.
    pub async fn unmoved_commit(&self) -> Option<String> {
        if let Repo::Oci {
            reference,
            cache,
            access,
            ..
        } = self
        {
            return crate::oci::unmoved_revision(reference, access, cache).await;
        }
        let Repo::Git {
            url,
            reference,
            cache,
            credentials,
            ..
        } = self.clone()
        else {
            return None;
        };
        blocking(move || {
            crate::git::unmoved_commit(&url, reference.as_deref(), &cache, &credentials)
        })
        .await
        .ok()
        .flatten()
    }

    /// For a Git source: whether `commit` descends from (or is) `ancestor`, both
    /// commits of the cache. `None` for a directory or when the cache cannot say.
    pub async fn descends_from(&self, commit: &str, ancestor: &str) -> Option<bool> {
        let Repo::Git { url, cache, .. } = self.clone() else {
            return None;
        };
        let (commit, ancestor) = (commit.to_string(), ancestor.to_string());
        blocking(move || crate::git::descends_from(&cache, &url, &commit, &ancestor))
            .await
            .ok()
            .flatten()
    }

    /// Reads the models; a directory's files and its checkout's commit at once.
    pub async fn load(&self) -> Result<LoadedModels, RepoError> {
        self.load_cached(&CommitCache::default()).await
    }

    /// [`Repo::load`]; a Git source's commit that `commits` already holds is taken
    /// from it (the ref is still resolved, and fetched when it moved).
    #[instrument(skip_all, fields(source = %self.label()))]
    pub async fn load_cached(&self, commits: &CommitCache) -> Result<LoadedModels, RepoError> {
        let label = self.label();
        match self.clone() {
            Repo::Git {
                url,
                reference,
                path,
                cache,
                credentials,
                verify,
            } => {
                let commits = commits.clone();
                let read = blocking(move || {
                    read_commit(
                        url,
                        reference.as_deref(),
                        path,
                        &cache,
                        &credentials,
                        verify.as_ref(),
                        &commits,
                    )
                })
                .await??;
                Ok(read.loaded(label, path_inside(self)))
            }
            Repo::Oci {
                reference,
                path,
                cache,
                access,
                verify,
            } => {
                let artifact = Artifact {
                    reference: &reference,
                    path: &path,
                    cache: &cache,
                    access: &access,
                    verify: verify.as_deref(),
                };
                load_artifact(label, artifact).await
            }
            Repo::Directory(path) => {
                // Messages name files from where tether runs, as the path was given.
                let shown_root = tether_core::source::shown_root_of(&path, path.is_file());
                let path_for_rules = std::path::absolute(&path).unwrap_or_else(|_| path.clone());
                let tree = ModelsTree::Directory(if path.is_file() {
                    path.parent().map(PathBuf::from).unwrap_or_default()
                } else {
                    path.clone()
                });
                let (read, revision) = tokio::join!(
                    read_models_root(path.clone(), shown_root),
                    blocking(move || local_revision(&path)),
                );
                let (files, settings) = read?;
                Ok(LoadedModels {
                    files,
                    label,
                    revision: revision?,
                    verified: None,
                    settings,
                    fetch_took: None,
                    sops_rules: crate::directory::find_sops_config(&path_for_rules).is_some(),
                    plain_secrets_are_errors: false,
                    tree,
                })
            }
        }
    }
}

/// What a Git source read of a commit: its models, the commit, and how it came.
struct CommitRead {
    models: Arc<CommitModels>,
    revision: Revision,
    fetch_took: Option<std::time::Duration>,
    git_dir: PathBuf,
    verified: Option<Verified>,
}

/// The commit `reference` names in `url` (fetched when the ref moved), its signatures
/// checked as `verify` asks before any blob is read, and its models below `path`,
/// taken from `commits` when it holds that commit. Blocking.
fn read_commit(
    url: String,
    reference: Option<&str>,
    path: PathBuf,
    cache: &std::path::Path,
    credentials: &Credentials,
    verify: Option<&Verification>,
    commits: &CommitCache,
) -> Result<CommitRead, GitError> {
    let (repo, commit, fetch_took) = fetch_commit(&url, reference, cache, credentials)?;
    let verified = verify
        .map(|v| crate::git::verify::check(&repo, reference, commit, v))
        .transpose()?;
    let git_dir = repo.path().to_path_buf();
    let key = CommitKey { url, path, commit };
    let models = match commits.get(&key) {
        Some(models) => models,
        None => {
            let models = Arc::new(read_commit_models(&repo, commit, Some(&key.path))?);
            commits.keep(key, Arc::clone(&models));
            models
        }
    };
    Ok(CommitRead {
        models,
        revision: revision_of(&repo, commit),
        fetch_took,
        git_dir,
        verified,
    })
}

impl CommitRead {
    fn loaded(self, label: String, path_inside: PathBuf) -> LoadedModels {
        LoadedModels {
            files: self.models.files.clone(),
            label,
            revision: Some(self.revision.clone()),
            verified: self.verified,
            settings: self.models.settings.clone(),
            fetch_took: self.fetch_took,
            sops_rules: self.models.sops_rules,
            plain_secrets_are_errors: false,
            tree: ModelsTree::Commit {
                git_dir: self.git_dir,
                commit: self.revision.commit.clone(),
                path: path_inside,
            },
        }
    }
}

/// A models root's files (named under `shown_root`) and its settings file's text; a
/// settings file past the size limit is reported with the files.
async fn read_models_root(
    path: PathBuf,
    shown_root: String,
) -> Result<(SourceFiles, Option<String>), RepoError> {
    let settings_path = path.join(SETTINGS_FILE);
    let (files, settings) = tokio::join!(
        read_directory(path),
        blocking(move || read_settings_file(&settings_path))
    );
    let (settings, settings_too_large) = settings??;
    let files = files?
        .with_too_large(settings_too_large.into_iter().collect())
        .with_shown_root(shown_root);
    Ok((files, settings))
}

/// An artifact to read: where it is, the models directory inside it, the cache it
/// is unpacked into, how to reach its registry, and the keys it must be signed by.
struct Artifact<'a> {
    reference: &'a Reference,
    path: &'a std::path::Path,
    cache: &'a std::path::Path,
    access: &'a Access,
    verify: Option<&'a TrustedKeys>,
}

/// Pulls an artifact (nothing is downloaded when the cache holds the digest its tag
/// names; its signature is checked first, when the source verifies one) and reads the
/// models directory `path` inside it, as a directory is read; files are named from the
/// artifact's root.
async fn load_artifact(label: String, artifact: Artifact<'_>) -> Result<LoadedModels, RepoError> {
    let Artifact {
        reference,
        path,
        cache,
        access,
        verify,
    } = artifact;
    if path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(OciError::PathLeaves {
            reference: reference.to_string(),
            path: path.to_path_buf(),
        }
        .into());
    }
    let pulled = crate::oci::pull(reference, access, cache, verify).await?;
    let root = pulled.root.clone();
    let models_root = pulled.root.join(path);
    let sops_rules = models_root
        .ancestors()
        .take_while(|dir| dir.starts_with(&root))
        .any(|dir| dir.join(tether_sops::creation_rules::CONFIG_FILE).is_file());
    let shown_root = tether_core::source::shown_root_of(path, false);
    let tree = ModelsTree::Directory(models_root.clone());
    let (files, settings) = read_models_root(models_root, shown_root).await?;
    Ok(LoadedModels {
        files,
        label,
        revision: Some(Revision {
            commit: pulled.revision,
            dirty: false,
            approvals: Vec::new(),
        }),
        verified: None,
        settings,
        fetch_took: pulled.download_took,
        sops_rules,
        plain_secrets_are_errors: false,
        tree,
    })
}

/// The models root inside a Git source's repository (or an artifact).
fn path_inside(repo: &Repo) -> PathBuf {
    match repo {
        Repo::Git { path, .. } | Repo::Oci { path, .. } => path.clone(),
        Repo::Directory(_) => PathBuf::new(),
    }
}

/// The settings file's text, or the file left unread for its size (reported with the
/// models' problems; no setting is taken from it); neither when the models root has
/// none (or is one file).
fn read_settings_file(
    path: &std::path::Path,
) -> Result<(Option<String>, Option<SourceFile>), RepoError> {
    match read_within_limit(path) {
        Ok(Contents::Bytes(bytes)) => match String::from_utf8(bytes) {
            Ok(text) => Ok((Some(text), None)),
            Err(_) => Err(RepoError::Read(SourceError::NotUtf8 {
                path: path.to_path_buf(),
            })),
        },
        Ok(Contents::TooLarge(too_large)) => {
            Ok((None, Some(SourceFile::too_large(SETTINGS_FILE, too_large))))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok((None, None))
        }
        Err(source) => Err(RepoError::Read(SourceError::Read {
            path: path.to_path_buf(),
            source,
        })),
    }
}

/// Reads a models directory off the async runtime.
pub async fn read_directory(path: PathBuf) -> Result<SourceFiles, RepoError> {
    blocking(move || read_directory_blocking(&path)).await?
}

/// Reads a models directory and the files its models take data from. Blocking.
pub fn read_directory_blocking(path: &std::path::Path) -> Result<SourceFiles, RepoError> {
    let files = read_models_dir(path)?;
    let wanted = tether_core::model::data_file_paths(&files);
    if wanted.is_empty() {
        return Ok(files);
    }
    let root = if path.is_file() {
        path.parent().unwrap_or(path)
    } else {
        path
    };
    Ok(crate::directory::read_assets_dir(root, &wanted)?.attach_to(files))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RepoError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| RepoError::Interrupted(e.to_string()))
}
