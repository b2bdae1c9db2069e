//! The workflow as data: each directory under `tests/workflow/` is a models repo, and
//! its `expected.txt` shows the waves (the objects each applies, what each waits for
//! first), the selections of `--only`, and the Mermaid and DOT graphs.
//! `TETHER_BLESS=1` rewrites them.

use std::fmt::Write;
use std::path::Path;

use tether_core::ownership::Inventory;
use tether_core::render::render;
use tether_core::workflow::{Rule, Workflow};
use tether_engine::repo::read_directory_blocking;
use tether_testkit::snapshot::{self, Cases};

fn rule(rule: &Rule) -> String {
    match rule {
        Rule::BuiltIn => "built-in".into(),
        Rule::Condition(c) => format!("condition {c}"),
        Rule::Field { path, value } => format!("{path} = {value}"),
        Rule::Endpoints => "endpoints".into(),
    }
}

/// What `--only` takes for each model that waits for something, with and without
/// `--skip-dependencies`.
fn selections(workflow: &Workflow, out: &mut String) {
    for (i, member) in workflow.members.iter().enumerate() {
        if member.needs.is_empty() {
            continue;
        }
        for skip in [false, true] {
            let taken: Vec<&str> = workflow
                .closure(&[i], skip)
                .into_iter()
                .map(|m| workflow.members[m].label.as_str())
                .collect();
            let flag = if skip { " --skip-dependencies" } else { "" };
            writeln!(out, "--only {}{flag}: {}", member.label, taken.join(", ")).unwrap();
        }
    }
}

fn snapshot_of(root: &Path) -> String {
    let files = read_directory_blocking(root).unwrap();
    let analysis = tether_core::analyze(&files);
    let mut out = analysis.diagnostics.render_plain(&files);
    let Some(graph) = &analysis.graph else {
        return out;
    };
    let workflow = &graph.workflow;
    let objects = render(graph, &files, &Inventory::default());
    for wave in 0..workflow.wave_count() {
        writeln!(out, "wave {}", wave + 1).unwrap();
        for gate in workflow.gates(wave, None) {
            let external = if gate.external {
                ", in the cluster"
            } else {
                ""
            };
            writeln!(
                out,
                "  waits for {} ({}{external}), for {}",
                gate.gate.key,
                rule(&gate.gate.rule),
                gate.needed_by.join(", ")
            )
            .unwrap();
        }
        for object in objects.iter().filter(|o| o.wave == wave) {
            writeln!(
                out,
                "  applies {} ({})",
                object.display_name(),
                object.model
            )
            .unwrap();
        }
    }
    selections(workflow, &mut out);
    if workflow.has_dependencies() {
        out.push_str("--- mermaid\n");
        out.push_str(&workflow.mermaid());
        out.push_str("--- dot\n");
        out.push_str(&workflow.dot());
    }
    out
}

#[test]
fn waves_gates_selections_and_graphs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workflow");
    Cases::dirs(dir, "expected.txt")
        .at_least(2)
        .check(snapshot_of);
    // examples/openstack, with its configuration files.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    snapshot::check(
        &root.join("tests/snapshots/openstack.workflow.txt"),
        &snapshot_of(&root.join("examples/openstack")),
    );
}

#[test]
fn the_example_applies_in_the_order_kolla_deploys_keystone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workflow/kolla-keystone");
    let files = read_directory_blocking(&root).unwrap();
    let graph = tether_core::analyze(&files).graph.unwrap();
    let objects = render(&graph, &files, &Inventory::default());
    let wave_of = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o.kind == kind && o.name == name)
            .map(|o| o.wave)
            .unwrap()
    };
    assert!(wave_of("StatefulSet", "mariadb") < wave_of("Job", "keystone-db-init"));
    assert!(wave_of("Job", "keystone-db-init") < wave_of("Job", "keystone-users"));
    assert!(wave_of("Job", "keystone-users") < wave_of("Deployment", "keystone"));
    assert!(wave_of("Deployment", "keystone") < wave_of("Pod", "openstack-client"));
    // What nothing waits for goes first.
    assert_eq!(wave_of("ConfigMap", "keystone-config"), 0);
    assert_eq!(wave_of("Namespace", "openstack"), 0);
    // The objects are in wave order, so that apply can go through them in order.
    assert!(objects.windows(2).all(|w| w[0].wave <= w[1].wave));
}
