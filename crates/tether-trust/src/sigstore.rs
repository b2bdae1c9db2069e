//! Sigstore bundles (`application/vnd.dev.sigstore.bundle.v0.3+json`), as `cosign
//! sign --new-bundle-format` pushes them beside an artifact: a DSSE envelope of an
//! in-toto statement naming the artifact's digest, signed either by a cosign key (the
//! bundle names it by a hint) or by a code-signing certificate that a private
//! Sigstore's certificate authority issued. [`verify_bundle`] checks one:
//!
//! - a key's signature against the trusted cosign keys, and that its statement names
//!   the digest about to be read;
//! - a certificate's bundle with sigstore-rust's `sigstore-verify`, against each
//!   trusted root: its path to one of the root's certificate authorities, valid at the
//!   time an RFC 3161 timestamp of one of the root's timestamp authorities (or an
//!   entry of one of its transparency logs) proves it signed, its code-signing usage,
//!   the envelope's signature and the statement's subject; then its identity (the
//!   subject alternative name and the OIDC issuer Fulcio writes into it) against the
//!   trusted [`Identity`]s, which are regular expressions where `sigstore-verify`'s
//!   are exact.
//!
//! A root that lists no transparency log (a private Sigstore without Rekor) asks for a
//! timestamp instead of a log entry; one that lists no certificate transparency log
//! asks for no SCT. Nothing is fetched: the trusted root comes from the keys.

use base64::Engine;
use serde::Deserialize;
use sigstore_verify::crypto::parse_certificate_info;
use sigstore_verify::types::{Bundle, Sha256Hash};
use sigstore_verify::{CertificateError, Error, VerificationPolicy, Verifier};

use crate::dsse::{self, Envelope, IN_TOTO_PAYLOAD_TYPE};
use crate::trusted_keys::TrustedKeys;
use crate::trusted_root::{Identity, TrustedRoot};
use crate::verify::{Refusal, Signer};

/// The media type of a bundle, as the artifact type of the manifest that carries it.
pub const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

/// What tether reads of a bundle itself: its envelope.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Enveloped {
    dsse_envelope: Option<Envelope>,
}

/// The trusted signer of the Sigstore bundle `bundle` (JSON), which must sign the
/// artifact `digest` (`sha256:…`); or why not.
pub fn verify_bundle(keys: &TrustedKeys, bundle: &[u8], digest: &str) -> Result<Signer, Refusal> {
    let unreadable = |why: String| Refusal::Unreadable(why);
    let text = std::str::from_utf8(bundle)
        .map_err(|_| unreadable("the Sigstore bundle is not UTF-8 text".into()))?;
    let parsed = Bundle::from_json(text)
        .map_err(|e| unreadable(format!("the Sigstore bundle cannot be read: {e}")))?;
    let Ok(Enveloped {
        dsse_envelope: Some(envelope),
    }) = serde_json::from_str(text)
    else {
        return Err(unreadable(
            "the bundle holds a message signature, not a DSSE envelope (cosign sign --new-bundle-format makes one)"
                .into(),
        ));
    };
    if let Some(certificate) = parsed.signing_certificate() {
        let info = parse_certificate_info(certificate)
            .map_err(|e| unreadable(format!("the bundle's certificate cannot be read: {e}")))?;
        let claims = Claims {
            subject: info
                .identity
                .map(|identity| identity.as_str().to_string())
                .unwrap_or_else(|| "nobody".into()),
            issuer: info.issuer.unwrap_or_else(|| "unknown".into()),
        };
        return certificate_signer(keys, &parsed, &claims, digest).map_err(|refusal| {
            match refusal {
                // Named as a key's bundle names it: what it signs instead.
                Refusal::NotAllowed { signer, reason } if reason == ANOTHER_ARTIFACT => {
                    Refusal::NotAllowed {
                        reason: signed_instead(&envelope, digest),
                        signer,
                    }
                }
                other => other,
            }
        });
    }
    let (payload, signer) = dsse::open(keys, &envelope)?;
    let signer = Signer {
        name: "cosign".into(),
        ..signer
    };
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(Refusal::NotAllowed {
            signer,
            reason: format!(
                "it signs a payload of type {:?}, not an in-toto statement",
                envelope.payload_type
            ),
        });
    }
    let signed = statement_digests(&payload).map_err(unreadable)?;
    if !signed.iter().any(|signed| signed == digest) {
        return Err(Refusal::NotAllowed {
            signer,
            reason: signed_instead(&envelope, digest),
        });
    }
    Ok(signer)
}

/// A certificate's bundle that signs another artifact, until [`signed_instead`]
/// names it.
const ANOTHER_ARTIFACT: &str = "it signs another artifact";

/// "it signs sha256:…, not sha256:…", from the envelope's statement.
fn signed_instead(envelope: &Envelope, digest: &str) -> String {
    let signed = base64::engine::general_purpose::STANDARD
        .decode(envelope.payload.trim())
        .map_err(|e| e.to_string())
        .and_then(|payload| statement_digests(&payload));
    match signed {
        Ok(signed) => format!("it signs {}, not {digest}", signed.join(", ")),
        Err(_) => format!("{ANOTHER_ARTIFACT}, not {digest}"),
    }
}

/// The `sha256:…` digests an in-toto statement's subjects name.
fn statement_digests(payload: &[u8]) -> Result<Vec<String>, String> {
    let statement: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| format!("the signed statement is not JSON: {e}"))?;
    let digests: Vec<String> = statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|subject| subject["digest"]["sha256"].as_str())
        .map(|hex| format!("sha256:{hex}"))
        .collect();
    match digests.is_empty() {
        true => Err("the signed statement names no subject's sha256 digest".into()),
        false => Ok(digests),
    }
}

/// What a signing certificate says of its holder.
struct Claims {
    /// The subject alternative name: an email address or a URI.
    subject: String,
    /// The OIDC issuer Fulcio wrote, or `unknown`.
    issuer: String,
}

/// The signer of a certificate's `bundle`: a trusted root's authority issued the
/// certificate, for a trusted identity, and it signed `digest` while valid.
fn certificate_signer(
    keys: &TrustedKeys,
    bundle: &Bundle,
    claims: &Claims,
    digest: &str,
) -> Result<Signer, Refusal> {
    let signer = |by: &str| Signer {
        key: claims.subject.clone(),
        name: format!("issuer {}, certificate of {by}", claims.issuer),
    };
    let hash = digest
        .strip_prefix("sha256:")
        .and_then(|hex| Sha256Hash::from_hex(hex).ok())
        .ok_or_else(|| Refusal::Unreadable(format!("{digest} is not a sha256 digest")))?;
    let mut refusal = Refusal::UnknownKey {
        key: format!(
            "a certificate for {} of issuer {}",
            claims.subject, claims.issuer
        ),
    };
    for root in &keys.sigstore {
        match verify_with(root, bundle, hash) {
            Ok(()) => {
                let signer = signer(&root.name);
                if keys.identities.is_empty() {
                    return Err(Refusal::NotAllowed {
                        signer,
                        reason: "no certificate identity is trusted (matchOIDCIdentity, or --certificate-identity and --certificate-oidc-issuer)".into(),
                    });
                }
                if !keys
                    .identities
                    .iter()
                    .any(|identity| identity.matches(&claims.issuer, &claims.subject))
                {
                    let trusted: Vec<String> =
                        keys.identities.iter().map(Identity::to_string).collect();
                    return Err(Refusal::NotAllowed {
                        signer,
                        reason: format!(
                            "its identity is none of the trusted ones: {}",
                            trusted.join("; ")
                        ),
                    });
                }
                return Ok(signer);
            }
            Err(Error::Certificate(CertificateError::ChainInvalid(_))) => {}
            Err(Error::SignatureInvalid(why)) => {
                return Err(Refusal::Invalid {
                    signer: signer(&root.name),
                    reason: format!("the signature does not match the payload: {why}"),
                });
            }
            Err(error) => {
                refusal = Refusal::NotAllowed {
                    signer: signer(&root.name),
                    reason: problem(&error),
                };
            }
        }
    }
    Err(refusal)
}

/// Checks `bundle` against one trusted root, for any identity: its transparency log
/// entries if the root lists logs (else a timestamp stands in), its SCT if the root
/// lists certificate transparency logs.
fn verify_with(root: &TrustedRoot, bundle: &Bundle, digest: Sha256Hash) -> Result<(), Error> {
    let verifier = Verifier::new(&root.root)?;
    let mut policy = VerificationPolicy::any_identity();
    if root.root.tlogs.is_empty() {
        policy = policy.skip_tlog_unsafe();
    }
    if root.root.ctlogs.is_empty() {
        policy = policy.skip_sct();
    }
    verifier.verify(digest, bundle, &policy).map(|_| ())
}

/// Why a certificate of a trusted authority may not sign, said for people.
fn problem(error: &Error) -> String {
    match error {
        Error::ArtifactMismatch(_) => ANOTHER_ARTIFACT.into(),
        Error::Timestamp(_) => format!(
            "nothing proves when the certificate signed: {error} (sign with cosign's --timestamp-server-url of a timestamp authority the trusted root lists, or with a transparency log it lists)"
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    const ROOT: &str = include_str!("../testdata/sigstore/fulcio-root.json");
    const OTHER_ROOT: &str = include_str!("../testdata/sigstore/other-root.json");
    const BY_CERTIFICATE: &[u8] = include_bytes!("../testdata/sigstore/bundle-certificate.json");
    const BY_KEY: &[u8] = include_bytes!("../testdata/sigstore/bundle-key.json");
    const UNTIMED_ROOT: &str = include_str!("../testdata/sigstore/untimed-root.json");
    const COSIGN_PUB: &str = include_str!("../testdata/sigstore/cosign.pub");
    const DIGEST: &str = include_str!("../testdata/sigstore/digest");

    fn keys(texts: &[&str], identities: &[(&str, &str)]) -> TrustedKeys {
        let mut keys = TrustedKeys::default();
        for text in texts {
            keys.add(TrustedKeys::parse(text, "test").unwrap());
        }
        keys.trust_identities(
            identities
                .iter()
                .map(|(issuer, subject)| Identity::new(issuer, subject).unwrap())
                .collect(),
        );
        keys
    }

    fn digest() -> &'static str {
        DIGEST.trim()
    }

    const ISSUER: (&str, &str) = ("https://issuer.example.org", "ci@example.org");

    #[test]
    fn a_certificate_of_a_trusted_root_for_a_trusted_identity_signs() {
        let signer = verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, digest()).unwrap();
        assert_eq!(signer.key, "ci@example.org");
        assert_eq!(
            signer.name,
            "issuer https://issuer.example.org, certificate of https://fulcio.example.org"
        );
        // Regular expressions match the whole value.
        let keys = keys(
            &[ROOT],
            &[(r"https://issuer\.example\.org", r".*@example\.org")],
        );
        assert!(verify_bundle(&keys, BY_CERTIFICATE, digest()).is_ok());
    }

    #[test]
    fn another_root_another_identity_or_no_identity_is_refused() {
        let refused =
            verify_bundle(&keys(&[OTHER_ROOT], &[ISSUER]), BY_CERTIFICATE, digest()).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "it is signed by a certificate for ci@example.org of issuer https://issuer.example.org, which is not among the trusted keys"
        );
        let refused = verify_bundle(
            &keys(&[ROOT], &[("https://issuer.example.org", "ci@example")]),
            BY_CERTIFICATE,
            digest(),
        )
        .unwrap_err();
        assert!(
            refused
                .to_string()
                .ends_with("its identity is none of the trusted ones: subject ci@example of issuer https://issuer.example.org"),
            "{refused}"
        );
        let refused = verify_bundle(&keys(&[ROOT], &[]), BY_CERTIFICATE, digest()).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("no certificate identity is trusted"),
            "{refused}"
        );
        // A cosign key alone trusts no certificate.
        let refused =
            verify_bundle(&keys(&[COSIGN_PUB], &[ISSUER]), BY_CERTIFICATE, digest()).unwrap_err();
        assert!(matches!(refused, Refusal::UnknownKey { .. }), "{refused}");
    }

    #[test]
    fn a_certificate_holds_at_the_time_its_timestamp_proves_and_only_then() {
        // The fixture's certificate lived ten minutes, long ago: the timestamp
        // authority's countersignature shows it signed within them.
        let bundle: serde_json::Value = serde_json::from_slice(BY_CERTIFICATE).unwrap();
        let timestamps = &bundle["verificationMaterial"]["timestampVerificationData"];
        assert_eq!(timestamps["rfc3161Timestamps"].as_array().unwrap().len(), 1);
        assert!(verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, digest()).is_ok());
        // A root without the timestamp authority cannot tell when it signed.
        let refused =
            verify_bundle(&keys(&[UNTIMED_ROOT], &[ISSUER]), BY_CERTIFICATE, digest()).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("nothing proves when the certificate signed"),
            "{refused}"
        );
        // Nor can a bundle whose timestamp was taken out, or changed.
        let mut untimed = bundle.clone();
        untimed["verificationMaterial"]
            .as_object_mut()
            .unwrap()
            .remove("timestampVerificationData");
        let untimed = serde_json::to_vec(&untimed).unwrap();
        assert!(verify_bundle(&keys(&[ROOT], &[ISSUER]), &untimed, digest()).is_err());
        let mut changed = bundle.clone();
        let stamp = changed["verificationMaterial"]["timestampVerificationData"]
            ["rfc3161Timestamps"][0]["signedTimestamp"]
            .as_str()
            .unwrap()
            .to_string();
        let mut der = STANDARD.decode(&stamp).unwrap();
        let last = der.len() - 1;
        der[last] ^= 1;
        changed["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"][0]["signedTimestamp"] =
            STANDARD.encode(der).into();
        let changed = serde_json::to_vec(&changed).unwrap();
        let refused = verify_bundle(&keys(&[ROOT], &[ISSUER]), &changed, digest()).unwrap_err();
        assert!(refused.to_string().contains("timestamp"), "{refused}");
    }

    #[test]
    fn a_bundle_signs_one_digest_and_its_envelope_only() {
        let other = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let refused = verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, other).unwrap_err();
        assert!(
            refused
                .to_string()
                .ends_with(&format!("it signs {}, not {other}", digest())),
            "{refused}"
        );
        // The payload changed under the signature: another subject digest.
        let mut bundle: serde_json::Value = serde_json::from_slice(BY_CERTIFICATE).unwrap();
        let payload = STANDARD
            .decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        let forged = String::from_utf8(payload)
            .unwrap()
            .replace(&digest()["sha256:".len()..], &other["sha256:".len()..]);
        bundle["dsseEnvelope"]["payload"] = STANDARD.encode(forged).into();
        let forged = serde_json::to_vec(&bundle).unwrap();
        let refused = verify_bundle(&keys(&[ROOT], &[ISSUER]), &forged, other).unwrap_err();
        assert!(matches!(refused, Refusal::Invalid { .. }), "{refused}");
    }

    #[test]
    fn a_bundle_by_a_cosign_key_is_checked_against_the_cosign_keys() {
        let signer = verify_bundle(&keys(&[COSIGN_PUB], &[]), BY_KEY, digest()).unwrap();
        assert!(signer.key.starts_with("cosign sha256:"), "{signer}");
        let refused = verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_KEY, digest()).unwrap_err();
        assert!(matches!(refused, Refusal::UnknownKey { .. }), "{refused}");
    }
}
