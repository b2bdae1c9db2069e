//! The page's and the API's routes, and what every response goes through: a request
//! about a Source another replica runs is answered there, and every response carries
//! a strict Content-Security-Policy, `nosniff` and `no-referrer`.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tether_web::paths;
use tower_http::compression::CompressionLayer;

use super::handling::{Web, WebState};
use super::{act, attestation, pages};
use crate::shared::Shared;

/// The page's Content-Security-Policy: nothing but the daemon's own script, style
/// and API; no inline script or style, no plugins, no framing.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The page's and the API's routes.
pub(crate) fn routes(shared: Arc<Shared>, web: Arc<Web>) -> Router {
    let source = "/sources/{namespace}/{name}";
    let api = "/api/v1/sources/{namespace}/{name}";
    Router::new()
        .route(paths::SOURCES_PAGE, get(pages::sources_page))
        .route(source, get(pages::source_page))
        .route(paths::API_SOURCES, get(pages::sources))
        .route(api, get(pages::source))
        .route(paths::API_SESSION, get(pages::session))
        .route(paths::API_STREAM, get(pages::stream))
        .route(paths::LOGIN, get(pages::login_form).post(pages::login))
        .route(paths::LOGOUT, post(pages::logout))
        .route(paths::STYLE, get(pages::style))
        .route(paths::SCRIPT, get(pages::script))
        .route(&format!("{api}/reconcile"), post(act::reconcile))
        .route(
            &format!("{api}/approve-deletions"),
            post(act::approve_deletions),
        )
        .route(
            &format!("{api}/slices/{{slice}}/{{action}}"),
            post(act::slice),
        )
        .route(
            &format!("{api}/pods/{{pod_namespace}}/{{pod}}/{{action}}"),
            post(act::pod),
        )
        .route(&format!("{api}/hosts"), get(pages::hosts))
        .route(&format!("{api}/attestation"), get(attestation::attestation))
        .route(
            &format!("{api}/hosts/{{host}}/labels"),
            get(pages::host_labels).post(act::assign_labels),
        )
        .route(
            &format!("{api}/hosts/{{host}}/labels/{{key}}"),
            axum::routing::delete(act::remove_label),
        )
        .route(
            &format!("{api}/hosts/{{host}}/labels/{{key}}/remove"),
            post(act::remove_label),
        )
        .route(&format!("{api}/hosts/{{host}}/{{action}}"), post(act::host))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            answered_where_run,
        ))
        .layer(axum::middleware::map_response(secure_headers))
        .layer(CompressionLayer::new())
        .with_state(WebState { shared, web })
}

/// The largest request body passed on to another replica (an action's form).
const PASSED_ON_BODY: usize = 64 * 1024;

/// A request about one Source that this replica does not run (`--shard`: 404 here) is
/// answered by the replica that runs it, asked with the requester's own credentials
/// (which that replica checks itself); a request passed on already is not passed on
/// again.
async fn answered_where_run(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    let about_one_source = path.starts_with("/sources/")
        || path
            .strip_prefix(paths::API_SOURCES)
            .is_some_and(|rest| rest.starts_with('/'));
    if !about_one_source
        || request
            .headers()
            .contains_key(crate::peers::PASSED_ON_HEADER)
        || !shared.peers.any()
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, PASSED_ON_BODY).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request too large\n").into_response();
    };
    let (method, headers) = (parts.method.clone(), parts.headers.clone());
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let here = next
        .run(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(body.clone()),
        ))
        .await;
    if here.status() != StatusCode::NOT_FOUND {
        return here;
    }
    match shared
        .peers
        .ask(&method, &path_and_query, &headers, &body)
        .await
    {
        Some(answer) => (answer.status, answer.headers, answer.body).into_response(),
        None => here,
    }
}

async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
