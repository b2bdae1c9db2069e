//! A discovery session: what `tether discover` and a Source's discovery both run. It
//! opens the workspace, resolves the settings (the caller's overrides, then the
//! settings file), starts the pod watch (feeding the event pipeline when events are
//! published), and then passes on every change until shutdown, flushing the event
//! outbox at the end.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::caches::{ClusterWatch, WatchError};
use super::{Destination, DiscoverError, Discoverer, PassReport, blocking, open_workspace};
use crate::cluster::ClusterError;
use crate::config::{
    DiscoverConfig, DiscoverOverrides, EventOverrides, EventsConfig, SETTINGS_FILE,
};
use crate::driver::{Backoff, Schedule, drive};
use crate::events::pipeline::EventPipeline;
use crate::outbox::OutboxError;
use tether_core::discovery::{ClusterChoice, watched_service};
use tether_core::remedy::Remedy;

/// What a discovery session starts from.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub destination: Destination,
    pub discover: DiscoverOverrides,
    pub events: EventOverrides,
    /// Publish pod events to the configured sinks (there may be none).
    pub publish_events: bool,
    /// The event outbox when neither the overrides nor the settings file name one
    /// (a Source's own); `None`: the default one.
    pub default_outbox: Option<PathBuf>,
    /// The inventory whose pods are its own, not discovered.
    pub applyset: String,
    /// Which KubernetesService the watched cluster is (discovered models land under
    /// it, events name it).
    pub cluster: ClusterChoice,
    /// Push each commit (to a remote destination).
    pub push: bool,
    /// How long the pod watch may take to list the pods at start.
    pub list_timeout: Duration,
}

#[derive(Debug, Error)]
pub enum SessionError {
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("cannot open the event outbox")]
    Outbox(#[source] OutboxError),
    #[error("cannot list the pods")]
    List(#[source] WatchError),
}

impl SessionError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            SessionError::Discover(error) => error.remedy(),
            SessionError::Cluster(error) => error.remedy(),
            _ => None,
        }
    }
}

/// A session opened: one pass, a preview, or passes until shutdown.
pub struct DiscoverySession {
    discoverer: Discoverer,
    pipeline: Option<EventPipeline>,
    debounce: Duration,
}

impl DiscoverySession {
    /// Opens the workspace and, meanwhile, the client (`client`), then starts the pod
    /// watch and waits until it has listed the pods.
    pub async fn open(
        options: SessionOptions,
        client: impl Future<Output = Result<Client, ClusterError>>,
    ) -> Result<Self, SessionError> {
        let (opened, client) = tokio::join!(
            open_workspace(options.destination, options.discover.branch.clone()),
            client
        );
        let (workspace, settings) = opened?;
        let choice = options.cluster.clone();
        let (workspace, service) = blocking(move || {
            let service = watched_service(&workspace.models()?, &choice)?;
            Ok::<_, DiscoverError>((workspace, service))
        })
        .await??;
        // Events name the KubernetesService, else the kubeconfig context.
        let cluster = service
            .or_else(|| options.cluster.context.clone())
            .unwrap_or_default();
        let config = DiscoverConfig::resolve(&options.discover, &settings.discover, SETTINGS_FILE)
            .map_err(DiscoverError::from)?;
        let mut events = EventsConfig::resolve(&options.events, &settings.events);
        if let Some(outbox) = options.default_outbox
            && options.events.outbox.is_none()
            && settings.events.outbox.is_none()
        {
            events.outbox = outbox;
        }
        let client = client?;
        // Events come from discovery's own pod watch.
        let (pipeline, pod_events) = match options.publish_events && !events.sinks.is_empty() {
            true => {
                let (pipeline, feed) = EventPipeline::open_fed(&events, &client, &cluster)
                    .await
                    .map_err(SessionError::Outbox)?;
                (Some(pipeline), Some(feed))
            }
            false => (None, None),
        };
        let watch = ClusterWatch::start(&client, &config.scope, pod_events);
        watch
            .ready(options.list_timeout)
            .await
            .map_err(SessionError::List)?;
        let discoverer = Discoverer::new(
            workspace,
            watch,
            config.scope.clone(),
            options.cluster,
            options.applyset,
            config.author.clone(),
            options.push,
        );
        Ok(DiscoverySession {
            discoverer,
            pipeline,
            debounce: config.debounce,
        })
    }

    /// The discoverer, for one pass or a preview.
    pub fn discoverer(&mut self) -> &mut Discoverer {
        &mut self.discoverer
    }

    /// Passes at start and after each change until `shutdown`; each outcome goes to
    /// `observe`. The events still in the outbox are then delivered (within a few
    /// seconds; what is left stays for the next start).
    pub async fn run(
        mut self,
        shutdown: &CancellationToken,
        observe: impl FnMut(&Result<PassReport, DiscoverError>),
    ) {
        let schedule = Schedule {
            name: "discovery",
            debounce: self.debounce,
            backoff: Backoff::pass(),
            // A commit being pushed is finished, not left to the next start.
            grace: Duration::from_secs(10),
        };
        drive(&mut self.discoverer, &schedule, shutdown, observe).await;
        if let Some(pipeline) = self.pipeline {
            pipeline.close().await;
        }
    }
}
