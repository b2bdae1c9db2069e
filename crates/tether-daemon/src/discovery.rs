//! A Source's discovery, beside its loop (`spec.discovery: true`): the cluster's pods
//! that tether did not create are committed back to the Source's repository (under
//! `discovered/`, pushed to its branch), and pod events go to the sinks its
//! `.tether.yaml` names (`events:`): the discovery session `discover --watch` runs,
//! retried until it starts.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

use tether_core::discovery::ClusterChoice;
use tether_engine::config::{DiscoverOverrides, EventOverrides};
use tether_engine::discovery::Destination;
use tether_engine::discovery::session::{DiscoverySession, SessionOptions};
use tether_engine::driver::{Backoff, Retries};
use tether_engine::git::Credentials;

/// Where a Source's discovery writes.
#[derive(Clone, Debug)]
pub(crate) struct DiscoveryTarget {
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
    /// The KubernetesService the daemon's cluster is (`--cluster-name`); `None`: the
    /// repository's only one.
    pub cluster: Option<String>,
}

/// Runs discovery (and event delivery) until `stop`; a failure to start is retried.
pub(crate) async fn run(client: Client, target: DiscoveryTarget, stop: CancellationToken) {
    let mut retries = Retries::endless(Backoff::pass());
    loop {
        match run_once(&client, &target, &stop).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, attempt = retries.attempt(), "discovery could not start; retrying");
                if !retries.again_unless(&stop).await {
                    return;
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
    let options = SessionOptions {
        destination: Destination::Remote {
            url: target.url.clone(),
            path: target.path.clone(),
            cache: target.cache.clone(),
            credentials: target.credentials.clone(),
        },
        discover: DiscoverOverrides {
            branch: Some(target.branch.clone()),
            ..DiscoverOverrides::default()
        },
        events: EventOverrides::default(),
        publish_events: true,
        default_outbox: Some(target.outbox.clone()),
        applyset: target.applyset.clone(),
        // In a cluster there is no kubeconfig context to go by.
        cluster: ClusterChoice {
            named: target.cluster.clone(),
            context: None,
        },
        push: true,
        list_timeout: Duration::from_secs(60),
    };
    let session = DiscoverySession::open(options, async { Ok(client.clone()) })
        .await
        .map_err(|e| tether_core::error_chain(&e))?;
    session
        .run(stop, |outcome| match outcome {
            Ok(pass) => match &pass.synced.commit {
                Some(commit) => {
                    tracing::info!(commit, pods = pass.pods, "discovered pods committed")
                }
                None => tracing::debug!(pods = pass.pods, "discovery: no changes"),
            },
            Err(error) => {
                tracing::warn!(error = %tether_core::error_chain(error), "discovery pass failed")
            }
        })
        .await;
    Ok(())
}
