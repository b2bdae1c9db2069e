//! Day-2 operations: `scale`, `restart` and `rollback` commit to the models repo and
//! then apply; `rollout status` follows a rollout; `recreate` and
//! `restart-containers` act on one pod.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::flags::{ClusterFlags, GitFlags, InventoryFlags, KeyFlags};
use miette::miette;
use tether_core::operation::{Operation, ReplicaChange};
use tether_core::settings::parse_duration;
use tether_engine::actions::pods::{Maker, recreate, restart_containers};
use tether_engine::actions::{CommitTo, Committed, Request, commit, rollout};
use tether_engine::cluster::connect;
use tether_engine::discovery::Destination;
use tether_engine::reconcile::{ApplyOptions, PlanOptions, Selection, Writes};
use tether_engine::repo::Repo;
use tether_engine::writeback::Author;

use super::args::{EXIT_ERROR, GlobalArgs};
use super::reconcile::{ApplyRun, run_apply};
use super::terminal;

/// Where the models are, for every day-2 command.
#[derive(Debug, clap::Args)]
pub struct ModelsArgs {
    /// The models root: a directory in a Git checkout (its branch is committed to).
    #[arg(short = 'C', long = "path", default_value = ".", env = "TETHER_PATH")]
    pub path: PathBuf,
    /// A remote repository instead of a checkout: tether commits in its own clone and
    /// pushes (never forced; a push that loses a race is planned again on the new tip).
    /// --path is then the models directory inside it.
    #[arg(long, env = "TETHER_REPO", value_name = "REPO")]
    pub repo: Option<String>,
    /// The branch (default: the checked-out one; main for --repo).
    #[arg(long, env = "TETHER_BRANCH")]
    pub branch: Option<String>,
    #[command(flatten)]
    pub git: GitFlags,
}

impl ModelsArgs {
    pub(super) fn destination(&self) -> miette::Result<Destination> {
        self.git
            .destination(self.repo.as_deref(), &self.path, self.git.cache_dir())
    }

    /// The models as they are now (the branch of --repo, or the directory).
    pub(super) fn source(&self) -> miette::Result<Repo> {
        Ok(match &self.repo {
            Some(url) => Repo::Git {
                url: url.clone(),
                reference: self.branch.clone(),
                path: self.path.clone(),
                cache: self.git.cache_dir(),
                credentials: self.git.credentials()?,
                verify: None,
            },
            None => Repo::Directory(self.path.clone()),
        })
    }
}

/// How a day-2 commit is made and followed.
#[derive(Debug, clap::Args)]
pub struct CommitArgs {
    #[command(flatten)]
    pub models: ModelsArgs,
    /// The commit's author, "Name <email>" (default: the checkout's user.name and
    /// user.email, else tether).
    #[arg(long, env = "TETHER_AUTHOR")]
    pub author: Option<String>,
    /// Commit to this new branch instead, for a pull request; nothing is applied.
    #[arg(long, value_name = "BRANCH")]
    pub propose: Option<String>,
    /// Commit only; the daemon (or a later apply) applies it.
    #[arg(long)]
    pub no_apply: bool,
    /// After the apply, wait until the rollout is done.
    #[arg(long, conflicts_with = "no_apply")]
    pub wait: bool,
    /// How long --wait (and the apply's waits) may take.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// The Slice (a Deployment or StatefulSet).
    pub slice: String,
    /// The replica count: 3 sets it, +1 and -1 change it.
    #[arg(allow_hyphen_values = true, value_parser = parse_replicas)]
    pub count: ReplicaChange,
    #[command(flatten)]
    pub commit: CommitArgs,
}

fn parse_replicas(text: &str) -> Result<ReplicaChange, String> {
    text.parse()
}

#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// The Slice (a Deployment, StatefulSet or DaemonSet).
    pub slice: String,
    #[command(flatten)]
    pub commit: CommitArgs,
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// The Slice.
    pub slice: String,
    /// Put it back as it was at this commit (a commit id, tag or branch); default: as
    /// it was before its latest change.
    #[arg(long, value_name = "COMMIT")]
    pub to: Option<String>,
    #[command(flatten)]
    pub commit: CommitArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Wait until the slice's controller runs its latest pod template everywhere,
    /// printing its progress (as `kubectl rollout status`). Exits 0 when it is done,
    /// 2 when it failed, is paused, or the timeout ran out.
    Status(RolloutStatusArgs),
}

#[derive(Debug, clap::Args)]
pub struct RolloutStatusArgs {
    pub slice: String,
    #[command(flatten)]
    pub models: ModelsArgs,
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct PodArgs {
    /// The pod's name.
    pub pod: String,
    #[arg(short, long, env = "TETHER_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Who acts, for the pod's annotation and its Event (default: $USER).
    #[arg(long, env = "TETHER_AUTHOR")]
    pub author: Option<String>,
    /// How long to wait for the pod to be made again (or its containers restarted).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct RecreateArgs {
    #[command(flatten)]
    pub pod: PodArgs,
    /// Where the models are: a bare pod tether made is applied again from its model.
    #[command(flatten)]
    pub models: ModelsArgs,
    #[command(flatten)]
    pub inventory: InventoryFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct RestartContainersArgs {
    #[command(flatten)]
    pub pod: PodArgs,
    /// Only this container (default: every container of the pod).
    #[arg(short, long)]
    pub container: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

pub async fn scale(global: &GlobalArgs, args: &ScaleArgs) -> miette::Result<ExitCode> {
    let operation = Operation::Scale {
        slice: args.slice.clone(),
        change: args.count,
    };
    let model = format!("Slice/{}", args.slice);
    commit_and_apply(global, &args.commit, &model, Request::Now(operation)).await
}

pub async fn restart(global: &GlobalArgs, args: &RestartArgs) -> miette::Result<ExitCode> {
    let operation = Operation::Restart {
        slice: args.slice.clone(),
        at: k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map_err(|e| miette!("{e}"))?
            .to_string(),
    };
    let model = format!("Slice/{}", args.slice);
    commit_and_apply(global, &args.commit, &model, Request::Now(operation)).await
}

pub async fn rollback(global: &GlobalArgs, args: &RollbackArgs) -> miette::Result<ExitCode> {
    let request = Request::Rollback {
        slice: args.slice.clone(),
        to: args.to.clone(),
    };
    let model = format!("Slice/{}", args.slice);
    commit_and_apply(global, &args.commit, &model, request).await
}

/// Commits `request`, then applies `model` (`Kind/name`) from the new revision;
/// with --wait, follows a slice's rollout.
pub(super) async fn commit_and_apply(
    global: &GlobalArgs,
    args: &CommitArgs,
    model: &str,
    request: Request,
) -> miette::Result<ExitCode> {
    let author = match &args.author {
        Some(text) => Some(text.parse::<Author>().map_err(terminal::error)?),
        None => None,
    };
    let to = CommitTo {
        destination: args.models.destination()?,
        branch: args.models.branch.clone(),
        propose: args.propose.clone(),
        author,
        keys: std::sync::Arc::new(args.keys.keyring()?),
    };
    let committed = commit(to, request).await.map_err(terminal::error)?;
    print_commit(&committed);
    let Some(repo) = committed.apply_from.clone() else {
        println!(
            "nothing applied: merge branch {} to roll it out",
            committed.branch
        );
        return Ok(ExitCode::SUCCESS);
    };
    if args.no_apply {
        println!("nothing applied (--no-apply): the daemon, or the next apply, rolls it out");
        return Ok(ExitCode::SUCCESS);
    }
    let code = apply_model(
        global,
        repo,
        &args.inventory,
        &args.cluster,
        &args.keys,
        model,
        args.timeout,
    )
    .await?;
    match model.strip_prefix("Slice/") {
        Some(slice) if code == ExitCode::SUCCESS && args.wait => {
            follow_rollout(&args.models, &args.cluster, &args.keys, slice, args.timeout).await
        }
        _ => Ok(code),
    }
}

fn print_commit(committed: &Committed) {
    match &committed.commit {
        Some(commit) => {
            let short = &commit[..commit.len().min(10)];
            let pushed = if committed.pushed { ", pushed" } else { "" };
            let on = if committed.proposed {
                format!("new branch {}", committed.branch)
            } else {
                format!("branch {}", committed.branch)
            };
            println!("{} ({short} on {on}{pushed})", committed.summary);
        }
        None => println!(
            "{}: the models are already so, nothing committed",
            committed.summary
        ),
    }
}

/// Applies one model (and what it depends on) from `repo`.
async fn apply_model(
    global: &GlobalArgs,
    repo: Repo,
    inventory: &InventoryFlags,
    cluster: &ClusterFlags,
    keys: &KeyFlags,
    model: &str,
    timeout: Duration,
) -> miette::Result<ExitCode> {
    let run = ApplyRun {
        repo,
        inventory,
        cluster,
        keys,
        selection: Some(Selection {
            models: vec![model.to_string()],
            skip_dependencies: false,
        }),
        plan: PlanOptions::default(),
        options: ApplyOptions {
            wave_timeout: Some(timeout),
            writes: Writes::Fastest,
            ..ApplyOptions::default()
        },
        dry_run: false,
        wait: false,
        timeout,
        // A day-2 operation's apply is attested by the Source that applies its commit.
        attest: None,
    };
    run_apply(global, run).await
}

pub async fn rollout(command: &RolloutCommand) -> miette::Result<ExitCode> {
    let RolloutCommand::Status(args) = command;
    follow_rollout(
        &args.models,
        &args.cluster,
        &args.keys,
        &args.slice,
        args.timeout,
    )
    .await
}

async fn follow_rollout(
    models: &ModelsArgs,
    cluster: &ClusterFlags,
    keys: &KeyFlags,
    slice: &str,
    timeout: Duration,
) -> miette::Result<ExitCode> {
    let mut loaded = models.source()?.load().await.map_err(terminal::error)?;
    loaded.files = tether_sops::open_files(loaded.files, &keys.keyring()?);
    let (kind, namespace, name) =
        tether_core::operation::controller_of(&loaded.files, slice).map_err(terminal::error)?;
    let client = connect(&cluster.target()).await.map_err(terminal::error)?;
    let what = format!("{} {namespace}/{name}", kind.name());
    let progress = |state: &str| eprintln!("waiting for the rollout of {what}: {state}");
    match rollout::status(&client, kind, &namespace, &name, timeout, &progress).await {
        Ok(()) => {
            println!("{what} is rolled out");
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("error: {}", tether_core::error_chain(&error));
            Ok(ExitCode::from(EXIT_ERROR))
        }
    }
}

fn actor(author: Option<&String>) -> String {
    author
        .cloned()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "tether".into())
}

pub async fn recreate_pod(global: &GlobalArgs, args: &RecreateArgs) -> miette::Result<ExitCode> {
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let pod = &args.pod;
    let by = actor(pod.author.as_ref());
    let recreated = recreate(&client, &pod.namespace, &pod.pod, &by, pod.timeout)
        .await
        .map_err(terminal::error)?;
    match (&recreated.maker, &recreated.replacement) {
        (Maker::Controller { kind, name }, Some((new, uid))) => {
            println!(
                "pod {}/{} deleted; its {kind} {name} made {new} (uid {uid})",
                pod.namespace, pod.pod
            );
            Ok(ExitCode::SUCCESS)
        }
        (Maker::Tether { model }, _) => {
            println!(
                "pod {}/{} deleted; applying {model} again",
                pod.namespace, pod.pod
            );
            apply_model(
                global,
                args.models.source()?,
                &args.inventory,
                &args.cluster,
                &args.keys,
                model,
                pod.timeout,
            )
            .await
        }
        (Maker::Controller { .. }, None) => Ok(ExitCode::SUCCESS),
    }
}

pub async fn restart_pod_containers(args: &RestartContainersArgs) -> miette::Result<ExitCode> {
    let client = connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let pod = &args.pod;
    let by = actor(pod.author.as_ref());
    let restarted = restart_containers(
        &client,
        &pod.namespace,
        &pod.pod,
        args.container.as_deref(),
        &by,
        pod.timeout,
    )
    .await
    .map_err(terminal::error)?;
    println!(
        "restarted {} in pod {}/{} (same pod: uid, IP and volumes kept)",
        restarted.join(", "),
        pod.namespace,
        pod.pod
    );
    Ok(ExitCode::SUCCESS)
}
