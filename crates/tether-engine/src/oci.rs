//! Models from an OCI artifact in Flux's format (`flux push artifact`): an image
//! manifest whose config has the media type [`FLUX_CONFIG`] and whose one layer is a
//! gzipped tar of the models directory ([`FLUX_CONTENT`]), pushed by
//! `tether push artifact` or by Flux's CLI.
//!
//! Pulling resolves the tag to the manifest's digest (one HEAD request), and reads the
//! artifact from the cache directory of that digest when it is there: a source whose
//! tag did not move downloads nothing. Otherwise the manifest and the layer are
//! downloaded, each checked against its digest, and the layer is unpacked safely
//! ([`archive`]) into the digest's cache directory, which is then read as a models
//! directory.

pub mod archive;
mod artifact_manifest;
mod oci_error;
mod reference;
mod registry;
mod registry_access;
mod signature;

use std::path::{Path, PathBuf};

use tether_trust::trusted_keys::TrustedKeys;
use thiserror::Error;

pub use artifact_manifest::{
    Descriptor, FLUX_CONFIG, FLUX_CONTENT, Manifest, OCI_MANIFEST, REVISION_ANNOTATION,
    SOURCE_ANNOTATION, sha256_digest,
};
pub use oci_error::OciError;
pub use reference::{Reference, ReferenceError, Target, target_of};
pub use registry::{Registry, TAG_PAGE_BYTES, TagsPage};
pub use registry_access::{Access, Credentials};

/// How a pulled artifact is named in reports and a Source's status: `<tag>@sha256:…`,
/// or the digest alone when the reference pins one.
pub fn revision_name(reference: &Reference, digest: &str) -> String {
    match &reference.target {
        Target::Tag(tag) => format!("{tag}@{digest}"),
        Target::Digest(_) => digest.to_string(),
    }
}

/// Is `revision` one that [`revision_name`] made (a digest, not a Git commit)?
pub fn is_artifact_revision(revision: &str) -> bool {
    revision.starts_with("sha256:") || revision.contains("@sha256:")
}

/// The directory an artifact of `digest` is unpacked into, below `cache_dir`.
fn unpacked_dir(cache_dir: &Path, digest: &str) -> PathBuf {
    cache_dir.join("oci").join(digest.replace(':', "-"))
}

/// How long an unpacked artifact no Source has looked at stays in the cache: a daemon
/// that follows a tag for a month would otherwise keep every artifact pushed to it.
const UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

/// Marks an unpacked artifact as in use (its directory's modification time), so that
/// [`evict_unused`] leaves it.
fn mark_used(root: &Path) {
    if let Ok(dir) = std::fs::File::open(root) {
        let _ = dir.set_modified(std::time::SystemTime::now());
    }
}

/// Removes the unpacked artifacts under `parent` that no Source used for
/// [`UNUSED_FOR`], but `keep`. A Source still following one marks it at every pass,
/// quiet ones included. Blocking.
fn evict_unused(parent: &Path, keep: &Path, now: std::time::SystemTime) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let unused = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| now.duration_since(modified).unwrap_or_default() > UNUSED_FOR);
        let is_artifact = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("sha256-"));
        let evicted =
            path != keep && is_artifact && unused && entry.file_type().is_ok_and(|t| t.is_dir());
        if evicted && let Err(error) = std::fs::remove_dir_all(&path) {
            tracing::debug!(path = %path.display(), %error, "an unused artifact stays in the cache");
        }
    }
}

/// The revision `reference` names at the registry, when its artifact is already
/// unpacked in the cache (one HEAD request; nothing downloaded). `None` when it moved
/// to an artifact not in the cache, or the registry could not be asked.
pub async fn unmoved_revision(
    reference: &Reference,
    access: &Access,
    cache_dir: &Path,
) -> Option<String> {
    let registry = Registry::new(reference, access).ok()?;
    let digest = registry.resolve().await.ok()?;
    let root = unpacked_dir(cache_dir, &digest);
    root.is_dir().then(|| {
        mark_used(&root);
        revision_name(reference, &digest)
    })
}

/// An artifact unpacked in the cache.
#[derive(Debug)]
pub struct Pulled {
    /// The root of the unpacked directory.
    pub root: PathBuf,
    /// `<tag>@sha256:…` (see [`revision_name`]).
    pub revision: String,
    /// How long downloading took; `None` when the cache already held the artifact.
    pub download_took: Option<std::time::Duration>,
}

/// Resolves `reference` to its manifest's digest and makes sure the artifact is
/// unpacked in `cache_dir`: downloaded, checked and unpacked when the cache does not
/// hold that digest yet. With `verify`, the digest must carry a cosign signature by
/// one of its keys.
pub async fn pull(
    reference: &Reference,
    access: &Access,
    cache_dir: &Path,
    verify: Option<&TrustedKeys>,
) -> Result<Pulled, OciError> {
    let registry = Registry::new(reference, access)?;
    let digest = registry.resolve().await?;
    // Before anything of it is read, cached or not: a key removed since counts.
    if let Some(keys) = verify {
        signature::verify(&registry, &digest, keys).await?;
    }
    let root = unpacked_dir(cache_dir, &digest);
    let revision = revision_name(reference, &digest);
    if root.is_dir() {
        mark_used(&root);
        return Ok(Pulled {
            root,
            revision,
            download_took: None,
        });
    }
    let started = std::time::Instant::now();
    let manifest = registry.manifest(&digest).await?;
    let layer = manifest.flux_layer(reference)?;
    let parent = cache_dir.join("oci");
    std::fs::create_dir_all(&parent).map_err(|source| OciError::Cache {
        path: parent.clone(),
        source,
    })?;
    let compressed = registry.blob_to_file(layer, &parent).await?;
    let download_took = Some(started.elapsed());
    let shown = reference.to_string();
    let unpack_root = root.clone();
    tokio::task::spawn_blocking(move || {
        let unpacked = archive::unpack_into_cache(&compressed, &unpack_root);
        evict_unused(&parent, &unpack_root, std::time::SystemTime::now());
        unpacked
    })
    .await
    .map_err(|e| OciError::Cache {
        path: root.clone(),
        source: std::io::Error::other(e.to_string()),
    })?
    .map_err(|source| OciError::Archive {
        reference: shown,
        source,
    })?;
    Ok(Pulled {
        root,
        revision,
        download_took,
    })
}

/// The trusted cosign signer of the manifest `digest` in `reference`'s repository:
/// a chart Helm pulled from a registry, by the digest Helm printed.
pub async fn verify_signature(
    reference: &Reference,
    access: &Access,
    digest: &str,
    keys: &TrustedKeys,
) -> Result<tether_trust::verify::Signer, OciError> {
    let registry = Registry::new(reference, access)?;
    signature::verify(&registry, digest, keys).await
}

/// What `tether push artifact` publishes besides the directory.
#[derive(Clone, Debug, Default)]
pub struct PushMetadata {
    /// Where the directory comes from (a Git URL).
    pub source: Option<String>,
    /// Its revision there (e.g. `main@sha1:<commit>`).
    pub revision: Option<String>,
}

/// Packs `dir` (deterministically: the same files give the same digest) and pushes it
/// as a Flux artifact under `reference`'s tag; returns the manifest's digest.
pub async fn push(
    reference: &Reference,
    access: &Access,
    dir: &Path,
    metadata: &PushMetadata,
) -> Result<String, PushError> {
    let dir_owned = dir.to_path_buf();
    let layer = tokio::task::spawn_blocking(move || archive::pack(&dir_owned))
        .await
        .map_err(|e| {
            PushError::Pack(archive::ArchiveError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })
        })?
        .map_err(PushError::Pack)?;
    let config = b"{}".to_vec();
    let mut annotations = std::collections::BTreeMap::new();
    if let Some(source) = &metadata.source {
        annotations.insert(SOURCE_ANNOTATION.to_string(), source.clone());
    }
    if let Some(revision) = &metadata.revision {
        annotations.insert(REVISION_ANNOTATION.to_string(), revision.clone());
    }
    let config_descriptor = Descriptor {
        media_type: FLUX_CONFIG.to_string(),
        digest: sha256_digest(&config),
        size: config.len() as u64,
    };
    let layer_descriptor = Descriptor {
        media_type: FLUX_CONTENT.to_string(),
        digest: sha256_digest(&layer),
        size: layer.len() as u64,
    };
    let registry = Registry::new(reference, access)?;
    registry.push_blob(&config_descriptor, config).await?;
    registry.push_blob(&layer_descriptor, layer).await?;
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.to_string()),
        artifact_type: None,
        config: config_descriptor,
        layers: vec![layer_descriptor],
        annotations,
    };
    Ok(registry.push_manifest(&manifest).await?)
}

#[derive(Debug, Error)]
pub enum PushError {
    #[error("cannot pack the directory")]
    Pack(#[source] archive::ArchiveError),
    #[error(transparent)]
    Registry(#[from] OciError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_no_source_used_for_an_hour_leave_the_cache() {
        let cache = tempfile::tempdir().unwrap();
        let parent = cache.path().join("oci");
        let dir = |name: &str| {
            let path = parent.join(name);
            std::fs::create_dir_all(path.join("models")).unwrap();
            path
        };
        let (current, used, old) = (dir("sha256-aa"), dir("sha256-bb"), dir("sha256-cc"));
        let download = parent.join("blob-in-flight");
        std::fs::write(&download, b"x").unwrap();
        let later = std::time::SystemTime::now() + UNUSED_FOR * 2;
        // A Source still follows `used`: its pass marked it just now (as seen later).
        let marked = std::fs::File::open(&used).unwrap();
        marked.set_modified(later).unwrap();
        evict_unused(&parent, &current, later);
        assert!(current.is_dir(), "the artifact just unpacked stays");
        assert!(used.is_dir(), "an artifact in use stays");
        assert!(!old.exists(), "an artifact unused for two hours is removed");
        assert!(
            download.exists(),
            "what is not an unpacked artifact is left alone"
        );
    }
}
