//! Diff fidelity on real-world manifests (`tests/real-world/`: Kubernetes documentation
//! examples, `kubectl create --dry-run=client -o yaml` output, Helm's default chart, and
//! the shapes templating leaves behind), applied as KubernetesResourceInstance models
//! and as the plain files they are: after tether's own apply, and after adopting what `kubectl apply` (client-side and
//! server-side) made first, the next diff is clean: no false update, no false conflict.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::discover::kubectl_command;
use crate::harness::repo_root;
use crate::reconcile::{Repo, all_output, setup, stdout, tether};

/// One corpus file: its name and its YAML documents, each placed in `namespace`
/// (unless cluster-scoped) the way `kubectl -n` would, by inserting the field as text so
/// that every other byte of the shape stays as written.
fn corpus(namespace: &str) -> Vec<(String, String)> {
    let dir = repo_root().join("tests/real-world");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            // Cluster-scoped names are shared by every test of the run: each test gets
            // its own, named after its namespace.
            let text = std::fs::read_to_string(path)
                .unwrap()
                .replace("corpus", namespace);
            let documents: Vec<String> = text
                .split("\n---\n")
                .filter(|doc| doc.contains("kind:"))
                .map(|doc| place_in(doc, namespace))
                .collect();
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            (stem, documents.join("---\n"))
        })
        .collect()
}

fn place_in(document: &str, namespace: &str) -> String {
    let object: Value = serde_saphyr::from_str(document).unwrap();
    let kind = object["kind"].as_str().unwrap();
    let cluster_scoped = matches!(
        kind,
        "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition"
    );
    if cluster_scoped || object["metadata"]["namespace"].is_string() {
        return format!("{}\n", document.trim_end());
    }
    let placed = document.replacen(
        "\nmetadata:\n",
        &format!("\nmetadata:\n  namespace: {namespace}\n"),
        1,
    );
    assert_ne!(placed, document, "a metadata block to place: {document}");
    format!("{}\n", placed.trim_end())
}

/// The corpus as models: one KubernetesResourceInstance per file.
fn corpus_models(namespace: &str) -> Repo {
    let repo = Repo::new(&[(
        "service.yaml",
        "kind: KubernetesService\nname: kubernetes\n",
    )]);
    for (stem, yaml) in corpus(namespace) {
        let indented: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
        repo.write(
            &format!("{stem}.yaml"),
            &format!(
                "kind: KubernetesResourceInstance\nname: {stem}\nresource_definition: |\n{indented}"
            ),
        );
    }
    repo
}

/// The corpus as plain manifests, for kubectl.
fn corpus_manifests(namespace: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (stem, yaml) in corpus(namespace) {
        std::fs::write(dir.path().join(format!("{stem}.yaml")), yaml).unwrap();
    }
    dir
}

/// `tether diff -o json`, parsed, with its exit code and log.
fn diff_json(inventory: &str, models: &Path) -> (Option<i32>, Value, String) {
    let output = tether(
        inventory,
        &[
            "diff",
            "-o",
            "json",
            "--log-level",
            "tether=info",
            models.to_str().unwrap(),
        ],
    );
    let report = serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|e| panic!("a JSON report ({e}): {}", all_output(&output)));
    let log = String::from_utf8_lossy(&output.stderr).to_string();
    (output.status.code(), report, log)
}

/// Every change of the report that is not `unchanged`, one line each with its diff.
fn noisy(report: &Value) -> Vec<String> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] != "unchanged")
        .map(|c| {
            format!(
                "{} {} {}: {}{}",
                c["action"], c["kind"], c["name"], c["conflicts"], c["diff"]
            )
        })
        .collect()
}

/// The lines a diff adds or removes, without its headers.
fn changed_lines(diff: &str) -> Vec<&str> {
    diff.lines()
        .filter(|l| !l.starts_with("+++") && !l.starts_with("---"))
        .filter(|l| l.starts_with('+') || l.starts_with('-'))
        .collect()
}

/// Is this changed line one of tether's own labels or annotations (or the map that
/// holds them, added with them)?
fn is_tether_mark(line: &str) -> bool {
    let text = line[1..].trim();
    [
        "app.kubernetes.io/managed-by: tether",
        "app.kubernetes.io/managed-by: Helm",
        "applyset.kubernetes.io/part-of: ",
        "tether.dev/",
        "labels:",
        "annotations:",
    ]
    .iter()
    .any(|mark| text.starts_with(mark))
}

/// How many server-side dry runs the diff made, from its log.
fn dry_runs(log: &str) -> usize {
    let field = log
        .split_whitespace()
        .find_map(|w| w.strip_prefix("dry_runs="))
        .unwrap_or_else(|| panic!("a dry_runs count in the log: {log}"));
    field.parse().unwrap()
}

/// Applies with tether and checks that the next diff is clean and makes no dry run.
fn apply_then_diff_is_clean(inventory: &str, models: &Path, who: &str) {
    let applied = tether(inventory, &["apply", models.to_str().unwrap()]);
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{who}: tether apply: {}",
        all_output(&applied)
    );
    let (code, report, log) = diff_json(inventory, models);
    let noise = noisy(&report);
    assert!(
        noise.is_empty(),
        "{who}: the diff after tether's apply shows {} noisy objects:\n{}",
        noise.len(),
        noise.join("\n")
    );
    assert_eq!(code, Some(0), "{who}: {log}");
    assert_eq!(
        dry_runs(&log),
        0,
        "{who}: a steady-state diff needs no dry run"
    );
}

#[tokio::test]
async fn real_world_manifests_applied_by_tether_diff_clean() {
    let (_client, ns, inventory) = setup("fidelity-own").await;
    let models = corpus_models(&ns);
    apply_then_diff_is_clean(&inventory, models.path(), "tether first");
}

/// The same corpus as the plain files they are (no model around them): tether applies
/// them as written, and the next diff is clean.
#[tokio::test]
async fn real_world_manifests_as_plain_files_applied_by_tether_diff_clean() {
    let (_client, ns, inventory) = setup("fidelity-plain").await;
    let manifests = corpus_manifests(&ns);
    apply_then_diff_is_clean(&inventory, manifests.path(), "plain files, tether first");
}

/// After `kubectl apply` (client-side, or with `--server-side`) made the objects, tether's
/// diff shows only its own labels and annotations, never a conflict; after tether's apply
/// the next diff is clean.
async fn adopting_what_kubectl_made(server_side: bool) {
    let test = match server_side {
        true => "fidelity-ssa",
        false => "fidelity-csa",
    };
    let (_client, ns, inventory) = setup(test).await;
    let manifests = corpus_manifests(&ns);
    let mut args = vec!["apply", "-f", manifests.path().to_str().unwrap()];
    if server_side {
        args.push("--server-side");
    }
    // The custom resource needs its definition served first: kubectl applies files
    // in name order, so a second pass creates it. kubectl's own server-side apply
    // refuses what the API server's apply refuses (numeric quantities, ports without
    // a protocol): those objects it leaves for tether to create.
    let run = || kubectl_command().args(&args).output().unwrap();
    if !run().status.success() {
        std::thread::sleep(std::time::Duration::from_secs(2));
        let second = run();
        assert!(
            server_side || second.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&second.stderr)
        );
    }

    let models = corpus_models(&ns);
    let (code, report, log) = diff_json(&inventory, models.path());
    assert_eq!(code, Some(1), "labels to add: {log}");
    let mut problems = Vec::new();
    for change in report["changes"].as_array().unwrap() {
        let name = format!("{} {}", change["kind"], change["name"]);
        match change["action"].as_str().unwrap() {
            "update" | "unchanged" => {}
            "create" if server_side => continue,
            other => problems.push(format!("{name}: {other} {}", change["conflicts"])),
        }
        let foreign: Vec<&str> = changed_lines(change["diff"].as_str().unwrap())
            .into_iter()
            .filter(|l| !is_tether_mark(l))
            .collect();
        if !foreign.is_empty() {
            problems.push(format!("{name}: {}", foreign.join(" | ")));
        }
    }
    assert!(
        problems.is_empty(),
        "{test}: adopting shows {} objects with more than tether's marks:\n{}",
        problems.len(),
        problems.join("\n")
    );
    apply_then_diff_is_clean(&inventory, models.path(), test);
}

#[tokio::test]
async fn real_world_manifests_made_by_kubectl_client_side_are_adopted_cleanly() {
    adopting_what_kubectl_made(false).await;
}

#[tokio::test]
async fn real_world_manifests_made_by_kubectl_server_side_are_adopted_cleanly() {
    adopting_what_kubectl_made(true).await;
}

/// A resource instance model of `yaml` (one or more objects).
fn resource_model(name: &str, yaml: &str) -> String {
    let indented: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
    format!("kind: KubernetesResourceInstance\nname: {name}\nresource_definition: |\n{indented}")
}

#[tokio::test]
async fn one_refused_object_leaves_the_others_planned_and_applied() {
    let (client, ns, inventory) = setup("fidelity-bad").await;
    let models = corpus_models(&ns);
    let bad = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: bogus\n  namespace: {ns}\nspec:\n  type: Bogus\n  ports:\n  - port: 80\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: unserved\n  namespace: {ns}\n"
    );
    models.write("bad.yaml", &resource_model("bad", &bad));

    let (code, report, log) = diff_json(&inventory, models.path());
    assert_eq!(code, Some(2), "an error happened: {log}");
    let changes = report["changes"].as_array().unwrap();
    let action_of = |name: &str| {
        changes
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} in the report"))
    };
    let bogus = action_of("bogus");
    assert_eq!(bogus["action"], "error");
    assert!(
        bogus["error"]
            .as_str()
            .unwrap()
            .contains("Unsupported value: \"Bogus\""),
        "{bogus}"
    );
    let unserved = action_of("unserved");
    assert_eq!(unserved["action"], "error");
    assert!(
        unserved["error"]
            .as_str()
            .unwrap()
            .contains("does not serve example.com/v1 Gadget"),
        "{unserved}"
    );
    let created = changes.iter().filter(|c| c["action"] == "create").count();
    assert!(created >= 25, "the other objects are planned: {created}");
    assert_eq!(report["summary"]["error"], 2);

    let markdown = stdout(&tether(
        &inventory,
        &["diff", "-o", "markdown", models.path().to_str().unwrap()],
    ));
    assert!(
        markdown.contains(&format!("| Service {ns}/bogus | ")),
        "a row for the refused object: {markdown}"
    );
    let text = stdout(&tether(
        &inventory,
        &["diff", models.path().to_str().unwrap()],
    ));
    assert!(
        text.contains(&format!(
            "error Service {ns}/bogus (KubernetesResourceInstance/bad, bad.yaml)"
        )),
        "{text}"
    );
    assert!(text.contains("2 could not be planned"), "{text}");

    let started = std::time::Instant::now();
    let applied = tether(&inventory, &["apply", models.path().to_str().unwrap()]);
    let elapsed = started.elapsed();
    assert_eq!(applied.status.code(), Some(2), "{}", all_output(&applied));
    let out = stdout(&applied);
    assert!(out.contains("2 failed"), "{out}");
    // The apply learns the refusal from the apply itself, in the server's words.
    assert!(
        out.contains(&format!("failed: Service {ns}/bogus: ")) && out.contains("Unsupported value"),
        "{out}"
    );
    assert!(!out.contains("Status {"), "no raw structures: {out}");
    // The others are in the cluster.
    let widgets: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), &ns);
    assert!(widgets.get_opt("settings").await.unwrap().is_some());
    assert!(
        elapsed < std::time::Duration::from_secs(30),
        "a refusal is not retried: {elapsed:?}"
    );
}

#[tokio::test]
async fn a_namespaced_custom_resource_without_a_namespace_goes_to_default() {
    let (_client, ns, inventory) = setup("fidelity-default-ns").await;
    let group = format!("{ns}.tether.dev");
    let definition = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gizmos.{group}\nspec:\n  group: {group}\n  names:\n    kind: Gizmo\n    plural: gizmos\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n---\napiVersion: {group}/v1\nkind: Gizmo\nmetadata:\n  name: {ns}\nspec:\n  size: 3\n"
    );
    let models = Repo::new(&[
        (
            "service.yaml",
            "kind: KubernetesService\nname: kubernetes\n",
        ),
        ("gizmo.yaml", &resource_model("gizmo", &definition)),
    ]);
    let path = models.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let got = crate::discover::kubectl(&[
        "get",
        &format!("gizmos.{group}"),
        "-n",
        "default",
        &ns,
        "-o",
        "name",
    ]);
    assert_eq!(stdout(&got).trim(), format!("gizmo.{group}/{ns}"));
    // Now that the kind is served, a second run plans it from discovery.
    apply_then_diff_is_clean(&inventory, models.path(), "custom resource in default");
}

#[tokio::test]
async fn an_object_written_with_empty_labels_carries_tethers_and_is_pruned_with_its_model() {
    let (client, ns, inventory) = setup("fidelity-labels").await;
    let config_map = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unlabelled\n  namespace: {ns}\n  labels:\n  annotations:\ndata:\n  key: value\n"
    );
    // A second object stays: a source that renders nothing is never pruned from.
    let keeper =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keeper\n  namespace: {ns}\n");
    let models = Repo::new(&[
        (
            "service.yaml",
            "kind: KubernetesService\nname: kubernetes\n",
        ),
        ("keeper.yaml", &resource_model("keeper", &keeper)),
        ("cm.yaml", &resource_model("unlabelled", &config_map)),
    ]);
    let path = models.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), &ns);
    let live = api.get("unlabelled").await.unwrap();
    let labels = live.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("tether")
    );
    models.remove("cm.yaml");
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert!(
        stdout(&pruned).contains("1 pruned"),
        "{}",
        all_output(&pruned)
    );
    assert!(api.get_opt("unlabelled").await.unwrap().is_none());
}

#[tokio::test]
async fn after_adopting_what_kubectl_applied_a_change_in_git_is_an_update_not_a_conflict() {
    let (client, ns, inventory) = setup("fidelity-handover").await;
    let manifest = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: handed\n  namespace: {ns}\ndata:\n  key: {value}\n  other: kept\n"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cm.yaml");
    std::fs::write(&file, manifest("a")).unwrap();
    crate::discover::kubectl(&["apply", "-f", file.to_str().unwrap()]);

    let models = Repo::new(&[
        (
            "service.yaml",
            "kind: KubernetesService\nname: kubernetes\n",
        ),
        ("cm.yaml", &resource_model("handed", &manifest("a"))),
    ]);
    let path = models.path().to_str().unwrap();
    let adopted = tether(&inventory, &["apply", path]);
    assert_eq!(adopted.status.code(), Some(0), "{}", all_output(&adopted));
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), &ns);
    let owners = |cm: &k8s_openapi::api::core::v1::ConfigMap, manager: &str| {
        cm.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| e.manager.as_deref() == Some(manager))
            .map(|e| serde_json::to_string(&e.fields_v1).unwrap())
            .collect::<String>()
    };
    let live = api.get("handed").await.unwrap();
    assert!(
        !owners(&live, "kubectl-client-side-apply").contains("f:key"),
        "kubectl's client-side manager handed the field over: {:?}",
        live.metadata.managed_fields
    );
    let manager = format!("tether:default/{inventory}");
    assert!(owners(&live, &manager).contains("f:key"));

    models.write("cm.yaml", &resource_model("handed", &manifest("b")));
    let (code, report, log) = diff_json(&inventory, models.path());
    assert_eq!(code, Some(1), "{log}");
    let change = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "handed")
        .unwrap();
    assert_eq!(change["action"], "update", "{change}");
    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let live = api.get("handed").await.unwrap();
    assert_eq!(
        live.data.unwrap_or_default().get("key").map(String::as_str),
        Some("b")
    );
}
