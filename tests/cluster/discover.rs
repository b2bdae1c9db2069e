//! `tether discover` as an operator runs it: workloads made with kubectl in a test
//! namespace (the node simulator runs their pods and gives them IPs), models written
//! to a real Git repository and read back with the `git` CLI in a fresh clone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::harness::{Running, cluster};
use crate::reconcile::{Repo, git, setup, stdout, tether};

/// kubectl (the control plane's own build) for the test cluster.
pub fn kubectl_command() -> Command {
    kubectl_for(cluster().kubeconfig())
}

/// kubectl for the control plane of `kubeconfig`.
pub fn kubectl_for(kubeconfig: &Path) -> Command {
    let mut command = Command::new(tether_testkit::cluster::binaries().join("kubectl"));
    command.arg("--kubeconfig").arg(kubeconfig);
    command
}

/// Runs kubectl against the test cluster; it must succeed.
pub fn kubectl(args: &[&str]) -> Output {
    let output = kubectl_command().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn kubectl_apply(namespace: &str, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, yaml).unwrap();
    kubectl(&["-n", namespace, "apply", "-f", file.to_str().unwrap()]);
}

/// The namespace's pods once exactly `count` of them run with an IP (and none is
/// being deleted): name → IP.
pub(crate) async fn running_pods(
    client: &Client,
    namespace: &str,
    count: usize,
) -> BTreeMap<String, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let pods: BTreeMap<String, String> = list
            .items
            .iter()
            .filter_map(|p| {
                let ip = p.status.as_ref()?.pod_ip.clone()?;
                Some((p.metadata.name.clone()?, ip))
            })
            .collect();
        if list.items.len() == count && pods.len() == count {
            return pods;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{namespace} has {} pods, {} with an IP; waited for {count}",
            list.items.len(),
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A bare repository whose `main` holds the user's models, and the URL to reach it.
pub(crate) fn remote_with_models(repo: &Repo, models: &str) -> String {
    let work = repo.path().join("seed");
    std::fs::create_dir_all(work.join("models")).unwrap();
    std::fs::write(work.join("models/base.yaml"), models).unwrap();
    git(repo.path(), &["init", "-q", "seed"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "models"]);
    git(
        repo.path(),
        &["clone", "-q", "--bare", "seed", "remote.git"],
    );
    format!("file://{}", repo.path().join("remote.git").display())
}

/// A fresh clone of `url` with the `git` CLI: the files a reviewer would see.
pub(crate) fn fresh_clone(repo: &Repo, url: &str) -> PathBuf {
    let dir = repo.path().join(format!("clone-{}", rand_name()));
    git(repo.path(), &["clone", "-q", url, dir.to_str().unwrap()]);
    dir
}

fn rand_name() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The pod files of a namespace in a checkout: pod name → text.
fn pod_files(checkout: &Path, namespace: &str) -> BTreeMap<String, String> {
    let dir = checkout.join(format!("models/discovered/{namespace}/pods"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_stem().unwrap().to_str().unwrap().to_string();
            (name, read(&p))
        })
        .collect()
}

fn discover(inventory: &str, args: &[&str]) -> String {
    let mut all = vec!["discover"];
    all.extend_from_slice(args);
    let output = tether(inventory, &all);
    assert!(
        output.status.success(),
        "tether discover failed:\n{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(&output)
}

const BASE: &str = "kind: KubernetesService\nname: kubernetes\n";

/// `discover` arguments to commit to `url`'s main and push, for one namespace.
fn push_args(url: &str, namespace: &str, cache: &Path) -> Vec<String> {
    [
        "--repo",
        url,
        "--branch",
        "main",
        "--push",
        "-n",
        namespace,
        "--cache-dir",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([cache.display().to_string(), "models".to_string()])
    .collect()
}

fn discover_pushing(inventory: &str, url: &str, namespace: &str, cache: &Path) -> String {
    let args = push_args(url, namespace, cache);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    discover(inventory, &args)
}

#[tokio::test]
async fn a_kubectl_deployment_is_discovered_committed_and_pushed_as_it_scales() {
    let (client, ns, inventory) = setup("discover-deploy").await;
    let repo = Repo::new(&[]);
    let url = remote_with_models(&repo, BASE);
    let cache = repo.path().join("cache");

    create_web_deployment(&ns, 1);
    let pods = running_pods(&client, &ns, 1).await;
    let out = discover_pushing(&inventory, &url, &ns, &cache);
    assert!(out.contains(&format!("discover: +1 pods in {ns}")), "{out}");

    let checkout = fresh_clone(&repo, &url);
    let namespace_file = read(&checkout.join(format!("models/discovered/{ns}/namespace.yaml")));
    assert!(
        namespace_file.contains(&format!(
            "kind: TrustDomain\nname: {ns}\nowner: kubernetes\nxos_managed: false\n"
        )),
        "{namespace_file}"
    );
    assert!(
        namespace_file.contains(&format!(
            "kind: Slice\nname: web\ntrust_domain: {ns}\nprincipal: default\ncontroller_kind: Deployment\ncontroller_replica_count: 1\ndefault_image: nginx:1.25\n"
        )),
        "{namespace_file}"
    );
    let images = read(&checkout.join("models/discovered/images.yaml"));
    assert!(
        images.contains("kind: Image\nname: nginx\ntag: \"1.25\"\n"),
        "{images}"
    );
    let files = pod_files(&checkout, &ns);
    assert_eq!(files.len(), 1);
    for (pod, ip) in &pods {
        let text = &files[pod];
        assert!(text.contains(&format!("kind: KubernetesServiceInstance\nname: {pod}\nslice: web\nimage: nginx:1.25\nowner: kubernetes\nxos_managed: false\npod_ip: \"{ip}\"\n")), "{text}");
    }
    assert_eq!(
        git(&checkout, &["log", "-1", "--format=%an <%ae>|%s"]),
        format!("tether <tether@localhost>|discover: +1 pods in {ns}")
    );
    // Its trailer tells tether's commit from a person's (git reads it as a trailer).
    assert_eq!(
        git(
            &checkout,
            &[
                "log",
                "-1",
                "--format=%(trailers:key=Tether-Discovery,valueonly)"
            ]
        )
        .trim(),
        ns
    );
    // What discovery wrote validates with the user's models.
    let validated = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["validate", checkout.join("models").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(validated.status.success(), "{}", stdout(&validated));

    // Nothing changed: no commit.
    let before = git(&checkout, &["ls-remote", &url, "refs/heads/main"]);
    let out = discover_pushing(&inventory, &url, &ns, &cache);
    assert!(out.starts_with("no changes"), "{out}");
    assert_eq!(
        git(&checkout, &["ls-remote", &url, "refs/heads/main"]),
        before
    );

    let checkout = scale_and_discover(&client, &inventory, &repo, &url, &ns, 3, "+2").await;
    assert!(
        read(&checkout.join(format!("models/discovered/{ns}/namespace.yaml")))
            .contains("controller_replica_count: 3\n")
    );
    scale_and_discover(&client, &inventory, &repo, &url, &ns, 1, "-2").await;

    kubectl(&["-n", &ns, "delete", "deployment", "web"]);
    running_pods(&client, &ns, 0).await;
    let out = discover_pushing(&inventory, &url, &ns, &cache);
    assert!(out.contains(&format!("discover: -1 pods in {ns}")), "{out}");
    let checkout = fresh_clone(&repo, &url);
    assert!(!checkout.join(format!("models/discovered/{ns}")).exists());
    assert!(!checkout.join("models/discovered/images.yaml").exists());
    assert_eq!(read(&checkout.join("models/base.yaml")), BASE);
    assert_eq!(
        git(&checkout, &["log", "--format=%s"]).lines().count(),
        5,
        "models, +1, +2, -2, -1"
    );
}

/// `kubectl create deployment web` in the namespace.
fn create_web_deployment(ns: &str, replicas: usize) {
    let replicas = format!("--replicas={replicas}");
    kubectl(&[
        "-n",
        ns,
        "create",
        "deployment",
        "web",
        "--image=nginx:1.25",
        &replicas,
    ]);
}

/// Scales the namespace's Deployment `web`, waits for its pods, discovers and pushes;
/// checks the commit's subject (`counts` pods) and that a fresh clone holds exactly
/// the running pods' files. Returns the clone.
async fn scale_and_discover(
    client: &Client,
    inventory: &str,
    repo: &Repo,
    url: &str,
    ns: &str,
    replicas: usize,
    counts: &str,
) -> PathBuf {
    kubectl(&[
        "-n",
        ns,
        "scale",
        "deployment",
        "web",
        &format!("--replicas={replicas}"),
    ]);
    let pods = running_pods(client, ns, replicas).await;
    let out = discover_pushing(inventory, url, ns, &repo.path().join("cache"));
    assert!(
        out.contains(&format!("discover: {counts} pods in {ns}")),
        "{out}"
    );
    let checkout = fresh_clone(repo, url);
    assert_eq!(
        pod_files(&checkout, ns).keys().collect::<Vec<_>>(),
        pods.keys().collect::<Vec<_>>()
    );
    checkout
}

#[tokio::test]
async fn each_kind_of_workload_is_discovered_with_its_slice_into_a_local_checkout() {
    let (client, ns, inventory) = setup("discover-kinds").await;
    let repo = Repo::new(&[]);
    let work = repo.path().join("work");
    std::fs::create_dir_all(work.join("models")).unwrap();
    git(repo.path(), &["init", "-q", "work"]);
    std::fs::write(work.join("models/base.yaml"), BASE).unwrap();
    // Repo-wide discovery defaults: the namespace and the author.
    std::fs::write(
        work.join("models/.tether.yaml"),
        format!("discover:\n  namespaces: [{ns}]\n  author: \"Inventory Bot <bot@example.org>\"\n"),
    )
    .unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "models"]);
    // A change of the user's own, not committed: discovery leaves it alone.
    std::fs::write(work.join("models/notes.yaml"), "kind: Site\nname: mysite\n").unwrap();

    kubectl_apply(
        &ns,
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: db}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, labels: {xos_slice_name: mysite_db}}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      serviceAccountName: db
      containers: [{name: db, image: "postgres:16"}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: "fluent/fluent-bit:2.2"}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: "busybox:1.36"}]
---
apiVersion: v1
kind: Pod
metadata: {name: debug}
spec:
  containers: [{name: debug, image: busybox}]
"#,
    );
    let pods = running_pods(&client, &ns, 4).await;
    let models = work.join("models");
    let out = discover(&inventory, &[models.to_str().unwrap()]);
    assert!(out.contains(&format!("discover: +4 pods in {ns}")), "{out}");

    let files = pod_files(&work, &ns);
    assert_eq!(files.len(), 4, "{files:?}");
    let slice_of = |prefix: &str| -> String {
        let (_, text) = files
            .iter()
            .find(|(name, _)| name.starts_with(prefix))
            .unwrap_or_else(|| panic!("no pod {prefix}* in {files:?}"));
        text.lines()
            .find_map(|l| l.strip_prefix("slice: "))
            .unwrap()
            .to_string()
    };
    assert_eq!(slice_of("db-0"), "mysite_db");
    assert_eq!(slice_of("agent-"), "agent");
    assert_eq!(slice_of("migrate-"), "migrate");
    assert_eq!(slice_of("debug"), ns);
    let namespace_file = read(&models.join(format!("discovered/{ns}/namespace.yaml")));
    for expected in [
        format!("kind: Principal\nname: db\ntrust_domain: {ns}\n"),
        format!(
            "kind: Slice\nname: mysite_db\ntrust_domain: {ns}\nprincipal: db\ncontroller_kind: StatefulSet\ncontroller_replica_count: 1\n"
        ),
        format!(
            "kind: Slice\nname: agent\ntrust_domain: {ns}\nprincipal: default\ncontroller_kind: DaemonSet\ndefault_image: fluent/fluent-bit:2.2\n"
        ),
        format!(
            "kind: Slice\nname: migrate\ntrust_domain: {ns}\nprincipal: default\ncontroller_kind: Job\ncontroller_replica_count: 1\n"
        ),
        format!(
            "kind: Slice\nname: {ns}\ntrust_domain: {ns}\ndescription: pods without a controller in {ns}\n"
        ),
    ] {
        assert!(
            namespace_file.contains(&expected),
            "{expected}\nnot in\n{namespace_file}"
        );
    }
    for (pod, ip) in &pods {
        assert!(files[pod].contains(&format!("pod_ip: \"{ip}\"")));
    }
    // Committed on the checked-out branch; the working tree shows the files and only
    // the user's own change is left uncommitted.
    assert_eq!(
        git(&work, &["log", "-1", "--format=%an <%ae>|%s"]),
        format!("Inventory Bot <bot@example.org>|discover: +4 pods in {ns}")
    );
    assert_eq!(
        git(&work, &["status", "--porcelain"]),
        "?? models/notes.yaml"
    );
    assert_eq!(
        git(&work, &["show", "HEAD:models/base.yaml"]),
        BASE.trim_end()
    );
}

#[tokio::test]
async fn pods_that_tether_applied_are_not_discovered_again() {
    let (client, ns, inventory) = setup("discover-own").await;
    let repo = Repo::new(&[]);
    let work = repo.path().join("work");
    std::fs::create_dir_all(work.join("models")).unwrap();
    git(repo.path(), &["init", "-q", "work"]);
    let models = format!(
        "{BASE}---\nkind: TrustDomain\nname: {ns}\n---\nkind: Image\nname: nginx\ntag: \"1.25\"\n\
         ---\nkind: Slice\nname: frontend\ntrust_domain: {ns}\ncontroller_kind: Deployment\n\
         controller_replica_count: 2\ndefault_image: nginx:1.25\n\
         ---\nkind: Slice\nname: tools\ntrust_domain: {ns}\n\
         ---\nkind: KubernetesServiceInstance\nname: toolbox\nslice: tools\nimage: nginx:1.25\n"
    );
    std::fs::write(work.join("models/base.yaml"), &models).unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "models"]);
    let models_dir = work.join("models");
    let models_dir = models_dir.to_str().unwrap();
    let applied = tether(&inventory, &["apply", models_dir]);
    assert!(applied.status.success(), "{}", stdout(&applied));
    let pods = running_pods(&client, &ns, 3).await;

    let out = discover(&inventory, &["-n", &ns, models_dir]);
    assert!(out.contains(&format!("discover: +2 pods in {ns}")), "{out}");
    let files = pod_files(&work, &ns);
    let frontend: Vec<&String> = pods.keys().filter(|p| p.starts_with("frontend-")).collect();
    assert_eq!(files.keys().collect::<Vec<_>>(), frontend);
    for text in files.values() {
        assert!(text.contains("\nslice: frontend\n"), "{text}");
    }
    // The user's models describe the namespace and the slice: no second one.
    assert!(
        !work
            .join(format!("models/discovered/{ns}/namespace.yaml"))
            .exists()
    );
    assert!(!work.join("models/discovered/images.yaml").exists());
    // And the next apply neither applies nor prunes anything for them.
    let diff = tether(&inventory, &["diff", models_dir]);
    assert_eq!(diff.status.code(), Some(0), "{}", stdout(&diff));
}

/// A bare repository served by `git daemon` whose pre-receive hook lets another
/// client's commit land while the first push is being received, so that push loses
/// the race exactly once.
struct RacingRemote {
    _daemon: crate::daemon::GitDaemon,
    url: String,
}

fn racing_remote(repo: &Repo) -> RacingRemote {
    remote_with_models(repo, BASE);
    let remote = repo.path().join("remote.git");
    // The other client: a clone with a commit ready to land.
    git(
        repo.path(),
        &["clone", "-q", remote.to_str().unwrap(), "other"],
    );
    let other = repo.path().join("other");
    std::fs::write(other.join("models/site.yaml"), "kind: Site\nname: mysite\n").unwrap();
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-q", "-m", "add a site"]);
    let hook = remote.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n\
             if [ ! -e '{marker}' ]; then\n\
               touch '{marker}'\n\
               env -u GIT_DIR -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \
               git -C '{other}' push -q origin main >&2\n\
             fi\n",
            marker = repo.path().join("raced").display(),
            other = other.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let daemon = crate::daemon::GitDaemon::serve(repo.path(), &repo.path().join("git-daemon.log"));
    RacingRemote {
        url: format!("git://127.0.0.1:{}/remote.git", daemon.port),
        _daemon: daemon,
    }
}

#[tokio::test]
async fn a_push_that_loses_a_race_is_rebased_and_both_commits_reach_the_remote() {
    let (client, ns, inventory) = setup("discover-race").await;
    let repo = Repo::new(&[]);
    let remote = racing_remote(&repo);
    kubectl(&["-n", &ns, "run", "solo", "--image=busybox:1.36"]);
    running_pods(&client, &ns, 1).await;
    let cache = repo.path().join("cache");
    let out = discover_pushing(&inventory, &remote.url, &ns, &cache);
    assert!(out.contains("pushed"), "{out}");
    assert!(
        repo.path().join("raced").exists(),
        "the race did not happen"
    );
    let checkout = fresh_clone(&repo, &remote.url);
    assert_eq!(
        git(&checkout, &["log", "--format=%s"]),
        format!("discover: +1 pods in {ns}\nadd a site\nmodels")
    );
    assert_eq!(
        read(&checkout.join("models/site.yaml")),
        "kind: Site\nname: mysite\n"
    );
    assert_eq!(pod_files(&checkout, &ns).len(), 1);
}

/// The pod files on the remote's `main`, read with the `git` CLI.
fn remote_pods(remote: &Path, namespace: &str) -> Vec<String> {
    let listing = git(
        remote,
        &[
            "ls-tree",
            "--name-only",
            "main",
            &format!("models/discovered/{namespace}/pods/"),
        ],
    );
    listing
        .lines()
        .filter_map(|l| l.rsplit('/').next()?.strip_suffix(".yaml"))
        .map(str::to_string)
        .collect()
}

async fn remote_pods_become(remote: &Path, namespace: &str, pods: &BTreeMap<String, String>) {
    let expected: Vec<&String> = pods.keys().collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let actual = remote_pods(remote, namespace);
        if actual.iter().collect::<Vec<_>>() == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "remote has {actual:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn watch_batches_a_rollout_into_few_commits_and_a_killed_watch_converges_on_restart() {
    let (client, ns, inventory) = setup("discover-watch").await;
    let repo = Repo::new(&[]);
    let url = remote_with_models(&repo, BASE);
    let remote = repo.path().join("remote.git");
    let cache = repo.path().join("cache");
    // Pod events from the same process, as JSON lines.
    let events = repo.path().join("events.jsonl");
    let outbox = repo.path().join("outbox");
    let watch = || {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["discover", "--watch", "--debounce", "1s"])
            .args(push_args(&url, &ns, &cache))
            .arg("--events-jsonl")
            .arg(&events)
            .arg("--outbox")
            .arg(&outbox)
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .args(["--inventory-name", &inventory])
            .stdout(std::process::Stdio::null())
            .spawn()
            .map(Running)
            .unwrap()
    };
    let discover_commits = || {
        git(&remote, &["log", "--format=%s", "main"])
            .lines()
            .filter(|l| l.starts_with("discover:"))
            .count()
    };

    let running = watch();
    create_web_deployment(&ns, 8);
    let pods = running_pods(&client, &ns, 8).await;
    remote_pods_become(&remote, &ns, &pods).await;
    // Eight pods appearing and getting IPs one by one: a handful of commits, not 16.
    let commits = discover_commits();
    assert!((1..=5).contains(&commits), "{commits} commits");

    // Killed without warning; the cluster changes while it is down.
    drop(running);
    kubectl(&["-n", &ns, "scale", "deployment", "web", "--replicas=2"]);
    let pods = running_pods(&client, &ns, 2).await;
    let running = watch();
    remote_pods_become(&remote, &ns, &pods).await;
    drop(running);

    // The repo is what a single discovery of the cluster writes: nothing left to do.
    let out = discover_pushing(&inventory, &url, &ns, &cache);
    assert!(out.starts_with("no changes"), "{out}");
    let checkout = fresh_clone(&repo, &url);
    assert_eq!(
        pod_files(&checkout, &ns).keys().collect::<Vec<_>>(),
        pods.keys().collect::<Vec<_>>()
    );

    // Every pod's creation was published, and the six scaled away while the watch
    // was down were told as deleted when it came back.
    let published = read(&events);
    // Distinct pods per status: delivery is at least once, a kill may repeat one.
    let count = |status: &str| {
        published
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["status"] == status)
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert_eq!(count("created"), 8, "{published}");
    assert_eq!(count("deleted"), 6, "{published}");
}
