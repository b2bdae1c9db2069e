//! `tether schema`: stable output (a snapshot), and every example model valid under it
//! by an independent validator (Python's jsonschema), while wrong models are not.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use tether_testkit::snapshot;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn schema() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

/// Each document's line from scripts/json-schema-validate, and whether all were valid.
fn validate(documents: &[(String, serde_json::Value)]) -> (Vec<String>, bool) {
    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("schema.json");
    std::fs::write(&schema_file, schema()).unwrap();
    let input: Vec<serde_json::Value> = documents
        .iter()
        .map(|(name, document)| serde_json::json!({"name": name, "document": document}))
        .collect();
    let mut child = Command::new(root().join("scripts/json-schema-validate"))
        .arg(&schema_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&input).unwrap().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (lines, output.status.success())
}

/// The YAML documents of every model file under `dir`, as JSON.
fn documents_under(dir: &Path) -> Vec<(String, serde_json::Value)> {
    let mut documents = Vec::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.unwrap();
        let path = entry.path();
        if !path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let parsed: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let name = path.strip_prefix(root()).unwrap().display().to_string();
        for (i, document) in parsed.into_iter().enumerate() {
            documents.push((format!("{name}#{}", i + 1), document));
        }
    }
    documents
}

#[test]
fn the_schema_output_is_stable() {
    // A change fails with its diff: review it, then TETHER_BLESS=1 rewrites the file.
    snapshot::check(&root().join("tests/snapshots/model.schema.json"), &schema());
}

#[test]
fn every_example_and_valid_corpus_model_is_valid_under_the_schema() {
    let mut documents = documents_under(&root().join("examples/models"));
    let examples = documents.len();
    documents.extend(documents_under(&root().join("tests/cases/valid")));
    assert!(examples >= 35, "{examples} example documents");
    let (lines, valid) = validate(&documents);
    assert_eq!(lines.len(), documents.len(), "{lines:#?}");
    assert!(
        valid,
        "{:#?}",
        lines
            .iter()
            .filter(|l| !l.starts_with("ok "))
            .collect::<Vec<_>>()
    );
}

#[test]
fn models_that_tether_refuses_are_invalid_under_the_schema_too() {
    let wrong = [
        (
            "unknown field",
            serde_json::json!({"kind": "TrustDomain", "name": "shop", "onwer": "kubernetes"}),
        ),
        (
            "no such controller",
            serde_json::json!({"kind": "Slice", "name": "web", "controller_kind": "ReplicaSet"}),
        ),
        (
            "port out of range",
            serde_json::json!({"kind": "ServicePort", "name": "http", "service": "web", "internal_port": 70000}),
        ),
        (
            "missing name",
            serde_json::json!({"kind": "Image", "tag": "1.25"}),
        ),
        (
            "unknown kind",
            serde_json::json!({"kind": "Deployment", "name": "web"}),
        ),
        (
            "data as a list",
            serde_json::json!({"kind": "KubernetesConfigMap", "name": "c", "trust_domain": "shop", "data": ["a"]}),
        ),
        (
            "another apiVersion",
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Site", "name": "s"}),
        ),
        (
            "a null tag",
            serde_json::json!({"kind": "Image", "name": "nginx", "tag": null}),
        ),
    ];
    let documents: Vec<(String, serde_json::Value)> = wrong
        .iter()
        .map(|(name, document)| (name.to_string(), document.clone()))
        .collect();
    let (lines, valid) = validate(&documents);
    assert!(!valid);
    for (name, _) in &wrong {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("invalid {name}: "))),
            "{name} should be invalid: {lines:#?}"
        );
    }
    let unknown_field = lines.iter().find(|l| l.contains("unknown field")).unwrap();
    assert!(unknown_field.contains("'onwer'"), "{unknown_field}");
}
