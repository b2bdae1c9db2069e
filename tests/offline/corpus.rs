//! Data-driven tests: each directory under `tests/cases/{valid,invalid}/` is a models
//! repo, and its `expected.txt` holds the exact diagnostics (`path:line:column`,
//! message, hint) and, for a valid repo, the rendered objects.

use std::path::Path;

use tether_core::ownership::Inventory;
use tether_core::render::{render, to_yaml};
use tether_engine::repo::read_directory_blocking;
use tether_testkit::snapshot::{self, Cases};

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

/// Runs every case of `tests/cases/<group>` (the kit's runner shows every failure of
/// a run); returns how many there were.
fn check_cases(group: &str, expect_valid: bool) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cases")
        .join(group);
    Cases::dirs(dir, "expected.txt").check(|case| {
        let (actual, valid) = snapshot_of(case);
        assert_eq!(
            valid,
            expect_valid,
            "{}: valid = {valid}\n{actual}",
            case.display()
        );
        actual
    })
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
    snapshot::check(&root.join("tests/snapshots/examples.txt"), &actual);
}
