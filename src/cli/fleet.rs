//! `tether fleet`: a hub's view of many clusters, each reporting on its own
//! (`tether run --sources --fleet-hub-kubeconfig`). `join` and `revoke` are a hub
//! admin's; `status` reads the reports. Every request goes to the hub only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use miette::{IntoDiagnostic, WrapErr};
use tether_admin::fleet as hub;
use tether_api::cluster_report::NAMESPACE;
use tether_core::settings::parse_duration;
use tether_engine::cluster::{Target, connect};

use super::terminal;

#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// Let a cluster report to this hub: its ServiceAccount `cluster-NAME`, a Role that
    /// lets it get, update and patch only its own ClusterReport (named NAME), the
    /// binding, a token, and the empty report; prints (or writes, -o) the kubeconfig
    /// its daemon reports with. Installs the ClusterReport CRD and the namespace when
    /// missing. Safe to run again. The kubeconfig holds the token: treat it as secret.
    #[command(after_help = "Examples:
  tether fleet join edge-1 --hub-kubeconfig hub.yaml -o edge-1-hub.yaml
  kubectl --context edge-1 -n tether-system create secret generic tether-fleet-hub --from-file=kubeconfig=edge-1-hub.yaml")]
    Join(JoinArgs),
    /// Take a cluster's right to report away: its RoleBinding, Role, token Secret and
    /// ServiceAccount are deleted, and the hub's API server refuses its token from
    /// then on. Its last report stays (shown as not reporting) unless --forget.
    #[command(after_help = "Example:\n  tether fleet revoke edge-1 --hub-kubeconfig hub.yaml")]
    Revoke(RevokeArgs),
    /// Every cluster and Source as the clusters reported them, those that need
    /// attention first (stalled, failed, blocked, drifted; clusters not reporting).
    ///
    /// Reads only the hub's ClusterReports: no cluster is contacted. A cluster whose
    /// last report is older than --stale-after (default: three of its heartbeats) is
    /// shown as not reporting since that report. Exits 0 when nothing needs
    /// attention, 1 when something does, 2 on error.
    #[command(after_help = "Examples:
  tether fleet status --hub-kubeconfig hub.yaml
  tether fleet status --attention-only
  tether fleet status -o json | jq '.clusters[] | select(.needsAttention) | .name'")]
    Status(StatusArgs),
}

/// The hub: its kubeconfig and namespace of reports.
#[derive(Debug, clap::Args)]
pub struct HubFlags {
    /// The hub's kubeconfig (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "TETHER_HUB_KUBECONFIG", value_name = "PATH")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// The hub's kubeconfig context (default: its current context).
    #[arg(long, env = "TETHER_HUB_CONTEXT")]
    pub hub_context: Option<String>,
    /// The hub's namespace of ClusterReports.
    #[arg(long, env = "TETHER_FLEET_NAMESPACE", default_value = NAMESPACE)]
    pub fleet_namespace: String,
    /// How long one request to the hub may take.
    #[arg(long, env = "TETHER_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
}

impl HubFlags {
    fn target(&self) -> Target {
        Target {
            kubeconfig: self.hub_kubeconfig.clone(),
            context: self.hub_context.clone(),
            request_timeout: Some(self.request_timeout),
            ..Target::default()
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct JoinArgs {
    /// The cluster's name (a DNS label): its report's, and `--cluster-name` of its daemon.
    pub name: String,
    #[command(flatten)]
    pub hub: HubFlags,
    /// The hub's address as the cluster reaches it (default: the server of the hub's
    /// kubeconfig).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// Write the cluster's kubeconfig to this file (mode 0600) instead of printing it.
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    pub name: String,
    #[command(flatten)]
    pub hub: HubFlags,
    /// Delete the cluster's report too (it then leaves the view).
    #[arg(long)]
    pub forget: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub hub: HubFlags,
    #[arg(short, long, value_enum, default_value_t = StatusFormat::Text)]
    pub output: StatusFormat,
    /// A cluster whose last report is older than this is not reporting (default:
    /// three of its heartbeats, from 30s to 1h).
    #[arg(long, env = "TETHER_FLEET_STALE_AFTER", value_parser = parse_duration)]
    pub stale_after: Option<Duration>,
    /// Show only the clusters and Sources that need attention (the summary counts all).
    #[arg(long)]
    pub attention_only: bool,
}

pub async fn run(command: &FleetCommand) -> miette::Result<ExitCode> {
    match command {
        FleetCommand::Join(args) => join(args).await,
        FleetCommand::Revoke(args) => revoke(args).await,
        FleetCommand::Status(args) => status(args).await,
    }
}

async fn join(args: &JoinArgs) -> miette::Result<ExitCode> {
    hub::check_name(&args.name).map_err(terminal::error)?;
    let target = args.hub.target();
    let server = match &args.server {
        Some(server) => server.clone(),
        None => hub_server(&target).await?,
    };
    let client = connect(&target).await.map_err(terminal::error)?;
    let joined = hub::join(&client, &args.hub.fleet_namespace, &args.name, &server)
        .await
        .map_err(terminal::error)?;
    match &args.output {
        Some(path) => {
            write_private(path, &joined.kubeconfig)?;
            eprintln!(
                "joined {}: ServiceAccount {}/{} may write ClusterReport {} only; its kubeconfig is {}",
                args.name,
                args.hub.fleet_namespace,
                joined.service_account,
                args.name,
                path.display()
            );
        }
        None => {
            print!("{}", joined.kubeconfig);
            eprintln!(
                "joined {}: ServiceAccount {}/{} may write ClusterReport {} only; the kubeconfig above holds its token",
                args.name, args.hub.fleet_namespace, joined.service_account, args.name
            );
        }
    }
    eprintln!(
        "run its daemon with: tether run --sources --cluster-name {} --fleet-hub-kubeconfig PATH",
        args.name
    );
    Ok(ExitCode::SUCCESS)
}

/// The server of the hub's kubeconfig context.
async fn hub_server(target: &Target) -> miette::Result<String> {
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &target.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .into_diagnostic()
                .wrap_err_with(|| format!("cannot read {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .into_diagnostic()
    .wrap_err("cannot read the hub's kubeconfig")?;
    Ok(hub::server_of(&config))
}

/// `text` in a new file only its owner may read.
fn write_private(path: &std::path::Path, text: &str) -> miette::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    file.write_all(text.as_bytes())
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", path.display()))
}

async fn revoke(args: &RevokeArgs) -> miette::Result<ExitCode> {
    hub::check_name(&args.name).map_err(terminal::error)?;
    let client = connect(&args.hub.target()).await.map_err(terminal::error)?;
    let revoked = hub::revoke(&client, &args.hub.fleet_namespace, &args.name, args.forget)
        .await
        .map_err(terminal::error)?;
    for object in &revoked.deleted {
        println!("deleted {object}");
    }
    println!(
        "revoked {}: the hub refuses its token from now on",
        args.name
    );
    Ok(ExitCode::SUCCESS)
}

async fn status(args: &StatusArgs) -> miette::Result<ExitCode> {
    let client = connect(&args.hub.target()).await.map_err(terminal::error)?;
    let reports = hub::reports(&client, &args.hub.fleet_namespace)
        .await
        .map_err(terminal::error)?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let view = tether_core::fleet::view(reports, now, args.stale_after);
    match args.output {
        StatusFormat::Text => print!("{}", tether_core::fleet::text(&view, args.attention_only)),
        StatusFormat::Json => {
            println!("{}", serde_json::to_string_pretty(&view).into_diagnostic()?)
        }
    }
    Ok(match view.needs_attention() {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    })
}
