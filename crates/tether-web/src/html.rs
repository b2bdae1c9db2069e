//! The pages, server-rendered: each works without JavaScript (links and forms), and
//! `assets/tether.js` enhances them (live updates over Server-Sent Events). maud
//! escapes every value put in the markup; the pages carry no inline script or style
//! (the daemon's Content-Security-Policy allows neither).
//!
//! What the script and the browser tests rely on:
//! - every page: `body.sources-page` / `.source-page` / `.login-page` / `.error-page`;
//!   the script adds `#live[data-state="up"|"down"]` to the header;
//! - the Sources page: `table#sources`, a `tr[data-source="NS/NAME"]` per Source with
//!   class `st-STATE`, its cells in order: state (its name), name (a link), commit
//!   (`a.wanted` when linked, `.applied` when it differs), status (`.reason`,
//!   `.message`, `.blocked`, `.clusters`; a Ready row has no reason), last pass,
//!   counts (`.drifted`, `.failed`, `.conflicts`); `p#summary`;
//! - a Source's page: `<main>` holds [`source_main`] (what `?fragment=main` serves);
//!   `div#summary[data-source]` (`.state`, `.reason`, `.message`, `p.blocked`), sections
//!   `#objects` (`li.model[data-model]`, `li.object[data-object="KIND/NS/NAME"]` with
//!   `.ready.yes|.no|.unknown`, `p.drift` with `.manager` and `.corrected`,
//!   `p.conflict`, `p.error`, `span.pod[data-pod]`), `#plan` (`.report`), `#graph`
//!   (`svg.graph`, a `g.model[data-model]` per model), `#events`, `#discovered`,
//!   `#hosts` (`div.host[data-host]`, `li.label[data-key]`, `.locked`), `#images`
//!   (`tr[data-policy]` with `.result` and `.message`, class `warning` when failed), `#revert`
//!   when a rollout failed (`.failed`, `.revert` when reverted, `.message`, `.held`); every action
//!   a `form.act.act-NAME` (see `action_name`) with a `button`.

use std::fmt::Write;

use maud::{DOCTYPE, Escaper, Markup, PreEscaped, html};

use crate::graph;
use crate::markdown;
use crate::paths::{self, Action};
use crate::view::{
    ClusterRow, Counts, DiscoveredPod, EventRow, HostRow, ImagePolicyRow, ModelNode, ObjectRow,
    PodRow, RevertRow, SourceDetail, SourceSummary, State,
};

/// What every page knows of the request.
#[derive(Clone, Debug, Default)]
pub struct Page<'a> {
    /// Who is looking (none: anonymous, read-only).
    pub user: Option<&'a str>,
    /// The session's CSRF token, put in every form; none: the viewer may not act, and
    /// no action form is shown.
    pub csrf: Option<&'a str>,
    /// What the last action did (shown once, after its redirect).
    pub notice: Option<&'a str>,
}

/// How many characters of a commit id the pages show.
const SHORT_COMMIT: usize = 12;

fn layout(page: &Page, title: &str, body_class: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · tether" }
                link rel="stylesheet" href=(paths::STYLE);
                script src=(paths::SCRIPT) defer {}
            }
            body class=(body_class) {
                header {
                    a.home href=(paths::SOURCES_PAGE) { "tether" }
                    @if let Some(user) = page.user {
                        span.user { (user) }
                        @if let Some(csrf) = page.csrf {
                            form.act-logout method="post" action=(paths::LOGOUT) {
                                (csrf_field(csrf)) button { "Log out" }
                            }
                        }
                    }
                }
                @if let Some(notice) = page.notice { p.notice role="status" { (notice) } }
                main { (body) }
            }
        }
    }
    .into_string()
}

fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// An action's form on the Source's page (`form.act.act-NAME`, posted to the
/// action's path), or nothing when the viewer may not act.
fn action_form(page: &Page, source: &SourceSummary, action: &Action, fields: Markup) -> Markup {
    html! {
        @if let Some(csrf) = page.csrf {
            form class=(format!("act act-{}", action_name(action))) method="post"
                action=(action.path(&source.namespace, &source.name)) {
                (csrf_field(csrf)) (fields)
            }
        }
    }
}

/// The name of an action's form class (`act-scale`, `act-remove-label`, …).
fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Scale { .. } => "scale",
        Action::Restart { .. } => "restart",
        Action::Rollback { .. } => "rollback",
        Action::Reconcile => "reconcile",
        Action::ApproveDeletions => "approve-deletions",
        Action::RecreatePod { .. } => "recreate",
        Action::RestartContainers { .. } => "restart-containers",
        Action::AssignLabel { .. } => "assign-label",
        Action::RemoveLabel { .. } => "remove-label",
        Action::Lock { .. } => "lock",
        Action::Unlock { .. } => "unlock",
    }
}

/// The Sources, as given (the caller sorts them "needs attention" first).
pub fn sources_page(page: &Page, sources: &[SourceSummary]) -> String {
    layout(
        page,
        "Sources",
        "sources-page",
        html! {
            h1 { "Sources" }
            p #summary { (overview(sources)) }
            table #sources {
                thead { (head_row(&["State", "Source", "Commit", "Status", "Last pass", "Objects"])) }
                tbody { (PreEscaped(source_rows(sources))) }
            }
            @if sources.is_empty() { p.empty { "No Sources you may see." } }
        },
    )
}

/// "3 need attention · 997 ready · 1 progressing": the states, attention first.
fn overview(sources: &[SourceSummary]) -> String {
    let attention = sources.iter().filter(|s| s.state.needs_attention()).count();
    let mut parts = vec![format!("{attention} need attention")];
    for state in [
        State::Progressing,
        State::Unknown,
        State::Suspended,
        State::Ready,
    ] {
        let count = sources.iter().filter(|s| s.state == state).count();
        if count > 0 {
            parts.push(format!("{count} {}", state.name().to_lowercase()));
        }
    }
    parts.join(" · ")
}

/// The class a state's row or badge carries: `st-failed`, `st-ready`, …
fn state_class(state: State) -> String {
    format!("st-{}", state.name().to_lowercase())
}

/// The list's rows. A thousand Sources must stay a small page, so the rows are
/// terse: no class per cell (the stylesheet and the script go by column), the end
/// tags HTML lets a table leave out are left out, and a Ready row says no reason
/// and does not link its commit (its message repeats the commit the row shows; the
/// Source's page says and links it).
fn source_rows(sources: &[SourceSummary]) -> String {
    let mut rows = String::with_capacity(sources.len() * 256);
    for source in sources {
        let key = format!("{}/{}", source.namespace, source.name);
        let _ = write!(
            rows,
            "<tr class=\"{}\" data-source=\"",
            state_class(source.state)
        );
        escape_into(&mut rows, &key);
        let _ = write!(
            rows,
            "\"><td>{}<td><a href=\"{}\">",
            source.state.name(),
            paths::source_page(&source.namespace, &source.name)
        );
        escape_into(&mut rows, &key);
        rows.push_str("</a><td>");
        let link = source.state != State::Ready;
        rows.push_str(&commits(source, link).into_string());
        rows.push_str("<td>");
        rows.push_str(&status(source).into_string());
        rows.push_str("<td>");
        escape_into(&mut rows, &last_pass(source));
        rows.push_str("<td>");
        rows.push_str(&counts(&source.counts).into_string());
        rows.push('\n');
    }
    rows
}

fn escape_into(out: &mut String, text: &str) {
    let _ = Escaper::new(out).write_str(text);
}

/// Why a Source is as it is: reason, message, what it is blocked on, its clusters.
fn status(source: &SourceSummary) -> Markup {
    html! {
        @if source.state != State::Ready {
            span.reason { (source.reason) } " " span.message { (source.message) }
        }
        @if let Some(blocked) = &source.blocked_on { " " span.blocked { (blocked) } }
        @if source.clusters.len() > 1 { " " (clusters_inline(&source.clusters)) }
    }
}

/// The wanted commit (with `link`, a link on the Git host when there is one) and,
/// when it differs, the applied one.
fn commits(source: &SourceSummary, link: bool) -> Markup {
    let commit_link = safe_link(source.commit_link.as_deref()).filter(|_| link);
    html! {
        @match (&source.wanted, commit_link) {
            (Some(wanted), Some(link)) => a.wanted href=(link) { (short(wanted)) },
            (Some(wanted), None) => (short(wanted)),
            (None, _) => "—",
        }
        @if source.applied != source.wanted {
            " " span.applied { "applied " (source.applied.as_deref().map_or("none", short)) }
        }
    }
}

/// A link to the Git host, only when it is an http(s) (or relative) address.
fn safe_link(link: Option<&str>) -> Option<&str> {
    link.filter(|link| markdown::is_safe_url(link))
}

fn short(commit: &str) -> &str {
    commit
        .char_indices()
        .nth(SHORT_COMMIT)
        .map_or(commit, |(at, _)| &commit[..at])
}

fn last_pass(source: &SourceSummary) -> String {
    match (&source.last_pass, source.took_seconds) {
        (Some(at), Some(took)) => format!("{at} {}", duration(took)),
        (Some(at), None) => at.clone(),
        (None, _) => "—".into(),
    }
}

/// `0.4s`, `12s`, `3m05s`.
fn duration(seconds: f64) -> String {
    if seconds < 10.0 {
        format!("{seconds:.1}s")
    } else if seconds < 60.0 {
        format!("{seconds:.0}s")
    } else {
        let whole = seconds.round() as u64;
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

fn counts(counts: &Counts) -> Markup {
    html! {
        (counts.objects)
        @for (count, what) in [(counts.drifted, "drifted"), (counts.failed, "failed"), (counts.conflicts, "conflicts")] {
            @if count > 0 { " " span class=(what) { (count) " " (what) } }
        }
    }
}

fn clusters_inline(clusters: &[ClusterRow]) -> Markup {
    html! {
        span.clusters {
            @for cluster in clusters {
                span.cluster.ok[cluster.ready].bad[!cluster.ready] title=(cluster.message) { (cluster.name) }
            }
        }
    }
}

/// One Source.
pub fn source_page(page: &Page, detail: &SourceDetail) -> String {
    let source = &detail.summary;
    layout(
        page,
        &format!("{}/{}", source.namespace, source.name),
        "source-page",
        PreEscaped(source_main(page, detail)),
    )
}

/// What a Source's page holds in `<main>`: what the daemon serves for
/// `?fragment=main`, and the script swaps in when the Source changes.
pub fn source_main(page: &Page, detail: &SourceDetail) -> String {
    let source = &detail.summary;
    let (namespace, name) = (source.namespace.as_str(), source.name.as_str());
    html! {
        h1 { (namespace) "/" (name) }
        (summary_block(page, source))
        section #objects {
            h2 { "Objects" }
            @if detail.models.is_empty() { p.empty { "No objects planned yet." } }
            ul.tree {
                @for model in &detail.models { (model_node(page, source, model)) }
            }
        }
        section #plan {
            h2 { "Last plan" }
            @match &detail.report_markdown {
                Some(report) => div.report { (PreEscaped(markdown::to_html(report))) },
                None => p.empty { "No plan yet." },
            }
        }
        section #graph {
            h2 { "Dependencies" }
            @if detail.graph.waves.is_empty() { p.empty { "No models." } }
            @else { div.graph { (PreEscaped(graph::svg(&detail.graph))) } }
        }
        (events_section(&detail.events))
        (discovered_section(&detail.discovered))
        (hosts_section(page, source, &detail.hosts))
        (images_section(&detail.images))
        @if let Some(revert) = &detail.last_revert { (revert_section(revert)) }
    }
    .into_string()
}

fn summary_block(page: &Page, source: &SourceSummary) -> Markup {
    let key = format!("{}/{}", source.namespace, source.name);
    html! {
        div #summary class=(state_class(source.state)) data-source=(key) {
            p {
                span.state { (source.state.name()) } " "
                span.reason { (source.reason) } " "
                span.message { (source.message) }
            }
            @if let Some(blocked) = &source.blocked_on { p.blocked { "Blocked on " (blocked) } }
            dl {
                dt { "Commit" } dd.commit { (commits(source, true)) }
                @if let Some(url) = &source.url {
                    dt { "Repository" } dd {
                        (url)
                        @if let Some(reference) = &source.reference { " @ " (reference) }
                        @if let Some(path) = &source.path { " : " (path) }
                    }
                }
                dt { "Last pass" } dd.pass { (last_pass(source)) }
                dt { "Objects" } dd.counts { (counts(&source.counts)) }
            }
            @if !source.clusters.is_empty() {
                table.clusters {
                    thead { (head_row(&["Cluster", "Ready", "Reason", "Message"])) }
                    tbody {
                        @for cluster in &source.clusters {
                            tr {
                                td { (cluster.name) } td { (yes_no(cluster.ready)) }
                                td { (cluster.reason) } td { (cluster.message) }
                            }
                        }
                    }
                }
            }
            @if let Some(digest) = &source.held_deletions {
                (action_form(page, source, &Action::ApproveDeletions, html! {
                    input type="hidden" name="digest" value=(digest);
                    button { "Approve these deletions" }
                }))
            }
            (action_form(page, source, &Action::Reconcile, html! { button { "Reconcile now" } }))
        }
    }
}

/// A table's header row.
fn head_row(columns: &[&str]) -> Markup {
    html! { tr { @for column in columns { th { (column) } } } }
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

fn model_node(page: &Page, source: &SourceSummary, model: &ModelNode) -> Markup {
    html! {
        li.model data-model=(model.model) {
            div.model-head {
                span.model-name { (model.model) }
                @if let Some(wave) = model.wave { " " span.wave { "wave " (wave + 1) } }
                @if let Some(slice) = model.model.strip_prefix("Slice/") {
                    (slice_forms(page, source, slice))
                }
            }
            ul.objects {
                @for object in &model.objects { (object_item(page, source, object)) }
            }
        }
    }
}

fn slice_forms(page: &Page, source: &SourceSummary, slice: &str) -> Markup {
    html! {
        span.actions {
            (action_form(page, source, &Action::Scale { slice }, html! {
                input type="text" name="replicas" required pattern="[+-]?[0-9]+" size="4"
                    placeholder="3, +1, -1" aria-label="replicas";
                button { "Scale" }
            }))
            (action_form(page, source, &Action::Restart { slice }, html! { button { "Restart" } }))
            (action_form(page, source, &Action::Rollback { slice }, html! {
                input type="text" name="to" size="12" placeholder="commit (optional)" aria-label="roll back to commit";
                button { "Roll back" }
            }))
        }
    }
}

fn object_item(page: &Page, source: &SourceSummary, object: &ObjectRow) -> Markup {
    let key = match &object.namespace {
        Some(namespace) => format!("{}/{namespace}/{}", object.kind, object.name),
        None => format!("{}/{}", object.kind, object.name),
    };
    let (ready_class, ready_word) = match object.ready {
        Some(true) => ("yes", "ready"),
        Some(false) => ("no", "not ready"),
        None => ("unknown", "readiness unknown"),
    };
    html! {
        li.object data-object=(key) {
            span.object-name { (key) } " "
            span.action { (object.action) } " "
            span class=(format!("ready {ready_class}")) {
                (ready_word) @if let Some(words) = &object.readiness { ": " (words) }
            }
            @if let Some(drift) = &object.drift {
                p.drift {
                    "changed by " span.manager { (drift.manager) } " at " (drift.seen)
                    @if let Some(corrected) = &drift.corrected { span.corrected { "; corrected at " (corrected) } }
                }
            }
            @for conflict in &object.conflicts {
                p.conflict { "field " code { (conflict.field) } " owned by " span.manager { (conflict.manager) } }
            }
            @if let Some(error) = &object.error { p.error { (error) } }
            @if !object.pods.is_empty() {
                ul.pods { @for pod in &object.pods { li { (pod_line(page, source, pod)) } } }
            }
        }
    }
}

/// A pod: name, phase, readiness, restarts, node, and its recreate and
/// restart-containers forms.
fn pod_line(page: &Page, source: &SourceSummary, pod: &PodRow) -> Markup {
    let (namespace, pod_name) = (pod.namespace.as_str(), pod.name.as_str());
    let recreate = Action::RecreatePod {
        namespace,
        pod: pod_name,
    };
    let restart = Action::RestartContainers {
        namespace,
        pod: pod_name,
    };
    let (ready_class, ready_word) = if pod.ready {
        ("ready yes", "ready")
    } else {
        ("ready no", "not ready")
    };
    html! {
        span.pod data-pod=(format!("{}/{}", pod.namespace, pod.name)) {
            span.pod-name { (pod.namespace) "/" (pod.name) } " "
            span.phase { (pod.phase) } " "
            span class=(ready_class) { (ready_word) }
            @if pod.restarts > 0 { " " span.restarts { (pod.restarts) " restarts" } }
            @if let Some(node) = &pod.node { " on " span.node { (node) } }
        }
        (action_form(page, source, &recreate, html! {
            button data-confirm=(format!("Recreate pod {namespace}/{pod_name}?")) { "Recreate" }
        }))
        (action_form(page, source, &restart, html! { button { "Restart containers" } }))
    }
}

fn events_section(events: &[EventRow]) -> Markup {
    html! {
        section #events {
            h2 { "Events" }
            @if events.is_empty() { p.empty { "No events." } }
            @else {
                table.events {
                    thead { (head_row(&["Time", "Type", "Reason", "Object", "Message", "Count"])) }
                    tbody {
                        @for event in events {
                            tr.warning[event.type_ == "Warning"] {
                                td { (event.time.as_deref().unwrap_or("—")) } td { (event.type_) } td { (event.reason) }
                                td { (event.object) } td { (event.message) } td { (event.count) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn discovered_section(pods: &[DiscoveredPod]) -> Markup {
    html! {
        section #discovered {
            h2 { "Discovered pods" }
            @if pods.is_empty() { p.empty { "None recorded." } }
            @else {
                table.discovered {
                    thead { (head_row(&["Pod", "File", "Commit"])) }
                    tbody {
                        @for pod in pods {
                            tr {
                                td { (pod.namespace) "/" (pod.name) } td { (pod.file) }
                                td {
                                    @match (&pod.commit, safe_link(pod.commit_link.as_deref())) {
                                        (Some(commit), Some(link)) => a href=(link) { (short(commit)) },
                                        (Some(commit), None) => (short(commit)),
                                        (None, _) => "—",
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn revert_section(revert: &RevertRow) -> Markup {
    html! {
        section #revert {
            h2 { "Last failed rollout" }
            p.warning {
                "The rollout of " code.failed { (revert.failed) } " failed at " (revert.time) ": "
                @match &revert.revert {
                    Some(commit) => { "reverted in " code.revert { (commit) } "." },
                    None => "not reverted.",
                }
            }
            p.message { (revert.message) }
            @if !revert.held.is_empty() {
                p.held { "Image policies held until a person commits: " (revert.held.join(", ")) }
            }
        }
    }
}

fn images_section(policies: &[ImagePolicyRow]) -> Markup {
    html! {
        section #images {
            h2 { "Image policies" }
            @if policies.is_empty() { p.empty { "No image policies." } }
            @else {
                table.images {
                    thead { (head_row(&["Policy", "Image", "Last scan", "Tags", "Candidate", "Result", "Message", "Last update"])) }
                    tbody {
                        @for policy in policies {
                            tr.warning[policy.result == "Failed"] data-policy=(policy.policy) {
                                td { (policy.policy) } td { (policy.image) } td { (policy.last_scan) }
                                td { @match policy.tags { Some(tags) => (tags), None => "—" } }
                                td { (policy.candidate.as_deref().unwrap_or("—")) }
                                td.result { (policy.result) } td.message { (policy.message) }
                                td.update {
                                    @match (&policy.last_update, &policy.last_update_time) {
                                        (Some(update), Some(time)) => { (update) " (" (time) ")" },
                                        (Some(update), None) => (update),
                                        (None, _) => "—",
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn hosts_section(page: &Page, source: &SourceSummary, hosts: &[HostRow]) -> Markup {
    html! {
        section #hosts {
            h2 { "Hosts" }
            @if hosts.is_empty() { p.empty { "No hosts." } }
            @for host in hosts { (host_block(page, source, host)) }
        }
    }
}

fn host_block(page: &Page, source: &SourceSummary, host: &HostRow) -> Markup {
    let host_name = host.name.as_str();
    let ready = match host.ready {
        Some(true) => ("ready yes", "ready"),
        Some(false) => ("ready no", "not ready"),
        None => ("ready unknown", "no node"),
    };
    html! {
        div.host data-host=(host_name) {
            h3 {
                span.host-name { (host_name) } " "
                span class=(ready.0) { (ready.1) }
                @if host.locked { " " span.locked { "locked" } }
                @if let Some(file) = &host.file { " " span.file { (file) } }
            }
            ul.labels {
                @for (key, value) in &host.labels {
                    li.label data-key=(key) {
                        code { (key) "=" (value) }
                        (action_form(page, source, &Action::RemoveLabel { host: host_name, key }, html! {
                            button aria-label=(format!("remove label {key}")) { "×" }
                        }))
                    }
                }
            }
            (action_form(page, source, &Action::AssignLabel { host: host_name }, html! {
                input type="text" name="key" required placeholder="key" aria-label="label key";
                input type="text" name="value" placeholder="value" aria-label="label value";
                button { "Assign label" }
            }))
            @if host.locked {
                (action_form(page, source, &Action::Unlock { host: host_name }, html! { button { "Unlock" } }))
            } @else {
                (action_form(page, source, &Action::Lock { host: host_name }, html! { button { "Lock" } }))
            }
            @if !host.pods.is_empty() {
                ul.pods { @for pod in &host.pods { li { (pod_line(page, source, pod)) } } }
            }
        }
    }
}

/// The login form: a bearer token (a ServiceAccount token or an OIDC token the API
/// server accepts), posted to [`paths::LOGIN`] as field `token`.
pub fn login_page(page: &Page, error: Option<&str>) -> String {
    layout(
        page,
        "Log in",
        "login-page",
        html! {
            h1 { "Log in" }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            form.login method="post" action=(paths::LOGIN) {
                label for="token" { "Bearer token (a ServiceAccount token, or an OIDC token the API server accepts)" }
                input #token type="password" name="token" required autocomplete="off";
                button { "Log in" }
            }
        },
    )
}

/// An error (401, 403, 404, …) as a page.
pub fn error_page(page: &Page, status: u16, message: &str) -> String {
    layout(
        page,
        &format!("Error {status}"),
        "error-page",
        html! { h1 { "Error " (status) } p.error { (message) } p { a href=(paths::SOURCES_PAGE) { "Back to the Sources" } } },
    )
}

#[cfg(test)]
mod tests;
