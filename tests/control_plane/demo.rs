//! `scripts/demo` end to end, on a control plane of its own: each step's visible
//! result, and nothing left running afterwards.

use std::path::Path;
use std::process::Command;

fn without_colour(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The text of step `n` of the demo, from its heading to the next.
fn step(output: &str, n: usize) -> &str {
    let start = output
        .find(&format!("== {n}. "))
        .unwrap_or_else(|| panic!("no step {n} in:\n{output}"));
    let rest = &output[start..];
    let end = rest[4..].find("\n== ").map_or(rest.len(), |i| i + 4);
    &rest[..end]
}

#[test]
fn the_demo_shows_every_step_and_stops_what_it_started() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let state = tempfile::tempdir().unwrap();
    let demo_dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tether")).parent().unwrap();
    let output = Command::new(root.join("scripts/demo"))
        .env("TETHER_CLUSTER_STATE", state.path())
        .env("TETHER_DEMO_DIR", demo_dir.path())
        .env("TETHER_BIN_DIR", bin_dir)
        .output()
        .unwrap();
    let text = without_colour(&format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ));
    assert!(output.status.success(), "{text}");

    let nodes = step(&text, 1);
    assert!(nodes.contains("tether-sim-1   Ready"), "{nodes}");

    let validate = step(&text, 2);
    assert!(
        validate.contains("examples/models: 35 models in 8 files: valid"),
        "{validate}"
    );
    assert!(
        validate.contains("no TrustDomain named \"shpo\""),
        "{validate}"
    );
    assert!(
        validate.contains("help: did you mean \"shop\"?"),
        "{validate}"
    );
    assert!(validate.contains("2 errors"), "{validate}");

    let diff = step(&text, 3);
    assert!(diff.contains("create Deployment shop/web"), "{diff}");
    // The diff is shown in full: the last object to create is there too.
    assert!(diff.contains("create Service shop/web"), "{diff}");
    let report = std::fs::read_to_string(demo_dir.path().join("diff.md")).unwrap();
    assert!(report.starts_with("### "), "{report}");
    assert!(diff.contains(&demo_dir.path().join("diff.md").display().to_string()));

    let apply = step(&text, 4);
    assert!(apply.contains("19 created"), "{apply}");
    assert!(apply.contains("all workloads are ready"), "{apply}");

    let pods = step(&text, 5);
    let running: Vec<&str> = pods
        .lines()
        .filter(|l| l.contains(" Running ") && l.contains(" 10.244.") && l.contains("tether-sim-1"))
        .collect();
    assert_eq!(running.len(), 8, "{pods}");
    assert!(
        pods.lines()
            .any(|l| l.starts_with("db-migrate-") && l.contains("Completed")),
        "{pods}"
    );

    let discover = step(&text, 7);
    assert!(
        discover.contains("discover: +10 pods in shop"),
        "{discover}"
    );
    assert!(
        discover.contains("discovered/shop/pods/reports-"),
        "{discover}"
    );
    assert!(
        discover.contains("name: reports") && discover.contains("xos_managed: false"),
        "{discover}"
    );
    let log = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(demo_dir.path().join("repo"))
        .output()
        .unwrap();
    let subjects = String::from_utf8_lossy(&log.stdout).to_string();
    assert!(
        subjects.contains("discover: +10 pods in shop"),
        "{subjects}"
    );

    let events = step(&text, 8);
    let json: Vec<serde_json::Value> = events
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let statuses: Vec<&str> = json.iter().filter_map(|e| e["status"].as_str()).collect();
    assert!(statuses.contains(&"restarted"), "{events}");
    assert!(statuses.contains(&"deleted"), "{events}");

    let prune = step(&text, 9);
    assert!(
        prune.contains("delete (with --prune) ResourceQuota shop/shop-quota"),
        "{prune}"
    );
    assert!(prune.contains("3 pruned"), "{prune}");

    assert!(
        step(&text, 10).contains("message: hello from git"),
        "{text}"
    );
    assert!(step(&text, 11).contains("ms after the webhook"), "{text}");
    let rewrite = step(&text, 13);
    assert!(
        rewrite.contains(r#""from":"main@sha1:"#) && rewrite.contains("HistoryRewritten"),
        "{rewrite}"
    );
    let install = step(&text, 14);
    for line in [
        "✔ you may install tether",
        "StatefulSet/tether-system/tether created",
        &format!(
            "✔ daemon {}: 2 of 2 replicas ready",
            env!("CARGO_PKG_VERSION")
        ),
        "all checks passed",
        "└── ConfigMap/greeting (v1)",
    ] {
        assert!(install.contains(line), "{install}");
    }
    assert!(step(&text, 12).contains("DriftCorrected"), "{text}");

    // Nothing is left running: the demo stopped the control plane it started.
    let status = tether_testkit::cluster::script()
        .arg("status")
        .env("TETHER_CLUSTER_STATE", state.path())
        .output()
        .unwrap();
    assert_eq!(
        status.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
}
