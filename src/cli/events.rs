//! `events`, and the event sinks of `discover --watch`: flags → sinks and outbox →
//! the pipeline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use kube::Client;
use miette::{IntoDiagnostic, WrapErr, miette};
use tether::cluster::connect;
use tether::discover::Scope;
use tether::events::outbox::Outbox;
use tether::events::sink::{DEFAULT_TOPIC, JsonLinesSink, KafkaSink, KubernetesEventsSink, Sink};
use tether::events::watch::{EventPipeline, PodWatchEvent};
use tether::settings::{self, EventSettings};
use tokio::sync::mpsc::UnboundedSender;

use super::reconcile::target;
use super::{EventArgs, GlobalArgs};

impl EventArgs {
    /// The flags, with what they leave out taken from a settings file's `events:`.
    pub(super) fn with_settings(&self, settings: &EventSettings) -> EventArgs {
        let mut merged = self.clone();
        if merged.kafka_brokers.is_empty() {
            merged.kafka_brokers = settings.kafka_brokers.clone().unwrap_or_default();
        }
        merged.kafka_topic = merged.kafka_topic.or_else(|| settings.kafka_topic.clone());
        merged.events_jsonl = merged
            .events_jsonl
            .or_else(|| settings.jsonl.as_ref().map(PathBuf::from));
        merged.kube_events |= settings.kube_events.unwrap_or(false);
        merged.outbox = merged
            .outbox
            .or_else(|| settings.outbox.as_ref().map(PathBuf::from));
        merged
    }

    pub(super) fn any_sink(&self) -> bool {
        !self.kafka_brokers.is_empty() || self.events_jsonl.is_some() || self.kube_events
    }

    fn sinks(&self, client: &Client) -> Vec<Sink> {
        let mut sinks = Vec::new();
        if !self.kafka_brokers.is_empty() {
            sinks.push(Sink::Kafka(KafkaSink::new(
                self.kafka_brokers.clone(),
                self.kafka_topic
                    .clone()
                    .unwrap_or_else(|| DEFAULT_TOPIC.to_string()),
            )));
        }
        if let Some(path) = &self.events_jsonl {
            let path = (path.as_os_str() != "-").then(|| path.clone());
            sinks.push(Sink::JsonLines(JsonLinesSink::new(path)));
        }
        if self.kube_events {
            sinks.push(Sink::KubernetesEvents(KubernetesEventsSink::new(
                client.clone(),
            )));
        }
        sinks
    }

    fn outbox_dir(&self) -> PathBuf {
        self.outbox
            .clone()
            .unwrap_or_else(|| super::cache_home().join("outbox"))
    }

    async fn open_outbox(&self, sinks: &[Sink]) -> miette::Result<Arc<Outbox>> {
        let names: Vec<String> = sinks.iter().map(|s| s.name().to_string()).collect();
        let dir = self.outbox_dir();
        let outbox = tokio::task::spawn_blocking(move || Outbox::open(&dir, &names))
            .await
            .into_diagnostic()?
            .into_diagnostic()
            .wrap_err("cannot open the event outbox")?;
        if outbox.backlog() > 0 {
            tracing::info!(
                backlog = outbox.backlog(),
                "delivering events left from before"
            );
        }
        Ok(Arc::new(outbox))
    }

    /// The pipeline for the configured sinks, with a pod watch of its own.
    async fn start(&self, client: &Client, scope: &Scope) -> miette::Result<EventPipeline> {
        let sinks = self.sinks(client);
        let outbox = self.open_outbox(&sinks).await?;
        Ok(EventPipeline::start(client, scope, outbox, sinks))
    }

    /// The pipeline for the configured sinks, fed by a watch that runs elsewhere.
    pub(super) async fn start_fed(
        &self,
        client: &Client,
    ) -> miette::Result<(EventPipeline, UnboundedSender<PodWatchEvent>)> {
        let sinks = self.sinks(client);
        let outbox = self.open_outbox(&sinks).await?;
        Ok(EventPipeline::fed(outbox, sinks))
    }
}

pub async fn run(
    global: &GlobalArgs,
    scope: &Scope,
    config: Option<&Path>,
    args: &EventArgs,
) -> miette::Result<ExitCode> {
    let args = match config {
        Some(path) => {
            let text = tokio::fs::read_to_string(path)
                .await
                .into_diagnostic()
                .wrap_err(format!("cannot read {}", path.display()))?;
            let settings = settings::parse(&path.display().to_string(), &text).into_diagnostic()?;
            args.with_settings(&settings.events)
        }
        None => args.clone(),
    };
    if !args.any_sink() {
        return Err(miette!(
            help = "add --kafka-brokers, --events-jsonl or --kube-events",
            "no event sink given"
        ));
    }
    let client = connect(&target(global)).await.into_diagnostic()?;
    let _pipeline = args.start(&client, scope).await?;
    super::shutdown().await;
    Ok(ExitCode::SUCCESS)
}
