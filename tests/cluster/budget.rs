//! The deletion budget of a Source: a commit that drops most of its repository
//! prunes nothing (the status says `PruneHeld`, with the digest), until a person
//! approves exactly those deletions with `tether approve`, the page or a commit's
//! `Tether-Approve-Deletions` trailer; then they go,
//! and only they. And an object marked `Prune=confirm` holds the prune the same way.

use std::time::Duration;

use crate::daemon::{
    Daemon, SECRET, condition, condition_message, install_crd, kubectl_apply_text, kubectl_ok,
    push_hook, source_yaml, status,
};
use crate::harness::eventually;
use crate::operations::tether_plain;
use crate::reconcile::{
    Repo, all_output, base, config_map, live_config_map, setup, stdout, tether,
};
use crate::web::{csrf, http_get, http_post, install_roles, json, user, wait_until_allowed};
use tether_testkit::remote::Remote;

/// `count` ConfigMaps `cm-0`… in one file.
fn many(ns: &str, count: usize) -> String {
    (0..count)
        .map(|i| config_map(&format!("cm-{i}"), ns, "v1"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn output(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The messages of the Source's Events of `reason`.
fn events(ns: &str, reason: &str) -> String {
    kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("reason={reason},involvedObject.name=web"),
        "-o",
        "jsonpath={.items[*].message}",
    ])
}

/// A namespace with a daemon of its Sources and the Source `web`, pruning, whose
/// models hold `settings` and twelve ConfigMaps in `many.yaml`, all applied.
async fn held_site(test: &str) -> (kube::Client, String, Remote, Daemon) {
    install_crd();
    let (client, ns, _) = setup(test).await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
        ("many.yaml", &many(&ns, 12)),
    ]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 1h\n  prune: true\n",
    ));
    eventually(Duration::from_secs(30), || async {
        live_config_map(&client, &ns, "cm-11").await.is_some()
    })
    .await;
    (client, ns, remote, daemon)
}

/// Drops `many.yaml` (12 of the 14 objects the inventory records) and waits until the
/// Source holds the prune; returns the digest its status names.
async fn drop_most(ns: &str, remote: &Remote, daemon: &Daemon) -> String {
    remote.remove("main", "many.yaml");
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    eventually(Duration::from_secs(30), || async {
        condition(&status(ns, "web"), "Ready") == Some(("False".into(), "PruneHeld".into()))
    })
    .await;
    let message = condition_message(&status(ns, "web"), "Ready");
    message
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap()
        .trim_end_matches(',')
        .to_string()
}

async fn all_twelve(client: &kube::Client, ns: &str, live: bool) {
    for i in 0..12 {
        let found = live_config_map(client, ns, &format!("cm-{i}")).await;
        assert_eq!(found.is_some(), live, "cm-{i}");
    }
}

/// Waits until the Source is Ready again, then: the twelve are gone, `settings` stays.
async fn ready_with_only_the_twelve_gone(client: &kube::Client, ns: &str) {
    eventually(Duration::from_secs(30), || async {
        condition(&status(ns, "web"), "Ready")
            == Some(("True".into(), "ReconciliationSucceeded".into()))
    })
    .await;
    all_twelve(client, ns, false).await;
    assert!(live_config_map(client, ns, "settings").await.is_some());
}

#[tokio::test]
async fn a_source_holds_a_prune_beyond_its_budget_until_tether_approve_names_exactly_its_deletions()
{
    let (client, ns, remote, daemon) = held_site("budget-source").await;

    // A commit drops 12 of the 14 objects the inventory records: nothing is deleted.
    let digest = drop_most(&ns, &remote, &daemon).await;
    let said = status(&ns, "web");
    let message = condition_message(&said, "Ready");
    assert!(
        message.starts_with(
            "prune held: 12 of 14 recorded objects would be deleted, beyond the deletion budget (10 objects and 25% of the inventory), so nothing is deleted: approve exactly these deletions with tether approve SOURCE sha256:"
        ),
        "{message}"
    );
    assert!(
        message.ends_with(&format!(
            "{digest} (or with the trailer Tether-Approve-Deletions: and that digest in a commit), or fix the commit"
        )),
        "{message}"
    );
    assert_eq!(
        condition(&said, "Stalled"),
        Some(("True".into(), "PruneHeld".into()))
    );
    all_twelve(&client, &ns, true).await;
    eventually(Duration::from_secs(10), || async {
        events(&ns, "PruneHeld").contains(&digest)
    })
    .await;

    // Not a digest: refused before the Source is touched.
    let typo = tether_plain(&["approve", "web", "-n", &ns, "sha256:3f1c"]);
    assert_ne!(typo.status.code(), Some(0));
    assert!(
        output(&typo).contains("\"sha256:3f1c\" is not a digest of deletions"),
        "{}",
        output(&typo)
    );
    let annotations = kubectl_ok(&[
        "get",
        "source",
        "web",
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.annotations}",
    ]);
    assert!(!annotations.contains("approve-deletions"), "{annotations}");

    // Another set's digest approves nothing.
    let other = format!("sha256:{}", "0".repeat(64));
    let wrong = tether_plain(&["approve", "web", "-n", &ns, &other, "--timeout", "60s"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", output(&wrong));
    assert!(
        output(&wrong).contains("is not ready (PruneHeld): prune held: 12 of 14"),
        "{}",
        output(&wrong)
    );
    assert!(live_config_map(&client, &ns, "cm-0").await.is_some());

    // The digest the status named: exactly those twelve go.
    let approved = tether_plain(&["approve", "web", "-n", &ns, &digest, "--timeout", "60s"]);
    assert_eq!(approved.status.code(), Some(0), "{}", output(&approved));
    assert!(
        output(&approved).contains(&format!("{ns}/web is ready at main@sha1:")),
        "{}",
        output(&approved)
    );
    all_twelve(&client, &ns, false).await;
    assert!(live_config_map(&client, &ns, "settings").await.is_some());
    assert_eq!(status(&ns, "web")["lastPlan"]["pruned"], 12);
    eventually(Duration::from_secs(10), || async {
        events(&ns, "PruneApproved").contains(&format!(
            "pruned 12 of 14 recorded objects, beyond the deletion budget, as approved by {digest}"
        ))
    })
    .await;
}

/// Pushes, with the `git` CLI, an empty commit whose message ends with `trailer`.
fn push_trailer(remote: &Remote, trailer: &str) {
    let work = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=Approver",
                "-c",
                "user.email=approver@example.org",
            ])
            .args(args)
            .current_dir(work.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", output(&out));
    };
    git(&["clone", "-q", &remote.file_url(), "."]);
    git(&[
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "Approve the cleanup",
        "--trailer",
        trailer,
    ]);
    git(&["push", "-q", "origin", "HEAD:main"]);
}

#[tokio::test]
async fn a_commit_whose_trailer_names_the_digest_approves_exactly_those_deletions() {
    let (client, ns, remote, daemon) = held_site("budget-trailer").await;
    let digest = drop_most(&ns, &remote, &daemon).await;
    let hook = || {
        let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
        assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    };

    // A trailer naming another set approves nothing.
    let other = format!("sha256:{}", "0".repeat(64));
    push_trailer(&remote, &format!("Tether-Approve-Deletions: {other}"));
    let head = remote.head_of_bare("main");
    hook();
    eventually(Duration::from_secs(30), || async {
        status(&ns, "web")["lastAttemptedRevision"]
            .as_str()
            .is_some_and(|r| r.ends_with(&head))
    })
    .await;
    assert_eq!(
        condition(&status(&ns, "web"), "Ready"),
        Some(("False".into(), "PruneHeld".into()))
    );
    all_twelve(&client, &ns, true).await;

    // A commit naming the digest: exactly the twelve go, and only they.
    push_trailer(&remote, &format!("Tether-Approve-Deletions: {digest}"));
    hook();
    ready_with_only_the_twelve_gone(&client, &ns).await;
    eventually(Duration::from_secs(10), || async {
        events(&ns, "PruneApproved").contains(&digest)
    })
    .await;
}

#[tokio::test]
async fn the_page_shows_a_held_prune_and_approves_it_for_whoever_may_patch_the_source() {
    install_roles();
    let (client, ns, remote, daemon) = held_site("budget-web").await;
    let operator = user(&client, &ns, "operator", &["tether-operator"]).await;
    let approver = user(&client, &ns, "approver", &["tether-viewer"]).await;
    kubectl_ok(&[
        "create",
        "role",
        "approve",
        "-n",
        &ns,
        "--verb=patch",
        "--resource=sources.tether.dev",
    ]);
    kubectl_ok(&[
        "create",
        "rolebinding",
        "approve",
        "-n",
        &ns,
        "--role=approve",
        &format!("--serviceaccount={ns}:approver"),
    ]);
    let approver_user = format!("system:serviceaccount:{ns}:approver");
    wait_until_allowed(&approver_user, "patch", "sources.tether.dev", &ns);

    let digest = drop_most(&ns, &remote, &daemon).await;
    let page = format!("/api/v1/sources/{ns}/web");
    eventually(Duration::from_secs(10), || async {
        json(&http_get(&daemon, &page, Some(&approver)).1)["summary"]["heldDeletions"]
            == digest.as_str()
    })
    .await;
    let approve = format!("{page}/approve-deletions");
    let body = serde_json::json!({"digest": digest});

    // An operator scales and restarts, but approving a mass deletion is changing the
    // Source: refused, and nothing is deleted.
    let operator_csrf = csrf(&daemon, &operator);
    let (code, said) = http_post(&daemon, &approve, &operator, Some(&operator_csrf), &body);
    assert_eq!(code, 403, "{said}");
    // Not a digest: refused.
    let approver_csrf = csrf(&daemon, &approver);
    let typo = serde_json::json!({"digest": "sha256:3f1c"});
    let (code, said) = http_post(&daemon, &approve, &approver, Some(&approver_csrf), &typo);
    assert_eq!(code, 400, "{said}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    all_twelve(&client, &ns, true).await;

    // Who may patch the Source approves: exactly the twelve go.
    let (code, said) = http_post(&daemon, &approve, &approver, Some(&approver_csrf), &body);
    assert_eq!(code, 200, "{said}");
    assert_eq!(json(&said)["approved"], digest.as_str());
    ready_with_only_the_twelve_gone(&client, &ns).await;
    let detail = json(&http_get(&daemon, &page, Some(&approver)).1);
    assert!(detail["summary"]["heldDeletions"].is_null(), "{detail}");
}

#[tokio::test]
async fn a_source_whose_deletion_budget_is_no_budget_is_refused_with_the_field() {
    install_crd();
    let (_client, ns, _) = setup("budget-invalid").await;
    let remote = Remote::new(&[("base.yaml", &base(&ns))]);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  prune: true\n  deletionBudget: ten\n",
    ));
    eventually(Duration::from_secs(30), || async {
        condition(&status(&ns, "web"), "Ready") == Some(("False".into(), "InvalidSpec".into()))
    })
    .await;
    let message = condition_message(&status(&ns, "web"), "Ready");
    assert_eq!(
        message,
        "spec.deletionBudget: \"ten\" is not COUNT,PERCENT% (such as 10,25%) or off"
    );
}

/// A ConfigMap `name` whose annotations ask for a confirmed prune, as Argo CD writes it.
fn confirmed(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    argocd.argoproj.io/sync-options: Prune=confirm\ndata:\n  key: v1\n"
    )
}

#[tokio::test]
async fn an_object_marked_prune_confirm_holds_the_prune_until_a_person_approves_it() {
    let (client, ns, inventory) = setup("budget-confirm").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("kept.yaml", &config_map("kept", &ns, "v1")),
        ("plain.yaml", &config_map("plain", &ns, "v1")),
        ("careful.yaml", &confirmed("careful", &ns)),
    ]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));

    // Two of five go, well within the budget; one asks for confirmation.
    repo.remove("plain.yaml");
    repo.remove("careful.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains("prune held: 1 of the 2 deletions asks a person to confirm (Prune=confirm), so nothing is deleted: approve exactly these deletions with --approve-deletions sha256:"),
        "{diff}"
    );
    assert!(
        diff.contains("deleted once a person approves the prune's deletions (argocd.argoproj.io/sync-options: Prune=confirm)"),
        "{diff}"
    );
    let digest = diff
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap()
        .trim_end_matches(',')
        .to_string();
    // Held, with the budget or without it.
    for budget in ["10,25%", "off"] {
        let held = tether(
            &inventory,
            &["apply", "--prune", "--deletion-budget", budget, path],
        );
        assert_eq!(held.status.code(), Some(2), "{}", all_output(&held));
        assert!(
            all_output(&held).contains("0 pruned, 2 held"),
            "{}",
            all_output(&held)
        );
        for name in ["plain", "careful", "kept"] {
            assert!(
                live_config_map(&client, &ns, name).await.is_some(),
                "{name}"
            );
        }
    }

    // Approved: both go; the rest stays.
    let approved = tether(
        &inventory,
        &["apply", "--prune", "--approve-deletions", &digest, path],
    );
    assert_eq!(approved.status.code(), Some(0), "{}", all_output(&approved));
    assert!(
        stdout(&approved).contains("2 pruned"),
        "{}",
        all_output(&approved)
    );
    assert!(live_config_map(&client, &ns, "plain").await.is_none());
    assert!(live_config_map(&client, &ns, "careful").await.is_none());
    assert!(live_config_map(&client, &ns, "kept").await.is_some());
}

/// `tether run --prune` with its source from flags holds a pass's prune beyond
/// `--deletion-budget` as a Source does (its page names the digest), and the
/// `Tether-Approve-Deletions` trailer of a commit it applies approves exactly that set.
#[tokio::test]
async fn a_run_from_flags_holds_a_prune_beyond_its_budget_until_a_commit_approves_it() {
    let (client, ns, inventory) = setup("budget-flags").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
        ("many.yaml", &many(&ns, 12)),
    ]);
    let daemon = Daemon::start(&[
        "--repo",
        &remote.url,
        "--prune",
        "--interval",
        "1s",
        "--inventory-namespace",
        &ns,
        "--inventory-name",
        &inventory,
        "--web-anonymous-read-only",
    ]);
    eventually(Duration::from_secs(30), || async {
        live_config_map(&client, &ns, "cm-11").await.is_some()
    })
    .await;

    remote.remove("main", "many.yaml");
    let page = format!("/api/v1/sources/{ns}/{inventory}");
    let held = || json(&http_get(&daemon, &page, None).1)["summary"]["heldDeletions"].clone();
    eventually(Duration::from_secs(30), || async { held().is_string() }).await;
    let digest = held().as_str().unwrap().to_string();
    // Passes go on every second, and keep holding.
    tokio::time::sleep(Duration::from_secs(3)).await;
    all_twelve(&client, &ns, true).await;
    assert_eq!(held(), digest.as_str());

    push_trailer(&remote, &format!("Tether-Approve-Deletions: {digest}"));
    eventually(Duration::from_secs(30), || async {
        live_config_map(&client, &ns, "cm-0").await.is_none()
    })
    .await;
    all_twelve(&client, &ns, false).await;
    assert!(live_config_map(&client, &ns, "settings").await.is_some());
    eventually(Duration::from_secs(10), || async { held().is_null() }).await;
}
