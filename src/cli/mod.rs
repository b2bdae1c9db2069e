//! Commands: parse flags, run the library, print, and pick the exit code.

mod discover;
mod events;
mod reconcile;
mod report;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use miette::{IntoDiagnostic, WrapErr};
use tether::discover::Scope;
use tether::ownership::Inventory;
use tether::source::read_models_dir;

/// Exit code for invalid models or differences found.
pub const EXIT_INVALID: u8 = 1;
/// Exit code for usage, I/O and cluster errors (clap uses 2 for usage errors too).
pub const EXIT_ERROR: u8 = 2;

/// tether: Kubernetes services described as models in Git, reconciled to the cluster.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, propagate_version = true)]
pub struct Args {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, global = true, env = "TETHER_LOG_LEVEL", default_value = "warn")]
    log_level: String,
    /// Log format on standard error.
    #[arg(long, global = true, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Colour and graphics in reports: auto (when the output is a terminal), always, never.
    #[arg(long, global = true, env = "TETHER_COLOR", value_enum, default_value_t = Color::Auto)]
    color: Color,
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, env = "TETHER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long, global = true, env = "TETHER_CONTEXT")]
    context: Option<String>,
    /// How long one request to the API server may take, e.g. 30s, 2m.
    #[arg(long, global = true, env = "TETHER_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    request_timeout: Duration,
}

/// `90s`, `5m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len()),
    );
    let value: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" is not a duration (e.g. 30s, 5m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("\"{text}\" is not a duration (e.g. 30s, 5m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

/// Where the models come from: a directory, or a Git repository.
#[derive(Debug, clap::Args)]
struct SourceArgs {
    /// Models root: a directory searched for *.yaml and *.yml, or one file; with
    /// --repo, a directory inside the repository.
    #[arg(default_value = ".", env = "TETHER_PATH")]
    path: PathBuf,
    /// Git repository to read the models from: file://, https:// or ssh:// URL.
    #[arg(long, env = "TETHER_REPO")]
    repo: Option<String>,
    /// Branch, tag or commit of --repo (default: the remote's default branch).
    #[arg(long = "ref", env = "TETHER_REF", requires = "repo")]
    reference: Option<String>,
    #[command(flatten)]
    git: GitArgs,
}

/// How to reach a remote Git repository.
#[derive(Debug, clap::Args)]
struct GitArgs {
    /// Token for https remotes.
    #[arg(long, env = "TETHER_GIT_TOKEN", hide_env_values = true)]
    git_token: Option<String>,
    /// User name for https remotes (default: x-access-token with a token).
    #[arg(long, env = "TETHER_GIT_USERNAME")]
    git_username: Option<String>,
    /// Private key for ssh remotes (default: the ssh agent).
    #[arg(long, env = "TETHER_SSH_KEY")]
    ssh_key: Option<PathBuf>,
    /// Where fetched repositories are cached (default: ~/.cache/tether/repos).
    #[arg(long, env = "TETHER_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

impl GitArgs {
    fn credentials(&self) -> tether::git::Credentials {
        tether::git::Credentials {
            token: self.git_token.clone(),
            username: self.git_username.clone(),
            ssh_key: self.ssh_key.clone(),
        }
    }

    fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(|| cache_home().join("repos"))
    }
}

/// `$XDG_CACHE_HOME/tether`, else `~/.cache/tether`.
fn cache_home() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("tether")
}

/// Where pod events go. Each flag may also come from the `events:` section of the
/// settings file (.tether.yaml, or `events --config`); flags win.
#[derive(Clone, Debug, clap::Args)]
struct EventArgs {
    /// Kafka brokers (host:port, comma-separated) to publish pod events to.
    #[arg(long, env = "TETHER_KAFKA_BROKERS", value_delimiter = ',')]
    kafka_brokers: Vec<String>,
    /// Kafka topic, made with one partition if the broker lacks it (default:
    /// xos.kubernetes.pod-details).
    #[arg(long, env = "TETHER_KAFKA_TOPIC")]
    kafka_topic: Option<String>,
    /// Append events as JSON lines to this file ("-": standard output).
    #[arg(long, env = "TETHER_EVENTS_JSONL")]
    events_jsonl: Option<PathBuf>,
    /// Record events as Kubernetes Events on the pods (`kubectl describe pod`).
    #[arg(long, env = "TETHER_KUBE_EVENTS")]
    kube_events: bool,
    /// Directory of the outbox that keeps undelivered events (default:
    /// ~/.cache/tether/outbox; in a cluster, a persistent volume).
    #[arg(long, env = "TETHER_OUTBOX")]
    outbox: Option<PathBuf>,
}

/// The inventory (ApplySet parent) that records what tether applied.
#[derive(Debug, clap::Args)]
struct InventoryArgs {
    /// Name of the inventory ConfigMap; its id labels every object.
    #[arg(long, env = "TETHER_INVENTORY_NAME", default_value = "tether")]
    inventory_name: String,
    /// Namespace of the inventory ConfigMap.
    #[arg(long, env = "TETHER_INVENTORY_NAMESPACE", default_value = "default")]
    inventory_namespace: String,
}

impl InventoryArgs {
    fn inventory(&self) -> Inventory {
        Inventory {
            name: self.inventory_name.clone(),
            namespace: self.inventory_namespace.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check every model and reference; report all problems with file:line:column.
    ///
    /// Exits 0 when the models are valid (warnings allowed), 1 when they are not,
    /// 2 when they cannot be read.
    #[command(after_help = "Example:\n  tether validate examples/models/xos-demo")]
    Validate {
        /// Models root (a directory searched for *.yaml and *.yml, or one file).
        #[arg(default_value = ".", env = "TETHER_PATH")]
        path: PathBuf,
    },
    /// Print the Kubernetes objects the models describe, in apply order.
    ///
    /// Nothing is printed from invalid models (exit 1). Secret values are printed
    /// base64-encoded, as Kubernetes stores them: treat the output as secret.
    #[command(
        after_help = "Examples:\n  tether render examples/models\n  tether render examples/models -o json | jq '.items[].metadata.name'\n  tether render examples/models | kubectl apply --server-side -f -"
    )]
    Render {
        #[arg(default_value = ".", env = "TETHER_PATH")]
        path: PathBuf,
        /// Output format: multi-document YAML, or a JSON `v1` List.
        #[arg(short, long, env = "TETHER_OUTPUT", value_enum, default_value_t = OutputFormat::Yaml)]
        output: OutputFormat,
        #[command(flatten)]
        inventory: InventoryArgs,
    },
    /// Show what `apply` would change in the cluster, object by object.
    ///
    /// Creates, updates (a unified diff of the live object against the server's dry
    /// run of the apply, so defaulted fields make no noise), conflicts with other
    /// field managers, and the deletions `apply --prune` would make. Secret values
    /// are masked. Exits 0 when the cluster matches, 1 when it differs, 2 on error.
    #[command(
        after_help = "Examples:\n  tether diff examples/models\n  tether diff --repo https://git.example.org/ops/models.git --ref main -o markdown > comment.md\n  tether diff -o json | jq '.summary'"
    )]
    Diff {
        #[command(flatten)]
        source: SourceArgs,
        /// Report format.
        #[arg(short, long, env = "TETHER_OUTPUT", value_enum, default_value_t = ReportFormat::Text)]
        output: ReportFormat,
        #[command(flatten)]
        inventory: InventoryArgs,
    },
    /// Make the cluster match the models: server-side apply in dependency order.
    ///
    /// Objects already as rendered are not touched. With --prune, objects tether
    /// applied earlier whose model is gone are deleted (never objects tether did not
    /// apply, and never when the source has no models). Exits 0 when everything was
    /// applied, 2 when anything failed (the summary says what), or on error.
    #[command(
        after_help = "Examples:\n  tether apply examples/models\n  tether apply --prune --wait --repo ssh://git@git.example.org/ops/models.git --ref v1.4.0"
    )]
    Apply {
        #[command(flatten)]
        source: SourceArgs,
        /// Delete objects whose model was removed.
        #[arg(long, env = "TETHER_PRUNE")]
        prune: bool,
        /// Show the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Take fields that other field managers (Helm, kubectl) own.
        #[arg(long, env = "TETHER_FORCE_CONFLICTS")]
        force_conflicts: bool,
        /// Wait for Deployments, StatefulSets, DaemonSets, Pods and Jobs to be ready.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. 5m.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        timeout: Duration,
        #[command(flatten)]
        inventory: InventoryArgs,
    },
    /// Write models for the pods running in the cluster and commit them to Git.
    ///
    /// Pods that tether did not create (Helm, kubectl, controllers) become
    /// KubernetesServiceInstance models with `xos_managed: false` and their IP, with the
    /// TrustDomain, Principal, Slice and Image models they need, one pod per file under
    /// `discovered/` of the models root. Pods of controllers that tether applied are
    /// recorded as instances of their Slice. Nothing outside `discovered/` is written,
    /// and tether never applies, changes or deletes what discovered models describe.
    /// An unchanged cluster makes no commit. Defaults for the branch, author,
    /// namespaces and debounce may be set in `.tether.yaml` at the models root
    /// (`discover:` section); flags and TETHER_* variables win.
    #[command(
        after_help = "Examples:\n  tether discover examples/models\n  tether discover --repo ssh://git@git.example.org/ops/models.git --branch main --push --watch\n  tether discover -n demo-trust -n default --once"
    )]
    Discover {
        /// Models root: a directory in a Git checkout; with --repo, a directory
        /// inside the repository.
        #[arg(default_value = ".", env = "TETHER_PATH")]
        path: PathBuf,
        /// Git repository to commit to (and push to, with --push): file://, https://
        /// or ssh:// URL. tether works in its own clone in the cache directory.
        #[arg(long, env = "TETHER_REPO")]
        repo: Option<String>,
        /// Branch to commit to (default: .tether.yaml's `discover.branch`, else the
        /// checked-out branch; with --repo, main).
        #[arg(long, env = "TETHER_DISCOVER_BRANCH")]
        branch: Option<String>,
        /// Push each discovery commit to --repo; a push refused because the branch
        /// moved is fetched, planned again on the new tip and retried, never forced.
        #[arg(long, env = "TETHER_DISCOVER_PUSH", requires = "repo")]
        push: bool,
        /// Discover once and exit (the default).
        #[arg(long, conflicts_with = "watch")]
        once: bool,
        /// Print what would be committed (the message and the files) and change nothing.
        #[arg(long, conflicts_with_all = ["watch", "push"])]
        dry_run: bool,
        /// Keep watching and commit changes, at most one commit per --debounce.
        #[arg(long)]
        watch: bool,
        /// With --watch, how long to gather changes into one commit (default 2s).
        #[arg(long, env = "TETHER_DISCOVER_DEBOUNCE", value_parser = parse_duration)]
        debounce: Option<Duration>,
        /// Only these namespaces (repeat the flag; default: all namespaces).
        #[arg(
            short,
            long = "namespace",
            env = "TETHER_DISCOVER_NAMESPACES",
            value_delimiter = ','
        )]
        namespaces: Vec<String>,
        /// Commit author, "Name <email>" (default: tether <tether@localhost>).
        #[arg(long, env = "TETHER_DISCOVER_AUTHOR")]
        author: Option<String>,
        #[command(flatten)]
        git: GitArgs,
        #[command(flatten)]
        inventory: InventoryArgs,
        #[command(flatten)]
        events: EventArgs,
    },
    /// Publish pod lifecycle events (created, updated, restarted, deleted) to sinks.
    ///
    /// Watches the pods (discovered and tether-managed alike) and publishes an event
    /// when a pod appears, its IP changes, a container's restart count rises, or it
    /// disappears: to Kafka (the XOS topic and value), as JSON lines, and as
    /// Kubernetes Events on the pod. Events wait in an outbox on disk until every sink
    /// has them, so a broker outage or a restart loses none (at least once, in order
    /// per pod). Writes nothing to Git; `discover --watch` takes the same sink flags.
    #[command(
        after_help = "Examples:\n  tether events --watch --kafka-brokers kafka:9092\n  tether events --watch -n demo-trust --events-jsonl - --kube-events"
    )]
    Events {
        /// Keep watching (the only mode: events are changes over time).
        #[arg(long, required = true)]
        watch: bool,
        /// Only these namespaces (repeat the flag; default: all namespaces).
        #[arg(
            short,
            long = "namespace",
            env = "TETHER_EVENTS_NAMESPACES",
            value_delimiter = ','
        )]
        namespaces: Vec<String>,
        /// Settings file with an `events:` section (the format of .tether.yaml).
        #[arg(long, env = "TETHER_EVENTS_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        events: EventArgs,
    },
    /// Print a shell completion script.
    #[command(after_help = "Example:\n  tether completions bash > /etc/bash_completion.d/tether")]
    Completions { shell: clap_complete::Shell },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ReportFormat {
    Text,
    Markdown,
    Json,
}

pub fn init_logging(global: &GlobalArgs) {
    // rskafka warns on every reconnection attempt while a broker is down; tether's
    // own warning says so once per retry, so its chatter is off unless asked for.
    let level = if global.log_level.contains("rskafka") {
        global.log_level.clone()
    } else {
        format!("{},rskafka=error", global.log_level)
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match global.log_format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub async fn run(args: Args) -> miette::Result<ExitCode> {
    let global = args.global;
    match args.command {
        Command::Validate { path } => validate(&path, global.color).await,
        Command::Render {
            path,
            output,
            inventory,
        } => render(&path, output, &inventory.inventory(), global.color).await,
        Command::Diff {
            source,
            output,
            inventory,
        } => reconcile::diff(&global, &source, output, &inventory.inventory()).await,
        Command::Apply {
            source,
            prune,
            dry_run,
            force_conflicts,
            wait,
            timeout,
            inventory,
        } => {
            let options = reconcile::ApplyCommand {
                prune,
                dry_run,
                force_conflicts,
                wait: wait.then_some(timeout),
            };
            reconcile::apply(&global, &source, &options, &inventory.inventory()).await
        }
        Command::Discover {
            path,
            repo,
            branch,
            push,
            once: _,
            dry_run,
            watch,
            debounce,
            namespaces,
            author,
            git,
            inventory,
            events,
        } => {
            let command = discover::DiscoverCommand {
                path,
                repo,
                branch,
                push,
                dry_run,
                watch,
                debounce,
                namespaces,
                author,
            };
            discover::run(&global, &command, &git, &inventory.inventory(), &events).await
        }
        Command::Events {
            watch: _,
            namespaces,
            config,
            events,
        } => {
            let scope = if namespaces.is_empty() {
                Scope::All
            } else {
                Scope::Namespaces(namespaces.into_iter().collect())
            };
            events::run(&global, &scope, config.as_deref(), &events).await
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Args::command(),
                "tether",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Reads a models directory off the async runtime.
async fn read(path: &std::path::Path) -> miette::Result<tether::source::SourceFiles> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || read_models_dir(&path))
        .await
        .into_diagnostic()?
        .into_diagnostic()
        .wrap_err("cannot read the models")
}

async fn validate(path: &std::path::Path, color: Color) -> miette::Result<ExitCode> {
    let files = read(path).await?;
    let analysis = tether::analyze(&files);
    let mut out = std::io::stdout().lock();
    let styled = report::use_graphics(color, std::io::stdout().is_terminal());
    let text = report::diagnostics(&analysis.diagnostics, &files, styled);
    let summary = report::summary(&analysis, &files, path);
    write!(out, "{text}{summary}").into_diagnostic()?;
    Ok(if analysis.graph.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID)
    })
}

async fn render(
    path: &std::path::Path,
    output: OutputFormat,
    inventory: &Inventory,
    color: Color,
) -> miette::Result<ExitCode> {
    let files = read(path).await?;
    let analysis = tether::analyze(&files);
    let styled = report::use_graphics(color, std::io::stderr().is_terminal());
    eprint!(
        "{}",
        report::diagnostics(&analysis.diagnostics, &files, styled)
    );
    let Some(graph) = &analysis.graph else {
        eprint!("{}", report::summary(&analysis, &files, path));
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    let objects = tether::render::render(graph, &files, inventory);
    tracing::info!(objects = objects.len(), "rendered");
    let text = match output {
        OutputFormat::Yaml => tether::render::to_yaml(&objects).into_diagnostic()?,
        OutputFormat::Json => tether::render::to_json_list(&objects),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C, or SIGTERM (how Kubernetes stops a pod).
pub(crate) async fn shutdown() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
