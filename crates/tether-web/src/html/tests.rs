use std::collections::BTreeMap;

use maud::html;

use super::*;
use crate::view::{ConflictRow, DriftRow, Graph, ImagePolicyRow, RevertRow};

/// Strings a repository, a cluster or a user could put anywhere.
const HOSTILE: [&str; 6] = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "\"'><svg onload=alert(1)>",
    "</td></tr></table><b>&amp;",
    "' onmouseover='alert(1)",
];

/// A different hostile string each call, round and round.
struct Hostile(usize);

impl Hostile {
    fn next(&mut self) -> String {
        self.0 += 1;
        HOSTILE[self.0 % HOSTILE.len()].to_string()
    }
}

fn hostile_summary(h: &mut Hostile) -> SourceSummary {
    SourceSummary {
        namespace: h.next(),
        name: h.next(),
        url: Some(h.next()),
        reference: Some(h.next()),
        path: Some(h.next()),
        state: State::Blocked,
        reason: h.next(),
        message: h.next(),
        wanted: Some(h.next()),
        applied: Some(h.next()),
        last_pass: Some(h.next()),
        took_seconds: Some(1.5),
        blocked_on: Some(h.next()),
        commit_link: Some("javascript:alert(1)".into()),
        held_deletions: Some(h.next()),
        counts: Counts {
            objects: 3,
            drifted: 1,
            failed: 1,
            conflicts: 1,
        },
        clusters: vec![
            ClusterRow {
                name: h.next(),
                ready: true,
                reason: h.next(),
                message: h.next(),
            },
            ClusterRow {
                name: h.next(),
                ready: false,
                reason: h.next(),
                message: h.next(),
            },
        ],
    }
}

fn hostile_pod(h: &mut Hostile) -> PodRow {
    PodRow {
        namespace: h.next(),
        name: h.next(),
        node: Some(h.next()),
        phase: h.next(),
        ready: false,
        restarts: 2,
    }
}

fn hostile_detail() -> SourceDetail {
    let h = &mut Hostile(0);
    let slice = format!("Slice/{}", h.next());
    let other = h.next();
    SourceDetail {
        summary: hostile_summary(h),
        models: vec![ModelNode {
            model: slice.clone(),
            wave: Some(1),
            objects: vec![ObjectRow {
                kind: h.next(),
                namespace: Some(h.next()),
                name: h.next(),
                action: h.next(),
                ready: Some(false),
                readiness: Some(h.next()),
                drift: Some(DriftRow {
                    manager: h.next(),
                    seen: h.next(),
                    corrected: Some(h.next()),
                }),
                conflicts: vec![ConflictRow {
                    manager: h.next(),
                    field: h.next(),
                }],
                error: Some(h.next()),
                pods: vec![hostile_pod(h)],
            }],
        }],
        report_markdown: Some(format!(
            "# Plan\n\n{}\n\n<img src=x onerror=alert(1)>\n\n[click](javascript:alert(1)) \
             [x](\"'><svg onload=alert(1)>) <script>alert(1)</script>\n\n| a | b |\n|---|---|\n| {} | <svg onload=alert(1)> |\n",
            h.next(),
            h.next()
        )),
        graph: Graph {
            waves: vec![vec![other.clone()], vec![slice.clone()]],
            edges: vec![(slice, other)],
        },
        events: vec![EventRow {
            time: Some(h.next()),
            type_: "Warning".into(),
            reason: h.next(),
            object: h.next(),
            message: h.next(),
            count: 4,
        }],
        discovered: vec![DiscoveredPod {
            namespace: h.next(),
            name: h.next(),
            file: h.next(),
            commit: Some(h.next()),
            commit_link: Some(h.next()),
        }],
        hosts: vec![HostRow {
            name: h.next(),
            labels: BTreeMap::from([(h.next(), h.next()), (h.next(), h.next())]),
            locked: true,
            ready: Some(true),
            pods: vec![hostile_pod(h)],
            file: Some(h.next()),
        }],
        images: vec![ImagePolicyRow {
            policy: h.next(),
            image: h.next(),
            last_scan: h.next(),
            tags: Some(200_000),
            candidate: Some(h.next()),
            result: "Failed".into(),
            message: h.next(),
            last_update: Some(h.next()),
            last_update_time: Some(h.next()),
        }],
        last_revert: Some(RevertRow {
            failed: h.next(),
            revert: Some(h.next()),
            message: h.next(),
            held: vec![h.next(), h.next()],
            time: h.next(),
        }),
    }
}

const TAGS: &[&str] = &[
    "html",
    "head",
    "meta",
    "title",
    "link",
    "script",
    "body",
    "header",
    "main",
    "h1",
    "h2",
    "h3",
    "p",
    "a",
    "span",
    "b",
    "code",
    "pre",
    "em",
    "strong",
    "del",
    "br",
    "hr",
    "blockquote",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "div",
    "section",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "form",
    "input",
    "button",
    "label",
    "svg",
    "defs",
    "marker",
    "path",
    "g",
    "rect",
    "text",
];

const ATTRIBUTES: &[&str] = &[
    "lang",
    "charset",
    "name",
    "content",
    "rel",
    "href",
    "src",
    "defer",
    "class",
    "id",
    "method",
    "action",
    "type",
    "value",
    "required",
    "pattern",
    "size",
    "placeholder",
    "aria-label",
    "role",
    "title",
    "for",
    "autocomplete",
    "xmlns",
    "width",
    "height",
    "viewBox",
    "refX",
    "refY",
    "markerWidth",
    "markerHeight",
    "orient",
    "d",
    "marker-end",
    "x",
    "y",
    "rx",
    "disabled",
    "checked",
    "start",
];

/// Reads every tag of `page` (text holds no raw `<`, attribute values no raw `"`)
/// and fails on any element, attribute or address an injection could have made:
/// an element or attribute outside the page's own (no `on…` handler, no `style`),
/// an `href` that is not http(s) or relative, a script from elsewhere.
fn assert_only_own_markup(page: &str) {
    let mut rest = page;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if rest.starts_with('!') {
            assert!(
                rest.starts_with("!DOCTYPE html>"),
                "unexpected <!…: {rest:.80}"
            );
            continue;
        }
        let rest_of_tag = rest.strip_prefix('/').unwrap_or(rest);
        let name_end = rest_of_tag
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(rest_of_tag.len());
        let tag = &rest_of_tag[..name_end];
        assert!(TAGS.contains(&tag), "element <{tag}> in {rest:.120}");
        let mut attributes = &rest_of_tag[name_end..];
        loop {
            attributes = attributes.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
            if attributes.starts_with('>') {
                break;
            }
            let end = attributes.find(['=', ' ', '>']).unwrap_or(attributes.len());
            let attribute = &attributes[..end];
            let is_data = attribute.starts_with("data-")
                && attribute[5..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-');
            assert!(
                ATTRIBUTES.contains(&attribute) || is_data,
                "attribute {attribute} on <{tag}>: {rest:.160}"
            );
            attributes = &attributes[end..];
            if let Some(quoted) = attributes.strip_prefix("=\"") {
                let close = quoted
                    .find('"')
                    .unwrap_or_else(|| panic!("unclosed attribute in {rest:.120}"));
                let value = quoted[..close].replace("&amp;", "&");
                match attribute {
                    "href" => assert!(markdown::is_safe_url(&value), "href={value:?}"),
                    "src" => assert_eq!(value, paths::SCRIPT),
                    _ => {}
                }
                attributes = &quoted[close + 1..];
            } else {
                assert!(
                    !attributes.starts_with('='),
                    "unquoted attribute value: {rest:.120}"
                );
            }
        }
    }
}

/// How maud writes `text` in a page (`&`, `<`, `>`, `"` escaped).
fn escaped(text: &str) -> String {
    html! { (text) }.into_string()
}

/// The page is only its own markup, with one script (its own), and every hostile
/// string is on it, as text.
fn assert_every_hostile_string_is_text(html: &str) {
    assert_only_own_markup(html);
    // Spelled out: no injected element. (`onerror=alert(1)` itself is on the page, as
    // the text between `&lt;img` and `&gt;`; the scan above finds no `on…` attribute.)
    for injected in [
        "<script>alert",
        "<img",
        "<svg onload",
        "<b>",
        "href=\"javascript:",
    ] {
        assert!(!html.contains(injected), "{injected} in the page");
    }
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the page's own script"
    );
    for hostile in HOSTILE {
        assert!(
            html.contains(&escaped(hostile)),
            "{hostile} not shown as text"
        );
    }
}

#[test]
fn hostile_strings_in_a_source_page_stay_text() {
    let detail = hostile_detail();
    let page = Page {
        user: Some("<script>alert('user')</script>"),
        csrf: Some("\"><script>alert(1)</script>"),
        notice: Some("<img src=x onerror=alert(1)>"),
    };
    let html = source_page(&page, &detail);
    assert_every_hostile_string_is_text(&html);
    // The report's raw HTML and refused link are text, not markup or addresses.
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("click"));
    assert!(!html.contains("href=\"javascript"));
    // The graph's boxes name the hostile models, escaped.
    assert!(html.contains(&format!("data-model=\"Slice/{}\"", escaped(HOSTILE[1]))));
}

#[test]
fn hostile_strings_in_the_sources_list_stay_text() {
    let h = &mut Hostile(0);
    let sources: Vec<SourceSummary> = (0..HOSTILE.len()).map(|_| hostile_summary(h)).collect();
    let page = Page {
        user: Some("\"'><svg onload=alert(1)>"),
        csrf: Some("t"),
        notice: None,
    };
    let html = sources_page(&page, &sources);
    assert_every_hostile_string_is_text(&html);
    for source in &sources {
        let row = format!(
            "data-source=\"{}\"",
            escaped(&format!("{}/{}", source.namespace, source.name))
        );
        assert!(html.contains(&row), "{row}");
    }
}

#[test]
fn the_login_and_error_pages_escape_too() {
    let login = login_page(&Page::default(), Some(HOSTILE[0]));
    assert_only_own_markup(&login);
    assert!(login.contains(&escaped(HOSTILE[0])));
    let error = error_page(&Page::default(), 404, HOSTILE[3]);
    assert_only_own_markup(&error);
    assert!(error.contains(&escaped(HOSTILE[3])));
}

/// Every `<form …>…</form>` of a page.
fn forms(html: &str) -> Vec<&str> {
    html.match_indices("<form")
        .map(|(at, _)| {
            let end = html[at..]
                .find("</form>")
                .map_or(html.len(), |end| at + end);
            &html[at..end]
        })
        .collect()
}

#[test]
fn no_form_without_a_csrf_token() {
    let detail = hostile_detail();
    let anonymous = Page::default();
    let viewer = Page {
        user: Some("alice"),
        ..Page::default()
    };
    for page in [anonymous, viewer] {
        let html = source_page(&page, &detail);
        assert!(
            forms(&html).is_empty(),
            "forms without a token: {:?}",
            forms(&html)
        );
        assert!(forms(&sources_page(&page, std::slice::from_ref(&detail.summary))).is_empty());
    }
}

#[test]
fn every_form_posts_with_the_token_to_an_encoded_action() {
    let detail = hostile_detail();
    let page = Page {
        user: Some("alice"),
        csrf: Some("token-123"),
        notice: None,
    };
    let html = source_page(&page, &detail);
    let forms = forms(&html);
    // Logout, approve the held deletions, reconcile, scale/restart/rollback of the
    // slice, 2 per pod (one on the object, one on the host), 2 label removals, assign,
    // unlock.
    assert_eq!(forms.len(), 1 + 1 + 1 + 3 + 2 * 2 + 2 + 1 + 1, "{forms:#?}");
    for form in &forms {
        assert!(form.contains("method=\"post\""), "{form}");
        assert!(
            form.contains("<input type=\"hidden\" name=\"csrf\" value=\"token-123\">"),
            "{form}"
        );
        let action = form
            .split("action=\"")
            .nth(1)
            .and_then(|a| a.split('"').next())
            .unwrap_or_default();
        assert!(
            action == paths::LOGOUT
                || action.starts_with(&paths::api_source(
                    &detail.summary.namespace,
                    &detail.summary.name
                )),
            "{action}"
        );
        assert!(
            action
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~%/".contains(&b)),
            "not percent-encoded: {action}"
        );
    }
    let (namespace, name) = (
        detail.summary.namespace.as_str(),
        detail.summary.name.as_str(),
    );
    let host = detail.hosts[0].name.as_str();
    let slice = &detail.models[0].model["Slice/".len()..];
    let pod = &detail.models[0].objects[0].pods[0];
    for action in [
        Action::Reconcile,
        Action::ApproveDeletions,
        Action::Scale { slice },
        Action::Restart { slice },
        Action::Rollback { slice },
        Action::RecreatePod {
            namespace: &pod.namespace,
            pod: &pod.name,
        },
        Action::RestartContainers {
            namespace: &pod.namespace,
            pod: &pod.name,
        },
        Action::AssignLabel { host },
        Action::Unlock { host },
    ] {
        let path = action.path(namespace, name);
        assert!(
            html.contains(&format!("action=\"{path}\"")),
            "{action:?}: {path}"
        );
    }
    for key in detail.hosts[0].labels.keys() {
        let path = Action::RemoveLabel { host, key }.path(namespace, name);
        assert!(html.contains(&format!("action=\"{path}\"")), "{path}");
    }
    assert!(html.contains("name=\"replicas\""));
    assert!(html.contains("name=\"to\""));
    assert!(html.contains("name=\"key\"") && html.contains("name=\"value\""));
}

#[test]
fn the_fragment_is_what_main_holds() {
    let detail = hostile_detail();
    let page = Page {
        user: Some("alice"),
        csrf: Some("t"),
        notice: None,
    };
    let main = source_main(&page, &detail);
    assert!(source_page(&page, &detail).contains(&format!("<main>{main}</main>")));
    for section in ["objects", "plan", "graph", "events", "discovered", "hosts"] {
        assert!(
            main.contains(&format!("<section id=\"{section}\">")),
            "{section}"
        );
    }
}

#[test]
fn the_list_shows_what_a_person_checks_first() {
    let ready = SourceSummary {
        namespace: "shop".into(),
        name: "web".into(),
        state: State::Ready,
        reason: "ReconciliationSucceeded".into(),
        wanted: Some("0123456789abcdef0123456789abcdef01234567".into()),
        applied: Some("0123456789abcdef0123456789abcdef01234567".into()),
        commit_link: Some(
            "https://github.com/acme/deploy/commit/0123456789abcdef0123456789abcdef01234567".into(),
        ),
        ..SourceSummary::default()
    };
    let blocked = SourceSummary {
        name: "api".into(),
        state: State::Blocked,
        wanted: Some("fedcba9876543210fedcba9876543210fedcba98".into()),
        commit_link: Some(
            "https://github.com/acme/deploy/commit/fedcba9876543210fedcba9876543210fedcba98".into(),
        ),
        blocked_on: Some("wave 2 → Deployment shop/web: 3/5 replicas available".into()),
        took_seconds: Some(125.0),
        last_pass: Some("2026-11-25T02:20:01Z".into()),
        ..ready.clone()
    };
    let html = sources_page(&Page::default(), &[blocked, ready]);
    assert!(
        html.contains("<p id=\"summary\">1 need attention · 1 ready</p>"),
        "{html}"
    );
    assert!(
        html.contains("<tr class=\"st-blocked\" data-source=\"shop/api\">"),
        "{html}"
    );
    assert!(html.contains(
        "<span class=\"blocked\">wave 2 → Deployment shop/web: 3/5 replicas available</span>"
    ));
    // Wanted ≠ applied is marked; the same commit is shown once.
    assert!(
        html.contains(">fedcba987654</a> <span class=\"applied\">applied 0123456789ab</span>"),
        "{html}"
    );
    // A Ready row's commit is text (its page links it); a blocked one's is linked.
    assert!(html.contains("<td>0123456789ab<td>"), "{html}");
    assert!(html.contains(
        "<a class=\"wanted\" href=\"https://github.com/acme/deploy/commit/fedcba9876543210fedcba9876543210fedcba98\">fedcba987654</a>"
    ));
    assert!(html.contains("2026-11-25T02:20:01Z 2m05s"));
}

/// A list of 1,000 Sources of realistic length: 3 need attention, the rest are
/// ready, every one with a link to its commit on GitHub.
fn thousand_sources() -> Vec<SourceSummary> {
    (0..1000_usize)
        .map(|i| {
            let commit: String =
                format!("{:x}", (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).repeat(3)[..40].into();
            let state = match i {
                0 => State::Failed,
                1 => State::Blocked,
                2 => State::Drifted,
                _ => State::Ready,
            };
            SourceSummary {
                namespace: format!("team-{:02}", i % 40),
                name: format!("service-{i:04}"),
                url: Some("https://github.com/acme/deploy.git".into()),
                reference: Some("main".into()),
                path: Some(format!("apps/service-{i:04}")),
                state,
                reason: if state == State::Ready {
                    "ReconciliationSucceeded"
                } else {
                    "DependencyNotReady"
                }
                .into(),
                message: format!("Applied revision main@sha1:{commit}"),
                wanted: Some(commit.clone()),
                applied: Some(commit.clone()),
                last_pass: Some(format!("2026-11-25T02:{:02}:{:02}Z", i % 60, (i * 7) % 60)),
                took_seconds: Some(0.4 + (i % 30) as f64 / 10.0),
                blocked_on: (state == State::Blocked)
                    .then(|| "wave 2 → Deployment shop/web: 3/5 replicas available".into()),
                commit_link: Some(format!("https://github.com/acme/deploy/commit/{commit}")),
                held_deletions: None,
                counts: Counts {
                    objects: 12 + i % 30,
                    drifted: usize::from(state == State::Drifted),
                    failed: usize::from(state == State::Failed),
                    conflicts: 0,
                },
                clusters: Vec::new(),
            }
        })
        .collect()
}

#[test]
fn a_thousand_sources_stay_small() {
    let page = Page {
        user: Some("alice"),
        csrf: Some("0123456789abcdef0123456789abcdef"),
        notice: None,
    };
    let html = sources_page(&page, &thousand_sources());
    eprintln!("sources page, 1,000 Sources: {} bytes", html.len());
    assert_eq!(html.matches("<tr class=").count(), 1000);
    assert!(html.len() <= 200_000, "{} bytes", html.len());
}
