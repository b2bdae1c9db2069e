//! The key a Source's deployment attestations are signed with (`spec.attestation`):
//! the `attestation.pem` entry of a Secret in its namespace, read before each pass
//! that may apply, so that a rotated key signs from the next pass on. A key that
//! cannot be read applies nothing: no deployment goes unattested.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

use tether_trust::dsse::{RecordKey, RecordKeyError};
use tether_trust::trusted_keys::{KeyError, TrustedKeys};

/// The Secret's entry that holds the private key (PEM, ECDSA P-256).
pub(crate) const ATTESTATION_ENTRY: &str = "attestation.pem";

/// The Secret a Source's attestation key is read from, and how many attestations it
/// keeps.
pub(crate) struct AttestationSecret {
    api: Api<Secret>,
    /// `namespace/name`, for messages.
    display: String,
    name: String,
    pub(crate) keep: usize,
}

/// Why a Source's attestation key could not be read: nothing is applied.
#[derive(Debug, thiserror::Error)]
pub enum AttestationKeyError {
    #[error("cannot read the Secret {secret} of spec.attestation")]
    Read {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("the Secret {secret} of spec.attestation has no entry {ATTESTATION_ENTRY}")]
    NoEntry { secret: String },
    #[error(transparent)]
    Key(#[from] RecordKeyError),
    #[error(transparent)]
    Public(#[from] KeyError),
}

impl AttestationSecret {
    pub(crate) fn new(client: Client, namespace: &str, name: &str, keep: usize) -> Self {
        AttestationSecret {
            api: Api::namespaced(client, namespace),
            display: format!("{namespace}/{name}"),
            name: name.to_string(),
            keep,
        }
    }

    pub(crate) async fn read(&self) -> Result<RecordKey, AttestationKeyError> {
        let secret =
            self.api
                .get(&self.name)
                .await
                .map_err(|source| AttestationKeyError::Read {
                    secret: self.display.clone(),
                    source,
                })?;
        key_of(&secret, &self.display)
    }

    /// The public half of the key, read now: what the Source's attestations are
    /// checked against (the page's API).
    pub(crate) async fn public_keys(&self) -> Result<TrustedKeys, AttestationKeyError> {
        let public = self.read().await?.public_pem()?;
        let origin = format!("the Secret {} of spec.attestation", self.display);
        Ok(TrustedKeys::parse(&public, &origin)?)
    }
}

/// The key of `secret`'s entry; `display` names it in errors (never the key).
fn key_of(secret: &Secret, display: &str) -> Result<RecordKey, AttestationKeyError> {
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(ATTESTATION_ENTRY))
        .ok_or_else(|| AttestationKeyError::NoEntry {
            secret: display.to_string(),
        })?;
    let origin = format!("the Secret {display}, entry {ATTESTATION_ENTRY}");
    Ok(RecordKey::parse(
        &String::from_utf8_lossy(&value.0),
        &origin,
    )?)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn a_secret_without_the_entry_or_with_another_key_is_named_without_its_text() {
        let secret = |entry: &str, text: &str| Secret {
            data: Some([(entry.to_string(), ByteString(text.as_bytes().to_vec()))].into()),
            ..Secret::default()
        };
        let missing = key_of(&secret("key.pem", "x"), "ns/attest").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "the Secret ns/attest of spec.attestation has no entry attestation.pem"
        );
        let ssh =
            "-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETBYTES\n-----END OPENSSH PRIVATE KEY-----\n";
        let wrong = key_of(&secret(ATTESTATION_ENTRY, ssh), "ns/attest").unwrap_err();
        assert!(
            wrong.to_string().starts_with(
                "the Secret ns/attest, entry attestation.pem is not an ECDSA P-256 private key"
            ),
            "{wrong}"
        );
        assert!(!wrong.to_string().contains("SECRETBYTES"));
    }
}
