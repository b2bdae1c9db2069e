//! `discover`: watch caches of pods → models under `discovered/` → a commit (and a
//! push), once or on every change.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use miette::{IntoDiagnostic, WrapErr, miette};
use tether::cluster::connect;
use tether::discover::watch::ClusterWatch;
use tether::discover::{PodFacts, Scope, plan};
use tether::ownership::Inventory;
use tether::settings::{self, DiscoverSettings, SETTINGS_FILE, Settings};
use tether::writeback::{Author, Synced, Workspace};

use super::reconcile::target;
use super::{EventArgs, GitArgs, GlobalArgs, parse_duration};

pub struct DiscoverCommand {
    pub path: PathBuf,
    pub repo: Option<String>,
    pub branch: Option<String>,
    pub push: bool,
    pub dry_run: bool,
    pub watch: bool,
    pub debounce: Option<Duration>,
    pub namespaces: Vec<String>,
    pub author: Option<String>,
}

/// A flag (or its variable), else the settings file, else the built-in default.
struct Options {
    author: Author,
    scope: Scope,
    debounce: Duration,
}

impl Options {
    fn new(command: &DiscoverCommand, settings: &DiscoverSettings) -> miette::Result<Self> {
        let author = match command.author.as_ref().or(settings.author.as_ref()) {
            Some(text) => text.parse().into_diagnostic()?,
            None => Author::default(),
        };
        let namespaces: &[String] = match (&command.namespaces, &settings.namespaces) {
            (flag, _) if !flag.is_empty() => flag,
            (_, Some(set)) => set,
            _ => &[],
        };
        let scope = if namespaces.is_empty() {
            Scope::All
        } else {
            Scope::Namespaces(namespaces.iter().cloned().collect::<BTreeSet<_>>())
        };
        let debounce = match (command.debounce, &settings.debounce) {
            (Some(d), _) => d,
            (None, Some(text)) => parse_duration(text)
                .map_err(|e| miette!("{SETTINGS_FILE}: discover.debounce: {e}"))?,
            (None, None) => Duration::from_secs(2),
        };
        Ok(Options {
            author,
            scope,
            debounce,
        })
    }
}

pub async fn run(
    global: &GlobalArgs,
    command: &DiscoverCommand,
    git: &GitArgs,
    inventory: &Inventory,
    events: &EventArgs,
) -> miette::Result<ExitCode> {
    let (opened, client) = tokio::join!(open_workspace(command, git), async {
        connect(&target(global)).await
    });
    let (mut workspace, settings) = opened?;
    // Sinks given as flags need --watch; those of the settings file serve --watch only.
    if events.any_sink() && !command.watch {
        return Err(miette!(
            help = "add --watch, or run `tether events --watch`",
            "event sinks need --watch: events are changes over time"
        ));
    }
    let events = events.with_settings(&settings.events);
    let Options {
        author,
        scope,
        debounce,
    } = Options::new(command, &settings.discover)?;
    let client = client.into_diagnostic()?;
    // Events come from discovery's own pod watch.
    let (_events, pod_events) = match command.watch && events.any_sink() {
        true => {
            let (pipeline, feed) = events.start_fed(&client).await?;
            (Some(pipeline), Some(feed))
        }
        false => (None, None),
    };
    let watch = ClusterWatch::start(&client, &scope, pod_events);
    watch
        .ready(global.request_timeout * 2)
        .await
        .into_diagnostic()
        .wrap_err("cannot list the pods")?;
    let applyset = inventory.applyset_id();
    if command.dry_run {
        let pods = watch.snapshot();
        let scope = scope.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            workspace
                .models()
                .map(|files| plan(&pods, &files, &scope, &applyset))
        })
        .await
        .into_diagnostic()?
        .into_diagnostic()?;
        print_preview(&outcome);
        return Ok(ExitCode::SUCCESS);
    }
    // A failed pass (a remote that is down) is tried again after a backoff even when
    // the cluster stays quiet.
    let mut retry = Duration::from_secs(5);
    loop {
        let started = Instant::now();
        let pods = watch.snapshot();
        let count = pods.len();
        let (returned, result) =
            sync(workspace, pods, &scope, &applyset, &author, command.push).await?;
        workspace = returned;
        let failed = result.is_err();
        match result {
            Ok(synced) => {
                retry = Duration::from_secs(5);
                report(&synced, count, workspace.branch(), started.elapsed());
            }
            Err(error) if command.watch => {
                let error = tether::error_chain(&error);
                tracing::error!(%error, ?retry, "discovery pass failed; retrying");
            }
            Err(error) => return Err(error).into_diagnostic(),
        }
        if !command.watch {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = watch.changed() => {}
            _ = tokio::time::sleep(retry), if failed => {
                retry = (retry * 2).min(Duration::from_secs(300));
            }
            _ = super::shutdown() => return Ok(ExitCode::SUCCESS),
        }
        // Gather what else changes in the window into the same commit.
        tokio::select! {
            _ = tokio::time::sleep(debounce) => {}
            _ = super::shutdown() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// The workspace discovery commits to, and the settings file of its models root.
async fn open_workspace(
    command: &DiscoverCommand,
    git: &GitArgs,
) -> miette::Result<(Workspace, Settings)> {
    let path = command.path.clone();
    let branch = command.branch.clone();
    let repo = command.repo.clone();
    let cache = git.cache_dir();
    let credentials = git.credentials();
    tokio::task::spawn_blocking(move || -> miette::Result<(Workspace, Settings)> {
        let open = "cannot open the repository to write discovered models to";
        match repo {
            Some(url) => {
                let mut workspace = Workspace::open_clone(
                    &url,
                    branch.as_deref().unwrap_or("main"),
                    &path,
                    &cache,
                    credentials,
                )
                .into_diagnostic()
                .wrap_err(open)?;
                let settings = match workspace.committed_text(SETTINGS_FILE) {
                    Some(text) => settings::parse(SETTINGS_FILE, &text).into_diagnostic()?,
                    None => Settings::default(),
                };
                if let (None, Some(b)) = (&branch, &settings.discover.branch) {
                    workspace.set_branch(b);
                }
                Ok((workspace, settings))
            }
            None => {
                let file = path.join(SETTINGS_FILE);
                let settings = match std::fs::read_to_string(&file) {
                    Ok(text) => {
                        settings::parse(&file.display().to_string(), &text).into_diagnostic()?
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Settings::default(),
                    Err(e) => {
                        return Err(e)
                            .into_diagnostic()
                            .wrap_err(format!("cannot read {}", file.display()));
                    }
                };
                let branch = branch.or_else(|| settings.discover.branch.clone());
                let workspace = Workspace::open_local(&path, branch.as_deref())
                    .into_diagnostic()
                    .wrap_err(open)?;
                workspace.update_working_tree().into_diagnostic()?;
                Ok((workspace, settings))
            }
        }
    })
    .await
    .into_diagnostic()?
}

type SyncResult = Result<Synced, tether::writeback::WritebackError>;

/// One pass off the async runtime: plan on the branch's models, commit, push.
async fn sync(
    mut workspace: Workspace,
    pods: Vec<PodFacts>,
    scope: &Scope,
    applyset: &str,
    author: &Author,
    push: bool,
) -> miette::Result<(Workspace, SyncResult)> {
    let scope = scope.clone();
    let applyset = applyset.to_string();
    let author = author.clone();
    tokio::task::spawn_blocking(move || {
        let result = workspace.sync(
            |existing| plan(&pods, existing, &scope, &applyset),
            &author,
            push,
        );
        (workspace, result)
    })
    .await
    .map_err(|e| miette!("discovery stopped: {e}"))
}

fn report(synced: &Synced, pods: usize, branch: &str, took: Duration) {
    let ms = took.as_millis();
    match &synced.commit {
        Some(commit) => {
            let subject = synced.outcome.commit_message();
            let subject = subject.lines().next().unwrap_or_default();
            let pushed = if synced.pushed { ", pushed" } else { "" };
            println!(
                "{subject} ({pods} pods seen; commit {} on {branch}{pushed}, {ms} ms)",
                &commit[..commit.len().min(12)]
            );
        }
        None if synced.pushed => {
            println!("no changes; pushed earlier commits on {branch} ({pods} pods seen, {ms} ms)")
        }
        None => println!("no changes ({pods} pods seen, {ms} ms)"),
    }
}

/// What a commit would hold: its message, then each file written or removed.
fn print_preview(outcome: &tether::discover::Outcome) {
    if outcome.is_empty() {
        println!("no changes");
        return;
    }
    println!("would commit:\n{}", outcome.commit_message().trim_end());
    for path in outcome.writes.keys() {
        println!("write  {path}");
    }
    for path in &outcome.removes {
        println!("remove {path}");
    }
}
