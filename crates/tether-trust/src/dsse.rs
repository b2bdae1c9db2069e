//! DSSE envelopes (the in-toto attestation framework's "Dead Simple Signing
//! Envelope"): a payload, its type, and signatures over the pre-authentication
//! encoding of both ([`pae`]), so that a signature cannot be replayed as another type.
//! tether signs its deployment records with an ECDSA P-256 key ([`RecordKey`], PKCS#8
//! or SEC1 PEM as `openssl` writes it); [`open`] checks an envelope against the
//! trusted keys in cosign's public key format, so `cosign verify-blob-attestation
//! --key` checks the same envelope.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{DecodePrivateKey, EncodePublicKey};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::trusted_keys::{TrustedKeys, cosign_key_name};
use crate::verify::{Refusal, Signer};

/// The payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A signed envelope, in DSSE's JSON form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The payload, base64.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of an envelope: base64 DER ECDSA over [`pae`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    #[serde(default)]
    pub keyid: String,
    pub sig: String,
}

/// DSSE's pre-authentication encoding: what is signed.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut encoded = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    encoded.extend_from_slice(payload);
    encoded
}

/// The private key that signs deployment records. Its `Debug` shows the public key's
/// name only.
pub struct RecordKey {
    key: SigningKey,
    name: String,
}

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordKey")
            .field("public", &self.name)
            .finish()
    }
}

/// Why a record key cannot be read. Never holds the key.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "{origin} is not an ECDSA P-256 private key in PEM (-----BEGIN PRIVATE KEY----- or -----BEGIN EC PRIVATE KEY-----, as `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it): {reason}"
)]
pub struct RecordKeyError {
    pub origin: String,
    pub reason: String,
}

impl RecordKey {
    /// Reads a PEM private key; `origin` names where it came from in errors.
    pub fn parse(text: &str, origin: &str) -> Result<RecordKey, RecordKeyError> {
        let error = |reason: String| RecordKeyError {
            origin: origin.to_string(),
            reason,
        };
        let key = if text.contains("-----BEGIN EC PRIVATE KEY-----") {
            p256::SecretKey::from_sec1_pem(text)
                .map(SigningKey::from)
                .map_err(|e| error(e.to_string()))?
        } else if text.contains("-----BEGIN PRIVATE KEY-----") {
            SigningKey::from_pkcs8_pem(text).map_err(|e| error(e.to_string()))?
        } else if text.contains("ENCRYPTED") {
            return Err(error(
                "it is encrypted: give the key without a passphrase; the Secret or file that holds it is what protects it".into(),
            ));
        } else {
            return Err(error("no private key block".into()));
        };
        let public = key
            .verifying_key()
            .to_public_key_der()
            .map_err(|e| error(e.to_string()))?;
        Ok(RecordKey {
            name: cosign_key_name(public.as_bytes()),
            key,
        })
    }

    /// `cosign sha256:…`: the public key's name, as [`open`] names the signer.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public key in PEM (PKIX), as `cosign.pub` holds one.
    pub fn public_pem(&self) -> Result<String, RecordKeyError> {
        self.key
            .verifying_key()
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .map_err(|e| RecordKeyError {
                origin: self.name.clone(),
                reason: e.to_string(),
            })
    }

    /// `payload` of `payload_type`, signed.
    pub fn seal(&self, payload_type: &str, payload: &[u8]) -> Envelope {
        let signature: Signature = self.key.sign(&pae(payload_type, payload));
        Envelope {
            payload_type: payload_type.to_string(),
            payload: STANDARD.encode(payload),
            signatures: vec![EnvelopeSignature {
                keyid: self.name.clone(),
                sig: STANDARD.encode(signature.to_der().as_bytes()),
            }],
        }
    }
}

/// The payload of `envelope` and its trusted signer, if one of its signatures is a
/// trusted key's; or why not.
pub fn open(keys: &TrustedKeys, envelope: &Envelope) -> Result<(Vec<u8>, Signer), Refusal> {
    let payload = STANDARD
        .decode(envelope.payload.trim())
        .map_err(|e| Refusal::Unreadable(format!("the payload is not base64: {e}")))?;
    if envelope.signatures.is_empty() {
        return Err(Refusal::Unsigned);
    }
    let signed = pae(&envelope.payload_type, &payload);
    let mut unknown = Vec::new();
    for signature in &envelope.signatures {
        let bytes = STANDARD
            .decode(signature.sig.trim())
            .map_err(|e| Refusal::Unreadable(format!("a signature is not base64: {e}")))?;
        let signature_value = Signature::from_der(&bytes)
            .or_else(|_| Signature::from_slice(&bytes))
            .map_err(|e| Refusal::Unreadable(format!("not an ECDSA signature: {e}")))?;
        if let Some(trusted) = keys
            .cosign
            .iter()
            .find(|trusted| trusted.key.verify(&signed, &signature_value).is_ok())
        {
            let signer = Signer {
                key: trusted.name.clone(),
                name: "attestation key".into(),
            };
            return Ok((payload, signer));
        }
        match keys.cosign.iter().find(|k| k.name == signature.keyid) {
            // The key it names is trusted, but its signature does not hold: the
            // payload (or its type) changed under it.
            Some(named) => {
                return Err(Refusal::Invalid {
                    signer: Signer {
                        key: named.name.clone(),
                        name: "attestation key".into(),
                    },
                    reason: "the signature does not match the payload".into(),
                });
            }
            None => unknown.push(match signature.keyid.is_empty() {
                true => "a key it does not name".to_string(),
                false => signature.keyid.clone(),
            }),
        }
    }
    Err(Refusal::UnknownKey {
        key: unknown.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAWEKKtJpzjg4WpfM
lkxR7HPiXzDRBKaHRGbgYSvlJv6hRANCAASDMr1kHjmCMZ6N9uZRhAMDkE0MKkxz
wcvCAUp/oJC+sEMqgOX8Z4a0IDewpJgLpi/B8Ix+f2l9i45YUakwP95K
-----END PRIVATE KEY-----
";

    fn key() -> RecordKey {
        RecordKey::parse(KEY, "test").unwrap()
    }

    fn trusted(key: &RecordKey) -> TrustedKeys {
        TrustedKeys::parse(&key.public_pem().unwrap(), "test").unwrap()
    }

    #[test]
    fn pae_is_the_specifications_encoding() {
        // The example of DSSE's protocol description.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn a_sealed_payload_opens_with_its_key_and_names_it() {
        let key = key();
        let envelope = key.seal(IN_TOTO_PAYLOAD_TYPE, b"{\"a\":1}");
        let (payload, signer) = open(&trusted(&key), &envelope).unwrap();
        assert_eq!(payload, b"{\"a\":1}");
        assert_eq!(signer.key, key.name());
    }

    #[test]
    fn a_changed_payload_or_type_is_invalid_and_another_key_unknown() {
        let key = key();
        let keys = trusted(&key);
        let mut envelope = key.seal(IN_TOTO_PAYLOAD_TYPE, b"{\"a\":1}");
        envelope.payload = STANDARD.encode(b"{\"a\":2}");
        assert!(matches!(
            open(&keys, &envelope),
            Err(Refusal::Invalid { .. })
        ));
        let mut retyped = key.seal(IN_TOTO_PAYLOAD_TYPE, b"{\"a\":1}");
        retyped.payload_type = "text/plain".into();
        assert!(matches!(
            open(&keys, &retyped),
            Err(Refusal::Invalid { .. })
        ));
        let other = SigningKey::from(p256::SecretKey::from_slice(&[7; 32]).unwrap());
        let signature: Signature = other.sign(&pae(IN_TOTO_PAYLOAD_TYPE, b"{}"));
        let forged = Envelope {
            payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
            payload: STANDARD.encode(b"{}"),
            signatures: vec![EnvelopeSignature {
                keyid: String::new(),
                sig: STANDARD.encode(signature.to_der().as_bytes()),
            }],
        };
        assert!(matches!(
            open(&keys, &forged),
            Err(Refusal::UnknownKey { .. })
        ));
        let unsigned = Envelope {
            signatures: vec![],
            ..forged
        };
        assert_eq!(open(&keys, &unsigned), Err(Refusal::Unsigned));
    }

    #[test]
    fn an_ssh_key_or_an_encrypted_key_is_refused_without_showing_it() {
        let error = RecordKey::parse(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
            "the Secret ns/k, entry key",
        )
        .unwrap_err();
        assert!(error.to_string().contains("the Secret ns/k, entry key"));
        assert!(!error.to_string().contains("AAAA"));
        let encrypted = RecordKey::parse(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nBBBB\n-----END ENCRYPTED PRIVATE KEY-----\n",
            "f",
        )
        .unwrap_err();
        assert!(encrypted.reason.contains("passphrase"), "{encrypted}");
    }
}
