//! What a Sigstore bundle's certificate is checked against: a private Sigstore's
//! trusted root (its certificate authorities, as `cosign trusted-root create` writes
//! them) and the identities ([`Identity`]) that may sign with a certificate. Parsed
//! here; used by [`crate::sigstore`].

use regex::Regex;
use sigstore_verify::Verifier;
use sigstore_verify::trust_root::TrustedRoot as Root;

/// A trusted root's media type, as its JSON says.
const TRUSTED_ROOT: &str = "application/vnd.dev.sigstore.trustedroot+json";

/// A private Sigstore's trusted root: its certificate authorities, timestamp
/// authorities and transparency logs, checked usable when it was read.
#[derive(Clone, Debug)]
pub(crate) struct TrustedRoot {
    pub(crate) root: Root,
    /// Its certificate authorities' URLs (`https://fulcio.example.org`), as messages
    /// name it.
    pub(crate) name: String,
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

/// The trusted root of a `trusted_root.json`'s text, or why it is not one that can
/// verify a certificate.
pub(crate) fn parse_trusted_root(text: &str) -> Result<TrustedRoot, String> {
    let root = Root::from_json(text).map_err(|e| format!("not a Sigstore trusted root: {e}"))?;
    if !root.media_type.starts_with(TRUSTED_ROOT) {
        return Err(format!(
            "its mediaType is {:?}, not {TRUSTED_ROOT}",
            root.media_type
        ));
    }
    if root.certificate_authorities.is_empty() {
        return Err("it lists no certificateAuthorities".into());
    }
    Verifier::new(&root).map_err(|e| e.to_string())?;
    let names: Vec<String> = root
        .certificate_authorities
        .iter()
        .enumerate()
        .map(|(index, authority)| match authority.uri.is_empty() {
            true => format!("certificate authority {index}"),
            false => authority.uri.clone(),
        })
        .collect();
    Ok(TrustedRoot {
        name: names.join(", "),
        root,
    })
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
                r#"{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "certificateAuthorities": [{"uri": "https://fulcio.example.org", "certChain": {"certificates": [{"rawBytes": "AAAA"}]}}]}"#,
                "invalid trusted certificate",
            ),
        ] {
            let error = parse_trusted_root(text).unwrap_err();
            assert!(error.starts_with(expected), "{error}");
        }
    }
}
