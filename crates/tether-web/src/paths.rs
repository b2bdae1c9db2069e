//! The page's and the API's paths, made in one place: the daemon's router and the
//! pages' links and forms agree on them. Every segment is percent-encoded (a name
//! may hold any character a repository put in it).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a path segment escapes: everything but RFC 3986's unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a path segment: everything but unreserved characters.
pub fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// The list of Sources (the home page).
pub const SOURCES_PAGE: &str = "/";
pub const LOGIN: &str = "/login";
pub const LOGOUT: &str = "/logout";
pub const STYLE: &str = "/assets/tether.css";
pub const SCRIPT: &str = "/assets/tether.js";
/// `GET`: `{schema, sources: [SourceSummary]}`, needs attention first.
pub const API_SOURCES: &str = "/api/v1/sources";
/// `GET`: `{schema, user, csrfToken}`.
pub const API_SESSION: &str = "/api/v1/session";
/// `GET`: Server-Sent Events; `event: source`, `data:` a `SourceSummary` (JSON), each
/// time a Source visible to the request changes.
pub const API_STREAM: &str = "/api/v1/stream";

/// A Source's page.
pub fn source_page(namespace: &str, name: &str) -> String {
    format!("/sources/{}/{}", segment(namespace), segment(name))
}

/// `GET`: the `SourceDetail`; the actions are below it.
pub fn api_source(namespace: &str, name: &str) -> String {
    format!("{API_SOURCES}/{}/{}", segment(namespace), segment(name))
}

/// The actions, all `POST` (a form, or JSON), all needing the CSRF token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Form field `replicas`: `3`, `+1` or `-1`.
    Scale {
        slice: &'a str,
    },
    Restart {
        slice: &'a str,
    },
    /// Form field `to` (optional): a commit; default, before the slice's latest change.
    Rollback {
        slice: &'a str,
    },
    /// A pass now.
    Reconcile,
    /// Form field `digest`: approve exactly the deletions of this digest, of a prune
    /// held beyond the deletion budget.
    ApproveDeletions,
    RecreatePod {
        namespace: &'a str,
        pod: &'a str,
    },
    /// Form field `container` (optional): one container; default all.
    RestartContainers {
        namespace: &'a str,
        pod: &'a str,
    },
    /// StarlingX's label assignment: form fields `key`, `value` (JSON: `{KEY: VALUE, …}`).
    AssignLabel {
        host: &'a str,
    },
    /// StarlingX's label removal (`DELETE` in the API; `POST …/remove` from a form).
    RemoveLabel {
        host: &'a str,
        key: &'a str,
    },
    Lock {
        host: &'a str,
    },
    Unlock {
        host: &'a str,
    },
}

impl Action<'_> {
    /// Where the action is posted, for the Source `namespace/name`.
    pub fn path(&self, namespace: &str, name: &str) -> String {
        let source = api_source(namespace, name);
        match self {
            Action::Scale { slice } => format!("{source}/slices/{}/scale", segment(slice)),
            Action::Restart { slice } => format!("{source}/slices/{}/restart", segment(slice)),
            Action::Rollback { slice } => format!("{source}/slices/{}/rollback", segment(slice)),
            Action::Reconcile => format!("{source}/reconcile"),
            Action::ApproveDeletions => format!("{source}/approve-deletions"),
            Action::RecreatePod { namespace, pod } => {
                format!(
                    "{source}/pods/{}/{}/recreate",
                    segment(namespace),
                    segment(pod)
                )
            }
            Action::RestartContainers { namespace, pod } => format!(
                "{source}/pods/{}/{}/restart-containers",
                segment(namespace),
                segment(pod)
            ),
            Action::AssignLabel { host } => format!("{source}/hosts/{}/labels", segment(host)),
            Action::RemoveLabel { host, key } => format!(
                "{source}/hosts/{}/labels/{}/remove",
                segment(host),
                segment(key)
            ),
            Action::Lock { host } => format!("{source}/hosts/{}/lock", segment(host)),
            Action::Unlock { host } => format!("{source}/hosts/{}/unlock", segment(host)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_stay_one_segment() {
        assert_eq!(segment("a/b?c#d e"), "a%2Fb%3Fc%23d%20e");
        assert_eq!(
            source_page("shop", "<script>alert(1)</script>"),
            "/sources/shop/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"
        );
        assert_eq!(
            Action::RemoveLabel {
                host: "n1",
                key: "tether.dev/role"
            }
            .path("a", "b"),
            "/api/v1/sources/a/b/hosts/n1/labels/tether.dev%2Frole/remove"
        );
    }
}
