//! The daemon's HTTP endpoints: `/metrics` (OpenMetrics), `/readyz` (ready once the
//! caches synced), `/healthz` (fails when a source loop finished no pass for three
//! intervals: a wedged loop, not only a dead process), and `/hook/{provider}`, the
//! webhook receiver (authenticated before anything else; see [`super::webhook`]).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::webhook::{self, Headers, MAX_BODY, Provider, Refusal};

/// Serves the endpoints on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .route("/hook/{provider}", post(hook))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
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
    let wedged = shared.wedged();
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
    body: Bytes,
) -> (StatusCode, String) {
    let Some(provider) = Provider::from_path(&provider) else {
        return (StatusCode::NOT_FOUND, "no such webhook provider\n".into());
    };
    let (status, outcome, message) = receive(&shared, provider, &headers, &body).await;
    shared.metrics.webhook(provider.name(), outcome);
    tracing::info!(provider = provider.name(), outcome, "webhook");
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
    let push = match webhook::push(provider, &headers, body) {
        Ok(Some(push)) => push,
        Ok(None) => return (StatusCode::OK, "ignored", "not a push; ignored\n".into()),
        Err(Refusal::BadRequest(message)) => {
            return (
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("{message}\n"),
            );
        }
        Err(refusal @ Refusal::Unauthorized) => {
            return (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("{refusal}\n"),
            );
        }
    };
    let mut triggered = shared.trigger_matching(|url, reference| push.concerns(url, reference));
    if triggered == 0
        && let Some(forwarder) = shared.forwarder()
    {
        triggered = forwarder.forward(&push).await;
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
