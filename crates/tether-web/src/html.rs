//! The pages, server-rendered: each works without JavaScript (links and forms), and
//! `assets/tether.js` enhances them (live updates over Server-Sent Events). maud
//! escapes every value put in the markup.
//!
//! STUB: the interface the daemon is written against; the pages are being built.

use maud::{DOCTYPE, Markup, html};

use crate::paths;
use crate::view::{SourceDetail, SourceSummary};

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

fn layout(page: &Page, title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · tether" }
                link rel="stylesheet" href=(paths::STYLE);
                script src=(paths::SCRIPT) defer {}
            }
            body {
                header { a href=(paths::SOURCES_PAGE) { "tether" } @if let Some(user) = page.user { " " span.user { (user) } } }
                @if let Some(notice) = page.notice { p.notice { (notice) } }
                main { (body) }
            }
        }
    }
    .into_string()
}

/// The Sources, as given (the caller sorts them "needs attention" first).
pub fn sources_page(page: &Page, sources: &[SourceSummary]) -> String {
    layout(
        page,
        "Sources",
        html! {
            table id="sources" {
                @for source in sources {
                    tr { td { a href=(paths::source_page(&source.namespace, &source.name)) { (source.namespace) "/" (source.name) } } td { (source.state.name()) } td { (source.message) } }
                }
            }
        },
    )
}

/// One Source.
pub fn source_page(page: &Page, detail: &SourceDetail) -> String {
    let source = &detail.summary;
    layout(
        page,
        &source.name,
        html! { h1 { (source.namespace) "/" (source.name) } p { (source.state.name()) } },
    )
}

/// The login form: a bearer token (a ServiceAccount token or an OIDC token the API
/// server accepts), posted to [`paths::LOGIN`] as field `token`.
pub fn login_page(page: &Page, error: Option<&str>) -> String {
    layout(
        page,
        "Log in",
        html! {
            @if let Some(error) = error { p.error { (error) } }
            form method="post" action=(paths::LOGIN) { input type="password" name="token"; button { "Log in" } }
        },
    )
}

/// An error (401, 403, 404, …) as a page.
pub fn error_page(page: &Page, status: u16, message: &str) -> String {
    layout(
        page,
        "Error",
        html! { h1 { (status) } p.error { (message) } },
    )
}

/// The `<main>` of a Source's page alone: what the script swaps in on a live update.
pub fn source_main(page: &Page, detail: &SourceDetail) -> String {
    source_page(page, detail)
}
