//! Webhooks passed on to the other replicas of a sharded group (`--shard`): a pull
//! request or a registry's push names no Source, and only the replica running a Source
//! knows its pull-request planner and its image policies, so the replica a webhook
//! reaches hands it, as received, to every other live member at the address its Lease
//! announces. Each member authenticates it again with the shared webhook secret and
//! acts for the Sources it runs; a webhook passed on is never passed on again. The
//! web page and API do the same: the list shows every member's Sources, and a
//! Source's page, API documents and actions are answered by the member that runs it,
//! asked with the viewer's own credentials.

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, header};
use futures::StreamExt;

/// The header that marks a webhook passed on by a replica: not to be passed on again.
pub(crate) const PASSED_ON_HEADER: &str = "x-tether-passed-on";
/// How long a member has to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The other live members' addresses, as their Leases announce them.
pub(crate) struct Peers {
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
    pub(crate) fn set(&self, addresses: Vec<String>) {
        if let Ok(mut current) = self.addresses.lock() {
            *current = addresses;
        }
    }

    /// Passes a webhook (its path, headers and body as received) on to every other
    /// member unless it was passed on already; returns how many took it (202).
    pub(crate) async fn pass_on(&self, path: &str, headers: &HeaderMap, body: &[u8]) -> usize {
        if headers.contains_key(PASSED_ON_HEADER) {
            return 0;
        }
        let addresses = self.addresses();
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

impl Peers {
    /// The other members' addresses now.
    fn addresses(&self) -> Vec<String> {
        self.addresses.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Whether any other member is known.
    pub(crate) fn any(&self) -> bool {
        self.addresses.lock().is_ok_and(|a| !a.is_empty())
    }

    /// Asks the other members, one after the other, for what the request names (a
    /// page, an API document or an action of a Source this replica does not run),
    /// with the requester's own credentials, which each member checks itself; the
    /// first answer that is not 404 (the Source is not there either).
    pub(crate) async fn ask(
        &self,
        method: &axum::http::Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<Answer> {
        let (addresses, headers) = (self.addresses(), asked_with(headers));
        for address in addresses {
            let url = format!("{}{path_and_query}", address.trim_end_matches('/'));
            let request = self
                .client
                .request(method.clone(), url)
                .headers(headers.clone())
                .body(body.to_vec());
            let answer = match request.send().await {
                Ok(answer) => answer,
                Err(error) => {
                    tracing::warn!(%error, peer = %address, "cannot ask the other replica");
                    continue;
                }
            };
            if answer.status() == reqwest::StatusCode::NOT_FOUND {
                continue;
            }
            let status = answer.status();
            let headers: HeaderMap = answer
                .headers()
                .iter()
                .filter(|(name, _)| ANSWER_HEADERS.contains(name))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            let Ok(body) = answer.bytes().await else {
                continue;
            };
            return Some(Answer {
                status,
                headers,
                body,
            });
        }
        None
    }
}

impl Peers {
    /// Asks every other member for `path` (a GET with the requester's credentials);
    /// the bodies of those that answered 200.
    pub(crate) async fn ask_all(&self, path: &str, headers: &HeaderMap) -> Vec<axum::body::Bytes> {
        let (addresses, headers) = (self.addresses(), asked_with(headers));
        futures::stream::iter(addresses)
            .map(|address| {
                let request = self
                    .client
                    .get(format!("{}{path}", address.trim_end_matches('/')))
                    .headers(headers.clone());
                async move {
                    match request.send().await {
                        Ok(answer) if answer.status() == reqwest::StatusCode::OK => {
                            answer.bytes().await.ok()
                        }
                        Ok(answer) => {
                            tracing::debug!(status = %answer.status(), peer = %address, "another replica did not list its Sources");
                            None
                        }
                        Err(error) => {
                            tracing::warn!(%error, peer = %address, "cannot ask the other replica");
                            None
                        }
                    }
                }
            })
            .buffer_unordered(8)
            .filter_map(std::future::ready)
            .collect()
            .await
    }
}

/// The headers another replica is asked with: the requester's, passed on, without
/// `Accept-Encoding` (the answer is compressed, if at all, by this replica).
fn asked_with(headers: &HeaderMap) -> HeaderMap {
    let mut headers = passed_on(headers);
    headers.remove(header::ACCEPT_ENCODING);
    headers
}

/// The headers of another replica's answer that are passed back.
const ANSWER_HEADERS: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::LOCATION,
    header::SET_COOKIE,
    header::CACHE_CONTROL,
];

/// Another replica's answer.
pub(crate) struct Answer {
    pub status: reqwest::StatusCode,
    pub headers: HeaderMap,
    pub body: axum::body::Bytes,
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
