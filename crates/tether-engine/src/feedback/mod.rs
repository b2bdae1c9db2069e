//! Feedback delivered where people look: commit statuses and pull-request comments on
//! the Git host ([`githost`]), notices to webhooks, Slack and Kafka ([`notify`]). What
//! is said is decided in `tether_core::feedback`; here it is sent, and a send that
//! fails says whether a retry may help. Tokens and URLs are never in an error's text.

pub mod githost;
pub mod notify;

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
