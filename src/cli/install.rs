//! `install`, `uninstall`: the daemon into a cluster and out of it.

use std::io::Write;
use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_admin::install::{self, InstallOptions, NEWEST_SUPPORTED, Support, manifests};
use tether_core::render::yaml_stream;
use tether_engine::cluster::connect;

use super::flags::ClusterFlags;
use super::terminal;

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Print the objects as YAML instead of applying them (for a GitOps repository);
    /// the webhook Secret is left out: no secret goes to Git.
    #[arg(long)]
    pub export: bool,
    /// The daemon's namespace.
    #[arg(long, default_value = "tether-system")]
    pub namespace: String,
    /// The daemon's image (default: the release image of this version).
    #[arg(long)]
    pub image: Option<String>,
    /// How many replicas run (they share the Sources, each Source run by one; a
    /// stopped replica's Sources move to the others).
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// The StorageClass of each replica's state volume (default: the cluster's).
    #[arg(long)]
    pub storage_class: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Debug, clap::Args)]
pub struct UninstallArgs {
    /// The daemon's namespace.
    #[arg(long, default_value = "tether-system")]
    pub namespace: String,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

fn options(args: &InstallArgs) -> InstallOptions {
    let mut options = InstallOptions::new();
    options.namespace = args.namespace.clone();
    options.replicas = args.replicas;
    options.storage_class = args.storage_class.clone();
    if let Some(image) = &args.image {
        options.image = image.clone();
    }
    options
}

pub async fn install(args: &InstallArgs) -> miette::Result<ExitCode> {
    if args.export {
        let text = yaml_stream(&manifests(&options(args))).into_diagnostic()?;
        std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .into_diagnostic()?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let server = install::server_version(&client)
        .await
        .map_err(terminal::error)?;
    if server.support() == Support::Newer {
        eprintln!(
            "warning: Kubernetes {server} is newer than {NEWEST_SUPPORTED}, the newest tether was built for"
        );
    }
    let secret = install::random_webhook_secret().map_err(terminal::error)?;
    let applied = install::install(&client, server, &options(args), &secret)
        .await
        .map_err(terminal::error)?;
    let mut out = std::io::stdout().lock();
    for object in &applied {
        writeln!(out, "{} {}", object.object, object.outcome.word()).into_diagnostic()?;
    }
    let changed = applied
        .iter()
        .filter(|a| a.outcome != install::Outcome::Unchanged)
        .count();
    writeln!(
        out,
        "tether {} installed in {} on Kubernetes {server}: {changed} of {} objects changed\nnext: tether check",
        env!("CARGO_PKG_VERSION"),
        args.namespace,
        applied.len()
    )
    .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}

pub async fn uninstall(args: &UninstallArgs) -> miette::Result<ExitCode> {
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let removal = install::uninstall(&client, &args.namespace)
        .await
        .map_err(terminal::error)?;
    let mut out = std::io::stdout().lock();
    for object in &removal.deleted {
        writeln!(out, "{object} deleted").into_diagnostic()?;
    }
    if !removal.kept_namespace_for.is_empty() {
        writeln!(
            out,
            "Namespace/{} kept: it holds {} tether did not install ({}); delete it with kubectl when they can go",
            args.namespace,
            removal.kept_namespace_for.len(),
            removal.kept_namespace_for.join(", ")
        )
        .into_diagnostic()?;
    }
    if removal.deleted.is_empty() {
        writeln!(
            out,
            "nothing of tether was found in {} (installed in another namespace? --namespace)",
            args.namespace
        )
        .into_diagnostic()?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "tether uninstalled; the objects its Sources applied stay, with their inventories"
    )
    .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}
