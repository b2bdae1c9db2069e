//! The keys a signature may be made by: SSH public keys, as git's allowed-signers
//! file lists them (`ssh-keygen -Y verify`'s format: principals, options, key) or as
//! bare public key lines (`*.pub`), OpenPGP public keys, ASCII-armored
//! (`gpg --export --armor`), and cosign public keys (`cosign.pub`, PKIX PEM). Parsed
//! from text the caller read (a Secret's entry, a file), each problem located by where
//! the text came from and its line.

use chrono::{NaiveDate, NaiveDateTime};
use pgp::composed::{Deserializable, SignedPublicKey};
use pgp::types::KeyDetails;
use ssh_key::authorized_keys::Entry;
use ssh_key::{HashAlg, PublicKey};
use thiserror::Error;

use crate::trusted_root::{Identity, TrustedRoot, is_trusted_root, parse_trusted_root};

use p256::ecdsa::VerifyingKey;
use p256::pkcs8::{DecodePublicKey, EncodePublicKey};
use sha2::{Digest, Sha256};

/// The keys signatures are checked against. Holds public keys only.
#[derive(Clone, Debug, Default)]
pub struct TrustedKeys {
    pub(crate) ssh: Vec<AllowedSigner>,
    pub(crate) openpgp: Vec<OpenPgpKey>,
    pub(crate) cosign: Vec<CosignKey>,
    /// Private Sigstores' trusted roots: the authorities whose certificates may sign.
    pub(crate) sigstore: Vec<TrustedRoot>,
    /// Who may sign with such a certificate.
    pub(crate) identities: Vec<Identity>,
}

/// One line of an allowed-signers file: who may sign with a key, for what.
#[derive(Clone, Debug)]
pub(crate) struct AllowedSigner {
    /// The principals (`dev@example.org`), or the key's comment for a bare key line.
    pub(crate) principals: String,
    pub(crate) key: PublicKey,
    /// `namespaces="git,file"`: the namespaces the key may sign for (any, if absent).
    pub(crate) namespaces: Option<Vec<String>>,
    /// `valid-after` and `valid-before`, in seconds since the epoch (UTC).
    pub(crate) valid_after: Option<i64>,
    pub(crate) valid_before: Option<i64>,
}

/// An OpenPGP key, its bindings checked when it was read.
#[derive(Clone, Debug)]
pub(crate) struct OpenPgpKey {
    pub(crate) key: SignedPublicKey,
    /// Its first user id (`Dev <dev@example.org>`), as messages name the signer.
    pub(crate) user: String,
}

const PUBLIC_KEY_BLOCK: &str = "-----BEGIN PUBLIC KEY-----";

/// A cosign public key.
#[derive(Clone, Debug)]
pub(crate) struct CosignKey {
    pub(crate) key: VerifyingKey,
    /// `cosign sha256:…` of the key's DER encoding.
    pub(crate) name: String,
}

/// Does `text` hold a PKIX public key (cosign's `cosign.pub`)?
pub(crate) fn is_cosign_key(text: &str) -> bool {
    text.contains(PUBLIC_KEY_BLOCK)
}

/// The cosign key of `text`, or why not.
pub(crate) fn parse_key(text: &str) -> Result<CosignKey, String> {
    let key = VerifyingKey::from_public_key_pem(text.trim())
        .map_err(|e| format!("not an ECDSA P-256 public key (cosign generate-key-pair): {e}"))?;
    let der = key
        .to_public_key_der()
        .map_err(|e| format!("cannot encode the key: {e}"))?;
    Ok(CosignKey {
        key,
        name: cosign_key_name(der.as_bytes()),
    })
}

/// `cosign sha256:…`: a P-256 public key named by its DER encoding's digest.
pub(crate) fn cosign_key_name(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("cosign sha256:{hex}")
}

/// Why a text of keys could not be read. Names where it came from and the line.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("{origin}, line {line}: {reason}")]
    Ssh {
        origin: String,
        line: usize,
        reason: String,
    },
    #[error("{origin}: not an OpenPGP public key block: {reason}")]
    OpenPgp { origin: String, reason: String },
    #[error("{origin}: {reason}")]
    Cosign { origin: String, reason: String },
    #[error("{origin}: {reason}")]
    Sigstore { origin: String, reason: String },
    #[error(
        "{origin} holds no key (an allowed-signers file, SSH public keys, an armored OpenPGP public key block, a cosign public key or a Sigstore trusted root)"
    )]
    Empty { origin: String },
}

const OPENPGP_BLOCK: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";

impl TrustedKeys {
    /// The keys of `text`, from `origin` (as errors name it): an armored OpenPGP key
    /// block (several, one after the other), or lines of an allowed-signers file or
    /// of SSH public keys (`#` comments and blank lines are skipped), a cosign
    /// public key, or a Sigstore trusted root (JSON).
    pub fn parse(text: &str, origin: &str) -> Result<TrustedKeys, KeyError> {
        let keys = if is_trusted_root(text) {
            let root = parse_trusted_root(text).map_err(|reason| KeyError::Sigstore {
                origin: origin.to_string(),
                reason,
            })?;
            TrustedKeys {
                sigstore: vec![root],
                ..TrustedKeys::default()
            }
        } else if text.contains(OPENPGP_BLOCK) {
            TrustedKeys {
                openpgp: parse_openpgp(text, origin)?,
                ..TrustedKeys::default()
            }
        } else if is_cosign_key(text) {
            let key = parse_key(text).map_err(|reason| KeyError::Cosign {
                origin: origin.to_string(),
                reason,
            })?;
            TrustedKeys {
                cosign: vec![key],
                ..TrustedKeys::default()
            }
        } else {
            TrustedKeys {
                ssh: parse_ssh(text, origin)?,
                ..TrustedKeys::default()
            }
        };
        match keys.is_empty() {
            true => Err(KeyError::Empty {
                origin: origin.to_string(),
            }),
            false => Ok(keys),
        }
    }

    /// Trusts `other`'s keys too.
    pub fn add(&mut self, other: TrustedKeys) {
        self.ssh.extend(other.ssh);
        self.openpgp.extend(other.openpgp);
        self.cosign.extend(other.cosign);
        self.sigstore.extend(other.sigstore);
        self.identities.extend(other.identities);
    }

    /// Lets certificates of the trusted roots sign for `identities` (none, until
    /// told).
    pub fn trust_identities(&mut self, identities: Vec<Identity>) {
        self.identities = identities;
    }

    pub fn is_empty(&self) -> bool {
        self.ssh.is_empty()
            && self.openpgp.is_empty()
            && self.cosign.is_empty()
            && self.sigstore.is_empty()
    }

    /// Each key, as a refusal lists the keys it checked: `SHA256:… (principals)`,
    /// `OpenPGP FINGERPRINT (user id)`.
    pub fn names(&self) -> Vec<String> {
        let ssh = self
            .ssh
            .iter()
            .map(|signer| format!("{} ({})", ssh_fingerprint(&signer.key), signer.principals));
        let openpgp = self
            .openpgp
            .iter()
            .map(|key| format!("OpenPGP {} ({})", openpgp_fingerprint(&key.key), key.user));
        let cosign = self.cosign.iter().map(|key| key.name.clone());
        let sigstore = self
            .sigstore
            .iter()
            .map(|root| format!("Sigstore {}", root.name));
        let identities = self
            .identities
            .iter()
            .map(|identity| format!("identity {identity}"));
        ssh.chain(openpgp)
            .chain(cosign)
            .chain(sigstore)
            .chain(identities)
            .collect()
    }
}

/// `SHA256:…`, as `ssh-keygen -l` prints it.
pub(crate) fn ssh_fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// The upper-case hexadecimal fingerprint, as `gpg --list-keys` prints it.
pub(crate) fn openpgp_fingerprint(key: &impl KeyDetails) -> String {
    format!("{:X}", key.fingerprint())
}

fn parse_openpgp(text: &str, origin: &str) -> Result<Vec<OpenPgpKey>, KeyError> {
    let error = |reason: String| KeyError::OpenPgp {
        origin: origin.to_string(),
        reason,
    };
    let (keys, _) = SignedPublicKey::from_string_many(text).map_err(|e| error(e.to_string()))?;
    let mut read = Vec::new();
    for key in keys {
        let key = key.map_err(|e| error(e.to_string()))?;
        // A key whose self-signatures do not hold was changed since it was made.
        key.verify_bindings().map_err(|e| error(e.to_string()))?;
        let user = key
            .details
            .users
            .first()
            .map(|user| String::from_utf8_lossy(user.id.id()).into_owned())
            .unwrap_or_else(|| "no user id".into());
        read.push(OpenPgpKey { key, user });
    }
    Ok(read)
}

fn parse_ssh(text: &str, origin: &str) -> Result<Vec<AllowedSigner>, KeyError> {
    let mut signers = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let signer = parse_ssh_line(line).map_err(|reason| KeyError::Ssh {
            origin: origin.to_string(),
            line: index + 1,
            reason,
        })?;
        signers.push(signer);
    }
    Ok(signers)
}

/// A bare key line starts with its algorithm; an allowed-signers line with its
/// principals, then what `authorized_keys` would hold: options, the key, a comment.
fn parse_ssh_line(line: &str) -> Result<AllowedSigner, String> {
    let first = line.split_whitespace().next().unwrap_or_default();
    // An algorithm name may hold an `@`, as a principal does: only known ones count.
    if ssh_key::Algorithm::new(first).is_ok_and(|a| !matches!(a, ssh_key::Algorithm::Other(_))) {
        let key =
            PublicKey::from_openssh(line).map_err(|e| format!("not an SSH public key: {e}"))?;
        return Ok(AllowedSigner {
            principals: match key.comment() {
                "" => "no comment".into(),
                comment => comment.to_string(),
            },
            key,
            namespaces: None,
            valid_after: None,
            valid_before: None,
        });
    }
    let (principals, rest) = split_principals(line)?;
    let entry: Entry = rest.parse().map_err(|e| {
        format!("after the principals, expected [options] KEYTYPE BASE64 [comment]: {e}")
    })?;
    let mut signer = AllowedSigner {
        principals,
        key: entry.public_key().clone(),
        namespaces: None,
        valid_after: None,
        valid_before: None,
    };
    for option in entry.config_opts().iter() {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        let value = value.trim_matches('"');
        match name.to_ascii_lowercase().as_str() {
            "namespaces" => {
                signer.namespaces = Some(value.split(',').map(str::to_string).collect());
            }
            "valid-after" => signer.valid_after = Some(ssh_time(value)?),
            "valid-before" => signer.valid_before = Some(ssh_time(value)?),
            "cert-authority" => {
                return Err(
                    "cert-authority is not supported: list each signer's public key".into(),
                );
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(signer)
}

/// The principals field: one word, or a double-quoted one.
fn split_principals(line: &str) -> Result<(String, &str), String> {
    if let Some(quoted) = line.strip_prefix('"') {
        let (principals, rest) = quoted
            .split_once('"')
            .ok_or("the principals' closing quote is missing")?;
        return Ok((principals.to_string(), rest.trim_start()));
    }
    match line.split_once(char::is_whitespace) {
        Some((principals, rest)) => Ok((principals.to_string(), rest.trim_start())),
        None => Err("expected PRINCIPALS [options] KEYTYPE BASE64 [comment]".into()),
    }
}

/// `YYYYMMDD`, `YYYYMMDDHHMM` or `YYYYMMDDHHMMSS`, with an optional `Z`; read as UTC
/// (ssh-keygen reads a time without `Z` in its own time zone, which in a cluster is
/// UTC).
fn ssh_time(text: &str) -> Result<i64, String> {
    let digits = text.strip_suffix(['Z', 'z']).unwrap_or(text);
    let error = || format!("{text:?} is not a time (YYYYMMDD[HHMM[SS]][Z])");
    let time = match digits.len() {
        8 => NaiveDate::parse_from_str(digits, "%Y%m%d")
            .ok()
            .and_then(|day| day.and_hms_opt(0, 0, 0)),
        12 => NaiveDateTime::parse_from_str(digits, "%Y%m%d%H%M").ok(),
        14 => NaiveDateTime::parse_from_str(digits, "%Y%m%d%H%M%S").ok(),
        _ => None,
    };
    time.map(|t| t.and_utc().timestamp()).ok_or_else(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEVFxXVy0NQNolXBngUhhtAkswEp1sucLMaqQ9hMD9t3 dev@laptop";

    #[test]
    fn an_allowed_signers_file_gives_principals_options_and_keys() {
        let text = format!(
            "# the team\ndev@example.org {KEY}\n\"a@x,b@x\" namespaces=\"git\",valid-after=\"20260101\" {KEY}\n{KEY}\n"
        );
        let keys = TrustedKeys::parse(&text, "allowed_signers").unwrap();
        assert_eq!(keys.ssh.len(), 3);
        assert_eq!(keys.ssh[0].principals, "dev@example.org");
        assert_eq!(keys.ssh[1].principals, "a@x,b@x");
        assert_eq!(keys.ssh[1].namespaces, Some(vec!["git".to_string()]));
        assert_eq!(keys.ssh[1].valid_after, Some(1_767_225_600));
        assert_eq!(keys.ssh[2].principals, "dev@laptop");
        assert!(keys.names()[0].starts_with("SHA256:"), "{:?}", keys.names());
    }

    #[test]
    fn a_bad_line_is_named_by_its_origin_and_number() {
        let text =
            format!("dev@example.org {KEY}\n\ndev@example.org ssh-ed25519 AAAA-not-base64\n");
        let error = TrustedKeys::parse(&text, "the Secret ns/keys, entry allowed_signers")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("the Secret ns/keys, entry allowed_signers, line 3: "),
            "{error}"
        );
        let ca = format!("dev@example.org cert-authority {KEY}");
        let error = TrustedKeys::parse(&ca, "f").unwrap_err().to_string();
        assert!(error.contains("cert-authority is not supported"), "{error}");
    }

    #[test]
    fn text_without_keys_is_refused() {
        assert_eq!(
            TrustedKeys::parse("# nobody\n\n", "f").unwrap_err(),
            KeyError::Empty { origin: "f".into() }
        );
        let error = TrustedKeys::parse(&format!("{OPENPGP_BLOCK}\nxx\n"), "k.asc")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("k.asc: not an OpenPGP public key block"),
            "{error}"
        );
    }
}
