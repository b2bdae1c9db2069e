//! Commit statuses against the control plane, a `git daemon` remote and a local HTTPS
//! Git host that checks each request against GitHub's own API description
//! (`@octokit/openapi`): what a team sees on its commits after a push.

use std::time::{Duration, Instant};

use tether_testkit::githost::{Availability, GitHost, GitHostServer};

use crate::daemon::{
    Daemon, Remote, install_crd, kubectl_apply_text, kubectl_ok, source_yaml, value_of,
};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, setup};

/// The Sources' `spec.timeout`: a wave's wait, and a rollout's.
const TIMEOUT_SECONDS: u64 = 20;
pub(crate) const TOKEN: &str = "ghp_tetherTestToken0123456789abcdefABCDEF";

/// The commit statuses the host took for `commit`: (state, context, description), in
/// the order they came.
pub(crate) fn statuses(host: &GitHostServer, commit: &str) -> Vec<(String, String, String)> {
    host.statuses(commit)
        .into_iter()
        .map(|s| (s.state, s.context, s.description.unwrap_or_default()))
        .collect()
}

pub(crate) fn states(host: &GitHostServer, commit: &str) -> Vec<String> {
    statuses(host, commit).into_iter().map(|s| s.0).collect()
}

/// The Secret of the host's token and CA, and the Source's `spec.feedback`.
pub(crate) fn feedback_of(ns: &str, host: &GitHostServer) -> String {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, host.ca_pem()).unwrap();
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "githost",
        "-n",
        ns,
        &format!("--from-literal=token={TOKEN}"),
        &format!("--from-file=ca.crt={}", ca.display()),
    ]);
    let api = host.api_url();
    let provider = match api.ends_with("/api/v4") {
        true => "gitlab",
        false => "github",
    };
    format!(
        "  interval: 1h\n  timeout: {TIMEOUT_SECONDS}s\n  confine:\n    namespaces: [{ns}]\n    kinds: [Namespace, ConfigMap]\n  feedback:\n    provider: {provider}\n    apiURL: {api}\n    repository: team/models\n    secretRef:\n      name: githost\n"
    )
}

/// What these tests start from: the Source CRD, a namespace, a Git host of `kind`,
/// and a remote whose models hold the ConfigMap `settings` at v1.
async fn with_host(test: &str, kind: GitHost) -> (kube::Client, String, GitHostServer, Remote) {
    install_crd();
    let (client, ns, _) = setup(test).await;
    let host = GitHostServer::start(kind, TOKEN).await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    (client, ns, host, remote)
}

/// Applies the Source `web` of `remote` with feedback to `host`, and waits until its
/// first commit is pending, then successful there; returns that commit.
async fn follow_with_feedback(ns: &str, remote: &Remote, host: &GitHostServer) -> String {
    kubectl_apply_text(&source_yaml("web", ns, &remote.url, &feedback_of(ns, host)));
    let first = remote.head("main");
    eventually(Duration::from_secs(30), || async {
        states(host, &first) == ["pending", "success"]
    })
    .await;
    first
}

#[tokio::test]
async fn a_push_is_pending_then_successful_and_a_broken_commit_fails_naming_its_line() {
    let (client, ns, host, remote) = with_host("feedback-status", GitHost::GitHub).await;
    let daemon = Daemon::start(&[
        "--sources",
        "--sources-namespace",
        &ns,
        "--cluster-name",
        "east",
    ]);
    let context = format!("tether/east/{ns}/web");

    // The first commit: pending when taken up, success once applied and ready.
    let first = follow_with_feedback(&ns, &remote, &host).await;
    assert!(
        statuses(&host, &first).iter().all(|s| s.1 == context),
        "{:?}",
        statuses(&host, &first)
    );

    // A push: its status is seen within seconds of the apply.
    let second = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) =
        crate::daemon::push_hook(&remote.url, "refs/heads/main", crate::daemon::SECRET);
    let pushed = Instant::now();
    let (code, answer) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202, "{answer}");
    eventually(Duration::from_secs(15), || async {
        states(&host, &second) == ["pending", "success"]
    })
    .await;
    eprintln!("push to success status: {:?}", pushed.elapsed());
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));

    // A broken commit: pending, then failure naming the file and line; nothing applied.
    let broken = remote.push(
        "main",
        &[("cm.yaml", &format!("kind: KubernetesConfigMap\nname: settings\ntrust_domain: {ns}\ndata:\n  key: \"v3\"\nreplicas: 2\n"))],
    );
    let (code, _) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(15), || async {
        states(&host, &broken) == ["pending", "failure"]
    })
    .await;
    let failure = &statuses(&host, &broken)[1];
    assert!(
        failure.2.contains("cm.yaml:6"),
        "the failure names the file and line: {failure:?}"
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));

    // At most one request per (commit, context, state); every request as GitHub's
    // description says; the token only ever in the Authorization header.
    for commit in [&first, &second, &broken] {
        let sent = host
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with(&format!("/statuses/{commit}")))
            .count();
        assert!(sent <= 3, "{sent} requests for {commit}");
    }
    assert_eq!(host.violations(), Vec::<String>::new());
    for request in host.requests() {
        assert!(!format!("{:?}", request.body).contains(TOKEN));
    }
    // A personal token may not create check runs: tried once, then statuses only.
    let check_runs = host
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/check-runs"))
        .count();
    assert_eq!(check_runs, 1);
    let source = kubectl_ok(&["get", "source", "web", "-n", &ns, "-o", "yaml"]);
    assert!(!source.contains(TOKEN));
}

#[tokio::test]
async fn statuses_made_while_the_host_is_down_arrive_once_it_is_back_and_the_apply_does_not_wait() {
    let (client, ns, host, remote) = with_host("feedback-outage", GitHost::GitHub).await;
    // The outboxes live in the state directory, kept across the restart.
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    let args = [
        "--sources",
        "--sources-namespace",
        &ns,
        "--cluster-name",
        "east",
        "--state-dir",
        state_dir,
    ];
    let daemon = Daemon::start(&args);
    let first = follow_with_feedback(&ns, &remote, &host).await;

    // Down for a minute: the push is applied as fast as ever.
    host.set_availability(Availability::Refusing);
    let second = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) =
        crate::daemon::push_hook(&remote.url, "refs/heads/main", crate::daemon::SECRET);
    let pushed = Instant::now();
    let (code, _) = daemon.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(10), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    let applied = pushed.elapsed();
    assert!(
        applied < Duration::from_secs(5),
        "applied {applied:?} after the webhook, host down"
    );
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(pushed.elapsed())).await;
    assert_eq!(states(&host, &second), Vec::<String>::new());

    // A restart while the host is still down loses nothing.
    drop(daemon);
    let _daemon = Daemon::start(&args);
    host.set_availability(Availability::Up);
    eventually(Duration::from_secs(60), || async {
        states(&host, &second) == ["pending", "success"]
    })
    .await;
    // Nothing doubled: the first commit's statuses were not sent again.
    assert_eq!(states(&host, &first), ["pending", "success"]);
    assert_eq!(host.violations(), Vec::<String>::new());
}

/// GitHub's `pull_request` webhook of `action` (opened, synchronize) for request
/// `number` at `head` into main of `remote`, from a fork or not; checked against
/// GitHub's webhook description, and signed as GitHub signs it.
fn pull_request_hook(
    remote: &Remote,
    action: &str,
    number: u64,
    head: &str,
    fork: Option<&Remote>,
) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let fixture = match action {
        "opened" => include_str!("../contracts/webhooks/github-pull-request-opened.json"),
        _ => include_str!("../contracts/webhooks/github-pull-request-synchronize.json"),
    };
    let mut payload: serde_json::Value = serde_json::from_str(fixture).unwrap();
    payload["number"] = number.into();
    payload["pull_request"]["number"] = number.into();
    payload["pull_request"]["head"]["sha"] = head.into();
    payload["pull_request"]["base"]["ref"] = "main".into();
    for repository in ["/repository", "/pull_request/base/repo"] {
        let repository = payload.pointer_mut(repository).unwrap();
        repository["clone_url"] = remote.url.clone().into();
        repository["default_branch"] = "main".into();
    }
    let base = payload["pull_request"]["base"]["repo"]["full_name"].clone();
    let base_id = payload["pull_request"]["base"]["repo"]["id"].clone();
    let head_repository = &mut payload["pull_request"]["head"]["repo"];
    match fork {
        Some(fork) => {
            head_repository["id"] = 424_242.into();
            head_repository["full_name"] = "mallory/models".into();
            head_repository["clone_url"] = fork.url.clone().into();
        }
        None => {
            head_repository["id"] = base_id;
            head_repository["full_name"] = base;
            head_repository["clone_url"] = remote.url.clone().into();
        }
    }
    let name = format!("pull-request-{action}");
    assert_eq!(
        tether_testkit::githost::validate_webhook(&name, &payload),
        Vec::<String>::new()
    );
    let body = payload.to_string().into_bytes();
    let headers = vec![
        ("X-GitHub-Event", "pull_request".to_string()),
        (
            "X-Hub-Signature-256",
            tether_api::webhook::sign(&body, crate::daemon::SECRET.as_bytes()),
        ),
    ];
    (headers, body)
}

/// Pushes `files` to `branch` and points the pull request's ref at it, as GitHub
/// keeps `refs/pull/N/head` in the base repository (forks included).
fn pull_request_head(remote: &Remote, number: u64, branch: &str, files: &[(&str, &str)]) -> String {
    request_head(remote, &format!("refs/pull/{number}/head"), branch, files)
}

/// Pushes `files` to `branch` and points `reference` (where the host keeps a request's
/// head) at it.
fn request_head(remote: &Remote, reference: &str, branch: &str, files: &[(&str, &str)]) -> String {
    let head = remote.push(branch, files);
    let updated = std::process::Command::new("git")
        .arg("-C")
        .arg(remote.bare())
        .args(["update-ref", reference, &head])
        .status()
        .unwrap();
    assert!(updated.success());
    head
}

fn comment_bodies(host: &GitHostServer, number: u64) -> Vec<String> {
    host.comments(number).into_iter().map(|c| c.1).collect()
}

#[tokio::test]
async fn a_pull_request_gets_one_comment_with_the_plan_of_its_head_edited_on_each_push() {
    let (client, ns, host, remote) = with_host("feedback-pr", GitHost::GitHub).await;
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    follow_with_feedback(&ns, &remote, &host).await;

    // Opened: the head's plan, as `tether diff -o markdown` says it, in one comment.
    let head = pull_request_head(
        &remote,
        7,
        "feature",
        &[
            ("cm.yaml", &config_map("settings", &ns, "v2")),
            ("extra.yaml", &config_map("extra", &ns, "new")),
        ],
    );
    let (headers, body) = pull_request_hook(&remote, "opened", 7, &head, None);
    let (code, answer) = daemon.post("/hook/github", &headers, &body);
    assert_eq!(code, 202, "{answer}");
    eventually(Duration::from_secs(30), || async {
        states(&host, &head) == ["pending", "success"]
    })
    .await;
    let diff = crate::reconcile::tether_command(
        "web",
        &[
            "diff",
            "models",
            "--repo",
            &remote.url,
            "--ref",
            &head,
            "--inventory-namespace",
            &ns,
            "-o",
            "markdown",
        ],
    )
    .output()
    .unwrap();
    let markdown = String::from_utf8(diff.stdout).unwrap();
    assert!(markdown.contains("extra"), "{markdown}");
    let comments = comment_bodies(&host, 7);
    assert_eq!(
        comments,
        [format!("<!-- tether:diff:default/{ns}/web -->\n{markdown}")]
    );
    let context = format!("tether/diff/default/{ns}/web");
    assert!(statuses(&host, &head).iter().all(|s| s.1 == context));
    // A plan applies nothing.
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v1"));

    // Another push to the request: the same comment, edited.
    let next = pull_request_head(
        &remote,
        7,
        "feature",
        &[("cm.yaml", &config_map("settings", &ns, "v3"))],
    );
    let (headers, body) = pull_request_hook(&remote, "synchronize", 7, &next, None);
    let (code, _) = daemon.post("/hook/github", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(30), || async {
        states(&host, &next) == ["pending", "success"]
    })
    .await;
    let comments = comment_bodies(&host, 7);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(comments[0].contains("v3"), "{}", comments[0]);
    let edits = host
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/issues/comments/"))
        .count();
    assert_eq!(edits, 1);

    // From a fork: planned from the base repository's refs/pull/8/head; the fork's own
    // URL is never contacted, and nothing carries the token.
    let fork = Remote::new(&[("base.yaml", &base(&ns))]);
    let forked = pull_request_head(
        &remote,
        8,
        "forked",
        &[("cm.yaml", &config_map("settings", &ns, "v4"))],
    );
    let (headers, body) = pull_request_hook(&remote, "opened", 8, &forked, Some(&fork));
    let (code, _) = daemon.post("/hook/github", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(30), || async {
        comment_bodies(&host, 8).len() == 1
    })
    .await;
    assert_eq!(fork.fetches(), 0);
    assert!(
        remote.fetches() > 0,
        "the base repository is where heads come from"
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v1"));
    for request in host.requests() {
        assert!(!format!("{:?}", request.body).contains(TOKEN));
    }

    // A request that reaches into another team's namespace: refused in the comment,
    // and the diff's status fails.
    let theirs = "kind: TrustDomain\nname: kube-public\n---\nkind: KubernetesConfigMap\nname: theirs\ntrust_domain: kube-public\ndata:\n  key: \"mine now\"\n";
    let intruding = pull_request_head(&remote, 9, "intruder", &[("intruder.yaml", theirs)]);
    let (headers, body) = pull_request_hook(&remote, "opened", 9, &intruding, None);
    let (code, _) = daemon.post("/hook/github", &headers, &body);
    assert_eq!(code, 202);
    eventually(Duration::from_secs(30), || async {
        states(&host, &intruding) == ["pending", "failure"]
    })
    .await;
    let comment = &comment_bodies(&host, 9)[0];
    assert!(
        comment.contains("intruder.yaml") && comment.contains("kube-public"),
        "{comment}"
    );
    assert_eq!(host.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn tether_diff_post_keeps_one_comment_and_sets_the_diff_status_from_ci() {
    let (_client, ns, inventory) = setup("feedback-post").await;
    let host = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, host.ca_pem()).unwrap();
    let head = remote.head("main");
    // The host answers on this test's runtime: the CLI runs off it.
    let post = || {
        let api = host.api_url();
        let args = [
            "diff",
            "models",
            "--repo",
            &remote.url,
            "--ref",
            "main",
            "-o",
            "markdown",
            "--post",
            "--post-api-url",
            &api,
            "--post-ca-file",
            ca.to_str().unwrap(),
        ];
        let mut command = crate::reconcile::tether_command(&inventory, &args);
        // As a GitHub Actions job of pull request 12 has them.
        command
            .env("GITHUB_REPOSITORY", "team/models")
            .env("GITHUB_REF", "refs/pull/12/merge")
            .env("TETHER_POST_TOKEN", TOKEN);
        async move {
            tokio::task::spawn_blocking(move || command.output().unwrap())
                .await
                .unwrap()
        }
    };
    let first = post().await;
    // Differences found: exit 1, as `tether diff` says them.
    assert_eq!(
        first.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report = String::from_utf8(first.stdout).unwrap();
    let second = post().await;
    assert_eq!(second.status.code(), Some(1));
    let comments = comment_bodies(&host, 12);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(report.contains("tether diff"), "{report}");
    assert_eq!(
        comments[0],
        format!("<!-- tether:diff:ci/team/models -->\n{report}")
    );
    assert_eq!(
        statuses(&host, &head)
            .first()
            .map(|s| (s.0.as_str(), s.1.as_str())),
        Some(("success", "tether/diff/ci"))
    );
    assert_eq!(host.violations(), Vec::<String>::new());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!stderr.contains(TOKEN));
}

/// The reasons of the Events on the Source `name`.
fn source_event_reasons(ns: &str, name: &str) -> Vec<String> {
    let text = kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.kind=Source,involvedObject.name={name}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    text.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn notices_go_to_the_sources_events_but_the_kinds_it_excludes() {
    install_crd();
    let (client, ns, _) = setup("feedback-notices").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    let feedback = "  feedback:\n    exclude: [applied]\n    notifications:\n      - type: kubernetes-events\n";
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, feedback));
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    kubectl_ok(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        &ns,
        "-p",
        r#"{"data":{"key":"by hand"}}"#,
    ]);
    eventually(Duration::from_secs(30), || async {
        source_event_reasons(&ns, "web").contains(&"DriftCorrected".to_string())
    })
    .await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v1"));
    let reasons = source_event_reasons(&ns, "web");
    assert!(!reasons.contains(&"Applied".to_string()), "{reasons:?}");
}

#[tokio::test]
async fn a_blocked_wave_stays_pending_then_fails_at_the_timeout_with_its_blocker() {
    let (client, ns, host, remote) = with_host("feedback-blocked", GitHost::GitHub).await;
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    follow_with_feedback(&ns, &remote, &host).await;
    // A second wave that waits for a ConfigMap nobody makes.
    let late = format!(
        "kind: KubernetesResourceInstance\nname: late\nresource_definition: |\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: late\n    namespace: {ns}\n  data:\n    key: x\ndepends_on:\n  - kind: ConfigMap\n    namespace: {ns}\n    name: missing\n"
    );
    let blocked = remote.push("main", &[("late.yaml", &late)]);
    let (headers, body) =
        crate::daemon::push_hook(&remote.url, "refs/heads/main", crate::daemon::SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(30), || async {
        states(&host, &blocked) == ["pending"]
    })
    .await;
    let pending_since = Instant::now();
    eventually(Duration::from_secs(TIMEOUT_SECONDS + 60), || async {
        states(&host, &blocked).len() == 2
    })
    .await;
    let waited = pending_since.elapsed();
    let said = statuses(&host, &blocked);
    assert_eq!(said[1].0, "failure", "{said:?}");
    assert!(
        said[1].2.contains(&format!("ConfigMap {ns}/missing")),
        "the failure names the blocker: {said:?}"
    );
    // Pending for the wave's whole wait (less the time the push took to be seen).
    assert!(
        waited >= Duration::from_secs(TIMEOUT_SECONDS / 2),
        "failed after {waited:?}"
    );
    assert!(
        crate::reconcile::live_config_map(&client, &ns, "late")
            .await
            .is_none()
    );
}

#[tokio::test]
async fn gitlab_gets_the_statuses_of_a_push_and_one_note_on_a_merge_request() {
    let (client, ns, host, remote) = with_host("feedback-gitlab", GitHost::GitLab).await;
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    follow_with_feedback(&ns, &remote, &host).await;

    // A merge request opened into main: its head planned, one note on it.
    let head = request_head(
        &remote,
        "refs/merge-requests/5/head",
        "feature",
        &[("cm.yaml", &config_map("settings", &ns, "v2"))],
    );
    let mut payload: serde_json::Value = serde_json::from_str(include_str!(
        "../contracts/webhooks/gitlab-merge-request-update.json"
    ))
    .unwrap();
    payload["project"]["git_http_url"] = remote.url.clone().into();
    payload["object_attributes"]["iid"] = 5.into();
    payload["object_attributes"]["action"] = "open".into();
    payload["object_attributes"]["last_commit"]["id"] = head.clone().into();
    let headers = [
        ("X-Gitlab-Event", "Merge Request Hook".to_string()),
        ("X-Gitlab-Token", crate::daemon::SECRET.to_string()),
    ];
    let (code, answer) = daemon.post("/hook/gitlab", &headers, payload.to_string().as_bytes());
    assert_eq!(code, 202, "{answer}");
    eventually(Duration::from_secs(30), || async {
        states(&host, &head) == ["pending", "success"]
    })
    .await;
    let notes = comment_bodies(&host, 5);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(&format!("<!-- tether:diff:default/{ns}/web -->")),
        "{}",
        notes[0]
    );
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v1"));
    assert_eq!(host.violations(), Vec::<String>::new());
}
