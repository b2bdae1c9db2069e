//! Whether an artifact about to be read was signed by a trusted key, in either form
//! cosign pushes beside it:
//!
//! - the signature manifest of `cosign sign --key` (the tag `sha256-<hex>.sig`), each
//!   of its simple-signing layers read (bounded, checked against its digest) and asked
//!   of [`tether_trust::cosign`];
//! - the Sigstore bundles of `cosign sign --new-bundle-format` (referrers of the
//!   artifact, by the referrers API or its fallback tag), each asked of
//!   [`tether_trust::sigstore`]: by a cosign key, or by a certificate of a trusted
//!   root's authority for a trusted identity.
//!
//! One that signs the artifact's digest is enough. When none does, the refusal said
//! is the most telling one met (a key not trusted, a digest not the artifact's) over
//! "it is not signed".

use tether_trust::cosign::{SIGNATURE_ANNOTATION, SIMPLE_SIGNING, verify_simple_signing};
use tether_trust::sigstore::{BUNDLE, verify_bundle};
use tether_trust::trusted_keys::TrustedKeys;
use tether_trust::verify::{Refusal, Signer};

use super::artifact_manifest::Descriptor;
use super::oci_error::OciError;
use super::registry::Registry;

/// The trusted signer of the artifact `digest` of `registry`'s repository.
pub(crate) async fn verify(
    registry: &Registry,
    digest: &str,
    keys: &TrustedKeys,
) -> Result<Signer, OciError> {
    let refused = |refusal: Refusal| OciError::Unverified {
        reference: registry.name().to_string(),
        digest: digest.to_string(),
        refusal: Box::new(refusal),
        keys: keys.names(),
    };
    let mut refusal = match simple_signing(registry, digest, keys).await? {
        Ok(signer) => return Ok(signer),
        Err(refusal) => refusal,
    };
    match bundles(registry, digest, keys).await? {
        Ok(signer) => return Ok(signer),
        Err(Refusal::Unsigned) => {}
        Err(other) => refusal = other,
    }
    Err(refused(refusal))
}

/// The signer of one of the simple-signing layers of the artifact's `.sig` tag, or
/// the refusal of the last one read.
async fn simple_signing(
    registry: &Registry,
    digest: &str,
    keys: &TrustedKeys,
) -> Result<Result<Signer, Refusal>, OciError> {
    let tag = format!("{}.sig", digest.replacen(':', "-", 1));
    let manifest = match registry.manifest_of_tag(&tag).await {
        Ok(bytes) => bytes,
        Err(OciError::NotFound { .. }) => return Ok(Err(Refusal::Unsigned)),
        Err(error) => return Err(error),
    };
    let manifest = json(registry, &tag, "the signature manifest", &manifest)?;
    let mut refusal = Refusal::Unsigned;
    for layer in layers(&manifest, |media_type| media_type == SIMPLE_SIGNING) {
        let (Some(signature), Some(descriptor)) = (
            layer["annotations"][SIGNATURE_ANNOTATION].as_str(),
            descriptor_of(layer),
        ) else {
            continue;
        };
        let payload = registry.small_blob(&descriptor).await?;
        match verify_simple_signing(keys, &payload, signature, digest) {
            Ok(signer) => return Ok(Ok(signer)),
            Err(why) => refusal = why,
        }
    }
    Ok(Err(refusal))
}

/// The signer of one of the Sigstore bundles that refer to the artifact, or the
/// refusal of the last one read.
async fn bundles(
    registry: &Registry,
    digest: &str,
    keys: &TrustedKeys,
) -> Result<Result<Signer, Refusal>, OciError> {
    let index = registry.referrers(digest).await?;
    let index = json(registry, digest, "the referrers", &index)?;
    let mut refusal = Refusal::Unsigned;
    let referrers = index["manifests"].as_array().into_iter().flatten();
    for referrer in referrers
        .filter(|r| may_hold_bundle(r))
        .take(REFERRERS_READ)
    {
        let Some(manifest_digest) = referrer["digest"].as_str() else {
            continue;
        };
        let manifest = registry.manifest_bytes(manifest_digest).await?;
        let manifest = json(registry, manifest_digest, "a bundle's manifest", &manifest)?;
        for layer in layers(&manifest, |media_type| media_type == BUNDLE) {
            let Some(descriptor) = descriptor_of(layer) else {
                continue;
            };
            let bundle = registry.small_blob(&descriptor).await?;
            match verify_bundle(keys, &bundle, digest) {
                Ok(signer) => return Ok(Ok(signer)),
                Err(why) => refusal = why,
            }
        }
    }
    Ok(Err(refusal))
}

/// How many of an artifact's referrers are read, at most, for a bundle.
const REFERRERS_READ: usize = 32;

/// A referrer that may be a bundle: one whose artifact type says so, or says nothing
/// of it (cosign's fallback tag lists its bundles as `application/vnd.oci.empty.v1+json`).
fn may_hold_bundle(referrer: &serde_json::Value) -> bool {
    match referrer["artifactType"].as_str() {
        None | Some(EMPTY) => true,
        Some(artifact_type) => artifact_type == BUNDLE,
    }
}

const EMPTY: &str = "application/vnd.oci.empty.v1+json";

fn json(
    registry: &Registry,
    named: &str,
    what: &str,
    bytes: &[u8],
) -> Result<serde_json::Value, OciError> {
    serde_json::from_slice(bytes).map_err(|e| OciError::Malformed {
        reference: format!("{}:{named}", registry.name()),
        what: what.into(),
        why: e.to_string(),
    })
}

fn layers(
    manifest: &serde_json::Value,
    wanted: impl Fn(&str) -> bool,
) -> impl Iterator<Item = &serde_json::Value> {
    manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |layer| layer["mediaType"].as_str().is_some_and(&wanted))
}

fn descriptor_of(layer: &serde_json::Value) -> Option<Descriptor> {
    Some(Descriptor {
        media_type: layer["mediaType"].as_str()?.to_string(),
        digest: layer["digest"].as_str()?.to_string(),
        size: layer["size"].as_u64()?,
    })
}
