//! Writing to the models repository: turn a [`Change`] (discovery's [`Outcome`], a
//! day-2 operation's edit) into a commit on a branch, and push it.
//!
//! Commits are built in memory from the branch's tree (never from a working tree or
//! an index, so nothing the user has staged or edited is taken along) and the branch
//! moves with a compare-and-swap. A rejected push is fetched and the change is
//! planned again on the new tip (a rebase that cannot conflict: discovery recomputes
//! `discovered/` from the cluster, an operation edits the model as it is now), then
//! retried with backoff; it is never forced. A checked-out file is changed only if
//! the working tree holds it as committed. Blocking (git2): call off the async runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{
    ErrorCode, Index, IndexEntry, IndexTime, Oid, PushOptions, Repository, Signature,
    build::CheckoutBuilder,
};
use tether_trust::sign::{GIT_NAMESPACE, SignError, SigningKey};
use thiserror::Error;

use crate::driver::{Backoff, Retries};
use crate::git::{Credentials, GitError, fetch, fetch_cache, read_tree};
use tether_core::discovery::{DISCOVERED_DIR, Outcome};
use tether_core::operation::{RestoredDocument, rollout_state, same_state};
use tether_core::remedy::Remedy;
use tether_core::revert::CommitFacts;
use tether_core::source::SourceFiles;

#[derive(Debug, Error)]
pub enum WritebackError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("git failed")]
    Git2(#[from] git2::Error),
    #[error(transparent)]
    Sign(#[from] SignError),
    #[error("{path} is not in a Git repository")]
    NotARepository { path: PathBuf },
    #[error("cannot tell the branch: HEAD of {path} is detached")]
    DetachedHead { path: PathBuf },
    #[error("the push to {url} was still rejected after {attempts} attempts: {reason}")]
    PushRejected {
        url: String,
        attempts: u32,
        reason: String,
    },
    #[error("cannot push to {url}")]
    Push {
        url: String,
        #[source]
        source: git2::Error,
    },
    #[error("\"{author}\" is not an author; write it as \"Name <email>\"")]
    Author { author: String },
    #[error("{path} has changes that are not committed; commit or stash them first")]
    Uncommitted { path: PathBuf },
    #[error("branch {branch} exists already; name a new branch for the proposal")]
    BranchExists { branch: String },
    /// A file of the branch was left unread for its size: a commit planned without
    /// its contents could overwrite it, so nothing is committed.
    #[error(
        "{path} is {size}, past the limit of {limit} MiB per file: nothing is committed while the branch holds it",
        size = .too_large.shown_size(),
        limit = tether_core::load::limits::FILE_MIB
    )]
    FileTooLarge {
        path: String,
        too_large: tether_core::source::TooLarge,
    },
}

impl WritebackError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            WritebackError::DetachedHead { .. } => Some(Remedy::GiveBranch),
            _ => None,
        }
    }
}

/// What one commit changes below the models root, and what it says.
pub trait Change {
    /// Paths relative to the models root, and their new text.
    fn writes(&self) -> &BTreeMap<String, String>;
    /// Paths removed (none by default).
    fn removes(&self) -> &BTreeSet<String> {
        static NONE: BTreeSet<String> = BTreeSet::new();
        &NONE
    }
    fn message(&self) -> String;

    fn is_empty(&self) -> bool {
        self.writes().is_empty() && self.removes().is_empty()
    }
}

impl Change for tether_core::operation::Edit {
    fn writes(&self) -> &BTreeMap<String, String> {
        &self.writes
    }
    fn message(&self) -> String {
        self.summary.clone()
    }
}

impl Change for Outcome {
    fn writes(&self) -> &BTreeMap<String, String> {
        &self.writes
    }
    fn removes(&self) -> &BTreeSet<String> {
        &self.removes
    }
    fn message(&self) -> String {
        self.commit_message()
    }
}

/// How many commits back a rollback looks for a slice's previous state.
pub(crate) const HISTORY_DEPTH: usize = 1_000;

/// Who tether commits as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub email: String,
}

impl Default for Author {
    fn default() -> Self {
        Author {
            name: "tether".into(),
            email: "tether@localhost".into(),
        }
    }
}

impl std::str::FromStr for Author {
    type Err = WritebackError;

    /// `Name <email>`, as Git writes it.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || WritebackError::Author {
            author: text.to_string(),
        };
        let (name, rest) = text.split_once('<').ok_or_else(error)?;
        let email = rest.strip_suffix('>').ok_or_else(error)?;
        let name = name.trim();
        if name.is_empty() || email.is_empty() || email.contains(['<', '>']) {
            return Err(error());
        }
        Ok(Author {
            name: name.to_string(),
            email: email.to_string(),
        })
    }
}

/// Where discovery commits.
enum Place {
    /// A local repository; `checked_out` when the branch is its HEAD, so the working
    /// tree's `discovered/` follows each commit.
    Local { checked_out: bool },
    /// tether's own bare clone of a remote, in the cache; pushes go to `url`.
    Clone { url: String },
}

/// A branch that discovery writes to.
pub struct Workspace {
    repo: Repository,
    place: Place,
    branch: String,
    /// The models root inside the repository ("" for its top).
    root: PathBuf,
    credentials: Credentials,
    /// Signs each commit (git's SSH signature), when given.
    signing_key: Option<Arc<SigningKey>>,
    /// A branch that commits go to instead, made from `branch` (`--propose`, an
    /// image policy's branch).
    proposal: Option<Proposal>,
}

/// A branch of proposed changes, made from the workspace's branch, whose tip stays.
struct Proposal {
    branch: String,
    /// The branch is tether's own and each commit replaces it (one open proposal per
    /// image policy, updated in place); otherwise it must be new (`--propose`).
    replaced: bool,
}

/// The result of one [`Workspace::sync`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Synced<T = Outcome> {
    /// The commit made, if anything changed.
    pub commit: Option<String>,
    pub outcome: T,
    /// Pushed to the remote (with `push`), including an earlier unpushed commit.
    pub pushed: bool,
}

impl Workspace {
    /// The repository that holds `models_root`, writing to `branch` (default: the
    /// checked-out one).
    pub(crate) fn open_local(
        models_root: &Path,
        branch: Option<&str>,
        signing_key: Option<Arc<SigningKey>>,
    ) -> Result<Self, WritebackError> {
        let not_a_repo = || WritebackError::NotARepository {
            path: models_root.to_path_buf(),
        };
        let repo = Repository::discover(models_root).map_err(|_| not_a_repo())?;
        let workdir = repo.workdir().map(Path::to_path_buf);
        let root = match &workdir {
            Some(workdir) => {
                let workdir = workdir.canonicalize().map_err(|_| not_a_repo())?;
                let root = models_root.canonicalize().map_err(|_| not_a_repo())?;
                root.strip_prefix(&workdir)
                    .map_err(|_| not_a_repo())?
                    .to_path_buf()
            }
            None => PathBuf::new(),
        };
        let head_branch = repo
            .head()
            .ok()
            .filter(|h| h.is_branch())
            .and_then(|h| h.shorthand().ok().map(str::to_string))
            .or_else(|| {
                // An unborn HEAD (a repository without commits) still names its branch.
                repo.find_reference("HEAD")
                    .ok()?
                    .symbolic_target()
                    .ok()??
                    .strip_prefix("refs/heads/")
                    .map(str::to_string)
            });
        let branch = match (branch, &head_branch) {
            (Some(b), _) => b.to_string(),
            (None, Some(b)) => b.clone(),
            (None, None) => {
                return Err(WritebackError::DetachedHead {
                    path: models_root.to_path_buf(),
                });
            }
        };
        let checked_out = workdir.is_some() && head_branch.as_deref() == Some(branch.as_str());
        Ok(Workspace {
            repo,
            place: Place::Local { checked_out },
            branch,
            root,
            credentials: Credentials::default(),
            signing_key,
            proposal: None,
        })
    }

    /// tether's clone of `url` in `cache_dir`, fetched now, writing to `branch` below
    /// `subdir`.
    pub(crate) fn open_clone(
        url: &str,
        branch: &str,
        subdir: &Path,
        cache_dir: &Path,
        credentials: Credentials,
    ) -> Result<Self, WritebackError> {
        let repo = fetch_cache(cache_dir, url, &credentials)?;
        Ok(Workspace {
            repo,
            place: Place::Clone {
                url: url.to_string(),
            },
            branch: branch.to_string(),
            root: subdir
                .components()
                .filter(|c| !matches!(c, std::path::Component::CurDir))
                .collect(),
            signing_key: credentials.signing_key.clone(),
            credentials,
            proposal: None,
        })
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Writes to `branch` instead (a default read from the settings file).
    pub(crate) fn set_branch(&mut self, branch: &str) {
        self.branch = branch.to_string();
    }

    /// Commits to the new branch `proposal`, made from the branch's tip, which stays
    /// as it is (a pull request's branch).
    pub fn propose(&mut self, proposal: &str) {
        self.proposal = Some(Proposal {
            branch: proposal.to_string(),
            replaced: false,
        });
    }

    /// Commits to `proposal`, a branch of tether's own: each commit is made from the
    /// branch's tip and replaces what the proposal held (pushed with force), and a
    /// commit that would repeat the proposal's tip (same parent, same files) is not
    /// made again.
    pub fn propose_replacing(&mut self, proposal: &str) {
        self.proposal = Some(Proposal {
            branch: proposal.to_string(),
            replaced: true,
        });
    }

    /// Commits to the branch itself again (after a proposal).
    pub fn commit_to_branch(&mut self) {
        self.proposal = None;
    }

    /// The branch commits go to.
    pub(crate) fn target_branch(&self) -> &str {
        self.proposal
            .as_ref()
            .map_or(&self.branch, |p| p.branch.as_str())
    }

    fn replaces_proposal(&self) -> bool {
        self.proposal.as_ref().is_some_and(|p| p.replaced)
    }

    /// The models root inside the repository.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The repository's own directory (`.git`, or a bare repository's).
    pub(crate) fn repository_path(&self) -> &Path {
        self.repo.path()
    }

    /// Whether commits change the files of a working tree (its checked-out branch).
    pub(crate) fn is_checked_out(&self) -> bool {
        self.checked_out()
    }

    /// The author Git is configured with for this repository (`user.name`,
    /// `user.email`), for a person's own checkout.
    pub(crate) fn configured_author(&self) -> Option<Author> {
        if !matches!(self.place, Place::Local { .. }) {
            return None;
        }
        let config = self.repo.config().ok()?;
        Some(Author {
            name: config.get_string("user.name").ok()?,
            email: config.get_string("user.email").ok()?,
        })
    }

    /// The text of `name` in the models root of the base commit, or of the remote's
    /// default branch when the branch does not exist yet.
    pub(crate) fn committed_text(&self, name: &str) -> Option<String> {
        let commit = self
            .base()
            .or_else(|| self.tip("refs/remotes/origin/HEAD"))?;
        let tree = self.repo.find_commit(commit).ok()?.tree().ok()?;
        let entry = tree.get_path(&self.root.join(name)).ok()?;
        let blob = self.repo.find_blob(entry.id()).ok()?;
        String::from_utf8(blob.content().to_vec()).ok()
    }

    /// The local ref commits go to (the proposal's, when there is one).
    fn local_ref(&self) -> String {
        format!("refs/heads/{}", self.target_branch())
    }

    fn remote_ref(&self) -> String {
        format!("refs/remotes/origin/{}", self.target_branch())
    }

    fn tip(&self, reference: &str) -> Option<Oid> {
        self.repo.refname_to_id(reference).ok()
    }

    /// The commit discovery builds on: the branch; for a clone, the remote's branch
    /// unless the local one is ahead of it (an earlier commit not pushed yet).
    fn base(&self) -> Option<Oid> {
        let local = self.tip(&format!("refs/heads/{}", self.branch));
        match self.place {
            Place::Local { .. } => local,
            Place::Clone { .. } => {
                let remote = self.tip(&format!("refs/remotes/origin/{}", self.branch));
                match (local, remote) {
                    (Some(l), Some(r))
                        if l == r || self.repo.graph_descendant_of(l, r).unwrap_or(false) =>
                    {
                        Some(l)
                    }
                    (_, Some(r)) => Some(r),
                    (l, None) => l,
                }
            }
        }
    }

    /// A slice's rollout state to go back to, and the revision it is from: the state
    /// at `to` (a commit, tag or branch), or else the one before its latest change
    /// (first parents only, as far as [`HISTORY_DEPTH`] commits back).
    pub(crate) fn earlier_state(
        &self,
        slice: &str,
        to: Option<&str>,
    ) -> Result<Option<(String, Vec<RestoredDocument>)>, WritebackError> {
        let state_at = |commit: Oid| -> Result<_, WritebackError> {
            Ok(rollout_state(&self.models_at(Some(commit))?, slice))
        };
        let describe = |commit: &git2::Commit| {
            let id = commit.id().to_string();
            format!(
                "{} ({})",
                &id[..id.len().min(10)],
                commit.summary().ok().flatten().unwrap_or("")
            )
        };
        if let Some(to) = to {
            let commit = self.repo.revparse_single(to)?.peel_to_commit()?;
            return Ok(state_at(commit.id())?.map(|state| (describe(&commit), state)));
        }
        let Some(base) = self.base() else {
            return Ok(None);
        };
        let Some(now) = state_at(base)? else {
            return Ok(None);
        };
        let mut commit = self.repo.find_commit(base)?;
        for _ in 0..HISTORY_DEPTH {
            let Ok(parent) = commit.parent(0) else {
                break;
            };
            // Most commits leave the state's files as they were: no need to read them.
            if self.same_blobs(&commit, &parent, &now) {
                commit = parent;
                continue;
            }
            match state_at(parent.id())? {
                Some(state) if !same_state(&state, &now) => {
                    return Ok(Some((describe(&parent), state)));
                }
                Some(_) => commit = parent,
                None => break,
            }
        }
        Ok(None)
    }

    /// Do two commits hold the same files where `state`'s documents are?
    fn same_blobs(&self, a: &git2::Commit, b: &git2::Commit, state: &[RestoredDocument]) -> bool {
        let blob = |commit: &git2::Commit, path: &str| {
            commit
                .tree()
                .ok()?
                .get_path(&self.root.join(path))
                .ok()
                .map(|entry| entry.id())
        };
        state.iter().all(|document| {
            let here = blob(a, &document.path);
            here.is_some() && here == blob(b, &document.path)
        })
    }

    /// The model files of the base commit (none on an unborn branch).
    pub fn models(&self) -> Result<SourceFiles, WritebackError> {
        self.models_at(self.base())
    }

    fn models_at(&self, base: Option<Oid>) -> Result<SourceFiles, WritebackError> {
        let Some(base) = base else {
            return Ok(SourceFiles::from_files(Vec::new()));
        };
        let tree = self.repo.find_commit(base)?.tree()?;
        if !self.root.as_os_str().is_empty() && tree.get_path(&self.root).is_err() {
            return Ok(SourceFiles::from_files(Vec::new()));
        }
        let files = read_tree(&self.repo, base, Some(&self.root))?;
        if let Some((path, too_large)) = files
            .iter()
            .find_map(|(_, f)| Some((f.path.clone(), f.too_large?)))
        {
            return Err(WritebackError::FileTooLarge { path, too_large });
        }
        Ok(files)
    }

    /// Plans with `plan` on the base's models, commits what changed, and with `push`
    /// pushes, planning again on the new tip when the remote moved.
    pub fn sync<T: Change, E: From<WritebackError>>(
        &mut self,
        plan: impl Fn(&SourceFiles) -> Result<T, E>,
        author: &Author,
        push: bool,
    ) -> Result<Synced<T>, E> {
        let mut retries = Retries::new(Backoff::request(), 8);
        loop {
            let base = self.base();
            let outcome = plan(&self.models_at(base)?)?;
            let commit = if outcome.is_empty() {
                None
            } else {
                Some(self.commit(base, &outcome, author)?)
            };
            let commit_text = commit.map(|c| c.to_string());
            // Only a clone pushes, and only what the remote lacks.
            let url = match &self.place {
                Place::Clone { url } if push && self.needs_push() => url.clone(),
                _ => {
                    return Ok(Synced {
                        commit: commit_text,
                        outcome,
                        pushed: false,
                    });
                }
            };
            match self.push(&url)? {
                None => {
                    return Ok(Synced {
                        commit: commit_text,
                        outcome,
                        pushed: true,
                    });
                }
                Some(_) if self.proposal.is_some() && !self.replaces_proposal() => {
                    // A proposal's branch is new: the remote has one by that name.
                    let branch = self.target_branch().to_string();
                    if let Ok(mut local) = self.repo.find_reference(&self.local_ref()) {
                        local.delete().map_err(WritebackError::from)?;
                    }
                    return Err(WritebackError::BranchExists { branch }.into());
                }
                Some(reason) if retries.left() => {
                    tracing::info!(%url, branch = %self.branch, %reason, attempt = retries.attempt(), "push rejected; fetching and planning again");
                    retries.again_blocking();
                    fetch(&self.repo, &url, &self.credentials).map_err(WritebackError::from)?;
                }
                Some(reason) => {
                    return Err(WritebackError::PushRejected {
                        url,
                        attempts: retries.attempt(),
                        reason,
                    }
                    .into());
                }
            }
        }
    }

    /// Writes a commit object (signed, with a signing key), moving no branch.
    fn write_commit(
        &self,
        signature: &Signature<'_>,
        message: &str,
        tree: &git2::Tree<'_>,
        parents: &[&git2::Commit<'_>],
    ) -> Result<Oid, WritebackError> {
        let repo = &self.repo;
        let Some(key) = &self.signing_key else {
            return Ok(repo.commit(None, signature, signature, message, tree, parents)?);
        };
        let buffer = repo.commit_create_buffer(signature, signature, message, tree, parents)?;
        let signed = key.sign(GIT_NAMESPACE, &buffer)?;
        let text = std::str::from_utf8(&buffer).map_err(|_| {
            git2::Error::from_str("a commit tether made is not UTF-8 text; it is not signed")
        })?;
        Ok(repo.commit_signed(text, &signed, None)?)
    }

    /// A commit on `base` with the change's files; moves the branch to it, unless the
    /// branch moved meanwhile (then git2 refuses and nothing changes).
    fn commit(
        &self,
        base: Option<Oid>,
        change: &impl Change,
        author: &Author,
    ) -> Result<Oid, WritebackError> {
        let paths: Vec<PathBuf> = change
            .writes()
            .keys()
            .chain(change.removes())
            .map(|p| self.root.join(p))
            .collect();
        self.ensure_committed(&paths)?;
        let repo = &self.repo;
        let mut index = Index::new()?;
        let parent = match base {
            Some(base) => {
                let commit = repo.find_commit(base)?;
                index.read_tree(&commit.tree()?)?;
                Some(commit)
            }
            None => None,
        };
        for (path, text) in change.writes() {
            let blob = repo.blob(text.as_bytes())?;
            index.add(&file_entry(&self.root.join(path), blob, text.len()))?;
        }
        for path in change.removes() {
            index.remove_path(&self.root.join(path))?;
        }
        let tree = repo.find_tree(index.write_tree_to(repo)?)?;
        let message = change.message();
        if self.replaces_proposal()
            && let Some(tip) = self.proposal_repeated(base, tree.id())?
        {
            return Ok(tip);
        }
        self.land(base, parent.as_ref(), &tree, &message, author, &paths)
    }

    /// A commit of `tree` on `parent` (the commit `base`), signed when there is a
    /// signing key; moves the branch (or the proposal's) to it, unless the branch moved
    /// meanwhile (then git2 refuses and nothing changes); checks out `paths`.
    fn land(
        &self,
        base: Option<Oid>,
        parent: Option<&git2::Commit<'_>>,
        tree: &git2::Tree<'_>,
        message: &str,
        author: &Author,
        paths: &[PathBuf],
    ) -> Result<Oid, WritebackError> {
        let repo = &self.repo;
        let signature = Signature::now(&author.name, &author.email)?;
        let parents: Vec<&git2::Commit> = parent.into_iter().collect();
        let commit = self.write_commit(&signature, message, tree, &parents)?;
        let reflog = message.lines().next().unwrap_or("tether");
        if let Some(proposal) = &self.proposal {
            return match repo.reference(&self.local_ref(), commit, proposal.replaced, reflog) {
                Err(e) if e.code() == ErrorCode::Exists => Err(WritebackError::BranchExists {
                    branch: proposal.branch.clone(),
                }),
                Err(e) => Err(e.into()),
                Ok(_) => Ok(commit),
            };
        }
        let local_tip = self.tip(&self.local_ref());
        match local_tip {
            // The compare-and-swap: fails when someone moved the branch since `base`.
            // A clone's local branch is tether's own: an unpushed commit that the
            // remote overtook is replaced by this one, planned on the remote's tip.
            Some(current) if Some(current) == base || matches!(self.place, Place::Clone { .. }) => {
                repo.reference_matching(&self.local_ref(), commit, true, current, reflog)?;
            }
            Some(_) => {
                return Err(git2::Error::new(
                    ErrorCode::Modified,
                    git2::ErrorClass::Reference,
                    format!("branch {} moved while tether committed", self.branch),
                )
                .into());
            }
            None => {
                repo.reference(&self.local_ref(), commit, false, reflog)?;
            }
        }
        self.check_out(paths)?;
        Ok(commit)
    }

    /// The branch's first-parent history from its base, newest first, at most `depth`
    /// commits: what a revert's decisions read.
    pub(crate) fn history(&self, depth: usize) -> Result<Vec<CommitFacts>, WritebackError> {
        let Some(base) = self.base() else {
            return Ok(Vec::new());
        };
        let mut commit = self.repo.find_commit(base)?;
        let mut history = vec![facts_of(&commit)];
        while history.len() < depth {
            let Ok(parent) = commit.parent(0) else {
                break;
            };
            history.push(facts_of(&parent));
            commit = parent;
        }
        Ok(history)
    }

    /// Commits, on the branch's base, the tree of its first parent (Git's revert of
    /// the base commit) with `message`. Returns the commit, or `None` when the base
    /// has no parent.
    pub(crate) fn commit_parent_tree(
        &self,
        message: &str,
        author: &Author,
    ) -> Result<Option<Oid>, WritebackError> {
        let Some(base) = self.base() else {
            return Ok(None);
        };
        let head = self.repo.find_commit(base)?;
        let Ok(parent) = head.parent(0) else {
            return Ok(None);
        };
        let tree = parent.tree()?;
        let paths = self.changed_paths(&head.tree()?, &tree)?;
        self.ensure_committed(&paths)?;
        self.land(Some(base), Some(&head), &tree, message, author, &paths)
            .map(Some)
    }

    /// The paths two trees hold differently.
    fn changed_paths(
        &self,
        from: &git2::Tree<'_>,
        to: &git2::Tree<'_>,
    ) -> Result<Vec<PathBuf>, WritebackError> {
        let diff = self.repo.diff_tree_to_tree(Some(from), Some(to), None)?;
        Ok(diff
            .deltas()
            .flat_map(|d| [d.old_file().path(), d.new_file().path()])
            .flatten()
            .map(Path::to_path_buf)
            .collect())
    }

    /// Pushes what the branch holds that the remote lacks (a clone's); `false` when
    /// the remote moved meanwhile and refused it: the remote's branch is fetched
    /// again, the local commit left unpushed (the next commit replaces it).
    pub(crate) fn push_unless_moved(&self) -> Result<bool, WritebackError> {
        let url = match &self.place {
            Place::Clone { url } if self.needs_push() => url.clone(),
            _ => return Ok(true),
        };
        match self.push(&url)? {
            None => Ok(true),
            Some(reason) => {
                tracing::info!(%url, branch = %self.branch, %reason, "push rejected: the branch moved");
                fetch(&self.repo, &url, &self.credentials)?;
                Ok(false)
            }
        }
    }

    /// The proposal's tip (the remote's, else the local one) when it is already the
    /// commit of `tree` on `base`: the same proposal made again.
    fn proposal_repeated(
        &self,
        base: Option<Oid>,
        tree: Oid,
    ) -> Result<Option<Oid>, WritebackError> {
        let Some(tip) = self
            .tip(&self.remote_ref())
            .or_else(|| self.tip(&self.local_ref()))
        else {
            return Ok(None);
        };
        let commit = self.repo.find_commit(tip)?;
        if commit.parent_id(0).ok() != base || commit.tree_id() != tree {
            return Ok(None);
        }
        // The local branch follows, so that nothing is pushed.
        self.repo
            .reference(&self.local_ref(), tip, true, "tether: proposal unchanged")?;
        Ok(Some(tip))
    }

    /// Refuses to change a file of a checked-out branch that the working tree or the
    /// index holds otherwise than committed: the user's edit would be lost.
    fn ensure_committed(&self, paths: &[PathBuf]) -> Result<(), WritebackError> {
        if !self.checked_out() {
            return Ok(());
        }
        for path in paths {
            match self.repo.status_file(path) {
                Ok(status) if status.is_empty() || status == git2::Status::IGNORED => {}
                Ok(_) => {
                    let workdir = self.repo.workdir().unwrap_or(Path::new(""));
                    return Err(WritebackError::Uncommitted {
                        path: workdir.join(path),
                    });
                }
                // Not in the working tree nor the index: a new file.
                Err(e) if e.code() == ErrorCode::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn checked_out(&self) -> bool {
        self.proposal.is_none() && matches!(self.place, Place::Local { checked_out: true })
    }

    /// Makes a checked-out `discovered/` match the branch (files and index), leaving
    /// every other path of the working tree alone. Idempotent, so it also repairs a
    /// process killed between its commit and this step.
    pub(crate) fn update_working_tree(&self) -> Result<(), WritebackError> {
        self.check_out(&[self.root.join(DISCOVERED_DIR)])
    }

    /// Makes `paths` of a checked-out branch match its tip (files and index).
    fn check_out(&self, paths: &[PathBuf]) -> Result<(), WritebackError> {
        if !self.checked_out() || paths.is_empty() {
            return Ok(());
        }
        let mut checkout = CheckoutBuilder::new();
        checkout.force().remove_untracked(false);
        for path in paths {
            checkout.path(path);
        }
        self.repo.checkout_head(Some(&mut checkout))?;
        Ok(())
    }

    /// Pushes the branch without force; `Some(reason)` when the remote refused it
    /// because it moved.
    fn push(&self, url: &str) -> Result<Option<String>, WritebackError> {
        let mut rejection: Option<String> = None;
        let result = {
            let mut callbacks = self.credentials.callbacks();
            callbacks.push_update_reference(|_reference, status| {
                if let Some(status) = status {
                    rejection = Some(status.to_string());
                }
                Ok(())
            });
            let mut options = PushOptions::new();
            options.remote_callbacks(callbacks);
            let mut remote = self.repo.remote_anonymous(url)?;
            // A replaced proposal is tether's own branch: forced, nothing else is.
            let force = if self.replaces_proposal() { "+" } else { "" };
            let refspec = format!("{force}{0}:{0}", self.local_ref());
            remote.push(&[refspec.as_str()], Some(&mut options))
        };
        match result {
            Err(e) if e.code() == ErrorCode::NotFastForward => return Ok(Some(e.to_string())),
            Err(source) => {
                return Err(WritebackError::Push {
                    url: url.to_string(),
                    source,
                });
            }
            Ok(()) => {}
        }
        if rejection.is_some() {
            return Ok(rejection);
        }
        // The remote has the commit now: record it as the remote's tip.
        if let Some(tip) = self.tip(&self.local_ref()) {
            self.repo
                .reference(&self.remote_ref(), tip, true, "tether: pushed")?;
        }
        Ok(None)
    }

    /// Whether the remote lacks what the local branch holds: commits ahead of it, or a
    /// replaced proposal that differs from it.
    pub(crate) fn needs_push(&self) -> bool {
        if self.replaces_proposal() {
            return self.tip(&self.local_ref()).is_some()
                && self.tip(&self.local_ref()) != self.tip(&self.remote_ref());
        }
        self.ahead_of_remote()
    }

    /// Whether the local branch has commits the remote's branch lacks.
    fn ahead_of_remote(&self) -> bool {
        match (self.tip(&self.local_ref()), self.tip(&self.remote_ref())) {
            (Some(local), Some(remote)) => {
                local != remote
                    && self
                        .repo
                        .graph_descendant_of(local, remote)
                        .unwrap_or(false)
            }
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// A commit as a revert's decisions read it: its id, first line and trailers.
fn facts_of(commit: &git2::Commit<'_>) -> CommitFacts {
    let message = commit.message().unwrap_or_default();
    CommitFacts {
        id: commit.id().to_string(),
        summary: commit
            .summary()
            .ok()
            .flatten()
            .unwrap_or_default()
            .to_string(),
        trailers: git2::message_trailers_strs(message)
            .map(|t| {
                t.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// An index entry for a regular file with `blob`'s content at `path`.
fn file_entry(path: &Path, blob: Oid, size: usize) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode: 0o100644,
        uid: 0,
        gid: 0,
        file_size: u32::try_from(size).unwrap_or(u32::MAX),
        id: blob,
        flags: 0,
        flags_extended: 0,
        path: path.to_string_lossy().replace('\\', "/").into_bytes(),
    }
}
