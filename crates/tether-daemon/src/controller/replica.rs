//! One replica's Source loops: a watch of the Sources (a reflector, so that webhooks
//! can match pushes on any replica), and while this replica leads or owns them, one
//! loop per Source, restarted when its spec changes and stopped when it is deleted
//! (its objects stay) or owned elsewhere (its claim then released).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tether_api::source_spec::{RECONCILE_REQUESTED_ANNOTATION, Source, SourceSpec};
use tether_engine::cluster::Tenure;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::source_run::run_source;
use super::wiring::{Daemon, Directories, Stops};
use crate::claim::{self, MemberLeases};
use crate::forward::Forwarder;
use crate::identity::Identities;
use crate::leader::{self, Election};
use crate::members::{self, Membership};
use crate::shard::{self, Share, source_id};
use crate::shared::Shared;
use crate::source_loop::PassStop;
use crate::source_status::Handover;
use crate::switchboard::Trigger;
use crate::watch_backoff::WatchBackoff;

/// Runs the loops of the Sources in `namespace` (all namespaces: `None`).
pub(crate) struct Controller {
    /// The daemon's own client: the Sources' watch, their status, claims and Leases.
    pub(crate) client: Client,
    /// The client the Sources that act as the daemon apply with: with `--shard`, it
    /// writes only while this replica's Lease holds (`tether_engine::cluster::Fence`).
    pub(crate) sources_client: Client,
    pub(crate) namespace: Option<String>,
    /// Where Git repositories are cached and the outboxes kept.
    pub(crate) directories: Directories,
    pub(crate) shared: Arc<Shared>,
    /// How long a pass in progress may go on after shutdown.
    pub(crate) shutdown_timeout: Duration,
    /// The KubernetesService this daemon's cluster is (`--cluster-name`): what the
    /// Sources' discovery puts discovered models under and names in events, and the
    /// daemon's own part of a Source whose models belong to several clusters. `None`:
    /// a repository's only KubernetesService.
    pub(crate) cluster_name: Option<String>,
    /// Who each Source acts as, and what it may name.
    pub(crate) identities: Identities,
}

/// How this replica shares the Sources with others.
#[derive(Clone, Debug)]
pub(crate) enum Replicas {
    /// It runs them all.
    Alone,
    /// It runs them all while it holds the leader's Lease.
    Elected(Election),
    /// It runs its part among the live members (`--shard`).
    Sharded(Membership),
}

/// A Source's loop while it runs.
struct Running {
    /// The Source's id (`namespace/name`).
    id: String,
    spec: SourceSpec,
    generation: Option<i64>,
    /// The deletions approved ([`Source::approved_deletions`]): the loop's applies
    /// carry them out, so a new approval starts a new loop.
    approval: Option<String>,
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
        if self.spec != source.spec
            || self.generation != source.metadata.generation
            || self.approval.as_deref() != source.approved_deletions()
        {
            return false;
        }
        // A loop ends only when stopped: one that ended by itself (its claim never
        // held, say) is started again at the next look.
        if self.task.is_finished() {
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

/// How many loops are stopped (and their claims released) at once.
const CONCURRENT_STOPS: usize = 32;

/// How often a sharded replica looks for claims of its own on Sources it does not run.
const STRAY_CLAIMS_SWEEP: Duration = Duration::from_secs(10);

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
    /// Sharded: the members' Leases, read before a claim is taken from another.
    leases: Option<MemberLeases>,
}

impl Controller {
    /// The daemon over the cluster's Sources until `shutdown`, as one of `replicas`:
    /// the loops stop (passes finish within the timeout) before the Lease is
    /// released, so that the next leader or owner never writes beside this one.
    pub(crate) async fn run_replicated(self, replicas: Replicas, shutdown: CancellationToken) {
        let (share_tx, share) = watch::channel(match replicas {
            Replicas::Alone => Share::Everything,
            Replicas::Elected(_) | Replicas::Sharded(_) => Share::Nothing,
        });
        let release = CancellationToken::new();
        let leases = match &replicas {
            Replicas::Sharded(membership) => Some(MemberLeases::new(
                Api::namespaced(self.client.clone(), &membership.namespace),
                membership.group.clone(),
            )),
            Replicas::Alone | Replicas::Elected(_) => None,
        };
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
        self.run(share, leases, shutdown).await;
        release.cancel();
        if let Some(membership) = membership {
            let _ = membership.await;
        }
    }

    /// Watches the Sources until `shutdown`; runs the loops of those `share` gives
    /// this replica.
    async fn run(
        self,
        mut share: watch::Receiver<Share>,
        leases: Option<MemberLeases>,
        shutdown: CancellationToken,
    ) {
        let api: Api<Source> = match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        let (store, writer) = reflector::store();
        let mut events =
            reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
                .backoff(WatchBackoff::new())
                .boxed();
        self.shared.set_forwarder(Forwarder {
            client: self.client.clone(),
            store: store.clone(),
            share: share.clone(),
        });
        let watched = Watched {
            store: store.clone(),
            share: share.clone(),
            leases,
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
                    Some(Ok(Event::Apply(source))) if synced && share.borrow().owns(&source_id(&source)) => {
                        self.sync(&source, &watched, &mut loops);
                    }
                    Some(Ok(Event::Delete(source))) => {
                        let id = source_id(&source);
                        if let Some(deleted) = loops.running.remove(&id) {
                            tracing::info!(source = %id, "the Source was deleted: its loop stops (its objects stay)");
                            deleted.abandon();
                            let stopping = self.stop_in_background(deleted, Handover::Stopping);
                            loops.stopping.insert(id.clone(), stopping);
                        }
                        self.shared.metrics.forget(&id);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::warn!(%error, "the Source watch failed; retrying"),
                    None => break,
                },
            }
        }
        let running = loops.running.into_values().collect();
        self.stop(running, &Handover::Stopping).await;
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
            .filter(|id| !sources.iter().any(|s| source_id(s) == **id))
            .cloned()
            .collect();
        let deleted: Vec<Running> = gone.iter().filter_map(|id| running.remove(id)).collect();
        for running in &deleted {
            running.abandon();
        }
        self.stop(deleted, &Handover::Stopping).await;
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
                loops.stopping.insert(
                    id.clone(),
                    self.stop_in_background(stopped, handover_of(&share, id)),
                );
            }
        }
        loops.stopping.retain(|_, stopping| !stopping.is_finished());
        // In the background too, each kept with the stopping loops: the controller
        // waits for no request (one to an API server it is cut from takes minutes),
        // and a loop started again for the Source waits for the release.
        if let Some(members) = share.claims() {
            let strays: Vec<&Arc<Source>> = sources
                .iter()
                .filter(|s| {
                    !share.owns(&source_id(s))
                        && claim::stray(s, &members.me, loops.runs(&source_id(s)))
                })
                .collect();
            for source in strays {
                let (api, name, me) = (
                    api_of(&self.client, source),
                    source.name_any(),
                    members.me.clone(),
                );
                let handover = handover_of(&share, &source_id(source));
                let release = async move { claim::release(&api, &name, &me, &handover).await };
                loops
                    .stopping
                    .insert(source_id(source), tokio::spawn(release));
            }
        }
        for source in sources.iter().filter(|s| share.owns(&source_id(s))) {
            self.sync(source, watched, loops);
        }
    }

    /// Starts, restarts or nudges one Source's loop.
    fn sync(&self, source: &Source, watched: &Watched, loops: &mut Loops) {
        let running = &mut loops.running;
        let id = source_id(source);
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
        let started = self.start(source, watched, previous, requested);
        loops.running.insert(id, started);
    }

    /// A new loop of `source`, started once `previous` (the Source's loop before, if
    /// any) has stopped and the Source's claim is held.
    fn start(
        &self,
        source: &Source,
        watched: &Watched,
        previous: Option<JoinHandle<()>>,
        requested: Option<String>,
    ) -> Running {
        let id = source_id(source);
        let stop = CancellationToken::new();
        let stop_pass = CancellationToken::new();
        let tenure = match watched.share.borrow().claims() {
            Some(members) => members.tenure.clone(),
            None => self.shared.fence.tenure(),
        };
        // One pending trigger is enough: a pass reads the whole source.
        let (trigger, triggers) = mpsc::channel(1);
        let daemon = Daemon {
            directories: self.directories.clone(),
            shared: self.shared.clone(),
            shutdown_timeout: self.shutdown_timeout,
            identities: self.identities.clone(),
            cluster_name: self.cluster_name.clone(),
            sources_client: self.sources_client.clone(),
        };
        let stops = Stops {
            loop_: stop.clone(),
            pass: PassStop {
                pass: stop_pass.clone(),
                tenure: tenure.clone(),
            },
        };
        let wait_at_most = self.shutdown_timeout + Duration::from_secs(1);
        let api = api_of(&self.client, source);
        let claimed = watched
            .share
            .borrow()
            .claims()
            .map(|members| (api.clone(), source.name_any(), members.me.clone()));
        let (store, share, leases, client) = (
            watched.store.clone(),
            watched.share.clone(),
            watched.leases.clone(),
            self.client.clone(),
        );
        let (declared, loop_trigger) = (source.clone(), trigger.clone());
        let task = tokio::spawn(
            async move {
                if let Some(previous) = previous {
                    // It stops between objects: a moment.
                    stopped(previous, wait_at_most).await;
                }
                // Sharded: the Source's claim first, so that the replica that ran it
                // before has stopped.
                let held = claim::acquire(
                    &api,
                    leases.as_ref(),
                    &store,
                    &declared,
                    &share,
                    &stops.loop_,
                )
                .await;
                if let Some(source) = held {
                    run_source(client, source, daemon, stops, (loop_trigger, triggers)).await;
                }
            }
            // The span's fields are set here, once: a field recorded on this long-lived
            // span would be kept and logged once per pass (a pass has its own span).
            .instrument(tracing::info_span!("source", source = %id)),
        );
        Running {
            id,
            spec: source.spec.clone(),
            generation: source.metadata.generation,
            approval: source.approved_deletions().map(str::to_string),
            requested,
            trigger,
            stop,
            stop_pass,
            task,
            claimed,
            tenure,
        }
    }

    /// Stops a loop without waiting: its pass in progress may finish within the
    /// shutdown timeout, then its claim is released.
    fn stop_in_background(&self, running: Running, handover: Handover) -> JoinHandle<()> {
        tokio::spawn(self.stop_one(running, handover))
    }

    /// Stops loops, letting passes in progress finish within the shutdown timeout,
    /// then releases the claims of those that held one.
    async fn stop(&self, loops: Vec<Running>, handover: &Handover) {
        for running in &loops {
            running.stop.cancel();
        }
        // All at once: each waits for its own pass, then gives its claim back.
        let stops = loops
            .into_iter()
            .map(|running| self.stop_one(running, handover.clone()));
        futures::stream::iter(stops)
            .buffer_unordered(CONCURRENT_STOPS)
            .collect::<()>()
            .await;
    }

    /// Waits for a stopped loop (its pass may finish within the shutdown timeout),
    /// then forgets its series (a pass that finished meanwhile recorded one) and
    /// releases its claim.
    fn stop_one(
        &self,
        running: Running,
        handover: Handover,
    ) -> impl Future<Output = ()> + Send + 'static {
        running.stop.cancel();
        let wait_at_most = self.shutdown_timeout + Duration::from_secs(1);
        let shared = self.shared.clone();
        async move {
            stopped(running.task, wait_at_most).await;
            shared.metrics.forget(&running.id);
            if let Some((api, name, me)) = running.claimed {
                claim::release(&api, &name, &me, &handover).await;
            }
        }
    }
}

/// Waits for a stopping loop's task: its pass may finish within `wait_at_most`, then
/// it is aborted (and awaited, so that nothing of it goes on). Aborted too when this
/// wait is dropped (a new loop of the Source gave up waiting for the stop it is in).
async fn stopped(mut task: JoinHandle<()>, wait_at_most: Duration) {
    let _abort = AbortOnDrop(task.abort_handle());
    if tokio::time::timeout(wait_at_most, &mut task).await.is_err() {
        task.abort();
        let _ = task.await;
    }
}

/// Aborts a task when dropped (nothing once the task is done).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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

/// Why this replica stops running the Source `id` that `share` no longer gives it (or
/// gave it in a tenure that ended), for its status.
fn handover_of(share: &Share, id: &str) -> Handover {
    let next = share
        .claims()
        .and_then(|members| shard::owner(&members.live, id).filter(|o| *o != members.me));
    match next {
        Some(owner) => Handover::To(owner.to_string()),
        None => Handover::Lapsed,
    }
}

fn api_of(client: &Client, source: &Source) -> Api<Source> {
    Api::namespaced(client.clone(), &source.namespace().unwrap_or_default())
}
