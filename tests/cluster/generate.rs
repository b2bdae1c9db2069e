//! Repositories as teams keep them, against the local control plane with the real
//! engines (`scripts/helm-tools`: pinned helm and kubectl with Kustomize): tether's
//! own deploy/ kustomization, `helm create`'s chart beside models, objects Helm or
//! kubectl made first, values changes and pruning, chart hooks, a configMapGenerator
//! overlay, and the daemon following a Git repository of all of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use tether_testkit::tools::helm_tools;

use crate::daemon::{Daemon, Remote, condition, install_crd, kubectl_apply_text, source_yaml};
use crate::harness::{cluster, eventually, repo_root};
use crate::reconcile::{Repo, all_output, base, config_map, setup, stdout, tether_command};

/// The variables that give tether `helm` (the pinned one, or a wrapper of it) and the
/// pinned kubectl for Kustomize.
fn engine_variables(helm: &Path) -> [(&'static str, &Path); 2] {
    [
        ("TETHER_HELM", helm),
        ("TETHER_KUSTOMIZE", helm_tools().kubectl.as_path()),
    ]
}

/// tether against the test cluster with the test's inventory and the pinned engines.
fn tether(inventory: &str, args: &[&str]) -> Output {
    tether_command(inventory, args)
        .envs(helm_tools().env())
        .output()
        .unwrap()
}

pub fn assert_exit(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: {}",
        all_output(output)
    );
}

/// Runs a pinned engine (against the test cluster); its standard output.
fn run_engine(program: &Path, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{} {args:?}: {}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn helm(args: &[&str]) -> String {
    run_engine(&helm_tools().helm, args)
}

/// `helm create NAME` in `dir`: Helm's default chart.
fn helm_create(dir: &Path, name: &str) {
    let output = Command::new(&helm_tools().helm)
        .args(["create", name])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm create: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The objects of a YAML stream as JSON, read by kubectl (no defaults added; those
/// without a namespace placed in `namespace`, as `helm install --namespace` does).
fn objects_of(yaml: &str, namespace: &str) -> Vec<Value> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let json = run_engine(
        &helm_tools().kubectl,
        &[
            "create",
            "--namespace",
            namespace,
            "--dry-run=client",
            "-o",
            "json",
            "-f",
            file.path().to_str().unwrap(),
        ],
    );
    // One JSON document per object, one after another.
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

/// A live object as JSON (its managedFields too), if it exists.
pub fn live(kind: &str, name: &str, namespace: &str) -> Option<Value> {
    let output = crate::discover::kubectl_command()
        .args([
            "get",
            kind,
            name,
            "-n",
            namespace,
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .output()
        .unwrap();
    if !output.status.success() {
        let error = String::from_utf8_lossy(&output.stderr);
        assert!(
            error.contains("NotFound"),
            "kubectl get {kind} {name}: {error}"
        );
        return None;
    }
    Some(serde_json::from_slice(&output.stdout).unwrap())
}

fn uid(object: &Value) -> String {
    object["metadata"]["uid"].as_str().unwrap().to_string()
}

/// `Kind/name` of the objects of `kinds` in `namespace` that match `selector`.
fn listed(kinds: &str, namespace: &str, selector: &str) -> BTreeSet<String> {
    let output =
        crate::daemon::kubectl_ok(&["get", kinds, "-n", namespace, "-l", selector, "-o", "json"]);
    let list: Value = serde_json::from_str(&output).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(kind_and_name)
        .collect()
}

fn kind_and_name(object: &Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The plan lines of `tether diff`'s text: what it would create, update, replace or
/// delete.
fn planned(diff: &Output) -> Vec<String> {
    stdout(diff)
        .lines()
        .filter(|l| {
            ["create ", "update ", "replace ", "delete "]
                .iter()
                .any(|verb| l.starts_with(verb))
        })
        .map(str::to_string)
        .collect()
}

fn hello_chart(namespace: &str, replicas: u32) -> String {
    format!(
        "kind: HelmChart\nname: hello\nchart: hello\ntrust_domain: {namespace}\nvalues:\n  replicaCount: {replicas}\n"
    )
}

fn timestamp(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("no timestamp: {value}"))
}

#[tokio::test]
async fn tethers_own_deploy_directory_installs_in_one_command_and_then_shows_no_changes() {
    // deploy/ makes tether-system and the Source and Cluster CRDs, which the daemon's tests apply
    // too (the same CRD, with kubectl): this inventory adopts it and prunes nothing.
    let deploy = repo_root().join("deploy");
    let deploy = deploy.to_str().unwrap();
    let inventory = "generate-deploy";
    let applied = tether(inventory, &["apply", deploy]);
    assert_exit(&applied, 0, "apply deploy");
    assert!(
        stdout(&applied).ends_with(" 0 pruned, 0 failed\n"),
        "{}",
        all_output(&applied)
    );
    crate::daemon::kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/sources.tether.dev",
        "--timeout=30s",
    ]);
    for (kind, name) in [
        ("statefulset", "tether"),
        ("poddisruptionbudget", "tether"),
        ("serviceaccount", "tether"),
        ("role", "tether-leader-election"),
    ] {
        assert!(
            live(kind, name, "tether-system").is_some(),
            "{kind} tether-system/{name}"
        );
    }
    let diff = tether(inventory, &["diff", deploy]);
    assert_exit(&diff, 0, "diff after apply");
    assert!(
        stdout(&diff)
            .ends_with("0 to create, 0 to update, 0 to delete, 0 in conflict, 14 unchanged\n"),
        "{}",
        stdout(&diff)
    );
}

/// A chart's object as a user compares it with `helm template`: tether's own
/// `app.kubernetes.io/managed-by` label replaces Helm's.
fn without_managed_by(mut object: Value) -> Value {
    if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
        labels.remove("app.kubernetes.io/managed-by");
    }
    object
}

fn is_helm_test(object: &Value) -> bool {
    object["metadata"]["annotations"]["helm.sh/hook"] == "test"
}

#[tokio::test]
async fn helm_creates_chart_beside_a_slice_is_applied_as_helm_template_renders_it() {
    let (_, ns, inventory) = setup("helm-create").await;
    let slice = format!(
        "kind: Image\nname: nginx\ntag: \"1.25\"\n---\nkind: Slice\nname: web\ntrust_domain: {ns}\n\
         controller_kind: Deployment\ndefault_image: nginx\n"
    );
    let repo = Repo::new(&[
        ("models.yaml", &format!("{}---\n{slice}", base(&ns))),
        ("hello.yaml", &hello_chart(&ns, 2)),
    ]);
    helm_create(repo.path(), "hello");
    let path = repo.path().to_str().unwrap();
    assert_exit(&tether(&inventory, &["apply", path]), 0, "apply");

    let chart = repo.path().join("hello");
    let rendered = helm(&[
        "template",
        "hello",
        chart.to_str().unwrap(),
        "--namespace",
        &ns,
        "--kube-version",
        &crate::harness::cluster().release(),
        "--set",
        "replicaCount=2",
    ]);
    let (tests, objects): (Vec<Value>, Vec<Value>) = objects_of(&rendered, &ns)
        .into_iter()
        .partition(is_helm_test);
    assert_eq!(tests.len(), 1, "helm create's chart has a test Pod");
    for test in &tests {
        let name = test["metadata"]["name"].as_str().unwrap();
        assert!(
            live("pod", name, &ns).is_none(),
            "the test Pod {name} is not applied"
        );
    }
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let live = live(kind, name, &ns).unwrap_or_else(|| panic!("{kind} {name} was not applied"));
        assert!(
            crate::is_subset(&without_managed_by(object.clone()), &live),
            "{kind} {name} differs from helm template's:\n{object:#}\nlive:\n{live:#}"
        );
        assert_eq!(
            live["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "tether"
        );
    }
    // Exactly the chart's objects: the release's label on what tether applied.
    let expected: BTreeSet<String> = objects.iter().map(kind_and_name).collect();
    assert_eq!(
        listed(
            "serviceaccounts,services,deployments,pods,configmaps,secrets,jobs",
            &ns,
            "applyset.kubernetes.io/part-of,app.kubernetes.io/instance=hello"
        ),
        expected
    );
    assert_exit(&tether(&inventory, &["diff", path]), 0, "diff after apply");
}

/// A ConfigMap as a plain Kubernetes manifest (a `Manifest` step of tether's).
fn plain_config_map(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:\n  key: value\n"
    )
}

#[tokio::test]
async fn objects_helm_install_and_kubectl_apply_made_are_adopted_and_helms_release_is_left_alone() {
    let (_, ns, inventory) = setup("helm-adopt").await;
    let repo = Repo::new(&[
        ("models.yaml", &base(&ns)),
        ("hello.yaml", &hello_chart(&ns, 2)),
        ("settings.yaml", &plain_config_map("settings", &ns)),
    ]);
    helm_create(repo.path(), "hello");
    let chart = repo.path().join("hello");
    helm(&[
        "install",
        "hello",
        chart.to_str().unwrap(),
        "--namespace",
        &ns,
        "--set",
        "replicaCount=2",
    ]);
    let settings = repo.path().join("settings.yaml");
    run_engine(
        &helm_tools().kubectl,
        &["apply", "-f", settings.to_str().unwrap()],
    );
    let made = [
        ("serviceaccount", "hello"),
        ("service", "hello"),
        ("deployment", "hello"),
        ("configmap", "settings"),
    ];
    let uids_before: Vec<String> = made
        .iter()
        .map(|(kind, name)| uid(&live(kind, name, &ns).unwrap()))
        .collect();
    let release = "sh.helm.release.v1.hello.v1";
    let release_before = live("secret", release, &ns).expect("helm's release Secret");

    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply over helm's and kubectl's objects");
    assert!(
        stdout(&applied).starts_with("0 created, "),
        "{}",
        stdout(&applied)
    );
    assert_exit(&tether(&inventory, &["diff", path]), 0, "diff after apply");

    let uids_after: Vec<String> = made
        .iter()
        .map(|(kind, name)| uid(&live(kind, name, &ns).unwrap()))
        .collect();
    assert_eq!(uids_after, uids_before, "adopted in place, not made again");
    let release_after = live("secret", release, &ns).expect("helm's release Secret is kept");
    assert_eq!(
        release_after["metadata"]["resourceVersion"], release_before["metadata"]["resourceVersion"],
        "helm's release Secret is untouched"
    );
    let status = helm(&["status", "hello", "--namespace", &ns]);
    assert!(status.contains("STATUS: deployed"), "{status}");
}

#[tokio::test]
async fn a_values_change_updates_only_the_deployment_and_a_removed_chart_prunes_only_its_objects() {
    let (_, ns, inventory) = setup("helm-values").await;
    let repo = Repo::new(&[
        ("models.yaml", &base(&ns)),
        ("hello.yaml", &hello_chart(&ns, 1)),
    ]);
    helm_create(repo.path(), "hello");
    let path = repo.path().to_str().unwrap();
    assert_exit(&tether(&inventory, &["apply", path]), 0, "apply");
    // Beside it: a release Helm installed of the same chart, and a ConfigMap of
    // another inventory.
    let chart = repo.path().join("hello");
    helm(&[
        "install",
        "other",
        chart.to_str().unwrap(),
        "--namespace",
        &ns,
    ]);
    let theirs = Repo::new(&[("theirs.yaml", &plain_config_map("theirs", &ns))]);
    let other_inventory = format!("{inventory}-other");
    assert_exit(
        &tether(
            &other_inventory,
            &["apply", theirs.path().to_str().unwrap()],
        ),
        0,
        "the other inventory's apply",
    );

    repo.write("hello.yaml", &hello_chart(&ns, 3));
    let diff = tether(&inventory, &["diff", path]);
    assert_exit(&diff, 1, "diff of a values change");
    assert_eq!(
        planned(&diff),
        [format!(
            "update Deployment {ns}/hello (HelmChart/hello, hello/templates/deployment.yaml)"
        )]
    );
    // `--only HelmChart/hello` takes the chart alone: a plain file's new object is
    // planned without it, and left out with it.
    repo.write("extra.yaml", &plain_config_map("extra", &ns));
    let whole = tether(&inventory, &["diff", path]);
    assert_eq!(planned(&whole).len(), 2, "{}", stdout(&whole));
    // The diff reads a chart as one: its objects together, under the chart's name.
    assert!(
        stdout(&whole).contains(&format!(
            "\n== HelmChart/hello\n\nupdate Deployment {ns}/hello (HelmChart/hello, hello/templates/deployment.yaml)\n"
        )),
        "{}",
        stdout(&whole)
    );
    let only = tether(&inventory, &["diff", "--only", "HelmChart/hello", path]);
    assert_exit(&only, 1, "diff --only HelmChart/hello");
    assert_eq!(
        planned(&only),
        [format!(
            "update Deployment {ns}/hello (HelmChart/hello, hello/templates/deployment.yaml)"
        )]
    );
    repo.remove("extra.yaml");
    let applied = tether(&inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply of a values change");
    assert_eq!(
        stdout(&applied),
        "0 created, 1 configured, 3 unchanged, 0 pruned, 0 failed\n"
    );
    let deployment = live("deployment", "hello", &ns).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 3);

    repo.remove("hello.yaml");
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_exit(&pruned, 0, "apply --prune without the chart");
    assert_eq!(
        stdout(&pruned),
        "0 created, 0 configured, 1 unchanged, 3 pruned, 0 failed\n"
    );
    for kind in ["serviceaccount", "service", "deployment"] {
        assert!(live(kind, "hello", &ns).is_none(), "{kind} hello is pruned");
        assert!(
            live(kind, "other-hello", &ns).is_some(),
            "helm's {kind} other-hello is kept"
        );
    }
    assert!(live("secret", "sh.helm.release.v1.other.v1", &ns).is_some());
    assert!(
        live("configmap", "theirs", &ns).is_some(),
        "another inventory's"
    );
}

/// A chart with a pre-install hook Job (its pod runs three seconds on the simulated
/// node) and a Deployment.
fn hooked_chart() -> [(&'static str, &'static str); 4] {
    [
        (
            "web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 0.1.0\n",
        ),
        ("web/values.yaml", "replicaCount: 1\n"),
        (
            "web/templates/migrate.yaml",
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-migrate\n  \
             annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n    \
             helm.sh/hook-delete-policy: before-hook-creation\nspec:\n  backoffLimit: 0\n  \
             template:\n    metadata:\n      annotations:\n        sim.tether.dev/run-for: 3s\n    \
             spec:\n      restartPolicy: Never\n      containers:\n      - name: migrate\n        \
             image: busybox:1.36\n",
        ),
        (
            "web/templates/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  \
             replicas: {{ .Values.replicaCount }}\n  selector:\n    matchLabels: {app: {{ .Release.Name }}}\n  \
             template:\n    metadata:\n      labels: {app: {{ .Release.Name }}}\n    spec:\n      \
             containers:\n      - name: web\n        image: nginx:1.25\n",
        ),
    ]
}

fn web_chart(namespace: &str, replicas: u32) -> String {
    format!(
        "kind: HelmChart\nname: web\nchart: web\ntrust_domain: {namespace}\nvalues:\n  replicaCount: {replicas}\n"
    )
}

/// The time tether's field manager last wrote `object`.
fn applied_at(object: &Value) -> String {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["manager"]
                .as_str()
                .is_some_and(|m| m.starts_with("tether"))
        })
        .filter_map(|m| m["time"].as_str())
        .max()
        .unwrap_or_else(|| panic!("tether never wrote it: {object:#}"))
        .to_string()
}

#[tokio::test]
async fn a_pre_install_hook_job_completes_before_the_chart_and_runs_again_on_a_values_change() {
    let (_, ns, inventory) = setup("helm-hooks").await;
    let repo = Repo::new(&hooked_chart());
    repo.write("models.yaml", &base(&ns));
    repo.write("web.yaml", &web_chart(&ns, 1));
    let path = repo.path().to_str().unwrap();
    assert_exit(&tether(&inventory, &["apply", path]), 0, "apply");
    let job = live("job", "web-migrate", &ns).expect("the hook Job");
    assert_eq!(job["status"]["succeeded"], 1, "{job:#}");
    let deployment = live("deployment", "web", &ns).expect("the chart's Deployment");
    // RFC 3339 times of one zone compare as text.
    assert!(
        timestamp(&deployment["metadata"]["creationTimestamp"])
            >= timestamp(&job["status"]["completionTime"]),
        "the Deployment was made before the hook Job completed:\n{job:#}\n{deployment:#}"
    );

    repo.write("web.yaml", &web_chart(&ns, 2));
    let diff = tether(&inventory, &["diff", path]);
    assert_exit(&diff, 1, "diff of a values change");
    assert_eq!(
        planned(&diff),
        [
            format!(
                "replace Job {ns}/web-migrate (HelmChart/web:pre-install, web/templates/migrate.yaml)"
            ),
            format!("update Deployment {ns}/web (HelmChart/web, web/templates/deployment.yaml)"),
        ]
    );
    assert_exit(
        &tether(&inventory, &["apply", path]),
        0,
        "apply of a values change",
    );
    let rerun = live("job", "web-migrate", &ns).expect("the hook Job, again");
    assert_ne!(uid(&rerun), uid(&job), "the hook Job is made again");
    assert_eq!(rerun["status"]["succeeded"], 1, "{rerun:#}");
    let deployment = live("deployment", "web", &ns).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert!(
        applied_at(&deployment).as_str() >= timestamp(&rerun["status"]["completionTime"]),
        "the Deployment was updated before the hook ran again:\n{rerun:#}\n{deployment:#}"
    );
    assert_exit(&tether(&inventory, &["diff", path]), 0, "diff after apply");
}

fn overlay(namespace: &str, mode: &str) -> String {
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {namespace}\n\
         resources:\n- ../../base\nconfigMapGenerator:\n- name: settings\n  behavior: merge\n  \
         literals:\n  - mode={mode}\n"
    )
}

/// A base with a Deployment that takes its environment from a generated ConfigMap.
const KUSTOMIZE_BASE: [(&str, &str); 2] = [
    (
        "base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- deployment.yaml\n\
         configMapGenerator:\n- name: settings\n  literals:\n  - greeting=hello\n",
    ),
    (
        "base/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\nspec:\n  selector:\n    \
         matchLabels: {app: shop}\n  template:\n    metadata:\n      labels: {app: shop}\n    spec:\n      \
         containers:\n      - name: shop\n        image: nginx:1.25\n        envFrom:\n        \
         - configMapRef:\n            name: settings\n",
    ),
];

/// The name of the ConfigMap the live Deployment `shop` takes its environment from.
fn settings_of_shop(namespace: &str) -> String {
    let deployment = live("deployment", "shop", namespace).expect("the Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_changed_generator_literal_rolls_the_deployment_and_prunes_the_old_config_map() {
    let (_, ns, inventory) = setup("kustomize-generator").await;
    let repo = Repo::new(&KUSTOMIZE_BASE);
    repo.write("overlays/prod/kustomization.yaml", &overlay(&ns, "prod"));
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply");
    assert_eq!(
        stdout(&applied),
        "2 created, 0 configured, 0 unchanged, 0 pruned, 0 failed\n"
    );
    let first = settings_of_shop(&ns);
    assert!(first.starts_with("settings-"), "{first}");
    let config_map = live("configmap", &first, &ns).expect("the generated ConfigMap");
    assert_eq!(config_map["data"]["mode"], "prod");
    assert_eq!(config_map["data"]["greeting"], "hello");
    let generation = live("deployment", "shop", &ns).unwrap()["metadata"]["generation"].clone();

    repo.write(
        "overlays/prod/kustomization.yaml",
        &overlay(&ns, "production"),
    );
    let applied = tether(&inventory, &["apply", "--prune", path]);
    assert_exit(&applied, 0, "apply --prune of a changed literal");
    assert_eq!(
        stdout(&applied),
        "1 created, 1 configured, 0 unchanged, 1 pruned, 0 failed\n"
    );
    let second = settings_of_shop(&ns);
    assert_ne!(second, first, "a new hash suffix");
    assert_eq!(
        live("configmap", &second, &ns).unwrap()["data"]["mode"],
        "production"
    );
    assert!(
        live("configmap", &first, &ns).is_none(),
        "{first} is pruned"
    );
    let deployment = live("deployment", "shop", &ns).unwrap();
    assert_ne!(
        deployment["metadata"]["generation"], generation,
        "the pod template changed: the Deployment rolls"
    );
    assert_exit(&tether(&inventory, &["diff", path]), 0, "diff after apply");
}

#[tokio::test]
async fn a_chart_that_fails_to_render_applies_nothing_and_names_its_model() {
    let (_, ns, inventory) = setup("helm-broken").await;
    let repo = Repo::new(&hooked_chart());
    repo.write("web/templates/broken.yaml", BROKEN_TEMPLATE);
    repo.write("models.yaml", &base(&ns));
    repo.write("settings.yaml", &config_map("settings", &ns, "v1"));
    repo.write("web.yaml", &web_chart(&ns, 1));
    let path = repo.path().to_str().unwrap();
    let failed = tether(&inventory, &["apply", path]);
    assert_exit(&failed, 2, "apply of a chart that does not render");
    let said = all_output(&failed);
    assert!(said.contains("HelmChart \"web\""), "{said}");
    assert!(said.contains("nil pointer"), "Helm's own words: {said}");
    assert!(
        live("configmap", "settings", &ns).is_none(),
        "nothing applied"
    );
    assert!(live("job", "web-migrate", &ns).is_none(), "nothing applied");
}

/// A template that does not render: it reads a value that is not there.
const BROKEN_TEMPLATE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\ndata:\n  key: {{ .Values.missing.field }}\n";

/// A `helm` that counts its runs (one line each in `runs`) and runs the pinned one.
fn counting_helm(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt as _;
    let runs = dir.join("helm-runs");
    let wrapper = dir.join("helm");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec '{}' \"$@\"\n",
            runs.display(),
            helm_tools().helm.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, runs)
}

fn count_lines(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test]
async fn the_daemon_follows_charts_and_overlays_renders_once_per_commit_and_keeps_the_last_good_one()
 {
    install_crd();
    let (_, ns, _) = setup("generate-daemon").await;
    let models = base(&ns);
    let chart_model = web_chart(&ns, 1);
    let overlay_file = overlay(&ns, "prod");
    let mut files: Vec<(&str, &str)> = hooked_chart().to_vec();
    files.extend(KUSTOMIZE_BASE);
    files.extend([
        ("models.yaml", models.as_str()),
        ("web.yaml", chart_model.as_str()),
        ("overlays/prod/kustomization.yaml", overlay_file.as_str()),
    ]);
    let remote = Remote::new(&files);
    let counter = tempfile::tempdir().unwrap();
    let (helm, runs) = counting_helm(counter.path());
    let daemon = Daemon::start_with_env(
        &["--sources", "--sources-namespace", &ns],
        &engine_variables(&helm),
    );
    kubectl_apply_text(&source_yaml("site", &ns, &remote.url, "  interval: 1s\n"));
    let good = format!("main@sha1:{}", remote.head("main"));
    eventually(Duration::from_secs(60), || async {
        crate::daemon::status(&ns, "site")["lastAppliedRevision"] == good.as_str()
    })
    .await;
    assert_eq!(
        condition(&crate::daemon::status(&ns, "site"), "Ready"),
        Some(("True".into(), "ReconciliationSucceeded".into()))
    );
    assert_eq!(
        live("job", "web-migrate", &ns).unwrap()["status"]["succeeded"],
        1
    );
    assert_eq!(
        live("deployment", "web", &ns).unwrap()["spec"]["replicas"],
        1
    );
    assert!(settings_of_shop(&ns).starts_with("settings-"));

    // Passes at the same commit render nothing again.
    let rendered = count_lines(&runs);
    assert!(rendered >= 1, "helm never ran");
    let series = format!("tether_reconciles_total{{source=\"{ns}/site\",result=\"success\"}}");
    let passes = daemon.metric(&series).unwrap_or(0.0);
    eventually(Duration::from_secs(20), || async {
        daemon.metric(&series).unwrap_or(0.0) >= passes + 3.0
    })
    .await;
    assert_eq!(
        count_lines(&runs),
        rendered,
        "helm ran again at the same commit"
    );

    // A commit whose chart does not render (and that scales the Deployment) is not
    // applied: the last good revision stays, and the status says why.
    let chart_model = web_chart(&ns, 2);
    let broken = remote.push(
        "main",
        &[
            ("web/templates/broken.yaml", BROKEN_TEMPLATE),
            ("web.yaml", &chart_model),
        ],
    );
    let attempted = format!("main@sha1:{broken}");
    eventually(Duration::from_secs(60), || async {
        crate::daemon::status(&ns, "site")["lastAttemptedRevision"] == attempted.as_str()
    })
    .await;
    let status = crate::daemon::status(&ns, "site");
    assert_eq!(status["lastAppliedRevision"], good.as_str(), "{status:#}");
    assert_eq!(
        condition(&status, "Ready").map(|c| c.0).as_deref(),
        Some("False"),
        "{status:#}"
    );
    assert!(
        crate::daemon::condition_message(&status, "Ready").contains("HelmChart \"web\""),
        "{status:#}"
    );
    assert_eq!(
        live("deployment", "web", &ns).unwrap()["spec"]["replicas"],
        1
    );
}
