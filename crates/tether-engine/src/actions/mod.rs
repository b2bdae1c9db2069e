//! Day-2 actions. Those that change the desired state (scale, restart, rollback) are
//! commits: `operation` plans the edit on the branch's models, `writeback` commits and
//! pushes it (replanned on a moved remote), and the caller applies the new revision.
//! Those that change nothing in Git (recreate a pod, restart its containers) act on
//! the cluster and leave a Kubernetes Event; `rollout` waits for a controller.

pub mod pods;
pub mod rollout;

use std::sync::Arc;

use thiserror::Error;

use crate::discovery::Destination;
use crate::repo::Repo;
use crate::writeback::{Author, Workspace, WritebackError};
use tether_core::operation::{Edit, Operation, OperationError};
use tether_core::remedy::Remedy;
use tether_core::source::SourceFiles;
use tether_sops::Keyring;

#[derive(Debug, Error)]
pub enum ActionError {
    #[error(transparent)]
    Operation(#[from] OperationError),
    #[error(transparent)]
    Writeback(#[from] WritebackError),
    #[error("Slice/{slice} has no earlier state in the branch's history to go back to")]
    NoEarlierState { slice: String },
    #[error("Slice/{slice} is not in the models at {revision}")]
    NotAtRevision { slice: String, revision: String },
    #[error("the Git work stopped: {0}")]
    Interrupted(String),
    /// An edited file is encrypted with sops, whose MAC covers the edited value too,
    /// and it could not be signed again (no key, or the file did not check before).
    #[error(
        "{path}:{line}:{column}: the file is encrypted (sops) and the edit cannot be signed again: {message}"
    )]
    Sign {
        path: String,
        line: u32,
        column: u32,
        message: String,
    },
}

impl ActionError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            ActionError::Operation(error) => error.remedy(),
            ActionError::Writeback(WritebackError::BranchExists { .. }) => {
                Some(Remedy::ChooseAnotherProposalBranch)
            }
            _ => None,
        }
    }
}

/// What to change, as the user asked for it.
#[derive(Clone, Debug)]
pub enum Request {
    Now(Operation),
    /// The slice as it was at `to`, or before its latest change.
    Rollback {
        slice: String,
        to: Option<String>,
    },
}

/// Where and as whom the commit is made.
#[derive(Debug)]
pub struct CommitTo {
    pub destination: Destination,
    /// The branch (default: the checked-out one; `main` for a remote).
    pub branch: Option<String>,
    /// A new branch for a pull request instead of the branch itself.
    pub propose: Option<String>,
    /// Default: the repository's `user.name` and `user.email`, else tether.
    pub author: Option<Author>,
    /// The keys that sign an edit of a sops-encrypted file again.
    pub keys: Arc<Keyring>,
}

/// A commit made for an operation.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The commit's first line, e.g. `scale: Slice/web 3 → 4`.
    pub summary: String,
    /// None when the models already were as asked (nothing committed).
    pub commit: Option<String>,
    /// The branch the commit is on (the proposal's, with `propose`).
    pub branch: String,
    pub pushed: bool,
    pub proposed: bool,
    /// Where to read the new revision to apply it; none for a proposal.
    pub apply_from: Option<Repo>,
}

/// Plans `request` on the branch's models and commits it (pushing a clone's
/// branch). Nothing is committed when the operation is refused.
pub async fn commit(to: CommitTo, request: Request) -> Result<Committed, ActionError> {
    tokio::task::spawn_blocking(move || commit_blocking(to, request))
        .await
        .map_err(|e| ActionError::Interrupted(e.to_string()))?
}

fn commit_blocking(to: CommitTo, request: Request) -> Result<Committed, ActionError> {
    let mut workspace = to.destination.open(to.branch.as_deref())?;
    let (push, apply_from) = match &to.destination {
        Destination::Remote {
            url,
            path,
            cache,
            credentials,
        } => {
            let branch = to.propose.as_deref().unwrap_or(workspace.branch());
            let repo = Repo::Git {
                url: url.clone(),
                reference: Some(branch.to_string()),
                path: path.clone(),
                cache: cache.clone(),
                credentials: credentials.clone(),
                // The commit tether just made is applied as it made it.
                verify: None,
            };
            (true, repo)
        }
        Destination::Checkout { path, .. } => (false, local_source(path, &workspace)),
    };
    if let Some(proposal) = &to.propose {
        workspace.propose(proposal);
    }
    let author = to
        .author
        .clone()
        .or_else(|| workspace.configured_author())
        .unwrap_or_default();
    let operation = match request {
        Request::Now(operation) => operation,
        Request::Rollback { slice, to } => rollback(&workspace, &slice, to.as_deref())?,
    };
    let synced = workspace.sync(
        |files| {
            sign_encrypted(
                files,
                tether_core::operation::plan(files, &operation)?,
                &to.keys,
            )
        },
        &author,
        push,
    )?;
    Ok(Committed {
        summary: synced.outcome.summary.clone(),
        commit: synced.commit,
        branch: workspace.target_branch().to_string(),
        pushed: synced.pushed,
        proposed: to.propose.is_some(),
        apply_from: to.propose.is_none().then_some(apply_from),
    })
}

/// Signs again each edited file that is encrypted with sops: its MAC covers the plain
/// values the edit changed. Its encrypted values stay as they were.
fn sign_encrypted(
    files: &SourceFiles,
    mut edit: Edit,
    keys: &Keyring,
) -> Result<Edit, ActionError> {
    for (path, text) in &mut edit.writes {
        let Some((_, original)) = files.by_path(path) else {
            continue;
        };
        if !tether_sops::is_encrypted(&original.text) {
            continue;
        }
        *text = tether_sops::sign_edit(&original.text, text, keys, chrono::Utc::now()).map_err(
            |error| ActionError::Sign {
                path: path.clone(),
                line: error.line,
                column: error.column,
                message: match &error.hint {
                    Some(hint) => format!("{} ({hint})", error.message),
                    None => error.message.clone(),
                },
            },
        )?;
    }
    Ok(edit)
}

/// The operation that puts the slice back as it was.
fn rollback(
    workspace: &Workspace,
    slice: &str,
    to: Option<&str>,
) -> Result<Operation, ActionError> {
    match workspace.earlier_state(slice, to)? {
        Some((revision, documents)) => Ok(Operation::Restore {
            slice: slice.to_string(),
            revision,
            documents,
        }),
        None => match to {
            Some(revision) => Err(ActionError::NotAtRevision {
                slice: slice.to_string(),
                revision: revision.to_string(),
            }),
            None => {
                // Say why: an unknown slice is the likelier mistake.
                tether_core::operation::owned_slice(&workspace.models()?, slice)?;
                Err(ActionError::NoEarlierState {
                    slice: slice.to_string(),
                })
            }
        },
    }
}

/// A checked-out branch is applied from its directory (the edit is in the working
/// tree now); another branch of the checkout from Git.
fn local_source(path: &std::path::Path, workspace: &Workspace) -> Repo {
    match workspace.is_checked_out() {
        true => Repo::Directory(path.to_path_buf()),
        false => Repo::Git {
            url: workspace.repository_path().to_string_lossy().into_owned(),
            reference: Some(workspace.target_branch().to_string()),
            path: workspace.root().to_path_buf(),
            cache: std::env::temp_dir().join("tether-local-branches"),
            credentials: crate::git::Credentials::default(),
            verify: None,
        },
    }
}
