//! `run`: one source from flags, or the Sources of the cluster (`--sources`, with
//! leader election), under the driver; the HTTP endpoints beside them. Also
//! `reconcile` (a manual nudge of a Source) and `crd`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use miette::{IntoDiagnostic, WrapErr, miette};
use tether_admin::reconcile_request::request_reconcile;
use tether_api::source_spec::Source;
use tether_api::webhook::judge_secret;
use tether_daemon::web::auth::Access;
use tether_daemon::{Config, Fleet, OneSource, PassError, PassOutcome, Replicas, Sources};
use tether_engine::cluster::{client_of, connect};
use tether_engine::discovery::Destination;
use tether_engine::driver::Poll;
use tether_engine::reconcile::ReconcileError;

use super::args::{ApproveArgs, GlobalArgs, ReconcileSourceArgs, RunArgs};
use super::flags::ClusterFlags;
use super::reconcile::{reconciler, report_text};
use super::terminal;

pub async fn run(global: &GlobalArgs, args: &RunArgs) -> miette::Result<ExitCode> {
    let access = match (args.listen, args.no_web) {
        // A client made without asking the server: a replica started while the API
        // server is away still serves its page once it is back.
        (Some(_), false) => match client_of(&args.cluster.target()).await {
            Ok(client) => Some(Access::Kubernetes {
                client,
                anonymous_read_only: args.web_anonymous_read_only,
            }),
            Err(error) => {
                tracing::warn!(error = %tether_core::error_chain(&error), "the web page is off: no client to check its requests' tokens with");
                None
            }
        },
        _ => None,
    };
    serve_and_run(global, args, args.listen, access).await
}

/// `tether ui`: one source from flags with its page, on loopback, as the user.
pub async fn ui(global: &GlobalArgs, args: &RunArgs) -> miette::Result<ExitCode> {
    if args.sources {
        return Err(miette!(
            help = "the daemon (tether run --sources) serves its Sources' page itself",
            "tether ui shows one source from flags"
        ));
    }
    let listen = args
        .listen
        .unwrap_or(std::net::SocketAddr::from(([127, 0, 0, 1], 8080)));
    if !listen.ip().is_loopback() {
        return Err(miette!(
            help = "listen on 127.0.0.1 (or ::1); serve others through the daemon, which checks their tokens",
            "tether ui acts as your kubeconfig's identity without asking who is on the page: it serves only this machine, not {listen}"
        ));
    }
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let access = Access::Local { client };
    eprintln!("tether ui: http://{listen}/");
    serve_and_run(global, args, Some(listen), Some(access)).await
}

/// The HTTP endpoints (and the page, with `access`) on `listen`, beside the source
/// loops.
async fn serve_and_run(
    global: &GlobalArgs,
    args: &RunArgs,
    listen: Option<std::net::SocketAddr>,
    access: Option<Access>,
) -> miette::Result<ExitCode> {
    let config = Config {
        listen,
        web: access,
        webhook_secret: webhook_secret(args)?,
        shutdown_timeout: args.shutdown_timeout,
    };
    let ran = match args.sources {
        true => tether_daemon::run(config, sources(args)).await,
        false => run_one(global, args, config).await?,
    };
    // The cluster's error is said as the CLI says any (its remedy found on it).
    ran.map_err(|error| match error {
        tether_daemon::Error::Cluster(error) => terminal::error(error),
        error => terminal::error(error),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The variable holding the webhook secret when no file is given.
pub const WEBHOOK_SECRET_VARIABLE: &str = "TETHER_WEBHOOK_SECRET";

/// The webhook secret from its file or TETHER_WEBHOOK_SECRET; refused when short.
fn webhook_secret(args: &RunArgs) -> miette::Result<Option<Vec<u8>>> {
    let secret = match &args.webhook_secret_file {
        Some(path) => match std::fs::read(path) {
            Ok(secret) => Some(secret),
            // A Secret volume marked optional whose Secret was not made.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %path.display(), "no webhook secret: webhooks are off");
                None
            }
            Err(e) => {
                return Err(e).into_diagnostic().wrap_err_with(|| {
                    format!("cannot read the webhook secret {}", path.display())
                });
            }
        },
        None => std::env::var(WEBHOOK_SECRET_VARIABLE)
            .ok()
            .map(String::into_bytes),
    };
    let secret = secret.map(|mut s| {
        // A file written by `echo` ends with a newline that is no part of the secret.
        while s.last().is_some_and(u8::is_ascii_whitespace) {
            s.pop();
        }
        s
    });
    match secret.as_deref().map(judge_secret) {
        Some(Err(weak)) => Err(miette!(
            help = "make one with `openssl rand -hex 32` (`tether install` makes the Secret tether-webhook with one)",
            "{weak}"
        )),
        _ => Ok(secret),
    }
}

/// One source from flags, printing each pass.
async fn run_one(
    global: &GlobalArgs,
    args: &RunArgs,
    config: Config,
) -> miette::Result<Result<(), tether_daemon::Error>> {
    let repo = args.source.repo()?;
    let id = repo.label();
    let reconciler = reconciler(repo, &args.cluster, &args.keys, &args.inventory)?;
    let directory =
        (args.source.repo.is_none() && args.source.path.is_dir()).then(|| args.source.path.clone());
    let source = OneSource {
        id,
        reconciler,
        prune: args.prune,
        budget: args.budget.deletion_budget.0,
        allow_empty: args.allow_empty,
        report_drift: args.report_drift,
        interval: args.interval,
        url: args.source.repo.clone(),
        reference: args.source.reference.clone(),
        directory,
        page_name: (
            args.inventory.inventory_namespace.clone(),
            args.inventory.inventory_name.clone(),
        ),
        path: args
            .source
            .repo
            .is_some()
            .then(|| args.source.path.display().to_string()),
        actions: actions_writeback(args)?,
    };
    let graphical = terminal::use_graphics(global.color, std::io::stderr().is_terminal());
    let printed = |outcome: &Result<PassOutcome, PassError>| match outcome {
        // A pass that found nothing to do has nothing to say.
        Ok(pass) if pass.quiet => {}
        Ok(pass) => {
            let at = pass.revision.as_deref().unwrap_or("the working tree");
            print!("applied {at}: {}", report_text(&pass.report));
            for (object, manager) in &pass.corrected {
                println!("corrected drift of {object} (changed by {manager})");
            }
        }
        // Invalid models are shown as validate shows them.
        Err(PassError::Reconcile(ReconcileError::Invalid(models))) => eprint!(
            "{}",
            terminal::diagnostics(&models.diagnostics, &models.loaded.files, graphical)
        ),
        // The driver logs other errors.
        Err(_) => {}
    };
    Ok(tether_daemon::run_one(config, source, printed).await)
}

/// Where the page's day-2 actions commit for a source from flags: the checkout around
/// its directory, or tether's own clone of its repository; none for an artifact.
fn actions_writeback(args: &RunArgs) -> miette::Result<Option<(Destination, Option<String>)>> {
    let source = &args.source;
    if source
        .repo
        .as_deref()
        .is_some_and(tether_engine::oci::Reference::is_oci)
    {
        return Ok(None);
    }
    let cache = source.git.cache_dir().join("actions");
    let destination = source
        .git
        .destination(source.repo.as_deref(), &source.path, cache)?;
    Ok(Some((destination, source.reference.clone())))
}

/// The Sources of the cluster, led by the Lease's holder when electing, shared when
/// sharded.
fn sources(args: &RunArgs) -> Sources {
    let cache = args.source.git.cache_dir();
    Sources {
        cluster: args.cluster.target(),
        identity: args.identity.clone().unwrap_or_else(identity),
        namespace: args.sources_namespace.clone(),
        state: args.state_dir.clone().unwrap_or_else(|| cache.clone()),
        cache,
        cluster_name: args.cluster_name.clone(),
        replicas: replicas(args),
        default_service_account: args.default_service_account.clone(),
        no_cross_namespace_objects: args.no_cross_namespace_objects,
        fleet: args.fleet_hub_kubeconfig.as_ref().map(|kubeconfig| Fleet {
            kubeconfig: kubeconfig.clone(),
            namespace: args.fleet_namespace.clone(),
            heartbeat: args.fleet_heartbeat,
        }),
    }
}

/// How this replica shares the Sources with the others.
fn replicas(args: &RunArgs) -> Replicas {
    if args.shard {
        Replicas::Sharded {
            namespace: args.lease_namespace.clone(),
            lease: args.lease_name.clone(),
            duration: args.lease_duration,
            address: advertised(args),
        }
    } else if args.leader_elect {
        Replicas::Elected {
            namespace: args.lease_namespace.clone(),
            lease: args.lease_name.clone(),
            duration: args.lease_duration,
        }
    } else {
        Replicas::Alone
    }
}

/// Where the other replicas reach this one: --advertise-url, else the pod's IP and
/// the port of --listen, else --listen when it names an address.
fn advertised(args: &RunArgs) -> Option<String> {
    if let Some(url) = &args.advertise_url {
        return Some(url.clone());
    }
    let listen = args.listen?;
    let pod_ip = std::env::var("POD_IP")
        .ok()
        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok());
    match pod_ip {
        Some(ip) => Some(format!(
            "http://{}",
            std::net::SocketAddr::new(ip, listen.port())
        )),
        None if !listen.ip().is_unspecified() => Some(format!("http://{listen}")),
        None => None,
    }
}

/// This replica's name in the election: the pod's name, else host and process.
fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    })
}

/// `tether reconcile SOURCE`: request a pass, wait for the daemon to handle it.
pub async fn reconcile(args: &ReconcileSourceArgs) -> miette::Result<ExitCode> {
    let source = (args.namespace.as_str(), args.source.as_str());
    request_and_wait(&args.cluster, source, args.timeout, None).await
}

/// `tether approve SOURCE DIGEST`: approve the deletions of a prune the Source holds
/// beyond its deletion budget, then wait for the pass that carries them out.
pub async fn approve(args: &ApproveArgs) -> miette::Result<ExitCode> {
    if !tether_core::inventory::budget::is_digest(&args.digest) {
        return Err(miette!(
            help = "copy the digest from the Source's status (kubectl get source), the page or tether diff",
            "{:?} is not a digest of deletions (sha256: and 64 hexadecimal digits)",
            args.digest
        ));
    }
    let source = (args.namespace.as_str(), args.source.as_str());
    request_and_wait(&args.cluster, source, args.timeout, Some(&args.digest)).await
}

/// Requests a pass of the Source (approving the deletions of `approve`, when given),
/// then waits until the daemon handled it and says how the Source is: exit 0 when
/// Ready, 2 when not.
async fn request_and_wait(
    cluster: &ClusterFlags,
    (namespace, name): (&str, &str),
    timeout: Duration,
    approve: Option<&str>,
) -> miette::Result<ExitCode> {
    let client: Client = connect(&cluster.target()).await.map_err(terminal::error)?;
    let api: Api<Source> = Api::namespaced(client, namespace);
    let requested = request_reconcile(&api, name, approve)
        .await
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot annotate the Source {namespace}/{name}"))?;
    match approve {
        Some(digest) => {
            eprintln!(
                "approved the deletions {digest} of {namespace}/{name}; waiting for the daemon"
            )
        }
        None => eprintln!("requested a pass of {namespace}/{name}; waiting for the daemon"),
    }
    let mut poll = Poll::new(Duration::from_millis(250), timeout);
    loop {
        let source = api.get(name).await.into_diagnostic()?;
        let status = source.status.unwrap_or_default();
        if status.last_handled_reconcile_at.as_deref() == Some(requested.as_str()) {
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
            let revision = status.last_applied_revision.as_deref().unwrap_or("-");
            return Ok(match ready {
                Some(ready) if ready.status == "True" => {
                    println!(
                        "{namespace}/{name} is ready at {revision}: {}",
                        ready.message
                    );
                    ExitCode::SUCCESS
                }
                Some(ready) => {
                    println!(
                        "{namespace}/{name} is not ready ({}): {}",
                        ready.reason, ready.message
                    );
                    ExitCode::from(2)
                }
                None => ExitCode::from(2),
            });
        }
        if !poll.next().await {
            return Err(miette!(
                help = "is the daemon running (tether run --sources), and does it watch this namespace?",
                "the daemon did not handle the request within {timeout:?}"
            ));
        }
    }
}

/// `tether crd`: the CRDs (Source, Cluster) as YAML.
pub fn crd() -> miette::Result<ExitCode> {
    let mut documents = Vec::new();
    for crd in tether_admin::install::manifests::crds() {
        documents.push(serde_saphyr::to_string(&crd).into_diagnostic()?);
    }
    print!("{}", documents.join("---\n"));
    Ok(ExitCode::SUCCESS)
}
