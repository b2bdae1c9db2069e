//! `discover`: flags and `.tether.yaml` to a `Discoverer`, run once, previewed, or
//! driven on every change until shutdown.

use std::process::ExitCode;
use std::time::Duration;

use miette::{IntoDiagnostic, WrapErr, miette};
use tether_core::discover::Outcome;
use tether_engine::cluster::connect;
use tether_engine::config::{DiscoverConfig, EventsConfig, SETTINGS_FILE};
use tether_engine::discovery::watch::ClusterWatch;
use tether_engine::discovery::{Destination, Discoverer, PassReport, open_workspace};
use tether_engine::driver::{Backoff, Schedule, drive, shutdown_on_signal};
use tether_engine::events::pipeline::EventPipeline;

use super::{DiscoverArgs, GlobalArgs, report};

pub async fn run(global: &GlobalArgs, args: &DiscoverArgs) -> miette::Result<ExitCode> {
    let destination = match &args.repo {
        Some(url) => Destination::Remote {
            url: url.clone(),
            path: args.path.clone(),
            cache: args.git.cache_dir(),
            credentials: args.git.credentials(),
        },
        None => Destination::Checkout {
            path: args.path.clone(),
        },
    };
    let target = global.cluster.target();
    let (opened, client) = tokio::join!(
        open_workspace(destination, args.discover.branch.clone()),
        connect(&target)
    );
    let (workspace, settings) = opened.map_err(report::error)?;
    // Sinks given as flags need --watch; those of the settings file serve --watch only.
    if args.events.any_sink() && !args.watch {
        return Err(miette!(
            help = "add --watch, or run `tether events --watch`",
            "event sinks need --watch: events are changes over time"
        ));
    }
    let events = EventsConfig::resolve(&args.events.overrides(), &settings.events);
    let config = DiscoverConfig::resolve(
        &args.discover.overrides()?,
        &settings.discover,
        SETTINGS_FILE,
    )
    .map_err(report::error)?;
    let client = client.map_err(report::error)?;
    // Events come from discovery's own pod watch.
    let (_events, pod_events) = match args.watch && !events.sinks.is_empty() {
        true => {
            let (pipeline, feed) = EventPipeline::open_fed(&events, &client)
                .await
                .map_err(report::error)
                .wrap_err("cannot open the event outbox")?;
            (Some(pipeline), Some(feed))
        }
        false => (None, None),
    };
    let watch = ClusterWatch::start(&client, &config.scope, pod_events);
    watch
        .ready(global.cluster.request_timeout * 2)
        .await
        .into_diagnostic()
        .wrap_err("cannot list the pods")?;
    let applyset = args.inventory.inventory().applyset_id();
    let mut discoverer = Discoverer::new(
        workspace,
        watch,
        config.scope.clone(),
        applyset,
        config.author.clone(),
        args.push,
    );
    if args.dry_run {
        print_preview(&discoverer.preview().await.map_err(report::error)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !args.watch {
        print_pass(&discoverer.pass().await.map_err(report::error)?);
        return Ok(ExitCode::SUCCESS);
    }
    let schedule = Schedule {
        name: "discovery",
        debounce: config.debounce,
        backoff: Backoff::pass(),
        // A commit being pushed is finished, not left to the next start.
        grace: Duration::from_secs(10),
    };
    drive(
        &mut discoverer,
        &schedule,
        &shutdown_on_signal(),
        |outcome| {
            if let Ok(pass) = outcome {
                print_pass(pass);
            }
        },
    )
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
