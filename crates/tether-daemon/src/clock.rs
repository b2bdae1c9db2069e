//! The time as the daemon writes it: in a Source's status, a reconcile request, and
//! what the web page says of a pass.

/// Now, RFC 3339, UTC, to the nanosecond (so that two requests in one second differ).
pub(crate) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
