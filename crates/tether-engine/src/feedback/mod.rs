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

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::outbox::{OutboxState, Recipient, Record};
use tether_core::feedback::notice::Notice;
use tether_core::feedback::status::Ledger;
use tether_core::feedback::{CommitStatus, GitHost, PullRequestComment};

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

/// The Git host's name in a feedback outbox (its delivery position is kept under it).
pub const GIT_HOST_RECIPIENT: &str = "githost";

/// The Git host as a recipient of a feedback outbox: commit statuses and comments;
/// and with each final status a check run carrying its summary, where the token
/// allows (a GitHub App's: a personal token is refused, and then none is tried again).
pub struct GitHostRecipient {
    client: githost::GitHostClient,
    check_runs: bool,
}

impl GitHostRecipient {
    pub fn new(client: githost::GitHostClient, host: GitHost) -> Self {
        GitHostRecipient {
            client,
            check_runs: host == GitHost::GitHub,
        }
    }

    /// The check run of a final status; its failure never holds the status back.
    async fn check_run(&mut self, status: &CommitStatus) {
        let created = self
            .client
            .create_check_run(
                &status.commit,
                &status.context,
                status.state,
                &status.description,
            )
            .await;
        match created {
            Ok(()) => {}
            Err(error) if error.is_forbidden() => {
                tracing::info!(
                    "the token may not create check runs (a GitHub App's may): commit statuses only"
                );
                self.check_runs = false;
            }
            Err(error) => {
                tracing::warn!(error = %tether_core::error_chain(&error), "the check run was not created");
            }
        }
    }
}

impl Recipient<Feedback> for GitHostRecipient {
    type Error = DeliveryError;

    fn name(&self) -> String {
        GIT_HOST_RECIPIENT.to_string()
    }

    async fn deliver(&mut self, records: &[Record<Feedback>]) -> Result<(), DeliveryError> {
        for record in records {
            match &record.event {
                Feedback::Status(status) => {
                    self.client.set_status(status).await?;
                    if self.check_runs && status.state.is_final() {
                        self.check_run(status).await;
                    }
                }
                Feedback::Comment(comment) => {
                    self.client.upsert_comment(comment).await?;
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
