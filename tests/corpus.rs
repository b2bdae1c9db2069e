//! Data-driven tests: each directory under `tests/cases/{valid,invalid}/` is a models
//! repo, and its `expected.txt` holds the exact diagnostics (`path:line:column`,
//! message, hint) and, for a valid repo, the rendered objects.

mod common;

use std::path::{Path, PathBuf};

use tether_core::ownership::Inventory;
use tether_core::render::{render, to_yaml};
use tether_engine::repo::read_directory_blocking;

/// Diagnostics, then the rendered YAML when the repo is valid.
fn snapshot_of(root: &Path) -> (String, bool) {
    let files = read_directory_blocking(root).unwrap();
    let analysis = tether_core::analyze(&files);
    let mut out = analysis.diagnostics.render_plain(&files);
    let valid = analysis.graph.is_some();
    if let Some(graph) = &analysis.graph {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&to_yaml(&render(graph, &files, &Inventory::default())).unwrap());
    }
    (out, valid)
}

fn cases(group: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cases")
        .join(group);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

/// Runs every case, collecting failures so that one run shows all of them.
fn check_cases(group: &str, expect_valid: bool) -> usize {
    let cases = cases(group);
    let mut failures = Vec::new();
    for case in &cases {
        let result = std::panic::catch_unwind(|| {
            let (actual, valid) = snapshot_of(case);
            assert_eq!(
                valid,
                expect_valid,
                "{}: valid = {valid}\n{actual}",
                case.display()
            );
            common::assert_snapshot(&case.join("expected.txt"), &actual);
        });
        if let Err(panic) = result {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| format!("{}: failed", case.display()));
            failures.push(message);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn invalid_repos_report_exact_diagnostics_and_render_nothing() {
    let count = check_cases("invalid", false);
    assert!(count >= 30, "the invalid corpus has {count} cases");
}

#[test]
fn valid_repos_render_exactly() {
    check_cases("valid", true);
}

#[test]
fn examples_render_exactly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (actual, valid) = snapshot_of(&root.join("examples/models"));
    assert!(valid, "{actual}");
    common::assert_snapshot(&root.join("tests/snapshots/examples.txt"), &actual);
}
