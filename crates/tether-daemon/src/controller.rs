//! Sources declared as `Source` custom resources: one watch (a reflector, so that
//! webhooks can match pushes on any replica), and while this process leads, one loop
//! per Source, restarted when its spec changes and stopped when it is deleted (its
//! objects stay). A Source's status is written by its loop ([`SourceStatusWriter`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tether_sops::Keyring;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Shared;
use super::claim;
use super::clock::now;
use super::crd::{
    ClusterStatus, DiscoverySpec, HistoryRewrite, RECONCILE_REQUESTED_ANNOTATION, Source,
    SourceSpec, SourceStatus, commit_of_revision, revision_name,
};
use super::discovery::DiscoveryTarget;
use super::feedback::SourceFeedback;
use super::identity::Identities;
use super::images::SourceImages;
use super::keys::DecryptionSecret;
use super::leader::{self, Election};
use super::members::{self, Membership};
use super::pull_request::{ActAs, PullRequestPlanner};
use super::runner::{
    ClusterState, Origin, PassError, PassOutcome, Rewrite, SourceLoop, StatusSink, Trigger,
    event_reporter,
};
use super::shard::Share;
use super::status::{PassResult, next_status, refusal_event, worth_writing};
use super::web::views::{Shown, SourceName, Writeback};
use super::webhook::Push;
use tether_engine::cluster::{Target, Tenure};
use tether_engine::discovery::Destination;
use tether_engine::driver::{Backoff, Retries};
use tether_engine::git::{Credentials, is_full_commit_id};
use tether_engine::images::automation::Automation;
use tether_engine::oci::Reference;
use tether_engine::reconcile::Reconciler;

/// Runs the loops of the Sources in `namespace` (all namespaces: `None`).
pub struct Controller {
    /// The daemon's own client: the Sources' watch, their status, claims and Leases.
    pub client: Client,
    /// The client the Sources that act as the daemon apply with: with `--shard`, it
    /// writes only while this replica's Lease holds (`tether_engine::cluster::Fence`).
    pub sources_client: Client,
    pub namespace: Option<String>,
    /// Where Git repositories are cached and the outboxes kept.
    pub directories: Directories,
    pub shared: Arc<Shared>,
    /// How long a pass in progress may go on after shutdown.
    pub shutdown_timeout: Duration,
    /// The KubernetesService this daemon's cluster is (`--cluster-name`): what the
    /// Sources' discovery puts discovered models under and names in events, and the
    /// daemon's own part of a Source whose models belong to several clusters. `None`:
    /// a repository's only KubernetesService.
    pub cluster_name: Option<String>,
    /// Who each Source acts as, and what it may name.
    pub identities: Identities,
}

/// A Source's loop while it runs.
struct Running {
    spec: SourceSpec,
    generation: Option<i64>,
    /// The reconcile request last passed on.
    requested: Option<String>,
    trigger: mpsc::Sender<Trigger>,
    /// Stops the loop: a pass in progress may finish within the shutdown timeout.
    stop: CancellationToken,
    /// Stops a pass in progress between objects: the Source was deleted or changed,
    /// so the pass no longer does what anyone asks.
    stop_pass: CancellationToken,
    task: JoinHandle<()>,
    /// Sharded: the Source's claim to release once the loop stopped (the Source's
    /// API, its name, this replica's identity).
    claimed: Option<(Api<Source>, String, String)>,
    /// The tenure of this replica's Lease the loop began in: it writes only in it.
    tenure: Tenure,
}

impl Running {
    /// The Source was deleted or changed: the loop and its pass stop at once.
    fn abandon(&self) {
        self.stop_pass.cancel();
        self.stop.cancel();
    }

    /// Whether the loop runs `source` as it is: then a new reconcile request is passed
    /// on to it.
    fn runs(&mut self, source: &Source, requested: Option<&String>) -> bool {
        if self.spec != source.spec || self.generation != source.metadata.generation {
            return false;
        }
        if let Some(value) = requested
            && self.requested.as_ref() != Some(value)
        {
            self.requested = Some(value.clone());
            let _ = self.trigger.try_send(Trigger::Requested(value.clone()));
        }
        true
    }

    /// Whether the loop began before this replica's Lease lapsed: it writes nothing
    /// more, and the Source is claimed again before a new loop runs it.
    fn outlived(&self, share: &Share) -> bool {
        share
            .claims()
            .is_some_and(|members| members.tenure != self.tenure)
    }
}

/// Passes a webhook's push to the Sources it concerns that another replica runs
/// (the leader, or their owner among the shard's members) through their annotation,
/// which that replica's watch sees.
#[derive(Clone)]
pub struct Forwarder {
    client: Client,
    store: Store<Source>,
    share: watch::Receiver<Share>,
}

impl Forwarder {
    /// Requests a reconcile of every Source `push` concerns that this replica does
    /// not run; returns how many.
    pub async fn forward(&self, push: &Push) -> usize {
        let elsewhere: Vec<(Api<Source>, String)> = self
            .store
            .state()
            .into_iter()
            .filter(|source| push.concerns(&source.spec.url, source.spec.reference.as_deref()))
            .filter(|source| !self.share.borrow().owns(&id_of(source)))
            .map(|source| (api_of(&self.client, &source), source.name_any()))
            .collect();
        let requests = elsewhere.into_iter().map(|(api, name)| async move {
            match request_reconcile(&api, &name).await {
                Ok(_) => 1,
                Err(error) => {
                    tracing::warn!(%error, source = %name, "cannot forward the push");
                    0
                }
            }
        });
        futures::stream::iter(requests)
            .buffer_unordered(16)
            .collect::<Vec<usize>>()
            .await
            .into_iter()
            .sum()
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

/// How many loops are stopped (and their claims released) at once.
const CONCURRENT_STOPS: usize = 32;

/// How often a sharded replica looks for claims of its own on Sources it does not run.
const STRAY_CLAIMS_SWEEP: Duration = Duration::from_secs(10);

/// How this replica shares the Sources with others.
#[derive(Clone, Debug)]
pub enum Replicas {
    /// It runs them all.
    Alone,
    /// It runs them all while it holds the leader's Lease.
    Elected(Election),
    /// It runs its part among the live members (`--shard`).
    Sharded(Membership),
}

/// The Source loops of this replica.
#[derive(Default)]
struct Loops {
    running: HashMap<String, Running>,
    /// Loops of Sources now owned elsewhere, stopping in the background: each ends
    /// with its claim released. A loop started again for one of them waits for it.
    stopping: HashMap<String, JoinHandle<()>>,
}

impl Loops {
    /// Whether a loop of `id` runs here, or still stops.
    fn runs(&self, id: &str) -> bool {
        self.running.contains_key(id) || self.stopping.contains_key(id)
    }
}

/// What the Source loops started by [`Controller::sync`] read: the watch's cache
/// and this replica's share.
struct Watched {
    store: Store<Source>,
    share: watch::Receiver<Share>,
}

impl Controller {
    /// The daemon over the cluster's Sources until `shutdown`, as one of `replicas`:
    /// the loops stop (passes finish within the timeout) before the Lease is
    /// released, so that the next leader or owner never writes beside this one.
    pub async fn run_replicated(self, replicas: Replicas, shutdown: CancellationToken) {
        let (share_tx, share) = watch::channel(match replicas {
            Replicas::Alone => Share::Everything,
            Replicas::Elected(_) | Replicas::Sharded(_) => Share::Nothing,
        });
        let release = CancellationToken::new();
        let membership = match replicas {
            Replicas::Alone => {
                self.shared.metrics.set_leader(true);
                None
            }
            Replicas::Elected(election) => {
                let (leading_tx, leading) = watch::channel(false);
                Some(tokio::spawn(lead(
                    self.client.clone(),
                    election,
                    self.shared.clone(),
                    (leading_tx, leading),
                    share_tx,
                    release.clone(),
                )))
            }
            Replicas::Sharded(membership) => Some(tokio::spawn(members::run(
                self.client.clone(),
                membership,
                self.shared.clone(),
                share_tx,
                release.clone(),
            ))),
        };
        self.run(share, shutdown).await;
        release.cancel();
        if let Some(membership) = membership {
            let _ = membership.await;
        }
    }

    /// Watches the Sources until `shutdown`; runs the loops of those `share` gives
    /// this replica.
    pub async fn run(self, mut share: watch::Receiver<Share>, shutdown: CancellationToken) {
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
            share: share.clone(),
        });
        let watched = Watched {
            store: store.clone(),
            share: share.clone(),
        };
        let mut loops = Loops::default();
        let mut synced = false;
        // A sharded replica looks again now and then for claims of its own left on
        // Sources it does not run (a release that failed).
        let mut sweep = tokio::time::interval(STRAY_CLAIMS_SWEEP);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = share.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    if synced {
                        self.sync_all(&watched, &mut loops).await;
                    }
                }
                _ = sweep.tick() => {
                    if synced && share.borrow().claims().is_some() {
                        self.sync_all(&watched, &mut loops).await;
                    }
                }
                event = events.next() => match event {
                    Some(Ok(Event::InitDone)) => {
                        synced = true;
                        self.shared.set_ready();
                        self.sync_all(&watched, &mut loops).await;
                    }
                    Some(Ok(Event::Apply(source))) if synced && share.borrow().owns(&id_of(&source)) => {
                        self.sync(&source, &watched, &mut loops);
                    }
                    Some(Ok(Event::Delete(source))) => {
                        let id = id_of(&source);
                        if let Some(deleted) = loops.running.remove(&id) {
                            tracing::info!(source = %id, "the Source was deleted: its loop stops (its objects stay)");
                            deleted.abandon();
                            self.stop(vec![deleted]).await;
                        }
                        self.shared.metrics.forget(&id);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::warn!(%error, "the Source watch failed; retrying"),
                    None => break,
                },
            }
        }
        self.stop(loops.running.into_values().collect()).await;
        for (_, stopping) in loops.stopping {
            let _ = stopping.await;
        }
    }

    /// Brings the running loops in line with the store and this replica's share:
    /// the loops of deleted Sources and of those it no longer owns stop (and, when
    /// sharded, their claims are released), those it owns run.
    async fn sync_all(&self, watched: &Watched, loops: &mut Loops) {
        let running = &mut loops.running;
        let share = watched.share.borrow().clone();
        let sources = watched.store.state();
        let gone: Vec<String> = running
            .keys()
            .filter(|id| !sources.iter().any(|s| id_of(s) == **id))
            .cloned()
            .collect();
        let deleted: Vec<Running> = gone.iter().filter_map(|id| running.remove(id)).collect();
        for running in &deleted {
            running.abandon();
        }
        self.stop(deleted).await;
        for id in &gone {
            self.shared.metrics.forget(id);
        }
        let moved: Vec<String> = running
            .iter()
            .filter(|(id, loop_)| !share.owns(id) || loop_.outlived(&share))
            .map(|(id, _)| id.clone())
            .collect();
        if !moved.is_empty() {
            tracing::info!(
                count = moved.len(),
                "Sources owned elsewhere now, or run since before this replica's Lease lapsed: their loops stop"
            );
        }
        // In the background: the controller goes on (other Sources may be moving
        // here meanwhile), and the Source's new owner waits for the claim.
        for id in &moved {
            if let Some(stopped) = running.remove(id) {
                loops
                    .stopping
                    .insert(id.clone(), self.stop_in_background(stopped));
            }
            self.shared.metrics.forget(id);
        }
        loops.stopping.retain(|_, stopping| !stopping.is_finished());
        if let Some(members) = share.claims() {
            let strays = sources.iter().filter(|s| {
                !share.owns(&id_of(s)) && claim::stray(s, &members.me, loops.runs(&id_of(s)))
            });
            for source in strays {
                claim::release(
                    &api_of(&self.client, source),
                    &source.name_any(),
                    &members.me,
                )
                .await;
            }
        }
        for source in sources.iter().filter(|s| share.owns(&id_of(s))) {
            self.sync(source, watched, loops);
        }
    }

    /// Starts, restarts or nudges one Source's loop.
    fn sync(&self, source: &Source, watched: &Watched, loops: &mut Loops) {
        let running = &mut loops.running;
        let id = id_of(source);
        let requested = source
            .annotations()
            .get(RECONCILE_REQUESTED_ANNOTATION)
            .cloned();
        if let Some(current) = running.get_mut(&id)
            && current.runs(source, requested.as_ref())
        {
            return;
        }
        // A changed spec (suspended, say) stops the old loop's pass between objects;
        // the new loop starts once the old one is done, so that the two never write
        // side by side.
        let previous = running
            .remove(&id)
            .map(|old| {
                old.abandon();
                old.task
            })
            // A loop stopping since the Source moved away, back here now.
            .or_else(|| loops.stopping.remove(&id));
        let stop = CancellationToken::new();
        let stop_pass = CancellationToken::new();
        let tenure = match watched.share.borrow().claims() {
            Some(members) => members.tenure.clone(),
            None => self.shared.fence.tenure(),
        };
        // One pending trigger is enough: a pass reads the whole source.
        let (trigger, triggers) = mpsc::channel(1);
        let run = run_source(
            self.client.clone(),
            source.clone(),
            Daemon {
                directories: self.directories.clone(),
                shared: self.shared.clone(),
                shutdown_timeout: self.shutdown_timeout,
                identities: self.identities.clone(),
                cluster_name: self.cluster_name.clone(),
                sources_client: self.sources_client.clone(),
            },
            Stops {
                loop_: stop.clone(),
                pass: stop_pass.clone(),
                tenure: tenure.clone(),
            },
            (trigger.clone(), triggers),
        );
        let wait_at_most = self.shutdown_timeout + Duration::from_secs(1);
        let namespace = source.namespace().unwrap_or_default();
        let name = source.name_any();
        let api = api_of(&self.client, source);
        let claimed = watched
            .share
            .borrow()
            .claims()
            .map(|members| (api.clone(), name.clone(), members.me.clone()));
        let (store, share, cancelled) =
            (watched.store.clone(), watched.share.clone(), stop.clone());
        let task = tokio::spawn(
            async move {
                if let Some(previous) = previous {
                    // It stops between objects: a moment.
                    stopped(previous, wait_at_most).await;
                }
                // Sharded: the Source's claim first, so that the replica that ran it
                // before has stopped.
                if claim::acquire(&api, &store, (&namespace, &name), &share, &cancelled).await {
                    run.await;
                }
            }
            // The span's fields are set here, once: a field recorded on this long-lived
            // span would be kept and logged once per pass (a pass has its own span).
            .instrument(tracing::info_span!("source", source = %id)),
        );
        let started = Running {
            spec: source.spec.clone(),
            generation: source.metadata.generation,
            requested,
            trigger,
            stop,
            stop_pass,
            task,
            claimed,
            tenure,
        };
        loops.running.insert(id, started);
    }

    /// Stops a loop without waiting: its pass in progress may finish within the
    /// shutdown timeout, then its claim is released.
    fn stop_in_background(&self, running: Running) -> JoinHandle<()> {
        tokio::spawn(self.stop_one(running))
    }

    /// Stops loops, letting passes in progress finish within the shutdown timeout,
    /// then releases the claims of those that held one.
    async fn stop(&self, loops: Vec<Running>) {
        for running in &loops {
            running.stop.cancel();
        }
        // All at once: each waits for its own pass, then gives its claim back.
        futures::stream::iter(loops.into_iter().map(|running| self.stop_one(running)))
            .buffer_unordered(CONCURRENT_STOPS)
            .collect::<()>()
            .await;
    }

    /// Waits for a stopped loop (its pass may finish within the shutdown timeout),
    /// then releases its claim.
    fn stop_one(&self, running: Running) -> impl Future<Output = ()> + Send + 'static {
        running.stop.cancel();
        let wait_at_most = self.shutdown_timeout + Duration::from_secs(1);
        async move {
            stopped(running.task, wait_at_most).await;
            if let Some((api, name, me)) = running.claimed {
                claim::release(&api, &name, &me).await;
            }
        }
    }
}

/// Waits for a stopping loop's task: its pass may finish within `wait_at_most`, then
/// it is aborted (and awaited, so that nothing of it goes on).
async fn stopped(mut task: JoinHandle<()>, wait_at_most: Duration) {
    if tokio::time::timeout(wait_at_most, &mut task).await.is_err() {
        task.abort();
        let _ = task.await;
    }
}

/// The leader election, as a share: everything while leading, nothing otherwise.
async fn lead(
    client: Client,
    election: Election,
    shared: Arc<Shared>,
    (leading_tx, mut leading): (watch::Sender<bool>, watch::Receiver<bool>),
    share: watch::Sender<Share>,
    release: CancellationToken,
) {
    let election = tokio::spawn(leader::run(client, election, shared, leading_tx, release));
    while leading.changed().await.is_ok() {
        let leads = *leading.borrow();
        let _ = share.send(if leads {
            Share::Everything
        } else {
            Share::Nothing
        });
    }
    let _ = election.await;
}

fn api_of(client: &Client, source: &Source) -> Api<Source> {
    Api::namespaced(client.clone(), &source.namespace().unwrap_or_default())
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

/// What stops one Source's loop.
struct Stops {
    /// The loop (a pass in progress may finish within the shutdown timeout).
    loop_: CancellationToken,
    /// The pass in progress, between objects.
    pass: CancellationToken,
    /// Writes stop, between objects, once this tenure of the replica's Lease ends.
    tenure: Tenure,
}

/// What a Source's loop has of the daemon.
struct Daemon {
    directories: Directories,
    shared: Arc<Shared>,
    /// How long a pass in progress may go on after shutdown.
    shutdown_timeout: Duration,
    identities: Identities,
    /// The KubernetesService the daemon's own cluster is.
    cluster_name: Option<String>,
    /// What a Source that acts as the daemon applies with.
    sources_client: Client,
}

/// One Source's loop, until `stops.loop_`.
async fn run_source(
    client: Client,
    source: Source,
    daemon: Daemon,
    stops: Stops,
    triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
) {
    let stop = stops.loop_;
    let id = id_of(&source);
    let namespace = source.namespace().unwrap_or_default();
    let mut status = SourceStatusWriter::new(&client, &source);
    if source.spec.suspend {
        status.record(&PassResult::Suspended, None).await;
        return;
    }
    let Some(credentials) = wait_for_credentials(&client, &source, &mut status, &stop).await else {
        return;
    };
    let discovery = source.spec.discovery.as_ref().map(|discovery| {
        discovery_target(
            &source,
            discovery,
            &daemon.directories,
            &credentials,
            daemon.cluster_name.clone(),
        )
    });
    let shown = shown_on_page(&source, &daemon.directories, &credentials);
    let images = image_automation(&source, &daemon, &client, &credentials);
    let planner_credentials = credentials.clone();
    let Some((reconciler, settings)) =
        source_reconciler(&daemon, &source, &client, credentials, &mut status).await
    else {
        return;
    };
    let feedback = open_feedback(&client, &source, &daemon, &mut status).await;
    let mut work = SourceLoop::new(
        &id,
        reconciler,
        settings.plan,
        settings.apply,
        settings.interval,
        daemon.shared.clone(),
        status,
    )
    .with_triggers(triggers)
    .with_drift_policy(settings.drift)
    .with_rewrite_policy(settings.rewrites)
    .with_last_applied(applied_before(&source))
    .with_recorded_rewrite(rewrite_recorded(&source))
    .with_pass_stop(stops.pass, stops.tenure)
    .with_events_by(client.clone())
    .with_feedback(feedback.clone())
    .shown_as(shown);
    if let Some(decryption) = &source.spec.decryption {
        let secret = DecryptionSecret::new(client.clone(), &namespace, &decryption.secret_ref.name);
        work = work.with_decryption(secret);
    }
    pass_on_request(&source, &work.trigger());
    let images = images.map(|images| images(work.trigger()));
    let beside = spawn_beside(&client, discovery, images, work.first_pass(), &stop);
    let origin = Origin {
        url: Some(source.spec.url.clone()),
        reference: source.spec.reference.clone(),
    };
    let acting = SourceIdentity(&daemon, &source, &client);
    let planner = feedback
        .filter(|f| f.plans_pull_requests())
        .map(|feedback| {
            let cache = daemon.directories.cache.join("pull-requests");
            PullRequestPlanner::new(
                &source,
                planner_credentials,
                feedback,
                cache,
                &acting,
                &client,
            )
        });
    let loop_ = work.run(origin, daemon.shutdown_timeout, &stop, log_pass);
    beside_pull_requests(loop_, planner, &daemon.shared, &id, &stop).await;
    for task in beside {
        let _ = task.await;
    }
}

/// The Source's feedback (commit statuses, notices), with its outbox in the daemon's
/// state directory. One that cannot start is said in the status and an Event; the
/// Source is applied all the same.
async fn open_feedback(
    client: &Client,
    source: &Source,
    daemon: &Daemon,
    status: &mut SourceStatusWriter,
) -> Option<Arc<SourceFeedback>> {
    let dir = daemon.directories.state.join("feedback").join(format!(
        "{}-{}",
        source.namespace().unwrap_or_default(),
        source.name_any()
    ));
    match SourceFeedback::open(client, source, &dir, daemon.cluster_name.as_deref()).await {
        Ok(feedback) => feedback,
        Err(error) => {
            tracing::warn!(error = %error, "no feedback for the Source");
            status.warn("FeedbackUnavailable", error.to_string()).await;
            None
        }
    }
}

/// The Source's settings and its reconciler: acting as its identity, confined as it
/// is, with no key until its decryption Secret is read. `None` when either cannot be
/// (said in the status).
async fn source_reconciler(
    daemon: &Daemon,
    source: &Source,
    client: &Client,
    credentials: Credentials,
    status: &mut SourceStatusWriter,
) -> Option<(Reconciler, super::crd::SourceSettings)> {
    let namespace = source.namespace().unwrap_or_default();
    let cache = daemon.directories.cache.clone();
    let settings = source
        .spec
        .settings(&namespace, &source.name_any(), cache, credentials)
        .map_err(|error| ("InvalidSpec", error.to_string()));
    let reconciler = match settings {
        Ok(settings) => {
            let reconciler = Reconciler::new(
                settings.repo.clone(),
                Target::default(),
                settings.inventory.clone(),
            );
            acting_as(daemon, source, reconciler, client)
                .await
                .map(|reconciler| (reconciler, settings))
                .map_err(|message| ("IdentityUnavailable", message))
        }
        Err(error) => Err(error),
    };
    match reconciler {
        Ok((reconciler, settings)) => {
            let no_keys = Keyring::default().given_by(crate::keys::GIVEN_BY);
            Some((reconciler.with_keys(Arc::new(no_keys)), settings))
        }
        Err((reason, message)) => {
            let result = PassResult::Failed {
                revision: None,
                reason,
                message,
                stalled: true,
            };
            status.record(&result, None).await;
            None
        }
    }
}

/// A Source's identity (the daemon's, the Source, the daemon's client), for what acts
/// for it beside its loop: its pull requests' plans.
struct SourceIdentity<'a>(&'a Daemon, &'a Source, &'a Client);

impl ActAs for SourceIdentity<'_> {
    fn act_as(
        &self,
        reconciler: Reconciler,
    ) -> futures::future::BoxFuture<'_, Result<Reconciler, String>> {
        let SourceIdentity(daemon, source, client) = *self;
        Box::pin(acting_as(daemon, source, reconciler, client))
    }
}

/// Runs a Source's loop and, beside it, its pull-request planner (when it plans
/// them), reachable by webhooks while both run.
async fn beside_pull_requests(
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
    shared.register_planner(id, spec.url.clone(), spec.reference.clone(), requests);
    futures::join!(loop_, planner.run(pull_requests, stop));
    shared.unregister_planner(id);
}

/// Asks `trigger` for a pass when the Source's reconcile request is one its status
/// does not say was handled.
fn pass_on_request(source: &Source, trigger: &mpsc::Sender<Trigger>) {
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
}

/// `reconciler` acting for the Source: as its ServiceAccount, through a client of
/// its own that impersonates it (everything done for the Source, its inventory
/// included, goes through it), else through the daemon's shared client; on the other
/// clusters of its models through its namespace's Cluster resources, as the same
/// identity; confined as its spec and the daemon say. An error when the client
/// cannot be made (the daemon's own kubeconfig unreadable now).
async fn acting_as(
    daemon: &Daemon,
    source: &Source,
    reconciler: Reconciler,
    client: &Client,
) -> Result<Reconciler, String> {
    let identities = &daemon.identities;
    let namespace = source.namespace().unwrap_or_default();
    let identity = identities.impersonation(&namespace, &source.spec);
    let others = crate::clusters::resolver(client.clone(), namespace.clone(), identity.clone());
    let reconciler = match identity {
        Some(identity) => match identities.client(&identity).await {
            Ok(own) => reconciler.with_client(own).acting_as(identity.user),
            Err(error) => {
                return Err(format!(
                    "no client acting as {}: {}",
                    identity.user,
                    tether_core::error_chain(&error)
                ));
            }
        },
        None => reconciler.with_client(daemon.sources_client.clone()),
    }
    .with_other_clusters(daemon.cluster_name.clone(), others);
    Ok(match identities.confinement(&namespace, &source.spec) {
        Some(confinement) => reconciler.with_confinement(confinement),
        None => reconciler,
    })
}

/// The commit the Source's status says was applied last, if it was applied from the
/// ref the Source names now.
fn applied_before(source: &Source) -> Option<String> {
    let revision = source.status.as_ref()?.last_applied_revision.as_deref()?;
    commit_of_revision(revision, source.spec.reference.as_deref()).map(str::to_string)
}

/// The rewrite the Source's status records, if of the ref the Source names now.
fn rewrite_recorded(source: &Source) -> Option<Rewrite> {
    let recorded = source.status.as_ref()?.last_history_rewrite.as_ref()?;
    let reference = source.spec.reference.as_deref();
    Some(Rewrite {
        from: commit_of_revision(&recorded.from, reference)?.to_string(),
        to: commit_of_revision(&recorded.to, reference)?.to_string(),
    })
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

/// A pass's outcome in the log (the source is the span's). A quiet pass, which read
/// and changed nothing, is a debug line: at info, the log grows with what happens,
/// not with time.
fn log_pass(outcome: &Result<PassOutcome, PassError>) {
    match outcome {
        Ok(pass) if pass.quiet || changed_nothing(pass) => {
            tracing::debug!(
                revision = pass.revision.as_deref(),
                "pass done: nothing changed"
            );
        }
        Ok(pass) => tracing::info!(
            revision = pass.revision.as_deref(),
            created = pass.report.created(),
            configured = pass.report.configured(),
            pruned = pass.report.pruned(),
            corrected = pass.corrected.len(),
            "pass done"
        ),
        Err(PassError::Stopped) => tracing::info!("pass stopped"),
        // The driver logs a failure (once, not on each retry of the same).
        Err(_) => {}
    }
}

/// A pass that created, configured, pruned and corrected nothing (what failed is in
/// the status).
fn changed_nothing(pass: &PassOutcome) -> bool {
    let report = &pass.report;
    report.created() + report.configured() + report.pruned() + report.replaced() == 0
        && pass.corrected.is_empty()
}

/// Where a Source's discovery commits: its repository and path, on the discovery's
/// branch (else the Source's ref when it is a branch, else main), in a clone of its
/// own (the loop fetches beside it), with an outbox of its own; its models land under
/// `cluster` (the daemon's `--cluster-name`).
fn discovery_target(
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

/// How `source` is shown on the web page, and where its day-2 actions commit: its
/// branch (or a new one per action, with `proposeActions`), through a clone of its
/// own beside the Git cache; nowhere for an OCI artifact.
fn shown_on_page(source: &Source, directories: &Directories, credentials: &Credentials) -> Shown {
    let spec = &source.spec;
    let writeback = (!Reference::is_oci(&spec.url)).then(|| Writeback {
        destination: Destination::Remote {
            url: spec.url.clone(),
            path: PathBuf::from(spec.path.as_deref().unwrap_or(".")),
            cache: directories.cache.join("actions"),
            credentials: credentials.clone(),
        },
        branch: spec.reference.clone().filter(|r| !is_full_commit_id(r)),
        propose: spec.propose_actions,
    });
    Shown {
        name: SourceName {
            namespace: source.namespace().unwrap_or_default(),
            name: source.name_any(),
        },
        writeback,
        path: spec.path.clone(),
    }
}

/// The Source's image automation (`spec.imageAutomation`), given the trigger of its
/// loop: on its branch (else main), through a clone of its own beside the Git cache;
/// none for an OCI artifact, which tether cannot commit to.
fn image_automation<'a>(
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
        id: id_of(source),
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

/// Discovery and image automation, beside the Source's loop once its first pass is
/// over, until `stop`.
fn spawn_beside(
    client: &Client,
    discovery: Option<DiscoveryTarget>,
    images: Option<SourceImages>,
    first_pass: tokio::sync::watch::Receiver<bool>,
    stop: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let discovery = discovery
        .map(|target| spawn_discovery(client.clone(), target, first_pass.clone(), stop.clone()));
    let images = images.map(|images| spawn_images(images, first_pass, stop.clone()));
    discovery.into_iter().chain(images).collect()
}

/// Runs the image automation once the Source's first pass is over, until `stop`.
fn spawn_images(
    images: SourceImages,
    mut first_pass: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(
        async move {
            tokio::select! {
                _ = first_pass.wait_for(|done| *done) => {}
                () = stop.cancelled() => return,
            }
            images.run(stop).await;
        }
        .in_current_span(),
    )
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

/// The Git (or registry) credentials of the Source's `secretRef`.
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
    // A registry's Secret as kubectl and Flux make it (type dockerconfigjson).
    if let (Some(config), Ok(artifact)) = (
        data.get(".dockerconfigjson"),
        tether_engine::oci::Reference::parse(&spec.url),
    ) {
        let found =
            tether_engine::oci::Credentials::from_docker_config(&config.0, &artifact.registry)
                .ok_or_else(|| {
                    format!(
                        "the Secret {namespace}/{} has no credentials for {}",
                        reference.name, artifact.registry
                    )
                })?;
        return Ok(Credentials {
            token: Some(found.password),
            username: Some(found.username),
            ssh_key: None,
        });
    }
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
/// nothing to do), and records Events on the Source.
pub struct SourceStatusWriter {
    api: Api<Source>,
    name: String,
    reference: Option<String>,
    generation: Option<i64>,
    status: SourceStatus,
    /// Events on the Source (kube's recorder: a repeated Event is one with a count).
    events: Recorder,
    regarding: ObjectReference,
    /// A rewrite seen and not yet written in the status: the next write carries it.
    rewrite: Option<HistoryRewrite>,
    /// How each cluster fared in the last pass, for the next write.
    clusters: Option<Vec<ClusterState>>,
}

/// The part of the Source's status its passes write: the image policies' part is
/// the image automation's, and the owner the claim's, so a pass's patch never
/// carries (nor puts back) an older copy of them.
fn passes_status(source: &Source) -> SourceStatus {
    let mut status = source.status.clone().unwrap_or_default();
    status.images.clear();
    status.images_summary = None;
    status.owner = None;
    status
}

impl SourceStatusWriter {
    fn new(client: &Client, source: &Source) -> Self {
        let reporter = event_reporter();
        SourceStatusWriter {
            api: Api::namespaced(client.clone(), &source.namespace().unwrap_or_default()),
            name: source.name_any(),
            reference: source.spec.reference.clone(),
            generation: source.metadata.generation,
            status: passes_status(source),
            events: Recorder::new(client.clone(), reporter),
            regarding: source.object_ref(&()),
            rewrite: None,
            clusters: None,
        }
    }

    /// A warning Event on the Source (`kubectl describe source`).
    async fn warn(&self, reason: &str, note: String) {
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Configure".into(),
            secondary: None,
        };
        if let Err(error) = self.events.publish(&event, &self.regarding).await {
            tracing::warn!(%error, reason, "cannot record the Source's event");
        }
    }
}

/// How a cluster fared, as a Source's status says it.
fn cluster_status(state: &ClusterState) -> ClusterStatus {
    ClusterStatus {
        name: state.name.clone(),
        ready: match state.ready {
            true => "True",
            false => "False",
        }
        .to_string(),
        reason: state.reason.to_string(),
        message: state.message.clone(),
    }
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
        if let Some(rewrite) = &self.rewrite {
            next.last_history_rewrite = Some(rewrite.clone());
        }
        if let Some(clusters) = &self.clusters {
            next.clusters = clusters.iter().map(cluster_status).collect();
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
            Ok(_) => {
                self.status = next;
                self.rewrite = None;
            }
            Err(error) => tracing::warn!(%error, "cannot write the Source's status"),
        }
        // Said once per change of the status, not on each pass that repeats it.
        if let Some((reason, note)) = refusal_event(result) {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(note),
                action: "Apply".into(),
                secondary: None,
            };
            if let Err(error) = self.events.publish(&event, &self.regarding).await {
                tracing::warn!(%error, reason, "cannot record the refusal's event");
            }
        }
    }

    fn record_clusters(&mut self, clusters: Vec<ClusterState>) {
        self.clusters = Some(clusters);
    }

    async fn record_rewrite(&mut self, rewrite: &Rewrite) {
        let (from, to) = (
            self.revision_name(&rewrite.from),
            self.revision_name(&rewrite.to),
        );
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: "HistoryRewritten".into(),
            note: Some(format!(
                "the ref moved from {from} to {to}, which does not descend from it (a force-push?)"
            )),
            action: "Fetch".into(),
            secondary: None,
        };
        if let Err(error) = self.events.publish(&event, &self.regarding).await {
            tracing::warn!(%error, "cannot record the HistoryRewritten event");
        }
        self.rewrite = Some(HistoryRewrite {
            from,
            to,
            time: now(),
        });
    }
}
