//! The local control plane's audit log (`logs/audit.log`, one JSON object per request,
//! written as `scripts/local-cluster`'s policy says: every write at Metadata level, a
//! Source's status write with its body), read as the tests count writes: who made
//! each (a tether replica names itself in its User-Agent, `tether/VERSION (IDENTITY)`)
//! and to what.

use std::path::Path;

/// One request the API server logged.
pub struct Entry(pub serde_json::Value);

impl Entry {
    pub fn verb(&self) -> &str {
        self.0["verb"].as_str().unwrap_or_default()
    }

    /// Whether the request succeeded (a 2xx answer).
    pub fn succeeded(&self) -> bool {
        let code = self.0["responseStatus"]["code"].as_i64().unwrap_or(0);
        (200..300).contains(&code)
    }

    /// A write that succeeded and changed something: a create, update, patch or
    /// delete, not a dry run (a plan's server-side dry run is a PATCH that the server
    /// answers without storing anything).
    pub fn is_write(&self) -> bool {
        ["create", "update", "patch", "delete"].contains(&self.verb())
            && self.succeeded()
            && !self.is_dry_run()
    }

    /// A request made with `dryRun=All`: the server validates it and stores nothing.
    pub fn is_dry_run(&self) -> bool {
        let uri = self.0["requestURI"].as_str().unwrap_or_default();
        let query = uri.split_once('?').map_or("", |(_, q)| q);
        query.split('&').any(|pair| pair == "dryRun=All")
    }

    /// The tether replica that made it, by its User-Agent.
    pub fn replica(&self) -> Option<&str> {
        self.0["userAgent"]
            .as_str()?
            .strip_prefix("tether/")?
            .split_once(" (")
            .map(|(_, r)| r.trim_end_matches(')'))
    }

    /// When the API server received it, in Unix milliseconds.
    pub fn received_ms(&self) -> Option<i64> {
        let text = self.0["requestReceivedTimestamp"].as_str()?;
        Some(
            chrono::DateTime::parse_from_rfc3339(text)
                .ok()?
                .timestamp_millis(),
        )
    }

    /// What it was made to: `(resource, namespace, name, subresource)`, each `""`
    /// when absent.
    pub fn object(&self) -> (&str, &str, &str, &str) {
        let field = |name: &str| self.0["objectRef"][name].as_str().unwrap_or_default();
        (
            field("resource"),
            field("namespace"),
            field("name"),
            field("subresource"),
        )
    }
}

/// The entries of the audit log at `path` from byte `offset` on (none when it cannot
/// be read).
pub fn entries_since(path: &Path, offset: u64) -> Vec<Entry> {
    let text = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(text.len());
    String::from_utf8_lossy(&text[start..])
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .map(Entry)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::Entry;

    fn entry(verb: &str, uri: &str, code: i64) -> Entry {
        Entry(serde_json::json!({
            "verb": verb,
            "requestURI": uri,
            "responseStatus": {"code": code},
        }))
    }

    #[test]
    fn a_write_is_a_successful_change_and_never_a_dry_run() {
        let cases = [
            (
                "patch",
                "/api/v1/namespaces/a/configmaps/c?fieldManager=t",
                200,
                true,
            ),
            // As the API server logs a plan's dry run (its query begins with `&`).
            (
                "patch",
                "/api/v1/namespaces/a/configmaps/c?&dryRun=All&fieldManager=t",
                200,
                false,
            ),
            (
                "create",
                "/api/v1/namespaces/a/configmaps?dryRun=All",
                201,
                false,
            ),
            ("delete", "/api/v1/namespaces/a/configmaps/c", 200, true),
            ("patch", "/api/v1/namespaces/a/configmaps/c", 409, false),
            ("get", "/api/v1/namespaces/a/configmaps/c", 200, false),
            // Only the query decides: a name that says dryRun=All is still a write.
            (
                "patch",
                "/api/v1/namespaces/a/configmaps/dryRun=All",
                200,
                true,
            ),
        ];
        for (verb, uri, code, write) in cases {
            assert_eq!(
                entry(verb, uri, code).is_write(),
                write,
                "{verb} {uri} {code}"
            );
        }
    }
}
