//! What a Sigstore bundle's certificate is checked against: a private Sigstore's
//! trusted root (its certificate authorities, as `cosign trusted-root create` writes
//! them) and the identities ([`Identity`]) that may sign with a certificate. Parsed
//! here; used by [`crate::sigstore`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use regex::Regex;
use serde::Deserialize;

/// A trusted root's media type, as its JSON says.
const TRUSTED_ROOT: &str = "application/vnd.dev.sigstore.trustedroot+json";

/// A private Sigstore's certificate authorities, from its trusted root.
#[derive(Clone, Debug)]
pub(crate) struct TrustedRoot {
    pub(crate) authorities: Vec<Authority>,
}

/// One certificate authority: its chain (the issuing certificate first, the root
/// last, DER) and when it may issue.
#[derive(Clone, Debug)]
pub(crate) struct Authority {
    /// Its URL (`https://fulcio.example.org`), as messages name it.
    pub(crate) name: String,
    pub(crate) chain: Vec<Vec<u8>>,
    pub(crate) start: Option<DateTime<Utc>>,
    pub(crate) end: Option<DateTime<Utc>>,
}

/// Who may sign with a certificate: regular expressions that the whole OIDC issuer
/// and the whole subject (an email address or a URI) must match, as Flux's
/// `matchOIDCIdentity`.
#[derive(Clone, Debug)]
pub struct Identity {
    issuer: Regex,
    subject: Regex,
}

impl Identity {
    /// The identity of `issuer` and `subject`, each a regular expression matched
    /// against the whole value; or the expression that is not one.
    pub fn new(issuer: &str, subject: &str) -> Result<Identity, regex::Error> {
        let whole = |expression: &str| Regex::new(&format!("^(?:{expression})$"));
        Ok(Identity {
            issuer: whole(issuer)?,
            subject: whole(subject)?,
        })
    }

    pub(crate) fn matches(&self, issuer: &str, subject: &str) -> bool {
        self.issuer.is_match(issuer) && self.subject.is_match(subject)
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bare = |regex: &Regex| {
            let text = regex.as_str();
            text.strip_prefix("^(?:")
                .and_then(|t| t.strip_suffix(")$"))
                .unwrap_or(text)
                .to_string()
        };
        write!(
            f,
            "subject {} of issuer {}",
            bare(&self.subject),
            bare(&self.issuer)
        )
    }
}

/// Does `text` hold a Sigstore trusted root?
pub(crate) fn is_trusted_root(text: &str) -> bool {
    text.trim_start().starts_with('{') && text.contains(TRUSTED_ROOT)
}

/// The certificate authorities of a trusted root's JSON, or why not. Its
/// transparency logs and timestamp authorities are not read.
pub(crate) fn parse_trusted_root(text: &str) -> Result<TrustedRoot, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Root {
        media_type: String,
        #[serde(default)]
        certificate_authorities: Vec<RootAuthority>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RootAuthority {
        #[serde(default)]
        uri: String,
        cert_chain: Chain,
        #[serde(default)]
        valid_for: Option<Window>,
    }
    #[derive(Deserialize)]
    struct Window {
        start: Option<DateTime<Utc>>,
        end: Option<DateTime<Utc>>,
    }
    let root: Root =
        serde_json::from_str(text).map_err(|e| format!("not a Sigstore trusted root: {e}"))?;
    if !root.media_type.starts_with(TRUSTED_ROOT) {
        return Err(format!(
            "its mediaType is {:?}, not {TRUSTED_ROOT}",
            root.media_type
        ));
    }
    if root.certificate_authorities.is_empty() {
        return Err("it lists no certificateAuthorities".into());
    }
    let authorities = root
        .certificate_authorities
        .into_iter()
        .enumerate()
        .map(|(index, authority)| {
            let chain = authority
                .cert_chain
                .der()
                .map_err(|why| format!("certificateAuthorities[{index}]'s certChain: {why}"))?;
            if chain.is_empty() {
                return Err(format!(
                    "certificateAuthorities[{index}]'s certChain has no certificate"
                ));
            }
            let window = authority.valid_for;
            Ok(Authority {
                name: match authority.uri.is_empty() {
                    true => format!("certificate authority {index}"),
                    false => authority.uri,
                },
                chain,
                start: window.as_ref().and_then(|w| w.start),
                end: window.and_then(|w| w.end),
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(TrustedRoot { authorities })
}

#[derive(Deserialize)]
pub(crate) struct Chain {
    certificates: Vec<RawBytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawBytes {
    raw_bytes: String,
}

impl Chain {
    pub(crate) fn der(&self) -> Result<Vec<Vec<u8>>, String> {
        self.certificates.iter().map(RawBytes::der).collect()
    }
}

impl RawBytes {
    pub(crate) fn der(&self) -> Result<Vec<u8>, String> {
        STANDARD
            .decode(self.raw_bytes.trim())
            .map_err(|e| format!("a certificate is not base64: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trusted_root_that_is_not_one_is_named() {
        for (text, expected) in [
            (
                r#"{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}"#,
                "it lists no certificateAuthorities",
            ),
            (
                r#"{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "certificateAuthorities": [{"certChain": {"certificates": [{"rawBytes": "%%"}]}}]}"#,
                "certificateAuthorities[0]'s certChain: a certificate is not base64",
            ),
        ] {
            let error = parse_trusted_root(text).unwrap_err();
            assert!(error.starts_with(expected), "{error}");
        }
    }
}
