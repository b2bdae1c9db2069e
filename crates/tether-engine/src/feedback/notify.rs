//! Notice receivers: a webhook (a CloudEvent per notice, signed with HMAC-SHA256 when a
//! key is set), a Slack incoming webhook, and a Kafka topic (CloudEvents in the
//! structured mode of the Kafka binding, keyed by Source). What is sent is decided in
//! `tether_core::feedback::notice`; the webhook URLs are secrets (a Slack webhook URL
//! lets anyone post), so they are never in a receiver's name or an error.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tether_core::feedback::notice::{Notice, cloud_event, signature, slack_message};
use zeroize::Zeroizing;

use super::delivery::{DeliveryError, https_client};
use crate::events::sink::{KafkaMessage, KafkaTopic};

/// How long one request may take before the receiver counts as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The media type of a CloudEvent in the structured JSON format.
const CLOUD_EVENT_JSON: &str = "application/cloudevents+json; charset=utf-8";

/// The header the signature goes in: the one tether's own generic webhook receiver checks.
const SIGNATURE_HEADER: &str = "X-Signature-256";

/// How much of a refusal's body an error quotes.
const QUOTED_BODY: usize = 200;

/// Where a Source's notices go.
pub enum Receiver {
    Webhook {
        poster: Poster,
        /// The HMAC key of `X-Signature-256`; unsigned without one.
        key: Option<Zeroizing<Vec<u8>>>,
    },
    Slack(Poster),
    Kafka(KafkaTopic),
}

impl Receiver {
    /// A CloudEvents webhook at `url`, signed with `key` when given; `roots`: CA
    /// certificates (PEM) trusted beside the system's.
    pub fn webhook(
        url: Zeroizing<String>,
        key: Option<Zeroizing<Vec<u8>>>,
        roots: Option<&[u8]>,
    ) -> Result<Receiver, DeliveryError> {
        let poster = Poster::new("webhook", url, roots)?;
        Ok(Receiver::Webhook { poster, key })
    }

    /// A Slack (or compatible) incoming webhook at `url`.
    pub fn slack(url: Zeroizing<String>, roots: Option<&[u8]>) -> Result<Receiver, DeliveryError> {
        Ok(Receiver::Slack(Poster::new("slack", url, roots)?))
    }

    /// The receiver as logs and errors name it: never its URL.
    pub fn name(&self) -> String {
        match self {
            Receiver::Webhook { poster, .. } | Receiver::Slack(poster) => {
                poster.receiver.to_string()
            }
            Receiver::Kafka(topic) => format!("kafka topic {}", topic.topic()),
        }
    }

    /// Sends every notice, in order (one request each for webhooks), or fails at the
    /// first that does not arrive: the caller sends that one and the rest again.
    pub async fn send(&mut self, notices: &[Notice]) -> Result<(), DeliveryError> {
        let receiver = self.name();
        match self {
            Receiver::Webhook { poster, key } => {
                for notice in notices {
                    let body = cloud_event(notice).to_string().into_bytes();
                    let signed = key.as_ref().map(|key| signature(&body, key));
                    poster.post(CLOUD_EVENT_JSON, body, signed).await?;
                }
                Ok(())
            }
            Receiver::Slack(poster) => {
                for notice in notices {
                    let body = slack_message(notice).to_string().into_bytes();
                    let answer = poster.post("application/json", body, None).await?;
                    // Slack answers 200 "ok"; anything else did not post.
                    if answer.trim() != "ok" {
                        return Err(poster.refused(200, &answer));
                    }
                }
                Ok(())
            }
            Receiver::Kafka(topic) => {
                let messages = notices.iter().map(|notice| KafkaMessage {
                    key: notice.source.as_bytes().to_vec(),
                    value: cloud_event(notice).to_string().into_bytes(),
                    // The Kafka binding's structured mode names the event format here.
                    headers: BTreeMap::from([(
                        "content-type".to_string(),
                        CLOUD_EVENT_JSON.as_bytes().to_vec(),
                    )]),
                });
                topic.produce(messages.collect()).await.map_err(|error| {
                    DeliveryError::Unreachable {
                        receiver,
                        message: error.to_string(),
                    }
                })
            }
        }
    }
}

/// POSTs to one secret URL through a client made once, and words its failures
/// without the URL.
pub struct Poster {
    receiver: &'static str,
    url: Zeroizing<String>,
    http: reqwest::Client,
}

impl Poster {
    fn new(
        receiver: &'static str,
        url: Zeroizing<String>,
        roots: Option<&[u8]>,
    ) -> Result<Self, DeliveryError> {
        let http = https_client(receiver, roots, REQUEST_TIMEOUT, Default::default())?;
        Ok(Poster {
            receiver,
            url,
            http,
        })
    }

    /// The answer's body, when the status is a success.
    async fn post(
        &self,
        content_type: &'static str,
        body: Vec<u8>,
        signature: Option<String>,
    ) -> Result<String, DeliveryError> {
        let mut request = self
            .http
            .post(self.url.as_str())
            .header(CONTENT_TYPE, HeaderValue::from_static(content_type))
            .body(body);
        if let Some(signature) = signature {
            request = request.header(SIGNATURE_HEADER, signature);
        }
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let answer = response.text().await.map_err(|e| self.unreachable(e))?;
        if !status.is_success() {
            return Err(self.refused(status.as_u16(), &answer));
        }
        Ok(answer)
    }

    fn unreachable(&self, error: reqwest::Error) -> DeliveryError {
        if error.is_builder() {
            // No retry mends a URL that cannot be parsed.
            return DeliveryError::Misconfigured(format!(
                "the URL of {} is not valid: {}",
                self.receiver,
                describe(error, &self.url)
            ));
        }
        DeliveryError::Unreachable {
            receiver: self.receiver.to_string(),
            message: describe(error, &self.url),
        }
    }

    fn refused(&self, status: u16, answer: &str) -> DeliveryError {
        let quoted: String = answer.trim().chars().take(QUOTED_BODY).collect();
        DeliveryError::Refused {
            receiver: self.receiver.to_string(),
            status,
            message: redact(&quoted, &self.url),
        }
    }
}

/// The error and its causes, without the URL: reqwest's text names it, and a cause
/// might too.
fn describe(error: reqwest::Error, url: &str) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    redact(&text, url)
}

fn redact(text: &str, url: &str) -> String {
    if url.is_empty() {
        return text.to_string();
    }
    text.replace(url, "<the receiver's URL>")
}
