//! Why a delivery did not arrive ([`DeliveryError`]), and the one HTTPS client shape
//! every receiver is sent to with: extra CA roots, no redirects.

use std::time::Duration;

use thiserror::Error;

/// Why a delivery did not arrive. Every one is retried (with backoff) by the caller:
/// a host that is down, a token being rotated, a rate limit.
#[derive(Debug, Error)]
pub enum DeliveryError {
    /// The receiver answered with an error status.
    #[error("{receiver} answered {status}: {message}")]
    Refused {
        receiver: String,
        status: u16,
        message: String,
    },
    /// No answer: refused connection, TLS failure, timeout.
    #[error("{receiver} cannot be reached: {message}")]
    Unreachable { receiver: String, message: String },
    /// The configuration cannot work (a CA bundle that is not PEM, say).
    #[error("{0}")]
    Misconfigured(String),
}

/// An HTTPS client for `receiver` (its name in errors): `extra_roots_pem` trusted
/// beside the system's CAs (a host with a private CA), `timeout` per request, and no
/// redirect followed (a token or a signed body must not go anywhere else).
pub(crate) fn https_client(
    receiver: &str,
    extra_roots_pem: Option<&[u8]>,
    timeout: Duration,
    headers: reqwest::header::HeaderMap,
) -> Result<reqwest::Client, DeliveryError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(timeout)
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = extra_roots_pem {
        let roots = reqwest::Certificate::from_pem_bundle(pem).map_err(|_| {
            DeliveryError::Misconfigured(format!("the CA certificates for {receiver} are not PEM"))
        })?;
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    builder.build().map_err(|e| {
        DeliveryError::Misconfigured(format!(
            "cannot make an HTTPS client for {receiver}: {}",
            e.without_url()
        ))
    })
}
