//! cosign's signatures of OCI artifacts, as `cosign sign --key` makes them: a "simple
//! signing" payload (JSON naming the signed manifest's digest) and its ECDSA P-256
//! signature over SHA-256, base64 in the layer's `dev.cosignproject.cosign/signature`
//! annotation. [`verify_simple_signing`] checks one against the trusted cosign keys
//! (`cosign.pub`, PKIX PEM) and that it signs the digest that is about to be read.

use base64::Engine;
use p256::ecdsa::Signature;
use p256::ecdsa::signature::Verifier;

use crate::trusted_keys::TrustedKeys;
use crate::verify::{Refusal, Signer};

/// The media type of a simple-signing payload layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a payload layer that holds its signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The trusted signer of a simple-signing `payload` and its base64 `signature`, which
/// must sign `digest` (`sha256:…`); or why not.
pub fn verify_simple_signing(
    keys: &TrustedKeys,
    payload: &[u8],
    signature: &str,
    digest: &str,
) -> Result<Signer, Refusal> {
    let unreadable = |why: String| Refusal::Unreadable(why);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .map_err(|e| unreadable(format!("the signature is not base64: {e}")))?;
    let signature = Signature::from_der(&bytes)
        .or_else(|_| Signature::from_slice(&bytes))
        .map_err(|e| unreadable(format!("not an ECDSA signature: {e}")))?;
    let signer = keys
        .cosign
        .iter()
        .find(|trusted| trusted.key.verify(payload, &signature).is_ok())
        .map(|trusted| Signer {
            key: trusted.name.clone(),
            name: "cosign".into(),
        })
        .ok_or_else(|| Refusal::UnknownKey {
            key: "a cosign key".into(),
        })?;
    let signed = signed_digest(payload).map_err(unreadable)?;
    if signed != digest {
        return Err(Refusal::NotAllowed {
            signer,
            reason: format!("it signs {signed}, not {digest}"),
        });
    }
    Ok(signer)
}

/// The manifest digest a simple-signing payload names.
fn signed_digest(payload: &[u8]) -> Result<String, String> {
    let json: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| format!("the signed payload is not JSON: {e}"))?;
    json["critical"]["image"]["docker-manifest-digest"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the signed payload names no critical.image.docker-manifest-digest".into())
}
