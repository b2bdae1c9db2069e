//! A registry's announcement that an image was pushed, which triggers a scan of its
//! repository: Docker distribution's notifications, and a generic HMAC-signed one
//! for registries and CI jobs that can send a small JSON body. Each only says where
//! to look: what a policy chooses is still read from the registry.

use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use thiserror::Error;

/// A notification's body larger than this is refused unread.
pub const NOTIFICATION_BYTES: usize = 1024 * 1024;

/// The media types of what distribution announces as a pushed image: manifests and
/// indexes, not blobs.
const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// An image pushed, as a registry announces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// `host[:port]`, when the notification says.
    pub registry: Option<String>,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum NotificationError {
    #[error("the notification is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the notification is not {format}: {why}")]
    Malformed { format: &'static str, why: String },
    #[error("the notification carries no signature (header X-Signature-256: sha256=<hex>)")]
    MissingSignature,
    #[error("the notification's signature does not match its body for the configured key")]
    BadSignature,
}

const DOCKER_FORMAT: &str = "a Docker distribution notification envelope";
const GENERIC_FORMAT: &str = "{\"image\": \"host/repository\", \"tag\" or \"digest\": \"…\"}";

/// Docker distribution's envelope (`application/vnd.docker.distribution.events.v1+json`):
/// the pushes of manifests in it, not of blobs, nor pulls.
pub fn docker_distribution(body: &[u8]) -> Result<Vec<Pushed>, NotificationError> {
    #[derive(Deserialize)]
    struct Envelope {
        events: Vec<Event>,
    }
    #[derive(Deserialize)]
    struct Event {
        action: String,
        target: Target,
        #[serde(default)]
        request: Request,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Target {
        #[serde(default)]
        media_type: String,
        digest: Option<String>,
        repository: String,
        url: Option<String>,
        tag: Option<String>,
    }
    #[derive(Default, Deserialize)]
    struct Request {
        host: Option<String>,
    }
    bounded(body)?;
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| malformed(DOCKER_FORMAT, &e))?;
    Ok(envelope
        .events
        .into_iter()
        .filter(|event| {
            event.action == "push" && MANIFEST_TYPES.contains(&event.target.media_type.as_str())
        })
        .map(|event| Pushed {
            registry: event
                .request
                .host
                .filter(|host| !host.is_empty())
                .or_else(|| event.target.url.as_deref().and_then(host_of_url)),
            repository: event.target.repository,
            tag: event.target.tag.filter(|tag| !tag.is_empty()),
            digest: event.target.digest,
        })
        .collect())
}

/// The generic notification, `{"image":"host/repository","tag":"…"}` (or `"digest"`),
/// signed with `X-Signature-256: sha256=<hex HMAC-SHA256 of the body>` by `key`. The
/// signature is checked (in constant time) before anything of the body is read.
pub fn generic(
    body: &[u8],
    signature: Option<&str>,
    key: &[u8],
) -> Result<Pushed, NotificationError> {
    #[derive(Deserialize)]
    struct Generic {
        image: String,
        tag: Option<String>,
        digest: Option<String>,
    }
    bounded(body)?;
    let given = signature.ok_or(NotificationError::MissingSignature)?;
    let expected = tether_core::feedback::notice::signature(body, key);
    // Compared as digests: equal length, so neither time nor length leaks.
    let matches =
        Sha256::digest(given.trim().as_bytes()).ct_eq(&Sha256::digest(expected.as_bytes()));
    if !bool::from(matches) {
        return Err(NotificationError::BadSignature);
    }
    let notification: Generic =
        serde_json::from_slice(body).map_err(|e| malformed(GENERIC_FORMAT, &e))?;
    if notification.tag.is_none() && notification.digest.is_none() {
        return Err(NotificationError::Malformed {
            format: GENERIC_FORMAT,
            why: "it names neither a tag nor a digest".into(),
        });
    }
    let (registry, repository) = split_image(&notification.image);
    if repository.is_empty() {
        return Err(NotificationError::Malformed {
            format: GENERIC_FORMAT,
            why: format!("the image {:?} names no repository", notification.image),
        });
    }
    Ok(Pushed {
        registry,
        repository,
        tag: notification.tag,
        digest: notification.digest,
    })
}

fn bounded(body: &[u8]) -> Result<(), NotificationError> {
    if body.len() > NOTIFICATION_BYTES {
        return Err(NotificationError::TooLarge {
            limit: NOTIFICATION_BYTES,
        });
    }
    Ok(())
}

fn malformed(format: &'static str, error: &serde_json::Error) -> NotificationError {
    NotificationError::Malformed {
        format,
        why: error.to_string(),
    }
}

/// `host[:port]` of `http(s)://host[:port]/…`.
fn host_of_url(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let host = rest.split('/').next()?;
    (!host.is_empty()).then(|| host.to_string())
}

/// An image name's registry and repository, as Docker splits them: the first
/// component names a registry when it has a `.` or a `:`, or is `localhost`.
fn split_image(image: &str) -> (Option<String>, String) {
    match image.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            (Some(first.to_string()), rest.to_string())
        }
        _ => (None, image.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_name_splits_at_a_registry_host_only() {
        assert_eq!(
            split_image("127.0.0.1:5000/shop/app"),
            (Some("127.0.0.1:5000".into()), "shop/app".into())
        );
        assert_eq!(
            split_image("ghcr.io/org/app"),
            (Some("ghcr.io".into()), "org/app".into())
        );
        assert_eq!(split_image("org/app"), (None, "org/app".into()));
        assert_eq!(
            split_image("localhost/app"),
            (Some("localhost".into()), "app".into())
        );
    }
}
