//! [`OciError`]: why a pull from (or a push to) a registry failed, and whether trying
//! again may help.

use std::path::PathBuf;

use thiserror::Error;

use super::archive;
use super::reference::ReferenceError;

#[derive(Debug, Error)]
pub enum OciError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("cannot reach the registry of {reference}")]
    Unreachable {
        reference: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the registry of {reference} asks for credentials, and none were given")]
    CredentialsNeeded { reference: String },
    #[error("the registry of {reference} refused the credentials (HTTP {status})")]
    Unauthorized { reference: String, status: u16 },
    #[error("{reference} does not exist in the registry")]
    NotFound { reference: String },
    #[error("the registry answered HTTP {status} to {what} of {reference}: {body}")]
    Status {
        reference: String,
        what: &'static str,
        status: u16,
        body: String,
    },
    #[error(
        "{reference}: {what} has digest {actual}, not the {expected} it was asked for; nothing is read from it"
    )]
    WrongDigest {
        reference: String,
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{reference}: {what} is malformed: {why}")]
    Malformed {
        reference: String,
        what: String,
        why: String,
    },
    #[error("{reference} is not a Flux artifact: {why}")]
    NotFluxArtifact { reference: String, why: String },
    #[error("{reference}: {what} is larger than {limit} bytes")]
    TooLarge {
        reference: String,
        what: String,
        limit: u64,
    },
    #[error("{reference}: the artifact's content is refused")]
    Archive {
        reference: String,
        #[source]
        source: archive::ArchiveError,
    },
    #[error("{reference}: the models path {path} leaves the artifact")]
    PathLeaves { reference: String, path: PathBuf },
    /// The artifact is not signed by a trusted cosign key: nothing of it is read.
    #[error(
        "{reference} ({digest}) is not verified: {refusal}; trusted keys: {}",
        match keys.is_empty() { true => "none".to_string(), false => keys.join(", ") }
    )]
    Unverified {
        reference: String,
        digest: String,
        refusal: Box<tether_trust::verify::Refusal>,
        keys: Vec<String>,
    },
    #[error("cannot write the artifact cache {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl OciError {
    /// Will the same pull fail again until someone pushes another artifact or changes
    /// the source (a reference that cannot be parsed, content that is refused)? A
    /// registry that is down, a missing tag or refused credentials may pass with time.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            OciError::Reference(_)
                | OciError::PathLeaves { .. }
                | OciError::WrongDigest { .. }
                | OciError::NotFluxArtifact { .. }
                | OciError::Malformed { .. }
                | OciError::TooLarge { .. }
                | OciError::Archive { .. }
                | OciError::Unverified { .. }
        )
    }
}
