//! A Helm chart's provenance file, as `helm package --sign` writes it beside the
//! archive (`hello-1.2.3.tgz.prov`): a cleartext-signed OpenPGP message whose text is
//! the chart's `Chart.yaml`, a `...` line, and the SHA-256 of each archive it vouches
//! for. [`verify_provenance`] checks it as `helm verify` does: the signature is a
//! trusted key's, and the archive about to be rendered is the one it names. Nothing
//! of the text is read before its signature is checked.

use std::collections::BTreeMap;

use pgp::composed::CleartextSignedMessage;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::trusted_keys::TrustedKeys;
use crate::verify::{Refusal, Signer, verify_openpgp_signature};

/// What a verified provenance file says: the chart it is of, and who signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    pub name: String,
    pub version: String,
    pub signer: Signer,
}

/// Why a chart's archive is not vouched for by its provenance file.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ProvenanceError {
    #[error("its provenance file: {0}")]
    Refused(Refusal),
    #[error("its provenance file cannot be read: {0}")]
    Unreadable(String),
    #[error("its provenance file, signed by {signer}, names no digest for {archive}")]
    NotNamed { archive: String, signer: Signer },
    #[error(
        "the archive is not the {archive} its provenance file signed by {signer} vouches for: its digest is sha256:{actual}, the file says {signed}"
    )]
    Changed {
        archive: String,
        signer: Signer,
        signed: String,
        actual: String,
    },
}

#[derive(Deserialize)]
struct ChartMeta {
    name: String,
    version: String,
}

#[derive(Deserialize)]
struct Files {
    files: BTreeMap<String, String>,
}

/// Whether `prov` (the provenance file's text) is signed by one of `keys` and vouches
/// for `archive`'s bytes under the file name `archive_name`.
pub fn verify_provenance(
    keys: &TrustedKeys,
    prov: &str,
    archive_name: &str,
    archive: &[u8],
) -> Result<Provenance, ProvenanceError> {
    let (message, _) = CleartextSignedMessage::from_string(prov)
        .map_err(|e| ProvenanceError::Unreadable(e.to_string()))?;
    let text = message.signed_text();
    let mut refusal = Refusal::Unsigned;
    let mut signer = None;
    for signature in message.signatures() {
        match verify_openpgp_signature(&keys.openpgp, signature, text.as_bytes()) {
            Ok(trusted) => {
                signer = Some(trusted);
                break;
            }
            Err(why) => refusal = why,
        }
    }
    let signer = signer.ok_or(ProvenanceError::Refused(refusal))?;
    // Only now is the text read: it is the signer's.
    let text = text.replace("\r\n", "\n");
    let (chart, files) = text.split_once("\n...\n").ok_or_else(|| {
        ProvenanceError::Unreadable("it has no `...` line after the chart".into())
    })?;
    let unreadable =
        |what: &str, e: serde_saphyr::Error| ProvenanceError::Unreadable(format!("{what}: {e}"));
    let chart: ChartMeta = serde_saphyr::from_str(chart).map_err(|e| unreadable("its chart", e))?;
    let files: Files = serde_saphyr::from_str(files).map_err(|e| unreadable("its files", e))?;
    let Some(signed) = files.files.get(archive_name) else {
        return Err(ProvenanceError::NotNamed {
            archive: archive_name.to_string(),
            signer,
        });
    };
    let actual: String = Sha256::digest(archive)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if signed.strip_prefix("sha256:") != Some(actual.as_str()) {
        return Err(ProvenanceError::Changed {
            archive: archive_name.to_string(),
            signer,
            signed: signed.clone(),
            actual,
        });
    }
    Ok(Provenance {
        name: chart.name,
        version: chart.version,
        signer,
    })
}

#[cfg(test)]
mod tests {
    //! Against a chart and its provenance file made by `helm package --sign` (Helm
    //! 4.1.4, an RSA key made by gpg), kept in `testdata/`.

    use super::*;

    const ARCHIVE: &[u8] = include_bytes!("../testdata/hello-1.2.3.tgz");
    const PROV: &str = include_str!("../testdata/hello-1.2.3.tgz.prov");

    fn keys(file: &str) -> TrustedKeys {
        let text = match file {
            "charts" => include_str!("../testdata/charts.asc"),
            "certify-only" => include_str!("../testdata/certify-only.asc"),
            _ => include_str!("../testdata/other.asc"),
        };
        TrustedKeys::parse(text, file).unwrap()
    }

    #[test]
    fn helms_provenance_file_vouches_for_its_archive() {
        let provenance =
            verify_provenance(&keys("charts"), PROV, "hello-1.2.3.tgz", ARCHIVE).unwrap();
        assert_eq!(provenance.name, "hello");
        assert_eq!(provenance.version, "1.2.3");
        assert_eq!(provenance.signer.name, "Charts <charts@example.org>");
    }

    #[test]
    fn a_changed_archive_is_refused_naming_both_digests() {
        let mut changed = ARCHIVE.to_vec();
        changed.push(0);
        let error =
            verify_provenance(&keys("charts"), PROV, "hello-1.2.3.tgz", &changed).unwrap_err();
        assert!(matches!(error, ProvenanceError::Changed { .. }), "{error}");
        assert!(error.to_string().contains("sha256:68da170a"), "{error}");
    }

    #[test]
    fn another_key_a_changed_text_and_another_archive_name_are_refused() {
        let error =
            verify_provenance(&keys("other"), PROV, "hello-1.2.3.tgz", ARCHIVE).unwrap_err();
        assert!(
            matches!(error, ProvenanceError::Refused(Refusal::UnknownKey { .. })),
            "{error}"
        );
        let forged = PROV.replace("version: 1.2.3", "version: 1.2.4");
        let error =
            verify_provenance(&keys("charts"), &forged, "hello-1.2.3.tgz", ARCHIVE).unwrap_err();
        assert!(
            matches!(error, ProvenanceError::Refused(Refusal::Invalid { .. })),
            "{error}"
        );
        let error =
            verify_provenance(&keys("charts"), PROV, "hello-9.9.9.tgz", ARCHIVE).unwrap_err();
        assert!(matches!(error, ProvenanceError::NotNamed { .. }), "{error}");
        let error = verify_provenance(&keys("charts"), "files: {}", "hello-1.2.3.tgz", ARCHIVE)
            .unwrap_err();
        assert!(matches!(error, ProvenanceError::Unreadable(_)), "{error}");
    }

    #[test]
    fn a_signature_by_a_primary_key_that_only_certifies_is_refused_as_gpg_refuses_it() {
        // gpg made the key with a primary that only certifies and a subkey that signs;
        // `helm package --sign` signed with the primary all the same.
        let error = verify_provenance(
            &keys("certify-only"),
            include_str!("../testdata/hello-2.0.0.tgz.prov"),
            "hello-2.0.0.tgz",
            include_bytes!("../testdata/hello-2.0.0.tgz"),
        )
        .unwrap_err();
        assert!(
            matches!(error, ProvenanceError::Refused(Refusal::NotAllowed { .. })),
            "{error}"
        );
        assert!(error.to_string().contains("Wrong key usage"), "{error}");
    }
}
