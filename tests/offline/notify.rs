//! Notice receivers against real ones: a local HTTP server (axum) that records every
//! request, checked as a CloudEvents receiver, tether's own generic webhook receiver
//! and Slack would check them; and a real Kafka-protocol broker, read back by an
//! independent client (kafka-python).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use tether_api::webhook::{Headers, Provider, authenticate};
use tether_core::feedback::notice::{Notice, NoticeKind, cloud_event};
use tether_engine::events::sink::KafkaTopic;
use tether_engine::feedback::DeliveryError;
use tether_engine::feedback::notify::Receiver;
use tether_testkit::broker::Broker;
use zeroize::Zeroizing;

const KEY: &[u8] = b"a-notification-key-of-32-bytes!!";

/// A request as the receiver got it: header names in lower case.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Headers for Received {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

type Log = Arc<Mutex<Vec<Received>>>;

/// A local HTTP server answering every POST with `status` and `answer`.
struct Recorder {
    address: std::net::SocketAddr,
    log: Log,
}

impl Recorder {
    async fn start(status: u16, answer: &'static str) -> Recorder {
        let log: Log = Arc::default();
        let record = move |State(log): State<Log>,
                           uri: axum::http::Uri,
                           headers: HeaderMap,
                           body: Bytes| async move {
            let headers = headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_string(),
                        value.to_str().unwrap().to_string(),
                    )
                })
                .collect();
            log.lock().unwrap().push(Received {
                path: uri.path().to_string(),
                headers,
                body: body.to_vec(),
            });
            (StatusCode::from_u16(status).unwrap(), answer)
        };
        let app = axum::Router::new()
            .fallback(axum::routing::post(record))
            .with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Recorder { address, log }
    }

    /// A URL whose path is the secret part, as Slack's are.
    fn url(&self) -> String {
        format!(
            "http://{}/services/T000/B000/s3cr3t-path-token",
            self.address
        )
    }

    fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }
}

fn notices() -> Vec<Notice> {
    let blocked = Notice::new(
        NoticeKind::WaveBlocked,
        "payments/api",
        "west",
        "2025-06-02T08:30:00Z",
        "wave 2 waits: Deployment payments/db is not ready",
    )
    .with_revision("release@sha1:fedcba9876543210fedcba9876543210fedcba98")
    .with_subject("Deployment payments/db")
    .with_reason("NotReady")
    .with_link("https://tether.example.com/sources/payments/api");
    let drift = Notice::new(
        NoticeKind::DriftCorrected,
        "payments/api",
        "west",
        "2025-06-02T08:31:00Z",
        "<!channel> replicas were 5, set back to 3 <http://evil.example|click>",
    )
    .with_subject("Deployment payments/api");
    vec![blocked, drift]
}

/// No error text may hold the secret URL (nor its secret path) or the key.
fn assert_holds_no_secret(error: &DeliveryError, url: &str) {
    let text = format!("{error} {error:?}");
    assert!(!text.contains(url), "{text}");
    assert!(!text.contains("s3cr3t-path-token"), "{text}");
    assert!(!text.contains(std::str::from_utf8(KEY).unwrap()), "{text}");
}

#[tokio::test]
async fn a_webhook_gets_signed_cloud_events_its_receiver_accepts() {
    let server = Recorder::start(204, "").await;
    let mut receiver = Receiver::webhook(
        Zeroizing::new(server.url()),
        Some(Zeroizing::new(KEY.to_vec())),
        None,
    )
    .unwrap();
    assert_eq!(receiver.name(), "webhook");
    receiver.send(&notices()).await.unwrap();
    let received = server.received();
    assert_eq!(received.len(), 2, "one request per notice");
    for (request, notice) in received.iter().zip(notices()) {
        assert_eq!(request.path, "/services/T000/B000/s3cr3t-path-token");
        assert_eq!(
            request.get("content-type"),
            Some("application/cloudevents+json; charset=utf-8")
        );
        // tether's own generic webhook receiver verifies the signature.
        authenticate(Provider::Generic, request, &request.body, KEY).unwrap();
        authenticate(
            Provider::Generic,
            request,
            &request.body,
            b"another-key-0123456789",
        )
        .unwrap_err();
        let event = request.json();
        assert_eq!(event, cloud_event(&notice));
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["id"], notice.id.as_str());
        assert_eq!(event["source"], "/tether/west/payments/api");
        assert_eq!(event["subject"], notice.subject.as_deref().unwrap());
        assert_eq!(event["datacontenttype"], "application/json");
        assert_eq!(event["data"]["message"], notice.message.as_str());
    }
    assert_eq!(received[0].json()["type"], "dev.tether.source.wave-blocked");
    assert_eq!(
        received[1].json()["type"],
        "dev.tether.source.drift-corrected"
    );

    // Without a key, nothing claims a signature.
    let mut unsigned = Receiver::webhook(Zeroizing::new(server.url()), None, None).unwrap();
    unsigned.send(&notices()[..1]).await.unwrap();
    let last = server.received().pop().unwrap();
    assert_eq!(last.get("x-signature-256"), None);
}

#[tokio::test]
async fn slack_gets_its_message_shape_with_hostile_text_escaped() {
    let server = Recorder::start(200, "ok").await;
    let mut receiver = Receiver::slack(Zeroizing::new(server.url()), None).unwrap();
    assert_eq!(receiver.name(), "slack");
    receiver.send(&notices()).await.unwrap();
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].get("content-type"), Some("application/json"));
    let blocked = received[0].json();
    assert_eq!(
        blocked["text"],
        "Wave blocked: payments/api in west: wave 2 waits: Deployment payments/db is not ready"
    );
    assert_eq!(blocked["blocks"][0]["type"], "section");
    assert_eq!(blocked["blocks"][0]["text"]["type"], "mrkdwn");
    assert_eq!(
        blocked["blocks"][0]["text"]["text"],
        ":no_entry: *Wave blocked*"
    );
    assert_eq!(
        blocked["blocks"][0]["fields"][2]["text"],
        "Revision: release@fedcba9"
    );
    assert_eq!(
        blocked["blocks"][2]["elements"][0]["text"],
        "<https://tether.example.com/sources/payments/api|Open in tether>"
    );
    let drift = received[1].json();
    assert_eq!(
        drift["text"],
        "Drift corrected: payments/api in west: &lt;!channel&gt; replicas were 5, set back to 3 \
         &lt;http://evil.example|click&gt;"
    );
    assert_eq!(drift["mrkdwn"], false);
    assert_eq!(drift["blocks"][1]["text"]["type"], "plain_text");
}

#[tokio::test]
async fn slack_not_answering_ok_did_not_post() {
    // Slack answers 200 with a reason when it did not post.
    let server = Recorder::start(200, "invalid_payload").await;
    let url = server.url();
    let mut receiver = Receiver::slack(Zeroizing::new(url.clone()), None).unwrap();
    let error = receiver.send(&notices()).await.unwrap_err();
    assert!(
        matches!(&error, DeliveryError::Refused { status: 200, message, .. } if message == "invalid_payload"),
        "{error:?}"
    );
    assert_eq!(
        server.received().len(),
        1,
        "the first failure stops the batch"
    );
    assert_holds_no_secret(&error, &url);
}

#[tokio::test]
async fn a_refusal_and_a_closed_port_are_told_apart_without_the_url() {
    let server = Recorder::start(500, "internal error").await;
    let url = server.url();
    let mut refusing = Receiver::webhook(
        Zeroizing::new(url.clone()),
        Some(Zeroizing::new(KEY.to_vec())),
        None,
    )
    .unwrap();
    let error = refusing.send(&notices()).await.unwrap_err();
    match &error {
        DeliveryError::Refused {
            receiver,
            status,
            message,
        } => {
            assert_eq!((receiver.as_str(), *status), ("webhook", 500));
            assert_eq!(message, "internal error");
        }
        other => panic!("expected a refusal: {other:?}"),
    }
    assert_eq!(error.to_string(), "webhook answered 500: internal error");
    assert_holds_no_secret(&error, &url);

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!(
        "http://{}/services/T000/B000/s3cr3t-path-token",
        closed.local_addr().unwrap()
    );
    drop(closed);
    for mut receiver in [
        Receiver::webhook(Zeroizing::new(closed_url.clone()), None, None).unwrap(),
        Receiver::slack(Zeroizing::new(closed_url.clone()), None).unwrap(),
    ] {
        let error = receiver.send(&notices()).await.unwrap_err();
        assert!(
            matches!(&error, DeliveryError::Unreachable { receiver: name, .. } if *name == receiver.name()),
            "{error:?}"
        );
        assert!(error.to_string().contains("Connection refused"), "{error}");
        assert_holds_no_secret(&error, &closed_url);
    }

    // A URL that is no URL: the error does not quote it either.
    let mut malformed = Receiver::slack(
        Zeroizing::new("http://[s3cr3t-path-token/".to_string()),
        None,
    )
    .unwrap();
    let error = malformed.send(&notices()).await.unwrap_err();
    assert!(
        matches!(&error, DeliveryError::Misconfigured(text) if text.starts_with("the URL of slack is not valid")),
        "{error:?}"
    );
    assert_holds_no_secret(&error, "http://[s3cr3t-path-token/");
}

#[test]
fn kafka_gets_the_cloud_events_keyed_by_source() {
    let broker = Broker::start();
    let topic = "tether.notices";
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut receiver = Receiver::Kafka(KafkaTopic::new(vec![broker.address()], topic.to_string()));
    assert_eq!(receiver.name(), "kafka topic tether.notices");
    runtime.block_on(receiver.send(&notices())).unwrap();
    let messages = broker.consume(topic, 2, Duration::from_secs(20));
    assert_eq!(messages.len(), 2, "{messages:?}");
    for (message, notice) in messages.iter().zip(notices()) {
        assert_eq!(message["key"], "payments/api");
        assert_eq!(message["value"], cloud_event(&notice));
    }
    assert_eq!(messages[0]["offset"], 0);
    assert_eq!(messages[1]["offset"], 1);

    // The broker is gone: the receiver says so, by its name.
    drop(broker);
    let error = runtime.block_on(receiver.send(&notices())).unwrap_err();
    assert!(
        matches!(&error, DeliveryError::Unreachable { receiver, .. } if receiver == "kafka topic tether.notices"),
        "{error:?}"
    );
}
