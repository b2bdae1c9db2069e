//! Signing what tether writes with an SSH key: the signature git makes with
//! `gpg.format=ssh` (an armored SSHSIG over the payload, SHA-512, namespace `git` for
//! commits), which `git verify-commit`, GitHub and GitLab check against the key.

use ssh_key::{HashAlg, LineEnding, PrivateKey};
use thiserror::Error;

use crate::trusted_keys::ssh_fingerprint;

/// The namespace git's SSH signatures of commits and tags are made for, and checked
/// against.
pub const GIT_NAMESPACE: &str = "git";

/// A private SSH key that signs. Its `Debug` shows the public key's fingerprint only.
pub struct SigningKey {
    key: PrivateKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("public", &self.fingerprint())
            .finish()
    }
}

/// Why a key cannot sign. Never holds the key.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SignError {
    #[error(
        "{origin} is not an OpenSSH private key (-----BEGIN OPENSSH PRIVATE KEY-----, as ssh-keygen writes it): {reason}"
    )]
    NotAKey { origin: String, reason: String },
    #[error(
        "{origin} is encrypted with a passphrase: give the key without one (ssh-keygen -p -N '' -f FILE on a copy); the Secret or file that holds it is what protects it"
    )]
    Encrypted { origin: String },
    #[error("cannot sign with {key}: {reason}")]
    Sign { key: String, reason: String },
}

impl SigningKey {
    /// The OpenSSH private key of `text`, from `origin` (as errors name it).
    pub fn parse(text: &str, origin: &str) -> Result<SigningKey, SignError> {
        let key = PrivateKey::from_openssh(text.trim()).map_err(|e| SignError::NotAKey {
            origin: origin.to_string(),
            reason: e.to_string(),
        })?;
        if key.is_encrypted() {
            return Err(SignError::Encrypted {
                origin: origin.to_string(),
            });
        }
        Ok(SigningKey { key })
    }

    /// `SHA256:…` of the public key.
    pub fn fingerprint(&self) -> String {
        ssh_fingerprint(self.key.public_key())
    }

    /// The armored signature of `payload` for `namespace` (`git` for commits).
    pub fn sign(&self, namespace: &str, payload: &[u8]) -> Result<String, SignError> {
        let error = |e: ssh_key::Error| SignError::Sign {
            key: self.fingerprint(),
            reason: e.to_string(),
        };
        self.key
            .sign(namespace, HashAlg::Sha512, payload)
            .map_err(error)?
            .to_pem(LineEnding::LF)
            .map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trusted_keys::TrustedKeys;
    use crate::verify::{Refusal, Signed, verify};

    /// The public key, one OpenSSH line (as an allowed-signers file lists it).
    fn public_key(key: &SigningKey) -> String {
        key.key.public_key().to_openssh().unwrap()
    }

    /// Made by `ssh-keygen -t ed25519 -N '' -C tether@test`.
    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACB+gcP0Q48FzsTEKl2FpR6XO49ViGewS/M0nPXzRSLRsAAAAJAUhbtAFIW7
QAAAAAtzc2gtZWQyNTUxOQAAACB+gcP0Q48FzsTEKl2FpR6XO49ViGewS/M0nPXzRSLRsA
AAAEC2ksFobWC/ffXPoT3ZpY4yvorbH2h4721VIayLMq2CzX6Bw/RDjwXOxMQqXYWlHpc7
j1WIZ7BL8zSc9fNFItGwAAAAC3RldGhlckB0ZXN0AQI=
-----END OPENSSH PRIVATE KEY-----";

    fn signed<'a>(payload: &'a [u8], signature: &'a str) -> Signed<'a> {
        Signed {
            payload,
            signature: Some(signature),
            namespace: "git",
            time: 1_800_000_000,
        }
    }

    #[test]
    fn what_it_signs_verifies_against_its_public_key_and_nothing_else_does() {
        let key = SigningKey::parse(KEY, "key").unwrap();
        let trusted =
            TrustedKeys::parse(&format!("tether@test {}", public_key(&key)), "signers").unwrap();
        let signature = key.sign("git", b"tree 1\n\nmessage\n").unwrap();
        assert!(signature.starts_with("-----BEGIN SSH SIGNATURE-----"));
        let signer = verify(&trusted, signed(b"tree 1\n\nmessage\n", &signature)).unwrap();
        assert_eq!(signer.name, "tether@test");
        assert_eq!(signer.key, key.fingerprint());
        let changed = verify(&trusted, signed(b"tree 2\n\nmessage\n", &signature)).unwrap_err();
        assert!(matches!(changed, Refusal::Invalid { .. }), "{changed}");
        let for_files = key.sign("file", b"x").unwrap();
        let other_namespace = verify(&trusted, signed(b"x", &for_files)).unwrap_err();
        assert!(
            matches!(other_namespace, Refusal::NotAllowed { .. }),
            "{other_namespace}"
        );
        let nobody = TrustedKeys::parse(
            "dev@x ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEVFxXVy0NQNolXBngUhhtAkswEp1sucLMaqQ9hMD9t3",
            "signers",
        )
        .unwrap();
        let unknown = verify(&nobody, signed(b"tree 1\n\nmessage\n", &signature)).unwrap_err();
        assert_eq!(
            unknown,
            Refusal::UnknownKey {
                key: key.fingerprint()
            }
        );
    }

    #[test]
    fn an_allowed_signers_line_limits_its_key_to_its_namespaces_and_window() {
        let key = SigningKey::parse(KEY, "key").unwrap();
        let signature = key.sign("git", b"payload").unwrap();
        let check = |options: &str| {
            let line = format!("tether@test {options} {}", public_key(&key));
            let trusted = TrustedKeys::parse(&line, "signers").unwrap();
            verify(&trusted, signed(b"payload", &signature))
        };
        // signed() says the commit was made at 1,800,000,000 s (2027-01-15).
        assert!(check("namespaces=\"file,git\",valid-after=\"20270101\"").is_ok());
        let refusals = [
            (
                "namespaces=\"file\"",
                "its allowed namespaces are file, not git",
            ),
            (
                "valid-after=\"20270201\"",
                "it signed before its valid-after time",
            ),
            (
                "valid-before=\"20261231235959Z\"",
                "it signed after its valid-before time",
            ),
        ];
        for (options, reason) in refusals {
            let refusal = check(options).unwrap_err();
            assert!(
                matches!(&refusal, Refusal::NotAllowed { reason: r, .. } if r == reason),
                "{options}: {refusal}"
            );
        }
        // The same key on a second line that allows it: one line is enough.
        let lines = format!(
            "old@test valid-before=\"20200101\" {key}\nnew@test {key}",
            key = public_key(&key)
        );
        let trusted = TrustedKeys::parse(&lines, "signers").unwrap();
        let signer = verify(&trusted, signed(b"payload", &signature)).unwrap();
        assert_eq!(signer.name, "new@test");
    }

    #[test]
    fn a_key_that_cannot_sign_is_refused_without_showing_it() {
        let error = SigningKey::parse("AAAA secret-looking text", "the Secret ns/k").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("the Secret ns/k is not an OpenSSH private key")
        );
        let key = SigningKey::parse(KEY, "key").unwrap();
        assert!(!format!("{key:?}").contains("b3BlbnNz"));
    }
}
