//! What a Flux artifact is made of: the media types and annotations of its manifest,
//! the manifest and its blob descriptors, and the digest that names each.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::oci_error::OciError;
use super::reference::Reference;

/// The media type of a Flux artifact's config.
pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
/// The media type of a Flux artifact's one layer: a gzipped tar of the directory.
pub const FLUX_CONTENT: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
/// The media type of the manifest tether pushes (and asks for first).
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Where the artifact says it was built from (`--source`).
pub const SOURCE_ANNOTATION: &str = "org.opencontainers.image.source";
/// The revision of that source (`--revision`, e.g. `main@sha1:…`).
pub const REVISION_ANNOTATION: &str = "org.opencontainers.image.revision";

/// A descriptor: what a manifest says of one blob.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

/// An OCI image manifest, as much of it as an artifact needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// What the artifact is (OCI 1.1), when it is not an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl Manifest {
    /// The one content layer of a Flux artifact, or why this is not one.
    pub(super) fn flux_layer(&self, reference: &Reference) -> Result<&Descriptor, OciError> {
        let refuse = |why: String| OciError::NotFluxArtifact {
            reference: reference.to_string(),
            why,
        };
        if self.config.media_type != FLUX_CONFIG {
            return Err(refuse(format!(
                "its config's media type is {}, not {FLUX_CONFIG}",
                self.config.media_type
            )));
        }
        match self.layers.as_slice() {
            [layer] if layer.media_type == FLUX_CONTENT => Ok(layer),
            [layer] => Err(refuse(format!(
                "its layer's media type is {}, not {FLUX_CONTENT}",
                layer.media_type
            ))),
            layers => Err(refuse(format!(
                "it has {} layers, not one {FLUX_CONTENT}",
                layers.len()
            ))),
        }
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}
