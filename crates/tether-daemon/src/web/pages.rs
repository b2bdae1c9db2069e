//! The page's and the API's reads: the Sources a viewer may see, one Source whole,
//! its hosts (StarlingX's label resources), the session, the live stream, and the
//! login form.

use std::convert::Infallible;
use std::time::Duration;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Deserialize;
use serde_json::json;
use tether_web::html::{self, Page};
use tether_web::{API_SCHEMA, SourceSummary, paths};
use tokio::sync::broadcast::error::RecvError;

use super::auth::{self, Check, Viewer};
use super::handling::{Failure, WebState, html_type};
use super::live_state;
use crate::loop_views::SourceName;

/// The cookie that carries what the last action did to the page it redirects to.
pub(crate) const NOTICE_COOKIE: &str = "tether_notice";

/// What viewing a Source needs: `get` on it.
pub(crate) fn view_check(namespace: &str, name: Option<&str>) -> Check {
    Check {
        verb: "get",
        group: super::auth::SOURCES_GROUP,
        resource: "sources",
        subresource: None,
        namespace: namespace.to_string(),
        name: name.map(str::to_string),
    }
}

/// Who sent the request (a failure for a page sends a browser to the login form).
/// A replica that does not lead runs no Source, so it has nothing to show: it says so
/// (503) rather than an empty list.
pub(crate) async fn viewer(
    state: &WebState,
    headers: &HeaderMap,
    page: bool,
) -> Result<Viewer, Failure> {
    if !state.shared.metrics.is_leader() {
        return Err(Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica does not lead, and only the leader runs the Sources and shows them: reach the leader (the holder of the daemon's Lease), e.g. with kubectl port-forward to its pod",
            page,
        ));
    }
    state
        .web
        .access
        .viewer(headers)
        .await
        .map_err(|denied| Failure::denied(&denied, page))
}

/// The Sources `viewer` may see: those of the namespaces where Kubernetes lets them
/// `get` sources (one review per namespace, not per Source), this replica's and, for a
/// request that reached it first, the other replicas' (`--shard`), each asked with the
/// viewer's own credentials.
async fn visible(state: &WebState, viewer: &Viewer, headers: &HeaderMap) -> Vec<SourceSummary> {
    let mut shown = Vec::new();
    for source in state.shared.views.list() {
        if may_view(state, viewer, &source.namespace).await {
            shown.push(source);
        }
    }
    if state.shared.peers.any() && !headers.contains_key(crate::peers::PASSED_ON_HEADER) {
        shown.extend(elsewhere(state, headers).await);
        tether_web::attention_first(&mut shown);
    }
    shown
}

/// The Sources the other replicas run, as they list them for the same viewer.
async fn elsewhere(state: &WebState, headers: &HeaderMap) -> Vec<SourceSummary> {
    let mut listed = Vec::new();
    for answer in state
        .shared
        .peers
        .ask_all(paths::API_SOURCES, headers)
        .await
    {
        match serde_json::from_slice::<serde_json::Value>(&answer) {
            Ok(mut document) => {
                let sources = document["sources"].take();
                listed.extend(
                    serde_json::from_value::<Vec<SourceSummary>>(sources).unwrap_or_default(),
                );
            }
            Err(error) => tracing::warn!(%error, "another replica's list is unreadable"),
        }
    }
    listed
}

/// Whether `viewer` may see the Sources of `namespace`: asked once a namespace, and
/// remembered by [`super::auth::Access::may`] for a while, so that a page of many
/// Sources, and a stream open for hours, follow a changed RoleBinding.
async fn may_view(state: &WebState, viewer: &Viewer, namespace: &str) -> bool {
    let check = view_check(namespace, None);
    state.web.access.may(viewer, &check).await.is_ok()
}

/// The Source `namespace/name`, when `viewer` may see it; else 403 (or 404 when it
/// is not here, which says no more than the 403 would).
async fn visible_source(
    state: &WebState,
    viewer: &Viewer,
    name: &SourceName,
    page: bool,
) -> Result<crate::loop_views::Snapshot, Failure> {
    let check = view_check(&name.namespace, Some(&name.name));
    state
        .web
        .access
        .may(viewer, &check)
        .await
        .map_err(|denied| Failure::denied(&denied, page))?;
    state
        .shared
        .views
        .get(name)
        .ok_or_else(|| Failure::not_found(page))
}

fn page_of<'v>(
    state: &WebState,
    viewer: &'v Viewer,
    csrf: &'v str,
    notice: Option<&'v str>,
) -> Page<'v> {
    let _ = state;
    Page {
        user: Some(viewer.user.as_str()),
        csrf: (!viewer.anonymous).then_some(csrf),
        notice,
    }
}

/// The notice the last action left (its cookie).
fn notice(headers: &HeaderMap) -> Option<String> {
    let value = auth::cookie(headers, NOTICE_COOKIE)?;
    let decoded = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
    (!decoded.is_empty()).then(|| decoded.into_owned())
}

fn clear_notice() -> (header::HeaderName, String) {
    (
        header::SET_COOKIE,
        format!("{NOTICE_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    )
}

pub(crate) async fn sources_page(
    State(state): State<WebState>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let viewer = viewer(&state, &headers, true).await?;
    let sources = visible(&state, &viewer, &headers).await;
    let csrf = state.web.access.csrf_token(&viewer);
    let notice = notice(&headers);
    let page = page_of(&state, &viewer, &csrf, notice.as_deref());
    let body = html::sources_page(&page, &sources);
    Ok((html_type(), [clear_notice()], body).into_response())
}

#[derive(Deserialize)]
pub(crate) struct PageQuery {
    fragment: Option<String>,
}

pub(crate) async fn source_page(
    State(state): State<WebState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let viewer = viewer(&state, &headers, true).await?;
    let source = SourceName { namespace, name };
    let snapshot = visible_source(&state, &viewer, &source, true).await?;
    let detail = live_state::detail(&snapshot).await;
    let csrf = state.web.access.csrf_token(&viewer);
    let notice = notice(&headers);
    let page = page_of(&state, &viewer, &csrf, notice.as_deref());
    let body = match query.fragment.as_deref() {
        Some("main") => html::source_main(&page, &detail),
        _ => html::source_page(&page, &detail),
    };
    Ok((html_type(), [clear_notice()], body).into_response())
}

pub(crate) async fn sources(
    State(state): State<WebState>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let viewer = viewer(&state, &headers, false).await?;
    let sources = visible(&state, &viewer, &headers).await;
    Ok(axum::Json(json!({"schema": API_SCHEMA, "sources": sources})).into_response())
}

pub(crate) async fn source(
    State(state): State<WebState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let snapshot = visible_snapshot(&state, &headers, namespace, name).await?;
    let detail = live_state::detail(&snapshot).await;
    let mut body = serde_json::to_value(&detail).unwrap_or_default();
    if let Some(object) = body.as_object_mut() {
        object.insert("schema".into(), API_SCHEMA.into());
    }
    Ok(axum::Json(body).into_response())
}

/// The Source, when `headers`' viewer may see it (the API's reads).
pub(crate) async fn visible_snapshot(
    state: &WebState,
    headers: &HeaderMap,
    namespace: String,
    name: String,
) -> Result<crate::loop_views::Snapshot, Failure> {
    let viewer = viewer(state, headers, false).await?;
    visible_source(state, &viewer, &SourceName { namespace, name }, false).await
}

/// The hosts of a Source (StarlingX's `ihosts`).
pub(crate) async fn hosts(
    State(state): State<WebState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let snapshot = visible_snapshot(&state, &headers, namespace, name).await?;
    let hosts = live_state::hosts(&snapshot, true).await;
    Ok(axum::Json(json!({"schema": API_SCHEMA, "ihosts": hosts})).into_response())
}

/// A host's labels, as StarlingX lists them: `{"labels": [{"host", "label_key",
/// "label_value"}]}`.
pub(crate) async fn host_labels(
    State(state): State<WebState>,
    Path((namespace, name, host)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let snapshot = visible_snapshot(&state, &headers, namespace, name).await?;
    // The labels are the models': nothing to read from the cluster.
    let hosts = live_state::hosts(&snapshot, false).await;
    let Some(row) = hosts.iter().find(|h| h.name == host) else {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("no host {host} in the models"),
            false,
        ));
    };
    let labels: Vec<_> = row
        .labels
        .iter()
        .map(|(key, value)| json!({"host": row.name, "label_key": key, "label_value": value}))
        .collect();
    Ok(axum::Json(json!({"schema": API_SCHEMA, "labels": labels})).into_response())
}

/// Who the request is, and the CSRF token its actions need.
pub(crate) async fn session(
    State(state): State<WebState>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let viewer = viewer(&state, &headers, false).await?;
    let csrf = (!viewer.anonymous).then(|| state.web.access.csrf_token(&viewer));
    Ok(axum::Json(json!({
        "schema": API_SCHEMA,
        "user": viewer.user,
        "groups": viewer.groups,
        "anonymous": viewer.anonymous,
        "csrfToken": csrf,
    }))
    .into_response())
}

/// The live stream: each change of a Source the viewer may see, as an `event:
/// source` whose data is its summary; `event: reload` when the reader fell behind.
pub(crate) async fn stream(
    State(state): State<WebState>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Failure> {
    let viewer = viewer(&state, &headers, false).await?;
    let mut changes = state.shared.views.subscribe();
    let stream = async_stream(move |sender| async move {
        loop {
            let event = match changes.recv().await {
                Ok(summary) => {
                    if !may_view(&state, &viewer, &summary.namespace).await {
                        continue;
                    }
                    let data = serde_json::to_string(&*summary).unwrap_or_default();
                    Event::default().event("source").data(data)
                }
                Err(RecvError::Lagged(_)) => Event::default().event("reload").data("{}"),
                Err(RecvError::Closed) => return,
            };
            if sender.send(Ok(event)).await.is_err() {
                return;
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// A stream fed by a task: the task ends when the reader goes.
fn async_stream<F, Fut>(produce: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Event, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(produce(sender));
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (event, receiver))
    })
}

pub(crate) async fn login_form() -> Response {
    (html_type(), html::login_page(&Page::default(), None)).into_response()
}

#[derive(Deserialize)]
pub(crate) struct Login {
    token: String,
}

/// Checks the token (a TokenReview) before it becomes the session's cookie.
pub(crate) async fn login(State(state): State<WebState>, Form(login): Form<Login>) -> Response {
    let token = login.token.trim();
    let refused = |message: &str| {
        (
            StatusCode::UNAUTHORIZED,
            html_type(),
            html::login_page(&Page::default(), Some(message)),
        )
            .into_response()
    };
    if !auth::valid_token(token) {
        return refused("that is not a bearer token");
    }
    let mut headers = HeaderMap::new();
    if let Ok(value) = format!("Bearer {token}").parse() {
        headers.insert(header::AUTHORIZATION, value);
    }
    match state.web.access.viewer(&headers).await {
        Ok(viewer) if !viewer.anonymous => (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, paths::SOURCES_PAGE.to_string()),
                (header::SET_COOKIE, auth::session_cookie(token)),
            ],
        )
            .into_response(),
        Ok(_) => refused("the token was not accepted"),
        Err(denied) => refused(&denied.to_string()),
    }
}

pub(crate) async fn logout() -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, paths::LOGIN.to_string()),
            (header::SET_COOKIE, auth::end_session_cookie()),
        ],
    )
        .into_response()
}

/// Assets change only with the binary: cached for an hour.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", tether_web::assets::STYLE)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", tether_web::assets::SCRIPT)
}
