//! `diff` and `apply`: flags to a `Reconciler`, its plan or report printed.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use miette::{IntoDiagnostic, WrapErr};
use std::collections::BTreeMap;

use tether_engine::reconcile::{
    ApplyOptions, ApplyProgress, ApplyReport, BlockedWave, ClusterName, ClusterPlan, ClusterPlans,
    ObjectFailure, PlanOptions, Planned, Reads, ReconcileError, Reconciler, Writes,
};

use super::args::{ApplyArgs, DiffArgs, EXIT_ERROR, EXIT_INVALID, GlobalArgs, ReportFormat};
use super::terminal;
use crate::cli::flags::{ClusterFlags, InventoryFlags, KeyFlags};
use tether_core::inventory::budget::DeletionBudget;
use tether_core::inventory::contents::Guard;
use tether_core::k8s::ObjectKey;
use tether_engine::reconcile::Selection;
use tether_engine::repo::Repo;

/// A reconciler of `repo` for the cluster, keys and inventory these flags name.
pub(super) fn reconciler(
    repo: Repo,
    cluster: &ClusterFlags,
    keys: &KeyFlags,
    inventory: &InventoryFlags,
) -> miette::Result<Reconciler> {
    Ok(
        Reconciler::new(repo, cluster.target(), inventory.inventory())
            .with_contexts(cluster.contexts())
            .with_keys(std::sync::Arc::new(keys.keyring()?))
            .with_generate(keys.generate()?),
    )
}

/// The plan of each cluster, or the exit code after the models' problems were
/// printed. With one cluster, its error is the command's.
async fn plan(
    global: &GlobalArgs,
    mut reconciler: Reconciler,
    selection: Option<Selection>,
    options: PlanOptions,
) -> miette::Result<Result<(Reconciler, ClusterPlans), ExitCode>> {
    if let Some(selection) = selection {
        reconciler = reconciler.with_selection(selection);
    }
    let graphical = terminal::use_graphics(global.color, std::io::stderr().is_terminal());
    match reconciler.plan_clusters(options, &BTreeMap::new()).await {
        Ok(mut plans) => {
            terminal::say_verified(&plans.models.loaded);
            let files = &plans.models.loaded.files;
            eprint!(
                "{}",
                terminal::diagnostics(&plans.models.diagnostics, files, graphical)
            );
            if plans.clusters.len() == 1 {
                match plans.clusters.pop().map(|c| c.planned) {
                    Some(Err(error @ ReconcileError::Dormant(_))) => {
                        println!("{error}");
                        return Ok(Err(ExitCode::SUCCESS));
                    }
                    Some(Err(error)) => return Err(terminal::error(error)),
                    Some(Ok(planned)) => {
                        if planned.objects.is_empty() {
                            eprintln!(
                                "warning: the source renders no object (is the path right?); nothing is pruned without --allow-empty"
                            );
                        }
                        plans.clusters.push(ClusterPlan {
                            cluster: planned.cluster.clone(),
                            planned: Ok(planned),
                        });
                    }
                    None => {}
                }
            }
            Ok(Ok((reconciler, plans)))
        }
        Err(ReconcileError::Invalid(models)) => {
            let files = &models.loaded.files;
            let root = std::path::Path::new(&models.loaded.label);
            eprint!(
                "{}",
                terminal::diagnostics(&models.diagnostics, files, graphical)
            );
            eprint!(
                "{}",
                terminal::summary(&models.diagnostics, models.documents, files, root)
            );
            eprintln!("nothing was compared or applied: fix the models first");
            Ok(Err(ExitCode::from(EXIT_ERROR)))
        }
        Err(error @ ReconcileError::Dormant(_)) => {
            println!("{error}");
            Ok(Err(ExitCode::SUCCESS))
        }
        Err(error) => Err(terminal::error(error)),
    }
}

/// A cluster that could not be planned or applied: said on standard error with its
/// remedy, and the line that reports it (`what`: not planned, not applied).
fn cluster_failed(
    reconciler: &Reconciler,
    plans: &ClusterPlans,
    cluster: &ClusterName,
    what: &str,
    error: &ReconcileError,
) -> String {
    let reached = reconciler.describe(&plans.models, cluster);
    let line = format!(
        "cluster {} ({reached}): {what}: {}",
        cluster.display(),
        tether_core::error_chain(error)
    );
    eprintln!("error: {line}");
    if let Some(remedy) = error.remedy() {
        eprintln!("  help: {}", terminal::remedy_text(remedy));
    }
    line + "\n"
}

pub async fn diff(global: &GlobalArgs, args: &DiffArgs) -> miette::Result<ExitCode> {
    let reconciler = reconciler(
        args.source.repo()?,
        &args.cluster,
        &args.keys,
        &args.inventory,
    )?;
    let options = PlanOptions {
        dry_run_new: true,
        // The diff says when apply --prune would hold (with the default budget).
        budget: Some(DeletionBudget::default()),
        ..PlanOptions::default()
    };
    let (reconciler, plans) =
        match plan(global, reconciler, args.selection.selection(), options).await? {
            Ok(plans) => plans,
            Err(code) => return Ok(code),
        };
    let colour = terminal::use_graphics(global.color, std::io::stdout().is_terminal());
    let report = diff_report(&reconciler, &plans, args.output, colour)?;
    if args.post.post {
        let markdown = match args.output {
            ReportFormat::Markdown => report.text.clone(),
            _ => diff_report(&reconciler, &plans, ReportFormat::Markdown, false)?.text,
        };
        let commit = plans
            .models
            .loaded
            .revision
            .as_ref()
            .map(|r| r.commit.clone());
        super::post::post(&args.post, &markdown, report.errors, commit).await?;
    }
    let DiffReport {
        text,
        errors,
        differences,
    } = report;
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .into_diagnostic()?;
    Ok(match (errors, differences) {
        (true, _) => ExitCode::from(EXIT_ERROR),
        (false, true) => ExitCode::from(EXIT_INVALID),
        (false, false) => ExitCode::SUCCESS,
    })
}

/// A diff's report in one format, and whether a plan had errors or differences.
struct DiffReport {
    text: String,
    errors: bool,
    differences: bool,
}

fn diff_report(
    reconciler: &Reconciler,
    plans: &ClusterPlans,
    output: ReportFormat,
    colour: bool,
) -> miette::Result<DiffReport> {
    let several = plans.clusters.len() > 1;
    let (mut errors, mut differences) = (false, false);
    let mut text = String::new();
    let mut values = Vec::new();
    for cluster in &plans.clusters {
        let plan = match &cluster.planned {
            Ok(planned) => &planned.plan,
            Err(error) => {
                errors |= !matches!(error, ReconcileError::Dormant(_));
                let line =
                    cluster_failed(reconciler, plans, &cluster.cluster, "not planned", error);
                match output {
                    ReportFormat::Json => values.push(serde_json::json!({
                        "cluster": cluster.cluster.display(),
                        "error": tether_core::error_chain(error),
                    })),
                    ReportFormat::Markdown => text.push_str(&format!("### {line}\n")),
                    ReportFormat::Text => text.push_str(&line),
                }
                continue;
            }
        };
        errors |= plan.has_errors();
        differences |= plan.has_differences();
        if several && !text.is_empty() {
            text.push('\n');
        }
        match output {
            ReportFormat::Text => text.push_str(&tether_core::report::text(
                plan,
                colour,
                terminal::remedy_text,
            )),
            ReportFormat::Markdown => {
                text.push_str(&tether_core::report::markdown(plan, terminal::remedy_text));
            }
            ReportFormat::Json if several => values.push(tether_core::report::json_value(plan)),
            ReportFormat::Json => text.push_str(&tether_core::report::json(plan)),
        }
    }
    if several && matches!(output, ReportFormat::Json) {
        let report = serde_json::json!({"schema": "tether.dev/diff/v1", "clusters": values});
        text = serde_json::to_string_pretty(&report).into_diagnostic()? + "\n";
    }
    Ok(DiffReport {
        text,
        errors,
        differences,
    })
}

pub async fn apply(global: &GlobalArgs, args: &ApplyArgs) -> miette::Result<ExitCode> {
    let run = ApplyRun {
        repo: args.source.repo()?,
        inventory: &args.inventory,
        cluster: &args.cluster,
        keys: &args.keys,
        selection: args.selection.selection(),
        plan: PlanOptions {
            prune: args.prune,
            allow_empty: args.allow_empty,
            // `--dry-run` is a review: it checks new objects with the server.
            dry_run_new: args.dry_run,
            partial: false,
            // What the user just changed is seen.
            reads: Reads::Newest,
            budget: args.budget.deletion_budget.0,
        },
        options: ApplyOptions {
            prune: args.prune,
            force_conflicts: args.force_conflicts,
            take_ownership: args.dangerous_override_ownership,
            delete_foreign_objects: args.dangerous_delete_with_foreign_objects,
            delete_adopted: args.delete_adopted,
            approved_deletions: args.approve_deletions.clone(),
            // A one-shot apply shows drift as a conflict for its user to decide.
            correct_drift: false,
            wave_timeout: Some(args.timeout),
            // Runs to its end: Ctrl-C ends the process (the inventory was recorded first).
            stop: Default::default(),
            // A one-shot apply holds no Lease: nothing fences it.
            fence: Default::default(),
            // Its user waits for it alone.
            writes: Writes::Fastest,
        },
        dry_run: args.dry_run,
        wait: args.wait,
        timeout: args.timeout,
        attest: super::attestation::attest_of(&args.attest)?,
    };
    run_apply(global, run).await
}

/// One apply from the command line: `apply`, and the apply after a day-2 operation.
pub(super) struct ApplyRun<'a> {
    pub repo: Repo,
    pub inventory: &'a InventoryFlags,
    pub cluster: &'a ClusterFlags,
    pub keys: &'a KeyFlags,
    pub selection: Option<Selection>,
    pub plan: PlanOptions,
    pub options: ApplyOptions,
    pub dry_run: bool,
    pub wait: bool,
    pub timeout: std::time::Duration,
    /// Attest what the apply did (`--attestation-key`).
    pub attest: Option<super::attestation::Attest>,
}

pub(super) async fn run_apply(global: &GlobalArgs, args: ApplyRun<'_>) -> miette::Result<ExitCode> {
    let reconciler = reconciler(args.repo.clone(), args.cluster, args.keys, args.inventory)?;
    let selection = args.selection.clone();
    let (reconciler, plans) = match plan(global, reconciler, selection, args.plan).await? {
        Ok(plans) => plans,
        Err(code) => return Ok(code),
    };
    if args.dry_run {
        let colour = terminal::use_graphics(global.color, std::io::stdout().is_terminal());
        let mut ok = true;
        for cluster in plans.clusters.iter() {
            match &cluster.planned {
                Ok(planned) => print!(
                    "{}",
                    tether_core::report::text(&planned.plan, colour, terminal::remedy_text)
                ),
                Err(error) => {
                    ok = false;
                    print!(
                        "{}",
                        cluster_failed(&reconciler, &plans, &cluster.cluster, "not planned", error)
                    );
                }
            }
        }
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_ERROR)
        });
    }
    match &plans.clusters[..] {
        [only] if only.planned.is_ok() => apply_one(&reconciler, &plans, &args).await,
        _ => apply_each(&reconciler, plans, &args).await,
    }
}

/// The apply of a source with one cluster, with progress on a terminal.
async fn apply_one(
    reconciler: &Reconciler,
    plans: &ClusterPlans,
    args: &ApplyRun<'_>,
) -> miette::Result<ExitCode> {
    let Some(Ok(planned)) = plans.clusters.first().map(|c| &c.planned) else {
        return Ok(ExitCode::from(EXIT_ERROR));
    };
    let terminal = std::io::stderr().is_terminal();
    let bar = Progress::new(terminal);
    let waiting = Waiting::new(terminal);
    let progress = |event: ApplyProgress<'_>| match event {
        ApplyProgress::Applied { done, total } => bar.advance(done, total),
        ApplyProgress::Waiting {
            wave,
            waves,
            not_ready,
        } => waiting.show(
            &format!("wave {} of {waves} waits for", wave + 1),
            not_ready,
        ),
    };
    let applied = match reconciler.apply(planned, &args.options, &progress).await {
        Ok(applied) => applied,
        Err(error) if error.is_permanent() => return Err(terminal::error(error)),
        Err(error) => {
            return Err(terminal::error(error))
                .wrap_err("apply stopped; run it again to complete it");
        }
    };
    waiting.finish();
    print!("{}", report_text(&applied));
    if let Some(attest) = &args.attest {
        super::attestation::attest_apply(reconciler, planned, &applied, attest, "").await?;
    }
    let mut ok = applied.succeeded();
    if args.wait && applied.blocked.is_none() {
        ok &= wait_ready(reconciler, planned, args.timeout, "").await?;
    }
    Ok(match ok {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(EXIT_ERROR),
    })
}

/// The applies of a source with several clusters, all at once; each cluster's
/// report (or error) under its name. One cluster's failure leaves the others
/// applied, and the exit code says something failed.
async fn apply_each(
    reconciler: &Reconciler,
    plans: ClusterPlans,
    args: &ApplyRun<'_>,
) -> miette::Result<ExitCode> {
    let waiting = Waiting::new(false);
    let progress = |cluster: &ClusterName, event: ApplyProgress<'_>| {
        if let ApplyProgress::Waiting {
            wave,
            waves,
            not_ready,
        } = event
        {
            let what = format!(
                "cluster {}: wave {} of {waves} waits for",
                cluster.display(),
                wave + 1
            );
            waiting.show(&what, not_ready);
        }
    };
    let results = reconciler
        .apply_clusters(&plans.clusters, &args.options, &progress)
        .await;
    let mut ok = true;
    for (cluster, result) in plans.clusters.iter().zip(results) {
        let name = cluster.cluster.display();
        let reached = reconciler.describe(&plans.models, &cluster.cluster);
        match (result, &cluster.planned) {
            (Some(Ok(applied)), Ok(planned)) => {
                print!("cluster {name} ({reached}): {}", report_text(&applied));
                if let Some(attest) = &args.attest {
                    let prefix = format!("cluster {name}: ");
                    super::attestation::attest_apply(
                        reconciler, planned, &applied, attest, &prefix,
                    )
                    .await?;
                }
                ok &= applied.succeeded();
                if args.wait && applied.blocked.is_none() {
                    let prefix = format!("cluster {name}: ");
                    ok &= wait_ready(reconciler, planned, args.timeout, &prefix).await?;
                }
            }
            (Some(Err(error)), _) => {
                ok = false;
                print!(
                    "{}",
                    cluster_failed(
                        reconciler,
                        &plans,
                        &cluster.cluster,
                        "apply stopped",
                        &error
                    )
                );
            }
            (_, Err(error)) if matches!(error, ReconcileError::Dormant(_)) => {
                println!("cluster {name}: {error}");
            }
            (_, Err(error)) => {
                ok = false;
                print!(
                    "{}",
                    cluster_failed(reconciler, &plans, &cluster.cluster, "not applied", error)
                );
            }
            (None, Ok(_)) => {}
        }
    }
    Ok(match ok {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(EXIT_ERROR),
    })
}

/// `--wait`: waits for the plan's workloads; whether all were ready.
async fn wait_ready(
    reconciler: &Reconciler,
    planned: &Planned,
    timeout: std::time::Duration,
    prefix: &str,
) -> miette::Result<bool> {
    let waiting = Waiting::new(std::io::stderr().is_terminal());
    let progress = |not_ready: &[(ObjectKey, String)], workloads: usize| {
        let what = format!(
            "{prefix}waiting for {} of {workloads} workloads:",
            not_ready.len()
        );
        waiting.show(&what, not_ready);
    };
    let not_ready = reconciler
        .wait_ready(planned, timeout, &progress)
        .await
        .map_err(terminal::error)?;
    waiting.finish();
    if not_ready.is_empty() {
        println!("{prefix}all workloads are ready");
        return Ok(true);
    }
    println!("{prefix}not ready after {}s:", timeout.as_secs());
    for (object, state) in not_ready {
        println!("  {object}: {state}");
    }
    Ok(false)
}

/// What an apply did, as `apply` and each pass of `run` print it.
pub(super) fn report_text(applied: &ApplyReport) -> String {
    let replaced = match applied.replaced() {
        0 => String::new(),
        n => format!("{n} replaced, "),
    };
    let held = applied
        .failures()
        .filter(|(_, failure)| matches!(failure, ObjectFailure::PruneHeld))
        .count();
    let held_count = match held {
        0 => String::new(),
        n => format!("{n} held, "),
    };
    let mut out = format!(
        "{} created, {} configured, {replaced}{} unchanged, {} pruned, {held_count}{} failed\n",
        applied.created(),
        applied.configured(),
        applied.unchanged(),
        applied.pruned(),
        applied.failures().count() - held
    );
    if let Some(blocked) = &applied.blocked {
        out.push_str(&blocked_text(blocked));
    }
    for hook in &applied.hooks {
        let deleted = if hook.deleted { ", deleted" } else { "" };
        match &hook.failure {
            None => out.push_str(&format!(
                "  hook {} {}: succeeded{deleted}\n",
                hook.phase, hook.key
            )),
            Some(why) => out.push_str(&format!(
                "  hook {} {}: failed{deleted}: {why}\n",
                hook.phase, hook.key
            )),
        }
    }
    if let Some(hold) = &applied.prune_held {
        out.push_str(&tether_core::report::held_text(hold, terminal::remedy_text));
        out.push('\n');
    }
    // A held deletion is said once, above.
    let failures = applied
        .failures()
        .filter(|(_, failure)| !matches!(failure, ObjectFailure::PruneHeld));
    for (object, failure) in failures {
        out.push_str(&format!("  failed: {object}: {failure}"));
        match failure {
            ObjectFailure::Conflict(_) => {
                out.push_str("; use --force-conflicts to take these fields");
            }
            ObjectFailure::OwnedByInventory { .. } => out.push_str(
                "; only --dangerous-override-ownership takes it, and that inventory loses it",
            ),
            ObjectFailure::Kept(Guard::Contents { .. }) => out.push_str(
                "; --dangerous-delete-with-foreign-objects deletes it with them, as does the annotation tether.dev/prune: with-contents on it",
            ),
            ObjectFailure::Kept(Guard::Volume) => out.push_str(
                "; the annotation tether.dev/prune: with-contents on it lets prune delete it",
            ),
            _ => {}
        }
        out.push('\n');
    }
    if applied.prunable() > 0 {
        out.push_str(&format!(
            "{} objects whose model is gone are left in place: apply with --prune to delete them\n",
            applied.prunable()
        ));
    }
    out
}

/// Why a wave did not start, for the user to act on.
fn blocked_text(blocked: &BlockedWave) -> String {
    let failed = blocked.blockers.iter().any(|b| b.failed);
    let mut out = format!(
        "wave {} of {} did not start: {}\n",
        blocked.wave + 1,
        blocked.waves,
        match failed {
            true => "what it depends on failed",
            false => "what it depends on was not ready in time (--timeout)",
        }
    );
    for blocker in &blocked.blockers {
        let external = match blocker.external {
            true => ", in the cluster, not applied by this repo",
            false => "",
        };
        out.push_str(&format!(
            "  {}: {} (needed by {}{external})\n",
            blocker.key,
            blocker.state,
            blocker.needed_by.join(", ")
        ));
    }
    out.push_str(&format!(
        "{} objects of this wave and the later ones were not applied, and nothing was pruned; apply again once they are ready\n",
        blocked.not_applied
    ));
    out
}

/// What `--wait` still waits for, on standard error: a spinner with the objects on a
/// terminal; when piped, a line whenever the set of objects changes, and every ten
/// seconds while it does not.
struct Waiting {
    spinner: Option<indicatif::ProgressBar>,
    last: std::sync::Mutex<Option<(Vec<String>, std::time::Instant)>>,
}

impl Waiting {
    fn new(terminal: bool) -> Self {
        let spinner = terminal.then(|| {
            let style = indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
            let spinner = indicatif::ProgressBar::new_spinner().with_style(style);
            spinner.enable_steady_tick(std::time::Duration::from_millis(120));
            spinner
        });
        Waiting {
            spinner,
            last: std::sync::Mutex::new(None),
        }
    }

    fn show(&self, what: &str, not_ready: &[(ObjectKey, String)]) {
        if not_ready.is_empty() {
            return;
        }
        let objects: Vec<String> = not_ready.iter().map(|(key, _)| key.to_string()).collect();
        let states: Vec<String> = not_ready
            .iter()
            .map(|(key, state)| format!("{key} ({state})"))
            .collect();
        let line = format!("{what} {}", states.join(", "));
        if let Some(spinner) = &self.spinner {
            spinner.set_message(line);
            return;
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let due = last.as_ref().is_none_or(|(shown, at)| {
            *shown != objects || at.elapsed() >= std::time::Duration::from_secs(10)
        });
        if due {
            eprintln!("{line}");
            *last = Some((objects, std::time::Instant::now()));
        }
    }

    fn finish(&self) {
        if let Some(spinner) = &self.spinner {
            spinner.finish_and_clear();
        }
    }
}

/// How an apply of many objects shows its progress on standard error: a bar on a
/// terminal, a line at each tenth when piped (a CI log). Small applies show nothing.
struct Progress {
    bar: Option<std::sync::OnceLock<indicatif::ProgressBar>>,
}

/// Below this many objects an apply is quick enough to need no progress.
const PROGRESS_FROM: usize = 20;

impl Progress {
    fn new(terminal: bool) -> Self {
        Progress {
            bar: terminal.then(std::sync::OnceLock::new),
        }
    }

    fn advance(&self, done: usize, total: usize) {
        if total <= PROGRESS_FROM {
            return;
        }
        match &self.bar {
            Some(bar) => {
                let bar = bar.get_or_init(|| {
                    let style = indicatif::ProgressStyle::with_template(
                        "applying {bar:40} {pos}/{len} objects, {elapsed} ({eta} left)",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
                    indicatif::ProgressBar::new(total as u64).with_style(style)
                });
                bar.set_position(done as u64);
                if done == total {
                    bar.finish_and_clear();
                }
            }
            None if done > 0 && done * 10 / total != (done - 1) * 10 / total => {
                eprintln!("applied {done}/{total} objects");
            }
            None => {}
        }
    }
}
