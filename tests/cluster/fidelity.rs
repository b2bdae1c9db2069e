//! Diff fidelity on real-world manifests (`tests/real-world/`: Kubernetes documentation
//! examples, `kubectl create --dry-run=client -o yaml` output, Helm's default chart, and
//! the shapes templating leaves behind), applied as KubernetesResourceInstance models:
//! after tether's own apply, and after adopting what `kubectl apply` (client-side and
//! server-side) made first, the next diff is clean: no false update, no false conflict.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::discover::kubectl_command;
use crate::harness::repo_root;
use crate::reconcile::{Repo, setup, stdout, tether};

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

fn all_output(output: &Output) -> String {
    format!(
        "{}{}",
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
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
