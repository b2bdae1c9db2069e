//! Is a signature over some bytes made by a trusted key? One function, [`verify`],
//! for both formats git signs with: SSH signatures (`-----BEGIN SSH SIGNATURE-----`,
//! as `ssh-keygen -Y verify` checks them: the key among the allowed signers, the
//! namespace, the validity window at the signing time) and OpenPGP signatures
//! (`-----BEGIN PGP SIGNATURE-----`: the issuer among the trusted keys or their
//! subkeys, none revoked). The answer names the signer, or why not.

use pgp::composed::{Deserializable, DetachedSignature};
use pgp::types::KeyDetails;
use ssh_key::{PublicKey, SshSig};
use thiserror::Error;

use crate::trusted_keys::{
    AllowedSigner, OpenPgpKey, TrustedKeys, openpgp_fingerprint, ssh_fingerprint,
};

/// What is checked: the bytes signed and the signature over them (armored), if any.
#[derive(Clone, Copy, Debug)]
pub struct Signed<'a> {
    pub payload: &'a [u8],
    pub signature: Option<&'a str>,
    /// What the signature is for (`git` for commits and tags): an SSH signature names
    /// its namespace, and one made for another purpose is refused.
    pub namespace: &'a str,
    /// When it was signed, as the signed object says (a commit's committer time), in
    /// seconds since the epoch: an allowed signer's validity window is checked at it.
    pub time: i64,
}

/// Who signed: the key's fingerprint, and the name the trusted keys give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signer {
    /// `SHA256:…` for SSH, the fingerprint for OpenPGP.
    pub key: String,
    /// The allowed signer's principals, or the OpenPGP key's user id.
    pub name: String,
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.key, self.name)
    }
}

/// Why a signature is not trusted.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("it is not signed")]
    Unsigned,
    #[error("it is signed by {key}, which is not among the trusted keys")]
    UnknownKey { key: String },
    #[error("its signature by {signer} does not match its content: {reason}")]
    Invalid { signer: Signer, reason: String },
    #[error("it is signed by {signer}, which may not sign it: {reason}")]
    NotAllowed { signer: Signer, reason: String },
    #[error("its signature cannot be read: {0}")]
    Unreadable(String),
}

const SSH_SIGNATURE: &str = "-----BEGIN SSH SIGNATURE-----";
const OPENPGP_SIGNATURE: &str = "-----BEGIN PGP SIGNATURE-----";

/// The trusted signer of `signed`, or why there is none.
pub fn verify(keys: &TrustedKeys, signed: Signed<'_>) -> Result<Signer, Refusal> {
    let Some(signature) = signed.signature.map(str::trim_start) else {
        return Err(Refusal::Unsigned);
    };
    if signature.starts_with(SSH_SIGNATURE) {
        verify_ssh(&keys.ssh, signature, signed)
    } else if signature.starts_with(OPENPGP_SIGNATURE) {
        verify_openpgp(&keys.openpgp, signature, signed.payload)
    } else {
        let format = signature.lines().next().unwrap_or_default();
        Err(Refusal::Unreadable(format!(
            "{format:?} is neither an SSH nor an OpenPGP signature (X.509 signatures are not checked)"
        )))
    }
}

fn verify_ssh(
    signers: &[AllowedSigner],
    signature: &str,
    signed: Signed<'_>,
) -> Result<Signer, Refusal> {
    let sig = SshSig::from_pem(signature).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let key = PublicKey::from(sig.public_key().clone());
    let fingerprint = ssh_fingerprint(&key);
    let allowed: Vec<&AllowedSigner> = signers
        .iter()
        .filter(|s| s.key.key_data() == key.key_data())
        .collect();
    if allowed.is_empty() {
        return Err(Refusal::UnknownKey { key: fingerprint });
    }
    let signer = |s: &AllowedSigner| Signer {
        key: fingerprint.clone(),
        name: s.principals.clone(),
    };
    // Checked first: a signature that does not match says so, whoever may sign.
    key.verify(sig.namespace(), signed.payload, &sig)
        .map_err(|e| Refusal::Invalid {
            signer: signer(allowed[0]),
            reason: e.to_string(),
        })?;
    if sig.namespace() != signed.namespace {
        return Err(Refusal::NotAllowed {
            signer: signer(allowed[0]),
            reason: format!(
                "it was signed for {:?}, not {:?}",
                sig.namespace(),
                signed.namespace
            ),
        });
    }
    // The same key may be listed more than once (principals, windows): one line that
    // allows it is enough, as for ssh-keygen.
    let mut why_not = String::new();
    for line in &allowed {
        match may_sign(line, signed) {
            Ok(()) => return Ok(signer(line)),
            Err(reason) => why_not = reason,
        }
    }
    Err(Refusal::NotAllowed {
        signer: signer(allowed[0]),
        reason: why_not,
    })
}

/// Whether an allowed-signers line lets its key sign for this namespace at this time.
fn may_sign(line: &AllowedSigner, signed: Signed<'_>) -> Result<(), String> {
    if let Some(namespaces) = &line.namespaces
        && !namespaces.iter().any(|n| n == signed.namespace)
    {
        return Err(format!(
            "its allowed namespaces are {}, not {}",
            namespaces.join(","),
            signed.namespace
        ));
    }
    if line.valid_after.is_some_and(|after| signed.time < after) {
        return Err("it signed before its valid-after time".into());
    }
    if line.valid_before.is_some_and(|before| signed.time > before) {
        return Err("it signed after its valid-before time".into());
    }
    Ok(())
}

fn verify_openpgp(keys: &[OpenPgpKey], signature: &str, payload: &[u8]) -> Result<Signer, Refusal> {
    let (sig, _) = DetachedSignature::from_string(signature)
        .map_err(|e| Refusal::Unreadable(e.to_string()))?;
    verify_openpgp_signature(keys, &sig.signature, payload)
}

/// The trusted OpenPGP key that made `sig` over `payload` (a detached signature's
/// bytes, or a cleartext-signed message's normalized text), or why none did.
pub(crate) fn verify_openpgp_signature(
    keys: &[OpenPgpKey],
    sig: &pgp::packet::Signature,
    payload: &[u8],
) -> Result<Signer, Refusal> {
    let fingerprints: Vec<String> = sig
        .issuer_fingerprint()
        .iter()
        .map(|f| format!("{f:X}"))
        .collect();
    let key_ids: Vec<pgp::types::KeyId> = sig.issuer_key_id().into_iter().copied().collect();
    let issued = |key: &dyn IssuerOf| key.issued(&fingerprints, &key_ids);
    for trusted in keys {
        let signer = || Signer {
            key: openpgp_fingerprint(&trusted.key),
            name: trusted.user.clone(),
        };
        let check = |result: pgp::errors::Result<()>| match result {
            Err(e) => Err(Refusal::Invalid {
                signer: signer(),
                reason: e.to_string(),
            }),
            Ok(()) if !trusted.key.details.revocation_signatures.is_empty() => {
                Err(Refusal::NotAllowed {
                    signer: signer(),
                    reason: "the key is revoked".into(),
                })
            }
            Ok(()) => Ok(signer()),
        };
        let not_for_signing = || {
            Refusal::NotAllowed {
            signer: signer(),
            reason: "its key flags do not let it sign (gpg says \"Wrong key usage\"): sign with a subkey or a primary key made for signing".into(),
        }
        };
        if issued(&trusted.key) {
            let details = &trusted.key.details;
            let self_signatures = details
                .direct_signatures
                .iter()
                .chain(details.users.iter().flat_map(|u| &u.signatures));
            return check(sig.verify(&trusted.key, payload)).and_then(|signer| {
                flags_let_sign(self_signatures)
                    .then_some(signer)
                    .ok_or_else(not_for_signing)
            });
        }
        if let Some(subkey) = trusted.key.public_subkeys.iter().find(|s| issued(*s)) {
            return check(sig.verify(subkey, payload)).and_then(|signer| {
                flags_let_sign(&subkey.signatures)
                    .then_some(signer)
                    .ok_or_else(not_for_signing)
            });
        }
    }
    Err(Refusal::UnknownKey {
        key: fingerprints
            .first()
            .cloned()
            .or(key_ids.first().map(|id| id.to_string().to_uppercase()))
            .map(|id| format!("OpenPGP {id}"))
            .unwrap_or_else(|| "an OpenPGP key the signature does not name".into()),
    })
}

/// Whether a key's self-signatures (or a subkey's binding signatures) let it sign:
/// when they give key flags, `sign` must be among them; a key whose signatures give
/// none may sign, as for gpg.
fn flags_let_sign<'a>(signatures: impl IntoIterator<Item = &'a pgp::packet::Signature>) -> bool {
    let given: Vec<pgp::packet::KeyFlags> = signatures
        .into_iter()
        .map(|s| s.key_flags())
        .filter(|flags| *flags != pgp::packet::KeyFlags::default())
        .collect();
    given.is_empty() || given.iter().any(pgp::packet::KeyFlags::sign)
}

/// A key or subkey that a signature's issuer subpackets may name.
trait IssuerOf {
    fn issued(&self, fingerprints: &[String], key_ids: &[pgp::types::KeyId]) -> bool;
}

impl<K: KeyDetails> IssuerOf for K {
    fn issued(&self, fingerprints: &[String], key_ids: &[pgp::types::KeyId]) -> bool {
        fingerprints.contains(&openpgp_fingerprint(self)) || key_ids.contains(&self.legacy_key_id())
    }
}
