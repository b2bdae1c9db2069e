//! The keys a Source's commits must be signed by, and those its charts must be: every
//! entry of the Secret its `spec.verify` (or `spec.verifyCharts`) names (an
//! allowed-signers file, SSH public keys, armored OpenPGP keys, cosign keys, Sigstore
//! trusted roots), read before each pass that loads the models, so that a key removed
//! from the Secret is no longer trusted from the next pass on, with no restart; and
//! the certificate identities its `matchOIDCIdentity` trusts.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

use tether_api::source_spec::OidcIdentityMatch;
use tether_trust::trusted_keys::{KeyError, TrustedKeys};
use tether_trust::trusted_root::Identity;

/// The Secret a Source's trusted keys are read from.
pub(crate) struct VerifySecret {
    api: Api<Secret>,
    /// `the Secret namespace/name of spec.verify`, for messages.
    display: String,
    name: String,
    /// The field's `matchOIDCIdentity`, and the field's name for messages.
    identities: Vec<OidcIdentityMatch>,
    field: String,
}

/// Why a Source's trusted keys could not be read: nothing is applied.
#[derive(Debug, thiserror::Error)]
pub enum VerifyKeysError {
    #[error("cannot read {secret}")]
    Read {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("{secret} has no entry")]
    NoEntry { secret: String },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("{field}.matchOIDCIdentity[{index}]: not a regular expression: {reason}")]
    Identity {
        field: String,
        index: usize,
        reason: String,
    },
}

impl VerifySecret {
    /// The Secret `name` that the Source's `field` (`spec.verify`) names.
    /// Certificates sign for `identities` (its `matchOIDCIdentity`).
    pub(crate) fn new(
        client: Client,
        namespace: &str,
        name: &str,
        field: &str,
        identities: &[OidcIdentityMatch],
    ) -> Self {
        VerifySecret {
            api: Api::namespaced(client, namespace),
            display: format!("the Secret {namespace}/{name} of {field}"),
            name: name.to_string(),
            identities: identities.to_vec(),
            field: field.to_string(),
        }
    }

    pub(crate) async fn read(&self) -> Result<TrustedKeys, VerifyKeysError> {
        let secret = self
            .api
            .get(&self.name)
            .await
            .map_err(|source| VerifyKeysError::Read {
                secret: self.display.clone(),
                source,
            })?;
        let mut keys = trusted_keys_of(&secret, &self.display)?;
        keys.trust_identities(identities(&self.identities, &self.field)?);
        Ok(keys)
    }
}

/// The identities of a `field`'s `matchOIDCIdentity`, or the first that is not one.
fn identities(
    matches: &[OidcIdentityMatch],
    field: &str,
) -> Result<Vec<Identity>, VerifyKeysError> {
    matches
        .iter()
        .enumerate()
        .map(|(index, identity)| {
            Identity::new(&identity.issuer, &identity.subject).map_err(|e| {
                VerifyKeysError::Identity {
                    field: field.to_string(),
                    index,
                    reason: e.to_string(),
                }
            })
        })
        .collect()
}

/// The keys of every entry of `secret`; `display` names it in errors (`the Secret
/// ns/name of spec.verify`).
pub(crate) fn trusted_keys_of(
    secret: &Secret,
    display: &str,
) -> Result<TrustedKeys, VerifyKeysError> {
    let mut keys = TrustedKeys::default();
    for (entry, value) in secret.data.iter().flatten() {
        let text = String::from_utf8_lossy(&value.0);
        keys.add(TrustedKeys::parse(
            &text,
            &format!("{display}, entry {entry}"),
        )?);
    }
    match keys.is_empty() {
        true => Err(VerifyKeysError::NoEntry {
            secret: display.to_string(),
        }),
        false => Ok(keys),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decryption::tests::secret;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEVFxXVy0NQNolXBngUhhtAkswEp1sucLMaqQ9hMD9t3";

    #[test]
    fn every_entry_is_read_and_a_bad_one_is_named() {
        let keys = trusted_keys_of(
            &secret(&[
                ("allowed_signers", &format!("dev@example.org {KEY}")),
                ("ops.pub", &format!("{KEY} ops@laptop")),
            ]),
            "the Secret ns/keys of spec.verify",
        )
        .unwrap();
        assert_eq!(keys.names().len(), 2);
        let error = trusted_keys_of(
            &secret(&[("x", "dev@example.org ssh-ed25519 !")]),
            "the Secret ns/keys of spec.verify",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("the Secret ns/keys of spec.verify, entry x, line 1: "),
            "{error}"
        );
        let empty =
            trusted_keys_of(&Secret::default(), "the Secret ns/keys of spec.verify").unwrap_err();
        assert_eq!(
            empty.to_string(),
            "the Secret ns/keys of spec.verify has no entry"
        );
    }
}
