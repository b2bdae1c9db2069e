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

    /// A write that succeeded: a create, update, patch or delete.
    pub fn is_write(&self) -> bool {
        ["create", "update", "patch", "delete"].contains(&self.verb()) && self.succeeded()
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
