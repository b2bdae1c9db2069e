//! Whether the commit a Git source is about to read was signed by a trusted key
//! (Flux's `spec.verify`): the head commit, the tag the ref names, or both. Reads the
//! signed bytes and the signature out of the commit or tag object as git does (`git
//! verify-commit`, `git verify-tag`), then asks [`tether_trust::verify`]. What is
//! verified is what is read: a verified commit whose parents are not is still
//! trusted. Blocking (git2).

use std::sync::Arc;

use git2::{Oid, Repository};
use tether_trust::trusted_keys::TrustedKeys;
use tether_trust::verify::{Refusal, Signed, Signer, verify};

use tether_trust::sign::GIT_NAMESPACE;
use thiserror::Error;

/// What must be signed (Flux's modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyMode {
    /// The commit the ref names.
    Head,
    /// The annotated tag the ref names (the ref must be a tag).
    Tag,
    /// Both.
    TagAndHead,
}

/// A source's verification: what must be signed, and by which keys.
#[derive(Clone, Debug)]
pub struct Verification {
    pub mode: VerifyMode,
    pub keys: Arc<TrustedKeys>,
}

/// Who signed what a source read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The head commit's signer (modes Head and TagAndHead).
    pub commit: Option<Signer>,
    /// The tag's name and signer (modes Tag and TagAndHead).
    pub tag: Option<(String, Signer)>,
}

/// Why a commit is not read: it (or its tag) is not signed by a trusted key, the
/// mode asks for a tag the ref does not name, or Git could not be read.
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error("{0}")]
    Unverified(Box<Unverified>),
    #[error(
        "\"{reference}\" cannot be verified as a tag: {why} (mode Tag and TagAndHEAD need a ref that names an annotated, signed tag)"
    )]
    NotATag { reference: String, why: String },
    #[error("git failed")]
    Git(#[from] git2::Error),
}

impl VerifyError {
    /// Whether reading again cannot help until the ref, the keys or the mode change.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, VerifyError::Git(_))
    }
}

impl std::fmt::Display for Verified {
    /// `tag v1.2.0 signed by …; commit signed by …`, as the CLI and the log say it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = self
            .tag
            .iter()
            .map(|(name, signer)| format!("tag {name} signed by {signer}"));
        let commit = self
            .commit
            .iter()
            .map(|signer| format!("commit signed by {signer}"));
        write!(f, "{}", tag.chain(commit).collect::<Vec<_>>().join("; "))
    }
}

/// A commit or tag that is not signed by a trusted key: nothing of it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unverified {
    /// The commit the ref names.
    pub commit: String,
    /// What was checked: `commit 1a2b3c4` or `tag v1.2.0`.
    pub object: String,
    pub refusal: Refusal,
    /// The trusted keys it was checked against.
    pub keys: Vec<String>,
}

impl std::fmt::Display for Unverified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is not verified: {}; trusted keys: {}",
            self.object,
            self.refusal,
            match self.keys.is_empty() {
                true => "none".to_string(),
                false => self.keys.join(", "),
            }
        )
    }
}

/// Checks `commit`, which `reference` names, as `verification` asks.
pub(crate) fn check(
    repo: &Repository,
    reference: Option<&str>,
    commit: Oid,
    verification: &Verification,
) -> Result<Verified, VerifyError> {
    let keys = &verification.keys;
    let unverified = |object: String, refusal: Refusal| {
        VerifyError::Unverified(Box::new(Unverified {
            commit: commit.to_string(),
            object,
            refusal,
            keys: keys.names(),
        }))
    };
    let mut verified = Verified {
        commit: None,
        tag: None,
    };
    if matches!(verification.mode, VerifyMode::Tag | VerifyMode::TagAndHead) {
        let (name, tag) = annotated_tag(repo, reference, commit)?;
        let (payload, signature, time) = tag_signature(repo, tag)?;
        let signed = Signed {
            payload: &payload,
            signature: signature.as_deref(),
            namespace: GIT_NAMESPACE,
            time,
        };
        let signer = verify(keys, signed).map_err(|r| unverified(format!("tag {name}"), r))?;
        verified.tag = Some((name, signer));
    }
    if matches!(verification.mode, VerifyMode::Head | VerifyMode::TagAndHead) {
        let (payload, signature, time) = commit_signature(repo, commit)?;
        let signed = Signed {
            payload: &payload,
            signature: signature.as_deref(),
            namespace: GIT_NAMESPACE,
            time,
        };
        let object = format!("commit {}", short(commit));
        verified.commit = Some(verify(keys, signed).map_err(|r| unverified(object, r))?);
    }
    Ok(verified)
}

fn short(commit: Oid) -> String {
    commit.to_string().chars().take(12).collect()
}

/// The annotated tag `reference` names, which must point at `commit`.
fn annotated_tag(
    repo: &Repository,
    reference: Option<&str>,
    commit: Oid,
) -> Result<(String, Oid), VerifyError> {
    let not_a_tag = |why: &str| VerifyError::NotATag {
        reference: reference.unwrap_or("HEAD").to_string(),
        why: why.to_string(),
    };
    let name = reference.ok_or_else(|| not_a_tag("no ref is given"))?;
    let found = repo
        .find_reference(&format!("refs/tags/{name}"))
        .map_err(|_| not_a_tag("it is not a tag"))?;
    let tag = found
        .peel_to_tag()
        .map_err(|_| not_a_tag("it is a lightweight tag, which cannot be signed"))?;
    if tag.target_id() != commit {
        return Err(not_a_tag("the tag moved while it was read"));
    }
    Ok((name.to_string(), tag.id()))
}

/// A commit's signed bytes, its signature (if any) and its committer's time.
fn commit_signature(
    repo: &Repository,
    commit: Oid,
) -> Result<(Vec<u8>, Option<String>, i64), VerifyError> {
    let time = repo.find_commit(commit)?.committer().when().seconds();
    match repo.extract_signature(&commit, None) {
        Ok((signature, payload)) => Ok((
            payload.to_vec(),
            Some(String::from_utf8_lossy(&signature).into_owned()),
            time,
        )),
        Err(e) if e.code() == git2::ErrorCode::NotFound => {
            let payload = repo.odb()?.read(commit)?.data().to_vec();
            Ok((payload, None, time))
        }
        Err(e) => Err(e.into()),
    }
}

/// A tag's signed bytes, its signature (if any) and its tagger's time: git appends
/// the signature to the tag's message, and signs everything before it.
fn tag_signature(
    repo: &Repository,
    tag: Oid,
) -> Result<(Vec<u8>, Option<String>, i64), VerifyError> {
    let time = repo
        .find_tag(tag)?
        .tagger()
        .map_or(0, |tagger| tagger.when().seconds());
    let data = repo.odb()?.read(tag)?.data().to_vec();
    let (payload, signature) = split_tag(&data);
    Ok((
        payload.to_vec(),
        signature.map(|s| String::from_utf8_lossy(s).into_owned()),
        time,
    ))
}

/// A tag object's bytes split where its signature begins: the first line that opens
/// an armored signature (git's `parse_signature`).
fn split_tag(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    let mut start = 0;
    while start < data.len() {
        let line = &data[start..];
        if line.starts_with(b"-----BEGIN PGP SIGNATURE-----")
            || line.starts_with(b"-----BEGIN SSH SIGNATURE-----")
            || line.starts_with(b"-----BEGIN SIGNED MESSAGE-----")
        {
            return (&data[..start], Some(&data[start..]));
        }
        match line.iter().position(|&b| b == b'\n') {
            Some(end) => start += end + 1,
            None => break,
        }
    }
    (data, None)
}

#[cfg(test)]
mod tests {
    use super::split_tag;

    #[test]
    fn a_tag_splits_before_the_first_line_that_opens_a_signature() {
        let tag = b"object 1\ntype commit\ntag v1\n\nrelease\n-----BEGIN SSH SIGNATURE-----\nabc\n-----END SSH SIGNATURE-----\n";
        let (payload, signature) = split_tag(tag);
        assert_eq!(payload, b"object 1\ntype commit\ntag v1\n\nrelease\n");
        assert!(signature.unwrap().starts_with(b"-----BEGIN SSH"));
        let mentioned = b"object 1\n\nsee -----BEGIN SSH SIGNATURE----- below\n";
        assert_eq!(split_tag(mentioned), (&mentioned[..], None));
    }
}
