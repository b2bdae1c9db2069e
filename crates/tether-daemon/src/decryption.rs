//! The age keys a Source decrypts its repository with: the `.agekey` entries of the
//! Secret its `spec.decryption` names (Flux's convention), read before each pass that
//! loads the models, so that a rotated key is used without a restart. A Source uses
//! its own Secret's keys only, never the daemon's: one team's Source cannot open files
//! encrypted for another's key.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use zeroize::Zeroizing;

use tether_sops::{KeyError, Keyring};

/// The suffix of the Secret entries that hold age keys.
pub(crate) const AGE_KEY_SUFFIX: &str = ".agekey";

/// The Secret a Source's keys are read from.
pub(crate) struct DecryptionSecret {
    api: Api<Secret>,
    /// `namespace/name`, for messages.
    display: String,
    name: String,
}

/// Why a Source's keys could not be read. Never holds a key.
#[derive(Debug, thiserror::Error)]
pub enum DecryptionKeysError {
    #[error("cannot read the decryption Secret {secret}")]
    Read {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the decryption Secret {secret} has no entry ending in {AGE_KEY_SUFFIX} (it has: {entries})"
    )]
    NoKeys { secret: String, entries: String },
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl DecryptionSecret {
    pub(crate) fn new(client: Client, namespace: &str, name: &str) -> Self {
        DecryptionSecret {
            api: Api::namespaced(client, namespace),
            display: format!("{namespace}/{name}"),
            name: name.to_string(),
        }
    }

    pub(crate) async fn read(&self) -> Result<Keyring, DecryptionKeysError> {
        let secret =
            self.api
                .get(&self.name)
                .await
                .map_err(|source| DecryptionKeysError::Read {
                    secret: self.display.clone(),
                    source,
                })?;
        keyring_of(&secret, &self.display)
    }
}

/// How a Source is given its keys, for the hint of a file no key was given for.
pub(crate) const GIVEN_BY: &str = "a Secret named in the Source's spec.decryption.secretRef";

/// The keys of a Secret's `.agekey` entries; `display` names the Secret in errors.
pub(crate) fn keyring_of(secret: &Secret, display: &str) -> Result<Keyring, DecryptionKeysError> {
    let data = secret.data.as_ref();
    let mut keyring = Keyring::default();
    let entries = data
        .into_iter()
        .flatten()
        .filter(|(entry, _)| entry.ends_with(AGE_KEY_SUFFIX));
    for (entry, value) in entries {
        let text = Zeroizing::new(String::from_utf8_lossy(&value.0).into_owned());
        keyring.add(Keyring::parse(
            &text,
            &format!("the Secret {display}, entry {entry}"),
        )?);
    }
    if keyring.is_empty() {
        let names: Vec<&str> = data
            .into_iter()
            .flat_map(|d| d.keys().map(String::as_str))
            .collect();
        return Err(DecryptionKeysError::NoKeys {
            secret: display.to_string(),
            entries: match names.is_empty() {
                true => "no entry".into(),
                false => names.join(", "),
            },
        });
    }
    Ok(keyring.given_by(GIVEN_BY))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    /// A Secret of these entries.
    pub(crate) fn secret(entries: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn every_agekey_entry_is_read_and_other_entries_are_left() {
        let (one, _) = tether_sops::keys::generate(chrono::Utc::now());
        let (two, _) = tether_sops::keys::generate(chrono::Utc::now());
        let both = format!("# created: now\n{}\n", two.as_str());
        let keys = keyring_of(
            &secret(&[
                ("age.agekey", one.as_str()),
                ("team.agekey", &both),
                ("pgp.asc", "not an age key"),
            ]),
            "ns/keys",
        )
        .unwrap();
        assert_eq!(
            keys.origins(),
            [
                "the Secret ns/keys, entry age.agekey",
                "the Secret ns/keys, entry team.agekey"
            ]
        );
    }

    #[test]
    fn a_secret_without_keys_or_with_a_bad_key_says_so_without_the_value() {
        let none = keyring_of(&secret(&[("token", "hunter22")]), "ns/keys").unwrap_err();
        assert_eq!(
            none.to_string(),
            "the decryption Secret ns/keys has no entry ending in .agekey (it has: token)"
        );
        let bad = keyring_of(&secret(&[("age.agekey", "hunter22")]), "ns/keys").unwrap_err();
        let message = bad.to_string();
        assert!(
            message.contains("entry age.agekey, line 1: not an age private key"),
            "{message}"
        );
        assert!(!message.contains("hunter22"), "{message}");
    }
}
