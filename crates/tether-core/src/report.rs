//! Reports of a plan, for people and programs: text (colour on a terminal),
//! Markdown for a pull request comment, and JSON with a stable schema
//! (`tether.dev/diff/v1`, documented in the book's reference/json-formats.md). Same
//! plan, same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::inventory::Contents;
use crate::inventory::budget::{APPROVE_DELETIONS_TRAILER, PruneHold};
use crate::inventory::contents::{Guard, guard};
use crate::k8s::ObjectKey;
use crate::plan::{Action, Change, Plan};
use crate::remedy::{Remedy, RemedyNames};

const ACTIONS: [Action; 8] = [
    Action::Create,
    Action::Update,
    Action::Delete,
    Action::Conflict,
    Action::Error,
    Action::Release,
    Action::Replace,
    Action::RemoveHost,
];

/// What a host removal does, for the reviewer.
const REMOVE_HOST_NOTE: &str = "the host is leaving: its node is cordoned, these pods are evicted (disruption budgets respected) or deleted, then the Node is deleted";
/// Why nothing is applied to an absent node.
const ABSENT_NOTE: &str = "the node is not in the cluster: nothing is applied until it joins (tether never creates a node)";

/// What a release does, for the reviewer.
const RELEASE_NOTE: &str =
    "tether adopted this object: it removes its labels and field ownership and keeps the object";

fn headline(plan: &Plan) -> String {
    let revision = plan
        .revision
        .as_ref()
        .map(|r| format!(" @ {r}"))
        .unwrap_or_default();
    let cluster = plan
        .cluster
        .as_ref()
        .map(|c| format!(" → cluster {c}"))
        .unwrap_or_default();
    format!("{}{revision}{cluster}", plan.source)
}

fn counts(plan: &Plan) -> String {
    let mut parts: Vec<String> = ACTIONS[..3]
        .iter()
        .map(|a| format!("{} to {}", plan.count(*a), a.name()))
        .collect();
    parts.push(format!("{} in conflict", plan.count(Action::Conflict)));
    parts.push(format!("{} unchanged", plan.count(Action::Unchanged)));
    if plan.has_errors() {
        parts.push(format!(
            "{} could not be planned",
            plan.count(Action::Error)
        ));
    }
    if plan.count(Action::Release) > 0 {
        parts.push(format!("{} to release", plan.count(Action::Release)));
    }
    if plan.count(Action::Replace) > 0 {
        parts.push(format!(
            "{} to replace (deleted and created again)",
            plan.count(Action::Replace)
        ));
    }
    if plan.count(Action::RemoveHost) > 0 {
        parts.push(format!(
            "{} hosts to remove",
            plan.count(Action::RemoveHost)
        ));
    }
    if plan.count(Action::Skip) > 0 {
        parts.push(format!(
            "{} skipped by their annotations",
            plan.count(Action::Skip)
        ));
    }
    if plan.count(Action::Absent) > 0 {
        parts.push(format!(
            "{} nodes not in the cluster",
            plan.count(Action::Absent)
        ));
    }
    let ignored: usize = plan.changes.iter().map(|c| c.ignored.len()).sum();
    if ignored > 0 {
        parts.push(format!("ignored: {}", fields(ignored)));
    }
    parts.join(", ")
}

/// The heading of the group of changes that starts at `change`, when the plan has
/// waves and this change opens a new group: a wave, or the prune after the last.
fn group_heading(plan: &Plan, previous: Option<&Change>, change: &Change) -> Option<String> {
    if plan.waves.is_empty() || previous.is_some_and(|p| p.wave == change.wave) {
        return None;
    }
    let total = plan.waves.len();
    Some(match change.wave {
        Some(wave) => {
            let waits = plan
                .waves
                .get(wave)
                .map(|w| w.waits_for.as_slice())
                .unwrap_or_default();
            match waits.is_empty() {
                true => format!("wave {} of {total}", wave + 1),
                false => format!(
                    "wave {} of {total}, once these are ready: {}",
                    wave + 1,
                    waits.join(", ")
                ),
            }
        }
        None => "after the last wave".to_string(),
    })
}

/// The changes a report shows (not the unchanged ones), each with the headings of
/// the groups it opens: its wave's, then, for a chart's or a kustomization's objects,
/// the step's. Within a wave, a chart's or a kustomization's changes come together
/// after the others, so that a reviewer reads a chart as one.
fn shown_changes(plan: &Plan) -> Vec<(Vec<String>, &Change)> {
    let shown: Vec<&Change> = plan
        .changes
        .iter()
        .filter(|c| c.action != Action::Unchanged || !c.ignored.is_empty())
        .collect();
    let mut ordered: Vec<&Change> = Vec::with_capacity(shown.len());
    for wave in shown.chunk_by(|a, b| a.wave == b.wave) {
        ordered.extend(wave.iter().filter(|c| step_of(c).is_none()));
        let mut steps: Vec<&str> = Vec::new();
        for step in wave.iter().filter_map(|c| step_of(c)) {
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
        for step in steps {
            ordered.extend(wave.iter().filter(|c| step_of(c) == Some(step)));
        }
    }
    let mut previous: Option<&Change> = None;
    ordered
        .into_iter()
        .map(|change| {
            let mut headings: Vec<String> =
                group_heading(plan, previous, change).into_iter().collect();
            if let Some(step) = step_of(change)
                && (!headings.is_empty() || previous.and_then(|p| step_of(p)) != Some(step))
            {
                headings.push(step.to_string());
            }
            previous = Some(change);
            (headings, change)
        })
        .collect()
}

/// The chart or kustomization a change's object comes from, if it comes from one.
fn step_of(change: &Change) -> Option<&str> {
    change
        .model
        .as_deref()
        .filter(|m| m.starts_with("HelmChart/") || m.starts_with("Kustomization/"))
}

fn origin(change: &Change) -> String {
    match (&change.model, &change.source) {
        (Some(model), Some(source)) => format!(" ({model}, {source})"),
        (Some(model), None) => format!(" ({model})"),
        _ => String::new(),
    }
}

/// Plain or coloured text, one block per changed object.
pub fn text(plan: &Plan, colour: bool, remedies: RemedyNames) -> String {
    let paint = |code: &str, s: &str| {
        if colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let with_prune = format!("(with {})", remedies(Remedy::Prune));
    let mut out = format!("tether diff: {}\n", headline(plan));
    for warning in &plan.warnings {
        let _ = writeln!(out, "{} {warning}", paint("33;1", "warning:"));
    }
    if let Some(hold) = &plan.prune_hold {
        let _ = writeln!(
            out,
            "{} {}",
            paint("31;1", "held:"),
            held_text(hold, remedies)
        );
    }
    for (headings, change) in shown_changes(plan) {
        for heading in headings {
            let _ = writeln!(out, "\n{}", paint("1", &format!("== {heading}")));
        }
        let verb = match change.action {
            Action::Create => paint("32;1", "create"),
            Action::Update => paint("33;1", "update"),
            Action::Delete if plan.prune => paint("31;1", "delete"),
            Action::Delete => paint("31;1", &format!("delete {with_prune}")),
            Action::Conflict => paint("35;1", "conflict"),
            Action::Error => paint("31;1", "error"),
            Action::Release if plan.prune => paint("33;1", "release"),
            Action::Release => paint("33;1", &format!("release {with_prune}")),
            Action::Replace => paint("33;1", "replace"),
            Action::RemoveHost if plan.prune => paint("31;1", "remove host"),
            Action::RemoveHost => paint("31;1", &format!("remove host {with_prune}")),
            Action::Absent => paint("33;1", "absent"),
            Action::Skip => paint("33;1", "skip"),
            Action::Unchanged => "unchanged".to_string(),
        };
        let _ = writeln!(out, "\n{verb} {}{}", change.key, origin(change));
        if let Some(error) = &change.error {
            let _ = writeln!(out, "  {}", one_line(error));
        }
        if let Some(note) = note(change) {
            let _ = writeln!(out, "  {note}");
        }
        if let Some(ignored) = ignored_text(change) {
            let _ = writeln!(out, "  {ignored}");
        }
        if let Some(contents) = &change.contents {
            let _ = writeln!(out, "  {}", contents_text(change, contents));
        }
        for conflict in &change.conflicts {
            let _ = writeln!(
                out,
                "  field {} is owned by {}",
                conflict.field, conflict.manager
            );
        }
        for line in change.diff.lines() {
            let styled = match line.as_bytes().first() {
                _ if line.starts_with("---") || line.starts_with("+++") => paint("1", line),
                Some(b'+') => paint("32", line),
                Some(b'-') => paint("31", line),
                Some(b'@') => paint("36", line),
                _ => line.to_string(),
            };
            let _ = writeln!(out, "  {styled}");
        }
    }
    if plan.has_differences() && !plan.hooks.is_empty() {
        let heading = "== hooks, made anew by the apply in their phase";
        let _ = writeln!(out, "\n{}", paint("1", heading));
        for hook in &plan.hooks {
            let _ = writeln!(out, "  {hook}");
        }
    }
    let _ = writeln!(out, "\n{}", counts(plan));
    out
}

/// A pull request comment: a summary table per kind, then each change in a
/// collapsible block.
#[expect(
    clippy::too_many_lines,
    reason = "the comment written top to bottom: summary, graph, waves, changes"
)]
pub fn markdown(plan: &Plan, remedies: RemedyNames) -> String {
    let mut out = format!("### tether diff\n\n`{}`\n\n", headline(plan));
    for warning in &plan.warnings {
        let _ = writeln!(out, "> **Warning:** {warning}\n");
    }
    if !plan.has_differences() {
        let _ = writeln!(
            out,
            "No changes: the cluster matches ({} objects unchanged).",
            plan.count(Action::Unchanged)
        );
        return out;
    }
    if let Some(graph) = &plan.graph {
        let _ = write!(out, "```mermaid\n{graph}```\n\n");
    }
    let mut by_kind: BTreeMap<&str, [usize; 8]> = BTreeMap::new();
    for change in &plan.changes {
        if let Some(i) = ACTIONS.iter().position(|a| *a == change.action) {
            by_kind.entry(&change.key.kind).or_default()[i] += 1;
        }
    }
    out.push_str(
        "| Kind | Create | Update | Delete | Conflict | Error | Release | Replace | Remove host |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (kind, n) in &by_kind {
        let _ = writeln!(
            out,
            "| {kind} | {} | {} | {} | {} | {} | {} | {} | {} |",
            n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]
        );
    }
    if plan.has_errors() {
        out.push_str("\n| Could not be planned | Error |\n|---|---|\n");
        for change in plan.changes.iter().filter(|c| c.action == Action::Error) {
            let error = change.error.as_deref().unwrap_or_default();
            let _ = writeln!(
                out,
                "| {} | {} |",
                table_cell(&change.key.to_string()),
                table_cell(&one_line(error))
            );
        }
    }
    let _ = writeln!(out, "\n{}.", counts(plan));
    if let Some(hold) = &plan.prune_hold {
        let _ = writeln!(out, "\n> **Held.** {}", held_text(hold, remedies));
    }
    if plan.count(Action::Delete) + plan.count(Action::RemoveHost) > 0 && !plan.prune {
        let _ = writeln!(
            out,
            "Deletions happen only with `tether apply {}`.",
            remedies(Remedy::Prune)
        );
    }
    for (headings, change) in shown_changes(plan) {
        for heading in headings {
            let _ = writeln!(out, "\n#### {heading}");
        }
        let _ = write!(
            out,
            "\n<details><summary><b>{}</b> {}{}</summary>\n\n",
            change.action.name(),
            change.key,
            origin(change)
        );
        for conflict in &change.conflicts {
            let _ = writeln!(
                out,
                "- field `{}` is owned by `{}`",
                conflict.field, conflict.manager
            );
        }
        if let Some(note) = note(change) {
            let _ = writeln!(out, "{note}\n");
        }
        if let Some(ignored) = ignored_text(change) {
            let _ = writeln!(out, "{ignored}\n");
        }
        if let Some(contents) = &change.contents {
            let _ = writeln!(out, "{}\n", contents_text(change, contents));
        }
        if !change.conflicts.is_empty() {
            out.push('\n');
        }
        // A fence longer than any run of backticks in the diff.
        let fence = "`".repeat(3.max(longest_backtick_run(&change.diff) + 1));
        let _ = write!(out, "{fence}diff\n{}{fence}\n\n</details>\n", change.diff);
    }
    out
}

/// What the reviewer is told beside the diff of a change: the annotation that
/// decided it, or what its action does.
fn note(change: &Change) -> Option<String> {
    if let Some(directive) = &change.directive {
        let does = match change.action {
            Action::Skip => "not applied",
            Action::Release => "kept: released from the inventory, never deleted",
            Action::Replace => {
                "deleted and created again, since the server refuses the change in place"
            }
            Action::Delete => "deleted once a person approves the prune's deletions",
            _ => "read",
        };
        return Some(format!("{does} ({directive})"));
    }
    if change.action == Action::Delete && guard(change.deletion(), false) == Some(Guard::Volume) {
        return Some(format!(
            "kept: a PersistentVolumeClaim's volume, and its data, usually go with it; it is deleted once it carries {WITH_OPT_IN}"
        ));
    }
    if let (Action::Delete, Some(by), None) =
        (change.action, &change.with_contents, &change.contents)
    {
        return Some(format!("deleted with its volume ({by})"));
    }
    match change.action {
        Action::Release => Some(RELEASE_NOTE),
        Action::RemoveHost => Some(REMOVE_HOST_NOTE),
        Action::Absent => Some(ABSENT_NOTE),
        _ => None,
    }
    .map(str::to_string)
}

/// The fields of a change left to other managers, when there are any.
fn ignored_text(change: &Change) -> Option<String> {
    (!change.ignored.is_empty()).then(|| {
        format!(
            "ignored: {} ({}), left to the managers that own them",
            fields(change.ignored.len()),
            change.ignored.join(", ")
        )
    })
}

fn fields(n: usize) -> String {
    match n {
        1 => "1 field".into(),
        n => format!("{n} fields"),
    }
}

/// A held prune, and how to approve it.
pub fn held_text(hold: &PruneHold, remedies: RemedyNames) -> String {
    format!(
        "{}: approve exactly these deletions with {} {} (or with the trailer {APPROVE_DELETIONS_TRAILER}: and that digest in a commit), or fix the commit",
        hold.describe(),
        remedies(Remedy::ApproveDeletions),
        hold.digest
    )
}

/// How an object opts in to being deleted with what it holds.
const WITH_OPT_IN: &str = "the annotation tether.dev/prune: with-contents (kubectl annotate it, or write it in Git before its model goes)";

/// What a Namespace or a CustomResourceDefinition to delete or release holds, by
/// owner, and whether that keeps it.
fn contents_text(change: &Change, contents: &Contents) -> String {
    let counts: Vec<String> = contents
        .by_kind
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    if counts.is_empty() {
        return "it holds nothing else".to_string();
    }
    let mut text = format!("it holds {}", counts.join(", "));
    if contents.not_created_here() == 0 {
        text.push_str(", all created by this inventory");
        return text;
    }
    let _ = write!(
        text,
        "; {} created by this inventory",
        contents.this_inventory
    );
    let mut others: BTreeMap<&str, Vec<&ObjectKey>> = BTreeMap::new();
    for (key, inventory) in &contents.other_inventories {
        others.entry(inventory).or_default().push(key);
    }
    for (inventory, keys) in others {
        let _ = write!(text, "; of the inventory {inventory}: {}", listed(&keys));
    }
    if !contents.no_inventory.is_empty() {
        let keys: Vec<&ObjectKey> = contents.no_inventory.iter().collect();
        let _ = write!(text, "; of no inventory: {}", listed(&keys));
    }
    if change.action == Action::Delete {
        match (&change.with_contents, guard(change.deletion(), false)) {
            (Some(by), _) => {
                let _ = write!(text, ". It is deleted with them ({by})");
            }
            (None, Some(_)) => {
                let _ = write!(text, ". It is kept unless it carries {WITH_OPT_IN}");
            }
            (None, None) => {}
        }
    }
    text
}

/// Objects by name, the first 20 of them, then how many more.
fn listed(keys: &[&ObjectKey]) -> String {
    let names: Vec<String> = keys.iter().take(20).map(ToString::to_string).collect();
    match keys.len().saturating_sub(20) {
        0 => names.join(", "),
        n => format!("{} and {n} more", names.join(", ")),
    }
}

/// An error on one line, cut to a length a report line can hold.
fn one_line(text: &str) -> String {
    cut(&text.split_whitespace().collect::<Vec<_>>().join(" "), 400)
}

/// `text` cut after `limit` characters, saying how long it was: a value in a message
/// may be a megabyte.
pub fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}… ({} characters)", &text[..end], text.len()),
        None => text.to_string(),
    }
}

/// Text safe inside a Markdown table cell.
fn table_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('`', "'")
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// The JSON report. Schema `tether.dev/diff/v1`: `source`, `revision` (`commit`,
/// `dirty`) or null, `prune`, `summary` (counts per action), and `changes`: every
/// object, in apply order then deletions, with `action`, `apiVersion`, `kind`,
/// `namespace` (or null), `name`, `model`, `source`, `diff` (unified, Secret values
/// masked; empty when unchanged), `wave` (the wave of the workflow it is applied in,
/// null for deletions), `conflicts` (`field`, `manager`), `error` (why
/// an object with action `error` could not be planned, else null) and `ownedBy` (the
/// other tether inventory the object belongs to, else null).
pub fn json(plan: &Plan) -> String {
    let mut text = serde_json::to_string_pretty(&json_value(plan)).unwrap_or_default();
    text.push('\n');
    text
}

/// The JSON report of one plan, as a value (a report of several clusters holds one
/// per cluster).
pub fn json_value(plan: &Plan) -> serde_json::Value {
    let changes: Vec<serde_json::Value> = plan
        .changes
        .iter()
        .map(|c| {
            json!({
                "action": c.action.name(),
                "wave": c.wave,
                "apiVersion": c.api_version,
                "kind": c.key.kind,
                "namespace": c.key.namespace,
                "name": c.key.name,
                "model": c.model,
                "source": c.source,
                "diff": c.diff,
                "conflicts": c.conflicts.iter().map(|x| json!({"field": x.field, "manager": x.manager})).collect::<Vec<_>>(),
                "error": c.error,
                "ownedBy": c.owned_by,
                "directive": c.directive,
                "ignored": c.ignored,
                "namespaceContents": c.contents.as_ref().map(|n| json!({
                    "byKind": n.by_kind,
                    "thisInventory": n.this_inventory,
                    "otherInventories": n.other_inventories.iter().map(|(key, inventory)| json!({"object": key.to_string(), "inventory": inventory})).collect::<Vec<_>>(),
                    "notCreatedHere": n.other_inventories.iter().map(|(key, _)| key).chain(&n.no_inventory).map(ToString::to_string).collect::<Vec<_>>(),
                })),
            })
        })
        .collect();
    json!({
        "schema": "tether.dev/diff/v1",
        "source": plan.source,
        "cluster": plan.cluster,
        "revision": plan.revision.as_ref().map(|r| json!({"commit": r.commit, "dirty": r.dirty})),
        "prune": plan.prune,
        "warnings": plan.warnings,
        "hooks": plan.hooks,
        "summary": {
            "create": plan.count(Action::Create),
            "update": plan.count(Action::Update),
            "delete": plan.count(Action::Delete),
            "conflict": plan.count(Action::Conflict),
            "unchanged": plan.count(Action::Unchanged),
            "error": plan.count(Action::Error),
            "release": plan.count(Action::Release),
            "replace": plan.count(Action::Replace),
            "removeHost": plan.count(Action::RemoveHost),
            "absent": plan.count(Action::Absent),
            "skip": plan.count(Action::Skip),
        },
        "pruneHold": plan.prune_hold.as_ref().map(|h| json!({
            "deleting": h.deleting,
            "recorded": h.recorded,
            "digest": h.digest,
            "budget": h.beyond.map(|b| json!({"count": b.count, "percent": b.percent})),
            "confirming": h.confirming,
        })),
        "waves": plan.waves.iter().map(|w| json!({"waitsFor": w.waits_for})).collect::<Vec<_>>(),
        "changes": changes,
    })
}
