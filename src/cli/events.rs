//! `events`: flags (and an optional settings file) to sinks and an outbox, published
//! from a pod watch until shutdown.

use std::process::ExitCode;

use miette::{WrapErr, miette};
use tether_core::k8s::Scope;
use tether_engine::cluster::connect;
use tether_engine::config::{EventsConfig, Settings, read_settings};
use tether_engine::driver::shutdown_on_signal;
use tether_engine::events::pipeline::EventPipeline;

use super::args::EventsArgs;
use super::terminal;

pub async fn run(args: &EventsArgs) -> miette::Result<ExitCode> {
    let settings = match &args.config {
        Some(path) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_settings(&path))
                .await
                .map_err(|e| miette!("{e}"))?
                .map_err(terminal::error)?
        }
        None => Settings::default(),
    };
    let config = EventsConfig::resolve(&args.events.overrides(), &settings.events);
    if config.sinks.is_empty() {
        return Err(miette!(
            help = "add --kafka-brokers, --events-jsonl or --kube-events",
            "no event sink given"
        ));
    }
    let target = args.cluster.target();
    let client = connect(&target).await.map_err(terminal::error)?;
    let cluster = args
        .kubernetes_service
        .clone()
        .or_else(|| target.context_name())
        .unwrap_or_default();
    let scope = Scope::from_names(args.namespaces.iter().cloned());
    let pipeline = EventPipeline::open(&config, &client, &cluster, &scope)
        .await
        .map_err(terminal::error)
        .wrap_err("cannot open the event outbox")?;
    shutdown_on_signal().cancelled().await;
    pipeline.close().await;
    Ok(ExitCode::SUCCESS)
}
