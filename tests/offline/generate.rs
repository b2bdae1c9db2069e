//! Repositories as teams have them, offline: plain Kubernetes objects, Kustomize
//! overlays and Helm charts beside models, built by the real engines (the pinned
//! helm and kubectl of `scripts/helm-tools`). What tether renders for a chart and an
//! overlay is what `helm template` and `kustomize build` print (as objects, less
//! tether's ownership marks); every bad input is an error that names the model, the
//! kustomization or the file, and renders nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tether_testkit::tools::helm_tools;

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// tether with the pinned tools, its home (and chart cache) in `home`.
pub(crate) fn tether(home: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
    command
        .args(args)
        .env_remove("TETHER_LOG_LEVEL")
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join(".cache"));
    for (name, value) in helm_tools().env() {
        command.env(name, value);
    }
    command.output().unwrap()
}

pub(crate) fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

pub(crate) fn run(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{command:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Every document of a YAML stream, as JSON.
pub(crate) fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// tether's render of `models`, as JSON objects.
pub(crate) fn rendered(home: &Path, models: &Path) -> Vec<Value> {
    let out = tether(home, &["render", models.to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    list["items"].as_array().unwrap().clone()
}

/// An object without what tether adds to every object it owns (its labels and
/// annotations; the `managed-by` label is tether's on both sides), for comparing with
/// what the engine printed.
fn without_ownership(mut object: Value) -> Value {
    let metadata = object["metadata"].as_object_mut().unwrap();
    for (field, prefixes) in [
        (
            "labels",
            &["applyset.kubernetes.io/", "app.kubernetes.io/managed-by"][..],
        ),
        ("annotations", &["tether.dev/"][..]),
    ] {
        if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
            map.retain(|k, _| !prefixes.iter().any(|p| k.starts_with(p)));
            if map.is_empty() {
                metadata.remove(field);
            }
        }
    }
    object
}

fn key(object: &Value) -> String {
    format!(
        "{}/{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(key);
    objects
}

/// A temporary directory (tether's home) and the models root inside it.
pub(crate) fn models_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    (dir, models)
}

/// A repository with `helm create`'s chart under `charts/hello`.
fn repo_with_chart() -> (tempfile::TempDir, PathBuf) {
    let (dir, models) = models_dir();
    std::fs::create_dir_all(models.join("charts")).unwrap();
    run(Command::new(&helm_tools().helm)
        .args(["create", "hello"])
        .current_dir(models.join("charts")));
    (dir, models)
}

const CHART_MODELS: &str = "\
kind: KubernetesService
name: kubernetes
---
kind: TrustDomain
name: shop
---
kind: HelmChart
name: hello
chart: charts/hello
trust_domain: shop
values_files:
  - values/prod.yaml
values:
  replicaCount: 3
";

#[test]
fn a_chart_renders_as_helm_template_prints_it_less_its_test_hook() {
    let (dir, models) = repo_with_chart();
    write(&models.join("models.yaml"), CHART_MODELS);
    write(&models.join("values/prod.yaml"), "service:\n  port: 8080\n");
    let ours = rendered(dir.path(), &models);
    let chart: Vec<Value> = ours
        .iter()
        .filter(|o| o["metadata"]["annotations"]["tether.dev/model"] == "HelmChart/hello")
        .cloned()
        .collect();
    let inline = dir.path().join("inline.yaml");
    write(&inline, "replicaCount: 3\n");
    let helm = run(Command::new(&helm_tools().helm)
        .args([
            "template",
            "hello",
            "charts/hello",
            "--namespace",
            "shop",
            "--include-crds",
        ])
        .args(["-f", "values/prod.yaml", "-f", inline.to_str().unwrap()])
        .current_dir(&models));
    let theirs: Vec<Value> = objects(&helm)
        .into_iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"] != "test")
        .collect();
    assert_eq!(
        theirs.len(),
        3,
        "helm create's chart: a ServiceAccount, a Service, a Deployment"
    );
    let ours = sorted(chart.into_iter().map(without_ownership).collect());
    let theirs: Vec<Value> = sorted(theirs)
        .into_iter()
        .map(|mut o| {
            // helm template leaves the namespace to `helm install`; tether places them.
            o["metadata"]["namespace"] = Value::from("shop");
            o["metadata"]["labels"]
                .as_object_mut()
                .map(|l| l.remove("app.kubernetes.io/managed-by"));
            o
        })
        .collect();
    assert_eq!(ours.len(), theirs.len());
    for (ours, theirs) in ours.iter().zip(&theirs) {
        assert_eq!(ours, theirs, "{}", key(theirs));
    }
    let deployment = ours.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 3, "the model's values win");
    let service = ours.iter().find(|o| o["kind"] == "Service").unwrap();
    assert_eq!(
        service["spec"]["ports"][0]["port"], 8080,
        "the values file's"
    );
    // Each object says where it came from: the chart's template.
    let again = rendered(dir.path(), &models);
    let annotations: Vec<&str> = ours_sources(&again);
    assert!(
        annotations.contains(&"hello/templates/deployment.yaml"),
        "{annotations:?}"
    );
}

fn ours_sources(objects: &[Value]) -> Vec<&str> {
    objects
        .iter()
        .filter_map(|o| o["metadata"]["annotations"]["tether.dev/source"].as_str())
        .collect()
}

#[test]
fn an_overlay_renders_as_kustomize_build_prints_it_and_its_base_is_not_built_alone() {
    let (dir, models) = models_dir();
    write(
        &models.join("base/kustomization.yaml"),
        "resources:\n- deployment.yaml\nconfigMapGenerator:\n- name: settings\n  literals: [color=blue]\n",
    );
    write(
        &models.join("base/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n        envFrom:\n        - configMapRef:\n            name: settings\n",
    );
    write(
        &models.join("overlays/staging/kustomization.yaml"),
        "namespace: staging\nresources:\n- ../../base\n- namespace.yaml\nimages:\n- name: nginx\n  newTag: \"1.27\"\npatches:\n- target: {kind: Deployment, name: web}\n  patch: |\n    - op: add\n      path: /spec/replicas\n      value: 2\n",
    );
    write(
        &models.join("overlays/staging/namespace.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: staging\n",
    );
    let graph = tether(dir.path(), &["graph", models.to_str().unwrap()]);
    let graph = text(&graph.stdout);
    assert!(graph.contains("Kustomization/overlays/staging"), "{graph}");
    assert!(!graph.contains("Kustomization/base"), "{graph}");
    let ours = rendered(dir.path(), &models);
    let built = run(Command::new(&helm_tools().kubectl)
        .args(["kustomize", "overlays/staging"])
        .current_dir(&models));
    let theirs = sorted(objects(&built));
    let ours = sorted(ours.into_iter().map(without_ownership).collect());
    assert_eq!(ours.len(), 3, "the overlay's objects, once: {ours:#?}");
    for (ours, theirs) in ours.iter().zip(&theirs) {
        assert_eq!(ours, theirs, "{}", key(theirs));
    }
    let deployment = ours.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    // The generated ConfigMap's hash suffix is referenced by the Deployment: a change
    // of the literal renames it, and the Deployment rolls.
    let config = ours.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let name = config["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("settings-"), "{name}");
    write(
        &models.join("base/kustomization.yaml"),
        "resources:\n- deployment.yaml\nconfigMapGenerator:\n- name: settings\n  literals: [color=green]\n",
    );
    let after = rendered(dir.path(), &models);
    let renamed = after.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_ne!(renamed["metadata"]["name"], name);
    let rolled = after.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        rolled["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"],
        renamed["metadata"]["name"]
    );
}

#[test]
fn plain_objects_are_managed_beside_models_and_models_wait_for_them() {
    let (dir, models) = models_dir();
    write(
        &models.join("models.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\nkind: Image\nname: nginx\ntag: \"1.25\"\n---\nkind: Slice\nname: web\ntrust_domain: shop\ncontroller_kind: Deployment\ndefault_image: nginx:1.25\ndepends_on:\n  - kind: ConfigMap\n    namespace: shop\n    name: settings\n",
    );
    write(
        &models.join("plain/settings.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: shop\ndata:\n  mode: \"0644\"\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: shop\nstringData:\n  token: s3cr3t\n",
    );
    let out = tether(dir.path(), &["validate", models.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let graph = tether(dir.path(), &["graph", models.to_str().unwrap()]);
    let graph = text(&graph.stdout);
    assert!(graph.contains("Manifest/plain/settings.yaml"), "{graph}");
    // The slice waits for the file that makes the ConfigMap it names.
    assert!(graph.contains("wave 2"), "{graph}");
    let ours = rendered(dir.path(), &models);
    let config = ours.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(
        config["metadata"]["annotations"]["tether.dev/model"],
        "Manifest/plain/settings.yaml"
    );
    assert_eq!(
        config["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "tether"
    );
}

#[test]
fn a_plain_object_is_checked_where_it_is_written() {
    let (dir, models) = models_dir();
    write(
        &models.join("objects.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: shop\ndata: {}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: labelled\n  labels:\n    \"bad key!\": x\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: reader\n  namespace: shop\nrules: []\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: twice\n  namespace: shop\n",
    );
    write(
        &models.join("again.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: twice\n  namespace: shop\n",
    );
    let out = tether(dir.path(), &["validate", models.to_str().unwrap()]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    for expected in [
        "objects.yaml:1:1: error: ConfigMap \"\": missing \"metadata.name\"",
        "objects.yaml:12:5: error: ConfigMap \"labelled\": label key \"bad key!\" is not valid",
        "objects.yaml:21:1: error: Manifest \"objects.yaml\": ConfigMap shop/twice is also rendered from Manifest \"again.yaml\"",
    ] {
        assert!(report.contains(expected), "{expected}\n---\n{report}");
    }
    // A namespace on a cluster-scoped object is ignored by the server: a warning.
    let clean = dir.path().join("clean");
    write(
        &clean.join("role.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: reader\n  namespace: shop\nrules: []\n",
    );
    let out = tether(dir.path(), &["validate", clean.to_str().unwrap()]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains("role.yaml:5:14: warning: ClusterRole \"reader\": a cluster-scoped object has no namespace: this one is ignored"),
        "{report}"
    );
}

/// Bad input: each a clear error naming the model or the kustomization, and nothing
/// rendered (exit 1).
fn refused(models: &Path, home: &Path, expected: &[&str]) {
    let out = tether(home, &["render", models.to_str().unwrap()]);
    let report = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        out.stdout.is_empty(),
        "nothing rendered: {}",
        text(&out.stdout)
    );
    for expected in expected {
        assert!(report.contains(expected), "{expected}\n---\n{report}");
    }
}

#[test]
fn a_chart_that_fails_to_render_or_a_missing_values_file_is_a_located_error() {
    let (dir, models) = repo_with_chart();
    write(&models.join("models.yaml"), CHART_MODELS);
    refused(
        &models,
        dir.path(),
        &[
            "models.yaml:12:5: error: HelmChart \"hello\": values file \"values/prod.yaml\" does not exist",
        ],
    );
    write(&models.join("values/prod.yaml"), "service:\n  port: 8080\n");
    write(
        &models.join("charts/hello/templates/required.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  region: {{ required \"a region is required\" .Values.region }}\n",
    );
    refused(
        &models,
        dir.path(),
        &[
            "models.yaml:7:1: error: HelmChart \"hello\": cannot build it:",
            "a region is required",
        ],
    );
}

#[test]
fn a_kustomization_with_a_missing_base_a_cycle_or_a_remote_base_is_a_located_error() {
    let (dir, models) = models_dir();
    write(
        &models.join("app/kustomization.yaml"),
        "resources:\n- ../missing\n",
    );
    refused(
        &models,
        dir.path(),
        &[
            "app/kustomization.yaml:1:1: error: Kustomization \"app\": cannot build it:",
            "missing",
        ],
    );
    write(
        &models.join("app/kustomization.yaml"),
        "resources:\n- ../other\n",
    );
    write(
        &models.join("other/kustomization.yaml"),
        "resources:\n- ../app\n",
    );
    let out = tether(dir.path(), &["render", models.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "a cycle: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cycle") || text(&out.stderr).contains("cannot build"),
        "{}",
        text(&out.stderr)
    );
    write(
        &models.join("app/kustomization.yaml"),
        "resources:\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.0.0\n",
    );
    std::fs::remove_dir_all(models.join("other")).unwrap();
    refused(
        &models,
        dir.path(),
        &[
            "app/kustomization.yaml:2:3: error: Kustomization \"app\": remote base",
            "kustomize: {remote_bases: true}",
        ],
    );
}

#[test]
fn a_missing_helm_is_an_error_that_says_how_to_install_it() {
    let (dir, models) = repo_with_chart();
    write(&models.join("models.yaml"), CHART_MODELS);
    write(&models.join("values/prod.yaml"), "{}\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["validate", models.to_str().unwrap()])
        .env("HOME", dir.path())
        .env("PATH", "/nonexistent")
        .env_remove("TETHER_HELM")
        .env_remove("TETHER_KUSTOMIZE")
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("Helm is not installed: TETHER_HELM is not set and no `helm` is on PATH"),
        "{report}"
    );
    assert!(report.contains("scripts/helm-tools"), "{report}");
}

/// A chart repository: `helm package` and `helm repo index` served by a plain HTTP
/// server on loopback, stopped when dropped.
struct ChartRepository {
    _served: tether_testkit::charts::Served,
    url: String,
    _dir: tempfile::TempDir,
}

fn chart_repository() -> ChartRepository {
    let dir = tempfile::tempdir().unwrap();
    let helm = &helm_tools().helm;
    run(Command::new(helm)
        .args(["create", "hello"])
        .current_dir(dir.path()));
    for version in ["1.2.3", "1.3.0"] {
        run(Command::new(helm)
            .args(["package", "hello", "--version", version])
            .current_dir(dir.path()));
    }
    let served = tether_testkit::charts::serve(dir.path());
    let url = served.url.clone();
    run(Command::new(helm)
        .args(["repo", "index", ".", "--url", &url])
        .current_dir(dir.path()));
    ChartRepository {
        _served: served,
        url,
        _dir: dir,
    }
}

fn repository_chart(models: &Path, url: &str, version: &str) {
    write(
        &models.join("models.yaml"),
        &format!(
            "kind: HelmChart\nname: hello\nchart: hello\nrepository: {url}\nversion: \"{version}\"\ntrust_domain: shop\n"
        ),
    );
}

#[test]
fn a_chart_from_a_chart_repository_is_fetched_once_per_version() {
    let repository = chart_repository();
    let (dir, models) = models_dir();
    repository_chart(&models, &repository.url, "1.2.3");
    let first = rendered(dir.path(), &models);
    let deployment = first.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["metadata"]["labels"]["helm.sh/chart"],
        "hello-1.2.3"
    );
    // A range takes the newest version that matches.
    repository_chart(&models, &repository.url, "^1.2");
    let newest = rendered(dir.path(), &models);
    let deployment = newest.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["metadata"]["labels"]["helm.sh/chart"],
        "hello-1.3.0"
    );
    // A version that does not exist: the model is named, nothing rendered.
    repository_chart(&models, &repository.url, "9.9.9");
    refused(
        &models,
        dir.path(),
        &[
            "HelmChart \"hello\": cannot build it: cannot fetch the chart",
            "9.9.9",
        ],
    );
    // The repository down: an exact version fetched before renders from the cache.
    let url = repository.url.clone();
    drop(repository);
    repository_chart(&models, &url, "1.2.3");
    assert_eq!(rendered(dir.path(), &models), first);
    // One never fetched cannot be: a clear error, nothing rendered.
    repository_chart(&models, &url, "2.0.0");
    refused(
        &models,
        dir.path(),
        &["HelmChart \"hello\": cannot build it: cannot fetch the chart"],
    );
}

#[test]
fn kubernetes_documentation_examples_and_this_projects_deploy_directory_validate_as_they_are() {
    let home = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Manifests written by others (the Kubernetes docs, kubectl create, helm create's
    // output): 30 objects in 11 files, each managed as written.
    let out = tether(
        home.path(),
        &["validate", root.join("tests/real-world").to_str().unwrap()],
    );
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains("30 models in 11 files: valid, 2 warnings"),
        "{report}"
    );
    // tether's own deploy/ (a kustomization with its base).
    for dir in ["deploy"] {
        let out = tether(home.path(), &["validate", root.join(dir).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{dir}: {}", text(&out.stdout));
        let objects = rendered(home.path(), &root.join(dir));
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        for kind in [
            "Namespace",
            "CustomResourceDefinition",
            "StatefulSet",
            "PodDisruptionBudget",
        ] {
            assert!(kinds.contains(&kind), "{dir}: {kinds:?}");
        }
    }
}

#[test]
fn a_chart_from_an_oci_registry_renders_and_a_missing_version_is_named() {
    let registry = tether_testkit::registry::Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let helm = &helm_tools().helm;
    run(Command::new(helm)
        .args(["create", "hello"])
        .current_dir(dir.path()));
    run(Command::new(helm)
        .args(["package", "hello", "--version", "0.4.0"])
        .current_dir(dir.path()));
    let charts = format!("oci://{}/charts", registry.host());
    run(Command::new(helm)
        .args(["push", "hello-0.4.0.tgz", &charts, "--plain-http"])
        .env("HELM_CONFIG_HOME", dir.path().join("helm-config"))
        .env("HELM_CACHE_HOME", dir.path().join("helm-cache"))
        .current_dir(dir.path()));
    let models = dir.path().join("models");
    let model = |version: &str| {
        format!(
            "kind: HelmChart\nname: hello\nchart: hello\nrepository: {charts}\nversion: \"{version}\"\ntrust_domain: shop\n"
        )
    };
    write(&models.join("models.yaml"), &model("0.4.0"));
    let objects = rendered(dir.path(), &models);
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["metadata"]["labels"]["helm.sh/chart"],
        "hello-0.4.0"
    );
    assert_eq!(deployment["metadata"]["namespace"], "shop");
    write(&models.join("models.yaml"), &model("0.5.0"));
    refused(
        &models,
        dir.path(),
        &["HelmChart \"hello\": cannot build it: cannot fetch the chart"],
    );
}

#[test]
fn a_kustomize_older_than_five_is_refused_with_a_hint() {
    // Kustomize 4 builds overlays differently.
    let old = &helm_tools().kustomize4;
    let (dir, models) = models_dir();
    write(
        &models.join("app/kustomization.yaml"),
        "resources: [cm.yaml]\n",
    );
    write(
        &models.join("app/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["validate", models.to_str().unwrap()])
        .env("HOME", dir.path())
        .env("TETHER_KUSTOMIZE", old)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("builds with Kustomize {Version:kustomize/v4.5.7")
            && report.contains("older than v5.0.0"),
        "{report}"
    );
    assert!(report.contains("kubectl 1.27 or later"), "{report}");
}
