//! Notices: the events of a Source that matter to people (a pass applied or failed, drift
//! corrected, a wave blocked), what each receiver is sent for one (a CloudEvent, a Slack
//! message), the HMAC that signs a webhook's body, and the [`Gate`] that decides which
//! notices are sent at all: a Source's exclusions, de-duplication and a rate limit.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::str::FromStr;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What happened to a Source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeKind {
    Applied,
    Failed,
    Stalled,
    DriftCorrected,
    DriftReported,
    Pruned,
    WaveBlocked,
    HostRemoved,
    /// A commit whose rollout did not become healthy in time, reverted by tether.
    Reverted,
}

impl NoticeKind {
    pub const ALL: [NoticeKind; 9] = [
        NoticeKind::Applied,
        NoticeKind::Failed,
        NoticeKind::Stalled,
        NoticeKind::DriftCorrected,
        NoticeKind::DriftReported,
        NoticeKind::Pruned,
        NoticeKind::WaveBlocked,
        NoticeKind::HostRemoved,
        NoticeKind::Reverted,
    ];

    /// The name a Source's exclusion list uses.
    pub fn name(self) -> &'static str {
        match self {
            NoticeKind::Applied => "applied",
            NoticeKind::Failed => "failed",
            NoticeKind::Stalled => "stalled",
            NoticeKind::DriftCorrected => "drift-corrected",
            NoticeKind::DriftReported => "drift-reported",
            NoticeKind::Pruned => "pruned",
            NoticeKind::WaveBlocked => "wave-blocked",
            NoticeKind::HostRemoved => "host-removed",
            NoticeKind::Reverted => "reverted",
        }
    }

    /// The CloudEvents `type`: reverse-DNS prefixed, as the specification recommends.
    pub fn cloud_event_type(self) -> String {
        format!("dev.tether.source.{}", self.name())
    }

    /// The word and the Slack emoji a person reads first.
    fn headline(self) -> (&'static str, &'static str) {
        match self {
            NoticeKind::Applied => ("Applied", ":white_check_mark:"),
            NoticeKind::Failed => ("Failed", ":x:"),
            NoticeKind::Stalled => ("Stalled", ":hourglass:"),
            NoticeKind::DriftCorrected => ("Drift corrected", ":wrench:"),
            NoticeKind::DriftReported => ("Drift reported", ":warning:"),
            NoticeKind::Pruned => ("Pruned", ":wastebasket:"),
            NoticeKind::WaveBlocked => ("Wave blocked", ":no_entry:"),
            NoticeKind::HostRemoved => ("Host removed", ":heavy_minus_sign:"),
            NoticeKind::Reverted => ("Reverted", ":rewind:"),
        }
    }
}

impl fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no notice kind.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is no notice kind; the kinds are {}", kind_names())]
pub struct UnknownNoticeKind {
    pub given: String,
}

fn kind_names() -> String {
    NoticeKind::ALL.map(NoticeKind::name).join(", ")
}

impl FromStr for NoticeKind {
    type Err = UnknownNoticeKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        NoticeKind::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| UnknownNoticeKind {
                given: text.to_string(),
            })
    }
}

/// One event of a Source, as it is kept in the outbox and sent to every receiver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Derived from the fields that identify the event (see [`Notice::new`]): a
    /// re-delivery carries the same id, so receivers can drop the copy.
    pub id: String,
    /// RFC 3339, the time of the event (given by the engine).
    pub time: String,
    /// `namespace/name`.
    pub source: String,
    pub cluster: String,
    pub kind: NoticeKind,
    /// `ref@sha1:commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The object (`Deployment shop/web`) or host the event is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One human line.
    pub message: String,
    /// The Source's web page, or the commit's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl Notice {
    /// A notice of `kind` about `source` (`namespace/name`) in `cluster` at `time`
    /// (RFC 3339). The id is a digest of the cluster, Source, kind, time, revision,
    /// subject and reason: not of the message's wording or the link, which a newer
    /// tether may phrase differently for the same event.
    pub fn new(
        kind: NoticeKind,
        source: &str,
        cluster: &str,
        time: &str,
        message: impl Into<String>,
    ) -> Notice {
        Notice {
            id: String::new(),
            time: time.to_string(),
            source: source.to_string(),
            cluster: cluster.to_string(),
            kind,
            revision: None,
            subject: None,
            reason: None,
            message: message.into(),
            link: None,
        }
        .identified()
    }

    pub fn with_revision(mut self, revision: impl Into<String>) -> Notice {
        self.revision = Some(revision.into());
        self.identified()
    }

    pub fn with_subject(mut self, subject: impl Into<String>) -> Notice {
        self.subject = Some(subject.into());
        self.identified()
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> Notice {
        self.reason = Some(reason.into());
        self.identified()
    }

    pub fn with_link(mut self, link: impl Into<String>) -> Notice {
        self.link = Some(link.into());
        self
    }

    fn identified(mut self) -> Notice {
        // A JSON array: no two different field lists serialize to the same text.
        let identity = json!([
            self.cluster,
            self.source,
            self.kind.name(),
            self.time,
            self.revision,
            self.subject,
            self.reason,
        ]);
        let digest = Sha256::digest(identity.to_string().as_bytes());
        self.id = hex(&digest[..16]);
        self
    }

    /// What makes two notices the same news, whatever their time: a Source failing
    /// the same way on the same revision every pass says it once.
    fn content_key(&self) -> String {
        json!([self.kind.name(), self.subject, self.reason, self.revision]).to_string()
    }

    /// `main@0123abc` for `main@sha1:0123abc…`; any other revision as it is.
    pub fn short_revision(&self) -> Option<String> {
        let revision = self.revision.as_deref()?;
        Some(match revision.split_once("@sha1:") {
            Some((reference, commit)) => {
                let short: String = commit.chars().take(7).collect();
                format!("{reference}@{short}")
            }
            None => revision.to_string(),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `sha256=<hex>` HMAC-SHA256 of `body` under `key`: what tether's webhook
/// notices carry in `X-Signature-256`, and what its own generic webhook receiver checks.
pub fn signature(body: &[u8], key: &[u8]) -> String {
    // HMAC takes a key of any length: this never fails.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(body);
    format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

/// The notice as a CloudEvents 1.0 event in the structured JSON format.
pub fn cloud_event(notice: &Notice) -> Value {
    let (namespace, name) = notice
        .source
        .split_once('/')
        .unwrap_or(("", notice.source.as_str()));
    let source = format!(
        "/tether/{}/{}/{}",
        uri_segment(&notice.cluster),
        uri_segment(namespace),
        uri_segment(name)
    );
    let mut event = json!({
        "specversion": "1.0",
        "id": notice.id,
        "source": source,
        "type": notice.kind.cloud_event_type(),
        "time": notice.time,
        "datacontenttype": "application/json",
        "data": notice,
    });
    // Optional attributes, when present, must not be empty.
    if let Some(subject) = notice.subject.as_deref().filter(|s| !s.is_empty()) {
        event["subject"] = json!(subject);
    }
    event
}

/// A path segment of a URI reference: unreserved characters as they are, the rest
/// percent-encoded (cluster and Source names are DNS labels, but nothing checks that here).
fn uri_segment(text: &str) -> String {
    let mut segment = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                segment.push(char::from(byte));
            }
            _ => segment.push_str(&format!("%{byte:02X}")),
        }
    }
    segment
}

/// The body of a Slack incoming webhook: the headline in `mrkdwn` (only tether's own
/// words and the escaped link), everything the cluster or the repository said (names,
/// the message, the reason) as `plain_text`, which Slack never turns into a mention,
/// a link or formatting. `text`, the notification's fallback, is escaped as Slack asks
/// and not formatted.
pub fn slack_message(notice: &Notice) -> Value {
    let (word, emoji) = notice.kind.headline();
    let mut facts = vec![
        format!("Source: {}", notice.source),
        format!("Cluster: {}", notice.cluster),
    ];
    let optional = [
        ("Revision", notice.short_revision()),
        ("Subject", notice.subject.clone()),
        ("Reason", notice.reason.clone()),
    ];
    for (label, value) in optional {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            facts.push(format!("{label}: {value}"));
        }
    }
    let fields: Vec<Value> = facts.iter().map(|fact| plain_text(fact)).collect();
    let mut blocks = vec![
        json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": format!("{emoji} *{word}*")},
            "fields": fields,
        }),
        json!({"type": "section", "text": plain_text(&notice.message)}),
    ];
    if let Some(link) = notice.link.as_deref().and_then(slack_link) {
        blocks.push(json!({
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": format!("<{link}|Open in tether>")}],
        }));
    }
    let fallback = format!(
        "{word}: {} in {}: {}",
        notice.source, notice.cluster, notice.message
    );
    // `mrkdwn: false`: the fallback is shown as written, never formatted.
    json!({"text": slack_escape(&fallback), "mrkdwn": false, "blocks": blocks})
}

fn plain_text(text: &str) -> Value {
    // Slack refuses an empty text object.
    let text = if text.is_empty() { " " } else { text };
    json!({"type": "plain_text", "text": text, "emoji": false})
}

/// Slack's escaping of its control characters: `<!channel>` and `<url|label>` are
/// only markup when their angle brackets are literal.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An http(s) link fit for `<link|label>`: its `|` and angle brackets encoded so it
/// cannot end early; any other scheme is no link.
fn slack_link(link: &str) -> Option<String> {
    let scheme = link.split_once("://")?.0.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return None;
    }
    Some(
        link.replace('&', "&amp;")
            .replace('<', "%3C")
            .replace('>', "%3E")
            .replace('|', "%7C")
            .replace(char::is_whitespace, "%20"),
    )
}

/// A Source's choice of what it is told about and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatePolicy {
    /// Kinds never sent.
    pub exclude: BTreeSet<NoticeKind>,
    /// Notices sent in any minute at most; 0: no limit.
    pub per_minute: u32,
    /// How long the same news is not said again.
    pub dedupe_window_secs: u64,
}

impl Default for GatePolicy {
    fn default() -> Self {
        GatePolicy {
            exclude: BTreeSet::new(),
            per_minute: 20,
            dedupe_window_secs: 600,
        }
    }
}

/// What the gate decided for a notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Send it, saying that `suppressed` notices were held back by the rate limit
    /// since the last one sent.
    Send { suppressed: u32 },
    /// The same event, or the same news, was admitted within the window.
    Duplicate,
    /// The Source does not want this kind.
    Excluded,
    /// Over the rate: counted, and told with the next one sent.
    Limited,
}

/// Notices remembered at most, per Source: a window's worth at the highest rate a
/// Source would sensibly set; older ones are forgotten first.
const REMEMBERED: usize = 1024;

/// One Source's gate (pure: the caller gives the time, in seconds).
#[derive(Clone, Debug)]
pub struct Gate {
    policy: GatePolicy,
    /// Notices admitted (sent or held back), oldest first.
    seen: VecDeque<Seen>,
    /// When each notice of the last minute was sent, oldest first.
    sent: VecDeque<u64>,
    /// Held back since the last one sent.
    held: u32,
}

#[derive(Clone, Debug)]
struct Seen {
    at: u64,
    id: String,
    content: String,
}

impl Gate {
    pub fn new(policy: GatePolicy) -> Gate {
        Gate {
            policy,
            seen: VecDeque::new(),
            sent: VecDeque::new(),
            held: 0,
        }
    }

    pub fn admit(&mut self, notice: &Notice, now_secs: u64) -> Admission {
        if self.policy.exclude.contains(&notice.kind) {
            return Admission::Excluded;
        }
        let window = self.policy.dedupe_window_secs;
        while let Some(old) = self.seen.front()
            && (old.at.saturating_add(window) <= now_secs || self.seen.len() >= REMEMBERED)
        {
            self.seen.pop_front();
        }
        let content = notice.content_key();
        if self
            .seen
            .iter()
            .any(|seen| seen.id == notice.id || seen.content == content)
        {
            return Admission::Duplicate;
        }
        self.seen.push_back(Seen {
            at: now_secs,
            id: notice.id.clone(),
            content,
        });
        while self
            .sent
            .front()
            .is_some_and(|&at| at.saturating_add(60) <= now_secs)
        {
            self.sent.pop_front();
        }
        if self.policy.per_minute > 0 {
            let limit = usize::try_from(self.policy.per_minute).unwrap_or(usize::MAX);
            if self.sent.len() >= limit {
                self.held = self.held.saturating_add(1);
                return Admission::Limited;
            }
            self.sent.push_back(now_secs);
        }
        Admission::Send {
            suppressed: std::mem::take(&mut self.held),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> Notice {
        Notice::new(
            NoticeKind::Failed,
            "shop/web",
            "east",
            "2025-05-01T10:00:00Z",
            "apply failed: admission webhook denied the request",
        )
        .with_revision("main@sha1:0123456789abcdef0123456789abcdef01234567")
        .with_subject("Deployment shop/web")
        .with_reason("AdmissionDenied")
        .with_link("https://tether.example.com/sources/shop/web")
    }

    #[test]
    fn kinds_are_named_as_exclusion_lists_name_them() {
        for kind in NoticeKind::ALL {
            assert_eq!(kind.name().parse::<NoticeKind>(), Ok(kind));
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.name()));
            assert_eq!(
                kind.cloud_event_type(),
                format!("dev.tether.source.{}", kind.name())
            );
        }
        let error = "drifted".parse::<NoticeKind>().unwrap_err().to_string();
        assert_eq!(
            error,
            "\"drifted\" is no notice kind; the kinds are applied, failed, stalled, \
             drift-corrected, drift-reported, pruned, wave-blocked, host-removed, reverted"
        );
    }

    #[test]
    fn the_id_follows_the_event_not_its_wording() {
        let notice = failed();
        assert_eq!(notice.id.len(), 32);
        assert_eq!(failed().id, notice.id, "the same event, the same id");
        let reworded = Notice {
            message: "another wording".into(),
            ..failed()
        };
        assert_eq!(
            reworded.with_link("https://elsewhere.example").id,
            notice.id
        );
        let later = Notice::new(
            NoticeKind::Failed,
            "shop/web",
            "east",
            "2025-05-01T10:05:00Z",
            "apply failed: admission webhook denied the request",
        )
        .with_revision("main@sha1:0123456789abcdef0123456789abcdef01234567")
        .with_subject("Deployment shop/web")
        .with_reason("AdmissionDenied");
        assert_ne!(later.id, notice.id, "another time is another event");
        assert_ne!(failed().with_reason("Other").id, notice.id);
        // Kept in the outbox and read back: the same notice, the same id.
        let stored = serde_json::to_string(&notice).unwrap();
        assert_eq!(serde_json::from_str::<Notice>(&stored).unwrap(), notice);
        assert_eq!(notice.short_revision().as_deref(), Some("main@0123456"));
    }

    /// The CloudEvents 1.0 core specification's rules for the structured JSON format:
    /// the four required attributes, the types of the optional ones, and attribute
    /// names of lower-case letters and digits.
    fn assert_is_cloud_event(event: &Value) {
        let attributes = event.as_object().expect("an event is a JSON object");
        for name in attributes.keys() {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
                "attribute name {name:?}"
            );
        }
        let string = |name: &str| attributes.get(name).and_then(Value::as_str);
        assert_eq!(string("specversion"), Some("1.0"));
        for required in ["id", "source", "type"] {
            assert!(
                string(required).is_some_and(|v| !v.is_empty()),
                "{required} must be a non-empty string: {event}"
            );
        }
        let source = string("source").unwrap();
        assert!(
            source.starts_with('/')
                && source
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !b"\"<>\\^`{|}".contains(&b)),
            "source {source:?} is not a URI-reference"
        );
        for optional in ["subject", "datacontenttype", "time"] {
            if let Some(value) = attributes.get(optional) {
                assert!(
                    value.as_str().is_some_and(|v| !v.is_empty()),
                    "{optional} must be a non-empty string when present"
                );
            }
        }
        if let Some(time) = string("time") {
            let bytes = time.as_bytes();
            let digits =
                |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
            assert!(
                bytes.len() >= 20
                    && digits(0..4)
                    && bytes[4] == b'-'
                    && digits(5..7)
                    && bytes[7] == b'-'
                    && digits(8..10)
                    && bytes[10] == b'T'
                    && digits(11..13)
                    && digits(14..16)
                    && digits(17..19)
                    && (time.ends_with('Z') || time[19..].contains(['+', '-'])),
                "time {time:?} is not RFC 3339"
            );
        }
        if string("datacontenttype") == Some("application/json") {
            assert!(attributes.get("data").is_some_and(Value::is_object));
        }
    }

    #[test]
    fn a_notice_is_a_cloud_event() {
        let event = cloud_event(&failed());
        assert_is_cloud_event(&event);
        assert_eq!(event["source"], "/tether/east/shop/web");
        assert_eq!(event["type"], "dev.tether.source.failed");
        assert_eq!(event["subject"], "Deployment shop/web");
        assert_eq!(event["time"], "2025-05-01T10:00:00Z");
        assert_eq!(event["id"], failed().id);
        assert_eq!(
            serde_json::from_value::<Notice>(event["data"].clone()).unwrap(),
            failed()
        );
        // No subject: the optional attribute is left out, not sent empty.
        let bare = Notice::new(
            NoticeKind::Applied,
            "shop/web",
            "a b",
            "2025-05-01T10:00:00+02:00",
            "",
        );
        let event = cloud_event(&bare);
        assert_is_cloud_event(&event);
        assert!(event.get("subject").is_none());
        assert_eq!(event["source"], "/tether/a%20b/shop/web");
    }

    #[test]
    fn the_signature_is_rfc_4231_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"what do ya want for nothing?", b"Jefe"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// Every `mrkdwn` text of a Slack body, where Slack reads mentions and links.
    fn mrkdwn_texts(message: &Value) -> Vec<String> {
        let mut texts = Vec::new();
        let mut pending: Vec<&Value> = vec![&message["blocks"]];
        while let Some(value) = pending.pop() {
            match value {
                Value::Object(object) => {
                    if object.get("type") == Some(&json!("mrkdwn")) {
                        texts.push(object["text"].as_str().unwrap().to_string());
                    }
                    pending.extend(object.values());
                }
                Value::Array(items) => pending.extend(items),
                _ => {}
            }
        }
        texts
    }

    #[test]
    fn a_slack_message_says_what_happened_and_nothing_hostile_becomes_markup() {
        let message = slack_message(&failed());
        assert_eq!(
            message["text"],
            "Failed: shop/web in east: apply failed: admission webhook denied the request"
        );
        let header = &message["blocks"][0];
        assert_eq!(header["text"]["text"], ":x: *Failed*");
        let facts: Vec<&str> = header["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert_eq!(f["type"], "plain_text");
                f["text"].as_str().unwrap()
            })
            .collect();
        assert_eq!(
            facts,
            [
                "Source: shop/web",
                "Cluster: east",
                "Revision: main@0123456",
                "Subject: Deployment shop/web",
                "Reason: AdmissionDenied"
            ]
        );
        assert_eq!(
            message["blocks"][1]["text"]["text"],
            "apply failed: admission webhook denied the request"
        );
        assert_eq!(
            message["blocks"][2]["elements"][0]["text"],
            "<https://tether.example.com/sources/shop/web|Open in tether>"
        );

        let hostile = "<!channel> <http://evil.example|click> *bold* _it_ & <@U123>";
        let notice = Notice::new(
            NoticeKind::DriftReported,
            hostile,
            hostile,
            "2025-05-01T10:00:00Z",
            hostile,
        )
        .with_subject(hostile)
        .with_reason(hostile)
        .with_revision(hostile)
        .with_link("https://tether.example.com/a|<!here>");
        let message = slack_message(&notice);
        assert_eq!(message["mrkdwn"], false, "the fallback is not formatted");
        for text in mrkdwn_texts(&message) {
            for markup in ["<!channel>", "<!here>", "<http://evil", "<@U123>", "*bold*"] {
                assert!(!text.contains(markup), "{markup} in mrkdwn {text:?}");
            }
        }
        assert!(message["text"].as_str().unwrap().starts_with(
            "Drift reported: &lt;!channel&gt; &lt;http://evil.example|click&gt; *bold* _it_ &amp; &lt;@U123&gt;"
        ));
        assert_eq!(
            message["blocks"][2]["elements"][0]["text"],
            "<https://tether.example.com/a%7C%3C!here%3E|Open in tether>"
        );
        // Shown as it was written, where Slack reads no markup.
        assert_eq!(message["blocks"][1]["text"]["type"], "plain_text");
        assert_eq!(message["blocks"][1]["text"]["text"], hostile);
        // A link that is no web address is left out.
        let script = slack_message(&failed().with_link("javascript:alert(1)"));
        assert_eq!(script["blocks"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_gate_sends_each_news_once_within_the_rate_and_the_exclusions() {
        let at = |kind: NoticeKind, time: &str, subject: &str| {
            Notice::new(kind, "shop/web", "east", time, "m")
                .with_revision("main@sha1:aaaa")
                .with_subject(subject)
        };
        let policy = GatePolicy {
            exclude: [NoticeKind::Applied].into(),
            per_minute: 2,
            dedupe_window_secs: 600,
        };
        let send = |suppressed| Admission::Send { suppressed };
        // (notice, seconds, decision)
        let cases = [
            (at(NoticeKind::Applied, "t0", "a"), 0, Admission::Excluded),
            (at(NoticeKind::Failed, "t0", "a"), 0, send(0)),
            // The outbox delivers again after a restart: the same id.
            (at(NoticeKind::Failed, "t0", "a"), 5, Admission::Duplicate),
            // The next pass fails the same way: the same news.
            (at(NoticeKind::Failed, "t1", "a"), 30, Admission::Duplicate),
            (at(NoticeKind::Failed, "t1", "b"), 30, send(0)),
            (at(NoticeKind::Failed, "t1", "c"), 40, Admission::Limited),
            (at(NoticeKind::Failed, "t1", "d"), 50, Admission::Limited),
            // Held back and repeated: still one held back, not two.
            (at(NoticeKind::Failed, "t2", "d"), 55, Admission::Duplicate),
            // The first send left the minute: room for one, which tells of the two.
            (at(NoticeKind::Stalled, "t2", "a"), 61, send(2)),
            (at(NoticeKind::Stalled, "t2", "e"), 62, Admission::Limited),
            // Ten minutes after it was first said, the same news is said again.
            (at(NoticeKind::Failed, "t3", "a"), 600, send(1)),
        ];
        let mut gate = Gate::new(policy);
        for (step, (notice, now, expected)) in cases.into_iter().enumerate() {
            assert_eq!(gate.admit(&notice, now), expected, "step {step}");
        }
    }

    #[test]
    fn the_gate_forgets_beyond_its_bound() {
        let mut gate = Gate::new(GatePolicy {
            per_minute: 0,
            dedupe_window_secs: u64::MAX,
            ..GatePolicy::default()
        });
        let notice = |n: usize| {
            Notice::new(NoticeKind::Pruned, "shop/web", "east", "t", "m")
                .with_subject(n.to_string())
        };
        for n in 0..REMEMBERED + 10 {
            assert_eq!(gate.admit(&notice(n), 0), Admission::Send { suppressed: 0 });
        }
        assert_eq!(gate.seen.len(), REMEMBERED);
        // The oldest were forgotten (sent again); the newest are remembered.
        assert_eq!(gate.admit(&notice(0), 1), Admission::Send { suppressed: 0 });
        assert_eq!(gate.admit(&notice(REMEMBERED + 9), 1), Admission::Duplicate);
    }
}
