//! The Git hosts' REST APIs: commit statuses, the one pull-request comment a
//! (cluster, Source) keeps up to date, and GitHub's check runs. GitHub's calls are
//! those of its OpenAPI description (api.github.com, or a GitHub Enterprise's
//! `https://HOST/api/v3`), GitLab's those of its API v4 documentation; the test kit's
//! fake host checks every request against them.
//!
//! The token travels only in a header marked sensitive; errors name the repository,
//! never the token or a URL (reqwest's errors are stripped of theirs).

use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tether_core::error_chain;
use tether_core::feedback::{
    CommitState, CommitStatus, GitHost, HostedRepository, PullRequestComment,
};
use zeroize::Zeroizing;

use super::delivery::{DeliveryError, https_client};

/// GitHub refuses a longer comment body.
pub const GITHUB_COMMENT_LIMIT: usize = 65_536;
/// GitLab refuses a longer note.
pub const GITLAB_NOTE_LIMIT: usize = 1_000_000;
/// GitHub refuses a longer check-run summary.
const CHECK_RUN_SUMMARY_LIMIT: usize = 65_535;
/// The most items a page of either host holds.
const PER_PAGE: usize = 100;
/// A pull request with more comments than this many pages is not searched further:
/// a host that always says "next" must not keep tether busy forever.
const MAX_PAGES: usize = 100;

/// What the percent-encoding of a path segment leaves as is (RFC 3986's unreserved
/// characters): GitLab's project path is one segment, its slashes `%2F`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What [`GitHostClient::upsert_comment`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upserted {
    Created,
    Updated,
    /// The comment already said this: no request was made.
    Unchanged,
}

impl DeliveryError {
    /// A 403: the token may not do this (GitHub's check runs with a personal access
    /// token, which need a GitHub App); retrying will not help.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, DeliveryError::Refused { status: 403, .. })
    }
}

/// A client of one repository's host API.
pub struct GitHostClient {
    repository: HostedRepository,
    http: reqwest::Client,
    /// `GitHub owner/repo`: what errors name.
    receiver: String,
}

impl GitHostClient {
    /// `extra_roots_pem`: CA certificates trusted beside the system's (a GitHub
    /// Enterprise or GitLab with a private CA).
    pub fn new(
        repository: HostedRepository,
        token: Zeroizing<String>,
        extra_roots_pem: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Self, DeliveryError> {
        let receiver = format!(
            "{} {}",
            match repository.host {
                GitHost::GitHub => "GitHub",
                GitHost::GitLab => "GitLab",
            },
            repository.path
        );
        let http = https_client(
            &receiver,
            extra_roots_pem,
            timeout,
            headers(repository.host, &token)?,
        )?;
        Ok(GitHostClient {
            repository,
            http,
            receiver,
        })
    }

    /// Sets `status` on its commit (GitLab says `failed` for failure and error).
    pub async fn set_status(&self, status: &CommitStatus) -> Result<(), DeliveryError> {
        let commit = encode(&status.commit);
        let url = format!("{}/statuses/{commit}", self.repo_url());
        let mut body = match self.repository.host {
            GitHost::GitHub => json!({"state": status.state.name(), "context": status.context}),
            GitHost::GitLab => {
                json!({"state": gitlab_state(status.state), "name": status.context})
            }
        };
        body["description"] = json!(status.description);
        if let Some(target) = &status.target_url {
            body["target_url"] = json!(target);
        }
        self.send(Method::POST, &url, Some(&body)).await?;
        Ok(())
    }

    /// Keeps one comment per marker on the pull request: edits the comment whose body
    /// starts with `comment.marker` (all pages are searched), or adds one. A body
    /// longer than the host takes is cut, and says so at its end.
    pub async fn upsert_comment(
        &self,
        comment: &PullRequestComment,
    ) -> Result<Upserted, DeliveryError> {
        let body = fit(&comment.body, self.comment_limit());
        let comments = self.comments_url(comment.number);
        let existing = self.find_comment(&comments, &comment.marker).await?;
        match existing {
            Some((_, said)) if said == body => Ok(Upserted::Unchanged),
            Some((id, _)) => {
                let (method, url) = match self.repository.host {
                    GitHost::GitHub => (
                        Method::PATCH,
                        format!("{}/issues/comments/{id}", self.repo_url()),
                    ),
                    GitHost::GitLab => (Method::PUT, format!("{comments}/{id}")),
                };
                self.send(method, &url, Some(&json!({"body": body})))
                    .await?;
                Ok(Upserted::Updated)
            }
            None => {
                self.send(Method::POST, &comments, Some(&json!({"body": body})))
                    .await?;
                Ok(Upserted::Created)
            }
        }
    }

    /// A completed GitHub check run on `commit` with the plan as its summary
    /// (`Pending`: in progress). With a personal access token GitHub answers 403
    /// ([`DeliveryError::is_forbidden`]): check runs need a GitHub App.
    pub async fn create_check_run(
        &self,
        commit: &str,
        name: &str,
        conclusion: CommitState,
        summary_markdown: &str,
    ) -> Result<(), DeliveryError> {
        if self.repository.host != GitHost::GitHub {
            return Err(DeliveryError::Misconfigured(format!(
                "{} has no check runs (a GitHub feature)",
                self.receiver
            )));
        }
        let mut body = json!({
            "name": name,
            "head_sha": commit,
            "output": {"title": name, "summary": fit(summary_markdown, CHECK_RUN_SUMMARY_LIMIT)},
        });
        match conclusion {
            CommitState::Pending => body["status"] = json!("in_progress"),
            // A superseded revision was not judged: cancelled, not failed.
            CommitState::Error => body["conclusion"] = json!("cancelled"),
            state => body["conclusion"] = json!(state.name()),
        }
        let url = format!("{}/check-runs", self.repo_url());
        self.send(Method::POST, &url, Some(&body)).await?;
        Ok(())
    }

    /// The first comment starting with `marker` in the list at `url`, as (id, body).
    async fn find_comment(
        &self,
        url: &str,
        marker: &str,
    ) -> Result<Option<(u64, String)>, DeliveryError> {
        let order = match self.repository.host {
            GitHost::GitHub => "",
            // GitLab lists the newest first unless asked.
            GitHost::GitLab => "&sort=asc&order_by=created_at",
        };
        for page in 1..=MAX_PAGES {
            let response = self
                .send(
                    Method::GET,
                    &format!("{url}?per_page={PER_PAGE}&page={page}{order}"),
                    None,
                )
                .await?;
            let more = has_next_page(response.headers());
            let items: Vec<Value> = response.json().await.map_err(|e| self.unreadable(&e))?;
            let found = items.iter().find_map(|item| {
                let body = item["body"].as_str()?;
                let id = item["id"].as_u64()?;
                body.starts_with(marker).then(|| (id, body.to_string()))
            });
            if found.is_some() || !more || items.is_empty() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Sends a request; a non-success answer is [`DeliveryError::Refused`] with the
    /// host's message.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<reqwest::Response, DeliveryError> {
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| DeliveryError::Unreachable {
                receiver: self.receiver.clone(),
                message: error_chain(&e.without_url()),
            })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let message = match response.json::<Value>().await {
            Ok(answer) => host_message(&answer, status),
            Err(_) => status.canonical_reason().unwrap_or_default().to_string(),
        };
        Err(DeliveryError::Refused {
            receiver: self.receiver.clone(),
            status: status.as_u16(),
            message,
        })
    }

    fn unreadable(&self, error: &reqwest::Error) -> DeliveryError {
        DeliveryError::Unreachable {
            receiver: self.receiver.clone(),
            message: format!("unreadable answer: {}", error_chain(error)),
        }
    }

    /// The repository's (GitHub) or project's (GitLab) API URL.
    fn repo_url(&self) -> String {
        let api = &self.repository.api;
        match self.repository.host {
            GitHost::GitHub => {
                let path: Vec<String> = self.repository.path.split('/').map(encode).collect();
                format!("{api}/repos/{}", path.join("/"))
            }
            GitHost::GitLab => format!("{api}/projects/{}", encode(&self.repository.path)),
        }
    }

    /// The list of a pull request's comments (GitHub: its issue's) or a merge
    /// request's notes.
    fn comments_url(&self, number: u64) -> String {
        match self.repository.host {
            GitHost::GitHub => format!("{}/issues/{number}/comments", self.repo_url()),
            GitHost::GitLab => format!("{}/merge_requests/{number}/notes", self.repo_url()),
        }
    }

    fn comment_limit(&self) -> usize {
        match self.repository.host {
            GitHost::GitHub => GITHUB_COMMENT_LIMIT,
            GitHost::GitLab => GITLAB_NOTE_LIMIT,
        }
    }
}

/// The headers of every request: the API version GitHub's description is of, who
/// is calling, the token.
fn headers(host: GitHost, token: &Zeroizing<String>) -> Result<HeaderMap, DeliveryError> {
    let invalid =
        || DeliveryError::Misconfigured("the Git host token is not a valid header value".into());
    let mut headers = HeaderMap::new();
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("tether/", env!("CARGO_PKG_VERSION"))),
    );
    let (name, value) = match host {
        GitHost::GitHub => {
            headers.insert(
                ACCEPT,
                HeaderValue::from_static("application/vnd.github+json"),
            );
            headers.insert(
                HeaderName::from_static("x-github-api-version"),
                HeaderValue::from_static("2022-11-28"),
            );
            (AUTHORIZATION, format!("Bearer {}", token.as_str()))
        }
        GitHost::GitLab => {
            headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
            (
                HeaderName::from_static("private-token"),
                token.as_str().to_string(),
            )
        }
    };
    let value = Zeroizing::new(value);
    let mut value = HeaderValue::from_str(&value).map_err(|_| invalid())?;
    // Kept out of Debug output (reqwest's, ours).
    value.set_sensitive(true);
    headers.insert(name, value);
    Ok(headers)
}

fn gitlab_state(state: CommitState) -> &'static str {
    match state {
        CommitState::Pending => "pending",
        CommitState::Success => "success",
        CommitState::Failure | CommitState::Error => "failed",
    }
}

fn encode(segment: &str) -> String {
    utf8_percent_encode(segment, SEGMENT).to_string()
}

/// `text` cut to `limit` characters, its end saying it was cut.
fn fit(text: &str, limit: usize) -> String {
    const CUT: &str = "\n\n… (cut here: longer than the Git host takes; the whole plan is on tether's page or in `tether diff`)";
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let keep = limit.saturating_sub(CUT.chars().count());
    let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    format!("{}{CUT}", &text[..end])
}

/// Whether a `Link` header (GitHub's and GitLab's pagination) has a `rel="next"`.
fn has_next_page(headers: &HeaderMap) -> bool {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|link| link.contains("rel=\"next\""))
}

/// The host's own words: GitHub's and GitLab's `message` (GitLab's may be an object
/// of field errors), else the status's reason.
fn host_message(answer: &Value, status: StatusCode) -> String {
    let text = match &answer["message"] {
        Value::String(text) => text.clone(),
        Value::Null => status.canonical_reason().unwrap_or_default().to_string(),
        other => other.to_string(),
    };
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_body_is_cut_and_says_so() {
        assert_eq!(fit("short", 10), "short");
        let long = "é".repeat(GITHUB_COMMENT_LIMIT + 10);
        let cut = fit(&long, GITHUB_COMMENT_LIMIT);
        assert_eq!(cut.chars().count(), GITHUB_COMMENT_LIMIT);
        assert!(cut.ends_with("or in `tether diff`)"));
    }

    #[test]
    fn gitlab_project_paths_are_one_segment() {
        assert_eq!(encode("group/sub/models"), "group%2Fsub%2Fmodels");
        assert_eq!(encode("my-repo.v2_x"), "my-repo.v2_x");
    }
}
