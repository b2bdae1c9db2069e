//! Deployment attestations in an OCI registry. Each is pushed as an artifact of one
//! layer, the DSSE envelope (`application/vnd.dsse.envelope.v1+json`, the media type
//! of cosign's attestations), with OCI 1.1's empty config. It is tagged twice:
//!
//! - `<inventory>-<UTC stamp>-<digest prefix>`, so that an inventory's attestations
//!   sort by time ([`tag_of`]); the oldest beyond the bound are deleted;
//! - `<inventory>`, which always names the newest.
//!
//! [`pull`] reads one back by its tag or digest.

use std::collections::BTreeMap;

use crate::image_automation::scan::list_tags;
use crate::oci::{
    Access, Descriptor, Manifest, OciError, Reference, Registry, Target, sha256_digest,
};

/// The media type of the layer that holds the envelope.
pub const ENVELOPE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// OCI 1.1's empty descriptor: an artifact with no config.
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The annotation naming the inventory an attestation is of.
const INVENTORY_ANNOTATION: &str = "dev.tether.attestation.inventory";
const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";
/// How many of a repository's tags are listed, at most, to find the oldest.
const MAX_TAGS: usize = 100_000;

/// Where attestations are pushed: a repository, and how to reach it.
#[derive(Clone, Debug)]
pub struct AttestationRegistry {
    /// The repository (its tag, if any, is not used).
    pub repository: Reference,
    pub access: Access,
}

impl AttestationRegistry {
    /// The reference of `tag` in the repository.
    pub fn tagged(&self, tag: &str) -> Reference {
        Reference {
            target: Target::Tag(tag.to_string()),
            ..self.repository.clone()
        }
    }
}

/// Pushes `envelope` (its JSON) as the attestation of `inventory` made at `time`
/// (RFC 3339), then deletes that inventory's oldest beyond `keep`; returns the pushed
/// reference, `oci://host/repo:tag@sha256:…`.
pub(super) async fn push(
    store: &AttestationRegistry,
    inventory: &str,
    time: &str,
    predicate_type: &str,
    envelope: Vec<u8>,
    keep: usize,
) -> Result<String, OciError> {
    let layer = Descriptor {
        media_type: ENVELOPE_MEDIA_TYPE.into(),
        digest: sha256_digest(&envelope),
        size: envelope.len() as u64,
    };
    let tag = tag_of(inventory, time, &layer.digest);
    let reference = store.tagged(&tag);
    let registry = Registry::new(&reference, &store.access)?;
    let config = b"{}".to_vec();
    let config_descriptor = Descriptor {
        media_type: EMPTY_MEDIA_TYPE.into(),
        digest: sha256_digest(&config),
        size: config.len() as u64,
    };
    registry.push_blob(&config_descriptor, config).await?;
    registry.push_blob(&layer, envelope).await?;
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(crate::oci::OCI_MANIFEST.into()),
        artifact_type: Some(ENVELOPE_MEDIA_TYPE.into()),
        config: config_descriptor,
        layers: vec![layer],
        annotations: BTreeMap::from([
            (CREATED_ANNOTATION.into(), time.into()),
            (INVENTORY_ANNOTATION.into(), inventory.into()),
            ("predicateType".into(), predicate_type.into()),
        ]),
    };
    let digest = registry.push_manifest(&manifest).await?;
    registry.push_manifest_as(&manifest, inventory).await?;
    prune(&registry, inventory, keep).await;
    Ok(format!("{reference}@{digest}"))
}

/// Deletes the inventory's attestations beyond the newest `keep`. A registry that
/// refuses deletes keeps them: that is logged, the attestation is pushed all the same.
async fn prune(registry: &Registry, inventory: &str, keep: usize) {
    let mut tags = Vec::new();
    let listed = list_tags(registry, MAX_TAGS, |tag| {
        if is_tag_of(tag, inventory) {
            tags.push(tag.to_string());
        }
    })
    .await;
    if let Err(error) = listed {
        tracing::warn!(%error, "the registry's attestations could not be listed: none deleted");
        return;
    }
    tags.sort();
    let beyond = tags.len().saturating_sub(keep.max(1));
    for tag in &tags[..beyond] {
        let deleted = match registry.resolve_tag(tag).await {
            Ok(digest) => registry.delete_manifest(&digest).await,
            Err(error) => Err(error),
        };
        if let Err(error) = deleted {
            tracing::warn!(%error, %tag, "an old attestation could not be deleted from the registry");
            return;
        }
    }
}

/// The envelope that `reference` names (a tag or a digest), and where it was read:
/// `oci://host/repo:tag (sha256:…)`.
pub async fn pull(reference: &Reference, access: &Access) -> Result<(String, Vec<u8>), OciError> {
    let registry = Registry::new(reference, access)?;
    let digest = registry.resolve().await?;
    let manifest = registry.manifest(&digest).await?;
    let layer = manifest
        .layers
        .iter()
        .find(|layer| layer.media_type == ENVELOPE_MEDIA_TYPE)
        .ok_or_else(|| OciError::Malformed {
            reference: reference.to_string(),
            what: "the attestation's manifest".into(),
            why: format!("it has no {ENVELOPE_MEDIA_TYPE} layer"),
        })?;
    let envelope = registry.small_blob(layer).await?;
    Ok((format!("{reference} ({digest})"), envelope))
}

/// `<inventory>-<YYYYMMDDhhmmss>-<12 hex of the envelope's digest>`, cut to a tag's 128
/// characters (from the inventory's end).
pub fn tag_of(inventory: &str, time: &str, digest: &str) -> String {
    let stamp: String = time.chars().filter(char::is_ascii_digit).take(14).collect();
    let hex: String = digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect();
    let suffix = format!("-{stamp}-{hex}");
    let room = 128 - suffix.len();
    let inventory: String = inventory.chars().take(room).collect();
    format!("{inventory}{suffix}")
}

/// Is `tag` one of [`tag_of`]'s for `inventory`?
fn is_tag_of(tag: &str, inventory: &str) -> bool {
    let Some((head, hex)) = tag.rsplit_once('-') else {
        return false;
    };
    let Some((name, stamp)) = head.rsplit_once('-') else {
        return false;
    };
    stamp.len() == 14
        && stamp.chars().all(|c| c.is_ascii_digit())
        && hex.len() == 12
        && hex.chars().all(|c| c.is_ascii_hexdigit())
        && inventory.starts_with(name)
        && (name == inventory || name.len() + 1 + stamp.len() + 1 + hex.len() == 128)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tags_sort_by_time_and_name_their_inventory_only() {
        let early = tag_of("shop", "2026-11-30T09:15:12Z", DIGEST);
        let late = tag_of("shop", "2026-11-30T10:01:00Z", DIGEST);
        assert_eq!(early, "shop-20261130091512-0123456789ab");
        assert!(early < late);
        assert!(is_tag_of(&early, "shop"));
        assert!(!is_tag_of(&early, "shop-eu"));
        assert!(!is_tag_of(
            &tag_of("shop-eu", "2026-11-30T09:15:12Z", DIGEST),
            "shop"
        ));
        assert!(!is_tag_of("shop", "shop"));
        assert!(!is_tag_of("v1.2.3", "shop"));
    }

    #[test]
    fn a_long_inventory_name_is_cut_to_a_tags_length() {
        let long = "x".repeat(300);
        let tag = tag_of(&long, "2026-11-30T09:15:12Z", DIGEST);
        assert_eq!(tag.len(), 128);
        assert!(crate::oci::Reference::parse(&format!("oci://r.example.org/a:{tag}")).is_ok());
        assert!(is_tag_of(&tag, &long));
    }
}
