//! The feedback outbox: what it holds ([`Feedback`]), its state ([`Said`]), and its
//! recipients, the Git host and each notification receiver.

use serde::{Deserialize, Serialize};

use super::delivery::DeliveryError;
use super::githost::GitHostClient;
use super::notify::Receiver;
use crate::outbox::{OutboxState, Recipient, Record};
use tether_core::feedback::notice::Notice;
use tether_core::feedback::status::Ledger;
use tether_core::feedback::{CommitStatus, GitHost, PullRequestComment};

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
    client: GitHostClient,
    check_runs: bool,
}

impl GitHostRecipient {
    pub fn new(client: GitHostClient, host: GitHost) -> Self {
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
    pub receiver: Receiver,
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
