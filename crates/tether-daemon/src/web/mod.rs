//! The web page and its JSON API, served by the daemon (and by `tether ui`): the
//! views of [`tether_web`], filled from the source loops ([`views`]) and the cluster
//! ([`live`]), shown only to whom Kubernetes allows ([`auth`]); every action a Git
//! commit made by the same library calls as the CLI's ([`act`]).
//!
//! Every response carries a strict Content-Security-Policy (scripts and styles only
//! from the daemon itself, no inline code, no framing), `nosniff` and `no-referrer`.

pub mod act;
pub mod auth;
pub mod live;
pub mod read;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tether_web::paths;
use tower_http::compression::CompressionLayer;

use self::auth::{Access, Denied};
use super::Shared;

/// The page's Content-Security-Policy: nothing but the daemon's own script, style
/// and API; no inline script or style, no plugins, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The web page and API, when the daemon serves them.
pub struct Web {
    pub access: Access,
    /// One action's Git work at a time: actions share one clone per repository.
    pub commits: tokio::sync::Mutex<()>,
}

impl Web {
    pub fn new(access: Access) -> Self {
        Web {
            access,
            commits: tokio::sync::Mutex::new(()),
        }
    }
}

/// What the handlers share: the loops' views and who may see what.
#[derive(Clone)]
pub struct WebState {
    pub shared: Arc<Shared>,
    pub web: Arc<Web>,
}

/// The page's and the API's routes.
pub fn routes(shared: Arc<Shared>, web: Arc<Web>) -> Router {
    let source = "/sources/{namespace}/{name}";
    let api = "/api/v1/sources/{namespace}/{name}";
    Router::new()
        .route(paths::SOURCES_PAGE, get(read::sources_page))
        .route(source, get(read::source_page))
        .route(paths::API_SOURCES, get(read::sources))
        .route(api, get(read::source))
        .route(paths::API_SESSION, get(read::session))
        .route(paths::API_STREAM, get(read::stream))
        .route(paths::LOGIN, get(read::login_form).post(read::login))
        .route(paths::LOGOUT, post(read::logout))
        .route(paths::STYLE, get(read::style))
        .route(paths::SCRIPT, get(read::script))
        .route(&format!("{api}/reconcile"), post(act::reconcile))
        .route(
            &format!("{api}/slices/{{slice}}/{{action}}"),
            post(act::slice),
        )
        .route(
            &format!("{api}/pods/{{pod_namespace}}/{{pod}}/{{action}}"),
            post(act::pod),
        )
        .route(&format!("{api}/hosts"), get(read::hosts))
        .route(
            &format!("{api}/hosts/{{host}}/labels"),
            get(read::host_labels).post(act::assign_labels),
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

impl Denied {
    pub fn status(&self) -> StatusCode {
        match self {
            Denied::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Denied::Forbidden(_) | Denied::Csrf => StatusCode::FORBIDDEN,
            Denied::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An error of the API or the page: its status and its words, as JSON for an API
/// request, as a page for a browser's.
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
    pub page: bool,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>, page: bool) -> Self {
        Failure {
            status,
            message: message.into(),
            page,
        }
    }

    pub fn denied(denied: &Denied, page: bool) -> Self {
        Failure::new(denied.status(), denied.to_string(), page)
    }

    pub fn not_found(page: bool) -> Self {
        Failure::new(StatusCode::NOT_FOUND, "no such Source here", page)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        if self.page {
            // A browser without a session goes to the login form.
            if self.status == StatusCode::UNAUTHORIZED {
                return (
                    StatusCode::SEE_OTHER,
                    [(header::LOCATION, paths::LOGIN)],
                    String::new(),
                )
                    .into_response();
            }
            let page = tether_web::html::error_page(
                &tether_web::html::Page::default(),
                self.status.as_u16(),
                &self.message,
            );
            return (self.status, html_type(), page).into_response();
        }
        let body = serde_json::json!({
            "schema": tether_web::API_SCHEMA,
            "error": self.message,
            "status": self.status.as_u16(),
        });
        (self.status, axum::Json(body)).into_response()
    }
}

fn html_type() -> [(header::HeaderName, &'static str); 1] {
    [(header::CONTENT_TYPE, "text/html; charset=utf-8")]
}
