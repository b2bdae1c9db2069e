//! age keys: the identities that open a file's data key (read from where sops reads
//! them), and the recipients it is encrypted to.

use std::io::{Read, Write};
use std::path::PathBuf;

use age::secrecy::ExposeSecret;
use zeroize::Zeroizing;

use super::cipher::DataKey;

/// The private keys tether may decrypt with, and where each came from (for messages).
#[derive(Default)]
pub struct Keyring {
    identities: Vec<age::x25519::Identity>,
    origins: Vec<String>,
    /// How a user gives keys, in the words of the front end that made the keyring.
    given_by: Option<String>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("keys", &self.identities.len())
            .field("origins", &self.origins)
            .finish()
    }
}

/// Why keys could not be read. Never holds a key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the age keys in {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}, line {line}: not an age private key (AGE-SECRET-KEY-1…)")]
    NotAKey { origin: String, line: usize },
    #[error("{origin} holds no age private key")]
    Empty { origin: String },
    #[error("`{0}` is not an age recipient (a public key age1…)")]
    NotARecipient(String),
}

/// Variables holding keys, in the order they are read (sops reads the last two).
pub const KEY_TEXT_VARIABLES: [&str; 2] = ["TETHER_AGE_KEY", "SOPS_AGE_KEY"];
/// The variable naming a key file, as sops reads it.
pub const KEY_FILE_VARIABLE: &str = "SOPS_AGE_KEY_FILE";

impl Keyring {
    /// Keys from the text of a key file (as `age-keygen` writes it: comments, one
    /// `AGE-SECRET-KEY-1…` per line); `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, KeyError> {
        let mut keyring = Keyring::default();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let identity =
                line.parse::<age::x25519::Identity>()
                    .map_err(|_| KeyError::NotAKey {
                        origin: origin.to_string(),
                        line: index + 1,
                    })?;
            keyring.identities.push(identity);
        }
        if keyring.identities.is_empty() {
            return Err(KeyError::Empty {
                origin: origin.to_string(),
            });
        }
        keyring.origins.push(origin.to_string());
        Ok(keyring)
    }

    pub fn add(&mut self, other: Keyring) {
        self.identities.extend(other.identities);
        self.origins.extend(other.origins);
    }

    pub fn is_empty(&self) -> bool {
        self.identities.is_empty()
    }

    /// Where the keys came from, for a message that says which were tried.
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// Says how a user gives this keyring its keys, in the words of the front end
    /// that made it (the CLI's flags and variables; a Source's Secret): the hint of a
    /// file that no key was given for.
    pub fn given_by(mut self, how: impl Into<String>) -> Self {
        self.given_by = Some(how.into());
        self
    }

    /// How a user gives keys, when the front end said so.
    pub fn how_to_give(&self) -> Option<&str> {
        self.given_by.as_deref()
    }

    /// The data key sealed for one of these identities in an armored age file.
    pub fn open_data_key(&self, armored: &str) -> Result<DataKey, DataKeyError> {
        let reader = age::armor::ArmoredReader::new(armored.as_bytes());
        let decryptor = age::Decryptor::new(reader).map_err(|_| DataKeyError::Malformed)?;
        let mut plain = Zeroizing::new(Vec::new());
        decryptor
            .decrypt(self.identities.iter().map(|i| i as &dyn age::Identity))
            .map_err(|_| DataKeyError::NoMatchingKey)?
            .read_to_end(&mut plain)
            .map_err(|_| DataKeyError::Malformed)?;
        DataKey::from_bytes(&plain).ok_or(DataKeyError::Malformed)
    }
}

/// Why a data key did not open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataKeyError {
    Malformed,
    NoMatchingKey,
}

/// A public key files are encrypted to.
#[derive(Clone, Debug)]
pub struct Recipient(age::x25519::Recipient);

impl Recipient {
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        text.trim()
            .parse()
            .map(Recipient)
            .map_err(|_| KeyError::NotARecipient(text.trim().to_string()))
    }

    pub fn to_text(&self) -> String {
        self.0.to_string()
    }

    /// The data key sealed for this recipient, armored as sops stores it.
    pub fn seal_data_key(&self, key: &DataKey) -> std::io::Result<String> {
        let encryptor =
            age::Encryptor::with_recipients(std::iter::once(&self.0 as &dyn age::Recipient))
                .map_err(std::io::Error::other)?;
        let armored =
            age::armor::ArmoredWriter::wrap_output(Vec::new(), age::armor::Format::AsciiArmor)?;
        let mut writer = encryptor.wrap_output(armored)?;
        writer.write_all(key.bytes())?;
        let bytes = writer.finish()?.finish()?;
        String::from_utf8(bytes).map_err(std::io::Error::other)
    }
}

/// A new key pair made at `now`: the private key's file text (as `age-keygen` writes
/// it) and the public key.
pub fn generate(now: chrono::DateTime<chrono::Utc>) -> (Zeroizing<String>, String) {
    let identity = age::x25519::Identity::generate();
    let public = identity.to_public().to_string();
    let created = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let text = format!(
        "# created: {created}\n# public key: {public}\n{}\n",
        identity.to_string().expose_secret()
    );
    (Zeroizing::new(text), public)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_key_sealed_for_a_recipient_opens_with_its_identity_only() {
        let (text, public) = generate(chrono::DateTime::UNIX_EPOCH);
        let keyring = Keyring::parse(&text, "test").unwrap();
        let recipient = Recipient::parse(&public).unwrap();
        let key = DataKey::generate();
        let armored = recipient.seal_data_key(&key).unwrap();
        assert!(armored.starts_with("-----BEGIN AGE ENCRYPTED FILE-----"));
        let opened = keyring.open_data_key(&armored).unwrap();
        assert_eq!(opened.bytes(), key.bytes());
        let (other, _) = generate(chrono::DateTime::UNIX_EPOCH);
        let other = Keyring::parse(&other, "other").unwrap();
        assert_eq!(
            other.open_data_key(&armored).err(),
            Some(DataKeyError::NoMatchingKey)
        );
    }

    #[test]
    fn a_bad_key_line_is_named_by_line_never_shown() {
        let error = Keyring::parse("# comment\nAGE-SECRET-KEY-1NOTAKEY\n", "keys.txt")
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            error,
            "keys.txt, line 2: not an age private key (AGE-SECRET-KEY-1…)"
        );
        assert!(Keyring::parse("# only a comment\n", "k").is_err());
    }
}
