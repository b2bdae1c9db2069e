//! Data-driven tests of the pure inventory decisions: each `tests/inventory/*.txt`
//! gives what is recorded, rendered and live; `*.expected` beside it holds the prune
//! candidates, the records written before and after the apply (all applied, and one
//! failure), and the batches by rank. `TETHER_BLESS=1` rewrites the expectations.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

#[path = "common/snapshots.rs"]
mod snapshots;

use tether::inventory::{InventoryEntry, InventoryRecord, by_rank, prune_candidates};
use tether::k8s::ObjectKey;
use tether::ownership::{Inventory, MANAGED_BY_LABEL, MANAGER, PART_OF_LABEL, ownership_labels};

struct Case {
    record: InventoryRecord,
    rendered: Vec<InventoryEntry>,
    /// Live objects and their labels: ours, other (another inventory's), manager-only
    /// (tether's managed-by label copied, no part-of), helm-with-our-part-of, none.
    live: Vec<(InventoryEntry, String)>,
}

fn parse(text: &str) -> Case {
    let mut case = Case {
        record: InventoryRecord::default(),
        rendered: Vec::new(),
        live: Vec::new(),
    };
    let mut section = "";
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        if let Some(commit) = line.strip_prefix("commit: ") {
            case.record.commit = (commit != "-").then(|| commit.to_string());
        } else if let Some(name) = line.strip_suffix(':') {
            section = name;
        } else {
            let words: Vec<&str> = line.split_whitespace().collect();
            let entry = InventoryEntry::parse(&words[..4].join(" ")).expect("an entry");
            match section {
                "recorded" => {
                    case.record.entries.insert(entry);
                }
                "rendered" => case.rendered.push(entry),
                "live" => case.live.push((entry, words[4].to_string())),
                other => panic!("unknown section {other}"),
            }
        }
    }
    case
}

fn live_object(labels: &str, ours: &str) -> serde_json::Value {
    let labels = match labels {
        "ours" => serde_json::json!(ownership_labels(ours)),
        "other" => serde_json::json!(ownership_labels("applyset-other-v1")),
        "manager-only" => serde_json::json!({ MANAGED_BY_LABEL: MANAGER }),
        // A Helm release whose chart copied this inventory's part-of label.
        "helm-with-our-part-of" => serde_json::json!({
            MANAGED_BY_LABEL: "Helm",
            PART_OF_LABEL: ours,
            "helm.sh/chart": "web-0.1.0",
        }),
        "none" => serde_json::json!({}),
        other => panic!("unknown labels {other}"),
    };
    serde_json::json!({"metadata": {"labels": labels}})
}

fn lines(record: &InventoryRecord) -> String {
    let mut out: String = record
        .entries
        .iter()
        .map(|e| format!("  {}\n", e.line()))
        .collect();
    let _ = writeln!(out, "  commit: {}", record.commit.as_deref().unwrap_or("-"));
    out
}

fn run(case: &Case) -> String {
    let applyset = Inventory::default().applyset_id();
    let rendered: BTreeSet<ObjectKey> = case.rendered.iter().map(InventoryEntry::key).collect();
    let live: HashMap<ObjectKey, serde_json::Value> = case
        .live
        .iter()
        .map(|(e, labels)| (e.key(), live_object(labels, &applyset)))
        .collect();
    let candidates = prune_candidates(&case.record, &rendered, &live, &applyset);
    let mut out = String::from("prune, in order:\n");
    for entry in &candidates {
        let _ = writeln!(out, "  {}", entry.line());
    }
    let before = case.record.before_apply(case.rendered.iter().cloned());
    let _ = write!(out, "recorded before applying:\n{}", lines(&before));
    let pruned: BTreeSet<ObjectKey> = candidates.iter().map(|e| e.key()).collect();
    let new_commit = Some("9999999".to_string());
    let done = before.after_apply(
        &pruned,
        new_commit.clone(),
        case.record.commit.clone(),
        true,
    );
    let _ = write!(
        out,
        "recorded after applying and pruning:\n{}",
        lines(&done)
    );
    let failed = before.after_apply(
        &BTreeSet::new(),
        new_commit,
        case.record.commit.clone(),
        false,
    );
    let _ = write!(
        out,
        "recorded after an apply with a failure, nothing pruned:\n{}",
        lines(&failed)
    );
    out.push_str("batches by rank:\n");
    for (rank, batch) in by_rank(case.rendered.iter(), |e| &e.kind) {
        let names: Vec<String> = batch.iter().map(|e| e.key().to_string()).collect();
        let _ = writeln!(out, "  {rank}: {}", names.join(", "));
    }
    out
}

#[test]
fn inventory_decisions_match_their_expectations() {
    snapshots::check("tests/inventory", "txt", 4, |text| run(&parse(text)));
}
