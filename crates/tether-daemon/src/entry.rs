//! The daemon's face: how it runs, as plain data the CLI fills from its flags
//! ([`Config`], and [`Sources`] or [`OneSource`]), and the two calls that run it until
//! a signal: [`run`], the Sources of a cluster (`tether run --sources`), and
//! [`run_one`], one source from flags (`tether run`, `tether ui`). Each serves the
//! HTTP endpoints (and the web page, with [`Config::web`]) beside its loops.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tether_api::source_spec::DriftPolicy;
use tether_core::inventory::budget::DeletionBudget;
use tether_engine::cluster::{ClusterError, Target, client_of, connect};
use tether_engine::discovery::Destination;
use tether_engine::driver::{Backoff, Retries, shutdown_on_signal};
use tether_engine::reconcile::{ApplyOptions, PlanOptions, Reads, Reconciler};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::controller::{Controller, Directories};
use crate::fleet::Reporting;
use crate::identity::Identities;
use crate::leader::Election;
use crate::loop_views::{Shown, SourceName, Writeback};
use crate::members::Membership;
use crate::shared::Shared;
use crate::source_loop::{Memory, NoStatus, Observers, Origin, Settings, SourceLoop};
use crate::web::Web;
use crate::web::auth::Access;
use crate::{controller, http, shard};

pub use crate::source_loop::{PassError, PassOutcome};

/// What every daemon process has: its endpoints and how it stops.
pub struct Config {
    /// Where the endpoints listen (`/metrics`, `/readyz`, `/healthz`, `/hook/…`);
    /// none: no endpoint.
    pub listen: Option<SocketAddr>,
    /// The web page and API beside the endpoints, and who may use them.
    pub web: Option<Access>,
    /// The secret webhooks must prove they know (judged by the caller:
    /// `tether_api::webhook::judge_secret`); none: webhooks are refused.
    pub webhook_secret: Option<Vec<u8>>,
    /// How long a pass in progress may go on after a signal.
    pub shutdown_timeout: Duration,
}

/// The Sources of a cluster (`tether run --sources`).
pub struct Sources {
    /// How the daemon reaches its cluster.
    pub cluster: Target,
    /// This replica's name among the others (a pod's name).
    pub identity: String,
    /// The namespace of the Sources run (none: all).
    pub namespace: Option<String>,
    /// Where Git repositories are cached (lost: fetched again).
    pub cache: PathBuf,
    /// Where the outboxes are kept (lost: undelivered events lost).
    pub state: PathBuf,
    /// The KubernetesService this cluster is: what discovery files models under,
    /// and this cluster's part of a Source whose models name several.
    pub cluster_name: Option<String>,
    pub replicas: Replicas,
    /// The ServiceAccount a Source without `spec.serviceAccountName` acts as; none:
    /// the daemon's own identity.
    pub default_service_account: Option<String>,
    /// A Source may name objects only in its own namespace unless its spec lists
    /// others.
    pub no_cross_namespace_objects: bool,
    /// A fleet hub this cluster reports its Sources to.
    pub fleet: Option<Fleet>,
}

/// How this replica shares the Sources with others, through Leases of `namespace`.
pub enum Replicas {
    /// It runs them all.
    Alone,
    /// It runs them all while it holds the Lease `lease`.
    Elected {
        namespace: String,
        lease: String,
        /// How long the Lease holds without renewal (the takeover time).
        duration: Duration,
    },
    /// It runs its part among the live members of the group `lease`, announcing
    /// where the others reach its webhooks (`http://IP:PORT`).
    Sharded {
        namespace: String,
        lease: String,
        duration: Duration,
        address: Option<String>,
    },
}

/// A fleet hub this cluster (`Sources::cluster_name`) reports to.
pub struct Fleet {
    /// The kubeconfig `tether fleet join` made.
    pub kubeconfig: PathBuf,
    /// The hub's namespace of reports.
    pub namespace: String,
    /// How often the report is written when nothing changes.
    pub heartbeat: Duration,
}

/// One source from flags (`tether run`, `tether ui`).
pub struct OneSource {
    /// Its name in logs and metrics.
    pub id: String,
    pub reconciler: Reconciler,
    pub prune: bool,
    /// How much one pass's prune may delete unapproved (none: no bound).
    pub budget: Option<DeletionBudget>,
    pub allow_empty: bool,
    /// Drift is reported, not corrected (a new commit is still applied whole).
    pub report_drift: bool,
    pub interval: Duration,
    /// The Git repository and ref (none: a directory).
    pub url: Option<String>,
    pub reference: Option<String>,
    /// A models directory whose changes start a pass.
    pub directory: Option<PathBuf>,
    /// How the web page names it (as its inventory is named), and its path in the
    /// repository.
    pub page_name: (String, String),
    pub path: Option<String>,
    /// Where the page's day-2 actions commit, on which branch; none: no action.
    pub actions: Option<(Destination, Option<String>)>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {address}")]
    Listen {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("cannot watch the models directory {}", .path.display())]
    Directory {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// Runs the Sources of a cluster until a signal, led by the Lease's holder when
/// electing, this replica's part when sharded.
pub async fn run(config: Config, sources: Sources) -> Result<(), Error> {
    let shared = Arc::new(Shared::new(config.webhook_secret.clone()));
    let shutdown = shutdown_on_signal();
    let server = serve(config.listen, config.web, &shared, &shutdown).await?;
    let identity = shard::lease_safe(&sources.identity);
    // Each replica's requests name it in the API server's audit log.
    let target = Target {
        user_agent: Some(format!("tether/{} ({identity})", env!("CARGO_PKG_VERSION"))),
        ..sources.cluster.clone()
    };
    let Some(client) = connect_patiently(&target, &shutdown).await? else {
        finish(server).await;
        return Ok(());
    };
    // What the Sources apply with writes only while this replica may (sharded); the
    // daemon's own client keeps its Lease and its claims.
    let fenced = Target {
        fence: Some(shared.fence.clone()),
        ..target.clone()
    };
    let controller = Controller {
        client,
        sources_client: client_of(&fenced).await?,
        namespace: sources.namespace.clone(),
        directories: Directories {
            cache: sources.cache.clone(),
            state: sources.state.clone(),
        },
        shared,
        shutdown_timeout: config.shutdown_timeout,
        cluster_name: sources.cluster_name.clone(),
        identities: Identities {
            target: fenced,
            default_service_account: sources.default_service_account.clone(),
            no_cross_namespace_objects: sources.no_cross_namespace_objects,
        },
    };
    let reporting = reporting(&sources, target.user_agent.clone()).map(|reporting| {
        tokio::spawn(crate::fleet::run(
            reporting,
            controller.client.clone(),
            controller.namespace.clone(),
            controller.shared.clone(),
            shutdown.clone(),
        ))
    });
    let replicas = replicas(sources.replicas, identity);
    let grace = config.shutdown_timeout + RELEASE_TIME;
    let work = async {
        controller.run_replicated(replicas, shutdown.clone()).await;
        if let Some(reporting) = reporting {
            let _ = reporting.await;
        }
        finish(server).await;
    };
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        () = work => {}
        () = deadline => tracing::warn!(
            ?grace,
            "shutdown: the claims and the Lease were not all released in time (is the API server away?); exiting: they expire by themselves"
        ),
    }
    Ok(())
}

/// The daemon's client, once the API server answers (`None`: a signal came first). A
/// replica started while its control plane is away (a pod restarted in an outage)
/// waits for it rather than exit: a crash loop's back-off, up to 5 min, would keep
/// its Sources waiting long after the outage. A kubeconfig that cannot serve is an
/// error at once.
async fn connect_patiently(
    target: &Target,
    shutdown: &CancellationToken,
) -> Result<Option<kube::Client>, Error> {
    let mut retries = Retries::endless(Backoff::new(
        Duration::from_secs(1),
        Duration::from_secs(10),
    ));
    let mut said = false;
    loop {
        match connect(target).await {
            Ok(client) => return Ok(Some(client)),
            Err(error @ ClusterError::Unreachable { .. }) => {
                let error = tether_core::error_chain(&error);
                match said {
                    false => tracing::warn!(%error, "waiting for the API server"),
                    true => tracing::debug!(%error, "waiting for the API server"),
                }
                said = true;
                if !retries.again_unless(shutdown).await {
                    return Ok(None);
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// After a signal, how long the claims and the Lease may take to be released once the
/// passes in progress had their shutdown timeout: the process exits then whatever
/// the state of its control plane, within the pod's grace period (30 s, against a
/// shutdown timeout of 20 s by default).
const RELEASE_TIME: Duration = Duration::from_secs(5);

/// Runs one source from flags until a signal; each pass's outcome goes to `observe`.
pub async fn run_one(
    config: Config,
    source: OneSource,
    observe: impl FnMut(&Result<PassOutcome, PassError>),
) -> Result<(), Error> {
    let shared = Arc::new(Shared::new(config.webhook_secret.clone()));
    let shutdown = shutdown_on_signal();
    let server = serve(config.listen, config.web, &shared, &shutdown).await?;
    let settings = one_source_settings(&source);
    let (namespace, name) = source.page_name;
    let observers = Observers {
        status: NoStatus,
        feedback: None,
        shown: Some(Shown {
            name: SourceName { namespace, name },
            writeback: source.actions.map(|(destination, branch)| Writeback {
                destination,
                branch,
                propose: false,
            }),
            path: source.path,
            last_revert: None,
        }),
        events: None,
        shared: shared.clone(),
        revert: None,
    };
    let mut work = SourceLoop::new(
        &source.id,
        source.reconciler,
        settings,
        Memory::default(),
        observers,
        shared.clone(),
    );
    if let Some(directory) = source.directory {
        work = work
            .watch_directory(&directory)
            .map_err(|source| Error::Directory {
                path: directory.clone(),
                source,
            })?;
    }
    shared.metrics.set_leader(true);
    shared.set_ready();
    let origin = Origin {
        url: source.url,
        reference: source.reference,
    };
    let span = tracing::info_span!("source", source = %source.id);
    work.run(origin, config.shutdown_timeout, &shutdown, observe)
        .instrument(span)
        .await;
    finish(server).await;
    Ok(())
}

/// The settings of a source from flags: its passes read the API server's cache, as
/// a long-running daemon's watches do.
fn one_source_settings(source: &OneSource) -> Settings {
    Settings {
        plan: PlanOptions {
            prune: source.prune,
            allow_empty: source.allow_empty,
            dry_run_new: false,
            partial: false,
            reads: Reads::Cached,
            budget: source.budget,
        },
        apply: ApplyOptions {
            prune: source.prune,
            correct_drift: !source.report_drift,
            ..ApplyOptions::default()
        },
        drift: match source.report_drift {
            true => DriftPolicy::Report,
            false => DriftPolicy::Correct,
        },
        rewrites: Default::default(),
        interval: source.interval,
    }
}

/// The HTTP endpoints (and the page, with its access) on `listen`, until
/// `shutdown`.
async fn serve(
    listen: Option<SocketAddr>,
    web: Option<Access>,
    shared: &Arc<Shared>,
    shutdown: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, Error> {
    let Some(address) = listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| Error::Listen { address, source })?;
    let web = web.map(Web::new);
    let serving = http::serve(listener, shared.clone(), web, shutdown.clone());
    Ok(Some(tokio::spawn(serving)))
}

/// Waits for the endpoints to stop serving.
async fn finish(server: Option<tokio::task::JoinHandle<std::io::Result<()>>>) {
    if let Some(server) = server {
        let _ = server.await;
    }
}

/// How this replica shares the Sources, as `identity`.
fn replicas(replicas: Replicas, identity: String) -> controller::Replicas {
    match replicas {
        Replicas::Alone => controller::Replicas::Alone,
        Replicas::Elected {
            namespace,
            lease,
            duration,
        } => controller::Replicas::Elected(Election {
            namespace,
            lease,
            identity,
            duration,
        }),
        Replicas::Sharded {
            namespace,
            lease,
            duration,
            address,
        } => controller::Replicas::Sharded(Membership {
            namespace,
            group: lease,
            identity,
            duration,
            address,
        }),
    }
}

/// The report to a fleet hub, when the daemon has one and knows its cluster's name.
fn reporting(sources: &Sources, user_agent: Option<String>) -> Option<Reporting> {
    let fleet = sources.fleet.as_ref()?;
    let cluster = sources.cluster_name.clone()?;
    Some(Reporting {
        hub: Target {
            kubeconfig: Some(fleet.kubeconfig.clone()),
            request_timeout: Some(Duration::from_secs(10)),
            user_agent,
            ..Target::default()
        },
        namespace: fleet.namespace.clone(),
        cluster,
        heartbeat: fleet.heartbeat,
    })
}
