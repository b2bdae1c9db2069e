//! `discover`: flags to a discovery session, run once, previewed, or on every change
//! until shutdown.

use std::process::ExitCode;
use std::time::Duration;

use miette::miette;
use tether_core::discovery::{ClusterChoice, Outcome};
use tether_engine::cluster::connect;
use tether_engine::discovery::PassReport;
use tether_engine::discovery::session::{DiscoverySession, SessionOptions};
use tether_engine::driver::shutdown_on_signal;

use super::args::DiscoverArgs;
use super::terminal;

pub async fn run(args: &DiscoverArgs) -> miette::Result<ExitCode> {
    // Sinks given as flags need --watch; those of the settings file serve --watch only.
    if args.events.any_sink() && !args.watch {
        return Err(miette!(
            help = "add --watch, or run `tether events --watch`",
            "event sinks need --watch: events are changes over time"
        ));
    }
    let target = args.cluster.target();
    let destination =
        args.git
            .destination(args.repo.as_deref(), &args.path, args.git.cache_dir())?;
    let options = SessionOptions {
        destination,
        discover: args.discover.overrides()?,
        events: args.events.overrides(),
        publish_events: args.watch,
        default_outbox: None,
        applyset: args.inventory.inventory().applyset_id(),
        cluster: ClusterChoice {
            named: args.kubernetes_service.clone(),
            context: target.context_name(),
        },
        push: args.push,
        list_timeout: args.cluster.request_timeout * 2,
    };
    let mut session = DiscoverySession::open(options, connect(&target))
        .await
        .map_err(terminal::error)?;
    if args.dry_run {
        let preview = session.discoverer().preview().await;
        print_preview(&preview.map_err(terminal::error)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !args.watch {
        print_pass(&session.discoverer().pass().await.map_err(terminal::error)?);
        return Ok(ExitCode::SUCCESS);
    }
    session
        .run(&shutdown_on_signal(), |outcome| {
            if let Ok(pass) = outcome {
                print_pass(pass);
            }
        })
        .await;
    Ok(ExitCode::SUCCESS)
}

fn print_pass(pass: &PassReport) {
    let PassReport {
        synced,
        pods,
        branch,
        took,
    } = pass;
    let ms = Duration::as_millis(took);
    match &synced.commit {
        Some(commit) => {
            let subject = synced.outcome.commit_message();
            let subject = subject.lines().next().unwrap_or_default();
            let pushed = if synced.pushed { ", pushed" } else { "" };
            println!(
                "{subject} ({pods} pods seen; commit {} on {branch}{pushed}, {ms} ms)",
                &commit[..commit.len().min(12)]
            );
        }
        None if synced.pushed => {
            println!("no changes; pushed earlier commits on {branch} ({pods} pods seen, {ms} ms)");
        }
        None => println!("no changes ({pods} pods seen, {ms} ms)"),
    }
}

/// What a commit would hold: its message, then each file written or removed.
fn print_preview(outcome: &Outcome) {
    if outcome.is_empty() {
        println!("no changes");
        return;
    }
    println!("would commit:\n{}", outcome.commit_message().trim_end());
    for path in outcome.writes.keys() {
        println!("write  {path}");
    }
    for path in &outcome.removes {
        println!("remove {path}");
    }
}
