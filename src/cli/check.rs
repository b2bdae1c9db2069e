//! `check` and `version`: what a user asks before and after installing.

use std::io::Write;
use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_admin::check::{self, Finding, Verdict};
use tether_admin::install::server_version;
use tether_engine::cluster::connect;

use super::args::EXIT_INVALID;
use super::flags::ClusterFlags;
use super::terminal;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Before installing: only the server's version and your right to install.
    #[arg(long)]
    pub pre: bool,
    /// The daemon's namespace.
    #[arg(long, default_value = "tether-system")]
    pub namespace: String,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Debug, clap::Args)]
pub struct VersionArgs {
    /// Only this client's version (no cluster is asked).
    #[arg(long)]
    pub client: bool,
    /// The daemon's namespace.
    #[arg(long, default_value = "tether-system")]
    pub namespace: String,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A finding as a line (and its hint on the next).
fn line(finding: &Finding) -> String {
    let mark = match finding.verdict {
        Verdict::Pass => "✔",
        Verdict::Warn => "!",
        Verdict::Fail => "✗",
    };
    match &finding.hint {
        Some(hint) => format!("{mark} {}\n    hint: {hint}\n", finding.text),
        None => format!("{mark} {}\n", finding.text),
    }
}

pub async fn check(args: &CheckArgs) -> miette::Result<ExitCode> {
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let findings = match args.pre {
        true => check::before_install(&client, &args.namespace).await,
        false => check::installation(&client, &args.namespace, CLIENT_VERSION).await,
    }
    .map_err(terminal::error)?;
    let mut out = std::io::stdout().lock();
    for finding in &findings {
        out.write_all(line(finding).as_bytes()).into_diagnostic()?;
    }
    let failed = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .count();
    Ok(match failed {
        0 => {
            writeln!(out, "all checks passed").into_diagnostic()?;
            ExitCode::SUCCESS
        }
        n => {
            writeln!(out, "{n} of {} checks failed", findings.len()).into_diagnostic()?;
            ExitCode::from(EXIT_INVALID)
        }
    })
}

pub async fn version(args: &VersionArgs) -> miette::Result<ExitCode> {
    println!("client: {CLIENT_VERSION}");
    if args.client {
        return Ok(ExitCode::SUCCESS);
    }
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let server = server_version(&client).await.map_err(terminal::error)?;
    println!("kubernetes: {server}");
    let daemon = check::daemon_state(&client, &args.namespace)
        .await
        .map_err(terminal::error)?;
    match daemon {
        Some(daemon) => println!(
            "daemon: {} ({}, {} of {} replicas ready, in {})",
            daemon.version.as_deref().unwrap_or("unknown"),
            daemon.image.as_deref().unwrap_or("no image"),
            daemon.ready,
            daemon.replicas,
            args.namespace
        ),
        None => println!("daemon: not installed in {}", args.namespace),
    }
    Ok(ExitCode::SUCCESS)
}
