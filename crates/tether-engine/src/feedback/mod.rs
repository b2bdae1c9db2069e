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

use serde::{Deserialize, Serialize};

use crate::outbox::{OutboxState, Recipient, Record};
use tether_core::feedback::notice::Notice;
use tether_core::feedback::status::Ledger;
use tether_core::feedback::{CommitStatus, PullRequestComment};

/// What a Source's feedback outbox holds, in the order it was decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Feedback {
    /// A commit status, for the Git host.
    Status(CommitStatus),
    /// The plan of a pull request's head, for the Git host.
    Comment(PullRequestComment),
    /// A notice, for the notification receivers.
    Notice(Notice),
}

/// The commit statuses said so far (the feedback outbox's state): what makes one
/// request per (commit, context, state) hold across restarts.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Said {
    pub ledger: Ledger,
}

impl OutboxState for Said {
    type Event = Feedback;

    fn fold(&mut self, event: &Feedback) {
        if let Feedback::Status(status) = event {
            self.ledger.admit(status);
        }
    }
}

impl Recipient<Feedback> for githost::GitHostClient {
    type Error = DeliveryError;

    fn name(&self) -> String {
        "githost".to_string()
    }

    async fn deliver(&mut self, records: &[Record<Feedback>]) -> Result<(), DeliveryError> {
        for record in records {
            match &record.event {
                Feedback::Status(status) => self.set_status(status).await?,
                Feedback::Comment(comment) => {
                    self.upsert_comment(comment).await?;
                }
                Feedback::Notice(_) => {}
            }
        }
        Ok(())
    }
}

/// A notification receiver, under the name of its place in the Source's list.
pub struct NamedReceiver {
    pub name: String,
    pub receiver: notify::Receiver,
}

impl Recipient<Feedback> for NamedReceiver {
    type Error = DeliveryError;

    fn name(&self) -> String {
        self.name.clone()
    }

    async fn deliver(&mut self, records: &[Record<Feedback>]) -> Result<(), DeliveryError> {
        let notices: Vec<Notice> = records
            .iter()
            .filter_map(|r| match &r.event {
                Feedback::Notice(notice) => Some(notice.clone()),
                _ => None,
            })
            .collect();
        match notices.is_empty() {
            true => Ok(()),
            false => self.receiver.send(&notices).await,
        }
    }
}
