//! Whether an artifact about to be read was signed by a trusted cosign key: the
//! signature manifest `cosign sign --key` pushes beside it (the tag
//! `sha256-<hex>.sig`), each of its simple-signing layers read (bounded, checked
//! against its digest) and asked of [`tether_trust::cosign`]. One that signs the
//! artifact's digest with a trusted key is enough.

use tether_trust::cosign::{SIGNATURE_ANNOTATION, SIMPLE_SIGNING, verify_simple_signing};
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
    let tag = format!("{}.sig", digest.replacen(':', "-", 1));
    let manifest = match registry.manifest_of_tag(&tag).await {
        Ok(bytes) => bytes,
        Err(OciError::NotFound { .. }) => return Err(refused(Refusal::Unsigned)),
        Err(error) => return Err(error),
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&manifest).map_err(|e| OciError::Malformed {
            reference: format!("{}:{tag}", registry.name()),
            what: "the signature manifest".into(),
            why: e.to_string(),
        })?;
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    let mut refusal = Refusal::Unsigned;
    for layer in layers
        .iter()
        .filter(|layer| layer["mediaType"] == SIMPLE_SIGNING)
    {
        let (Some(signature), Some(descriptor)) = (
            layer["annotations"][SIGNATURE_ANNOTATION].as_str(),
            descriptor_of(layer),
        ) else {
            continue;
        };
        let payload = registry.small_blob(&descriptor).await?;
        match verify_simple_signing(keys, &payload, signature, digest) {
            Ok(signer) => return Ok(signer),
            Err(why) => refusal = why,
        }
    }
    Err(refused(refusal))
}

fn descriptor_of(layer: &serde_json::Value) -> Option<Descriptor> {
    Some(Descriptor {
        media_type: layer["mediaType"].as_str()?.to_string(),
        digest: layer["digest"].as_str()?.to_string(),
        size: layer["size"].as_u64()?,
    })
}
