//! Data-driven tests of the pure inventory decisions: each `tests/inventory/*.txt`
//! gives what is recorded (with `created` or `adopted` and a uid, as the inventory
//! writes its lines), rendered and live (labels, and a uid); `*.expected` beside it
//! holds the prune decisions, the records written before and after the apply (all
//! applied, and one failure), and the batches by rank. `TETHER_BLESS=1` rewrites the
//! expectations.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::path::Path;

use tether_core::inventory::{
    InventoryEntry, InventoryRecord, Provenance, PruneDecision, by_rank, prune_decisions,
};
use tether_core::k8s::ObjectKey;
use tether_core::ownership::{
    Inventory, MANAGED_BY_LABEL, MANAGER, PART_OF_LABEL, ownership_labels,
};
use tether_testkit::snapshot::Cases;

struct Case {
    record: InventoryRecord,
    rendered: Vec<InventoryEntry>,
    /// Live objects, their labels (ours, other (another inventory's), manager-only
    /// (tether's managed-by label copied, no part-of), helm-with-our-part-of, none) and
    /// their uid, then any annotations as `key=value`.
    live: Vec<(InventoryEntry, String, Option<String>, Vec<String>)>,
}

fn parse(text: &str) -> Case {
    let mut recorded = String::new();
    let mut commit = None;
    let mut rendered = Vec::new();
    let mut live = Vec::new();
    let mut section = "";
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        if let Some(value) = line.strip_prefix("commit: ") {
            commit = (value != "-").then(|| value.to_string());
        } else if let Some(name) = line.strip_suffix(':') {
            section = name;
        } else {
            let words: Vec<&str> = line.split_whitespace().collect();
            let entry = || InventoryEntry::parse(&words[..4].join(" ")).expect("an entry");
            match section {
                "recorded" => {
                    recorded.push_str(&words.join(" "));
                    recorded.push('\n');
                }
                "rendered" => rendered.push(entry()),
                "live" => live.push((
                    entry(),
                    words[4].to_string(),
                    words.get(5).map(|u| u.to_string()),
                    words.iter().skip(6).map(|a| a.to_string()).collect(),
                )),
                other => panic!("unknown section {other}"),
            }
        }
    }
    let mut data = BTreeMap::from([("objects".to_string(), recorded)]);
    if let Some(commit) = commit {
        data.insert("commit".to_string(), commit);
    }
    Case {
        record: InventoryRecord::from_config(&data, &BTreeMap::new()).expect("recorded lines"),
        rendered,
        live,
    }
}

fn live_object(
    labels: &str,
    ours: &str,
    uid: Option<&str>,
    annotations: &[String],
) -> serde_json::Value {
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
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|a| {
            let (key, value) = a.split_once('=').expect("an annotation key=value");
            (key.to_string(), value.into())
        })
        .collect();
    serde_json::json!({"metadata": {"labels": labels, "uid": uid, "annotations": annotations}})
}

fn lines(record: &InventoryRecord) -> String {
    let objects = record.lines();
    let mut out: String = objects.lines().map(|l| format!("  {l}\n")).collect();
    let _ = writeln!(out, "  commit: {}", record.commit.as_deref().unwrap_or("-"));
    out
}

fn run(case: &Case) -> String {
    let applyset = Inventory::default().applyset_id();
    let rendered: BTreeSet<ObjectKey> = case.rendered.iter().map(InventoryEntry::key).collect();
    let live: HashMap<ObjectKey, serde_json::Value> = case
        .live
        .iter()
        .map(|(e, labels, uid, annotations)| {
            (
                e.key(),
                live_object(labels, &applyset, uid.as_deref(), annotations),
            )
        })
        .collect();
    let decisions = prune_decisions(&case.record, &rendered, &live, &applyset, false);
    let mut out = String::from("prune, in order:\n");
    for (entry, decision) in &decisions {
        let verdict = match decision {
            PruneDecision::Delete => "delete".to_string(),
            PruneDecision::Release => "release".to_string(),
            PruneDecision::Forget(why) => format!("forget ({why})"),
            PruneDecision::Keep(by) => format!("keep ({by})"),
            PruneDecision::Confirm(by) => format!("delete once confirmed ({by})"),
        };
        let _ = writeln!(out, "  {}: {verdict}", entry.line());
    }
    // What is rendered and live is adopted, what is not live is created.
    let applying = case.rendered.iter().map(|e| {
        let uid = case
            .live
            .iter()
            .find(|(l, _, _, _)| l == e)
            .map(|(_, _, uid, _)| uid.clone());
        let provenance = match uid {
            Some(uid) => Provenance::adopted(uid),
            None => Provenance::created(),
        };
        (e.clone(), provenance)
    });
    let before = case.record.before_apply(applying);
    let _ = write!(out, "recorded before applying:\n{}", lines(&before));
    let removed: BTreeSet<ObjectKey> = decisions.iter().map(|(e, _)| e.key()).collect();
    // The server gives each created object a uid.
    let uids: BTreeMap<ObjectKey, String> = case
        .rendered
        .iter()
        .map(|e| (e.key(), format!("uid-of-{}", e.name)))
        .collect();
    let new_commit = Some("9999999".to_string());
    let done = before.after_apply(
        &removed,
        &uids,
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
        &BTreeMap::new(),
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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inventory");
    Cases::files(dir, "txt")
        .at_least(4)
        .check(|case| run(&parse(&std::fs::read_to_string(case).unwrap())));
}
