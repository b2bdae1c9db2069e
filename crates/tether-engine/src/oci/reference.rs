//! An artifact's reference, as Flux spells it: `oci://HOST[:PORT]/REPOSITORY[:TAG]`
//! or `oci://HOST[:PORT]/REPOSITORY@sha256:<hex>`; without either, the tag `latest`.

use thiserror::Error;

/// The scheme that marks a source as an OCI artifact rather than a Git repository.
pub const SCHEME: &str = "oci://";

/// What a reference names in its repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A tag, which moves when someone pushes to it.
    Tag(String),
    /// A manifest's digest (`sha256:<hex>`), which never moves.
    Digest(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// The repository's path on the registry, e.g. `team/models`.
    pub repository: String,
    pub target: Target,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "\"{text}\" is not an OCI artifact reference (oci://HOST/REPOSITORY[:TAG|@sha256:DIGEST]): {why}"
)]
pub struct ReferenceError {
    pub text: String,
    pub why: &'static str,
}

impl Reference {
    /// Is `url` an OCI reference (rather than a Git URL)?
    pub fn is_oci(url: &str) -> bool {
        url.starts_with(SCHEME)
    }

    pub fn parse(text: &str) -> Result<Reference, ReferenceError> {
        let refuse = |why| ReferenceError {
            text: text.to_string(),
            why,
        };
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| refuse("it does not begin with oci://"))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| refuse("it names no repository after the host"))?;
        if registry.is_empty() || !registry.chars().all(is_host_char) {
            return Err(refuse("the host is empty or not a host[:port]"));
        }
        let (repository, target) = match path.split_once('@') {
            Some((repository, digest)) => {
                if !is_sha256_digest(digest) {
                    return Err(refuse(
                        "the digest is not sha256: and 64 lowercase hex digits",
                    ));
                }
                (repository, Target::Digest(digest.to_string()))
            }
            None => match path.rsplit_once(':') {
                Some((repository, tag)) => {
                    if !is_tag(tag) {
                        return Err(refuse(
                            "the tag is not 1 to 128 letters, digits, '_', '.' or '-' (not first)",
                        ));
                    }
                    (repository, Target::Tag(tag.to_string()))
                }
                None => (path, Target::Tag("latest".to_string())),
            },
        };
        if !is_repository(repository) {
            return Err(refuse(
                "the repository is not lowercase path components of letters, digits, '.', '_' or '-'",
            ));
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            target,
        })
    }

    /// The same repository with another target (a Source's `ref`).
    pub fn with_target(mut self, target: Target) -> Reference {
        self.target = target;
        self
    }

    /// `HOST/REPOSITORY`, as registries and `docker` name it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The tag or digest in a registry's URL path (`/v2/<name>/manifests/<this>`).
    pub fn target_text(&self) -> &str {
        match &self.target {
            Target::Tag(tag) => tag,
            Target::Digest(digest) => digest,
        }
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Tag(tag) => write!(f, "{SCHEME}{}:{tag}", self.name()),
            Target::Digest(digest) => write!(f, "{SCHEME}{}@{digest}", self.name()),
        }
    }
}

/// A Source's `ref` for an artifact: a digest (`sha256:…`) or a tag.
pub fn target_of(text: &str) -> Option<Target> {
    if is_sha256_digest(text) {
        Some(Target::Digest(text.to_string()))
    } else if is_tag(text) {
        Some(Target::Tag(text.to_string()))
    } else {
        None
    }
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']')
}

pub(crate) fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The distribution spec's tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
pub(crate) fn is_tag(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && text.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The distribution spec's repository name, loosely: lowercase components of
/// letters, digits and separators, none empty.
fn is_repository(text: &str) -> bool {
    !text.is_empty()
        && text.split('/').all(|component| {
            !component.is_empty()
                && component.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && component.chars().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_digests_and_the_default_tag_are_read() {
        let tagged = Reference::parse("oci://127.0.0.1:5000/team/models:v1.2").unwrap();
        assert_eq!(tagged.registry, "127.0.0.1:5000");
        assert_eq!(tagged.repository, "team/models");
        assert_eq!(tagged.target, Target::Tag("v1.2".into()));
        assert_eq!(tagged.to_string(), "oci://127.0.0.1:5000/team/models:v1.2");
        let digest = format!("sha256:{}", "a".repeat(64));
        let pinned = Reference::parse(&format!("oci://ghcr.io/org/app@{digest}")).unwrap();
        assert_eq!(pinned.target, Target::Digest(digest));
        let latest = Reference::parse("oci://ghcr.io/org/app").unwrap();
        assert_eq!(latest.target, Target::Tag("latest".into()));
        assert_eq!(latest.name(), "ghcr.io/org/app");
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        for (text, why) in [
            ("https://ghcr.io/org/app", "it does not begin with oci://"),
            ("oci://ghcr.io", "it names no repository after the host"),
            (
                "oci://ghcr.io/Org/app:v1",
                "the repository is not lowercase",
            ),
            (
                "oci://ghcr.io/org/app@sha256:abc",
                "the digest is not sha256",
            ),
            ("oci://ghcr.io/org/app:-v1", "the tag is not"),
        ] {
            let error = Reference::parse(text).unwrap_err();
            assert!(error.why.starts_with(why), "{text}: {}", error.why);
            assert!(error.to_string().contains(text));
        }
    }
}
