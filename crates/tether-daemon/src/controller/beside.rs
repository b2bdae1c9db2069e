//! The work beside a Source's loop: its discovery and its image automation, which
//! start once the loop's first pass is over (the two start-ups do not peak together),
//! and its pull-request planner, reachable by webhooks while the loop runs. Each is
//! configured from the Source's spec here; one function starts them all.

use std::path::PathBuf;

use kube::api::Api;
use kube::{Client, ResourceExt};
use tether_api::source_spec::{DiscoverySpec, Source};
use tether_engine::discovery::Destination;
use tether_engine::git::{Credentials, is_full_commit_id};
use tether_engine::image_automation::automation::Automation;
use tether_engine::oci::Reference;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::wiring::{Daemon, Directories};
use crate::discovery::DiscoveryTarget;
use crate::image_automation::SourceImages;
use crate::loop_views::SourceName;
use crate::pull_request::PullRequestPlanner;
use crate::shard::source_id;
use crate::shared::Shared;
use crate::switchboard::Trigger;

/// The work beside one Source's loop.
pub(super) struct Beside<'a> {
    pub(super) discovery: Option<DiscoveryTarget>,
    pub(super) images: Option<SourceImages>,
    pub(super) planner: Option<PullRequestPlanner<'a>>,
}

impl Beside<'_> {
    /// Runs `source_loop` (the Source `id`'s) and the work beside it until `stop`, and
    /// waits for all of it.
    pub(super) async fn run_with(
        self,
        source_loop: impl Future<Output = ()>,
        first_pass: &watch::Receiver<bool>,
        client: &Client,
        shared: &Shared,
        id: &str,
        stop: &CancellationToken,
    ) {
        let discovery = self.discovery.map(|target| {
            let client = client.clone();
            after_first_pass(first_pass.clone(), stop, move |stop| {
                crate::discovery::run(client, target, stop)
            })
        });
        let images = self
            .images
            .map(|images| after_first_pass(first_pass.clone(), stop, move |stop| images.run(stop)));
        with_planner(source_loop, self.planner, shared, id, stop).await;
        for task in discovery.into_iter().chain(images) {
            let _ = task.await;
        }
    }
}

/// Spawns `task` once the loop's first pass is over, unless `stop` comes first.
fn after_first_pass<F>(
    mut first_pass: watch::Receiver<bool>,
    stop: &CancellationToken,
    task: impl FnOnce(CancellationToken) -> F + Send + 'static,
) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let stop = stop.clone();
    tokio::spawn(
        async move {
            tokio::select! {
                _ = first_pass.wait_for(|done| *done) => {}
                () = stop.cancelled() => return,
            }
            task(stop).await;
        }
        .in_current_span(),
    )
}

/// Runs a Source's loop and, beside it, its pull-request planner (when it plans
/// them), reachable by webhooks while both run.
async fn with_planner(
    loop_: impl Future<Output = ()>,
    planner: Option<PullRequestPlanner<'_>>,
    shared: &Shared,
    id: &str,
    stop: &CancellationToken,
) {
    let Some(planner) = planner else {
        return loop_.await;
    };
    let (requests, pull_requests) = mpsc::channel(crate::pull_request::QUEUED);
    let spec = &planner.source.spec;
    shared
        .switchboard
        .register_planner(id, spec.url.clone(), spec.reference.clone(), requests);
    futures::join!(loop_, planner.run(pull_requests, stop));
    shared.switchboard.unregister_planner(id);
}

/// Where a Source's discovery commits: its repository and path, on the discovery's
/// branch (else the Source's ref when it is a branch, else main), in a clone of its
/// own (the loop fetches beside it), with an outbox of its own; its models land under
/// `cluster` (the daemon's `--cluster-name`).
pub(super) fn discovery_target(
    source: &Source,
    discovery: &DiscoverySpec,
    directories: &Directories,
    credentials: &Credentials,
    cluster: Option<String>,
) -> DiscoveryTarget {
    let namespace = source.namespace().unwrap_or_default();
    let name = source.name_any();
    let spec = &source.spec;
    DiscoveryTarget {
        url: spec.url.clone(),
        branch: discovery
            .branch
            .clone()
            .or_else(|| spec.reference.clone().filter(|r| !is_full_commit_id(r)))
            .unwrap_or_else(|| "main".into()),
        path: PathBuf::from(spec.path.as_deref().unwrap_or(".")),
        cache: directories.cache.join("discovery"),
        credentials: credentials.clone(),
        applyset: spec.inventory_of(&namespace, &name).applyset_id(),
        outbox: directories
            .state
            .join("outbox")
            .join(format!("{namespace}-{name}")),
        cluster,
    }
}

/// The Source's image automation (`spec.imageAutomation`), given the trigger of its
/// loop: on its branch (else main), through a clone of its own beside the Git cache;
/// none for an OCI artifact, which tether cannot commit to.
pub(super) fn image_automation<'a>(
    source: &'a Source,
    daemon: &'a Daemon,
    client: &'a Client,
    credentials: &Credentials,
) -> Option<impl FnOnce(mpsc::Sender<Trigger>) -> SourceImages + use<'a>> {
    let spec = &source.spec;
    let automation = spec.image_automation.as_ref()?;
    if Reference::is_oci(&spec.url) {
        return None;
    }
    let namespace = source.namespace().unwrap_or_default();
    let author = automation
        .author
        .as_deref()
        .and_then(|a| a.parse().ok())
        .unwrap_or_default();
    let run = Automation {
        destination: Destination::Remote {
            url: spec.url.clone(),
            path: PathBuf::from(spec.path.as_deref().unwrap_or(".")),
            cache: daemon.directories.cache.join("images"),
            credentials: credentials.clone(),
        },
        branch: Some(
            spec.reference
                .clone()
                .filter(|r| !is_full_commit_id(r))
                .unwrap_or_else(|| "main".into()),
        ),
        author,
        push: true,
        batch: automation.batch,
        commit: true,
        docker_config: None,
    };
    Some(move |trigger| SourceImages {
        id: source_id(source),
        automation: run,
        sources: Api::namespaced(client.clone(), &namespace),
        secrets: Api::namespaced(client.clone(), &namespace),
        source: SourceName {
            namespace: namespace.clone(),
            name: source.name_any(),
        },
        trigger,
        shared: daemon.shared.clone(),
    })
}
