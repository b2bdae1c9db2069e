//! The page's and the API's actions. Those that change what should run (scale,
//! restart and roll back a slice; a host's labels and lock) are commits made by
//! [`tether_engine::actions::commit`], the CLI's own call, authored as the person
//! Kubernetes said sent the request, one action's Git work at a time per process; the
//! source's loop is then nudged to apply the new commit. Those that change nothing in Git (recreate a pod, restart its
//! containers) act on the cluster as the CLI's do, and a reconcile is asked of the
//! loop. Each needs the session's CSRF token and a verb Kubernetes allows (see
//! `deploy/`'s Roles).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tether_api::source_spec::{Source, approval_request};
use tether_core::operation::{HostChange, Operation};
use tether_engine::actions::pods::{recreate, restart_containers};
use tether_engine::actions::{CommitTo, Request, commit};
use tether_engine::writeback::Author;
use tether_web::{API_SCHEMA, paths};

use super::auth::{Check, Viewer};
use super::handling::{Failure, WebState};
use super::pages::{NOTICE_COOKIE, viewer};
use crate::clock::now;
use crate::loop_views::{Snapshot, SourceName};
use crate::switchboard::Trigger;

/// How long a pod action waits for its pod to be made again (or its containers to
/// restart) before it answers.
const POD_ACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// What an action was sent with: a form (a browser) or JSON (a program).
struct Sent {
    fields: BTreeMap<String, String>,
    /// The request came from a form: answer with a redirect, not JSON.
    form: bool,
    csrf: Option<String>,
}

fn sent(headers: &HeaderMap, body: &[u8]) -> Result<Sent, Failure> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let form = content_type.starts_with("application/x-www-form-urlencoded");
    let mut fields: BTreeMap<String, String> = match (form, body.is_empty()) {
        (_, true) => BTreeMap::new(),
        (true, false) => serde_urlencoded::from_bytes(body).map_err(|error| {
            Failure::new(StatusCode::BAD_REQUEST, format!("the form: {error}"), true)
        })?,
        (false, false) => match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(object)) => object
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => (k, s),
                    other => (k, other.to_string()),
                })
                .collect(),
            _ => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "the body must be a JSON object (or a form)",
                    false,
                ));
            }
        },
    };
    let csrf = headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| fields.remove("csrf"));
    Ok(Sent { fields, form, csrf })
}

/// Who asks, that they may do `verb` (on the Source, or on `pod`), with the session's
/// CSRF token; and the Source.
async fn allowed(
    state: &WebState,
    headers: &HeaderMap,
    source: &SourceName,
    sent: &Sent,
    check: Check,
) -> Result<Acting, Failure> {
    let page = sent.form;
    let viewer = viewer(state, headers, page).await?;
    let access = &state.web.access;
    if viewer.anonymous {
        let denied = super::auth::Denied::Unauthenticated(
            "log in to act: anonymous viewers only view".into(),
        );
        return Err(Failure::denied(&denied, page));
    }
    access
        .check_csrf(&viewer, sent.csrf.as_deref())
        .map_err(|denied| Failure::denied(&denied, page))?;
    access
        .may(&viewer, &check)
        .await
        .map_err(|denied| Failure::denied(&denied, page))?;
    let snapshot = state
        .shared
        .views
        .get(source)
        .ok_or_else(|| Failure::not_found(page))?;
    Ok(Acting {
        viewer,
        snapshot,
        source: source.clone(),
        form: page,
    })
}

/// An action allowed: who asked, on which Source, and whether from a form.
struct Acting {
    viewer: Viewer,
    snapshot: Snapshot,
    source: SourceName,
    form: bool,
}

fn source_check(verb: &'static str, source: &SourceName) -> Check {
    Check {
        verb,
        group: super::auth::SOURCES_GROUP,
        resource: "sources",
        subresource: None,
        namespace: source.namespace.clone(),
        name: Some(source.name.clone()),
    }
}

/// What an action did: a redirect to the Source's page (which shows `summary` once)
/// for a form, JSON for a program.
fn done(source: &SourceName, form: bool, summary: &str, details: Value) -> Response {
    if form {
        let location = paths::source_page(&source.namespace, &source.name);
        let notice = format!(
            "{NOTICE_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=60",
            paths::segment(summary)
        );
        return (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, location), (header::SET_COOKIE, notice)],
        )
            .into_response();
    }
    let mut body = json!({"schema": API_SCHEMA, "summary": summary});
    if let (Some(body), Value::Object(details)) = (body.as_object_mut(), details) {
        body.extend(details);
    }
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// The commit's author: the user Kubernetes named (an email, when it is one).
fn author_of(viewer: &Viewer) -> Author {
    let name: String = viewer
        .user
        .chars()
        .filter(|c| !matches!(c, '<' | '>'))
        .collect();
    let email = match name.contains('@') {
        true => name.clone(),
        false => format!("{}@tether.invalid", name.replace(':', ".")),
    };
    Author { name, email }
}

/// Commits `operation` as `viewer`, then nudges the loop to apply it.
async fn commit_as(
    state: &WebState,
    acting: &Acting,
    request: Request,
    what: &str,
) -> Result<Response, Failure> {
    let Acting {
        viewer,
        snapshot,
        source,
        form,
    } = acting;
    let form = *form;
    let Some(writeback) = &snapshot.handle.writeback else {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "this Source's models cannot be committed to (an OCI artifact): change them where they are built",
            form,
        ));
    };
    let propose = writeback.propose.then(|| proposal_branch(what));
    let to = CommitTo {
        destination: writeback.destination.clone(),
        branch: writeback.branch.clone(),
        propose,
        author: Some(author_of(viewer)),
        keys: Arc::clone(&snapshot.keys),
    };
    let one_at_a_time = state.web.commits.lock().await;
    let committed = commit(to, request).await;
    drop(one_at_a_time);
    let committed = committed.map_err(|error| {
        let message = match error.remedy() {
            Some(remedy) => format!("{error} ({remedy:?})"),
            None => error.to_string(),
        };
        Failure::new(StatusCode::UNPROCESSABLE_ENTITY, message, form)
    })?;
    if committed.commit.is_some() && !committed.proposed {
        let _ = snapshot.handle.trigger.try_send(Trigger::Changed);
    }
    tracing::info!(user = %viewer.user, action = what, commit = committed.commit.as_deref().unwrap_or("-"), "web action committed");
    let summary = match (&committed.commit, committed.proposed) {
        (None, _) => format!(
            "{}: the models are already so, nothing committed",
            committed.summary
        ),
        (Some(_), true) => format!(
            "{} (proposed on branch {})",
            committed.summary, committed.branch
        ),
        (Some(_), false) => committed.summary.clone(),
    };
    let details = json!({
        "commit": committed.commit,
        "branch": committed.branch,
        "pushed": committed.pushed,
        "proposed": committed.proposed,
    });
    Ok(done(source, form, &summary, details))
}

/// Commits `request` when Kubernetes lets the viewer `verb` the Source.
async fn commit_allowed(
    state: &WebState,
    headers: &HeaderMap,
    source: &SourceName,
    sent: &Sent,
    verb: &'static str,
    request: Request,
    what: &str,
) -> Result<Response, Failure> {
    let acting = allowed(state, headers, source, sent, source_check(verb, source)).await?;
    commit_as(state, &acting, request, what).await
}

/// Commits `change` of the Node model `host` when the viewer may `verb` the Source.
async fn change_host(
    state: &WebState,
    headers: &HeaderMap,
    source: &SourceName,
    sent: &Sent,
    verb: &'static str,
    host: &str,
    change: HostChange,
) -> Result<Response, Failure> {
    let what = format!("{verb}-{host}");
    let operation = Operation::Host {
        host: host.to_string(),
        change,
    };
    commit_allowed(
        state,
        headers,
        source,
        sent,
        verb,
        Request::Now(operation),
        &what,
    )
    .await
}

/// `tether/web/scale-web-1700000000`: a new branch per proposed action.
fn proposal_branch(what: &str) -> String {
    let words: String = what
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("tether/web/{}-{seconds}", words.trim_matches('-'))
}

pub(crate) async fn slice(
    State(state): State<WebState>,
    Path((namespace, name, slice, action)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let (verb, request) = match action.as_str() {
        "scale" => {
            let replicas = sent
                .fields
                .get("replicas")
                .map(String::as_str)
                .unwrap_or_default();
            let change = replicas.trim().parse().map_err(|error: String| {
                Failure::new(
                    StatusCode::BAD_REQUEST,
                    format!("replicas: {error}"),
                    sent.form,
                )
            })?;
            let operation = Operation::Scale {
                slice: slice.clone(),
                change,
            };
            ("scale", Request::Now(operation))
        }
        "restart" => {
            let at = k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .map_or_else(|_| now(), |t| t.to_string());
            (
                "restart",
                Request::Now(Operation::Restart {
                    slice: slice.clone(),
                    at,
                }),
            )
        }
        "rollback" => {
            let to = sent
                .fields
                .get("to")
                .filter(|t| !t.trim().is_empty())
                .cloned();
            (
                "rollback",
                Request::Rollback {
                    slice: slice.clone(),
                    to,
                },
            )
        }
        _ => {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                "no such action",
                sent.form,
            ));
        }
    };
    commit_allowed(
        &state,
        &headers,
        &source,
        &sent,
        verb,
        request,
        &format!("{verb}-{slice}"),
    )
    .await
}

/// StarlingX's label assignment: `{KEY: VALUE, …}` as JSON, or a form's `key` and
/// `value`.
pub(crate) async fn assign_labels(
    State(state): State<WebState>,
    Path((namespace, name, host)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let labels: Vec<(String, String)> = match (sent.form, sent.fields.get("key")) {
        (true, Some(key)) => vec![(
            key.clone(),
            sent.fields.get("value").cloned().unwrap_or_default(),
        )],
        _ => sent.fields.clone().into_iter().collect(),
    };
    if labels.is_empty() || labels.iter().any(|(key, _)| key.trim().is_empty()) {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "give a label: a key and a value",
            sent.form,
        ));
    }
    let change = HostChange::Label(labels);
    change_host(&state, &headers, &source, &sent, "label", &host, change).await
}

/// StarlingX's label removal.
pub(crate) async fn remove_label(
    State(state): State<WebState>,
    Path((namespace, name, host, key)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let change = HostChange::Unlabel(vec![key]);
    change_host(&state, &headers, &source, &sent, "label", &host, change).await
}

/// Lock or unlock a host.
pub(crate) async fn host(
    State(state): State<WebState>,
    Path((namespace, name, host, action)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let locked = match action.as_str() {
        "lock" => true,
        "unlock" => false,
        _ => {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                "no such action",
                sent.form,
            ));
        }
    };
    let change = HostChange::Lock(locked);
    change_host(&state, &headers, &source, &sent, "lock", &host, change).await
}

/// A pass now (what `tether reconcile` asks through the Source's annotation).
pub(crate) async fn reconcile(
    State(state): State<WebState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let acting = allowed(
        &state,
        &headers,
        &source,
        &sent,
        source_check("reconcile", &source),
    )
    .await?;
    let requested = now();
    let _ = acting
        .snapshot
        .handle
        .trigger
        .try_send(Trigger::Requested(requested.clone()));
    tracing::info!(user = %acting.viewer.user, source = %format!("{}/{}", source.namespace, source.name), "web action: reconcile requested");
    Ok(done(
        &source,
        sent.form,
        "a pass was requested",
        json!({"requested": requested}),
    ))
}

/// Approve exactly the deletions of a prune the Source holds beyond its deletion
/// budget (form field `digest`), as `tether approve` does: the Source's annotation,
/// set when Kubernetes lets the viewer `patch` the Source. The loop that runs it then
/// carries them out, or holds a plan whose deletions have another digest.
pub(crate) async fn approve_deletions(
    State(state): State<WebState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let acting = allowed(
        &state,
        &headers,
        &source,
        &sent,
        source_check("patch", &source),
    )
    .await?;
    let digest = sent
        .fields
        .get("digest")
        .map(|d| d.trim())
        .unwrap_or_default();
    if !tether_core::inventory::budget::is_digest(digest) {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            format!("{digest:?} is not a digest of deletions (sha256: and 64 hexadecimal digits)"),
            acting.form,
        ));
    }
    let client = state.shared.sources_client().ok_or_else(|| {
        Failure::new(
            StatusCode::NOT_FOUND,
            "only a Source (a daemon that watches Sources) holds a prune for approval",
            acting.form,
        )
    })?;
    let requested = now();
    let patch = approval_request(&requested, digest);
    let api: Api<Source> = Api::namespaced(client, &source.namespace);
    api.patch(&source.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| {
            Failure::new(
                StatusCode::BAD_GATEWAY,
                format!("cannot annotate the Source: {error}"),
                acting.form,
            )
        })?;
    tracing::warn!(user = %acting.viewer.user, source = %format!("{}/{}", source.namespace, source.name), %digest, "web action: deletions approved");
    Ok(done(
        &source,
        acting.form,
        "the deletions were approved",
        json!({"approved": digest, "requested": requested}),
    ))
}

/// Recreate a pod, or restart its containers: on the cluster, as the Source's
/// identity, when Kubernetes lets the viewer `delete` the pod (recreate) or `create`
/// `pods/exec` (restart).
pub(crate) async fn pod(
    State(state): State<WebState>,
    Path((namespace, name, pod_namespace, pod, action)): Path<(
        String,
        String,
        String,
        String,
        String,
    )>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let source = SourceName { namespace, name };
    let sent = sent(&headers, &body)?;
    let (verb, subresource) = match action.as_str() {
        "recreate" => ("delete", None),
        "restart-containers" => ("create", Some("exec")),
        _ => {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                "no such action",
                sent.form,
            ));
        }
    };
    let check = Check {
        verb,
        group: "",
        resource: "pods",
        subresource,
        namespace: pod_namespace.clone(),
        name: Some(pod.clone()),
    };
    let acting = allowed(&state, &headers, &source, &sent, check).await?;
    let Some(client) = &acting.snapshot.client else {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "the Source has not reached its cluster yet",
            sent.form,
        ));
    };
    let by = acting.viewer.user.as_str();
    let failed = |error: tether_engine::actions::pods::PodActionError| {
        Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            error.to_string(),
            sent.form,
        )
    };
    let summary = match action.as_str() {
        "recreate" => {
            let recreated = recreate(client, &pod_namespace, &pod, by, POD_ACTION_TIMEOUT)
                .await
                .map_err(failed)?;
            match recreated.replacement {
                Some((new, _)) => format!("pod {pod_namespace}/{pod} recreated as {new}"),
                None => format!("pod {pod_namespace}/{pod} deleted; its maker makes it again"),
            }
        }
        _ => {
            let container = sent
                .fields
                .get("container")
                .filter(|c| !c.is_empty())
                .map(String::as_str);
            let restarted = restart_containers(
                client,
                &pod_namespace,
                &pod,
                container,
                by,
                POD_ACTION_TIMEOUT,
            )
            .await
            .map_err(failed)?;
            format!(
                "pod {pod_namespace}/{pod}: restarted {}",
                restarted.join(", ")
            )
        }
    };
    tracing::info!(user = %acting.viewer.user, %summary, "web action on a pod");
    Ok(done(&source, sent.form, &summary, json!({})))
}
