//! Webhooks passed on to the other replicas of a sharded group (`--shard`): a pull
//! request or a registry's push names no Source, and only the replica running a Source
//! knows its pull-request planner and its image policies, so the replica a webhook
//! reaches hands it, as received, to every other live member at the address its Lease
//! announces. Each member authenticates it again with the shared webhook secret and
//! acts for the Sources it runs; a webhook passed on is never passed on again.

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, header};
use futures::StreamExt;

/// The header that marks a webhook passed on by a replica: not to be passed on again.
pub const PASSED_ON_HEADER: &str = "x-tether-passed-on";
/// How long a member has to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The other live members' addresses, as their Leases announce them.
pub struct Peers {
    addresses: Mutex<Vec<String>>,
    client: reqwest::Client,
}

impl Default for Peers {
    fn default() -> Self {
        Peers {
            addresses: Mutex::new(Vec::new()),
            client: reqwest::Client::builder()
                .timeout(ANSWER_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        }
    }
}

impl Peers {
    /// The other live members' base URLs (`http://10.0.0.5:8080`), now.
    pub fn set(&self, addresses: Vec<String>) {
        if let Ok(mut current) = self.addresses.lock() {
            *current = addresses;
        }
    }

    /// Passes a webhook (its path, headers and body as received) on to every other
    /// member unless it was passed on already; returns how many took it (202).
    pub async fn pass_on(&self, path: &str, headers: &HeaderMap, body: &[u8]) -> usize {
        if headers.contains_key(PASSED_ON_HEADER) {
            return 0;
        }
        let addresses = self.addresses.lock().map(|a| a.clone()).unwrap_or_default();
        let headers = passed_on(headers);
        futures::stream::iter(addresses)
            .map(|address| {
                let request = self
                    .client
                    .post(format!("{}{path}", address.trim_end_matches('/')))
                    .headers(headers.clone())
                    .body(body.to_vec());
                async move {
                    match request.send().await {
                        Ok(answer) => answer.status() == reqwest::StatusCode::ACCEPTED,
                        Err(error) => {
                            tracing::warn!(%error, peer = %address, "cannot pass the webhook on");
                            false
                        }
                    }
                }
            })
            .buffer_unordered(8)
            .filter(|taken| std::future::ready(*taken))
            .count()
            .await
    }
}

/// The headers a webhook is passed on with: the sender's own (its event, signature or
/// token, content type), without those of the connection it came on, and marked as
/// passed on.
fn passed_on(headers: &HeaderMap) -> HeaderMap {
    let connection: [HeaderName; 6] = [
        header::HOST,
        header::CONTENT_LENGTH,
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TE,
    ];
    let mut passed: HeaderMap = headers
        .iter()
        .filter(|(name, _)| !connection.contains(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    passed.insert(
        HeaderName::from_static(PASSED_ON_HEADER),
        header::HeaderValue::from_static("1"),
    );
    passed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_is_passed_on_with_its_senders_headers_and_marked() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "replica-a:8080".parse().unwrap());
        headers.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        headers.insert("x-github-event", "pull_request".parse().unwrap());
        headers.insert("x-hub-signature-256", "sha256=00".parse().unwrap());
        headers.insert(header::AUTHORIZATION, "Bearer s".parse().unwrap());
        let passed = passed_on(&headers);
        assert_eq!(passed["x-github-event"], "pull_request");
        assert_eq!(passed["x-hub-signature-256"], "sha256=00");
        assert_eq!(passed[header::AUTHORIZATION], "Bearer s");
        assert!(!passed.contains_key(header::HOST));
        assert!(!passed.contains_key(header::CONTENT_LENGTH));
        assert_eq!(passed[PASSED_ON_HEADER], "1");
    }

    #[tokio::test]
    async fn a_webhook_passed_on_already_goes_no_further() {
        let peers = Peers::default();
        // An address that would refuse the connection: nothing is sent to it.
        peers.set(vec!["http://127.0.0.1:9".into()]);
        let mut headers = HeaderMap::new();
        headers.insert(PASSED_ON_HEADER, "1".parse().unwrap());
        assert_eq!(peers.pass_on("/hook/registry", &headers, b"{}").await, 0);
    }
}
