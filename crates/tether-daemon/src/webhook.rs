//! Webhook requests (pure): each provider's authentication, checked in constant time
//! before anything else is read, then the push it announces and whether it concerns
//! a source. GitHub signs the body (`X-Hub-Signature-256`), GitLab sends the shared
//! token (`X-Gitlab-Token`), and the generic receiver takes an HMAC-SHA256 of the body
//! (`X-Signature-256: sha256=<hex>`) with `{"repository": URL, "ref": REF}`.

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
}

impl Provider {
    pub fn from_path(segment: &str) -> Option<Provider> {
        match segment {
            "github" => Some(Provider::GitHub),
            "gitlab" => Some(Provider::GitLab),
            "generic" => Some(Provider::Generic),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Generic => "generic",
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
        Provider::GitLab => {
            let token = headers.get("x-gitlab-token").ok_or(Refusal::Unauthorized)?;
            // Compared as digests: equal length, so neither time nor length leaks.
            let given = Sha256::digest(token.as_bytes());
            let expected = Sha256::digest(secret);
            match bool::from(given.ct_eq(&expected)) {
                true => Ok(()),
                false => Err(Refusal::Unauthorized),
            }
        }
        Provider::GitHub | Provider::Generic => {
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
    let event = match provider {
        Provider::GitHub => headers.get("x-github-event"),
        Provider::GitLab => headers.get("x-gitlab-event"),
        Provider::Generic => Some("push"),
    };
    if !matches!(event, Some("push" | "Push Hook" | "Tag Push Hook")) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Refusal::BadRequest(format!("the body is not JSON: {e}")))?;
    let text = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (urls, default_branch) = match provider {
        Provider::GitHub => (
            [
                "/repository/clone_url",
                "/repository/ssh_url",
                "/repository/html_url",
            ]
            .iter()
            .filter_map(|p| text(p))
            .collect::<Vec<_>>(),
            text("/repository/default_branch"),
        ),
        Provider::GitLab => (
            [
                "/project/git_http_url",
                "/project/git_ssh_url",
                "/project/web_url",
            ]
            .iter()
            .filter_map(|p| text(p))
            .collect(),
            text("/project/default_branch"),
        ),
        Provider::Generic => (text("/repository").into_iter().collect(), None),
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
        let repository = same_repository(url);
        if !self.urls.iter().any(|u| same_repository(u) == repository) {
            return false;
        }
        match reference {
            Some(name) => [
                format!("refs/heads/{name}"),
                format!("refs/tags/{name}"),
                name.to_string(),
            ]
            .contains(&self.reference),
            None => match (
                &self.default_branch,
                self.reference.strip_prefix("refs/heads/"),
            ) {
                (Some(default), Some(branch)) => branch == default,
                // The default branch is unknown: any branch may be it.
                (None, Some(_)) => true,
                (_, None) => false,
            },
        }
    }
}

/// A repository URL reduced to host and path, so that the https, ssh and scp-like
/// spellings of one repository compare equal.
fn same_repository(url: &str) -> String {
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        // scp-like: git@host:org/repo
        None => url.replacen(':', "/", 1),
    };
    let rest = rest.rsplit_once('@').map_or(rest.as_str(), |(_, r)| r);
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    match rest.split_once('/') {
        Some((host, path)) => format!("{}/{path}", host.to_ascii_lowercase()),
        None => rest.to_ascii_lowercase(),
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

    fn github_push(reference: &str) -> Vec<u8> {
        serde_json::json!({
            "ref": reference,
            "repository": {
                "clone_url": "https://github.com/team/models.git",
                "ssh_url": "git@github.com:team/models.git",
                "html_url": "https://github.com/team/models",
                "default_branch": "main"
            }
        })
        .to_string()
        .into_bytes()
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
}
