//! Input budgets: YAML that would take forever or all memory to read (alias bombs,
//! deep nesting, huge files) is refused at once, with an error that names the file,
//! the line and the limit. A budget is a promise about time, so each refusal is
//! checked to come in well under a second. Budgets are costs, not counts a real
//! repository exceeds: a file of 10,000 documents (a committed `helm template` of a
//! platform) is read.

use std::time::{Duration, Instant};

use tether_core::source::{SourceFile, SourceFiles};

/// The classic "billion laughs": ten aliases per level, `levels` levels deep.
fn laughs(levels: usize, indent: &str) -> String {
    let mut text = format!(
        "{indent}a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n"
    );
    for level in 1..levels {
        let previous = format!("*a{}", level - 1);
        let items = [previous.as_str(); 10].join(", ");
        text.push_str(&format!("{indent}a{level}: &a{level} [{items}]\n"));
    }
    text
}

/// Checks `analyze` refuses `text` quickly with a located error mentioning `limit`.
fn refused(name: &str, text: &str, limit: &str) {
    let files = SourceFiles::from_files(vec![SourceFile::new("models.yaml", text)]);
    let started = Instant::now();
    let analysis = tether_core::analyze(&files);
    let elapsed = started.elapsed();
    let report = analysis.diagnostics.render_plain(&files);
    assert!(analysis.graph.is_none(), "{name}: refused");
    assert!(
        report.starts_with("models.yaml:"),
        "{name}: located at a file and line: {report}"
    );
    assert!(
        report.contains(limit),
        "{name}: the error names the limit ({limit}): {report}"
    );
    assert!(
        elapsed < Duration::from_secs(1),
        "{name}: refused in {elapsed:?}"
    );
}

#[test]
fn alias_bombs_in_a_models_file_are_refused_at_once() {
    let text = format!(
        "kind: KubernetesService\nname: kubernetes\nlaughs:\n{}",
        laughs(9, "  ")
    );
    refused("billion laughs", &text, "alias");
    // The same with mappings (merge keys), which some parsers expand separately.
    let mut merge = String::from("kind: KubernetesService\nname: kubernetes\nb0: &b0 {x: 1}\n");
    for level in 1..30 {
        merge.push_str(&format!(
            "b{level}: &b{level} {{a: *b{p}, b: *b{p}, c: *b{p}}}\n",
            p = level - 1
        ));
    }
    refused("nested mappings", &merge, "alias");
}

#[test]
fn alias_bombs_inside_a_resource_definition_are_refused_at_once() {
    let text = format!(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: KubernetesResourceInstance\nname: bomb\nresource_definition: |\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: bomb\n  data:\n{}",
        laughs(9, "    ")
    );
    refused("billion laughs in a resource_definition", &text, "alias");
}

#[test]
fn deep_nesting_and_huge_files_are_refused() {
    let deep = format!(
        "kind: KubernetesService\nname: kubernetes\nx: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    refused("deep nesting", &deep, "depth");
    let huge = format!(
        "kind: KubernetesService\nname: kubernetes\ndescription: \"{}\"\n",
        "x".repeat(17 * 1024 * 1024)
    );
    refused("a huge file", &huge, "MiB");
}

#[test]
fn a_file_of_ten_thousand_documents_is_read() {
    let mut text = String::from("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: big\n");
    for i in 0..10_000 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: big\ndata:\n  index: \"{i}\"\n"
        ));
    }
    let files = SourceFiles::from_files(vec![SourceFile::new("generated.yaml", text)]);
    let analysis = tether_core::analyze(&files);
    let report = analysis.diagnostics.render_plain(&files);
    assert!(analysis.graph.is_some(), "read: {report}");
    assert_eq!(analysis.documents, 10_001);
}
