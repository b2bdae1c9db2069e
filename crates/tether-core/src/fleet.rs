//! A fleet's view, decided purely: the compact report a cluster's daemon writes to a
//! hub (a `ClusterReport`'s spec), what of it needs attention, and when a cluster
//! stopped reporting.
//!
//! A report is data a cluster wrote: nothing in it is an address to follow or a
//! credential. The cluster a report speaks for is the name of the object it is in
//! (which the hub's RBAC binds to one ServiceAccount), never a field of its content.
//! The time (`now`) is passed in.
//!
//! A Source needs attention when stalled, failed, blocked or drifted
//! ([`source_state`]); a cluster stopped reporting after the reader's threshold, else
//! three heartbeats (from 30 s to 1 h: [`stale_after`]); [`view`] puts what needs
//! attention first, worst first, then by name; every string of the text goes through
//! [`printable`] (control characters escaped).

use std::cmp::Reverse;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The longest message a report carries per field (characters); a longer one is cut
/// with `…`, so that a report of many Sources stays far below the API server's object
/// size limit.
pub const MESSAGE_LIMIT: usize = 300;

/// The heartbeat assumed of a report that names none (seconds).
pub const DEFAULT_HEARTBEAT_SECONDS: u64 = 60;

/// What one cluster's daemon reports to the hub.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// When the daemon wrote the report (RFC 3339). None: the cluster joined and has
    /// not reported yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<String>,
    /// The version of tether that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How often the daemon reports when nothing changes (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_seconds: Option<u64>,
    /// Each Source the daemon runs, by namespace and name.
    #[serde(default)]
    pub sources: Vec<SourceReport>,
}

/// One Source as its status shows it (the status is already redacted: no secret is in
/// a message).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceReport {
    pub namespace: String,
    pub name: String,
    /// The revision of the last pass, applied or not (`<ref>@sha1:<commit>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted: Option<String>,
    /// The revision last applied without error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// The Ready condition's status: True, False or Unknown (none: no pass yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// The Ready condition's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The Ready condition's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Retrying cannot help before the models or the cluster change.
    #[serde(default)]
    pub stalled: bool,
    /// A new revision is being applied, or a failure retried.
    #[serde(default)]
    pub reconciling: bool,
    #[serde(default)]
    pub suspended: bool,
    /// What the Source waits for (a wave's dependencies not ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_on: Option<String>,
    /// The counts of the last applied plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    /// When a revision was last applied without error (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<String>,
    /// Objects changed by someone else since the daemon started: taken back, or only
    /// reported (the Source's drift policy is Report).
    #[serde(default, skip_serializing_if = "Drift::is_none")]
    pub drift: Drift,
}

/// What the last apply did, by action.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub created: u32,
    pub configured: u32,
    pub unchanged: u32,
    pub pruned: u32,
    pub failed: u32,
}

/// Drift seen, by what was done about it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    #[serde(default)]
    pub corrected: u64,
    #[serde(default)]
    pub reported: u64,
}

impl Drift {
    pub fn is_none(&self) -> bool {
        self.corrected == 0 && self.reported == 0
    }
}

/// `text` cut to [`MESSAGE_LIMIT`] characters (what a daemon puts in a report).
pub fn cut(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_LIMIT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A Source's state in the view, worst first.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum SourceState {
    /// Retrying cannot help until someone changes the models or the cluster.
    Stalled,
    /// The last pass failed; it is retried.
    Failed,
    /// Applying waits for something not ready.
    Blocked,
    /// Someone changed applied objects and the drift was only reported.
    Drifted,
    /// A revision is being applied.
    Progressing,
    /// Not reconciled on purpose.
    Suspended,
    /// No pass has finished yet.
    Pending,
    Ready,
}

impl SourceState {
    /// Whether a person should look at it.
    pub fn needs_attention(self) -> bool {
        matches!(
            self,
            SourceState::Stalled
                | SourceState::Failed
                | SourceState::Blocked
                | SourceState::Drifted
        )
    }

    pub fn word(self) -> &'static str {
        match self {
            SourceState::Stalled => "stalled",
            SourceState::Failed => "failed",
            SourceState::Blocked => "blocked",
            SourceState::Drifted => "drifted",
            SourceState::Progressing => "progressing",
            SourceState::Suspended => "suspended",
            SourceState::Pending => "pending",
            SourceState::Ready => "ready",
        }
    }
}

/// The state a Source's report shows.
pub fn source_state(source: &SourceReport) -> SourceState {
    if source.stalled {
        SourceState::Stalled
    } else if source.suspended {
        SourceState::Suspended
    } else if source.ready.as_deref() == Some("False") && source.blocked_on.is_some() {
        SourceState::Blocked
    } else if source.ready.as_deref() == Some("False") {
        SourceState::Failed
    } else if source.drift.reported > 0 {
        SourceState::Drifted
    } else if source.reconciling || (source.wanted.is_some() && source.wanted != source.applied) {
        SourceState::Progressing
    } else if source.ready.as_deref() == Some("True") {
        SourceState::Ready
    } else {
        SourceState::Pending
    }
}

/// Whether a cluster's reports arrive.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum Reporting {
    /// Its last report is recent.
    Reporting,
    /// Its last report is older than the threshold.
    NotReporting,
    /// It joined and never reported (or its report's time cannot be read).
    NeverReported,
}

/// When a report counts as stale: `threshold` if the reader gave one, else three of
/// the report's heartbeats (from 30 s to an hour, so that a report cannot hide for
/// long by naming a long heartbeat).
pub fn stale_after(report: &Report, threshold: Option<Duration>) -> Duration {
    threshold.unwrap_or_else(|| {
        let heartbeat = report
            .heartbeat_seconds
            .unwrap_or(DEFAULT_HEARTBEAT_SECONDS);
        Duration::from_secs(heartbeat.saturating_mul(3).clamp(30, 3600))
    })
}

/// Whether `report` is recent at `now`.
pub fn reporting(report: &Report, now: Timestamp, threshold: Option<Duration>) -> Reporting {
    let Some(at) = report
        .reported_at
        .as_deref()
        .and_then(|at| at.parse::<Timestamp>().ok())
    else {
        return Reporting::NeverReported;
    };
    let age = now.as_second().saturating_sub(at.as_second());
    let limit = stale_after(report, threshold).as_secs();
    match u64::try_from(age) {
        Ok(age) if age > limit => Reporting::NotReporting,
        _ => Reporting::Reporting,
    }
}

/// One Source in the view.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SourceView {
    pub state: SourceState,
    pub needs_attention: bool,
    #[serde(flatten)]
    pub report: SourceReport,
}

/// One cluster in the view.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    /// The name of its report object (what the hub's RBAC lets it write).
    pub name: String,
    pub reporting: Reporting,
    pub needs_attention: bool,
    /// Its last report's time (RFC 3339), when it ever reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_report: Option<String>,
    /// How old a report may be before the cluster counts as not reporting (seconds).
    pub stale_after_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its Sources, those needing attention first.
    pub sources: Vec<SourceView>,
}

/// Every cluster, those needing attention first.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    /// When the view was made (RFC 3339).
    pub at: String,
    pub summary: Summary,
    pub clusters: Vec<ClusterView>,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub clusters: usize,
    pub clusters_needing_attention: usize,
    pub clusters_not_reporting: usize,
    pub sources: usize,
    pub sources_needing_attention: usize,
}

impl FleetView {
    pub fn needs_attention(&self) -> bool {
        self.summary.clusters_needing_attention > 0
    }
}

/// The view of `reports` (each with the name of its object) at `now`: clusters that
/// need attention (not reporting, or a Source that needs it) first, worst first, then
/// by name; in each, its Sources worst first, then by namespace and name.
pub fn view(
    reports: Vec<(String, Report)>,
    now: Timestamp,
    threshold: Option<Duration>,
) -> FleetView {
    let mut clusters: Vec<ClusterView> = reports
        .into_iter()
        .map(|(name, report)| cluster_view(name, report, now, threshold))
        .collect();
    clusters.sort_by_key(|cluster| {
        (
            Reverse(cluster.needs_attention),
            match cluster.reporting {
                Reporting::NotReporting => 0,
                Reporting::NeverReported => 1,
                Reporting::Reporting => 2,
            },
            // The worst of its Sources (they are sorted worst first).
            cluster
                .sources
                .first()
                .map_or(SourceState::Ready, |source| source.state),
            cluster.name.clone(),
        )
    });
    let summary = Summary {
        clusters: clusters.len(),
        clusters_needing_attention: clusters.iter().filter(|c| c.needs_attention).count(),
        clusters_not_reporting: clusters
            .iter()
            .filter(|c| c.reporting != Reporting::Reporting)
            .count(),
        sources: clusters.iter().map(|c| c.sources.len()).sum(),
        sources_needing_attention: clusters
            .iter()
            .flat_map(|c| &c.sources)
            .filter(|s| s.needs_attention)
            .count(),
    };
    FleetView {
        at: now.to_string(),
        summary,
        clusters,
    }
}

fn cluster_view(
    name: String,
    report: Report,
    now: Timestamp,
    threshold: Option<Duration>,
) -> ClusterView {
    let reporting = reporting(&report, now, threshold);
    let stale_after_seconds = stale_after(&report, threshold).as_secs();
    let mut sources: Vec<SourceView> = report
        .sources
        .into_iter()
        .map(|report| {
            let state = source_state(&report);
            SourceView {
                state,
                needs_attention: state.needs_attention(),
                report,
            }
        })
        .collect();
    sources.sort_by(|a, b| {
        (a.state, &a.report.namespace, &a.report.name).cmp(&(
            b.state,
            &b.report.namespace,
            &b.report.name,
        ))
    });
    let needs_attention =
        reporting != Reporting::Reporting || sources.iter().any(|s| s.needs_attention);
    ClusterView {
        name,
        reporting,
        needs_attention,
        last_report: report.reported_at,
        stale_after_seconds,
        version: report.version,
        sources,
    }
}

/// `text` safe to print on a terminal: control characters (escape sequences, line
/// breaks) written as escapes, so a report's strings are shown as text and never act.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The view as text: a summary line, then each cluster and its Sources (only those
/// needing attention with `attention_only`).
pub fn text(view: &FleetView, attention_only: bool) -> String {
    use std::fmt::Write;
    let summary = &view.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of {} cluster(s) need attention ({} not reporting); {} of {} Source(s) need attention",
        summary.clusters_needing_attention,
        summary.clusters,
        summary.clusters_not_reporting,
        summary.sources_needing_attention,
        summary.sources,
    );
    for cluster in &view.clusters {
        if attention_only && !cluster.needs_attention {
            continue;
        }
        let name = printable(&cluster.name);
        let state = match (&cluster.reporting, &cluster.last_report) {
            (Reporting::Reporting, Some(at)) => {
                format!("reporting (last report {})", printable(at))
            }
            (Reporting::NotReporting, Some(at)) => format!(
                "NOT REPORTING since {} (older than {}s)",
                printable(at),
                cluster.stale_after_seconds
            ),
            (_, _) => "NEVER REPORTED".to_string(),
        };
        let version = cluster
            .version
            .as_deref()
            .map(|v| format!(", tether {}", printable(v)))
            .unwrap_or_default();
        let _ = writeln!(out, "\n{name}: {state}{version}");
        for source in &cluster.sources {
            if attention_only && !source.needs_attention {
                continue;
            }
            let _ = writeln!(out, "  {}", source_line(source));
        }
    }
    out
}

fn source_line(source: &SourceView) -> String {
    let report = &source.report;
    let mut line = format!(
        "{}/{}  {}",
        printable(&report.namespace),
        printable(&report.name),
        source.state.word()
    );
    let short = |revision: &str| printable(revision);
    match (&report.applied, &report.wanted) {
        (Some(applied), Some(wanted)) if applied != wanted => {
            line.push_str(&format!(
                "  applied {}, wanted {}",
                short(applied),
                short(wanted)
            ));
        }
        (Some(applied), _) => line.push_str(&format!("  at {}", short(applied))),
        (None, Some(wanted)) => line.push_str(&format!("  wanted {}", short(wanted))),
        (None, None) => {}
    }
    if let Some(counts) = &report.counts {
        line.push_str(&format!(
            "  ({} created, {} configured, {} unchanged, {} pruned, {} failed)",
            counts.created, counts.configured, counts.unchanged, counts.pruned, counts.failed
        ));
    }
    if !report.drift.is_none() {
        line.push_str(&format!(
            "  drift: {} corrected, {} reported",
            report.drift.corrected, report.drift.reported
        ));
    }
    if let Some(blocked) = &report.blocked_on {
        line.push_str(&format!("  waiting on: {}", printable(blocked)));
    } else if let Some(message) = report
        .message
        .as_deref()
        .filter(|_| source.state != SourceState::Ready)
    {
        let reason = report.reason.as_deref().unwrap_or_default();
        line.push_str(&format!("  {}: {}", printable(reason), printable(message)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn ready(namespace: &str, name: &str) -> SourceReport {
        SourceReport {
            namespace: namespace.into(),
            name: name.into(),
            wanted: Some("main@sha1:aaa".into()),
            applied: Some("main@sha1:aaa".into()),
            ready: Some("True".into()),
            reason: Some("ReconciliationSucceeded".into()),
            message: Some("Applied revision main@sha1:aaa".into()),
            ..SourceReport::default()
        }
    }

    fn report(at: &str, sources: Vec<SourceReport>) -> Report {
        Report {
            reported_at: Some(at.into()),
            version: Some("0.1.0".into()),
            heartbeat_seconds: Some(10),
            sources,
        }
    }

    #[test]
    fn each_state_is_read_from_the_status_the_report_carries() {
        let cases: Vec<(SourceReport, SourceState)> = vec![
            (ready("a", "ok"), SourceState::Ready),
            (
                SourceReport {
                    stalled: true,
                    ready: Some("False".into()),
                    ..ready("a", "s")
                },
                SourceState::Stalled,
            ),
            (
                SourceReport {
                    ready: Some("False".into()),
                    reason: Some("FetchFailed".into()),
                    ..ready("a", "f")
                },
                SourceState::Failed,
            ),
            (
                SourceReport {
                    ready: Some("False".into()),
                    blocked_on: Some("Deployment db not ready".into()),
                    ..ready("a", "b")
                },
                SourceState::Blocked,
            ),
            (
                SourceReport {
                    drift: Drift {
                        corrected: 0,
                        reported: 2,
                    },
                    ..ready("a", "d")
                },
                SourceState::Drifted,
            ),
            (
                SourceReport {
                    drift: Drift {
                        corrected: 5,
                        reported: 0,
                    },
                    ..ready("a", "corrected")
                },
                SourceState::Ready,
            ),
            (
                SourceReport {
                    wanted: Some("main@sha1:bbb".into()),
                    ..ready("a", "p")
                },
                SourceState::Progressing,
            ),
            (
                SourceReport {
                    suspended: true,
                    ready: Some("Unknown".into()),
                    ..ready("a", "z")
                },
                SourceState::Suspended,
            ),
            (
                SourceReport {
                    namespace: "a".into(),
                    name: "new".into(),
                    ..SourceReport::default()
                },
                SourceState::Pending,
            ),
        ];
        for (source, expected) in cases {
            assert_eq!(source_state(&source), expected, "{}", source.name);
        }
    }

    #[test]
    fn clusters_and_sources_needing_attention_come_first() {
        let now = at("2025-01-01T00:10:00Z");
        let failing = SourceReport {
            ready: Some("False".into()),
            reason: Some("FetchFailed".into()),
            message: Some("cannot fetch".into()),
            ..ready("team", "z-web")
        };
        let reports = vec![
            (
                "a-fine".to_string(),
                report("2025-01-01T00:09:55Z", vec![ready("team", "web")]),
            ),
            (
                "b-failing".to_string(),
                report(
                    "2025-01-01T00:09:55Z",
                    vec![ready("team", "a-api"), failing],
                ),
            ),
            (
                "c-silent".to_string(),
                report("2025-01-01T00:01:00Z", vec![ready("team", "web")]),
            ),
            ("d-new".to_string(), Report::default()),
        ];
        let view = view(reports, now, None);
        let order: Vec<&str> = view.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(order, ["c-silent", "d-new", "b-failing", "a-fine"]);
        let failing = &view.clusters[2];
        assert_eq!(failing.sources[0].report.name, "z-web");
        assert!(failing.sources[0].needs_attention);
        assert_eq!(view.clusters[0].reporting, Reporting::NotReporting);
        assert_eq!(view.clusters[1].reporting, Reporting::NeverReported);
        assert_eq!(
            view.summary,
            Summary {
                clusters: 4,
                clusters_needing_attention: 3,
                clusters_not_reporting: 2,
                sources: 4,
                sources_needing_attention: 1,
            }
        );
        assert!(view.needs_attention());
    }

    #[test]
    fn a_report_is_stale_after_three_heartbeats_or_the_readers_threshold() {
        let now = at("2025-01-01T00:10:00Z");
        // Heartbeat 10 s: 3 × 10 s is below the 30 s floor.
        let recent = report("2025-01-01T00:09:31Z", vec![]);
        let old = report("2025-01-01T00:09:29Z", vec![]);
        assert_eq!(reporting(&recent, now, None), Reporting::Reporting);
        assert_eq!(reporting(&old, now, None), Reporting::NotReporting);
        assert_eq!(
            reporting(&old, now, Some(Duration::from_secs(60))),
            Reporting::Reporting
        );
        // A report that names a day-long heartbeat is stale after an hour.
        let lazy = Report {
            heartbeat_seconds: Some(86_400),
            ..report("2025-01-01T08:00:00Z", vec![])
        };
        assert_eq!(
            reporting(&lazy, at("2025-01-01T09:00:01Z"), None),
            Reporting::NotReporting
        );
        // A time in the future (a clock ahead) is recent, and garbage is no report.
        let ahead = report("2025-01-01T00:12:00Z", vec![]);
        assert_eq!(reporting(&ahead, now, None), Reporting::Reporting);
        let garbage = report("http://evil.example/now", vec![]);
        assert_eq!(reporting(&garbage, now, None), Reporting::NeverReported);
    }

    #[test]
    fn the_text_shows_a_silent_cluster_with_its_last_report_and_hostile_strings_as_text() {
        let now = at("2025-01-01T00:10:00Z");
        let hostile = SourceReport {
            ready: Some("False".into()),
            reason: Some("Failed".into()),
            message: Some("see https://evil.example/x\u{1b}[2J\nfake line\u{202e}".into()),
            ..ready("team", "http://evil.example:8443/")
        };
        let view = view(
            vec![("edge".into(), report("2025-01-01T00:01:00Z", vec![hostile]))],
            now,
            None,
        );
        let text = text(&view, false);
        assert!(
            text.contains("edge: NOT REPORTING since 2025-01-01T00:01:00Z (older than 30s)"),
            "{text}"
        );
        assert!(
            text.contains("team/http://evil.example:8443/  failed"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(!text.contains('\u{202e}'), "{text}");
        assert!(text.contains("\\u{1b}[2J\\nfake line\\u{202e}"), "{text}");
        assert_eq!(text.lines().filter(|l| l.contains("fake line")).count(), 1);
    }

    #[test]
    fn attention_only_leaves_out_what_is_fine() {
        let now = at("2025-01-01T00:10:00Z");
        let view = view(
            vec![
                (
                    "fine".into(),
                    report("2025-01-01T00:09:59Z", vec![ready("a", "ok")]),
                ),
                (
                    "drifting".into(),
                    report(
                        "2025-01-01T00:09:59Z",
                        vec![
                            ready("a", "ok"),
                            SourceReport {
                                drift: Drift {
                                    corrected: 0,
                                    reported: 1,
                                },
                                ..ready("a", "hand-edited")
                            },
                        ],
                    ),
                ),
            ],
            now,
            None,
        );
        let text = text(&view, true);
        assert!(!text.contains("\nfine:"), "{text}");
        assert!(text.contains("a/hand-edited  drifted"), "{text}");
        assert!(!text.contains("a/ok"), "{text}");
    }

    #[test]
    fn a_long_message_is_cut() {
        let long = "x".repeat(MESSAGE_LIMIT + 10);
        assert_eq!(cut(&long).chars().count(), MESSAGE_LIMIT + 1);
        assert_eq!(cut("short"), "short");
    }
}
