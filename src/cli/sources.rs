//! `suspend`, `resume` and `tree`: a Source, as its user handles it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;

use kube::Api;
use kube::api::{Patch, PatchParams};
use miette::{IntoDiagnostic, WrapErr};
use tether_api::source_spec::Source;
use tether_core::inventory::{InventoryEntry, InventoryRecord, Origin, Provenance};
use tether_core::ownership::Inventory;
use tether_engine::cluster::{Resources, connect};
use tether_engine::handover::{Left, hand_over};
use tether_engine::record::read_inventory;

use super::flags::ClusterFlags;
use super::terminal;

#[derive(Debug, clap::Args)]
pub struct SourceArgs {
    /// The Source's name.
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// The Source's namespace.
    #[arg(short, long, env = "TETHER_NAMESPACE", default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

impl SourceArgs {
    fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.source)
    }
}

async fn source_api(args: &SourceArgs) -> miette::Result<Api<Source>> {
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    Ok(Api::namespaced(client, &args.namespace))
}

#[derive(Debug, clap::Args)]
pub struct HandoverArgs {
    /// The inventory that recorded the objects (`tether apply`'s --inventory-name).
    #[arg(long, default_value = "tether")]
    pub from_inventory_name: String,
    /// Its namespace (`tether apply`'s --inventory-namespace).
    #[arg(long, default_value = "default")]
    pub from_inventory_namespace: String,
    // Last: the connection flags it ends with bring their own heading.
    #[command(flatten)]
    pub source: SourceArgs,
}

/// `handover`: what `tether apply` applied becomes the Source's.
pub async fn handover(args: &HandoverArgs) -> miette::Result<ExitCode> {
    let api = source_api(&args.source).await?;
    let source = api
        .get(&args.source.source)
        .await
        .map_err(terminal::error)
        .wrap_err_with(|| format!("cannot read the Source {}", args.source.id()))?;
    let receiver = source
        .spec
        .inventory_of(&args.source.namespace, &args.source.source);
    let giver = Inventory {
        name: args.from_inventory_name.clone(),
        namespace: args.from_inventory_namespace.clone(),
    };
    if giver == receiver {
        return Err(miette::miette!(
            "the Source's inventory is {}: there is nothing to hand over",
            giver.display()
        ));
    }
    let handover = hand_over(&api.into_client(), &giver, &receiver)
        .await
        .map_err(terminal::error)?;
    let mut out = std::io::stdout().lock();
    for entry in &handover.moved {
        writeln!(out, "{} handed over", describe(entry)).into_diagnostic()?;
    }
    for entry in &handover.already_moved {
        writeln!(
            out,
            "{} already the Source's: forgotten by {}",
            describe(entry),
            giver.display()
        )
        .into_diagnostic()?;
    }
    for (entry, why) in &handover.left {
        let why = match why {
            Left::Gone => "not in the cluster any more: forgotten".to_string(),
            Left::OwnedElsewhere(id) => format!("left: labelled as another inventory's ({id})"),
        };
        writeln!(out, "{} {why}", describe(entry)).into_diagnostic()?;
    }
    writeln!(
        out,
        "{} objects handed over from {} to the Source {} (inventory {})",
        handover.moved.len(),
        giver.display(),
        args.source.id(),
        receiver.display()
    )
    .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}

/// `Kind namespace/name`, or `Kind name`.
fn describe(entry: &InventoryEntry) -> String {
    match &entry.namespace {
        Some(ns) => format!("{} {ns}/{}", entry.kind, entry.name),
        None => format!("{} {}", entry.kind, entry.name),
    }
}

/// `suspend` (true) and `resume` (false): sets spec.suspend; the daemon stops the
/// Source's loop, or starts it, when it sees the change.
pub async fn set_suspend(args: &SourceArgs, suspend: bool) -> miette::Result<ExitCode> {
    let api = source_api(args).await?;
    let patch = serde_json::json!({ "spec": { "suspend": suspend } });
    api.patch(&args.source, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(terminal::error)
        .wrap_err_with(|| format!("cannot update the Source {}", args.id()))?;
    let word = if suspend { "suspended" } else { "resumed" };
    println!("Source {} {word}", args.id());
    Ok(ExitCode::SUCCESS)
}

/// `tree`: the Source's inventory, each object checked against the cluster.
pub async fn tree(args: &SourceArgs) -> miette::Result<ExitCode> {
    let api = source_api(args).await?;
    let source = api
        .get(&args.source)
        .await
        .map_err(terminal::error)
        .wrap_err_with(|| format!("cannot read the Source {}", args.id()))?;
    let inventory = source.spec.inventory_of(&args.namespace, &args.source);
    let client = api.into_client();
    let record = read_inventory(&client, &inventory)
        .await
        .map_err(terminal::error)?;
    let missing = missing_objects(&client, &record).await?;
    let status = source.status.unwrap_or_default();
    let revision = status
        .last_applied_revision
        .clone()
        .unwrap_or_else(|| "nothing applied yet".into());
    let mut heading = format!(
        "Source/{} ({revision}), inventory {}",
        args.id(),
        inventory.display()
    );
    // Why what is applied may not be the ref's newest commit (an unverified commit,
    // invalid models): the status's words.
    if let Some(ready) = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "False")
    {
        heading.push_str(&format!(
            "\nnot ready ({}): {}",
            ready.reason, ready.message
        ));
    }
    std::io::stdout()
        .lock()
        .write_all(draw_tree(&heading, &record, &missing).as_bytes())
        .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}

/// The recorded objects that the cluster does not have.
async fn missing_objects(
    client: &kube::Client,
    record: &InventoryRecord,
) -> miette::Result<BTreeSet<InventoryEntry>> {
    let kinds = record
        .entries
        .keys()
        .map(|e| (e.api_version.clone(), e.kind.clone()))
        .collect();
    let resources = Resources::discover(client, &kinds)
        .await
        .map_err(terminal::error)?;
    let mut missing = BTreeSet::new();
    for entry in record.entries.keys() {
        let found = match resources.api(&entry.api_version, &entry.kind, entry.namespace.as_deref())
        {
            Ok(api) => api
                .get_metadata_opt(&entry.name)
                .await
                .map_err(terminal::error)
                .wrap_err_with(|| format!("cannot read {} {}", entry.kind, entry.name))?
                .is_some(),
            // A kind the server no longer serves has no objects.
            Err(_) => false,
        };
        if !found {
            missing.insert(entry.clone());
        }
    }
    Ok(missing)
}

/// The inventory as a tree: cluster-scoped objects, then each namespace's.
fn draw_tree(
    heading: &str,
    record: &InventoryRecord,
    missing: &BTreeSet<InventoryEntry>,
) -> String {
    let mut groups: BTreeMap<Option<&str>, Vec<(&InventoryEntry, &Provenance)>> = BTreeMap::new();
    for (entry, provenance) in &record.entries {
        groups
            .entry(entry.namespace.as_deref())
            .or_default()
            .push((entry, provenance));
    }
    let mut text = format!("{heading}\n");
    if record.entries.is_empty() {
        text.push_str("└── (no objects)\n");
        return text;
    }
    let count = groups.len();
    for (index, (namespace, entries)) in groups.into_iter().enumerate() {
        let last_group = index + 1 == count;
        let (branch, indent) = if last_group {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        text.push_str(&format!(
            "{branch}{}\n",
            namespace.map_or("(cluster)".to_string(), |ns| format!("namespace {ns}"))
        ));
        for (position, (entry, provenance)) in entries.iter().enumerate() {
            let leaf = if position + 1 == entries.len() {
                "└── "
            } else {
                "├── "
            };
            let mut notes = Vec::new();
            if provenance.origin == Origin::Adopted {
                notes.push("adopted");
            }
            if missing.contains(entry) {
                notes.push("missing");
            }
            let notes = match notes.is_empty() {
                true => String::new(),
                false => format!(" [{}]", notes.join(", ")),
            };
            text.push_str(&format!(
                "{indent}{leaf}{}/{} ({}){notes}\n",
                entry.kind, entry.name, entry.api_version
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, namespace: Option<&str>, name: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    #[test]
    fn the_tree_groups_by_namespace_and_marks_adopted_and_missing_objects() {
        let mut record = InventoryRecord::default();
        let created = Provenance {
            origin: Origin::Created,
            uid: None,
        };
        let adopted = Provenance {
            origin: Origin::Adopted,
            uid: None,
        };
        record
            .entries
            .insert(entry("Namespace", None, "shop"), created.clone());
        record
            .entries
            .insert(entry("ConfigMap", Some("shop"), "a"), created.clone());
        record
            .entries
            .insert(entry("Secret", Some("shop"), "b"), adopted);
        let missing = BTreeSet::from([entry("ConfigMap", Some("shop"), "a")]);
        let expected = [
            "Source/x/web",
            "├── (cluster)",
            "│   └── Namespace/shop (v1)",
            "└── namespace shop",
            "    ├── ConfigMap/a (v1) [missing]",
            "    └── Secret/b (v1) [adopted]",
        ];
        assert_eq!(
            draw_tree("Source/x/web", &record, &missing),
            format!("{}\n", expected.join("\n"))
        );
    }
}
