//! Models from Git: fetch a repository into a cache and read the model files of one
//! exact commit straight from its tree (no checkout, so no working-tree state), or
//! note the commit of a local checkout. Each blob's size is read from the object
//! database's header before the blob: one past the core's limit is never inflated.
//! Blocking (git2): call off the async runtime.
//!
//! A fetch happens only when the remote's ref moved. One look at the remote at a time
//! per cache, taken by every caller that asked before it began, so the Sources of one
//! repository woken by one push share a fetch (`Looks`, `look_at_remote`); across
//! processes, one writer at a time by a file lock (`sole_writer`), under which
//! libgit2's lock files are stale and removed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use git2::{
    Cred, CredentialType, FetchOptions, ObjectType, Oid, RemoteCallbacks, Repository, TreeWalkMode,
    TreeWalkResult,
};
use sha2::{Digest, Sha256};
use tether_trust::sign::SigningKey;
use thiserror::Error;

pub mod verify;

use crate::directory::{Contents, DataFiles};
use crate::driver::{Backoff, Retries};

use tether_core::inventory::budget::APPROVE_DELETIONS_TRAILER;
use tether_core::load::limits::check_file_size;
use tether_core::remedy::Remedy;
use tether_core::settings::SETTINGS_FILE;
use tether_core::source::{Revision, SourceFile, SourceFiles, is_model_path};

#[derive(Debug, Error)]
pub enum GitError {
    #[error("cannot fetch {url}")]
    Fetch {
        url: String,
        #[source]
        source: git2::Error,
    },
    #[error("{url} has no branch, tag or commit \"{reference}\"")]
    UnknownReference { url: String, reference: String },
    #[error(
        "\"{reference}\" is not a branch, a tag or a full commit id (revision expressions such as HEAD~1 are not taken)"
    )]
    BadReference { reference: String },
    #[error("git failed")]
    Git(#[from] git2::Error),
    #[error("cannot prepare the cache directory {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} in commit {commit} is not UTF-8 text")]
    NotUtf8 { path: String, commit: String },
    /// The commit or tag is not signed by a trusted key (or cannot be checked):
    /// nothing of it is read.
    #[error(transparent)]
    Verify(#[from] verify::VerifyError),
}

impl GitError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            GitError::BadReference { .. } | GitError::UnknownReference { .. } => {
                Some(Remedy::GiveBranchTagOrCommit)
            }
            _ => None,
        }
    }
}

impl GitError {
    /// Will the same read fail again until someone changes the remote or the source
    /// (a ref that does not exist or is ambiguous, a file that is not text)?
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            GitError::UnknownReference { .. }
                | GitError::BadReference { .. }
                | GitError::NotUtf8 { .. }
        ) || matches!(self, GitError::Verify(error) if error.is_permanent())
    }
}

/// How tether proves who it is to Git: to a remote (a token, an SSH key) and in the
/// commits it writes there (a signing key). Its `Debug` never shows a secret.
#[derive(Clone, Default)]
pub struct Credentials {
    /// For https: sent as the password (GitHub, GitLab and Gitea accept tokens so).
    pub token: Option<String>,
    pub username: Option<String>,
    /// For ssh: a private key file; without one, the ssh agent.
    pub ssh_key: Option<PathBuf>,
    /// Signs every commit tether writes to the remote.
    pub signing_key: Option<Arc<SigningKey>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("username", &self.username)
            .field("ssh_key", &self.ssh_key)
            .field("signing_key", &self.signing_key)
            .finish()
    }
}

impl Credentials {
    pub(crate) fn callbacks(&self) -> RemoteCallbacks<'_> {
        let mut callbacks = RemoteCallbacks::new();
        let mut attempts = 0;
        callbacks.credentials(move |_url, username_from_url, allowed| {
            // libgit2 asks again after a refusal; give up rather than loop.
            attempts += 1;
            if attempts > 3 {
                return Err(git2::Error::from_str("authentication failed"));
            }
            let username = self
                .username
                .as_deref()
                .or(username_from_url)
                .unwrap_or("git");
            if allowed.contains(CredentialType::SSH_KEY) {
                return match &self.ssh_key {
                    Some(key) => Cred::ssh_key(username, None, key, None),
                    None => Cred::ssh_key_from_agent(username),
                };
            }
            if allowed.contains(CredentialType::USER_PASS_PLAINTEXT)
                && let Some(token) = &self.token
            {
                return Cred::userpass_plaintext(
                    self.username.as_deref().unwrap_or("x-access-token"),
                    token,
                );
            }
            Cred::default()
        });
        callbacks
    }
}

/// Where a remote's objects are cached: one bare repository per URL.
fn cache_path(cache_dir: &Path, url: &str) -> PathBuf {
    let digest = Sha256::digest(url.as_bytes());
    let name: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    cache_dir.join(format!("{name}.git"))
}

/// Fetches `url` (retrying network failures) and reads the models below `subdir` of
/// the commit that `reference` names: a branch, a tag, a commit id, or the remote's
/// default branch when `None`.
pub fn fetch_models(
    url: &str,
    reference: Option<&str>,
    subdir: Option<&Path>,
    cache_dir: &Path,
    credentials: &Credentials,
) -> Result<(SourceFiles, Revision), GitError> {
    fetch_models_timed(url, reference, subdir, cache_dir, credentials)
        .map(|(files, revision, _)| (files, revision))
}

/// [`fetch_models`], also saying how long the fetch took (none when the cache was
/// current and nothing was fetched).
pub(crate) fn fetch_models_timed(
    url: &str,
    reference: Option<&str>,
    subdir: Option<&Path>,
    cache_dir: &Path,
    credentials: &Credentials,
) -> Result<(SourceFiles, Revision, Option<std::time::Duration>), GitError> {
    let (repo, commit, fetched) = fetch_commit(url, reference, cache_dir, credentials)?;
    let files = read_tree(&repo, commit, subdir)?;
    Ok((files, revision_of(&repo, commit), fetched))
}

/// The cache of `url`, fetched unless it already holds what `reference` names, and
/// the commit `reference` names; with how long the fetch took (none when nothing was
/// fetched). Nothing of the commit's tree is read.
pub(crate) fn fetch_commit(
    url: &str,
    reference: Option<&str>,
    cache_dir: &Path,
    credentials: &Credentials,
) -> Result<(Repository, Oid, Option<std::time::Duration>), GitError> {
    let (repo, look) = look_at_remote(cache_dir, url, reference, credentials, true)?;
    let fetched = match look {
        Look::Fetched(took) => Some(took),
        Look::Current | Look::Moved => None,
    };
    let commit = resolve(&repo, url, reference)?;
    Ok((repo, commit, fetched))
}

pub(crate) fn revision_of(repo: &Repository, commit: Oid) -> Revision {
    Revision {
        commit: commit.to_string(),
        dirty: false,
        approvals: repo
            .find_commit(commit)
            .map(|c| approvals_of(&c))
            .unwrap_or_default(),
    }
}

/// The digests of deletions a commit's message approves: its
/// `Tether-Approve-Deletions` trailers, read as Git reads trailers.
fn approvals_of(commit: &git2::Commit<'_>) -> Vec<String> {
    let Ok(Ok(trailers)) = commit.message().map(git2::message_trailers_strs) else {
        return Vec::new();
    };
    trailers
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case(APPROVE_DELETIONS_TRAILER))
        .map(|(_, value)| value.trim().to_string())
        .collect()
}

/// The commit `reference` names at the remote when the cache already holds it (one
/// round trip listing the remote's refs, nothing fetched); `None` when it moved or
/// anything is uncertain.
pub fn unmoved_commit(
    url: &str,
    reference: Option<&str>,
    cache_dir: &Path,
    credentials: &Credentials,
) -> Option<String> {
    let (repo, look) = look_at_remote(cache_dir, url, reference, credentials, false).ok()?;
    if matches!(look, Look::Moved) {
        return None;
    }
    resolve(&repo, url, reference)
        .ok()
        .map(|oid| oid.to_string())
}

/// Whether `commit` descends from (or is) `ancestor`, in the cache of `url`, which
/// holds the whole history of every fetched ref. An `ancestor` the cache does not hold
/// is not in `commit`'s history: fetching `commit` brought all of it. `None` when
/// `commit` itself is not in the cache or the cache cannot be read.
pub fn descends_from(cache_dir: &Path, url: &str, commit: &str, ancestor: &str) -> Option<bool> {
    let repo = open_cache(cache_dir, url).ok()?;
    let commit = repo.find_commit(Oid::from_str(commit).ok()?).ok()?.id();
    let ancestor = Oid::from_str(ancestor).ok()?;
    if repo.find_commit(ancestor).is_err() {
        return Some(false);
    }
    if commit == ancestor {
        return Some(true);
    }
    repo.graph_descendant_of(commit, ancestor).ok()
}

/// Does the cache already hold what `reference` names at the remote? A full commit id
/// never moves; a branch or tag is compared with the remote's refs, listed in one
/// round trip without any object, so that a source that did not move costs no fetch.
/// Anything uncertain (the remote unreachable, the ref unknown) says no, and the
/// fetch that follows reports it.
fn cached_is_current(
    repo: &Repository,
    url: &str,
    reference: Option<&str>,
    credentials: &Credentials,
) -> bool {
    if let Some(r) = reference.filter(|r| is_full_commit_id(r)) {
        return Oid::from_str(r).is_ok_and(|oid| repo.find_commit(oid).is_ok());
    }
    let Ok(mut remote) = repo.remote_anonymous(url) else {
        return false;
    };
    if remote
        .connect_auth(git2::Direction::Fetch, Some(credentials.callbacks()), None)
        .is_err()
    {
        return false;
    }
    let Ok(advertised) = remote.list() else {
        return false;
    };
    let candidates: Vec<(String, String)> = match reference {
        None => vec![("HEAD".into(), "refs/remotes/origin/HEAD".into())],
        Some(r) => vec![
            (
                format!("refs/heads/{r}"),
                format!("refs/remotes/origin/{r}"),
            ),
            (format!("refs/tags/{r}"), format!("refs/tags/{r}")),
        ],
    };
    candidates.iter().any(|(theirs, ours)| {
        let remote_oid = advertised
            .iter()
            .find(|h| h.name() == theirs)
            .map(|h| h.oid());
        let cached_oid = repo.find_reference(ours).ok().and_then(|r| r.target());
        remote_oid.is_some() && remote_oid == cached_oid
    })
}

/// The Sources of one repository share its cache, and a push reaches them all at once.
/// Each looking at the remote on its own, at the same moment and into the same
/// directory, makes libgit2's lock files collide and the server turn connections
/// away. So a cache is looked at by one caller at a time (a process-wide gate per
/// cache, as the directory is process-wide), and a caller that waited takes the
/// answer of a look that began after it asked, with no round trip of its own.
#[derive(Default)]
struct Looks {
    /// When the last fetch (of every branch and tag) began.
    fetched: Option<Instant>,
    /// When the remote last said the cache holds a reference's commit, by reference.
    current: HashMap<Option<String>, Instant>,
}

impl Looks {
    /// Whether the remote was looked at for `reference` since `asked`: what the
    /// cache holds is what the caller would have found.
    fn fresh_since(&self, reference: Option<&str>, asked: Instant) -> bool {
        self.fetched.is_some_and(|began| began >= asked)
            || self
                .current
                .get(&reference.map(String::from))
                .is_some_and(|began| *began >= asked)
    }

    fn found_current(&mut self, reference: Option<&str>, began: Instant) {
        self.current.insert(reference.map(String::from), began);
    }
}

/// What a look at the remote found for a reference.
enum Look {
    /// The cache holds what the remote names (or a look since the caller asked said so).
    Current,
    /// It moved, and was fetched (how long that took).
    Fetched(std::time::Duration),
    /// It moved, and was not fetched.
    Moved,
}

/// Opens the cache of `url` through its gate and, unless a look that began since
/// this call already answered, lists the remote's refs, then fetches when
/// `reference` moved and `fetch_moved` says so.
fn look_at_remote(
    cache_dir: &Path,
    url: &str,
    reference: Option<&str>,
    credentials: &Credentials,
    fetch_moved: bool,
) -> Result<(Repository, Look), GitError> {
    let asked = Instant::now();
    let gate = gate_of(&cache_path(cache_dir, url));
    let mut looks = gate.lock().unwrap_or_else(PoisonError::into_inner);
    let repo = open_cache(cache_dir, url)?;
    if looks.fresh_since(reference, asked) {
        return Ok((repo, Look::Current));
    }
    let began = Instant::now();
    let look = if cached_is_current(&repo, url, reference, credentials) {
        looks.found_current(reference, began);
        Look::Current
    } else if fetch_moved {
        fetch(&repo, url, credentials)?;
        looks.fetched = Some(began);
        Look::Fetched(began.elapsed())
    } else {
        Look::Moved
    };
    Ok((repo, look))
}

/// The gate of the cache at `path` (see [`Looks`]).
fn gate_of(path: &Path) -> Arc<Mutex<Looks>> {
    static GATES: LazyLock<Mutex<HashMap<PathBuf, Arc<Mutex<Looks>>>>> =
        LazyLock::new(Mutex::default);
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(gates.entry(path.to_path_buf()).or_default())
}

/// Makes this process the only one of tether's that writes the cache `repo` until the
/// returned lock is dropped: an exclusive lock of a file beside it, which the system
/// releases when a process dies. So the lock files libgit2 leaves behind when a
/// process is killed mid-fetch are found stale and removed, instead of failing every
/// fetch after it. Taken by each fetch, inside the cache's gate (see [`Looks`]): the
/// lock orders processes, the gate this one's threads.
fn sole_writer(repo: &Repository) -> Result<std::fs::File, GitError> {
    let path = repo.path().to_path_buf();
    let cache = |source| GitError::Cache {
        path: path.clone(),
        source,
    };
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("writer"))
        .map_err(cache)?;
    lock.lock().map_err(cache)?;
    remove_stale_locks(&path);
    Ok(lock)
}

/// Removes libgit2's lock files (`*.lock`) in the repository at `path`: called only
/// by the one writer ([`sole_writer`]), so each was left by a process that
/// died holding it.
fn remove_stale_locks(path: &Path) {
    // Where libgit2 locks: the files at the top (packed-refs, shallow, config, HEAD)
    // and the references, not the objects.
    let top = walkdir::WalkDir::new(path).max_depth(1).into_iter();
    let references = walkdir::WalkDir::new(path.join("refs")).into_iter();
    let stale = top
        .chain(references)
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_file())
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "lock"));
    for entry in stale {
        match std::fs::remove_file(entry.path()) {
            Ok(()) => {
                tracing::info!(file = %entry.path().display(), "removed a lock file a killed process left in the Git cache")
            }
            Err(error) => {
                tracing::warn!(%error, file = %entry.path().display(), "cannot remove a stale lock file of the Git cache")
            }
        }
    }
}

/// The bare repository that caches `url`'s objects, created when missing.
pub(crate) fn open_cache(cache_dir: &Path, url: &str) -> Result<Repository, GitError> {
    let path = cache_path(cache_dir, url);
    std::fs::create_dir_all(cache_dir).map_err(|source| GitError::Cache {
        path: cache_dir.to_path_buf(),
        source,
    })?;
    match Repository::open_bare(&path) {
        Ok(repo) => Ok(repo),
        Err(_) => Ok(Repository::init_bare(&path)?),
    }
}

/// The cache of `url`, with every branch and tag fetched now (through the cache's
/// gate, see [`Looks`]).
pub(crate) fn fetch_cache(
    cache_dir: &Path,
    url: &str,
    credentials: &Credentials,
) -> Result<Repository, GitError> {
    let gate = gate_of(&cache_path(cache_dir, url));
    let mut looks = gate.lock().unwrap_or_else(PoisonError::into_inner);
    let repo = open_cache(cache_dir, url)?;
    let began = Instant::now();
    fetch(&repo, url, credentials)?;
    looks.fetched = Some(began);
    Ok(repo)
}

/// Fetches every branch and tag of `url` into `refs/remotes/origin/*` and `refs/tags/*`,
/// retrying network failures.
pub(crate) fn fetch(
    repo: &Repository,
    url: &str,
    credentials: &Credentials,
) -> Result<(), GitError> {
    let refspecs = [
        "+refs/heads/*:refs/remotes/origin/*",
        "+refs/tags/*:refs/tags/*",
        "+HEAD:refs/remotes/origin/HEAD",
    ];
    let _writing = sole_writer(repo)?;
    let mut retries = Retries::new(Backoff::request(), 3);
    loop {
        let mut remote = repo.remote_anonymous(url)?;
        let mut options = FetchOptions::new();
        options.remote_callbacks(credentials.callbacks());
        // A branch or tag deleted at the remote is deleted from the cache too, so that
        // it is an unknown reference, never the commit it last pointed to.
        options.prune(git2::FetchPrune::On);
        match remote.fetch(&refspecs, Some(&mut options), None) {
            Ok(()) => return Ok(()),
            Err(e) if is_transient(&e) && retries.left() => {
                tracing::warn!(url, attempt = retries.attempt(), error = %e, "fetch failed; retrying");
                retries.again_blocking();
            }
            Err(source) => {
                return Err(GitError::Fetch {
                    url: url.to_string(),
                    source,
                });
            }
        }
    }
}

/// Fetches one ref of `url` that is neither a branch nor a tag (a pull request's
/// head, `refs/pull/N/head`; a merge request's, `refs/merge-requests/N/head`) into the
/// cache, and checks that it brought `commit`: the commit a webhook named is what is
/// read, whatever the ref says by now. Blocking.
pub fn fetch_pull_request_head(
    url: &str,
    reference: &str,
    commit: &str,
    cache_dir: &Path,
    credentials: &Credentials,
) -> Result<(), GitError> {
    let unknown = || GitError::UnknownReference {
        url: url.to_string(),
        reference: reference.to_string(),
    };
    let valid = reference.starts_with("refs/") && git2::Reference::is_valid_name(reference);
    let wanted = Oid::from_str(commit).map_err(|_| unknown())?;
    if !valid {
        return Err(GitError::BadReference {
            reference: reference.to_string(),
        });
    }
    let gate = gate_of(&cache_path(cache_dir, url));
    let _writing = gate.lock().unwrap_or_else(PoisonError::into_inner);
    let repo = open_cache(cache_dir, url)?;
    if repo.find_commit(wanted).is_ok() {
        return Ok(());
    }
    let _sole = sole_writer(&repo)?;
    let mut remote = repo.remote_anonymous(url)?;
    let mut options = FetchOptions::new();
    options.remote_callbacks(credentials.callbacks());
    remote
        .fetch(
            &[format!("+{reference}:{reference}")],
            Some(&mut options),
            None,
        )
        .map_err(|source| GitError::Fetch {
            url: url.to_string(),
            source,
        })?;
    repo.find_commit(wanted).map(|_| ()).map_err(|_| unknown())
}

pub(crate) fn is_transient(error: &git2::Error) -> bool {
    matches!(
        error.class(),
        git2::ErrorClass::Net | git2::ErrorClass::Http | git2::ErrorClass::Os
    ) && error.code() != git2::ErrorCode::Auth
}

/// The commit a reference names: a branch or a tag of the remote (as last fetched),
/// or a full commit id; anything else, such as a revision expression, is refused.
fn resolve(repo: &Repository, url: &str, reference: Option<&str>) -> Result<Oid, GitError> {
    let reference_name = |r: &str| {
        git2::Reference::is_valid_name(&format!("refs/heads/{r}"))
            .then(|| vec![format!("refs/remotes/origin/{r}"), format!("refs/tags/{r}")])
    };
    let candidates: Vec<String> = match reference {
        None => vec!["refs/remotes/origin/HEAD".into()],
        Some(r) if is_full_commit_id(r) => {
            let commit = Oid::from_str(r)
                .ok()
                .and_then(|oid| repo.find_commit(oid).ok());
            return commit
                .map(|c| c.id())
                .ok_or_else(|| GitError::UnknownReference {
                    url: url.to_string(),
                    reference: r.to_string(),
                });
        }
        Some(r) => reference_name(r).ok_or_else(|| GitError::BadReference {
            reference: r.to_string(),
        })?,
    };
    for candidate in &candidates {
        if let Ok(reference) = repo.find_reference(candidate)
            && let Ok(commit) = reference.peel_to_commit()
        {
            return Ok(commit.id());
        }
    }
    Err(GitError::UnknownReference {
        url: url.to_string(),
        reference: reference.unwrap_or("HEAD").to_string(),
    })
}

/// 40 hexadecimal digits (SHA-1) or 64 (SHA-256).
pub fn is_full_commit_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a commit holds for a models source: its model files (with the files they
/// take data from, and the files left unread for their size, the settings file among
/// them), the settings file's text, and whether sops creation rules are there.
#[derive(Clone, Debug)]
pub struct CommitModels {
    pub files: SourceFiles,
    pub settings: Option<String>,
    pub sops_rules: bool,
}

/// The model files of a commit's tree, below `subdir`, paths relative to it.
pub(crate) fn read_tree(
    repo: &Repository,
    commit: Oid,
    subdir: Option<&Path>,
) -> Result<SourceFiles, GitError> {
    let tree = models_root(repo, commit, subdir)?;
    read_models(repo, commit, &tree)
}

/// [`read_tree`], and the settings file and sops rules at the models root.
pub(crate) fn read_commit_models(
    repo: &Repository,
    commit: Oid,
    subdir: Option<&Path>,
) -> Result<CommitModels, GitError> {
    let tree = models_root(repo, commit, subdir)?;
    let mut files = read_models(repo, commit, &tree)?;
    let blob_at = |name: &str| {
        tree.get_name(name)
            .filter(|e| e.kind() == Some(ObjectType::Blob))
            .map(|e| e.id())
    };
    let settings = match blob_at(SETTINGS_FILE) {
        None => None,
        Some(id) => match read_blob_within_limit(repo, id)? {
            Contents::TooLarge(too_large) => {
                // Reported with the models' problems; no setting is taken from it.
                files = files.with_too_large(vec![SourceFile::too_large(SETTINGS_FILE, too_large)]);
                None
            }
            Contents::Bytes(bytes) => {
                Some(String::from_utf8(bytes).map_err(|_| GitError::NotUtf8 {
                    path: SETTINGS_FILE.to_string(),
                    commit: commit.to_string(),
                })?)
            }
        },
    };
    // Only whether the rules exist matters here: the file is not read.
    let sops_rules = blob_at(tether_sops::creation_rules::CONFIG_FILE).is_some();
    Ok(CommitModels {
        files,
        settings,
        sops_rules,
    })
}

/// The tree of the models root: the commit's, or its `subdir`'s.
fn models_root<'r>(
    repo: &'r Repository,
    commit: Oid,
    subdir: Option<&Path>,
) -> Result<git2::Tree<'r>, GitError> {
    let tree = repo.find_commit(commit)?.tree()?;
    Ok(
        match subdir.filter(|s| !s.as_os_str().is_empty() && *s != Path::new(".")) {
            Some(dir) => repo.find_tree(tree.get_path(dir)?.id())?,
            None => tree,
        },
    )
}

/// The model files below `tree`, and the files they take data from.
fn read_models(
    repo: &Repository,
    commit: Oid,
    tree: &git2::Tree<'_>,
) -> Result<SourceFiles, GitError> {
    let mut blobs = Vec::new();
    tree.walk(TreeWalkMode::PreOrder, |parent, entry| {
        let name = entry.name().unwrap_or_default();
        match entry.kind() {
            Some(ObjectType::Tree) if name.starts_with('.') => TreeWalkResult::Skip,
            Some(ObjectType::Blob) => {
                let path = format!("{parent}{name}");
                if is_model_path(Path::new(&path)) {
                    blobs.push((path, entry.id()));
                }
                TreeWalkResult::Ok
            }
            _ => TreeWalkResult::Ok,
        }
    })?;
    let mut files = Vec::with_capacity(blobs.len());
    for (path, id) in blobs {
        let file = match read_blob_within_limit(repo, id)? {
            Contents::TooLarge(too_large) => SourceFile::too_large(path, too_large),
            Contents::Bytes(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| GitError::NotUtf8 {
                    path: path.clone(),
                    commit: commit.to_string(),
                })?;
                SourceFile::new(path, text)
            }
        };
        files.push(file);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let files = SourceFiles::from_files(files);
    let wanted = tether_core::model::data_file_paths(&files);
    if wanted.is_empty() {
        return Ok(files);
    }
    Ok(read_assets(repo, tree, &wanted)?.attach_to(files))
}

/// The files models take data from, in `tree` (the models root): each path a
/// file, or a directory whose files (not hidden, not in subdirectories) are read.
fn read_assets(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    paths: &[String],
) -> Result<DataFiles, GitError> {
    let mut data = DataFiles::default();
    for relative in paths {
        let Ok(entry) = tree.get_path(Path::new(relative)) else {
            continue;
        };
        match entry.kind() {
            Some(ObjectType::Blob) => {
                data.insert(relative.clone(), read_blob_within_limit(repo, entry.id())?);
            }
            Some(ObjectType::Tree) => {
                let dir = repo.find_tree(entry.id())?;
                for file in dir.iter() {
                    let name = file.name().unwrap_or_default();
                    if name.starts_with('.') || file.kind() != Some(ObjectType::Blob) {
                        continue;
                    }
                    data.insert(
                        format!("{relative}/{name}"),
                        read_blob_within_limit(repo, file.id())?,
                    );
                }
            }
            _ => {}
        }
    }
    Ok(data)
}

/// A blob's bytes, unless its size is past the limit: the size comes from the object
/// database's header (a loose object's first bytes, a packed one's entry), so a
/// refused blob is never inflated.
fn read_blob_within_limit(repo: &Repository, id: Oid) -> Result<Contents, GitError> {
    let (size, _) = repo.odb()?.read_header(id)?;
    if let Some(too_large) = check_file_size(size as u64) {
        return Ok(Contents::TooLarge(too_large));
    }
    Ok(Contents::Bytes(repo.find_blob(id)?.content().to_vec()))
}

/// The commit checked out where `path` lives, if it is in a Git repository, and
/// whether the models below `path` have uncommitted changes.
pub fn local_revision(path: &Path) -> Option<Revision> {
    let repo = Repository::discover(path).ok()?;
    let head = repo.head().ok()?.peel_to_commit().ok()?;
    let workdir = repo.workdir()?.canonicalize().ok()?;
    let relative = path
        .canonicalize()
        .ok()?
        .strip_prefix(&workdir)
        .ok()?
        .to_path_buf();
    let mut options = git2::StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true);
    if !relative.as_os_str().is_empty() {
        options.pathspec(relative.to_string_lossy().as_ref());
    }
    let dirty = repo
        .statuses(Some(&mut options))
        .map(|statuses| {
            statuses
                .iter()
                .any(|s| s.path().is_ok_and(|p| is_model_path(Path::new(p))))
        })
        .unwrap_or(false);
    Some(Revision {
        dirty,
        ..revision_of(&repo, head.id())
    })
}

/// How long a checked-out tree may go unused before a checkout removes it.
const TREE_KEPT: Duration = Duration::from_secs(600);

/// Writes the tree of `commit` (of the repository at `git_dir`) to `target`, for the
/// tools that read files (Kustomize, Helm): into a fresh directory of `trees` first,
/// renamed into place when complete. Sources of one repository share `trees`, at
/// their own commits and at once: a checkout removes only the trees unused for
/// [`TREE_KEPT`] (each user keeps its own fresh with [`tree_in_use`]), and when
/// another pass put the same commit in place first, its tree is the one used.
/// Blocking.
pub(crate) fn check_out(
    git_dir: &Path,
    commit: &str,
    trees: &Path,
    target: &Path,
) -> Result<(), GitError> {
    let cache = |source| GitError::Cache {
        path: trees.to_path_buf(),
        source,
    };
    let repo = Repository::open(git_dir)?;
    let tree = repo.find_commit(Oid::from_str(commit)?)?.tree()?;
    remove_unused_trees(trees, SystemTime::now());
    let incoming = trees.join(format!(".{commit}-{}", fastrand::u64(..)));
    std::fs::create_dir_all(&incoming).map_err(cache)?;
    let mut checkout = git2::build::CheckoutBuilder::new();
    // The cache's index is not the tree's: checkouts at once would lock it in turn.
    checkout.target_dir(&incoming).force().update_index(false);
    let placed = repo
        .checkout_tree(tree.as_object(), Some(&mut checkout))
        .map_err(GitError::from)
        .and_then(|()| std::fs::rename(&incoming, target).map_err(cache));
    match placed {
        Ok(()) => Ok(()),
        Err(_) if tree_in_use(target) => {
            let _ = std::fs::remove_dir_all(&incoming);
            Ok(())
        }
        Err(error) => {
            let _ = std::fs::remove_dir_all(&incoming);
            Err(error)
        }
    }
}

/// Marks a checked-out tree as in use now, so that no checkout removes it meanwhile;
/// false when there is none.
pub(crate) fn tree_in_use(target: &Path) -> bool {
    std::fs::File::open(target)
        .and_then(|dir| dir.set_modified(SystemTime::now()))
        .is_ok()
}

/// Removes the trees, and the checkouts a killed process left half-written, that
/// nobody used for [`TREE_KEPT`] before `now`.
fn remove_unused_trees(trees: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(trees) else {
        return;
    };
    for entry in entries.flatten() {
        let unused = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|used| now.duration_since(used).is_ok_and(|idle| idle > TREE_KEPT));
        if unused {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit with an empty tree on top of `parents`.
    fn commit(repo: &Repository, message: &str, parents: &[Oid]) -> Oid {
        let tree = repo.find_tree(repo.treebuilder(None).unwrap().write().unwrap());
        let signature = git2::Signature::now("test", "test@example.org").unwrap();
        let parents: Vec<git2::Commit<'_>> = parents
            .iter()
            .map(|p| repo.find_commit(*p).unwrap())
            .collect();
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(
            None,
            &signature,
            &signature,
            message,
            &tree.unwrap(),
            &parents,
        )
        .unwrap()
    }

    /// A commit whose tree holds `models.yaml` with `text`.
    fn commit_file(repo: &Repository, text: &str) -> String {
        let blob = repo.blob(text.as_bytes()).unwrap();
        let mut tree = repo.treebuilder(None).unwrap();
        tree.insert("models.yaml", blob, 0o100644).unwrap();
        let tree = repo.find_tree(tree.write().unwrap()).unwrap();
        let signature = git2::Signature::now("test", "test@example.org").unwrap();
        let commit = repo
            .commit(None, &signature, &signature, text, &tree, &[])
            .unwrap();
        commit.to_string()
    }

    #[test]
    fn sources_of_one_repository_check_out_their_commits_at_once_and_keep_them() {
        let cache = tempfile::tempdir().unwrap();
        let repo = open_cache(cache.path(), "https://git.example.org/models.git").unwrap();
        let commits = [commit_file(&repo, "a"), commit_file(&repo, "b")];
        let git_dir = repo.path().to_path_buf();
        let trees = git_dir.join("tether-trees");
        // Sixteen passes, half at each commit, each checking out its commit at once.
        let barrier = std::sync::Barrier::new(16);
        std::thread::scope(|scope| {
            for pass in 0..16 {
                let (commit, trees, git_dir, barrier) =
                    (&commits[pass % 2], &trees, &git_dir, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    let target = trees.join(commit);
                    if !tree_in_use(&target) {
                        check_out(git_dir, commit, trees, &target).unwrap();
                    }
                    // What Helm would read, there until this pass is done with it.
                    let text = std::fs::read_to_string(target.join("models.yaml")).unwrap();
                    assert_eq!(text, if pass % 2 == 0 { "a" } else { "b" });
                });
            }
        });
        let mut left: Vec<String> = std::fs::read_dir(&trees)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut expected = commits.to_vec();
        expected.sort();
        assert_eq!(left, expected, "both trees, no half-written checkout");

        // A tree nobody used for longer than TREE_KEPT goes at the next checkout.
        let unused = std::fs::File::open(trees.join(&commits[0])).unwrap();
        let long_ago = SystemTime::now() - TREE_KEPT - Duration::from_secs(60);
        unused.set_modified(long_ago).unwrap();
        let third = commit_file(&repo, "c");
        check_out(&git_dir, &third, &trees, &trees.join(&third)).unwrap();
        assert!(!trees.join(&commits[0]).exists());
        assert!(trees.join(&commits[1]).join("models.yaml").is_file());
        assert!(trees.join(&third).join("models.yaml").is_file());
    }

    #[test]
    fn a_commit_off_the_applied_history_is_a_rewrite() {
        let cache = tempfile::tempdir().unwrap();
        let url = "https://git.example.org/models.git";
        let repo = open_cache(cache.path(), url).unwrap();
        let first = commit(&repo, "first", &[]);
        let second = commit(&repo, "second", &[first]);
        // A force-push: another second commit on the first, replacing `second`.
        let rewritten = commit(&repo, "second, rewritten", &[first]);
        let descends = |commit: Oid, ancestor: &str| {
            descends_from(cache.path(), url, &commit.to_string(), ancestor)
        };
        assert_eq!(descends(second, &first.to_string()), Some(true));
        assert_eq!(descends(second, &second.to_string()), Some(true));
        assert_eq!(
            descends(first, &second.to_string()),
            Some(false),
            "moved back"
        );
        assert_eq!(descends(rewritten, &second.to_string()), Some(false));
        // An applied commit the cache never fetched is not in the new history.
        let unknown = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(descends(second, unknown), Some(false));
        // Of a commit the cache does not hold, nothing can be said.
        let absent = Oid::from_str(unknown).unwrap();
        assert_eq!(descends(absent, &first.to_string()), None);
        assert_eq!(descends(second, "not a commit id"), None);
    }

    #[test]
    fn a_look_at_the_remote_answers_those_who_asked_before_it_began() {
        let asked = Instant::now();
        let mut looks = Looks::default();
        assert!(!looks.fresh_since(Some("main"), asked), "never looked");
        let later = asked + std::time::Duration::from_millis(5);
        looks.found_current(Some("main"), later);
        assert!(looks.fresh_since(Some("main"), asked));
        assert!(
            !looks.fresh_since(Some("main"), later + std::time::Duration::from_millis(1)),
            "asked after the look began: the push may be newer"
        );
        assert!(
            !looks.fresh_since(Some("next"), asked),
            "main being current says nothing of next"
        );
        looks.fetched = Some(later);
        assert!(
            looks.fresh_since(Some("next"), asked),
            "a fetch brings every ref"
        );
        assert!(looks.fresh_since(None, asked));
    }
}
