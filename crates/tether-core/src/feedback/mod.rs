//! Feedback where people look (pure): the commit status each (cluster, Source) gives a
//! commit ([`status`]), the comment a pull request gets with the plan of its head, and
//! the notices a Source's passes make ([`notice`]). The engine delivers them
//! (`tether_engine::feedback`); what is said, and whether it is said at all, is decided
//! here.

pub mod notice;
pub mod status;

use serde::{Deserialize, Serialize};

/// A commit status's state, as GitHub names them (GitLab's `running` and `canceled`
/// are not used; its `pending`, `success` and `failed` map onto these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitState {
    Pending,
    Success,
    Failure,
    /// The commit was not carried to an end: superseded before it was ready.
    Error,
}

impl CommitState {
    pub fn name(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failure",
            CommitState::Error => "error",
        }
    }

    /// A final state is never followed by another for the same commit and context.
    pub fn is_final(self) -> bool {
        self != CommitState::Pending
    }
}

/// One status of one commit, under one context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitStatus {
    /// The full commit id.
    pub commit: String,
    /// `tether/<cluster>/<namespace>/<source>`, or `tether/diff/…` for a pull
    /// request's plan: one per (cluster, Source), so that clusters never overwrite
    /// each other.
    pub context: String,
    pub state: CommitState,
    /// At most [`status::DESCRIPTION_LIMIT`] characters (GitHub's limit).
    pub description: String,
    /// The Source's page, when the daemon serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
}

/// The one comment tether keeps on a pull (merge) request for a (cluster, Source),
/// edited in place on each push: the marker, an HTML comment at its start, finds it
/// again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequestComment {
    /// The pull request's number (GitHub), or the merge request's iid (GitLab).
    pub number: u64,
    /// `<!-- tether:diff:<cluster>/<namespace>/<source> -->`: a comment whose body
    /// starts with it is tether's.
    pub marker: String,
    /// The whole body, the marker first.
    pub body: String,
}

impl PullRequestComment {
    /// The comment for the plan `report` (Markdown) of `context`'s (cluster, Source).
    pub fn new(number: u64, cluster: &str, source: &str, report: &str) -> Self {
        let marker = format!("<!-- tether:diff:{cluster}/{source} -->");
        let body = format!("{marker}\n{report}");
        PullRequestComment {
            number,
            marker,
            body,
        }
    }
}

/// A repository's URL (https, ssh or scp-like `git@host:org/repo`) as `host/path`:
/// no scheme, user, trailing slash or `.git`, so that every spelling of one repository
/// is one address.
pub fn address(url: &str) -> String {
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        None => url.replacen(':', "/", 1),
    };
    let rest = rest.rsplit_once('@').map_or(rest.as_str(), |(_, r)| r);
    let rest = rest.trim_end_matches('/');
    rest.strip_suffix(".git").unwrap_or(rest).to_string()
}

/// Which API a repository is reached through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GitHost {
    #[serde(rename = "github")]
    GitHub,
    #[serde(rename = "gitlab")]
    GitLab,
}

impl GitHost {
    pub fn name(self) -> &'static str {
        match self {
            GitHost::GitHub => "github",
            GitHost::GitLab => "gitlab",
        }
    }
}

/// A repository on a Git host, as its API names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostedRepository {
    pub host: GitHost,
    /// The API's base URL, without a trailing slash: `https://api.github.com`,
    /// `https://gitlab.example.com/api/v4`, or a GitHub Enterprise's
    /// `https://HOST/api/v3`.
    pub api: String,
    /// `owner/repo` on GitHub; the project's full path (`group/sub/project`) on
    /// GitLab.
    pub path: String,
}

/// Why a repository's URL names no repository on a Git host.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostedRepositoryError {
    #[error(
        "cannot tell which Git host serves {url}: set the provider (github or gitlab) and its API URL"
    )]
    UnknownHost { url: String },
    #[error(
        "{url} names no repository (expected HOST/OWNER/REPOSITORY); name it in spec.feedback.repository"
    )]
    NoPath { url: String },
}

impl HostedRepository {
    /// The repository a clone URL (https, ssh or scp-like) names, or `path` on its
    /// host when given (the URL of a mirror). `host` and `api` are taken from the
    /// Source when given; else github.com and gitlab.com are known by name, and any
    /// other host needs them.
    pub fn from_url(
        url: &str,
        host: Option<GitHost>,
        api: Option<&str>,
        path: Option<&str>,
    ) -> Result<Self, HostedRepositoryError> {
        let address = address(url);
        let (server, path) = match (address.split_once('/'), path) {
            (Some((server, _)), Some(path)) => (server, path.trim_matches('/')),
            (Some((server, path)), None) if path.contains('/') => (server, path),
            _ => {
                return Err(HostedRepositoryError::NoPath {
                    url: url.to_string(),
                });
            }
        };
        let server = server.to_ascii_lowercase();
        let server_name = server.split(':').next().unwrap_or_default();
        let host = match (host, server_name) {
            (Some(host), _) => host,
            (None, "github.com") => GitHost::GitHub,
            (None, "gitlab.com") => GitHost::GitLab,
            (None, _) => {
                return Err(HostedRepositoryError::UnknownHost {
                    url: url.to_string(),
                });
            }
        };
        let api = match (api, host) {
            (Some(api), _) => api.trim_end_matches('/').to_string(),
            (None, GitHost::GitHub) if server_name == "github.com" => {
                "https://api.github.com".to_string()
            }
            (None, GitHost::GitHub) => format!("https://{server_name}/api/v3"),
            (None, GitHost::GitLab) => format!("https://{server_name}/api/v4"),
        };
        Ok(HostedRepository {
            host,
            api,
            path: path.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_url_names_its_repository_on_its_host() {
        let github = HostedRepository::from_url("git@github.com:team/models.git", None, None, None);
        assert_eq!(
            github,
            Ok(HostedRepository {
                host: GitHost::GitHub,
                api: "https://api.github.com".into(),
                path: "team/models".into()
            })
        );
        let gitlab =
            HostedRepository::from_url("https://gitlab.com/group/sub/models.git", None, None, None)
                .unwrap();
        assert_eq!(
            (gitlab.host, gitlab.api.as_str(), gitlab.path.as_str()),
            (
                GitHost::GitLab,
                "https://gitlab.com/api/v4",
                "group/sub/models"
            )
        );
        let own = HostedRepository::from_url(
            "ssh://git@git.example.com:2222/team/models",
            Some(GitHost::GitLab),
            None,
            None,
        )
        .unwrap();
        assert_eq!(own.api, "https://git.example.com/api/v4");
        let local = HostedRepository::from_url(
            "git://127.0.0.1:9418/remote.git",
            Some(GitHost::GitHub),
            Some("https://127.0.0.1:8443/api/v3/"),
            Some("team/models"),
        )
        .unwrap();
        assert_eq!(
            (local.api.as_str(), local.path.as_str()),
            ("https://127.0.0.1:8443/api/v3", "team/models")
        );
        assert!(matches!(
            HostedRepository::from_url("https://git.example.com/team/models", None, None, None),
            Err(HostedRepositoryError::UnknownHost { .. })
        ));
        assert!(matches!(
            HostedRepository::from_url("https://github.com/team", None, None, None),
            Err(HostedRepositoryError::NoPath { .. })
        ));
    }
}
