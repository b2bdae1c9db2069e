//! Day-2 operations against the control plane and real Git: each operation that
//! changes the desired state is a commit, read back with the `git` CLI, and the
//! cluster follows it; pod actions act on the cluster and reach the event sinks.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, ListParams};

use crate::daemon::Remote;
use crate::harness::{Running, cluster, eventually};
use crate::reconcile::{all_output, base, git, setup, stdout, tether};

const IMAGES: &str = "---\nkind: Image\nname: nginx\ntag: \"1.25\"\n";

/// A models file with a Deployment slice `web` of `replicas` pods in `ns`, written as
/// a person would (comments, an aligned value).
fn models(ns: &str, replicas: u32, extra: &str) -> String {
    format!(
        "{}{IMAGES}---\n# The front end.\nkind: Slice\nname: web\ntrust_domain: {ns}\ncontroller_kind: Deployment\ncontroller_replica_count: {replicas}   # keep it small\ndefault_image: nginx\n{extra}",
        base(ns)
    )
}

/// A Git checkout holding `models.yaml`, committed by the `git` CLI.
fn checkout(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("models.yaml"), text).unwrap();
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["config", "user.name", "Ada Operator"]);
    git(dir.path(), &["config", "user.email", "ada@example.org"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "models"]);
    dir
}

/// tether without the inventory flag (commands that take none).
pub fn tether_plain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .env("TETHER_COLOR", "never")
        .output()
        .unwrap()
}

async fn replicas(client: &Client, ns: &str) -> i32 {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .unwrap();
    deployment.spec.unwrap().replicas.unwrap_or(1)
}

fn subjects(dir: &Path, branch: &str) -> Vec<String> {
    git(dir, &["log", "--format=%s|%an", branch])
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn scale_up_and_down_changes_the_deployment_with_one_commit_each() {
    let (client, ns, inventory) = setup("ops-scale").await;
    let repo = checkout(&models(&ns, 2, ""));
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));

    let up = tether(&inventory, &["scale", "web", "+1", "-C", path]);
    assert!(up.status.success(), "{}", all_output(&up));
    assert!(
        stdout(&up).contains("scale: Slice/web 2 → 3"),
        "{}",
        stdout(&up)
    );
    assert_eq!(replicas(&client, &ns).await, 3);
    let down = tether(&inventory, &["scale", "web", "-1", "-C", path]);
    assert!(down.status.success(), "{}", all_output(&down));
    assert_eq!(replicas(&client, &ns).await, 2);
    assert_eq!(
        subjects(repo.path(), "HEAD"),
        [
            "scale: Slice/web 3 → 2|Ada Operator",
            "scale: Slice/web 2 → 3|Ada Operator",
            "models|Test"
        ]
    );
    // The file changed in that one value: comments and alignment kept, the working
    // tree as committed.
    let text = std::fs::read_to_string(repo.path().join("models.yaml")).unwrap();
    assert_eq!(text, models(&ns, 2, ""));
    assert_eq!(git(repo.path(), &["status", "--porcelain"]), "");
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));

    // What makes no sense changes nothing.
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    for (args, words) in [
        (vec!["scale", "web", "-3"], "2 - 3 would be -1"),
        (vec!["scale", "wbe", "3"], "no Slice named \"wbe\""),
        (vec!["scale", "webb", "3"], "did you mean \"web\"?"),
    ] {
        let mut args = args.clone();
        args.extend(["-C", path]);
        let refused = tether(&inventory, &args);
        assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
        assert!(
            all_output(&refused).contains(words),
            "{}",
            all_output(&refused)
        );
    }
    std::fs::write(
        repo.path().join("models.yaml"),
        models(&ns, 2, "description: being edited\n"),
    )
    .unwrap();
    let dirty = tether(&inventory, &["scale", "web", "4", "-C", path]);
    assert_eq!(dirty.status.code(), Some(2));
    assert!(
        all_output(&dirty).contains("changes that are not committed"),
        "{}",
        all_output(&dirty)
    );
    assert_eq!(git(repo.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(replicas(&client, &ns).await, 2);
}

#[tokio::test]
async fn a_discovered_slice_is_not_tethers_to_scale() {
    let (_, ns, inventory) = setup("ops-discovered").await;
    let discovered = format!(
        "{}---\nkind: Slice\nname: redis\ntrust_domain: {ns}\ncontroller_kind: StatefulSet\ncontroller_replica_count: 1\ndescription: StatefulSet {ns}/redis (Helm release cache)\nxos_managed: false\n",
        models(&ns, 1, "")
    );
    let repo = checkout(&discovered);
    let path = repo.path().to_str().unwrap();
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    let refused = tether(&inventory, &["scale", "redis", "+1", "-C", path]);
    assert_eq!(refused.status.code(), Some(2));
    let output = all_output(&refused);
    assert!(output.contains("tether does not own it"), "{output}");
    assert!(output.contains("Helm release cache"), "{output}");
    assert_eq!(git(repo.path(), &["rev-parse", "HEAD"]), head);
}

#[tokio::test]
async fn restart_makes_a_new_replicaset_that_the_next_reconcile_keeps() {
    let (client, ns, inventory) = setup("ops-restart").await;
    let repo = checkout(&models(&ns, 2, ""));
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path, "--wait"]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let before: Vec<String> = sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|r| r.metadata.uid)
        .collect();
    assert_eq!(before.len(), 1);

    let restart = tether(
        &inventory,
        &["restart", "web", "-C", path, "--wait", "--timeout", "60s"],
    );
    assert!(restart.status.success(), "{}", all_output(&restart));
    assert!(
        stdout(&restart).contains("is rolled out"),
        "{}",
        all_output(&restart)
    );
    let latest = subjects(repo.path(), "HEAD").remove(0);
    assert!(latest.starts_with("restart: Slice/web at "), "{latest}");
    let after = sets.list(&ListParams::default()).await.unwrap().items;
    let new: Vec<&ReplicaSet> = after
        .iter()
        .filter(|r| !before.contains(r.metadata.uid.as_ref().unwrap()))
        .collect();
    assert_eq!(new.len(), 1, "one new ReplicaSet");
    let annotations = new[0].spec.as_ref().unwrap().template.as_ref().unwrap();
    let restarted_at = &annotations
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()["tether.dev/restarted-at"];
    assert!(
        latest.contains(restarted_at.as_str()),
        "{latest} vs {restarted_at}"
    );

    // The next reconcile keeps it: nothing to change, no third ReplicaSet.
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
    let again = tether(&inventory, &["apply", path]);
    assert!(again.status.success(), "{}", all_output(&again));
    assert_eq!(
        sets.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
}

#[tokio::test]
async fn rollout_status_follows_a_rolling_update_to_the_end() {
    let (client, ns, inventory) = setup("ops-rollout").await;
    let rolling = "update_strategy: RollingUpdate\nmax_surge: 1\nmax_unavailable: 0\n";
    let repo = checkout(&models(&ns, 3, rolling));
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path, "--wait"]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    // A new image, applied without waiting: the controller rolls one pod at a time.
    let newer = models(&ns, 3, rolling).replace("tag: \"1.25\"", "tag: \"1.26\"");
    std::fs::write(repo.path().join("models.yaml"), newer).unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let status = tether_plain(&["rollout", "status", "web", "-C", path, "--timeout", "60s"]);
    assert!(status.status.success(), "{}", all_output(&status));
    assert!(stdout(&status).contains(&format!("Deployment {ns}/web is rolled out")));
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    let state = deployment.status.unwrap();
    assert_eq!(state.updated_replicas, Some(3));
    assert_eq!(state.replicas, Some(3));
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let images: Vec<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            p.spec.as_ref().unwrap().containers[0]
                .image
                .clone()
                .unwrap()
        })
        .collect();
    assert_eq!(images, ["nginx:1.26"; 3], "{images:?}");

    // A paused Deployment is said to be paused at once, rather than waited for.
    let paused = models(&ns, 3, &format!("{rolling}paused: true\n"));
    std::fs::write(repo.path().join("models.yaml"), paused).unwrap();
    assert!(tether(&inventory, &["apply", path]).status.success());
    let status = tether_plain(&["rollout", "status", "web", "-C", path, "--timeout", "20s"]);
    assert_eq!(status.status.code(), Some(2));
    assert!(
        all_output(&status).contains("is paused"),
        "{}",
        all_output(&status)
    );
}

#[tokio::test]
async fn rollback_returns_the_image_as_a_new_commit_on_the_remote() {
    let (client, ns, inventory) = setup("ops-rollback").await;
    let remote = Remote::new(&[("models.yaml", &models(&ns, 1, ""))]);
    let first = remote.head_of_bare("main");
    let newer = models(&ns, 1, "").replace("tag: \"1.25\"", "tag: \"1.26\"");
    let second = remote.push("main", &[("models.yaml", &newer)]);
    // A commit that leaves the slice alone: the rollback looks past it.
    let third = remote.push("main", &[("site.yaml", "kind: Site\nname: mysite\n")]);
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let source = [
        "--repo",
        &remote.url,
        "-C",
        "models",
        "--cache-dir",
        cache_dir,
    ];
    let mut apply = vec![
        "apply",
        "--repo",
        &remote.url,
        "--cache-dir",
        cache_dir,
        "models",
    ];
    apply.push("--wait");
    let applied = tether(&inventory, &apply);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let image = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
    };
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    assert_eq!(
        image(deployments.get("web").await.unwrap()).as_deref(),
        Some("nginx:1.26")
    );

    let mut args = vec![
        "rollback",
        "web",
        "--author",
        "Bob Oncall <bob@example.org>",
    ];
    args.extend(source);
    let rolled = tether(&inventory, &args);
    assert!(rolled.status.success(), "{}", all_output(&rolled));
    assert_eq!(
        image(deployments.get("web").await.unwrap()).as_deref(),
        Some("nginx:1.25")
    );
    // A new commit on top: the history is kept, and the file is the first one again.
    let bare = remote.bare();
    let log = git(&bare, &["log", "--format=%H %an %s", "main"]);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    let rollback = format!("Bob Oncall rollback: Slice/web to {}", &first[..10]);
    assert!(lines[0].contains(&rollback), "{log}");
    assert!(
        lines[1].starts_with(&third) && lines[2].starts_with(&second),
        "{log}"
    );
    assert!(lines[3].starts_with(&first), "{log}");
    let now = git(&bare, &["show", "main:models/models.yaml"]);
    assert_eq!(now, models(&ns, 1, "").trim_end());
}

#[tokio::test]
async fn a_push_race_keeps_both_commits_and_propose_leaves_the_branch_alone() {
    let (client, ns, inventory) = setup("ops-race").await;
    let remote = Remote::new(&[("models.yaml", &models(&ns, 1, ""))]);
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    // Another client's commit lands while tether's push is received, once.
    let other = cache.path().join("other");
    git(
        cache.path(),
        &["clone", "-q", remote.bare().to_str().unwrap(), "other"],
    );
    std::fs::write(other.join("models/site.yaml"), "kind: Site\nname: mysite\n").unwrap();
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "add a site"]);
    let hook = remote.bare().join("hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nif [ ! -e '{marker}' ]; then\n  touch '{marker}'\n  env -u GIT_DIR -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES git -C '{other}' push -q origin main >&2\nfi\n",
            marker = cache.path().join("raced").display(),
            other = other.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let source = [
        "--repo",
        remote.url.as_str(),
        "-C",
        "models",
        "--cache-dir",
        cache_dir,
    ];
    let mut args = vec!["scale", "web", "2", "--no-apply"];
    args.extend(source);
    let scaled = tether(&inventory, &args);
    assert!(scaled.status.success(), "{}", all_output(&scaled));
    assert!(cache.path().join("raced").exists(), "the race happened");
    let bare = remote.bare();
    assert_eq!(
        git(&bare, &["log", "--format=%s", "main"])
            .lines()
            .collect::<Vec<_>>(),
        ["scale: Slice/web 1 → 2", "add a site", "models"]
    );
    let site = git(&bare, &["show", "main:models/site.yaml"]);
    assert!(site.contains("mysite"));

    // A proposal: a new branch with the commit, main untouched, nothing applied.
    let main = remote.head_of_bare("main");
    let mut args = vec!["scale", "web", "+3", "--propose", "scale-web"];
    args.extend(source);
    let proposed = tether(&inventory, &args);
    assert!(proposed.status.success(), "{}", all_output(&proposed));
    assert!(
        stdout(&proposed).contains("new branch scale-web"),
        "{}",
        stdout(&proposed)
    );
    assert_eq!(remote.head_of_bare("main"), main);
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s", "scale-web"]),
        "scale: Slice/web 2 → 5"
    );
    assert_eq!(git(&bare, &["rev-parse", "scale-web~1"]), main);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    assert!(
        deployments.get_opt("web").await.unwrap().is_none(),
        "nothing applied"
    );
    // The same proposal again is refused: the branch exists.
    let again = tether(&inventory, &args);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        all_output(&again).contains("exists already"),
        "{}",
        all_output(&again)
    );
}

#[tokio::test]
async fn recreate_gives_the_pod_a_new_uid_and_its_event_reaches_the_sinks() {
    let (client, ns, inventory) = setup("ops-recreate").await;
    let repo = checkout(&models(&ns, 1, ""));
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path, "--wait"]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let jsonl = repo.path().join("events.jsonl");
    let _events = Running(
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["events", "--watch", "-n", &ns, "--events-jsonl"])
            .arg(&jsonl)
            .arg("--outbox")
            .arg(repo.path().join("outbox"))
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .spawn()
            .unwrap(),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let old = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let (old_name, old_uid) = (old.metadata.name.unwrap(), old.metadata.uid.unwrap());
    // The watch has seen the pod before it is recreated.
    eventually(Duration::from_secs(20), || async {
        std::fs::read_to_string(&jsonl)
            .unwrap_or_default()
            .contains(&old_uid)
    })
    .await;

    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    let recreated = tether_plain(&["recreate", &old_name, "-n", &ns, "--author", "ada"]);
    assert!(recreated.status.success(), "{}", all_output(&recreated));
    assert!(
        stdout(&recreated).contains("its ReplicaSet"),
        "{}",
        stdout(&recreated)
    );
    let live = pods.list(&ListParams::default()).await.unwrap().items;
    let new_uids: Vec<String> = live
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(new_uids.len(), 1);
    assert_ne!(new_uids[0], old_uid);
    assert_eq!(git(repo.path(), &["rev-parse", "HEAD"]), head, "no commit");
    // The sinks: the old pod's deletion says why, and the new pod is there.
    eventually(Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(&jsonl).unwrap_or_default();
        let events: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let deleted = events.iter().any(|e| {
            e["status"] == "deleted"
                && e["uid"] == old_uid.as_str()
                && e["action"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("recreate at ") && a.ends_with(" by ada"))
        });
        let created = events
            .iter()
            .any(|e| e["status"] == "created" && e["uid"] == new_uids[0].as_str());
        deleted && created
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let recorded = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        recorded
            .iter()
            .any(|e| e.reason.as_deref() == Some("Recreate")
                && e.involved_object.uid.as_deref() == Some(old_uid.as_str())),
        "a Recreate Event on the old pod"
    );
    // The reconcile after it has nothing to do.
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
}

#[tokio::test]
async fn recreate_of_a_bare_pod_applies_its_model_again_and_refuses_an_orphan() {
    let (client, ns, inventory) = setup("ops-recreate-bare").await;
    let bare = format!(
        "{}{IMAGES}---\nkind: Slice\nname: tools\ntrust_domain: {ns}\n---\nkind: KubernetesServiceInstance\nname: toolbox\nslice: tools\nimage: nginx\n",
        base(&ns)
    );
    let repo = checkout(&bare);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path, "--wait"]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let old_uid = pods.get("toolbox").await.unwrap().metadata.uid.unwrap();
    let recreated = tether(&inventory, &["recreate", "toolbox", "-n", &ns, "-C", path]);
    assert!(recreated.status.success(), "{}", all_output(&recreated));
    let new_uid = pods.get("toolbox").await.unwrap().metadata.uid.unwrap();
    assert_ne!(new_uid, old_uid);

    // A pod nobody would make again is refused, and left alone.
    let orphan: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "orphan"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let orphan = pods.create(&Default::default(), &orphan).await.unwrap();
    let refused = tether(&inventory, &["recreate", "orphan", "-n", &ns, "-C", path]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        all_output(&refused).contains("nothing would make it again"),
        "{}",
        all_output(&refused)
    );
    assert_eq!(
        pods.get("orphan").await.unwrap().metadata.uid,
        orphan.metadata.uid
    );
}

#[tokio::test]
async fn restart_containers_says_what_it_needs_when_the_node_cannot_exec() {
    // The node simulator serves no exec (no kubelet listens at the node's address):
    // the command must say so, name the alternative, and leave the pod as it was.
    let (client, ns, inventory) = setup("ops-restart-containers").await;
    let repo = checkout(&models(&ns, 1, ""));
    let path = repo.path().to_str().unwrap();
    assert!(
        tether(&inventory, &["apply", path, "--wait"])
            .status
            .success()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let name = pod.metadata.name.clone().unwrap();
    let output = tether_plain(&["restart-containers", &name, "-n", &ns, "--timeout", "10s"]);
    assert_eq!(output.status.code(), Some(2), "{}", all_output(&output));
    // Without the frame and line breaks of the graphical report.
    let text: String = all_output(&output)
        .split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("cannot end the main process of container web"),
        "{text}"
    );
    assert!(
        text.contains("dial tcp 127.0.1.1:10250: connect: connection refused"),
        "the server's reason: {text}"
    );
    assert!(
        text.contains("tether recreate makes the pod again instead"),
        "{text}"
    );
    assert_eq!(
        pods.get(&name).await.unwrap().metadata.uid,
        pod.metadata.uid
    );
    let missing = tether_plain(&["restart-containers", "nope", "-n", &ns]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        all_output(&missing).contains("no pod nope"),
        "{}",
        all_output(&missing)
    );
}

#[tokio::test]
async fn the_update_strategy_can_change_both_ways() {
    let (client, ns, inventory) = setup("ops-strategy").await;
    let repo = checkout(&models(&ns, 2, "max_surge: 1\n"));
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let strategy = |d: Deployment| serde_json::to_value(d.spec.unwrap().strategy).unwrap();
    // Recreate: the rolling parameters (ours, and the server's defaults) must go.
    std::fs::write(
        repo.path().join("models.yaml"),
        models(&ns, 2, "update_strategy: Recreate\n"),
    )
    .unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    assert_eq!(
        strategy(deployments.get("web").await.unwrap()),
        serde_json::json!({"type": "Recreate"})
    );
    // The switch's own field manager is gone: the type is the apply's alone.
    let managers: Vec<String> = deployments
        .get("web")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.manager)
        .collect();
    assert!(
        !managers.iter().any(|m| m.ends_with("-strategy-switch")),
        "{managers:?}"
    );
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
    // And back to rolling, with the server's defaults for what the model leaves out.
    std::fs::write(
        repo.path().join("models.yaml"),
        models(&ns, 2, "max_unavailable: 0\n"),
    )
    .unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    assert_eq!(
        strategy(deployments.get("web").await.unwrap()),
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}})
    );
    // A StatefulSet from rolling (with the server's partition 0) to OnDelete.
    let stateful = models(&ns, 2, "").replace("Deployment", "StatefulSet");
    std::fs::write(repo.path().join("models.yaml"), &stateful).unwrap();
    assert!(
        tether(&inventory, &["apply", path, "--prune"])
            .status
            .success()
    );
    let on_delete = format!("{stateful}update_strategy: OnDelete\n");
    std::fs::write(repo.path().join("models.yaml"), on_delete).unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let sets = Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), &ns);
    let live = sets.get("web").await.unwrap().spec.unwrap().update_strategy;
    assert_eq!(
        serde_json::to_value(live).unwrap(),
        serde_json::json!({"type": "OnDelete"})
    );
}

#[tokio::test]
async fn recreate_works_on_pods_of_controllers_kubectl_made() {
    use crate::discover::kubectl;
    let (client, ns, _) = setup("ops-recreate-kubectl").await;
    kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=2",
        "-n",
        &ns,
    ]);
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("db.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  serviceName: db\n  replicas: 1\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers:\n        - {name: db, image: mariadb}\n",
    )
    .unwrap();
    kubectl(&["apply", "-n", &ns, "-f", manifest.to_str().unwrap()]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let live = |pods: Vec<Pod>| -> Vec<(String, String)> {
        pods.into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
            .collect()
    };
    eventually(Duration::from_secs(30), || async {
        live(pods.list(&ListParams::default()).await.unwrap().items).len() == 3
    })
    .await;
    let before = live(pods.list(&ListParams::default()).await.unwrap().items);

    // A ReplicaSet's pod: a new pod under a new name.
    let (web, web_uid) = before.iter().find(|(n, _)| n.starts_with("web-")).unwrap();
    let recreated = tether_plain(&["recreate", web, "-n", &ns]);
    assert!(recreated.status.success(), "{}", all_output(&recreated));
    assert!(
        stdout(&recreated).contains("its ReplicaSet"),
        "{}",
        stdout(&recreated)
    );
    // A StatefulSet's pod: made again under the same name, with a new uid.
    let db_uid = pods.get("db-0").await.unwrap().metadata.uid.unwrap();
    let recreated = tether_plain(&["recreate", "db-0", "-n", &ns]);
    assert!(recreated.status.success(), "{}", all_output(&recreated));
    assert!(
        stdout(&recreated).contains("its StatefulSet db made db-0"),
        "{}",
        stdout(&recreated)
    );
    let after = live(pods.list(&ListParams::default()).await.unwrap().items);
    assert!(
        after
            .iter()
            .all(|(_, uid)| uid != web_uid && *uid != db_uid),
        "{after:?}"
    );
    assert!(after.iter().any(|(name, _)| name == "db-0"), "{after:?}");
    // The other web pod is left alone.
    let other = before
        .iter()
        .find(|(n, _)| n.starts_with("web-") && n != web)
        .unwrap();
    assert!(after.contains(other), "{after:?}");
}
