//! `tether diff --post`: the report as one comment on a pull (merge) request, edited on
//! each run, and a commit status on the commit planned, from a CI job. Where to post
//! comes from flags, else from the CI's own environment (GitHub Actions, GitLab CI);
//! the token only from the environment.

use std::time::Duration;

use miette::{IntoDiagnostic, miette};
use zeroize::Zeroizing;

use super::flags::{PostFlags, PostProvider};
use tether_core::feedback::{
    CommitState, CommitStatus, GitHost, HostedRepository, PullRequestComment,
};
use tether_engine::feedback::githost::GitHostClient;

/// The variable holding the token `--post` posts with (before GITHUB_TOKEN and
/// GITLAB_TOKEN).
pub const TOKEN_VARIABLE: &str = "TETHER_POST_TOKEN";

/// How long one request to the host may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a report is posted.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    pub repository: HostedRepository,
    pub number: u64,
}

/// Where `flags` (else the CI's environment, read through `env`) say to post.
pub fn target(flags: &PostFlags, env: impl Fn(&str) -> Option<String>) -> Result<Target, String> {
    let gitlab_ci = env("GITLAB_CI").is_some();
    let host = match flags.post_provider {
        Some(PostProvider::Gitlab) => GitHost::GitLab,
        Some(PostProvider::Github) => GitHost::GitHub,
        None if gitlab_ci => GitHost::GitLab,
        None => GitHost::GitHub,
    };
    let (repository_variable, api_variable, default_api) = match host {
        GitHost::GitHub => (
            "GITHUB_REPOSITORY",
            "GITHUB_API_URL",
            "https://api.github.com",
        ),
        GitHost::GitLab => (
            "CI_PROJECT_PATH",
            "CI_API_V4_URL",
            "https://gitlab.com/api/v4",
        ),
    };
    let path = flags
        .post_repository
        .clone()
        .or_else(|| env(repository_variable))
        .ok_or_else(|| format!("--post needs --post-repository (or {repository_variable})"))?;
    let api = flags
        .post_api_url
        .clone()
        .or_else(|| env(api_variable))
        .unwrap_or_else(|| default_api.to_string());
    let number = match flags.pull_request {
        Some(number) => Some(number),
        None => match host {
            // refs/pull/N/merge: the ref a pull request's workflow runs on.
            GitHost::GitHub => env("GITHUB_REF").and_then(|r| {
                r.strip_prefix("refs/pull/")?
                    .split('/')
                    .next()?
                    .parse()
                    .ok()
            }),
            GitHost::GitLab => env("CI_MERGE_REQUEST_IID").and_then(|n| n.parse().ok()),
        },
    }
    .ok_or("--post needs --pull-request (or the CI's pull request: GITHUB_REF refs/pull/N/merge, CI_MERGE_REQUEST_IID)")?;
    Ok(Target {
        repository: HostedRepository {
            host,
            api: api.trim_end_matches('/').to_string(),
            path,
        },
        number,
    })
}

/// Posts `report` (Markdown) on the pull request, and the diff's status on `commit`:
/// failure when an object would be refused (`errors`).
pub async fn post(
    flags: &PostFlags,
    report: &str,
    errors: bool,
    commit: Option<String>,
) -> miette::Result<()> {
    let target = target(flags, |name| std::env::var(name).ok()).map_err(|e| miette!("{e}"))?;
    let token = [TOKEN_VARIABLE, "GITHUB_TOKEN", "GITLAB_TOKEN"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|t| !t.is_empty()))
        .map(Zeroizing::new)
        .ok_or_else(|| {
            miette!("--post needs a token in TETHER_POST_TOKEN (or GITHUB_TOKEN, GITLAB_TOKEN)")
        })?;
    let roots = match &flags.post_ca_file {
        Some(file) => Some(std::fs::read(file).into_diagnostic()?),
        None => None,
    };
    let host = GitHostClient::new(
        target.repository.clone(),
        token,
        roots.as_deref(),
        REQUEST_TIMEOUT,
    )
    .map_err(|e| miette!("--post: {e}"))?;
    let comment = PullRequestComment::new(
        target.number,
        &flags.post_name,
        &target.repository.path,
        report,
    );
    host.upsert_comment(&comment).await.map_err(|e| {
        miette!(
            "cannot post the report on pull request {}: {e}",
            target.number
        )
    })?;
    eprintln!("posted the report on pull request {}", target.number);
    let Some(commit) = commit else {
        eprintln!("no commit was planned (a directory outside Git): no status is set");
        return Ok(());
    };
    let (state, description) = match errors {
        true => (CommitState::Failure, "some objects would be refused"),
        false => (CommitState::Success, "planned"),
    };
    let context = format!("tether/diff/{}", flags.post_name);
    host.set_status(&CommitStatus::new(&commit, &context, state, description))
        .await
        .map_err(|e| miette!("cannot set the commit status of {commit}: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn flags() -> PostFlags {
        PostFlags {
            post: true,
            post_name: "ci".into(),
            ..PostFlags::default()
        }
    }

    #[test]
    fn the_target_comes_from_flags_else_from_the_ci() {
        let actions = HashMap::from([
            ("GITHUB_REPOSITORY", "team/models"),
            ("GITHUB_API_URL", "https://ghe.example.org/api/v3"),
            ("GITHUB_REF", "refs/pull/42/merge"),
        ]);
        let found = target(&flags(), |n| actions.get(n).map(|v| v.to_string())).unwrap();
        assert_eq!(found.number, 42);
        assert_eq!(found.repository.path, "team/models");
        assert_eq!(found.repository.api, "https://ghe.example.org/api/v3");
        let gitlab = HashMap::from([
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_PATH", "group/sub/models"),
            ("CI_API_V4_URL", "https://gitlab.example.org/api/v4"),
            ("CI_MERGE_REQUEST_IID", "7"),
        ]);
        let found = target(&flags(), |n| gitlab.get(n).map(|v| v.to_string())).unwrap();
        assert_eq!((found.repository.host, found.number), (GitHost::GitLab, 7));
        let given = PostFlags {
            pull_request: Some(3),
            post_repository: Some("a/b".into()),
            ..flags()
        };
        let found = target(&given, |n| actions.get(n).map(|v| v.to_string())).unwrap();
        assert_eq!((found.number, found.repository.path.as_str()), (3, "a/b"));
        // A push's workflow has no pull request: said, not guessed.
        let push = HashMap::from([
            ("GITHUB_REPOSITORY", "team/models"),
            ("GITHUB_REF", "refs/heads/main"),
        ]);
        let error = target(&flags(), |n| push.get(n).map(|v| v.to_string())).unwrap_err();
        assert!(error.contains("--pull-request"), "{error}");
    }
}
