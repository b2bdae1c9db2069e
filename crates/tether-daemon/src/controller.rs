//! Sources declared as `Source` custom resources: one watch (a reflector, so that
//! webhooks can match pushes on any replica), and while this process leads, one loop
//! per Source, restarted when its spec changes and stopped when it is deleted (its
//! objects stay). A Source's status is written by its loop ([`SourceStatusWriter`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tether_sops::Keyring;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Shared;
use super::crd::{
    DiscoverySpec, RECONCILE_REQUESTED_ANNOTATION, Source, SourceSpec, SourceStatus, revision_name,
};
use super::discovery::DiscoveryTarget;
use super::keys::DecryptionSecret;
use super::leader::{self, Election};
use super::runner::{Origin, PassError, PassOutcome, SourceLoop, StatusSink, Trigger};
use super::status::{PassResult, next_status, worth_writing};
use super::webhook::Push;
use tether_engine::cluster::Target;
use tether_engine::driver::{Backoff, Retries};
use tether_engine::git::{Credentials, is_full_commit_id};
use tether_engine::reconcile::Reconciler;

/// Runs the loops of the Sources in `namespace` (all namespaces: `None`).
pub struct Controller {
    pub client: Client,
    pub namespace: Option<String>,
    /// Where Git repositories are cached and the outboxes kept.
    pub directories: Directories,
    pub shared: Arc<Shared>,
    /// How long a pass in progress may go on after shutdown.
    pub shutdown_timeout: Duration,
}

/// A Source's loop while it runs.
struct Running {
    spec: SourceSpec,
    generation: Option<i64>,
    /// The reconcile request last passed on.
    requested: Option<String>,
    trigger: mpsc::Sender<Trigger>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Passes a webhook's push to the Sources it concerns through their annotation, for
/// the leader to see (on a replica that runs no loops).
#[derive(Clone)]
pub struct Forwarder {
    client: Client,
    store: Store<Source>,
}

impl Forwarder {
    /// Requests a reconcile of every Source `push` concerns; returns how many.
    pub async fn forward(&self, push: &Push) -> usize {
        let mut forwarded = 0;
        for source in self.store.state() {
            if !push.concerns(&source.spec.url, source.spec.reference.as_deref()) {
                continue;
            }
            let api: Api<Source> =
                Api::namespaced(self.client.clone(), &source.namespace().unwrap_or_default());
            match request_reconcile(&api, &source.name_any()).await {
                Ok(_) => forwarded += 1,
                Err(error) => {
                    tracing::warn!(%error, source = %source.name_any(), "cannot forward the push")
                }
            }
        }
        forwarded
    }
}

/// Sets the annotation that asks for a pass now; returns its value (the time).
pub async fn request_reconcile(api: &Api<Source>, name: &str) -> Result<String, kube::Error> {
    let now = now();
    let patch = serde_json::json!({
        "metadata": {"annotations": {RECONCILE_REQUESTED_ANNOTATION: now}}
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(now)
}

/// The time as the status writes it (RFC 3339, UTC, to the nanosecond so that two
/// requests in one second differ).
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

impl Controller {
    /// The daemon over the cluster's Sources until `shutdown`: with an `election`,
    /// their loops run only while this replica holds the Lease; the loops stop
    /// (passes finish within the timeout) before the Lease is released, so that the
    /// next leader never writes beside this one.
    pub async fn run_elected(self, election: Option<Election>, shutdown: CancellationToken) {
        let (leading_tx, leading) = watch::channel(election.is_none());
        let release = CancellationToken::new();
        let election = match election {
            Some(election) => Some(tokio::spawn(leader::run(
                self.client.clone(),
                election,
                self.shared.clone(),
                leading_tx,
                release.clone(),
            ))),
            None => {
                self.shared.metrics.set_leader(true);
                None
            }
        };
        self.run(leading, shutdown).await;
        release.cancel();
        if let Some(election) = election {
            let _ = election.await;
        }
    }

    /// Watches the Sources until `shutdown`; runs their loops while `leading` says so.
    pub async fn run(self, mut leading: watch::Receiver<bool>, shutdown: CancellationToken) {
        let api: Api<Source> = match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        let (store, writer) = reflector::store();
        let mut events =
            reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
                .default_backoff()
                .boxed();
        self.shared.set_forwarder(Forwarder {
            client: self.client.clone(),
            store: store.clone(),
        });
        let mut running: HashMap<String, Running> = HashMap::new();
        let mut synced = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = leading.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    if synced {
                        self.sync_all(&store, *leading.borrow(), &mut running).await;
                    }
                }
                event = events.next() => match event {
                    Some(Ok(Event::InitDone)) => {
                        synced = true;
                        self.shared.set_ready();
                        self.sync_all(&store, *leading.borrow(), &mut running).await;
                    }
                    Some(Ok(Event::Apply(source))) if synced && *leading.borrow() => {
                        self.sync(&source, &mut running);
                    }
                    Some(Ok(Event::Delete(source))) => {
                        if let Some(stopped) = running.remove(&id_of(&source)) {
                            self.stop(vec![stopped]).await;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::warn!(%error, "the Source watch failed; retrying"),
                    None => break,
                },
            }
        }
        self.stop(running.into_values().collect()).await;
    }

    /// Brings the running loops in line with the store: all of them while leading,
    /// none otherwise.
    async fn sync_all(
        &self,
        store: &Store<Source>,
        leading: bool,
        running: &mut HashMap<String, Running>,
    ) {
        if !leading {
            let all = running.drain().map(|(_, r)| r).collect();
            self.stop(all).await;
            return;
        }
        let sources = store.state();
        let gone: Vec<String> = running
            .keys()
            .filter(|id| !sources.iter().any(|s| id_of(s) == **id))
            .cloned()
            .collect();
        let stopped = gone.iter().filter_map(|id| running.remove(id)).collect();
        self.stop(stopped).await;
        for source in sources {
            self.sync(&source, running);
        }
    }

    /// Starts, restarts or nudges one Source's loop.
    fn sync(&self, source: &Source, running: &mut HashMap<String, Running>) {
        let id = id_of(source);
        let requested = source
            .annotations()
            .get(RECONCILE_REQUESTED_ANNOTATION)
            .cloned();
        if let Some(current) = running.get_mut(&id) {
            if current.spec == source.spec && current.generation == source.metadata.generation {
                if requested.is_some() && requested != current.requested {
                    current.requested.clone_from(&requested);
                    if let Some(value) = requested {
                        let _ = current.trigger.try_send(Trigger::Requested(value));
                    }
                }
                return;
            }
            if let Some(old) = running.remove(&id) {
                // The old loop stops on its own; the new one does not wait for it.
                old.stop.cancel();
            }
        }
        let stop = CancellationToken::new();
        // One pending trigger is enough: a pass reads the whole source.
        let (trigger, triggers) = mpsc::channel(1);
        let task = tokio::spawn(
            run_source(
                self.client.clone(),
                source.clone(),
                self.directories.clone(),
                self.shared.clone(),
                self.shutdown_timeout,
                stop.clone(),
                (trigger.clone(), triggers),
            )
            .instrument(
                tracing::info_span!("source", source = %id, revision = tracing::field::Empty),
            ),
        );
        let started = Running {
            spec: source.spec.clone(),
            generation: source.metadata.generation,
            requested,
            trigger,
            stop,
            task,
        };
        running.insert(id, started);
    }

    /// Stops loops, letting passes in progress finish within the shutdown timeout.
    async fn stop(&self, loops: Vec<Running>) {
        for running in &loops {
            running.stop.cancel();
        }
        for running in loops {
            let mut task = running.task;
            if tokio::time::timeout(self.shutdown_timeout + Duration::from_secs(1), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

/// The daemon's directories: a cache it may lose, and state it must not.
#[derive(Clone, Debug)]
pub struct Directories {
    /// Git clones, fetched again when lost.
    pub cache: PathBuf,
    /// The Sources' event outboxes: events recorded and not yet delivered, which a
    /// restart on the same volume delivers.
    pub state: PathBuf,
}

fn id_of(source: &Source) -> String {
    format!(
        "{}/{}",
        source.namespace().unwrap_or_default(),
        source.name_any()
    )
}

/// One Source's loop, until `stop`.
async fn run_source(
    client: Client,
    source: Source,
    directories: Directories,
    shared: Arc<Shared>,
    shutdown_timeout: Duration,
    stop: CancellationToken,
    triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
) {
    let id = id_of(&source);
    let namespace = source.namespace().unwrap_or_default();
    let name = source.name_any();
    let mut status = SourceStatusWriter {
        api: Api::namespaced(client.clone(), &namespace),
        name: name.clone(),
        reference: source.spec.reference.clone(),
        generation: source.metadata.generation,
        status: source.status.clone().unwrap_or_default(),
    };
    if source.spec.suspend {
        status.record(&PassResult::Suspended, None).await;
        return;
    }
    let Some(credentials) = wait_for_credentials(&client, &source, &mut status, &stop).await else {
        return;
    };
    let discovery = source
        .spec
        .discovery
        .as_ref()
        .map(|discovery| discovery_target(&source, discovery, &directories, &credentials));
    let cache = directories.cache;
    let settings = match source.spec.settings(&namespace, &name, cache, credentials) {
        Ok(settings) => settings,
        Err(error) => {
            let result = PassResult::Failed {
                revision: None,
                reason: "InvalidSpec",
                message: error.to_string(),
                stalled: true,
            };
            status.record(&result, None).await;
            return;
        }
    };
    // Until its decryption Secret is read (if it names one), a Source has no key.
    let no_keys = Keyring::default().given_by(crate::keys::GIVEN_BY);
    let reconciler = Reconciler::new(settings.repo, Target::default(), settings.inventory)
        .with_client(client.clone())
        .with_keys(Arc::new(no_keys));
    let mut work = SourceLoop::new(
        &id,
        reconciler,
        settings.plan,
        settings.apply,
        settings.interval,
        shared.clone(),
        status,
    )
    .with_triggers(triggers)
    .with_drift_policy(settings.drift);
    if let Some(decryption) = &source.spec.decryption {
        let secret = DecryptionSecret::new(client.clone(), &namespace, &decryption.secret_ref.name);
        work = work.with_decryption(secret);
    }
    let trigger = work.trigger();
    let handled = source
        .status
        .as_ref()
        .and_then(|s| s.last_handled_reconcile_at.clone());
    if let Some(requested) = source
        .annotations()
        .get(RECONCILE_REQUESTED_ANNOTATION)
        .filter(|r| Some(*r) != handled.as_ref())
    {
        let _ = trigger.try_send(Trigger::Requested(requested.clone()));
    }
    let discovery =
        discovery.map(|target| spawn_discovery(client, target, work.first_pass(), stop.clone()));
    let origin = Origin {
        url: Some(source.spec.url.clone()),
        reference: source.spec.reference.clone(),
    };
    work.run(origin, shutdown_timeout, &stop, log_pass).await;
    if let Some(discovery) = discovery {
        let _ = discovery.await;
    }
}

/// How often a Source's unreadable credentials Secret is read again.
const CREDENTIALS_RETRY: Duration = Duration::from_secs(30);

/// The Source's Git credentials, waited for (and said in the status) while its
/// Secret cannot be read; `None` when stopped first.
async fn wait_for_credentials(
    client: &Client,
    source: &Source,
    status: &mut SourceStatusWriter,
    stop: &CancellationToken,
) -> Option<Credentials> {
    let namespace = source.namespace().unwrap_or_default();
    let mut retries = Retries::endless(Backoff::fixed(CREDENTIALS_RETRY));
    loop {
        match credentials(client, &namespace, &source.spec).await {
            Ok(credentials) => return Some(credentials),
            Err(message) => {
                let result = PassResult::Failed {
                    revision: None,
                    reason: "CredentialsUnavailable",
                    message,
                    stalled: false,
                };
                status.record(&result, None).await;
                if !retries.again_unless(stop).await {
                    return None;
                }
            }
        }
    }
}

/// A pass's outcome in the log (the source and revision are the span's).
fn log_pass(outcome: &Result<PassOutcome, PassError>) {
    match outcome {
        Ok(pass) => tracing::info!(
            created = pass.report.created(),
            configured = pass.report.configured(),
            pruned = pass.report.pruned(),
            corrected = pass.corrected.len(),
            "pass done"
        ),
        Err(PassError::Reconcile(error)) => {
            tracing::warn!(error = %tether_core::error_chain(error), "pass failed");
        }
        Err(error) => tracing::warn!(%error, "pass failed"),
    }
}

/// Where a Source's discovery commits: its repository and path, on the discovery's
/// branch (else the Source's ref when it is a branch, else main), in a clone of its
/// own (the loop fetches beside it), with an outbox of its own.
fn discovery_target(
    source: &Source,
    discovery: &DiscoverySpec,
    directories: &Directories,
    credentials: &Credentials,
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
    }
}

/// Runs discovery once the Source's first pass is over (the two start-ups do not
/// peak together), until `stop`.
fn spawn_discovery(
    client: Client,
    target: DiscoveryTarget,
    mut first_pass: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(
        async move {
            tokio::select! {
                _ = first_pass.wait_for(|done| *done) => {}
                () = stop.cancelled() => return,
            }
            super::discovery::run(client, target, stop).await;
        }
        .in_current_span(),
    )
}

/// The Git credentials of the Source's `secretRef`.
async fn credentials(
    client: &Client,
    namespace: &str,
    spec: &SourceSpec,
) -> Result<Credentials, String> {
    let Some(reference) = &spec.secret_ref else {
        return Ok(Credentials::default());
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get(&reference.name)
        .await
        .map_err(|e| format!("cannot read the Secret {namespace}/{}: {e}", reference.name))?;
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| {
        data.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).trim_end().to_string())
    };
    Ok(Credentials {
        token: text("token").or_else(|| text("password")),
        username: text("username"),
        ssh_key: None,
    })
}

/// Writes a Source's status when a pass changed it (never for a pass that found
/// nothing to do).
pub struct SourceStatusWriter {
    api: Api<Source>,
    name: String,
    reference: Option<String>,
    generation: Option<i64>,
    status: SourceStatus,
}

impl StatusSink for SourceStatusWriter {
    fn revision_name(&self, commit: &str) -> String {
        revision_name(self.reference.as_deref(), commit)
    }

    async fn record(&mut self, result: &PassResult<'_>, handled_request: Option<String>) {
        let mut next = next_status(&self.status, self.generation, result, &now());
        if handled_request.is_some() {
            next.last_handled_reconcile_at = handled_request;
        }
        if !worth_writing(&self.status, &next) {
            return;
        }
        let patch = serde_json::json!({ "status": next });
        match self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.status = next,
            Err(error) => tracing::warn!(%error, "cannot write the Source's status"),
        }
    }
}
