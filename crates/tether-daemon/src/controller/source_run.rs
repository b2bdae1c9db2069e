//! One Source's loop, from its spec, as Flux's `reconcile` reads: its status first (a
//! suspended Source says so and stops there), its credentials, its settings and the
//! reconciler acting as its identity, its observers, its memory of the passes an
//! earlier process made, then the loop and the work beside it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};
use tether_api::source_spec::{RECONCILE_REQUESTED_ANNOTATION, Source, SourceSpec};
use tether_engine::cluster::Target;
use tether_engine::discovery::Destination;
use tether_engine::driver::{Backoff, Retries};
use tether_engine::git::{Credentials, is_full_commit_id};
use tether_engine::oci::Reference;
use tether_engine::reconcile::Reconciler;
use tether_sops::Keyring;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::beside::{Beside, discovery_target, image_automation};
use super::status_writer::SourceStatusWriter;
use super::wiring::{Daemon, Directories, Stops};
use crate::attestation::AttestationSecret;
use crate::decryption::DecryptionSecret;
use crate::feedback::SourceFeedback;
use crate::loop_views::{Shown, SourceName, Writeback};
use crate::pull_request::{ActAs, PullRequestPlanner};
use crate::revert::{SourceRevert, resumed_wait};
use crate::shard::source_id;
use crate::shared::event_reporter;
use crate::source_loop::{
    Memory, Observers, Origin, PassError, PassOutcome, Rewrite, SourceLoop, SourceSettings,
    StatusSink, settings_of,
};
use crate::source_status::{PassResult, commit_of_revision};
use crate::switchboard::Trigger;
use crate::verify::VerifySecret;
use tether_trust::sign::SigningKey;

/// One Source's loop, until `stops.loop_`.
pub(super) async fn run_source(
    client: Client,
    source: Source,
    daemon: Daemon,
    stops: Stops,
    triggers: (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
) {
    let (id, stop) = (source_id(&source), stops.loop_);
    let mut status = SourceStatusWriter::new(&client, &source, stops.pass.tenure.clone());
    // A loop ends only when stopped (the controller starts again one that ended by
    // itself): a suspended or stalled Source's waits for a change of its spec.
    if source.spec.suspend {
        status.record(&PassResult::Suspended, None).await;
        return stop.cancelled().await;
    }
    let Some(credentials) = wait_for_credentials(&client, &source, &mut status, &stop).await else {
        return;
    };
    let Some((reconciler, checked)) =
        source_reconciler(&daemon, &source, &client, credentials.clone(), &mut status).await
    else {
        return stop.cancelled().await;
    };
    let feedback = open_feedback(&client, &source, &daemon, &mut status).await;
    let observers = Observers {
        status,
        feedback: feedback.clone(),
        shown: Some(shown_on_page(&source, &daemon.directories, &credentials)),
        events: Some(Recorder::new(client.clone(), event_reporter())),
        shared: daemon.shared.clone(),
        revert: revert_of(
            &source,
            &daemon,
            &client,
            &credentials,
            &feedback,
            &triggers.0,
        ),
    };
    let work = SourceLoop::new(
        &id,
        reconciler,
        checked.settings,
        resumed_memory(&source),
        observers,
        daemon.shared.clone(),
    )
    .with_triggers(triggers)
    .stopped_by(stops.pass)
    .with_decryption(decryption_secret(&client, &source))
    .with_verify_keys(verify_secret(&client, &source))
    .with_chart_keys(verify_charts_secret(&client, &source))
    .with_attestation(attestation_secret(&client, &source));
    let acting = SourceIdentity(&daemon, &source, &client);
    let beside = Beside {
        discovery: source.spec.discovery.as_ref().map(|discovery| {
            let cluster = daemon.cluster_name.clone();
            discovery_target(
                &source,
                discovery,
                &daemon.directories,
                &credentials,
                cluster,
            )
        }),
        images: image_automation(&source, &daemon, &client, &credentials)
            .map(|images| images(work.trigger())),
        planner: feedback
            .filter(|f| f.plans_pull_requests())
            .map(|feedback| {
                let cache = daemon.directories.cache.join("pull-requests");
                PullRequestPlanner::new(&source, credentials, feedback, cache, &acting, &client)
            }),
    };
    let origin = Origin {
        url: Some(source.spec.url.clone()),
        reference: source.spec.reference.clone(),
    };
    let first_pass = work.first_pass();
    let source_loop = work.run(origin, daemon.shutdown_timeout, &stop, log_pass);
    let shared = &daemon.shared;
    beside
        .run_with(source_loop, &first_pass, &client, shared, &id, &stop)
        .await;
}

/// Where the Source's keys are read before each pass: the Secret its
/// `spec.decryption` names, if any.
fn decryption_secret(client: &Client, source: &Source) -> Option<DecryptionSecret> {
    let decryption = source.spec.decryption.as_ref()?;
    let namespace = source.namespace().unwrap_or_default();
    Some(DecryptionSecret::new(
        client.clone(),
        &namespace,
        &decryption.secret_ref.name,
    ))
}

/// Where the keys its commits must be signed by are read before each pass: the
/// Secret its `spec.verify` names, if any.
fn verify_secret(client: &Client, source: &Source) -> Option<VerifySecret> {
    let verify = source.spec.verify.as_ref()?;
    let namespace = source.namespace().unwrap_or_default();
    Some(VerifySecret::new(
        client.clone(),
        &namespace,
        &verify.secret_ref.name,
        "spec.verify",
        &verify.match_oidc_identity,
    ))
}

/// Where the keys its charts must be signed by are read before each pass: the Secret
/// its `spec.verifyCharts` names, if any.
fn verify_charts_secret(client: &Client, source: &Source) -> Option<VerifySecret> {
    let verify = source.spec.verify_charts.as_ref()?;
    let namespace = source.namespace().unwrap_or_default();
    Some(VerifySecret::new(
        client.clone(),
        &namespace,
        &verify.secret_ref.name,
        "spec.verifyCharts",
        &verify.match_oidc_identity,
    ))
}

/// Where the key that signs its deployment attestations is read before each pass: the
/// Secret its `spec.attestation` names, if any.
fn attestation_secret(client: &Client, source: &Source) -> Option<AttestationSecret> {
    let attestation = source.spec.attestation.as_ref()?;
    let namespace = source.namespace().unwrap_or_default();
    Some(AttestationSecret::new(
        client.clone(),
        &namespace,
        attestation,
    ))
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
) -> Option<(Reconciler, SourceSettings)> {
    let namespace = source.namespace().unwrap_or_default();
    let cache = daemon.directories.cache.clone();
    let settings = settings_of(
        &source.spec,
        &namespace,
        &source.name_any(),
        cache,
        credentials,
    )
    .map(|mut settings| {
        settings.settings.apply.approved_deletions =
            source.approved_deletions().map(str::to_string);
        settings
    })
    .map_err(|error| ("InvalidSpec", error.to_string()));
    let reconciler = match settings {
        Ok(settings) => {
            let reconciler = Reconciler::new(
                settings.repo.clone(),
                Target::default(),
                settings.inventory.clone(),
            )
            .with_health_checks(settings.health.clone());
            acting_as(daemon, source, reconciler, client)
                .await
                .map(|reconciler| (reconciler, settings))
                .map_err(|message| ("IdentityUnavailable", message))
        }
        Err(error) => Err(error),
    };
    match reconciler {
        Ok((reconciler, settings)) => {
            let no_keys = Keyring::default().given_by(crate::decryption::GIVEN_BY);
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
pub(super) struct SourceIdentity<'a>(&'a Daemon, &'a Source, &'a Client);

impl ActAs for SourceIdentity<'_> {
    fn act_as(
        &self,
        reconciler: Reconciler,
    ) -> futures::future::BoxFuture<'_, Result<Reconciler, String>> {
        let SourceIdentity(daemon, source, client) = *self;
        Box::pin(acting_as(daemon, source, reconciler, client))
    }
}

/// `reconciler` acting for the Source: as its ServiceAccount, through a client of
/// its own that impersonates it (everything done for the Source, its inventory
/// included, goes through it), else through the daemon's shared client; on the other
/// clusters of its models through its namespace's Cluster resources, as the same
/// identity; confined as its spec and the daemon say. An error when the client
/// cannot be made (the daemon's own kubeconfig unreadable now).
pub(super) async fn acting_as(
    daemon: &Daemon,
    source: &Source,
    reconciler: Reconciler,
    client: &Client,
) -> Result<Reconciler, String> {
    let identities = &daemon.identities;
    let namespace = source.namespace().unwrap_or_default();
    let identity = identities.impersonation(&namespace, &source.spec);
    let others = crate::clusters::resolver(
        client.clone(),
        namespace.clone(),
        identity.clone(),
        identities.target.clone(),
    );
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

/// The Source's revert of failed rollouts (`spec.revert`), committing to its branch
/// (else main) through a clone of its own beside the Git cache; none for an OCI
/// artifact, which tether cannot commit to (said once, in the log and an Event).
fn revert_of(
    source: &Source,
    daemon: &Daemon,
    client: &Client,
    credentials: &Credentials,
    feedback: &Option<Arc<SourceFeedback>>,
    trigger: &mpsc::Sender<Trigger>,
) -> Option<Arc<SourceRevert>> {
    let spec = &source.spec;
    if !spec.revert {
        return None;
    }
    if Reference::is_oci(&spec.url) {
        tracing::warn!("spec.revert is ignored: an OCI artifact cannot be committed to");
        return None;
    }
    let namespace = source.namespace().unwrap_or_default();
    let timeout = crate::feedback::rollout_timeout(source);
    Some(Arc::new(SourceRevert {
        destination: Destination::Remote {
            url: spec.url.clone(),
            path: PathBuf::from(spec.path.as_deref().unwrap_or(".")),
            cache: daemon.directories.cache.join("revert"),
            credentials: credentials.clone(),
        },
        branch: spec
            .reference
            .clone()
            .filter(|r| !is_full_commit_id(r))
            .unwrap_or_else(|| "main".into()),
        author: spec
            .image_automation
            .as_ref()
            .and_then(|a| a.author.as_deref())
            .and_then(|a| a.parse().ok())
            .unwrap_or_default(),
        timeout,
        reference: spec.reference.clone(),
        sources: Api::namespaced(client.clone(), &namespace),
        name: source.name_any(),
        feedback: feedback.clone(),
        shown: (
            daemon.shared.clone(),
            SourceName {
                namespace,
                name: source.name_any(),
            },
        ),
        trigger: trigger.clone(),
        watched: std::sync::Mutex::new(None),
        resumed: std::sync::Mutex::new(
            resumed_wait(
                applied_before(source).as_deref(),
                source
                    .status
                    .as_ref()
                    .and_then(|s| s.last_success_time.as_deref()),
                timeout,
                Timestamp::now(),
            )
            .map(|resumed| (resumed, Instant::now())),
        ),
    }))
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
        last_revert: source
            .status
            .as_ref()
            .and_then(|s| s.last_revert.as_ref())
            .map(crate::revert::row),
    }
}

/// What the loop remembers of the Source's earlier loops, from its status and
/// annotations.
fn resumed_memory(source: &Source) -> Memory {
    Memory::resumed(
        applied_before(source),
        rewrite_recorded(source),
        unhandled_request(source),
    )
}

/// The Source's reconcile request (an approval's, too) that its status does not say
/// was handled: the loop's first pass handles it.
fn unhandled_request(source: &Source) -> Option<String> {
    let handled = source
        .status
        .as_ref()
        .and_then(|s| s.last_handled_reconcile_at.as_ref());
    source
        .annotations()
        .get(RECONCILE_REQUESTED_ANNOTATION)
        .filter(|r| Some(*r) != handled)
        .cloned()
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

/// The Git (or registry) credentials of the Source's `secretRef`, and the key of its
/// `signingKey`.
async fn credentials(
    client: &Client,
    namespace: &str,
    spec: &SourceSpec,
) -> Result<Credentials, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let read = |name: String| {
        let secrets = secrets.clone();
        async move {
            let secret = secrets
                .get(&name)
                .await
                .map_err(|e| format!("cannot read the Secret {namespace}/{name}: {e}"))?;
            Ok::<_, String>(secret.data.unwrap_or_default())
        }
    };
    let signing_key = match &spec.signing_key {
        None => None,
        Some(signing) => {
            let name = &signing.secret_ref.name;
            let data = read(name.clone()).await?;
            let origin = format!("the Secret {namespace}/{name}, entry {SIGNING_KEY_ENTRY}");
            let text = data.get(SIGNING_KEY_ENTRY).ok_or_else(|| {
                format!("the Secret {namespace}/{name} of spec.signingKey has no {SIGNING_KEY_ENTRY} entry")
            })?;
            let key = SigningKey::parse(&String::from_utf8_lossy(&text.0), &origin)
                .map_err(|e| e.to_string())?;
            Some(Arc::new(key))
        }
    };
    let Some(reference) = &spec.secret_ref else {
        return Ok(Credentials {
            signing_key,
            ..Credentials::default()
        });
    };
    let data = read(reference.name.clone()).await?;
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
            signing_key,
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
        signing_key,
    })
}

/// The entry of a `kubernetes.io/ssh-auth` Secret that holds the private key.
const SIGNING_KEY_ENTRY: &str = "ssh-privatekey";

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
