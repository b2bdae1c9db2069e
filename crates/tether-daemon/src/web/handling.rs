//! What every handler of the page and the API shares: the web's own state ([`Web`],
//! held by the server, not by the loops' shared state) with the loops' ([`WebState`]),
//! and how a failure is answered ([`Failure`]: JSON for the API, a page for a browser).

use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tether_web::paths;

use super::auth::{Access, Denied};
use crate::shared::Shared;

/// The web page and API, when the daemon serves them.
pub(crate) struct Web {
    pub access: Access,
    /// One action's Git work at a time: actions share one clone per repository.
    pub commits: tokio::sync::Mutex<()>,
}

impl Web {
    pub(crate) fn new(access: Access) -> Self {
        Web {
            access,
            commits: tokio::sync::Mutex::new(()),
        }
    }
}

/// What the handlers share: the loops' views and who may see what.
#[derive(Clone)]
pub(crate) struct WebState {
    pub shared: Arc<Shared>,
    pub web: Arc<Web>,
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
pub(crate) struct Failure {
    pub status: StatusCode,
    pub message: String,
    pub page: bool,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>, page: bool) -> Self {
        Failure {
            status,
            message: message.into(),
            page,
        }
    }

    pub(crate) fn denied(denied: &Denied, page: bool) -> Self {
        Failure::new(denied.status(), denied.to_string(), page)
    }

    pub(crate) fn not_found(page: bool) -> Self {
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

pub(crate) fn html_type() -> [(header::HeaderName, &'static str); 1] {
    [(header::CONTENT_TYPE, "text/html; charset=utf-8")]
}
