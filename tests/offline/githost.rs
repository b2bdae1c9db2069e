//! tether's Git host client against the test kit's fake GitHub and GitLab, which check
//! every request against the hosts' official descriptions (GitHub's OpenAPI document,
//! GitLab's documented endpoints in tests/contracts/gitlab.json); and the webhook
//! payloads tether reads, against GitHub's webhook description.

use std::time::Duration;

use serde_json::{Value, json};
use tether_core::feedback::{
    CommitState, CommitStatus, HostedRepository, PullRequestComment, status,
};
use tether_engine::feedback::DeliveryError;
use tether_engine::feedback::githost::{GITHUB_COMMENT_LIMIT, GitHostClient, Upserted};
use tether_testkit::githost::{Availability, GitHost, GitHostServer, validate_webhook};
use zeroize::Zeroizing;

const TOKEN: &str = "ghp_7f3c9a1e5b2d4c6a8e0f1b3d5c7a9e1f3b5d";
const COMMIT: &str = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c";
const HOSTS: [GitHost; 2] = [GitHost::GitHub, GitHost::GitLab];

fn repository_path(host: GitHost) -> &'static str {
    match host {
        GitHost::GitHub => "team/models",
        GitHost::GitLab => "group/sub/models",
    }
}

fn client_with(server: &GitHostServer, host: GitHost, token: &str) -> GitHostClient {
    let repository = HostedRepository {
        host: match host {
            GitHost::GitHub => tether_core::feedback::GitHost::GitHub,
            GitHost::GitLab => tether_core::feedback::GitHost::GitLab,
        },
        api: server.api_url(),
        path: repository_path(host).into(),
    };
    GitHostClient::new(
        repository,
        Zeroizing::new(token.to_string()),
        Some(server.ca_pem().as_bytes()),
        Duration::from_secs(10),
    )
    .unwrap()
}

fn client(server: &GitHostServer, host: GitHost) -> GitHostClient {
    client_with(server, host, TOKEN)
}

#[tokio::test]
async fn statuses_arrive_in_order_as_each_host_describes_them() {
    for host in HOSTS {
        let server = GitHostServer::start(host, TOKEN).await;
        let client = client(&server, host);
        let context = status::context("east", "shop/web");
        for state in [
            CommitState::Pending,
            CommitState::Success,
            CommitState::Failure,
        ] {
            let mut commit_status = CommitStatus::new(COMMIT, &context, state, "wave 1 of 2");
            commit_status.target_url = Some("https://tether.example.com/sources/shop/web".into());
            client.set_status(&commit_status).await.unwrap();
        }
        let said = server.statuses(COMMIT);
        let states: Vec<&str> = said.iter().map(|s| s.state.as_str()).collect();
        let expected = match host {
            GitHost::GitHub => ["pending", "success", "failure"],
            GitHost::GitLab => ["pending", "success", "failed"],
        };
        assert_eq!(states, expected, "{host:?}");
        assert!(said.iter().all(|s| s.context == "tether/east/shop/web"));
        assert_eq!(said[0].description.as_deref(), Some("wave 1 of 2"));
        assert_eq!(server.violations(), Vec::<String>::new(), "{host:?}");

        let request = &server.requests()[0];
        assert_eq!(request.status, 201);
        assert!(request.header("user-agent").unwrap().starts_with("tether/"));
        match host {
            GitHost::GitHub => {
                assert_eq!(
                    request.path,
                    format!("/api/v3/repos/team/models/statuses/{COMMIT}")
                );
                assert_eq!(
                    request.header("accept"),
                    Some("application/vnd.github+json")
                );
                assert_eq!(request.header("x-github-api-version"), Some("2022-11-28"));
            }
            GitHost::GitLab => assert_eq!(
                request.path,
                format!("/api/v4/projects/group%2Fsub%2Fmodels/statuses/{COMMIT}")
            ),
        }
    }
}

#[tokio::test]
async fn the_plan_comment_is_one_comment_edited_in_place() {
    for host in HOSTS {
        let server = GitHostServer::start(host, TOKEN).await;
        let client = client(&server, host);
        let first = PullRequestComment::new(7, "east", "shop/web", "2 to change");
        assert_eq!(
            client.upsert_comment(&first).await.unwrap(),
            Upserted::Created
        );
        let writes = |server: &GitHostServer| {
            server
                .requests()
                .iter()
                .filter(|r| r.method != "GET")
                .count()
        };
        assert_eq!(
            client.upsert_comment(&first).await.unwrap(),
            Upserted::Unchanged
        );
        assert_eq!(writes(&server), 1, "the same body again is no request");
        let second = PullRequestComment::new(7, "east", "shop/web", "nothing to change");
        assert_eq!(
            client.upsert_comment(&second).await.unwrap(),
            Upserted::Updated
        );
        let comments = server.comments(7);
        assert_eq!(comments.len(), 1, "{host:?}: {comments:?}");
        assert_eq!(comments[0].1, second.body);
        // Another cluster's comment is another comment.
        let west = PullRequestComment::new(7, "west", "shop/web", "1 to change");
        assert_eq!(
            client.upsert_comment(&west).await.unwrap(),
            Upserted::Created
        );
        assert_eq!(server.comments(7).len(), 2);
        assert_eq!(server.violations(), Vec::<String>::new(), "{host:?}");
    }
}

#[tokio::test]
async fn the_comment_is_found_among_many_on_the_second_page() {
    for host in HOSTS {
        let server = GitHostServer::start(host, TOKEN).await;
        let client = client(&server, host);
        let old = PullRequestComment::new(42, "east", "shop/web", "3 to change");
        let others = |range: std::ops::Range<u32>| range.map(|n| format!("LGTM {n}"));
        server.seed_comments(42, others(0..110));
        server.seed_comments(42, [old.body.clone()]);
        server.seed_comments(42, others(110..119));
        let new = PullRequestComment::new(42, "east", "shop/web", "nothing to change");
        assert_eq!(
            client.upsert_comment(&new).await.unwrap(),
            Upserted::Updated
        );
        let comments = server.comments(42);
        assert_eq!(comments.len(), 120);
        assert_eq!(comments[110].1, new.body, "{host:?}");
        let pages: Vec<String> = server
            .requests()
            .iter()
            .filter(|r| r.method == "GET")
            .filter_map(|r| {
                r.query
                    .iter()
                    .find(|(n, _)| n == "page")
                    .map(|(_, v)| v.clone())
            })
            .collect();
        assert_eq!(pages, ["1", "2"], "{host:?}");
        assert_eq!(server.violations(), Vec::<String>::new(), "{host:?}");
    }
}

#[tokio::test]
async fn a_plan_longer_than_github_takes_is_cut_and_says_so() {
    let server = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let client = client(&server, GitHost::GitHub);
    let report = "- Deployment shop/web changes\n".repeat(3_000);
    let comment = PullRequestComment::new(3, "east", "shop/web", &report);
    assert!(comment.body.chars().count() > GITHUB_COMMENT_LIMIT);
    client.upsert_comment(&comment).await.unwrap();
    let body = &server.comments(3)[0].1;
    assert_eq!(body.chars().count(), GITHUB_COMMENT_LIMIT);
    assert!(body.starts_with(&comment.marker));
    assert!(body.contains("cut here"));
    // Cut the same way again, it is the same comment: nothing is sent.
    assert_eq!(
        client.upsert_comment(&comment).await.unwrap(),
        Upserted::Unchanged
    );
    assert_eq!(server.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_host_that_fails_is_told_apart_and_the_token_is_never_said() {
    for host in HOSTS {
        let server = GitHostServer::start(host, TOKEN).await;
        let client = client(&server, host);
        let pending = CommitStatus::new(COMMIT, "tether/east/shop/web", CommitState::Pending, "");

        server.set_availability(Availability::Unavailable);
        let unavailable = client.set_status(&pending).await.unwrap_err();
        assert!(
            matches!(unavailable, DeliveryError::Refused { status: 503, .. }),
            "{unavailable:?}"
        );
        assert!(!unavailable.is_forbidden());
        assert_eq!(server.requests().last().unwrap().status, 503);

        server.set_availability(Availability::Refusing);
        let requests_before = server.requests().len();
        let down = client.set_status(&pending).await.unwrap_err();
        assert!(
            matches!(down, DeliveryError::Unreachable { .. }),
            "{down:?}"
        );
        assert!(server.refused_connections() >= 1);
        assert_eq!(
            server.requests().len(),
            requests_before,
            "nothing was answered"
        );

        server.set_availability(Availability::Up);
        let wrong = client_with(&server, host, "glpat-not-the-right-one-000000");
        let unauthorized = wrong.set_status(&pending).await.unwrap_err();
        assert!(matches!(
            unauthorized,
            DeliveryError::Refused { status: 401, .. }
        ));

        for error in [&unavailable, &down, &unauthorized] {
            let text = format!("{error} {error:?}");
            assert!(!text.contains(TOKEN), "{host:?}: {text}");
            assert!(!text.contains("glpat-not-the-right-one"), "{text}");
            assert!(!text.contains("127.0.0.1"), "no URL in {text}");
            assert!(text.contains(repository_path(host)), "{text}");
        }
        assert_eq!(server.violations(), Vec::<String>::new());
    }
}

#[tokio::test]
async fn check_runs_with_a_personal_token_are_forbidden_and_told_apart() {
    let server = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let client = client(&server, GitHost::GitHub);
    let error = client
        .create_check_run(
            COMMIT,
            "tether/diff/east/shop/web",
            CommitState::Success,
            "## Plan\n",
        )
        .await
        .unwrap_err();
    assert!(error.is_forbidden(), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("Resource not accessible by personal access token")
    );
    // The request itself was what GitHub describes: only the token lacked the right.
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(
        server.requests()[0].path,
        "/api/v3/repos/team/models/check-runs"
    );
}

/// A request tether does not make, sent as is: the validator must catch it, or a
/// green test above would mean nothing.
async fn send_raw(server: &GitHostServer, method: &str, path: &str, body: Option<Value>) -> u16 {
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("{}{path}", server.api_url());
    let mut request = http
        .request(method.parse().unwrap(), url)
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn the_validator_catches_what_the_descriptions_do_not_allow() {
    let github = GitHostServer::start(GitHost::GitHub, TOKEN).await;
    let statuses = format!("/repos/team/models/statuses/{COMMIT}");
    let status = send_raw(&github, "POST", &statuses, Some(json!({"state": "done"}))).await;
    assert_eq!(status, 422);
    assert_eq!(github.violations().len(), 1, "{:?}", github.violations());
    assert!(
        github.violations()[0].contains("done"),
        "{:?}",
        github.violations()
    );
    assert!(
        github.statuses(COMMIT).is_empty(),
        "a refused status is not kept"
    );

    let cases: [(&str, &str, Option<Value>); 4] = [
        (
            "POST",
            statuses.as_str(),
            Some(json!({"context": "no state"})),
        ),
        ("GET", "/repos/team/models/issues/seven/comments", None),
        (
            "GET",
            "/repos/team/models/issues/7/comments?per_page=many",
            None,
        ),
        ("POST", "/repos/team/models/no-such-thing", Some(json!({}))),
    ];
    for (method, path, body) in cases {
        let before = github.violations().len();
        send_raw(&github, method, path, body).await;
        assert_eq!(github.violations().len(), before + 1, "{method} {path}");
    }

    let gitlab = GitHostServer::start(GitHost::GitLab, TOKEN).await;
    let path = format!("/projects/group%2Fmodels/statuses/{COMMIT}");
    // GitHub's word for a failure is not GitLab's.
    let status = send_raw(&gitlab, "POST", &path, Some(json!({"state": "failure"}))).await;
    assert_eq!(status, 422);
    assert!(
        gitlab.violations()[0].contains("failure"),
        "{:?}",
        gitlab.violations()
    );
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/contracts/webhooks/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_webhook_payloads_tether_is_tested_with_are_githubs() {
    let push = fixture("github-push");
    assert_eq!(validate_webhook("push", &push), Vec::<String>::new());
    let mut tag = push.clone();
    tag["ref"] = "refs/tags/v1".into();
    assert_eq!(validate_webhook("push", &tag), Vec::<String>::new());
    for name in ["pull-request-opened", "pull-request-synchronize"] {
        let payload = fixture(&format!("github-{name}"));
        assert_eq!(
            validate_webhook(name, &payload),
            Vec::<String>::new(),
            "{name}"
        );
    }
    let mut same_repository = fixture("github-pull-request-opened");
    same_repository["pull_request"]["head"]["repo"] =
        same_repository["pull_request"]["base"]["repo"].clone();
    assert_eq!(
        validate_webhook("pull-request-opened", &same_repository),
        Vec::<String>::new()
    );

    // The check bites: what webhook.rs's tests once sent (a push with only a ref and
    // three URLs) is no push GitHub sends.
    let bare = json!({"ref": "refs/heads/main", "repository": {
        "clone_url": "https://github.com/team/models.git",
        "ssh_url": "git@github.com:team/models.git",
        "html_url": "https://github.com/team/models",
        "default_branch": "main"
    }});
    assert!(!validate_webhook("push", &bare).is_empty());
    let mut reopened_as_opened = fixture("github-pull-request-opened");
    reopened_as_opened["action"] = "reopened".into();
    assert!(!validate_webhook("pull-request-opened", &reopened_as_opened).is_empty());
}
