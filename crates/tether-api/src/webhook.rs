//! Webhook requests (pure): each provider's authentication, checked in constant time
//! before anything else is read, then the push it announces and whether it concerns
//! a source. GitHub signs the body (`X-Hub-Signature-256`), GitLab sends the shared
//! token (`X-Gitlab-Token`), and the generic receiver takes an HMAC-SHA256 of the body
//! (`X-Signature-256: sha256=<hex>`) with `{"repository": URL, "ref": REF}`.
//! [`judge_secret`] refuses short, placeholder and repetitive secrets: the daemon does
//! not start with one, and `tether check` fails on it.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The largest body read; a larger one is refused (413) unread.
pub const MAX_BODY: usize = 1024 * 1024;

/// The shortest webhook secret accepted: a guessable secret is no secret.
pub const MIN_SECRET: usize = 16;

/// Why a webhook secret is refused: anyone could prove it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WeakSecret {
    #[error("the webhook secret is {0} bytes long; at least {MIN_SECRET} are needed")]
    Short(usize),
    #[error("the webhook secret is a template's placeholder ({0:?}), known to anyone who read it")]
    Placeholder(String),
    #[error("the webhook secret repeats a few characters ({0} distinct); it is guessable")]
    Repetitive(usize),
}

/// Words that mark a value a template asks to replace: earlier deploy/ files shipped
/// `REPLACE-WITH-openssl-rand-hex-32`, long enough to pass the length check.
const PLACEHOLDER_WORDS: [&str; 5] = ["replace", "changeme", "change-me", "example", "placeholder"];

/// Checks a webhook secret before the daemon trusts it.
pub fn judge_secret(secret: &[u8]) -> Result<(), WeakSecret> {
    if secret.len() < MIN_SECRET {
        return Err(WeakSecret::Short(secret.len()));
    }
    let text = String::from_utf8_lossy(secret).to_ascii_lowercase();
    if PLACEHOLDER_WORDS.iter().any(|word| text.contains(word)) {
        return Err(WeakSecret::Placeholder(
            String::from_utf8_lossy(secret).into_owned(),
        ));
    }
    let distinct = secret
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if distinct < 6 {
        return Err(WeakSecret::Repetitive(distinct));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    GitHub,
    GitLab,
    Generic,
    /// A registry's Docker distribution notifications (`Authorization: Bearer`).
    Registry,
    /// An image pushed, announced by anyone who signs it (`X-Signature-256`).
    Image,
}

impl Provider {
    pub fn from_path(segment: &str) -> Option<Provider> {
        match segment {
            "github" => Some(Provider::GitHub),
            "gitlab" => Some(Provider::GitLab),
            "generic" => Some(Provider::Generic),
            "registry" => Some(Provider::Registry),
            "image" => Some(Provider::Image),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Generic => "generic",
            Provider::Registry => "registry",
            Provider::Image => "image",
        }
    }
}

/// A push: the repository's URLs as the provider names them, and the full ref.
#[derive(Debug, PartialEq, Eq)]
pub struct Push {
    pub urls: Vec<String>,
    pub reference: String,
    /// The repository's default branch, when the provider says.
    pub default_branch: Option<String>,
}

/// Why a request was not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("missing or invalid signature")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
}

/// A header's value, as the receiver reads it (case-insensitive name).
pub trait Headers {
    fn get(&self, name: &str) -> Option<&str>;
}

/// Checks the request's authentication. Nothing of the body is parsed before this.
pub fn authenticate(
    provider: Provider,
    headers: &impl Headers,
    body: &[u8],
    secret: &[u8],
) -> Result<(), Refusal> {
    match provider {
        Provider::GitLab | Provider::Registry => {
            // Docker distribution sends the headers its endpoint's configuration names.
            let token = match provider {
                Provider::GitLab => headers.get("x-gitlab-token"),
                _ => headers
                    .get("authorization")
                    .and_then(|v| v.strip_prefix("Bearer ")),
            }
            .ok_or(Refusal::Unauthorized)?;
            // Compared as digests: equal length, so neither time nor length leaks.
            let given = Sha256::digest(token.as_bytes());
            let expected = Sha256::digest(secret);
            match bool::from(given.ct_eq(&expected)) {
                true => Ok(()),
                false => Err(Refusal::Unauthorized),
            }
        }
        Provider::GitHub | Provider::Generic | Provider::Image => {
            let header = match provider {
                Provider::GitHub => "x-hub-signature-256",
                _ => "x-signature-256",
            };
            let signature = headers
                .get(header)
                .and_then(|v| v.strip_prefix("sha256="))
                .and_then(decode_hex)
                .ok_or(Refusal::Unauthorized)?;
            let mut mac =
                Hmac::<Sha256>::new_from_slice(secret).map_err(|_| Refusal::Unauthorized)?;
            mac.update(body);
            // verify_slice compares in constant time.
            mac.verify_slice(&signature)
                .map_err(|_| Refusal::Unauthorized)
        }
    }
}

/// The push an authenticated request announces; `None` for other events (a ping, an
/// issue comment), which are answered and ignored.
pub fn push(
    provider: Provider,
    headers: &impl Headers,
    body: &[u8],
) -> Result<Option<Push>, Refusal> {
    let events = ["push", "Push Hook", "Tag Push Hook"];
    let Some(value) = event_body(provider, headers, body, &events, Some("push"))? else {
        return Ok(None);
    };
    let text = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (urls, default_branch) = match provider {
        Provider::GitHub => (
            repository_urls(&value, provider, "/repository"),
            text("/repository/default_branch"),
        ),
        Provider::GitLab => (
            repository_urls(&value, provider, "/project"),
            text("/project/default_branch"),
        ),
        Provider::Generic => (text("/repository").into_iter().collect(), None),
        // An image pushed to a registry is no Git push.
        Provider::Registry | Provider::Image => return Ok(None),
    };
    let reference =
        text("/ref").ok_or_else(|| Refusal::BadRequest("the push names no ref".into()))?;
    if urls.is_empty() {
        return Err(Refusal::BadRequest("the push names no repository".into()));
    }
    Ok(Some(Push {
        urls,
        reference,
        default_branch,
    }))
}

impl Push {
    /// Does the push move what a source with `url` and `reference` (none: the
    /// default branch) reads?
    pub fn concerns(&self, url: &str, reference: Option<&str>) -> bool {
        reads(
            &self.urls,
            &self.reference,
            self.default_branch.as_deref(),
            url,
            reference,
        )
    }
}

/// Whether a change of `changed` (a full ref) in the repository named by `urls` moves
/// what a source with `url` and `reference` (none: the default branch) reads.
fn reads(
    urls: &[String],
    changed: &str,
    default_branch: Option<&str>,
    url: &str,
    reference: Option<&str>,
) -> bool {
    let repository = same_repository(url);
    if !urls.iter().any(|u| same_repository(u) == repository) {
        return false;
    }
    match reference {
        Some(name) => [
            format!("refs/heads/{name}"),
            format!("refs/tags/{name}"),
            name.to_string(),
        ]
        .iter()
        .any(|r| r == changed),
        None => match (default_branch, changed.strip_prefix("refs/heads/")) {
            (Some(default), Some(branch)) => branch == default,
            // The default branch is unknown: any branch may be it.
            (None, Some(_)) => true,
            (_, None) => false,
        },
    }
}

/// A pull (merge) request opened, reopened or given new commits: the base
/// repository's plan of its head is worth a comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    /// The base (target) repository's URLs, as the provider names them.
    pub urls: Vec<String>,
    /// The branch it would merge into.
    pub base_branch: String,
    /// The base repository's default branch, when the provider says.
    pub default_branch: Option<String>,
    /// GitHub's number, GitLab's iid.
    pub number: u64,
    pub head_commit: String,
    /// What to fetch from the base repository for the head, forks included:
    /// `refs/pull/N/head` (GitHub), `refs/merge-requests/N/head` (GitLab).
    pub head_ref: String,
    /// The head is in another repository than the base.
    pub from_fork: bool,
}

impl PullRequest {
    /// Would merging it move what a source with `url` and `reference` (none: the
    /// default branch) reads?
    pub fn concerns(&self, url: &str, reference: Option<&str>) -> bool {
        reads(
            &self.urls,
            &format!("refs/heads/{}", self.base_branch),
            self.default_branch.as_deref(),
            url,
            reference,
        )
    }
}

/// The pull request an authenticated request announces; `None` for other events and
/// actions (closed, labeled, a merge request's update without new commits).
pub fn pull_request(
    provider: Provider,
    headers: &impl Headers,
    body: &[u8],
) -> Result<Option<PullRequest>, Refusal> {
    let events = ["pull_request", "Merge Request Hook"];
    let Some(value) = event_body(provider, headers, body, &events, None)? else {
        return Ok(None);
    };
    let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str);
    let (wanted, number, base_branch, head_commit, from_fork) = match provider {
        Provider::GitHub => (
            matches!(text("/action"), Some("opened" | "synchronize" | "reopened")),
            value
                .pointer("/pull_request/number")
                .and_then(Value::as_u64),
            text("/pull_request/base/ref"),
            text("/pull_request/head/sha"),
            // A deleted fork's head repository is null: still not the base.
            value.pointer("/pull_request/head/repo/id")
                != value.pointer("/pull_request/base/repo/id"),
        ),
        _ => (
            match text("/object_attributes/action") {
                Some("open" | "reopen") => true,
                Some("update") => value.pointer("/object_attributes/oldrev").is_some(),
                _ => false,
            },
            value
                .pointer("/object_attributes/iid")
                .and_then(Value::as_u64),
            text("/object_attributes/target_branch"),
            text("/object_attributes/last_commit/id"),
            value.pointer("/object_attributes/source_project_id")
                != value.pointer("/object_attributes/target_project_id"),
        ),
    };
    if !wanted {
        return Ok(None);
    }
    let missing = |what: &str| Refusal::BadRequest(format!("the pull request names no {what}"));
    let number = number.ok_or_else(|| missing("number"))?;
    let (urls, default_branch, head_ref) = match provider {
        Provider::GitHub => (
            repository_urls(&value, provider, "/pull_request/base/repo"),
            text("/pull_request/base/repo/default_branch"),
            format!("refs/pull/{number}/head"),
        ),
        _ => (
            repository_urls(&value, provider, "/project"),
            text("/project/default_branch"),
            format!("refs/merge-requests/{number}/head"),
        ),
    };
    if urls.is_empty() {
        return Err(missing("repository"));
    }
    Ok(Some(PullRequest {
        urls,
        base_branch: base_branch
            .ok_or_else(|| missing("base branch"))?
            .to_string(),
        default_branch: default_branch.map(str::to_string),
        number,
        head_commit: head_commit
            .ok_or_else(|| missing("head commit"))?
            .to_string(),
        head_ref,
        from_fork,
    }))
}

/// The JSON body of a request announcing one of `events` (the provider's event
/// header; the generic receiver's event is `generic_event`); `None` for another event.
fn event_body(
    provider: Provider,
    headers: &impl Headers,
    body: &[u8],
    events: &[&str],
    generic_event: Option<&str>,
) -> Result<Option<Value>, Refusal> {
    let event = match provider {
        Provider::GitHub => headers.get("x-github-event"),
        Provider::GitLab => headers.get("x-gitlab-event"),
        Provider::Generic => generic_event,
        Provider::Registry | Provider::Image => None,
    };
    if !event.is_some_and(|event| events.contains(&event)) {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| Refusal::BadRequest(format!("the body is not JSON: {e}")))
}

/// The clone, ssh and web URLs of the repository (GitHub) or project (GitLab) at
/// `at` in a payload.
fn repository_urls(value: &Value, provider: Provider, at: &str) -> Vec<String> {
    let fields = match provider {
        Provider::GitHub => ["clone_url", "ssh_url", "html_url"],
        _ => ["git_http_url", "git_ssh_url", "web_url"],
    };
    fields
        .iter()
        .filter_map(|field| value.pointer(&format!("{at}/{field}"))?.as_str())
        .map(str::to_string)
        .collect()
}

/// A repository URL reduced to host and path, so that the https, ssh and scp-like
/// spellings of one repository compare equal.
fn same_repository(url: &str) -> String {
    let address = tether_core::feedback::address(url);
    match address.split_once('/') {
        Some((host, path)) => format!("{}/{path}", host.to_ascii_lowercase()),
        None => address.to_ascii_lowercase(),
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The `sha256=<hex>` signature of `body` (for senders and tests): the core's, which
/// tether's own webhook notices carry.
pub use tether_core::feedback::notice::signature as sign;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_guessable_secrets_are_refused() {
        assert_eq!(
            judge_secret(b"REPLACE-WITH-openssl-rand-hex-32"),
            Err(WeakSecret::Placeholder(
                "REPLACE-WITH-openssl-rand-hex-32".into()
            ))
        );
        assert!(matches!(
            judge_secret(b"changeme-changeme-1"),
            Err(WeakSecret::Placeholder(_))
        ));
        assert_eq!(judge_secret(b"short"), Err(WeakSecret::Short(5)));
        assert_eq!(
            judge_secret(b"abababababababababab"),
            Err(WeakSecret::Repetitive(2))
        );
        assert_eq!(judge_secret(b"3f9c1e0a77d24b6e9a51c0ffee4d2b18"), Ok(()));
    }
    use std::collections::HashMap;

    impl Headers for HashMap<&str, String> {
        fn get(&self, name: &str) -> Option<&str> {
            HashMap::get(self, name).map(String::as_str)
        }
    }

    const SECRET: &[u8] = b"a-long-webhook-secret";

    /// A payload of `tests/contracts/webhooks` (tests/offline/githost.rs checks
    /// GitHub's against GitHub's webhook description).
    fn payload(name: &str) -> Value {
        let text = match name {
            "github-push" => include_str!("../../../tests/contracts/webhooks/github-push.json"),
            "github-pull-request-opened" => {
                include_str!("../../../tests/contracts/webhooks/github-pull-request-opened.json")
            }
            "github-pull-request-synchronize" => include_str!(
                "../../../tests/contracts/webhooks/github-pull-request-synchronize.json"
            ),
            "gitlab-merge-request-update" => {
                include_str!("../../../tests/contracts/webhooks/gitlab-merge-request-update.json")
            }
            _ => panic!("no payload {name}"),
        };
        serde_json::from_str(text).unwrap()
    }

    /// GitHub's push payload with `reference` as its ref.
    fn github_push(reference: &str) -> Vec<u8> {
        let mut push = payload("github-push");
        push["ref"] = reference.into();
        push.to_string().into_bytes()
    }

    #[test]
    fn github_signatures_are_checked() {
        let body = github_push("refs/heads/main");
        let mut headers = HashMap::from([
            ("x-github-event", "push".to_string()),
            ("x-hub-signature-256", sign(&body, SECRET)),
        ]);
        assert_eq!(
            authenticate(Provider::GitHub, &headers, &body, SECRET),
            Ok(())
        );
        assert_eq!(
            authenticate(
                Provider::GitHub,
                &headers,
                &body,
                b"another-secret-of-length"
            ),
            Err(Refusal::Unauthorized)
        );
        let mut tampered = body.clone();
        tampered[3] ^= 1;
        assert_eq!(
            authenticate(Provider::GitHub, &headers, &tampered, SECRET),
            Err(Refusal::Unauthorized)
        );
        headers.insert("x-hub-signature-256", "sha256=zz".into());
        assert_eq!(
            authenticate(Provider::GitHub, &headers, &body, SECRET),
            Err(Refusal::Unauthorized)
        );
        headers.remove("x-hub-signature-256");
        assert_eq!(
            authenticate(Provider::GitHub, &headers, &body, SECRET),
            Err(Refusal::Unauthorized)
        );
    }

    #[test]
    fn gitlab_tokens_and_generic_signatures_are_checked() {
        let body = b"{}";
        let gitlab = HashMap::from([(
            "x-gitlab-token",
            String::from_utf8_lossy(SECRET).into_owned(),
        )]);
        assert_eq!(
            authenticate(Provider::GitLab, &gitlab, body, SECRET),
            Ok(())
        );
        let wrong = HashMap::from([("x-gitlab-token", "a-long-webhook-secreT".to_string())]);
        assert_eq!(
            authenticate(Provider::GitLab, &wrong, body, SECRET),
            Err(Refusal::Unauthorized)
        );
        let generic = HashMap::from([("x-signature-256", sign(body, SECRET))]);
        assert_eq!(
            authenticate(Provider::Generic, &generic, body, SECRET),
            Ok(())
        );
        // A GitHub header does not authenticate the generic receiver.
        let misplaced = HashMap::from([("x-hub-signature-256", sign(body, SECRET))]);
        assert_eq!(
            authenticate(Provider::Generic, &misplaced, body, SECRET),
            Err(Refusal::Unauthorized)
        );
    }

    #[test]
    fn a_push_concerns_the_sources_of_its_repository_and_ref() {
        let headers = HashMap::from([("x-github-event", "push".to_string())]);
        let push = push(Provider::GitHub, &headers, &github_push("refs/heads/main"))
            .unwrap()
            .unwrap();
        assert!(push.concerns("https://github.com/team/models", Some("main")));
        assert!(push.concerns("ssh://git@GitHub.com/team/models.git", Some("main")));
        assert!(push.concerns("git@github.com:team/models.git", None));
        assert!(!push.concerns("https://github.com/team/models", Some("staging")));
        assert!(!push.concerns("https://github.com/team/other", Some("main")));
        let tag = super::push(Provider::GitHub, &headers, &github_push("refs/tags/v1"))
            .unwrap()
            .unwrap();
        assert!(tag.concerns("https://github.com/team/models", Some("v1")));
        assert!(!tag.concerns("https://github.com/team/models", None));
    }

    #[test]
    fn other_events_are_ignored_and_bad_bodies_refused() {
        let ping = HashMap::from([("x-github-event", "ping".to_string())]);
        assert_eq!(push(Provider::GitHub, &ping, b"{}"), Ok(None));
        let none = HashMap::new();
        assert!(matches!(
            push(Provider::Generic, &none, b"not json"),
            Err(Refusal::BadRequest(_))
        ));
        assert!(matches!(
            push(Provider::Generic, &none, br#"{"ref": "refs/heads/main"}"#),
            Err(Refusal::BadRequest(_))
        ));
        let generic = push(
            Provider::Generic,
            &none,
            br#"{"repository": "file:///srv/git/models.git", "ref": "refs/heads/main"}"#,
        )
        .unwrap()
        .unwrap();
        assert!(generic.concerns("file:///srv/git/models", Some("main")));
    }

    #[test]
    fn github_pull_requests_name_the_base_repository_and_the_head_to_fetch() {
        let headers = HashMap::from([("x-github-event", "pull_request".to_string())]);
        let body = payload("github-pull-request-synchronize").to_string();
        let pull = pull_request(Provider::GitHub, &headers, body.as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(
            pull,
            PullRequest {
                urls: vec![
                    "https://github.com/team/models.git".into(),
                    "git@github.com:team/models.git".into(),
                    "https://github.com/team/models".into(),
                ],
                base_branch: "main".into(),
                default_branch: Some("main".into()),
                number: 42,
                head_commit: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c".into(),
                head_ref: "refs/pull/42/head".into(),
                from_fork: true,
            }
        );
        assert!(pull.concerns("git@github.com:team/models.git", None));
        assert!(pull.concerns("https://github.com/team/models", Some("main")));
        assert!(!pull.concerns("https://github.com/team/models", Some("staging")));
        // The fork's URL is not the base's: a source of the fork is not concerned.
        assert!(!pull.concerns("https://github.com/alice/models", None));

        let mut same_repository = payload("github-pull-request-opened");
        same_repository["pull_request"]["head"]["repo"] =
            same_repository["pull_request"]["base"]["repo"].clone();
        let opened = pull_request(
            Provider::GitHub,
            &headers,
            same_repository.to_string().as_bytes(),
        )
        .unwrap()
        .unwrap();
        assert!(!opened.from_fork);

        let mut closed = payload("github-pull-request-opened");
        closed["action"] = "closed".into();
        assert_eq!(
            pull_request(Provider::GitHub, &headers, closed.to_string().as_bytes()),
            Ok(None)
        );
        // A push is not a pull request, nor the other way round.
        let push_headers = HashMap::from([("x-github-event", "push".to_string())]);
        assert_eq!(
            pull_request(
                Provider::GitHub,
                &push_headers,
                &github_push("refs/heads/main")
            ),
            Ok(None)
        );
        assert_eq!(push(Provider::GitHub, &headers, body.as_bytes()), Ok(None));
    }

    #[test]
    fn gitlab_merge_requests_count_when_opened_or_given_commits() {
        let headers = HashMap::from([("x-gitlab-event", "Merge Request Hook".to_string())]);
        let update = payload("gitlab-merge-request-update");
        let merge = pull_request(Provider::GitLab, &headers, update.to_string().as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                merge.number,
                merge.base_branch.as_str(),
                merge.head_ref.as_str(),
                merge.from_fork
            ),
            (7, "main", "refs/merge-requests/7/head", false)
        );
        assert_eq!(
            merge.head_commit,
            "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
        );
        assert!(merge.concerns("https://gitlab.com/group/sub/models", Some("main")));

        // An update without new commits (a title edited) is no new plan.
        let mut edited = update.clone();
        edited["object_attributes"]
            .as_object_mut()
            .unwrap()
            .remove("oldrev");
        assert_eq!(
            pull_request(Provider::GitLab, &headers, edited.to_string().as_bytes()),
            Ok(None)
        );
        let mut fork = update.clone();
        fork["object_attributes"]["action"] = "open".into();
        fork["object_attributes"]["source_project_id"] = 16.into();
        let opened = pull_request(Provider::GitLab, &headers, fork.to_string().as_bytes())
            .unwrap()
            .unwrap();
        assert!(opened.from_fork);
        let mut nameless = update;
        nameless["object_attributes"]
            .as_object_mut()
            .unwrap()
            .remove("iid");
        assert!(matches!(
            pull_request(Provider::GitLab, &headers, nameless.to_string().as_bytes()),
            Err(Refusal::BadRequest(_))
        ));
    }
}
