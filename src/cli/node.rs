//! `tether node`: a host's labels and lock (StarlingX's `host-label-assign/list/remove`
//! and `host-lock/unlock`), each a commit to the Node model, then applied.

use std::collections::BTreeMap;
use std::process::ExitCode;

use kube::Api;
use tether_core::model::Models;
use tether_core::operation::{HostChange, Operation};
use tether_engine::actions::Request;
use tether_engine::cluster::connect;

use crate::cli::flags::{ClusterFlags, KeyFlags};

use super::args::GlobalArgs;
use super::operate::{CommitArgs, ModelsArgs, commit_and_apply};
use super::terminal;

#[derive(Debug, clap::Subcommand)]
pub enum NodeCommand {
    /// A host's labels: assign, list, remove.
    #[command(subcommand)]
    Label(LabelCommand),
    /// Lock a host: its Node model gets `locked: true`, so the node is cordoned and
    /// carries tether's NoExecute taint; pods that do not tolerate it leave.
    Lock(HostArgs),
    /// Unlock a host: `locked: false`; the cordon and the taint tether set go.
    Unlock(HostArgs),
}

#[derive(Debug, clap::Subcommand)]
pub enum LabelCommand {
    /// Set labels on a host (added, or given a new value).
    #[command(
        after_help = "Example:\n  tether node label assign controller-0 openstack-control-plane=enabled"
    )]
    Assign(AssignArgs),
    /// The labels of the hosts' models, whether the live node carries each, and the
    /// pods discovery recorded on each host.
    List(ListArgs),
    /// Remove labels from a host, by key.
    Remove(RemoveArgs),
}

#[derive(Debug, clap::Args)]
pub struct HostArgs {
    /// The host: the name of its Node model (the Kubernetes node's name).
    pub host: String,
    #[command(flatten)]
    pub commit: CommitArgs,
}

#[derive(Debug, clap::Args)]
pub struct AssignArgs {
    pub host: String,
    /// key=value pairs.
    #[arg(required = true, value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    #[command(flatten)]
    pub commit: CommitArgs,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    pub host: String,
    /// Label keys.
    #[arg(required = true)]
    pub keys: Vec<String>,
    #[command(flatten)]
    pub commit: CommitArgs,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this host.
    pub host: Option<String>,
    #[command(flatten)]
    pub models: ModelsArgs,
    /// Do not ask the cluster which labels the nodes carry.
    #[arg(long)]
    pub offline: bool,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("\"{text}\" is not key=value")),
    }
}

pub async fn run(global: &GlobalArgs, command: &NodeCommand) -> miette::Result<ExitCode> {
    let (host, commit, change) = match command {
        NodeCommand::Label(LabelCommand::List(args)) => return list(args).await,
        NodeCommand::Label(LabelCommand::Assign(args)) => (
            &args.host,
            &args.commit,
            HostChange::Label(args.labels.clone()),
        ),
        NodeCommand::Label(LabelCommand::Remove(args)) => (
            &args.host,
            &args.commit,
            HostChange::Unlabel(args.keys.clone()),
        ),
        NodeCommand::Lock(args) => (&args.host, &args.commit, HostChange::Lock(true)),
        NodeCommand::Unlock(args) => (&args.host, &args.commit, HostChange::Lock(false)),
    };
    let operation = Operation::Host {
        host: host.clone(),
        change,
    };
    let model = format!("Node/{host}");
    commit_and_apply(global, commit, &model, Request::Now(operation)).await
}

/// Prints each host's labels as the models hold them, with whether the live node
/// carries each (`yes`, `no`, `other value`, or `?` offline or when the node is not
/// in the cluster), then the pods discovery recorded on it.
async fn list(args: &ListArgs) -> miette::Result<ExitCode> {
    let mut loaded = args
        .models
        .source()?
        .load()
        .await
        .map_err(terminal::error)?;
    loaded.files = tether_sops::open_files(loaded.files, &args.keys.keyring()?);
    let models = tether_core::operation::read_models(&loaded.files);
    let hosts: Vec<_> = models
        .hosts
        .iter()
        .filter(|h| args.host.as_ref().is_none_or(|n| *n == h.name.value))
        .collect();
    if let (Some(name), true) = (&args.host, hosts.is_empty()) {
        return Err(terminal::error(
            tether_core::operation::OperationError::UnknownHost {
                name: name.clone(),
                suggestion: None,
            },
        ));
    }
    let live = match args.offline {
        true => None,
        false => live_labels(&args.cluster, &models).await,
    };
    println!("{:<24} {:<40} {:<24} LIVE", "HOST", "KEY", "VALUE");
    for host in &hosts {
        let node = live.as_ref().and_then(|l| l.get(&host.name.value));
        for (key, value) in &host.labels {
            let carried = match (&live, node) {
                (None, _) | (Some(_), None) => "?",
                (Some(_), Some(labels)) => match labels.get(&key.value) {
                    Some(v) if *v == value.value => "yes",
                    Some(_) => "other value",
                    None => "no",
                },
            };
            println!(
                "{:<24} {:<40} {:<24} {carried}",
                host.name.value, key.value, value.value
            );
        }
        if host.is_locked() {
            println!("{:<24} (locked)", host.name.value);
        }
    }
    for host in &hosts {
        let pods: Vec<String> = models
            .instances
            .iter()
            .filter(|i| i.node.as_ref().is_some_and(|n| n.value == host.name.value))
            .map(|i| i.name.value.clone())
            .collect();
        if !pods.is_empty() {
            println!(
                "\npods on {} (as discovered): {}",
                host.name.value,
                pods.join(", ")
            );
        }
    }
    if live.is_none() && !args.offline {
        eprintln!("note: the cluster could not be read, so LIVE is ?");
    }
    Ok(ExitCode::SUCCESS)
}

/// The labels of the live nodes, by node name; `None` when the cluster cannot be read.
async fn live_labels(
    cluster: &ClusterFlags,
    models: &Models,
) -> Option<BTreeMap<String, BTreeMap<String, String>>> {
    if models.hosts.is_empty() {
        return Some(BTreeMap::new());
    }
    let client = connect(&cluster.target()).await.ok()?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    let list = nodes.list(&Default::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .map(|n| {
                let name = n.metadata.name.unwrap_or_default();
                (name, n.metadata.labels.unwrap_or_default())
            })
            .collect(),
    )
}
