//! The flags of each command, as clap parses them, and the exit codes: what the
//! command modules beside this one take (`super::args`), apart from the dispatch in
//! `cli/mod.rs`, so that no command reaches back into its parent.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use tether_core::settings::parse_duration;

use super::flags::{
    AttestFlags, BudgetFlags, ClusterFlags, DiscoverFlags, EventFlags, GitFlags, InventoryFlags,
    KeyFlags, PostFlags, RegistryFlags, SourceFlags,
};
use super::terminal::{Color, ProblemFormat};

/// Exit code for invalid models or differences found.
pub const EXIT_INVALID: u8 = 1;
/// Exit code for usage, I/O and cluster errors (clap uses 2 for usage errors too).
pub const EXIT_ERROR: u8 = 2;

/// Options every command takes, before or after its name. How to reach the cluster
/// (`ClusterFlags`) and the decryption keys (`KeyFlags`) are not among them: each
/// command that needs them flattens them itself.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, global = true, env = "TETHER_LOG_LEVEL", default_value = "warn")]
    pub log_level: String,
    /// Log format on standard error.
    #[arg(long, global = true, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Colour and graphics in reports: auto (when the output is a terminal), always, never.
    #[arg(long, global = true, env = "TETHER_COLOR", value_enum, default_value_t = Color::Auto)]
    pub color: Color,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub source: SourceFlags,
    /// In a repository with a `.sops.yaml`, a KubernetesSecret value in plain text is
    /// an error (a warning without this flag).
    #[arg(long, env = "TETHER_REQUIRE_ENCRYPTED_SECRETS")]
    pub require_encrypted_secrets: bool,
    /// How problems are printed: for people, as GitHub Actions annotations, or as one
    /// JSON object.
    #[arg(short, long, value_enum, default_value_t = ProblemFormat::Human, visible_alias = "error-format")]
    pub output_format: ProblemFormat,
    /// Print at most this many errors, and as many warnings (0: all); the summary
    /// still counts every one, and the exit code does not change.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub max_errors: usize,
    /// A models root with no model is valid (without it, finding no model is an
    /// error: the path is likely wrong).
    #[arg(long)]
    pub allow_empty: bool,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    #[command(flatten)]
    pub source: SourceFlags,
    /// Output format: multi-document YAML, or a JSON `v1` List.
    #[arg(short, long, env = "TETHER_OUTPUT", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Print the values of Secrets decrypted from encrypted models files (shown as
    /// *** without it).
    #[arg(long)]
    pub show_secrets: bool,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct GraphArgs {
    #[arg(default_value = ".", env = "TETHER_PATH", value_name = "PATH")]
    pub path: PathBuf,
    #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
    pub format: GraphFormat,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GraphFormat {
    /// A Mermaid flowchart (GitHub draws it in Markdown).
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

/// Which models a diff or an apply takes.
#[derive(Debug, clap::Args)]
pub struct SelectionArgs {
    /// Only these models (Kind/name, or a name one model has) and what they depend
    /// on (depends_on, and what they need to exist: trust domain, principal, mounted
    /// ConfigMaps and Secrets). Repeat it or separate with commas.
    #[arg(long, value_name = "MODEL", value_delimiter = ',')]
    pub only: Vec<String>,
    /// With --only, take the models alone: their dependencies were set up another
    /// way, and are checked to exist and be ready all the same.
    #[arg(long, requires = "only")]
    pub skip_dependencies: bool,
}

impl SelectionArgs {
    pub fn selection(&self) -> Option<tether_engine::reconcile::Selection> {
        (!self.only.is_empty()).then(|| tether_engine::reconcile::Selection {
            models: self.only.clone(),
            skip_dependencies: self.skip_dependencies,
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub source: SourceFlags,
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// Report format.
    #[arg(short, long, env = "TETHER_OUTPUT", value_enum, default_value_t = ReportFormat::Text)]
    pub output: ReportFormat,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
    #[command(flatten)]
    pub post: PostFlags,
}

#[derive(Debug, clap::Args)]
pub struct ReconcileSourceArgs {
    /// The Source's name.
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// The Source's namespace.
    #[arg(short, long, env = "TETHER_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// How long to wait for the daemon to handle the request.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The Source's name.
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// The digest of the held deletions, as the Source's status (PruneHeld) and the
    /// page print it: exactly those deletions are approved.
    #[arg(value_name = "sha256:DIGEST")]
    pub digest: String,
    /// The Source's namespace.
    #[arg(short, long, env = "TETHER_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// How long to wait for the daemon to carry out the approved prune.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceFlags,
    /// Run the sources declared as `Source` custom resources (tether.dev/v1alpha1)
    /// instead of one source from flags: the in-cluster daemon.
    #[arg(long, env = "TETHER_SOURCES", conflicts_with_all = ["repo", "prune"])]
    pub sources: bool,
    /// With --sources, only the Sources of this namespace (default: all namespaces).
    #[arg(long, env = "TETHER_SOURCES_NAMESPACE", requires = "sources")]
    pub sources_namespace: Option<String>,
    /// With --sources, the ServiceAccount (of its own namespace) that a Source without
    /// spec.serviceAccountName acts as, impersonated (Flux's flag); without it, such a
    /// Source acts as the daemon.
    #[arg(long, env = "TETHER_DEFAULT_SERVICE_ACCOUNT", requires = "sources")]
    pub default_service_account: Option<String>,
    /// With --sources, a Source may name objects only in its own namespace (and no
    /// cluster-scoped kind) unless its spec.confine lists the namespaces: others are
    /// refused at their models, before any request (cf. Flux's
    /// --no-cross-namespace-refs).
    #[arg(long, env = "TETHER_NO_CROSS_NAMESPACE_OBJECTS", requires = "sources")]
    pub no_cross_namespace_objects: bool,
    /// With --sources, elect a leader among replicas on a Lease; only the leader writes.
    #[arg(long, env = "TETHER_LEADER_ELECT", requires = "sources")]
    pub leader_elect: bool,
    /// With --sources, share the Sources among the replicas: each holds a Lease of
    /// its own (`<lease-name>-<identity>`), and runs the Sources that rendezvous
    /// hashing over the live members gives it, each claimed in its status.owner first.
    #[arg(
        long,
        env = "TETHER_SHARD",
        requires = "sources",
        conflicts_with = "leader_elect"
    )]
    pub shard: bool,
    /// This replica's name among the others (default: the pod's name, POD_NAME, else
    /// the host's name and the process id).
    #[arg(long, env = "TETHER_IDENTITY")]
    pub identity: Option<String>,
    /// With --shard, where the other replicas reach this one's webhooks, announced on
    /// its Lease: pull-request and registry webhooks that reach any replica are
    /// passed on to the others (default: http://POD_IP:PORT of --listen, else
    /// --listen itself when it names an address).
    #[arg(long, env = "TETHER_ADVERTISE_URL", requires = "shard")]
    pub advertise_url: Option<String>,
    /// The Lease's namespace (default: the pod's namespace, POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// The Lease's name (with --shard, the members' Leases begin with it).
    #[arg(long, env = "TETHER_LEASE_NAME", default_value = "tether-leader")]
    pub lease_name: String,
    /// How long a Lease stays valid without renewal: a crashed leader (or member) is
    /// replaced after this (one that stops releases it at once).
    #[arg(long, env = "TETHER_LEASE_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Serve /metrics, /readyz, /healthz and the webhooks (/hook/github,
    /// /hook/gitlab, /hook/generic) on this address, e.g. 0.0.0.0:8080.
    #[arg(long, env = "TETHER_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// Do not serve the web page and its API (/, /api/v1/…) on --listen. They are
    /// served by default: each request needs a bearer token Kubernetes accepts
    /// (TokenReview), and sees and does only what its RBAC allows.
    #[arg(long, env = "TETHER_NO_WEB")]
    pub no_web: bool,
    /// Let requests without a token view the page and the API (never act).
    #[arg(
        long,
        env = "TETHER_WEB_ANONYMOUS_READ_ONLY",
        conflicts_with = "no_web"
    )]
    pub web_anonymous_read_only: bool,
    /// A file holding the webhook secret (at least 16 bytes); without a secret the
    /// webhooks are off. TETHER_WEBHOOK_SECRET may hold it instead.
    #[arg(long, env = "TETHER_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// With --sources, where the daemon keeps what must outlive its process: the
    /// Sources' event outboxes (default: the cache directory). In a cluster, a volume
    /// that stays with the pod (`tether install` gives each replica one).
    #[arg(long, env = "TETHER_STATE_DIR", requires = "sources")]
    pub state_dir: Option<PathBuf>,
    /// With --sources, the KubernetesService this daemon's cluster is: the Sources'
    /// discovery puts discovered models under it (and writes it when the repository
    /// lacks it), and events name it. Default: a repository's only KubernetesService.
    #[arg(
        long,
        env = "TETHER_CLUSTER_NAME",
        value_name = "NAME",
        requires = "sources"
    )]
    pub cluster_name: Option<String>,
    /// With --sources and --cluster-name, report the Sources' status to a fleet hub
    /// as the cluster's ServiceAccount there, with this kubeconfig (`tether fleet
    /// join` writes it; in a pod, a Secret mounted as a file): on each change of a
    /// status and at each --fleet-heartbeat. Reporting runs beside the Sources and
    /// never holds them up; while the hub is away it is retried every few seconds.
    #[arg(
        long,
        env = "TETHER_FLEET_HUB_KUBECONFIG",
        value_name = "PATH",
        requires_all = ["sources", "cluster_name"]
    )]
    pub fleet_hub_kubeconfig: Option<PathBuf>,
    /// The hub's namespace of ClusterReports.
    #[arg(long, env = "TETHER_FLEET_NAMESPACE", default_value = tether_api::cluster_report::NAMESPACE)]
    pub fleet_namespace: String,
    /// How often the report is written to the hub when nothing changed (the hub
    /// shows a cluster silent for three heartbeats as not reporting).
    #[arg(long, env = "TETHER_FLEET_HEARTBEAT", default_value = "60s", value_parser = parse_duration)]
    pub fleet_heartbeat: Duration,
    /// Report drift (a field tether applied changed in place by someone else) without
    /// correcting it; by default it is taken back within seconds.
    #[arg(long, env = "TETHER_REPORT_DRIFT", conflicts_with = "sources")]
    pub report_drift: bool,
    /// On SIGTERM, how long passes in progress may go on before they are cancelled.
    #[arg(long, env = "TETHER_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// How often the source is reconciled when nothing else triggers it, e.g. 1m.
    #[arg(long, env = "TETHER_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub interval: Duration,
    /// Delete objects whose model was removed (as apply --prune).
    #[arg(long, env = "TETHER_PRUNE")]
    pub prune: bool,
    /// With --prune, let a source that renders no object prune everything.
    #[arg(long, requires = "prune")]
    pub allow_empty: bool,
    #[command(flatten)]
    pub budget: BudgetFlags,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub source: SourceFlags,
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// Delete objects whose model was removed (not with --only).
    #[arg(long, env = "TETHER_PRUNE", conflicts_with = "only")]
    pub prune: bool,
    /// Show the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Take fields that other field managers (Helm, kubectl) own.
    #[arg(long, env = "TETHER_FORCE_CONFLICTS")]
    pub force_conflicts: bool,
    /// Take objects that another tether inventory applied: that inventory loses them
    /// (it will neither update nor prune them any more).
    #[arg(long)]
    pub dangerous_override_ownership: bool,
    /// With --prune, delete the objects tether adopted (they existed before its first
    /// apply) whose model is gone, instead of releasing them.
    #[arg(long, requires = "prune")]
    pub delete_adopted: bool,
    #[command(flatten)]
    pub budget: BudgetFlags,
    /// With --prune, carry out a prune beyond the deletion budget whose deletions have
    /// this digest (the one `tether diff` and the held apply print): the exact set
    /// approved, nothing more.
    #[arg(long, requires = "prune", value_name = "sha256:DIGEST")]
    pub approve_deletions: Option<String>,
    /// With --prune, delete a Namespace or a CustomResourceDefinition even when it
    /// holds objects this inventory did not create (the Namespace's objects, the
    /// definition's custom resources): they are deleted with it.
    #[arg(
        long,
        requires = "prune",
        alias = "dangerous-delete-namespaces-with-foreign-objects"
    )]
    pub dangerous_delete_with_foreign_objects: bool,
    /// With --prune, let a source that renders no object prune everything the
    /// inventory recorded (without it, such a prune is refused).
    #[arg(long, requires = "prune")]
    pub allow_empty: bool,
    /// Wait for Deployments, StatefulSets, DaemonSets, Pods and Jobs to be ready.
    #[arg(long)]
    pub wait: bool,
    /// How long each wave of the workflow waits for what it depends on (then the
    /// apply stops there), and how long --wait waits, e.g. 5m.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
    #[command(flatten)]
    pub attest: AttestFlags,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The public keys attestations may be signed by (PEM, as `openssl pkey -pubout`
    /// or `cosign generate-key-pair` write them). Repeat the flag, or separate with
    /// commas.
    #[arg(long, required = true, value_delimiter = ',', value_name = "FILE")]
    pub key: Vec<PathBuf>,
    /// Check this attestation instead of the inventory's newest in the cluster: a
    /// file (the envelope's JSON), or one in a registry, oci://HOST/PATH:TAG (or
    /// @sha256:…); oci://HOST/PATH alone is the inventory's newest there.
    #[arg(long, value_name = "FILE|URL")]
    pub attestation: Option<String>,
    #[command(flatten)]
    pub registry: RegistryFlags,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Debug, clap::Args)]
pub struct DiscoverArgs {
    /// Models root: a directory in a Git checkout; with --repo, a directory
    /// inside the repository.
    #[arg(default_value = ".", env = "TETHER_PATH", value_name = "PATH")]
    pub path: PathBuf,
    /// Git repository to commit to (and push to, with --push): file://, https://
    /// or ssh:// URL. tether works in its own clone in the cache directory.
    #[arg(long, env = "TETHER_REPO", value_name = "REPO")]
    pub repo: Option<String>,
    /// Push each discovery commit to --repo; a push refused because the branch
    /// moved is fetched, planned again on the new tip and retried, never forced.
    #[arg(long, env = "TETHER_DISCOVER_PUSH", requires = "repo")]
    pub push: bool,
    /// Discover once and exit (the default).
    #[arg(long, conflicts_with = "watch")]
    pub once: bool,
    /// Print what would be committed (the message and the files) and change nothing.
    #[arg(long, conflicts_with_all = ["watch", "push"])]
    pub dry_run: bool,
    /// Keep watching and commit changes, at most one commit per --debounce.
    #[arg(long)]
    pub watch: bool,
    /// The KubernetesService the cluster is: discovered models land under it (their
    /// trust domains' and pods' `owner`), and it is written when the repo lacks it.
    /// Default: the repo's only KubernetesService; with several, the one named like
    /// the kubeconfig context.
    #[arg(long, env = "TETHER_KUBERNETES_SERVICE", value_name = "NAME")]
    pub kubernetes_service: Option<String>,
    #[command(flatten)]
    pub discover: DiscoverFlags,
    #[command(flatten)]
    pub git: GitFlags,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub events: EventFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// Keep watching (the only mode: events are changes over time).
    #[arg(long, required = true)]
    pub watch: bool,
    /// Only these namespaces (repeat the flag; default: all namespaces).
    #[arg(
        short,
        long = "namespace",
        env = "TETHER_EVENTS_NAMESPACES",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// Settings file with an `events:` section (the format of .tether.yaml).
    #[arg(long, env = "TETHER_EVENTS_CONFIG")]
    pub config: Option<PathBuf>,
    /// The KubernetesService the cluster is, which each event names as its `cluster`
    /// (default: the kubeconfig context's name).
    #[arg(long, env = "TETHER_KUBERNETES_SERVICE", value_name = "NAME")]
    pub kubernetes_service: Option<String>,
    #[command(flatten)]
    pub events: EventFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ReportFormat {
    Text,
    Markdown,
    Json,
}
