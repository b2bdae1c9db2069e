//! The daemon's HTTP endpoints: `/metrics` (OpenMetrics), `/readyz` (ready once the
//! caches synced), `/healthz` (fails when a source loop finished no pass for three
//! intervals: a wedged loop, not only a dead process), and `/hook/{provider}`, the
//! webhook receiver (authenticated before anything else; see [`tether_api::webhook`]).
//! With [`super::web`], the web page and its API too.
//! Refused webhooks are logged through [`super::refusal_log`]: the first of a kind at
//! once, then a summary line a window.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tether_engine::driver::{Backoff, Loop, Schedule, drive};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::refusal_log::{Decision, FLUSH_EVERY, RefusalKind, Summary, WINDOW};
use super::shared::Shared;
use super::web::Web;
use tether_api::webhook::{self, Headers, MAX_BODY, Provider, Refusal};
use tether_engine::image_automation::notification;

/// Serves the endpoints on `listener` until `shutdown`, and the web page and API
/// with `web`.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    web: Option<Web>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .route("/hook/{provider}", post(hook))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(Arc::clone(&shared));
    let app = match web {
        Some(web) => app.merge(super::web::router::routes(
            Arc::clone(&shared),
            Arc::new(web),
        )),
        None => app,
    };
    // Stopped when serving stops, for whatever reason, and then says what it counted.
    let stop_summaries = shutdown.child_token();
    let summaries = tokio::spawn(say_refusal_summaries(shared, stop_summaries.clone()));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    stop_summaries.cancel();
    if let Err(error) = summaries.await {
        tracing::warn!(%error, "the webhook refusal summaries stopped");
    }
    served
}

/// Logs the summary of each kind of refused webhook whose window ended, every
/// [`FLUSH_EVERY`], so that a flood that stopped still has its count said; at the end,
/// every count not said yet.
async fn say_refusal_summaries(shared: Arc<Shared>, stop: CancellationToken) {
    let schedule = Schedule {
        name: "webhook refusal summaries",
        debounce: Duration::ZERO,
        backoff: Backoff::request(),
        grace: Duration::ZERO,
    };
    let mut summaries = RefusalSummaries(Arc::clone(&shared));
    drive(&mut summaries, &schedule, &stop, |_| {}).await;
    let left = shared.refused_webhooks().drain(Instant::now());
    left.iter().for_each(log_summary);
}

struct RefusalSummaries(Arc<Shared>);

impl Loop for RefusalSummaries {
    type Output = ();
    type Error = Infallible;

    async fn pass(&mut self) -> Result<(), Infallible> {
        let ended = self.0.refused_webhooks().ended(Instant::now());
        ended.iter().for_each(log_summary);
        Ok(())
    }

    async fn changed(&mut self) {
        tokio::time::sleep(FLUSH_EVERY).await;
    }
}

fn log_summary(summary: &Summary) {
    tracing::warn!(
        provider = summary.kind.provider,
        outcome = summary.kind.outcome,
        refused = summary.refused,
        seconds = summary.over.as_secs(),
        "{summary}"
    );
}

/// Logs a refused webhook through the rate limit: the first of its kind in full
/// (`detail`: what was wrong), the others counted for the summary.
fn log_refusal(shared: &Shared, kind: RefusalKind, detail: &str) {
    let (decision, summary) = shared.refused_webhooks().refused(kind, Instant::now());
    if let Some(summary) = summary {
        log_summary(&summary);
    }
    if decision == Decision::LogNow {
        tracing::warn!(
            provider = kind.provider,
            outcome = kind.outcome,
            detail = detail.trim_end(),
            "webhook refused (more refusals like it are counted, and logged as one line every {} s)",
            WINDOW.as_secs()
        );
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
        .into_response()
}

async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    match shared.is_ready() {
        true => (StatusCode::OK, "ready\n"),
        false => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet\n"),
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    let wedged = shared.switchboard.wedged();
    match wedged.is_empty() {
        true => (StatusCode::OK, "ok\n".into()),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no pass finished for three intervals: {}\n",
                wedged.join(", ")
            ),
        ),
    }
}

struct RequestHeaders<'h>(&'h HeaderMap);

impl Headers for RequestHeaders<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn hook(
    State(shared): State<Arc<Shared>>,
    Path(provider): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> (StatusCode, String) {
    let (provider, (status, outcome, message)) = match Provider::from_path(&provider) {
        // The path's own text stays out of the metric's labels and the log: anyone
        // can send any path.
        None => (
            "unknown",
            (
                StatusCode::NOT_FOUND,
                "unknown_provider",
                "no such webhook provider\n".to_string(),
            ),
        ),
        Some(provider) => {
            let answer = match &body {
                // Past MAX_BODY (413), or a body that broke off: nothing of it is read.
                Err(rejection) => {
                    let outcome = match rejection.status() {
                        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
                        _ => "bad_request",
                    };
                    (rejection.status(), outcome, rejection.body_text())
                }
                Ok(body) => receive(&shared, provider, &headers, body).await,
            };
            (provider.name(), answer)
        }
    };
    shared.metrics.webhook(provider, outcome);
    match status.is_client_error() {
        true => log_refusal(&shared, RefusalKind { provider, outcome }, &message),
        false => tracing::info!(provider, outcome, "webhook"),
    }
    (status, message)
}

/// A webhook request's answer: status, outcome (for the metric) and text.
async fn receive(
    shared: &Shared,
    provider: Provider,
    headers: &HeaderMap,
    body: &[u8],
) -> (StatusCode, &'static str, String) {
    let Some(secret) = &shared.webhook_secret else {
        return (
            StatusCode::NOT_FOUND,
            "disabled",
            "webhooks are off: no webhook secret is configured\n".into(),
        );
    };
    let headers = RequestHeaders(headers);
    // Nothing is parsed, fetched or asked of the cluster before this.
    if let Err(refusal) = webhook::authenticate(provider, &headers, body, secret) {
        return (
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("{refusal}\n"),
        );
    }
    // What names no Source is acted on here for the Sources this replica runs, and
    // passed on to the other replicas for theirs.
    let pass_on = |answer: (StatusCode, &'static str, String)| async move {
        match answer.0.is_client_error() {
            true => answer,
            false => {
                let path = format!("/hook/{}", provider.name());
                passed_on(answer, shared.peers.pass_on(&path, headers.0, body).await)
            }
        }
    };
    if matches!(provider, Provider::Registry | Provider::Image) {
        return pass_on(image_pushes(shared, provider, &headers, body, secret)).await;
    }
    match webhook::pull_request(provider, &headers, body) {
        Ok(Some(request)) => return pass_on(pull_request(shared, &request)).await,
        Ok(None) => {}
        Err(refusal) => return refused(refusal),
    }
    let push = match webhook::push(provider, &headers, body) {
        Ok(Some(push)) => push,
        Ok(None) => {
            return (
                StatusCode::OK,
                "ignored",
                "neither a push nor a pull request; ignored\n".into(),
            );
        }
        Err(refusal) => return refused(refusal),
    };
    // The Sources this replica runs at once; those another replica runs (the
    // leader's, or their owners' among the shard) through their annotation.
    let mut triggered = shared
        .switchboard
        .trigger_matching(|url, reference| push.concerns(url, reference));
    if let Some(forwarder) = shared.forwarder() {
        triggered += forwarder.forward(&push).await;
    }
    match triggered {
        0 => (
            StatusCode::OK,
            "ignored",
            format!("no source follows {}\n", push.reference),
        ),
        n => (
            StatusCode::ACCEPTED,
            "accepted",
            format!("{n} source(s) will reconcile\n"),
        ),
    }
}

/// The answer to a webhook also passed on to other replicas, `taken` of which act on
/// it: accepted when any replica does.
fn passed_on(
    (status, outcome, message): (StatusCode, &'static str, String),
    taken: usize,
) -> (StatusCode, &'static str, String) {
    match (taken, status) {
        (0, _) => (status, outcome, message),
        (_, StatusCode::ACCEPTED) => (
            status,
            outcome,
            format!("{}; and by {taken} other replica(s)\n", message.trim_end()),
        ),
        _ => (
            StatusCode::ACCEPTED,
            "accepted",
            format!("taken by {taken} other replica(s)\n"),
        ),
    }
}

/// The answer to a webhook whose body was refused.
fn refused(refusal: Refusal) -> (StatusCode, &'static str, String) {
    match refusal {
        Refusal::BadRequest(message) => (
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("{message}\n"),
        ),
        refusal @ Refusal::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("{refusal}\n"),
        ),
    }
}

/// Images pushed to a registry: the image automations whose policies list one of
/// their repositories scan it now.
fn image_pushes(
    shared: &Shared,
    provider: Provider,
    headers: &RequestHeaders<'_>,
    body: &[u8],
    secret: &[u8],
) -> (StatusCode, &'static str, String) {
    let pushes = match provider {
        Provider::Registry => notification::docker_distribution(body),
        _ => notification::generic(body, headers.get("x-signature-256"), secret).map(|p| vec![p]),
    };
    let pushes = match pushes {
        Ok(pushes) => pushes,
        Err(error) => return refused(Refusal::BadRequest(error.to_string())),
    };
    if pushes.is_empty() {
        return (
            StatusCode::OK,
            "ignored",
            "no image push in the notification; ignored\n".into(),
        );
    }
    match shared.switchboard.push_images(&pushes) {
        0 => (
            StatusCode::OK,
            "ignored",
            "no image policy lists these repositories\n".into(),
        ),
        n => (
            StatusCode::ACCEPTED,
            "accepted",
            format!("{n} source(s) will scan their registries\n"),
        ),
    }
}

/// A pull request opened or pushed to: the Sources that follow its base plan its head.
fn pull_request(
    shared: &Shared,
    request: &webhook::PullRequest,
) -> (StatusCode, &'static str, String) {
    match shared.switchboard.plan_pull_request(request) {
        0 => (
            StatusCode::OK,
            "ignored",
            format!(
                "no source plans pull requests into {}\n",
                request.base_branch
            ),
        ),
        n => (
            StatusCode::ACCEPTED,
            "accepted",
            format!("{n} source(s) will plan pull request {}\n", request.number),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// What the daemon logged, as text.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    async fn post(address: std::net::SocketAddr, path: &str, body: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: tether\r\nx-github-event: push\r\nx-hub-signature-256: sha256=00\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn a_flood_of_refused_webhooks_is_one_line_then_a_summary_and_each_is_counted() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);

        let shared = Arc::new(Shared::new(Some(
            b"a-secret-of-32-bytes-0123456789ab".to_vec(),
        )));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener, Arc::clone(&shared), None, shutdown.clone()));
        const FLOOD: usize = 1_000;
        for _ in 0..FLOOD {
            let answer = post(address, "/hook/github", "{}").await;
            assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        }
        let answer = post(address, "/hook/nowhere", "{}").await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        shutdown.cancel();
        server.await.unwrap().unwrap();

        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 3, "{log}");
        assert!(
            lines[0].contains("webhook refused") && lines[0].contains("outcome=\"unauthorized\""),
            "{log}"
        );
        assert!(lines[1].contains("outcome=\"unknown_provider\""), "{log}");
        assert!(
            lines[2].contains(
                "refused 999 webhooks in the last 0 s: bad or missing signature (provider github)"
            ),
            "the count left at shutdown is said: {log}"
        );
        let metrics = shared.metrics.encode();
        assert!(
            metrics.contains(&format!(
                r#"tether_webhook_requests_total{{provider="github",outcome="unauthorized"}} {FLOOD}"#
            )),
            "{metrics}"
        );
    }
}
