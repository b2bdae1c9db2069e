//! `tether diff` and `tether apply` as a user runs them, against the local control
//! plane: each test has its own namespace (its trust domain) and its own inventory.

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::harness::cluster;

pub use tether_testkit::git::git;

/// A models repo in a temporary directory, edited between runs.
pub struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
        };
        for (name, text) in files {
            repo.write(name, text);
        }
        repo
    }

    /// Writes `name` (a path relative to the repo, its directories made as needed).
    pub fn write(&self, name: &str, text: &str) {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    /// Removes `name`, a file or a directory with all it holds.
    pub fn remove(&self, name: &str) {
        let path = self.dir.path().join(name);
        if path.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        } else {
            std::fs::remove_file(path).unwrap();
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Runs tether against the test cluster with the test's inventory.
pub fn tether(inventory: &str, args: &[&str]) -> Output {
    tether_command(inventory, args).output().unwrap()
}

/// tether against the test cluster with the test's inventory, to be run.
pub fn tether_command(inventory: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .args(["--inventory-name", inventory])
        .env("TETHER_COLOR", "never");
    command
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub fn all_output(output: &Output) -> String {
    format!(
        "{}{}",
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A client, a fresh namespace for the test, and an inventory of its own.
pub async fn setup(test: &str) -> (Client, String, String) {
    let client = cluster().client().await;
    let namespace = crate::harness::fresh_namespace(&client, test).await;
    let inventory = format!("inv-{namespace}");
    (client, namespace, inventory)
}

pub fn base(namespace: &str) -> String {
    format!(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {namespace}\n"
    )
}

pub fn config_map(name: &str, namespace: &str, value: &str) -> String {
    format!(
        "kind: KubernetesConfigMap\nname: {name}\ntrust_domain: {namespace}\ndata:\n  key: \"{value}\"\n"
    )
}

pub async fn live_config_map(client: &Client, namespace: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()
}

/// The `key` entry of a live ConfigMap.
async fn live_value_of_key(client: &Client, namespace: &str, name: &str) -> String {
    let config_map = live_config_map(client, namespace, name)
        .await
        .expect("the ConfigMap exists");
    config_map
        .data
        .unwrap_or_default()
        .remove("key")
        .unwrap_or_default()
}

#[tokio::test]
async fn an_edited_model_shows_exactly_that_change_in_every_format() {
    let (_, ns, inventory) = setup("edit").await;
    let slice = |replicas: u32| {
        format!(
            "kind: Image\nname: nginx\ntag: \"1.25\"\n---\nkind: Slice\nname: web\ntrust_domain: {ns}\n\
             controller_kind: Deployment\ncontroller_replica_count: {replicas}\ndefault_image: nginx\n"
        )
    };
    let repo = Repo::new(&[("base.yaml", &base(&ns)), ("web.yaml", &slice(1))]);
    let path = repo.path().to_str().unwrap();
    let first = tether(&inventory, &["apply", path]);
    assert_eq!(first.status.code(), Some(0), "{}", all_output(&first));
    // The namespace exists already (the test made it): tether adds its labels.
    assert_eq!(
        stdout(&first),
        "1 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n"
    );

    repo.write("web.yaml", &slice(2));
    let text = tether(&inventory, &["diff", path]);
    assert_eq!(
        text.status.code(),
        Some(1),
        "differences exit 1: {}",
        all_output(&text)
    );
    let text = stdout(&text);
    assert!(
        text.contains(&format!(
            "\nupdate Deployment {ns}/web (Slice/web, web.yaml)\n"
        )),
        "{text}"
    );
    let changed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  -") || l.starts_with("  +"))
        .collect();
    assert_eq!(
        changed,
        [
            "  --- live",
            "  +++ planned",
            "  -  replicas: 1",
            "  +  replicas: 2"
        ],
        "{text}"
    );
    assert!(
        text.ends_with("0 to create, 1 to update, 0 to delete, 0 in conflict, 1 unchanged\n"),
        "{text}"
    );

    let markdown = stdout(&tether(&inventory, &["diff", path, "-o", "markdown"]));
    assert!(
        markdown.contains("| Deployment | 0 | 1 | 0 | 0 |"),
        "{markdown}"
    );
    assert!(
        markdown.contains(&format!(
            "<details><summary><b>update</b> Deployment {ns}/web"
        )),
        "{markdown}"
    );
    assert!(
        markdown.contains("-  replicas: 1\n+  replicas: 2\n"),
        "{markdown}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&tether(&inventory, &["diff", path, "-o", "json"]))).unwrap();
    assert_eq!(json["schema"], "tether.dev/diff/v1");
    assert_eq!(
        json["summary"],
        serde_json::json!({"create": 0, "update": 1, "delete": 0, "conflict": 0, "unchanged": 1, "error": 0, "release": 0, "replace": 0, "removeHost": 0, "absent": 0, "skip": 0})
    );
    let update = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["action"] == "update")
        .unwrap();
    assert_eq!(
        (
            update["kind"].as_str(),
            update["namespace"].as_str(),
            update["name"].as_str()
        ),
        (Some("Deployment"), Some(ns.as_str()), Some("web"))
    );
    assert!(
        update["diff"]
            .as_str()
            .unwrap()
            .contains("-  replicas: 1\n+  replicas: 2\n")
    );

    let second = tether(&inventory, &["apply", path]);
    assert_eq!(
        stdout(&second),
        "0 created, 1 configured, 1 unchanged, 0 pruned, 0 failed\n"
    );
    let after = tether(&inventory, &["diff", path]);
    assert_eq!(after.status.code(), Some(0), "{}", all_output(&after));
}

#[tokio::test]
async fn prune_deletes_only_what_tether_applied_and_no_longer_renders() {
    let (client, ns, inventory) = setup("prune").await;
    let resource = format!(
        "kind: KubernetesResourceInstance\nname: extra\nresource_definition: |\n  apiVersion: v1\n  kind: ConfigMap\n  \
         metadata:\n    name: from-resource\n    namespace: {ns}\n  data:\n    a: \"1\"\n"
    );
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("keep.yaml", &config_map("keep", &ns, "1")),
        ("gone.yaml", &config_map("gone", &ns, "1")),
        ("resource.yaml", &resource),
    ]);
    let path = repo.path().to_str().unwrap();
    assert_eq!(tether(&inventory, &["apply", path]).status.code(), Some(0));
    assert!(
        live_config_map(&client, &ns, "from-resource")
            .await
            .is_some(),
        "resource instance objects are applied"
    );

    // Resource instance objects update like any other.
    repo.write("resource.yaml", &resource.replace("a: \"1\"", "a: \"2\""));
    assert_eq!(tether(&inventory, &["apply", path]).status.code(), Some(0));
    let updated = live_config_map(&client, &ns, "from-resource")
        .await
        .unwrap();
    assert_eq!(updated.data.unwrap()["a"], "2");

    // An object made by hand, with tether's labels copied onto it.
    let applyset = tether_core::ownership::Inventory {
        name: inventory.clone(),
        namespace: "default".into(),
    }
    .applyset_id();
    let mut copied = ConfigMap::default();
    copied.metadata.name = Some("hand-made".into());
    copied.metadata.labels = Some(
        [
            (
                "app.kubernetes.io/managed-by".to_string(),
                "tether".to_string(),
            ),
            ("applyset.kubernetes.io/part-of".to_string(), applyset),
        ]
        .into(),
    );
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &copied)
        .await
        .unwrap();

    repo.remove("gone.yaml");
    repo.remove("resource.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!("delete (with --prune) ConfigMap {ns}/gone")),
        "{diff}"
    );
    assert!(
        diff.contains(&format!(
            "delete (with --prune) ConfigMap {ns}/from-resource"
        )),
        "{diff}"
    );
    assert!(!diff.contains("hand-made"), "{diff}");

    let without_prune = tether(&inventory, &["apply", path]);
    assert!(
        stdout(&without_prune).contains("2 objects whose model is gone are left in place"),
        "{}",
        all_output(&without_prune)
    );
    assert!(live_config_map(&client, &ns, "gone").await.is_some());

    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert_eq!(
        stdout(&pruned),
        "0 created, 0 configured, 2 unchanged, 2 pruned, 0 failed\n"
    );
    assert!(live_config_map(&client, &ns, "gone").await.is_none());
    assert!(
        live_config_map(&client, &ns, "from-resource")
            .await
            .is_none()
    );
    assert!(live_config_map(&client, &ns, "keep").await.is_some());
    assert!(
        live_config_map(&client, &ns, "hand-made").await.is_some(),
        "never delete what tether did not apply"
    );

    // A source without models never prunes: a prune of it is refused, loudly.
    let empty = Repo::new(&[]);
    let nothing = tether(
        &inventory,
        &["apply", "--prune", empty.path().to_str().unwrap()],
    );
    assert_eq!(nothing.status.code(), Some(2), "{}", all_output(&nothing));
    assert!(
        all_output(&nothing).contains("the source renders no object"),
        "{}",
        all_output(&nothing)
    );
    assert!(
        live_config_map(&client, &ns, "keep").await.is_some(),
        "an empty source deleted objects"
    );
}

#[tokio::test]
async fn fields_owned_by_another_manager_are_conflicts_until_forced() {
    let (client, ns, inventory) = setup("conflict").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("shared", &ns, "from-git")),
    ]);
    let path = repo.path().to_str().unwrap();
    assert_eq!(tether(&inventory, &["apply", path]).status.code(), Some(0));

    // Helm takes the field.
    let helm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": ns}, "data": {"key": "from-helm"}});
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    api.patch(
        "shared",
        &PatchParams::apply("helm").force(),
        &Patch::Apply(&helm),
    )
    .await
    .unwrap();

    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(1));
    let text = stdout(&diff);
    assert!(
        text.contains(&format!("conflict ConfigMap {ns}/shared")),
        "{text}"
    );
    assert!(text.contains("field .data.key is owned by helm"), "{text}");
    assert!(
        text.contains("  -  key: from-helm\n  +  key: from-git\n"),
        "what forcing would change: {text}"
    );

    let refused = tether(&inventory, &["apply", path]);
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    assert!(
        stdout(&refused).contains("conflict: .data.key (owned by helm); use --force-conflicts"),
        "{}",
        all_output(&refused)
    );
    assert_eq!(live_value_of_key(&client, &ns, "shared").await, "from-helm");

    let forced = tether(&inventory, &["apply", "--force-conflicts", path]);
    assert_eq!(forced.status.code(), Some(0), "{}", all_output(&forced));
    assert_eq!(live_value_of_key(&client, &ns, "shared").await, "from-git");
}

#[tokio::test]
async fn secret_values_never_appear_in_any_output() {
    let (_, ns, inventory) = setup("secret").await;
    let secret = |value: &str| {
        format!(
            "kind: KubernetesSecret\nname: token\ntrust_domain: {ns}\ndata:\n  password: {value}\n"
        )
    };
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("secret.yaml", &secret("first-Plaintext-1")),
    ]);
    let path = repo.path().to_str().unwrap();
    let mut outputs = vec![tether(&inventory, &["--log-level", "trace", "diff", path])];
    outputs.push(tether(&inventory, &["--log-level", "trace", "apply", path]));
    repo.write("secret.yaml", &secret("second-Plaintext-2"));
    for format in ["text", "markdown", "json"] {
        outputs.push(tether(
            &inventory,
            &["--log-level", "trace", "diff", path, "-o", format],
        ));
    }
    outputs.push(tether(&inventory, &["apply", "--dry-run", path]));
    outputs.push(tether(&inventory, &["--log-level", "trace", "apply", path]));
    repo.remove("secret.yaml");
    outputs.push(tether(&inventory, &["diff", path]));
    outputs.push(tether(
        &inventory,
        &[
            "--log-format",
            "json",
            "--log-level",
            "trace",
            "apply",
            "--prune",
            path,
        ],
    ));
    use base64::Engine as _;
    let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    for output in &outputs {
        let text = all_output(output);
        for secret in ["first-Plaintext-1", "second-Plaintext-2"] {
            assert!(
                !text.contains(secret) && !text.contains(&encode(secret)),
                "a secret value was printed:\n{text}"
            );
        }
    }
    let update = stdout(&outputs[2]);
    assert!(
        update.contains("-  password: \"*** (before)\"\n  +  password: \"*** (after)\""),
        "the change shows, masked:\n{update}"
    );
}

#[tokio::test]
async fn a_git_repository_is_reconciled_at_the_commit_its_reference_names() {
    let (client, ns, inventory) = setup("git").await;
    let repo = Repo::new(&[]);
    let work = repo.path().join("work");
    std::fs::create_dir_all(work.join("models")).unwrap();
    git(repo.path(), &["init", "-q", "work"]);
    std::fs::write(work.join("models/base.yaml"), base(&ns)).unwrap();
    std::fs::write(
        work.join("models/cm.yaml"),
        config_map("settings", &ns, "v1"),
    )
    .unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "v1"]);
    git(&work, &["tag", "release-1"]);
    let v1 = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(
        work.join("models/cm.yaml"),
        config_map("settings", &ns, "v2"),
    )
    .unwrap();
    git(&work, &["commit", "-q", "-am", "v2"]);
    let v2 = git(&work, &["rev-parse", "HEAD"]);
    git(
        repo.path(),
        &["clone", "-q", "--bare", "work", "remote.git"],
    );
    let url = format!("file://{}", repo.path().join("remote.git").display());
    let cache = repo.path().join("cache");
    let cache = cache.to_str().unwrap();

    let applied = tether(
        &inventory,
        &[
            "apply",
            "--repo",
            &url,
            "--ref",
            "release-1",
            "--cache-dir",
            cache,
            "models",
        ],
    );
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    assert_eq!(live_value_of_key(&client, &ns, "settings").await, "v1");
    let record = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get(&format!(
            "{}{inventory}",
            tether_core::ownership::RECORD_PREFIX
        ))
        .await
        .unwrap();
    assert_eq!(
        record.data.unwrap()["commit"],
        v1,
        "the inventory records the commit"
    );

    let diff = tether(
        &inventory,
        &["diff", "--repo", &url, "--cache-dir", cache, "models"],
    );
    assert_eq!(diff.status.code(), Some(1));
    let text = stdout(&diff);
    assert!(
        text.starts_with(&format!("tether diff: {url} @ {v2}\n")),
        "the report names the commit: {text}"
    );
    assert!(text.contains("-  key: v1\n  +  key: v2\n"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&tether(
        &inventory,
        &[
            "diff",
            "--repo",
            &url,
            "--cache-dir",
            cache,
            "models",
            "-o",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(json["revision"]["commit"], v2);
}

#[tokio::test]
async fn apply_wait_reports_the_workloads_that_are_not_ready() {
    let (_, ns, inventory) = setup("wait").await;
    let workloads = format!(
        "kind: Image\nname: k8s.gcr.io/pause-amd64\ntag: \"3.0\"\n---\n\
         kind: Slice\nname: web\ntrust_domain: {ns}\ncontroller_kind: Deployment\ncontroller_replica_count: 2\n\
         default_image: k8s.gcr.io/pause-amd64:3.0\n"
    );
    let repo = Repo::new(&[("base.yaml", &base(&ns)), ("web.yaml", &workloads)]);
    let path = repo.path().to_str().unwrap();
    // The node simulator runs the pods: the Deployment becomes available.
    let ready = tether(&inventory, &["apply", "--wait", "--timeout", "60s", path]);
    assert_eq!(ready.status.code(), Some(0), "{}", all_output(&ready));
    assert!(
        stdout(&ready).ends_with("all workloads are ready\n"),
        "{}",
        stdout(&ready)
    );

    // A Job whose pod runs for ten minutes (on the simulated node) is not complete
    // within the timeout.
    let job = format!(
        "kind: KubernetesResourceInstance\nname: forever\nresource_definition: |\n  \
         apiVersion: batch/v1\n  kind: Job\n  metadata:\n    name: forever\n    namespace: {ns}\n  \
         spec:\n    template:\n      metadata:\n        annotations:\n          sim.tether.dev/run-for: 10m\n      \
         spec:\n        restartPolicy: Never\n        containers:\n        - name: main\n          image: k8s.gcr.io/pause-amd64:3.0\n"
    );
    repo.write("job.yaml", &job);
    let waiting = tether(&inventory, &["apply", "--wait", "--timeout", "3s", path]);
    assert_eq!(waiting.status.code(), Some(2), "{}", all_output(&waiting));
    let text = stdout(&waiting);
    assert!(
        text.contains(&format!(
            "not ready after 3s:\n  Job {ns}/forever: 0/1 completions\n"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn a_custom_resource_is_applied_after_its_definition_in_the_same_run() {
    let (client, ns, inventory) = setup("crd").await;
    let definition = "  apiVersion: apiextensions.k8s.io/v1\n  kind: CustomResourceDefinition\n  metadata:\n    \
        name: widgets.example.tether.dev\n  spec:\n    group: example.tether.dev\n    scope: Namespaced\n    \
        names: {plural: widgets, singular: widget, kind: Widget}\n    versions:\n      - name: v1\n        \
        served: true\n        storage: true\n        schema:\n          openAPIV3Schema:\n            type: object\n            \
        properties:\n              spec:\n                type: object\n                properties:\n                  \
        size: {type: integer}\n";
    let widget = format!(
        "  ---\n  apiVersion: example.tether.dev/v1\n  kind: Widget\n  metadata:\n    name: small\n    namespace: {ns}\n  spec:\n    size: 1\n"
    );
    let model = |body: &str| {
        format!("kind: KubernetesResourceInstance\nname: widgets\nresource_definition: |\n{body}")
    };
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("widgets.yaml", &model(&format!("{definition}{widget}"))),
    ]);
    let path = repo.path().to_str().unwrap();

    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!("create Widget {ns}/small")),
        "{diff}"
    );
    let first = tether(&inventory, &["apply", path]);
    assert_eq!(first.status.code(), Some(0), "{}", all_output(&first));
    assert_eq!(
        stdout(&first),
        "2 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n"
    );
    let second = tether(&inventory, &["apply", path]);
    assert_eq!(
        stdout(&second),
        "0 created, 0 configured, 3 unchanged, 0 pruned, 0 failed\n"
    );

    // Prune removes the custom resource whose model is gone, and keeps the definition.
    repo.write("widgets.yaml", &model(definition));
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(
        stdout(&pruned),
        "0 created, 0 configured, 2 unchanged, 1 pruned, 0 failed\n",
        "{}",
        all_output(&pruned)
    );
    let widgets = kube::api::ApiResource {
        group: "example.tether.dev".into(),
        version: "v1".into(),
        api_version: "example.tether.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), &ns, &widgets);
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        api.get_opt("small").await.unwrap().is_none()
    })
    .await;
}

/// A current API server answers `storage is (re)initializing` (429) while a new
/// resource's watch cache fills, and the next command is often right then: a diff
/// straight after the apply that created the definition waits it out instead of
/// failing. A new definition each time, twenty times in a row.
#[tokio::test]
async fn a_diff_right_after_a_new_definition_and_its_objects_waits_out_the_server() {
    let (_client, ns, inventory) = setup("crd-at-once").await;
    for round in 0..20 {
        let group = format!("r{round}.{ns}.tether.dev");
        let definition = format!(
            "  apiVersion: apiextensions.k8s.io/v1\n  kind: CustomResourceDefinition\n  metadata:\n    \
             name: gadgets.{group}\n  spec:\n    group: {group}\n    scope: Namespaced\n    \
             names: {{plural: gadgets, singular: gadget, kind: Gadget}}\n    versions:\n      - name: v1\n        \
             served: true\n        storage: true\n        schema:\n          openAPIV3Schema:\n            \
             type: object\n            x-kubernetes-preserve-unknown-fields: true\n  ---\n  \
             apiVersion: {group}/v1\n  kind: Gadget\n  metadata:\n    name: g\n    namespace: {ns}\n  spec:\n    size: {round}\n"
        );
        // No TrustDomain: the namespace is the test's, and each round an inventory of
        // its own.
        let repo = Repo::new(&[
            ("base.yaml", "kind: KubernetesService\nname: kubernetes\n"),
            (
                "gadgets.yaml",
                &format!(
                    "kind: KubernetesResourceInstance\nname: gadgets\nresource_definition: |\n{definition}"
                ),
            ),
        ]);
        let path = repo.path().to_str().unwrap();
        let applied = tether(&format!("{inventory}-{round}"), &["apply", path]);
        assert_eq!(
            applied.status.code(),
            Some(0),
            "round {round}: {}",
            all_output(&applied)
        );
        let diff = tether(&format!("{inventory}-{round}"), &["diff", path]);
        assert_eq!(
            diff.status.code(),
            Some(0),
            "round {round}: {}",
            all_output(&diff)
        );
        assert!(
            stdout(&diff)
                .ends_with("0 to create, 0 to update, 0 to delete, 0 in conflict, 2 unchanged\n"),
            "round {round}: {}",
            all_output(&diff)
        );
        crate::discover::kubectl(&["delete", "crd", &format!("gadgets.{group}"), "--wait=false"]);
    }
}

#[tokio::test]
async fn a_large_apply_piped_reports_its_progress_in_plain_lines() {
    let (client, ns, inventory) = setup("apply-progress").await;
    let mut models = base(&ns);
    for i in 0..50 {
        models.push_str(&format!(
            "---\n{}",
            config_map(&format!("c-{i}"), &ns, "v1")
        ));
    }
    let repo = Repo::new(&[("models.yaml", &models)]);
    let output = tether(&inventory, &["apply", repo.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", all_output(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("applied ") && l.ends_with(" objects"))
        .collect();
    // 51 objects (the namespace is adopted): a line at each tenth, the last at the end.
    assert_eq!(lines.len(), 10, "{stderr}");
    assert_eq!(lines.last(), Some(&"applied 51/51 objects"), "{stderr}");
    assert!(live_config_map(&client, &ns, "c-49").await.is_some());
}

#[tokio::test]
async fn apply_wait_piped_names_the_workloads_it_still_waits_for() {
    let (client, ns, inventory) = setup("apply-wait").await;
    // The simulated node runs this Job's pod for three seconds.
    let job = format!(
        "---\nkind: KubernetesResourceInstance\nname: migrate\nresource_definition: |\n  \
         apiVersion: batch/v1\n  kind: Job\n  metadata:\n    name: migrate\n    namespace: {ns}\n  \
         spec:\n    template:\n      metadata:\n        annotations:\n          sim.tether.dev/run-for: 3s\n      \
         spec:\n        restartPolicy: Never\n        containers:\n        - name: migrate\n          image: busybox:1.36\n"
    );
    let repo = Repo::new(&[("models.yaml", &format!("{}{job}", base(&ns)))]);
    let output = tether(
        &inventory,
        &["apply", "--wait", repo.path().to_str().unwrap()],
    );
    assert!(output.status.success(), "{}", all_output(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let waiting: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("waiting for "))
        .collect();
    assert_eq!(
        waiting.first().copied(),
        Some(format!("waiting for 1 of 1 workloads: Job {ns}/migrate (0/1 completions)").as_str()),
        "{stderr}"
    );
    // The same set of objects is not repeated every second.
    assert!(waiting.len() <= 2, "{stderr}");
    assert!(stdout(&output).ends_with("all workloads are ready\n"));
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client, &ns);
    let succeeded = jobs.get("migrate").await.unwrap().status.unwrap().succeeded;
    assert_eq!(succeeded, Some(1));
}

#[tokio::test]
async fn objects_listed_over_several_pages_are_planned_and_pruned_whole() {
    // More objects than a page of the list (500): the plan reads every page.
    let (client, ns, inventory) = setup("pages").await;
    let mut files = vec![("base.yaml".to_string(), base(&ns))];
    for file in 0..12 {
        let text = (0..100)
            .map(|i| config_map(&format!("cm-{file}-{i}"), &ns, "v1"))
            .collect::<Vec<_>>()
            .join("---\n");
        files.push((format!("cms-{file}.yaml"), text));
    }
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let repo = Repo::new(&borrowed);
    let path = repo.path().to_str().unwrap();
    let first = tether(&inventory, &["apply", path]);
    assert_eq!(first.status.code(), Some(0), "{}", all_output(&first));
    let unchanged = tether(&inventory, &["diff", path]);
    assert_eq!(
        unchanged.status.code(),
        Some(0),
        "every page was read: nothing to change\n{}",
        all_output(&unchanged)
    );

    // Another hand deletes one object (kubectl), and a file of 100 models goes.
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    api.delete("cm-0-5", &Default::default()).await.unwrap();
    repo.remove("cms-7.yaml");
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert!(
        stdout(&pruned).starts_with("1 created, 0 configured, ")
            && stdout(&pruned).ends_with(", 100 pruned, 0 failed\n"),
        "{}",
        all_output(&pruned)
    );
    let live: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n.starts_with("cm-"))
        .collect();
    assert_eq!(live.len(), 1_100, "{live:?}");
    assert!(live.contains(&"cm-0-5".to_string()), "made again");
    assert!(!live.iter().any(|n| n.starts_with("cm-7-")), "{live:?}");
}

/// Someone takes an object tether applied with kubectl, removing tether's label, and
/// its model is removed: no list finds it as tether's, the read of it before it is
/// forgotten finds it someone else's, so a prune leaves it and the inventory forgets it.
#[tokio::test]
async fn an_object_another_hand_took_by_its_label_is_forgotten_not_pruned() {
    let (client, ns, inventory) = setup("taken").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("keep.yaml", &config_map("keep", &ns, "1")),
        ("taken.yaml", &config_map("taken", &ns, "1")),
    ]);
    let path = repo.path().to_str().unwrap();
    assert_eq!(tether(&inventory, &["apply", path]).status.code(), Some(0));
    crate::daemon::kubectl_ok(&[
        "label",
        "configmap",
        "taken",
        "-n",
        &ns,
        "applyset.kubernetes.io/part-of-",
    ]);
    repo.remove("taken.yaml");
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert_eq!(
        stdout(&pruned),
        "0 created, 0 configured, 2 unchanged, 0 pruned, 0 failed\n"
    );
    assert!(
        live_config_map(&client, &ns, "taken").await.is_some(),
        "an object someone else took was deleted"
    );
    // Forgotten: a diff no longer offers to delete it.
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
    assert!(
        !stdout(&diff).contains("taken"),
        "still tether's: {}",
        stdout(&diff)
    );
}
