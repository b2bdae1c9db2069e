//! Who may see and do what on the web page and the API: Kubernetes decides. A request
//! carries a bearer token (the `Authorization` header, or the session cookie the login
//! form sets); the daemon checks it with a TokenReview and asks a SubjectAccessReview
//! for each thing the request touches. No user store of tether's own.
//!
//! STUB: the interface the routes are written against; its body is being built.

use axum::http::HeaderMap;
use kube::Client;

/// The cookie the login form sets: the bearer token itself, HttpOnly and SameSite=Strict.
pub const SESSION_COOKIE: &str = "tether_session";

/// How requests are authenticated and authorized.
#[derive(Clone)]
pub enum Access {
    /// In the cluster (`tether run`): bearer tokens checked by TokenReview, rights by
    /// SubjectAccessReview, both asked with the daemon's client.
    Kubernetes {
        client: Client,
        /// Requests without a token may view (never act); off by default.
        anonymous_read_only: bool,
    },
    /// `tether ui`: the person at the keyboard, as their kubeconfig says; rights by
    /// SelfSubjectAccessReview with their own client. Served on loopback only.
    Local { client: Client },
}

/// The person (or robot) behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Viewer {
    /// The username Kubernetes gave (`system:serviceaccount:team:alice`, an OIDC email).
    pub user: String,
    pub groups: Vec<String>,
    /// No token: may only view, and only when anonymous viewing is on.
    pub anonymous: bool,
    /// The token the request carried (for the CSRF token's key); none for `Local` and
    /// anonymous requests.
    token: Option<String>,
}

/// What a request wants to do, as a SubjectAccessReview asks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// `get`, or an action's verb (`scale`, `restart`, `rollback`, `label`, `lock`,
    /// `reconcile` on `sources`; `delete` on `pods`, `create` on `pods/exec`).
    pub verb: &'static str,
    /// API group: `tether.dev` for sources, `` for pods.
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub namespace: String,
    pub name: Option<String>,
}

/// Why a request was refused.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Denied {
    /// 401: no token (and anonymous viewing off), or a token Kubernetes did not accept.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: Kubernetes said no (its reason, when it gave one).
    #[error("{0}")]
    Forbidden(String),
    /// 403: an action without the CSRF token of the session.
    #[error("the request has no valid CSRF token (reload the page)")]
    Csrf,
    /// 503: the API server could not be asked.
    #[error("cannot ask the API server: {0}")]
    Unavailable(String),
}

impl Access {
    /// Who sent the request.
    pub async fn viewer(&self, _headers: &HeaderMap) -> Result<Viewer, Denied> {
        Ok(Viewer {
            user: "stub".into(),
            groups: Vec::new(),
            anonymous: false,
            token: None,
        })
    }

    /// Whether `viewer` may do `check`.
    pub async fn may(&self, _viewer: &Viewer, _check: &Check) -> Result<(), Denied> {
        Ok(())
    }

    /// The CSRF token the pages put in their forms (and `/api/v1/session` returns) for
    /// `viewer`'s session.
    pub fn csrf_token(&self, _viewer: &Viewer) -> String {
        String::new()
    }

    /// Whether the request's CSRF token (the `X-CSRF-Token` header or the form's
    /// `csrf` field) is the session's.
    pub fn check_csrf(&self, _viewer: &Viewer, _presented: Option<&str>) -> Result<(), Denied> {
        Ok(())
    }
}

/// The `Set-Cookie` value that starts a session with `token` (the login form).
pub fn session_cookie(token: &str) -> String {
    format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that ends the session.
pub fn end_session_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Whether `token` can be a bearer token (and a cookie's value): printable ASCII
/// without spaces, quotes, commas, semicolons or backslashes.
pub fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= 16 * 1024
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'))
}
