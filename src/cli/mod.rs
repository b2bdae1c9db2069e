//! Commands: parse flags, run the library, print, and pick the exit code.

mod args;
mod attestation;
mod book;
mod check;
mod discovery;
mod events;
mod flags;
mod fleet;
mod image_automation;
mod install;
mod manual;
mod models;
mod node;
mod operate;
mod post;
mod push;
mod reconcile;
mod run;
mod secret;
mod sources;
mod terminal;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use self::args::EXIT_ERROR;
use self::args::{
    ApplyArgs, DiffArgs, DiscoverArgs, EventsArgs, GlobalArgs, GraphArgs, LogFormat,
    ReconcileSourceArgs, RenderArgs, RunArgs, ValidateArgs,
};

/// tether: Kubernetes services described as models in Git, reconciled to the cluster.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, propagate_version = true)]
pub struct Args {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check every model and reference; report all problems with file:line:column.
    ///
    /// Exits 0 when the models are valid (warnings allowed), 1 when they are not or
    /// when no model was found (--allow-empty), 2 when they cannot be read.
    #[command(
        after_help = "Examples:\n  tether validate examples/models/xos-demo\n  tether validate models --output-format github   # annotations in a GitHub Actions job\n  tether validate models -o json | jq '.diagnostics[] | select(.severity == \"error\")'"
    )]
    Validate(ValidateArgs),
    /// Print the Kubernetes objects the models describe, in apply order.
    ///
    /// Nothing is printed from invalid models (exit 1). Secret values are printed
    /// base64-encoded, as Kubernetes stores them: treat the output as secret.
    #[command(
        after_help = "Examples:\n  tether render examples/models\n  tether render examples/models -o json | jq '.items[].metadata.name'\n  tether render examples/models | kubectl apply --server-side -f -"
    )]
    Render(RenderArgs),
    /// Show what `apply` would change in the cluster, object by object.
    ///
    /// Creates, updates (a unified diff of the live object against the server's dry
    /// run of the apply, so defaulted fields make no noise), conflicts with other
    /// field managers, and the deletions `apply --prune` would make. Secret values
    /// are masked. Exits 0 when the cluster matches, 1 when it differs, 2 on error.
    #[command(
        after_help = "Examples:\n  tether diff examples/models\n  tether diff --repo https://git.example.org/ops/models.git --ref main -o markdown > comment.md\n  tether diff -o json | jq '.summary'\n  TETHER_POST_TOKEN=$GITHUB_TOKEN tether diff --post   # in a pull request's GitHub Actions job"
    )]
    Diff(DiffArgs),
    /// Make the cluster match the models: server-side apply in dependency order.
    ///
    /// Objects already as rendered are not touched. With --prune, objects tether
    /// applied earlier whose model is gone are deleted (never objects tether did not
    /// apply, and never when the source has no models). Exits 0 when everything was
    /// applied, 2 when anything failed (the summary says what), or on error.
    #[command(
        after_help = "Examples:\n  tether apply examples/models\n  tether apply --prune --wait --repo ssh://git@git.example.org/ops/models.git --ref v1.4.0"
    )]
    Apply(ApplyArgs),
    /// Check a deployment attestation (`apply --attestation-key`, or a Source's
    /// `spec.attestation`) and compare the cluster's live objects with it.
    ///
    /// The inventory's newest attestation (or --attestation FILE) must be signed by
    /// one of the --key public keys. Then each object it names is read: a field tether
    /// set that changed since, by whom, a field removed, an object deleted, and the
    /// fields another writer (kubectl edit, a script) set since. Exits 0 when the
    /// cluster holds what it attests, 1 when it drifted, 2 when the attestation is not
    /// verified or cannot be read.
    #[command(
        after_help = "Examples:\n  tether verify --key attestation.pub --inventory-name shop --inventory-namespace shop\n  kubectl get configmap -n shop -l tether.dev/attestation-of=shop\n  tether verify --key attestation.pub --attestation envelope.json"
    )]
    Verify(args::VerifyArgs),
    /// Reconcile continuously: one source from flags, or with --sources every `Source`
    /// resource of the cluster (the in-cluster daemon, see deploy/).
    ///
    /// A pass applies what changed; the next comes after the interval, at once for a
    /// webhook (--listen) or a saved model file, and within seconds when someone
    /// changes an object tether applied (drift is corrected, or only reported).
    /// Runs until SIGTERM or Ctrl-C, then exits 0; a failed pass is retried with
    /// backoff.
    #[command(
        after_help = "Examples:\n  tether run examples/models\n  tether run --prune --interval 5m --repo https://git.example.org/ops/models.git --ref main\n  tether run --sources --leader-elect --listen 0.0.0.0:8080 --webhook-secret-file /etc/tether/webhook/secret"
    )]
    Run(RunArgs),
    /// The web page of one source from flags, on this machine: `tether run` on
    /// loopback (it applies, as your kubeconfig's identity, like `tether run`), with
    /// the page at http://127.0.0.1:8080/ (--listen to change). Like `kubectl proxy`:
    /// no login, your own rights; actions commit to the models' repository.
    #[command(
        after_help = "Examples:\n  tether ui examples/models\n  tether ui models --listen 127.0.0.1:9000\n  tether ui --repo https://git.example.org/ops/models.git --ref main clusters/prod"
    )]
    Ui(RunArgs),
    /// Ask the daemon for a pass of a Source now, and wait until it is handled.
    ///
    /// Sets the Source's `tether.dev/reconcile-requested-at` annotation; the daemon
    /// echoes the value in `status.lastHandledReconcileAt` when its pass is done.
    /// Prints the Source's readiness then; exits 0 when it is Ready, 2 when not.
    #[command(after_help = "Example:\n  tether reconcile web -n team-a")]
    Reconcile(ReconcileSourceArgs),
    /// Approve a prune a Source holds beyond its deletion budget, and wait for the
    /// pass that carries it out.
    ///
    /// Sets the Source's `tether.dev/approve-deletions` annotation to the digest of
    /// exactly the deletions approved (the one its PruneHeld status names); a plan
    /// whose deletions changed since has another digest and stays held. Prints the
    /// Source's readiness then; exits 0 when it is Ready, 2 when not.
    #[command(after_help = "Example:\n  tether approve web -n team-a sha256:3f1c…")]
    Approve(args::ApproveArgs),
    /// Print the dependency graph of the models (`depends_on`): Mermaid or DOT.
    ///
    /// One box per wave; an arrow from each model to what it waits for, models of
    /// the repo and objects in the cluster. Exits 1 when the models are invalid.
    #[command(
        after_help = "Examples:\n  tether graph examples/openstack\n  tether graph examples/openstack --format dot | dot -Tsvg > workflow.svg"
    )]
    Graph(GraphArgs),
    /// Install the daemon: its namespace, the Source and Cluster CRDs (waited for
    /// until established), RBAC, a StatefulSet of two replicas that share the Sources,
    /// a Service, a PodDisruptionBudget and a webhook Secret of random bytes.
    ///
    /// Server-side apply: run it again to upgrade, or to see that nothing changed
    /// (each object is printed created, configured or unchanged). --export prints the
    /// same objects as YAML for a GitOps repository (deploy/ holds them, for
    /// `kubectl apply -k deploy/`). Exits 0 when installed, 2 on error.
    #[command(after_help = "Examples:\n  tether install\n  tether install --export > tether.yaml")]
    Install(install::InstallArgs),
    /// Remove the daemon and the Source and Cluster CRDs (and so every Source and
    /// Cluster). The objects the Sources applied stay, with their inventories.
    ///
    /// The namespace is deleted too unless it holds objects install did not make.
    /// Exits 0 when nothing of tether is left, 2 on error.
    #[command(after_help = "Example:\n  tether uninstall")]
    Uninstall(install::UninstallArgs),
    /// Is the cluster fit for tether (--pre), and is its install sound?
    ///
    /// --pre: the server's version against the supported range, and your right to
    /// install. Without it: also the Source CRD established, the daemon ready and its
    /// version, the webhook's secret and endpoints, and for each Source whether its
    /// identity may do what its inventory needs (as `kubectl auth can-i` answers).
    /// Exits 0 when every check passes (warnings allowed), 1 when one fails, 2 on error.
    #[command(after_help = "Examples:\n  tether check --pre\n  tether check")]
    Check(check::CheckArgs),
    /// Print this client's version, the server's, and the daemon's.
    #[command(after_help = "Examples:\n  tether version\n  tether version --client")]
    Version(check::VersionArgs),
    /// Stop reconciling a Source (spec.suspend): its objects stay as they are.
    #[command(after_help = "Example:\n  tether suspend web -n team-a")]
    Suspend(sources::SourceArgs),
    /// Reconcile a suspended Source again.
    #[command(after_help = "Example:\n  tether resume web -n team-a")]
    Resume(sources::SourceArgs),
    /// Print what a Source's inventory holds: the objects it applied, by namespace.
    ///
    /// Each object is marked when it was adopted (it existed before the Source applied
    /// it) and when it is missing from the cluster.
    #[command(after_help = "Example:\n  tether tree web -n team-a")]
    Tree(sources::SourceArgs),
    /// Hand what `tether apply` applied over to a Source, which then updates and
    /// prunes it (instead of refusing it as another inventory's).
    ///
    /// The Source's inventory records the objects, each object gets its membership
    /// label and field ownership, and the giving inventory (default: default/tether)
    /// forgets them. Safe to run again after an interruption. Objects another
    /// inventory took are left. Exits 0 when handed over, 2 on error.
    #[command(
        after_help = "Example:\n  tether handover web -n team-a --from-inventory-namespace default"
    )]
    Handover(sources::HandoverArgs),
    /// A fleet's view from a hub that holds no cluster's keys: clusters join, their
    /// daemons report their Sources (`tether run --fleet-hub-kubeconfig`), and
    /// `status` shows every cluster and Source, those needing attention first.
    #[command(
        subcommand,
        after_help = "Examples:\n  tether fleet join edge-1 --hub-kubeconfig hub.yaml -o edge-1-hub.yaml\n  tether fleet status --hub-kubeconfig hub.yaml\n  tether fleet revoke edge-1 --hub-kubeconfig hub.yaml"
    )]
    Fleet(fleet::FleetCommand),
    /// Print the CustomResourceDefinitions of `Source` and `Cluster` (as deploy/base/crd.yaml holds them).
    #[command(after_help = "Example:\n  tether crd | kubectl apply --server-side -f -")]
    Crd,
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
    Discover(DiscoverArgs),
    /// Set a slice's replica count, as a commit to the models repo, then apply it.
    ///
    /// Edits `controller_replica_count` in the model's file in place (comments and
    /// layout kept) and commits it as `scale: Slice/web 3 → 4`, to the checked-out
    /// branch, the branch of --repo (pushed), or a new --propose branch. Deployments
    /// and StatefulSets only. Exits 0 when committed and applied, 2 on error (nothing
    /// is committed when the slice is unknown, not tether's, or the count negative).
    #[command(
        after_help = "Examples:\n  tether scale web +1 -C examples/models\n  tether scale web 5 --repo ssh://git@git.example.org/ops/models.git --author 'Ada <ada@example.org>'\n  tether scale web -1 --propose scale-web-down"
    )]
    Scale(operate::ScaleArgs),
    /// What each ImagePolicy of the models chooses from its registry now; with
    /// --commit, the commits that write it.
    ///
    /// Each image repository is listed once (its tag list, page by page); a policy
    /// never replaces a tag with one it ranks lower, unless the tag written is outside
    /// the policy (the policy changed). The chosen tag is written in place (the Image
    /// model and the references to it, or the value a `# tether:image-policy NAME`
    /// marker comment sits on), one commit per policy (--batch: one for all), to the
    /// branch or, for `update: branch` policies, to `tether/image/NAME`. Exits 0, or 2
    /// when a policy could not be decided (registry, credentials, targets).
    #[command(after_help = "Examples:
  tether images -C models
  tether images --commit --repo ssh://git@git.example.org/ops/models.git
  tether images --json | jq '.policies[] | select(.result == \"failed\")'")]
    Images(image_automation::ImagesArgs),
    /// Roll a slice's pods (as `kubectl rollout restart`), as a commit to the models repo.
    ///
    /// Sets the slice's `restarted_at` to now; it goes into the pod template's
    /// `tether.dev/restarted-at` annotation, so the controller replaces every pod
    /// following its update strategy. Being in Git, the restart is in the history and
    /// the next reconcile keeps it.
    #[command(after_help = "Example:\n  tether restart web --wait")]
    Restart(operate::RestartArgs),
    /// Put a slice back as it was, as a new commit (history is never rewritten).
    ///
    /// By default as it was before its latest change; --to names a commit. The
    /// slice's model is put back, and the model of the Image it runs when one Image
    /// has that name.
    #[command(
        after_help = "Examples:\n  tether rollback web --wait\n  tether rollback web --to v1.4.0"
    )]
    Rollback(operate::RollbackArgs),
    /// Follow a slice's rollout.
    #[command(
        subcommand,
        after_help = "Example:\n  tether rollout status web --timeout 2m"
    )]
    Rollout(operate::RolloutCommand),
    /// Delete one pod so that it is made again from scratch: by its controller, or
    /// by tether for a bare pod of its models. Acts on the cluster only.
    ///
    /// Nothing changes in Git, because the desired state stays the same. The pod is
    /// marked with a `tether.dev/action` annotation (which the events of `tether
    /// events` carry) and a Kubernetes Event records who recreated it. A pod that
    /// nothing would make again (no controller, not tether's) is refused.
    #[command(after_help = "Example:\n  tether recreate web-7d9c5-x2x4q -n shop")]
    Recreate(operate::RecreateArgs),
    /// Restart the containers of one pod in place (Murano's container restart). Acts on
    /// the cluster only.
    ///
    /// Kubernetes has no API to restart a container. This is the closest equivalent:
    /// through the exec API it sends SIGTERM to each container's main process (`kill
    /// 1`); the kubelet then starts the container again in the same pod (same uid, IP
    /// and volumes; files written outside volumes are lost). It needs the pods/exec
    /// permission, a `kill` command in the image, and a restartPolicy other than
    /// Never; a main process that ignores SIGTERM keeps running. When that does not
    /// fit, `tether recreate` makes a new pod instead. Nothing changes in Git; the
    /// pod is annotated and a Kubernetes Event records the action.
    #[command(after_help = "Example:\n  tether restart-containers web-0 -n shop -c web")]
    RestartContainers(operate::RestartContainersArgs),
    /// A host's labels and lock, as commits to its Node model (StarlingX's
    /// host-label-assign/list/remove and host-lock/unlock), then applied.
    ///
    /// tether owns only what its Node models set: labels and taints that the kubelet,
    /// other tools or people put on the node are never touched. Deleting a Node model
    /// means the host is leaving: `apply --prune` then cordons the node, evicts its
    /// pods (disruption budgets respected), deletes the rest, and deletes the Node.
    #[command(
        subcommand,
        after_help = "Examples:\n  tether node label assign worker-1 sriov=enabled\n  tether node label list\n  tether node lock worker-1 --timeout 10m"
    )]
    Node(node::NodeCommand),
    /// Secrets safe in Git: models files encrypted as sops does, with age keys.
    ///
    /// Compatible with the sops tool both ways, and with a team's `.sops.yaml`.
    /// tether decrypts encrypted models files in memory when it reads them, with the
    /// keys of --age-key-file, TETHER_AGE_KEY, SOPS_AGE_KEY or SOPS_AGE_KEY_FILE.
    #[command(
        subcommand,
        after_help = "Examples:
  tether secret keygen -o ~/.config/sops/age/keys.txt
  tether secret encrypt -i models/db-credentials.yaml
  tether secret edit models/db-credentials.yaml"
    )]
    Secret(secret::SecretCommand),
    /// Publish models for Sources to follow: an OCI artifact in Flux's format.
    ///
    /// A Source (or `--repo`) of oci://HOST/REPOSITORY:TAG then applies it; pushing
    /// again to the tag is a new revision (`TAG@sha256:…`).
    #[command(
        subcommand,
        after_help = "Example:\n  tether push artifact oci://ghcr.io/team/models:main --path models --source https://github.com/team/models --revision main@sha1:$(git rev-parse HEAD)"
    )]
    Push(push::PushCommand),
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
    Events(EventsArgs),
    /// Print a shell completion script.
    #[command(after_help = "Example:\n  tether completions bash > /etc/bash_completion.d/tether")]
    Completions { shell: clap_complete::Shell },
    /// Print the JSON Schema of the model format, for editors (completion, hover text,
    /// inline errors through yaml-language-server).
    ///
    /// Reference it from a model file's first line, or map it to the models in the
    /// editor's settings (the book's Editors guide).
    #[command(
        after_help = "Example:\n  tether schema > tether.schema.json\n  # then, as the first line of a model file:\n  # yaml-language-server: $schema=../tether.schema.json"
    )]
    Schema,
    /// Print the manual page (roff), for `man`; with --dir, write every command's page.
    ///
    /// Each page has the command's exit status. Pages are named as their command:
    /// tether.1, tether-apply.1, tether-node-label-assign.1.
    #[command(
        after_help = "Examples:\n  tether man > /usr/local/share/man/man1/tether.1\n  tether man --dir /usr/local/share/man/man1 && man tether-apply"
    )]
    Man(manual::ManArgs),
    /// Write the book's reference pages (docs/book/src/reference) from the code.
    #[command(hide = true)]
    Reference(book::ReferenceArgs),
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

/// Flags to a command, its exit code back.
pub async fn run(args: Args) -> miette::Result<ExitCode> {
    let global = &args.global;
    match args.command {
        Command::Validate(args) => models::validate(global, &args).await,
        Command::Render(args) => models::render(global, &args).await,
        Command::Graph(args) => models::graph(global, &args).await,
        Command::Diff(args) => reconcile::diff(global, &args).await,
        Command::Apply(args) => reconcile::apply(global, &args).await,
        Command::Verify(args) => attestation::verify(&args).await,
        Command::Run(args) => run::run(global, &args).await,
        Command::Ui(args) => run::ui(global, &args).await,
        Command::Reconcile(args) => run::reconcile(&args).await,
        Command::Approve(args) => run::approve(&args).await,
        Command::Crd => run::crd(),
        Command::Fleet(command) => fleet::run(&command).await,
        Command::Install(args) => install::install(&args).await,
        Command::Uninstall(args) => install::uninstall(&args).await,
        Command::Suspend(args) => sources::set_suspend(&args, true).await,
        Command::Resume(args) => sources::set_suspend(&args, false).await,
        Command::Tree(args) => sources::tree(&args).await,
        Command::Handover(args) => sources::handover(&args).await,
        Command::Check(args) => check::check(&args).await,
        Command::Version(args) => check::version(&args).await,
        Command::Schema => {
            print!("{}", tether_core::model::model_schema());
            Ok(ExitCode::SUCCESS)
        }
        Command::Discover(args) => discovery::run(&args).await,
        Command::Scale(args) => operate::scale(global, &args).await,
        Command::Images(args) => image_automation::images(global, &args).await,
        Command::Restart(args) => operate::restart(global, &args).await,
        Command::Rollback(args) => operate::rollback(global, &args).await,
        Command::Rollout(command) => operate::rollout(&command).await,
        Command::Recreate(args) => operate::recreate_pod(global, &args).await,
        Command::RestartContainers(args) => operate::restart_pod_containers(&args).await,
        Command::Node(command) => node::run(global, &command).await,
        Command::Secret(command) => secret::run(&command),
        Command::Push(command) => push::run(&command).await,
        Command::Events(args) => events::run(&args).await,
        Command::Completions { shell } => {
            let mut out = std::io::stdout();
            clap_complete::generate(shell, &mut Args::command(), "tether", &mut out);
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => manual::run(&args, Args::command()),
        Command::Reference(args) => book::run(&args, Args::command()),
    }
}
