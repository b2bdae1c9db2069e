//! A Source's discovery, beside its loop (`spec.discovery: true`): the cluster's pods
//! that tether did not create are committed back to the Source's repository (under
//! `discovered/`, pushed to its branch), and pod events go to the sinks its
//! `.tether.yaml` names (`events:`). One pod watch feeds both, as in `discover
//! --watch`; both are driven by the shared driver.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

use tether_engine::config::{
    DiscoverConfig, DiscoverOverrides, EventOverrides, EventsConfig, SETTINGS_FILE,
};
use tether_engine::discovery::watch::ClusterWatch;
use tether_engine::discovery::{Destination, Discoverer, open_workspace};
use tether_engine::driver::{Backoff, Schedule, drive};
use tether_engine::events::pipeline::EventPipeline;
use tether_engine::git::Credentials;

/// Where a Source's discovery writes.
#[derive(Clone, Debug)]
pub struct DiscoveryTarget {
    pub url: String,
    /// The branch to commit to (the Source's ref; main when it follows the default).
    pub branch: String,
    /// The models root inside the repository.
    pub path: PathBuf,
    pub cache: PathBuf,
    pub credentials: Credentials,
    /// The Source's inventory: pods of what it applied are its own, not discovered.
    pub applyset: String,
    /// The Source's own event outbox (sources never share one).
    pub outbox: PathBuf,
}

/// How long events still in the outbox may take to be delivered at shutdown.
const FLUSH: Duration = Duration::from_secs(5);

/// Runs discovery (and event delivery) until `stop`; a failure to start is retried.
pub async fn run(client: Client, target: DiscoveryTarget, stop: CancellationToken) {
    let mut backoff = Backoff::pass();
    loop {
        match run_once(&client, &target, &stop).await {
            Ok(()) => return,
            Err(error) => {
                let retry = backoff.next_delay();
                tracing::warn!(%error, ?retry, "discovery could not start; retrying");
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    () = stop.cancelled() => return,
                }
            }
        }
    }
}

async fn run_once(
    client: &Client,
    target: &DiscoveryTarget,
    stop: &CancellationToken,
) -> Result<(), String> {
    let destination = Destination::Remote {
        url: target.url.clone(),
        path: target.path.clone(),
        cache: target.cache.clone(),
        credentials: target.credentials.clone(),
    };
    let (workspace, settings) = open_workspace(destination, Some(target.branch.clone()))
        .await
        .map_err(|e| tether_core::error_chain(&e))?;
    let config = DiscoverConfig::resolve(
        &DiscoverOverrides::default(),
        &settings.discover,
        SETTINGS_FILE,
    )
    .map_err(|e| e.to_string())?;
    let mut events = EventsConfig::resolve(&EventOverrides::default(), &settings.events);
    if settings.events.outbox.is_none() {
        events.outbox = target.outbox.clone();
    }
    let (pipeline, feed) = match events.sinks.is_empty() {
        true => (None, None),
        false => {
            let (pipeline, feed) = EventPipeline::open_fed(&events, client)
                .await
                .map_err(|e| e.to_string())?;
            (Some(pipeline), Some(feed))
        }
    };
    let watch = ClusterWatch::start(client, &config.scope, feed);
    watch
        .ready(Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    let mut discoverer = Discoverer::new(
        workspace,
        watch,
        config.scope.clone(),
        target.applyset.clone(),
        config.author.clone(),
        true,
    );
    let schedule = Schedule {
        name: "discovery",
        debounce: config.debounce,
        backoff: Backoff::pass(),
        grace: Duration::from_secs(10),
    };
    drive(&mut discoverer, &schedule, stop, |outcome| match outcome {
        Ok(pass) => match &pass.synced.commit {
            Some(commit) => tracing::info!(commit, pods = pass.pods, "discovered pods committed"),
            None => tracing::debug!(pods = pass.pods, "discovery: no changes"),
        },
        Err(error) => {
            tracing::warn!(error = %tether_core::error_chain(error), "discovery pass failed")
        }
    })
    .await;
    if let Some(pipeline) = pipeline {
        pipeline.close(FLUSH).await;
    }
    Ok(())
}
