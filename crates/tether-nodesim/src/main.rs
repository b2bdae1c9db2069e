//! `tether-nodesim`: nodes for the local control plane, in the spirit of kwok. The
//! control plane (scripts/local-cluster) has a real scheduler but no kubelet; this
//! stands in for the kubelet of each simulated node, so the pods kube-scheduler binds
//! there run with IPs and container statuses, complete and go away; and for the
//! storage a local cluster provides (a default StorageClass whose claims get volumes).
//! `scripts/local-cluster up --nodes N` runs it; the tests use it through that script.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

mod kubelet;
mod lifecycle;
mod storage;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use miette::{IntoDiagnostic, WrapErr};

use lifecycle::Action;

#[derive(Parser)]
#[command(version, about = "Simulated nodes for tether's local control plane")]
#[command(after_help = "Examples:
  tether-nodesim run --nodes 2 --kubeconfig ~/.cache/tether/local-cluster/kubeconfig
  tether-nodesim restart web-5d4f8 -n shop            the container restarts (restart count +1)
  tether-nodesim fail web-5d4f8 -n shop -c web        CrashLoopBackOff, or Failed under restartPolicy Never
  tether-nodesim finish migrate-x2x7 -n shop          exit 0: a Job's pod succeeds

Pod annotations read by the simulator (in a pod template or set later):
  sim.tether.dev/run-for: 5s       the containers finish after 5 s (Jobs' pods: 1 s by default)
  sim.tether.dev/exit-code: \"1\"    they finish with this code (non-zero: the pod fails)
  sim.tether.dev/ready: \"false\"    they run unready until `tether-nodesim ready POD`")]
struct Cli {
    /// The kubeconfig of the cluster (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Registers the nodes and runs their pods until stopped.
    Run {
        /// How many nodes: tether-sim-1 … tether-sim-N.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
    },
    /// Restarts a container of a running pod: its restart count rises.
    Restart(Target),
    /// A container exits with an error.
    Fail(Target),
    /// A container exits successfully.
    Finish(Target),
    /// A container becomes ready (one started unready by `sim.tether.dev/ready: "false"`).
    Ready(Target),
}

#[derive(clap::Args)]
struct Target {
    /// The pod.
    pod: String,
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// The container (default: every container of the pod).
    #[arg(short, long)]
    container: Option<String>,
    /// The exit code of a failure.
    #[arg(long, default_value_t = 1)]
    exit_code: i32,
}

#[tokio::main]
async fn main() -> miette::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let client = client(cli.kubeconfig.as_deref()).await?;
    let (action, target) = match cli.command {
        Command::Run { nodes } => return simulate(client, nodes).await,
        Command::Restart(target) => (Action::Restart, target),
        Command::Fail(target) => (Action::Fail, target),
        Command::Finish(target) => (Action::Finish, target),
        Command::Ready(target) => (Action::Ready, target),
    };
    let pod = kubelet::act(
        &client,
        &target.namespace,
        &target.pod,
        target.container.as_deref(),
        action,
        target.exit_code,
    )
    .await
    .into_diagnostic()
    .wrap_err_with(|| format!("cannot {action:?} {}/{}", target.namespace, target.pod))?;
    let status = pod.status.unwrap_or_default();
    for container in status.container_statuses.unwrap_or_default() {
        println!(
            "{}/{} {}: restarts {}, ready {}",
            target.namespace, target.pod, container.name, container.restart_count, container.ready
        );
    }
    println!("phase {}", status.phase.unwrap_or_default());
    Ok(())
}

/// Runs the nodes and their storage until SIGTERM or Ctrl-C; a lost watch is
/// started again.
async fn simulate(client: Client, nodes: usize) -> miette::Result<()> {
    let kubelets = async {
        loop {
            if let Err(error) = kubelet::run(client.clone(), nodes).await {
                tracing::warn!(%error, "the simulator stopped; starting again");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let storage = async {
        loop {
            if let Err(error) = storage::run(client.clone()).await {
                tracing::warn!(%error, "the storage provisioner stopped; starting again");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let run = futures::future::join(kubelets, storage);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .into_diagnostic()?;
    tokio::select! {
        _ = run => {}
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

async fn client(kubeconfig: Option<&std::path::Path>) -> miette::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .into_diagnostic()
                .wrap_err_with(|| format!("cannot read the kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .into_diagnostic()?
        }
        None => Config::infer().await.into_diagnostic()?,
    };
    Client::try_from(config).into_diagnostic()
}
