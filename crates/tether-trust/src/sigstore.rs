//! Sigstore bundles (`application/vnd.dev.sigstore.bundle.v0.3+json`), as `cosign
//! sign --new-bundle-format` pushes them beside an artifact: a DSSE envelope of an
//! in-toto statement naming the artifact's digest, signed either by a cosign key (the
//! bundle names it by a hint) or by a code-signing certificate that a private
//! Sigstore's certificate authority issued. [`verify_bundle`] checks one:
//!
//! - a key's signature against the trusted cosign keys;
//! - a certificate's path to an authority of a trusted root (a
//!   `trusted_root.json`, `cosign trusted-root create`'s format) at the time the
//!   caller gives, its code-signing usage, and its identity (the subject alternative
//!   name and the OIDC issuer Fulcio writes into it) against the trusted
//!   [`Identity`]s; then the envelope's signature by its key;
//! - that the statement names the digest about to be read.
//!
//! Transparency-log entries and signed timestamps a bundle may carry are not read:
//! the certificate must be valid at the time of the check, so that a private Sigstore
//! without Rekor works offline, and a short-lived certificate of a public one is
//! refused as expired rather than trusted on a time nobody checked.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm, UnixTime};
use serde::Deserialize;
use webpki::{EndEntityCert, KeyUsage};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

use crate::dsse::{self, Envelope, IN_TOTO_PAYLOAD_TYPE};
use crate::trusted_keys::TrustedKeys;
use crate::trusted_root::{Chain, Identity, RawBytes};
use crate::verify::{Refusal, Signer};

/// The media type of a bundle, as the artifact type of the manifest that carries it.
pub const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The extended key usage a signing certificate must carry: code signing.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
/// Fulcio's extension naming the OIDC issuer, as a DER UTF8String (…57264.1.8) and
/// its older raw form (…57264.1.1).
const OIDC_ISSUER: &str = "1.3.6.1.4.1.57264.1.8";
const OIDC_ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// The algorithms a certificate's key may sign with.
const SIGNATURE_ALGORITHMS: &[&dyn SignatureVerificationAlgorithm] = &[
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ED25519,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
];

/// What a bundle holds that tether reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    media_type: String,
    verification_material: Material,
    dsse_envelope: Option<Envelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    certificate: Option<RawBytes>,
    x509_certificate_chain: Option<Chain>,
    public_key: Option<serde_json::Value>,
}

/// The trusted signer of the Sigstore bundle `bundle` (JSON), which must sign the
/// artifact `digest` (`sha256:…`), its certificate (if any) checked at `now`
/// (seconds since the epoch); or why not.
pub fn verify_bundle(
    keys: &TrustedKeys,
    bundle: &[u8],
    digest: &str,
    now: i64,
) -> Result<Signer, Refusal> {
    let unreadable = |why: String| Refusal::Unreadable(why);
    let bundle: Bundle = serde_json::from_slice(bundle)
        .map_err(|e| unreadable(format!("the Sigstore bundle is not JSON of a bundle: {e}")))?;
    if !bundle
        .media_type
        .starts_with("application/vnd.dev.sigstore.bundle")
    {
        return Err(unreadable(format!(
            "the bundle's mediaType is {:?}",
            bundle.media_type
        )));
    }
    let Some(envelope) = bundle.dsse_envelope else {
        return Err(unreadable(
            "the bundle holds a message signature, not a DSSE envelope (cosign sign --new-bundle-format makes one)"
                .into(),
        ));
    };
    let material = bundle.verification_material;
    let leaf = match (material.certificate, material.x509_certificate_chain) {
        (Some(certificate), _) => Some(certificate.der().map_err(unreadable)?),
        (None, Some(chain)) => chain.der().map_err(unreadable)?.into_iter().next(),
        (None, None) => None,
    };
    let (payload, signer) = match leaf {
        Some(leaf) => certificate_signer(keys, &leaf, &envelope, now)?,
        None if material.public_key.is_some() => {
            let (payload, signer) = dsse::open(keys, &envelope)?;
            (
                payload,
                Signer {
                    name: "cosign".into(),
                    ..signer
                },
            )
        }
        None => {
            return Err(unreadable(
                "the bundle has neither a certificate nor a public key".into(),
            ));
        }
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
            reason: format!("it signs {}, not {digest}", signed.join(", ")),
        });
    }
    Ok(signer)
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

/// The payload of `envelope` and its signer, a certificate `leaf` (DER) that an
/// authority of a trusted root issued for a trusted identity, valid at `now`.
fn certificate_signer(
    keys: &TrustedKeys,
    leaf: &[u8],
    envelope: &Envelope,
    now: i64,
) -> Result<(Vec<u8>, Signer), Refusal> {
    let unreadable = |why: String| Refusal::Unreadable(why);
    let claims = Claims::of(leaf).map_err(unreadable)?;
    let certificate = CertificateDer::from(leaf);
    let end_entity = EndEntityCert::try_from(&certificate)
        .map_err(|e| unreadable(format!("the bundle's certificate cannot be read: {e}")))?;
    let authority = issuing_authority(keys, &end_entity, now, &claims)?;
    let signer = Signer {
        key: claims.subject.clone(),
        name: format!("issuer {}, certificate of {}", claims.issuer, authority),
    };
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
        let trusted: Vec<String> = keys.identities.iter().map(Identity::to_string).collect();
        return Err(Refusal::NotAllowed {
            signer,
            reason: format!(
                "its identity is none of the trusted ones: {}",
                trusted.join("; ")
            ),
        });
    }
    let payload = STANDARD
        .decode(envelope.payload.trim())
        .map_err(|e| unreadable(format!("the payload is not base64: {e}")))?;
    let signed = dsse::pae(&envelope.payload_type, &payload);
    let holds = |signature: &dsse::EnvelopeSignature| {
        let Ok(bytes) = STANDARD.decode(signature.sig.trim()) else {
            return false;
        };
        SIGNATURE_ALGORITHMS.iter().any(|algorithm| {
            end_entity
                .verify_signature(*algorithm, &signed, &bytes)
                .is_ok()
        })
    };
    if envelope.signatures.is_empty() {
        return Err(Refusal::Unsigned);
    }
    if !envelope.signatures.iter().any(holds) {
        return Err(Refusal::Invalid {
            signer,
            reason: "the signature does not match the payload".into(),
        });
    }
    Ok((payload, signer))
}

/// The trusted authority that issued `end_entity` for code signing, both valid at
/// `now`; or why none did.
fn issuing_authority(
    keys: &TrustedKeys,
    end_entity: &EndEntityCert<'_>,
    now: i64,
    claims: &Claims,
) -> Result<String, Refusal> {
    let time = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(now).unwrap_or_default(),
    ));
    let at = DateTime::from_timestamp(now, 0).unwrap_or_default();
    let mut refusal = Refusal::UnknownKey {
        key: format!("a certificate issued by {}", claims.issued_by),
    };
    for authority in keys.sigstore.iter().flat_map(|root| &root.authorities) {
        let Some((root, intermediates)) = authority.chain.split_last() else {
            continue;
        };
        let root = CertificateDer::from(root.as_slice());
        let Ok(anchor) = webpki::anchor_from_trusted_cert(&root) else {
            continue;
        };
        let intermediates: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|der| CertificateDer::from(der.as_slice()))
            .collect();
        let anchors = [anchor];
        let verified = end_entity
            .verify_for_usage(
                SIGNATURE_ALGORITHMS,
                &anchors,
                &intermediates,
                time,
                KeyUsage::required(CODE_SIGNING),
                None,
                None,
            )
            .map(|_| ());
        let signer = || Signer {
            key: claims.subject.clone(),
            name: format!(
                "issuer {}, certificate of {}",
                claims.issuer, authority.name
            ),
        };
        match verified {
            Ok(_)
                if authority.start.is_some_and(|start| at < start)
                    || authority.end.is_some_and(|end| at > end) =>
            {
                refusal = Refusal::NotAllowed {
                    signer: signer(),
                    reason: format!(
                        "the trusted root lets {} issue only {}",
                        authority.name,
                        window(authority.start, authority.end)
                    ),
                };
            }
            Ok(_) => return Ok(authority.name.clone()),
            Err(webpki::Error::UnknownIssuer) => {}
            Err(error) => {
                refusal = Refusal::NotAllowed {
                    signer: signer(),
                    reason: certificate_problem(&error, claims, at),
                };
            }
        }
    }
    Err(refusal)
}

fn window(start: Option<DateTime<Utc>>, end: Option<DateTime<Utc>>) -> String {
    let shown = |time: Option<DateTime<Utc>>| time.map(|t| t.to_rfc3339());
    match (shown(start), shown(end)) {
        (Some(start), Some(end)) => format!("from {start} to {end}"),
        (Some(start), None) => format!("from {start}"),
        (None, Some(end)) => format!("until {end}"),
        (None, None) => "ever".into(),
    }
}

/// Why a certificate an authority issued may not sign, said for people.
fn certificate_problem(error: &webpki::Error, claims: &Claims, at: DateTime<Utc>) -> String {
    let validity = format!(
        "its certificate is valid from {} to {}, and it is checked at {} (tether reads no transparency log or timestamp: the certificate must be valid when it is checked)",
        claims.not_before.to_rfc3339(),
        claims.not_after.to_rfc3339(),
        at.to_rfc3339()
    );
    match error {
        webpki::Error::CertExpired { .. } | webpki::Error::CertNotValidYet { .. } => validity,
        webpki::Error::RequiredEkuNotFoundContext(_) => {
            "its certificate is not for code signing".into()
        }
        other => format!("its certificate does not hold: {other}"),
    }
}

/// What a signing certificate says of its holder.
struct Claims {
    /// The subject alternative name: an email address or a URI.
    subject: String,
    /// The OIDC issuer Fulcio wrote, or `unknown`.
    issuer: String,
    /// The certificate's issuer's distinguished name.
    issued_by: String,
    not_before: DateTime<Utc>,
    not_after: DateTime<Utc>,
}

impl Claims {
    fn of(der: &[u8]) -> Result<Claims, String> {
        let (_, certificate) = X509Certificate::from_der(der)
            .map_err(|e| format!("the bundle's certificate cannot be read: {e}"))?;
        let subject = certificate
            .subject_alternative_name()
            .ok()
            .flatten()
            .and_then(|names| {
                names
                    .value
                    .general_names
                    .iter()
                    .find_map(|name| match name {
                        GeneralName::RFC822Name(email) => Some(email.to_string()),
                        GeneralName::URI(uri) => Some(uri.to_string()),
                        _ => None,
                    })
            })
            .ok_or("the bundle's certificate names no email address or URI")?;
        let issuer = certificate
            .extensions()
            .iter()
            .find_map(|extension| {
                let oid = extension.oid.to_id_string();
                match (oid.as_str(), extension.parsed_extension()) {
                    (OIDC_ISSUER, _) => x509_parser::der_parser::parse_der(extension.value)
                        .ok()
                        .and_then(|(_, value)| value.as_str().ok().map(str::to_string)),
                    (OIDC_ISSUER_V1, ParsedExtension::UnsupportedExtension { .. }) => {
                        std::str::from_utf8(extension.value)
                            .ok()
                            .map(str::to_string)
                    }
                    _ => None,
                }
            })
            .unwrap_or_else(|| "unknown".into());
        let time = |t: x509_parser::time::ASN1Time| {
            DateTime::from_timestamp(t.timestamp(), 0).unwrap_or_default()
        };
        Ok(Claims {
            subject,
            issuer,
            issued_by: certificate.issuer().to_string(),
            not_before: time(certificate.validity().not_before),
            not_after: time(certificate.validity().not_after),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = include_str!("../testdata/sigstore/fulcio-root.json");
    const OTHER_ROOT: &str = include_str!("../testdata/sigstore/other-root.json");
    const BY_CERTIFICATE: &[u8] = include_bytes!("../testdata/sigstore/bundle-certificate.json");
    const BY_KEY: &[u8] = include_bytes!("../testdata/sigstore/bundle-key.json");
    const COSIGN_PUB: &str = include_str!("../testdata/sigstore/cosign.pub");
    const DIGEST: &str = include_str!("../testdata/sigstore/digest");
    /// 2027-01-01, when the fixtures' certificates and roots are valid.
    const NOW: i64 = 1_798_761_600;

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
        let signer =
            verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, digest(), NOW).unwrap();
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
        assert!(verify_bundle(&keys, BY_CERTIFICATE, digest(), NOW).is_ok());
    }

    #[test]
    fn another_root_another_identity_or_no_identity_is_refused() {
        let refused = verify_bundle(
            &keys(&[OTHER_ROOT], &[ISSUER]),
            BY_CERTIFICATE,
            digest(),
            NOW,
        )
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "it is signed by a certificate issued by O=Private Sigstore, CN=fulcio, which is not among the trusted keys"
        );
        let refused = verify_bundle(
            &keys(&[ROOT], &[("https://issuer.example.org", "ci@example")]),
            BY_CERTIFICATE,
            digest(),
            NOW,
        )
        .unwrap_err();
        assert!(
            refused
                .to_string()
                .ends_with("its identity is none of the trusted ones: subject ci@example of issuer https://issuer.example.org"),
            "{refused}"
        );
        let refused =
            verify_bundle(&keys(&[ROOT], &[]), BY_CERTIFICATE, digest(), NOW).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("no certificate identity is trusted"),
            "{refused}"
        );
        // A cosign key alone trusts no certificate.
        let refused = verify_bundle(
            &keys(&[COSIGN_PUB], &[ISSUER]),
            BY_CERTIFICATE,
            digest(),
            NOW,
        )
        .unwrap_err();
        assert!(matches!(refused, Refusal::UnknownKey { .. }), "{refused}");
    }

    #[test]
    fn a_certificate_is_checked_at_the_time_of_the_check() {
        // 2200: the fixture's certificate (100 years from 2026) has expired.
        let later = 7_258_118_400;
        let refused =
            verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, digest(), later).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("its certificate is valid from 2026-"),
            "{refused}"
        );
        // 2020: before the trusted root's window and the certificate.
        let earlier = 1_577_836_800;
        assert!(
            verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, digest(), earlier).is_err()
        );
    }

    #[test]
    fn a_bundle_signs_one_digest_and_its_envelope_only() {
        let other = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let refused =
            verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_CERTIFICATE, other, NOW).unwrap_err();
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
        let refused = verify_bundle(&keys(&[ROOT], &[ISSUER]), &forged, other, NOW).unwrap_err();
        assert!(matches!(refused, Refusal::Invalid { .. }), "{refused}");
    }

    #[test]
    fn a_bundle_by_a_cosign_key_is_checked_against_the_cosign_keys() {
        let signer = verify_bundle(&keys(&[COSIGN_PUB], &[]), BY_KEY, digest(), NOW).unwrap();
        assert!(signer.key.starts_with("cosign sha256:"), "{signer}");
        let refused = verify_bundle(&keys(&[ROOT], &[ISSUER]), BY_KEY, digest(), NOW).unwrap_err();
        assert!(matches!(refused, Refusal::UnknownKey { .. }), "{refused}");
    }
}
