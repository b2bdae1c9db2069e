//! Feedback delivered where people look: commit statuses and pull-request comments on
//! the Git host ([`githost`]), notices to webhooks, Slack and Kafka ([`notify`]). What
//! is said is decided in `tether_core::feedback`; here it is sent, and a send that
//! fails says whether a retry may help. Tokens and URLs are never in an error's text.
//! One HTTPS client shape for every receiver: extra CA roots, no redirects.

mod delivery;
mod feedback_outbox;
pub mod githost;
pub mod notify;

pub use delivery::DeliveryError;
pub use feedback_outbox::{Feedback, GIT_HOST_RECIPIENT, GitHostRecipient, NamedReceiver, Said};
