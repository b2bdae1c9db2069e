//! The key a Source's deployment attestations are signed with (`spec.attestation`):
//! the `attestation.pem` entry of a Secret in its namespace, read before each pass
//! that may apply, so that a rotated key signs from the next pass on. A key that
//! cannot be read applies nothing: no deployment goes unattested. Where they are kept
//! (the Source's namespace, a registry's repository with the credentials of its
//! Secret, read before each push) is [`AttestationSecret::places`].

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

use tether_api::source_spec::AttestationRegistrySpec;
use tether_engine::attestation::registry::AttestationRegistry;
use tether_engine::attestation::{Checking, Places};
use tether_engine::image_automation::automation::Secrets as _;
use tether_engine::oci::{Access, Reference};
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
    in_cluster: bool,
    registry: Option<AttestationRegistrySpec>,
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
    #[error("spec.attestation.registry: {0}")]
    Registry(String),
}

impl AttestationSecret {
    /// The Secret `name`; `spec` is the Source's `spec.attestation`.
    pub(crate) fn new(
        client: Client,
        namespace: &str,
        spec: &tether_api::source_spec::AttestationSpec,
    ) -> Self {
        let name = &spec.secret_ref.name;
        AttestationSecret {
            api: Api::namespaced(client, namespace),
            display: format!("{namespace}/{name}"),
            name: name.to_string(),
            keep: spec
                .keep
                .map_or(tether_engine::attestation::DEFAULT_KEEP, |k| k as usize),
            in_cluster: spec.in_cluster.unwrap_or(true) || spec.registry.is_none(),
            registry: spec.registry.clone(),
        }
    }

    /// Where the attestations go: the namespace, the registry (its credentials read
    /// now), or both.
    pub(crate) async fn places(&self) -> Result<Places, AttestationKeyError> {
        let registry = match &self.registry {
            None => None,
            Some(spec) => Some(self.registry(spec).await?),
        };
        Ok(Places {
            in_cluster: self.in_cluster,
            registry,
        })
    }

    /// Where the newest attestation of `inventory` is: its namespace when the
    /// Source keeps them there, else the registry's tag of the inventory.
    pub(crate) async fn newest(&self, inventory: &str) -> Result<Checking, AttestationKeyError> {
        match (&self.registry, self.in_cluster) {
            (Some(spec), false) => {
                let store = self.registry(spec).await?;
                Ok(Checking::InRegistry(AttestationRegistry {
                    repository: store.tagged(inventory),
                    access: store.access,
                }))
            }
            _ => Ok(Checking::InCluster),
        }
    }

    async fn registry(
        &self,
        spec: &AttestationRegistrySpec,
    ) -> Result<AttestationRegistry, AttestationKeyError> {
        let failed = AttestationKeyError::Registry;
        let repository = Reference::parse(&spec.url).map_err(|e| failed(e.to_string()))?;
        let credentials = match &spec.secret_ref {
            None => None,
            Some(secret) => Some(
                crate::registry_secrets::NamespaceSecrets(&self.api)
                    .get(&secret.name)
                    .await
                    .and_then(|found| found.for_registry(&secret.name, &repository.registry))
                    .map_err(failed)?,
            ),
        };
        Ok(AttestationRegistry {
            repository,
            access: Access {
                credentials,
                insecure: spec.insecure,
            },
        })
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
