//! `diff` and `apply`: source → models → objects → plan against the cluster → report
//! or apply.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use miette::{IntoDiagnostic, WrapErr};
use tether::cluster::{Target, connect, read_inventory};
use tether::git::{Revision, fetch_models, local_revision};
use tether::ownership::Inventory;
use tether::reconcile::{ApplyOptions, plan, wait_ready};
use tether::render::{RenderedObject, render};
use tether::source::SourceFiles;

use super::{EXIT_ERROR, EXIT_INVALID, GlobalArgs, ReportFormat, SourceArgs, read, report};

pub struct ApplyCommand {
    pub prune: bool,
    pub dry_run: bool,
    pub force_conflicts: bool,
    pub wait: Option<Duration>,
}

/// The models of the source, with where they came from.
struct Loaded {
    files: SourceFiles,
    label: String,
    revision: Option<Revision>,
}

async fn load(source: &SourceArgs) -> miette::Result<Loaded> {
    match &source.repo {
        Some(url) => {
            let url = url.clone();
            let reference = source.reference.clone();
            let subdir = source.path.clone();
            let cache = source.git.cache_dir();
            let credentials = source.git.credentials();
            let label = match &reference {
                Some(r) => format!("{url} ({r})"),
                None => url.clone(),
            };
            let (files, revision) = tokio::task::spawn_blocking(move || {
                fetch_models(
                    &url,
                    reference.as_deref(),
                    Some(&subdir),
                    &cache,
                    &credentials,
                )
            })
            .await
            .into_diagnostic()?
            .into_diagnostic()?;
            Ok(Loaded {
                files,
                label,
                revision: Some(revision),
            })
        }
        None => {
            let path = source.path.clone();
            let (files, revision) = tokio::join!(
                read(&source.path),
                tokio::task::spawn_blocking(move || local_revision(&path))
            );
            let (files, revision) = (files?, revision.into_diagnostic()?);
            Ok(Loaded {
                files,
                label: source.path.display().to_string(),
                revision,
            })
        }
    }
}

/// The rendered objects, or the diagnostics printed and `None` for an invalid repo.
fn objects(
    loaded: &Loaded,
    inventory: &Inventory,
    global: &GlobalArgs,
) -> Option<Vec<RenderedObject>> {
    let analysis = tether::analyze(&loaded.files);
    let graphical = report::use_graphics(global.color, std::io::stderr().is_terminal());
    eprint!(
        "{}",
        report::diagnostics(&analysis.diagnostics, &loaded.files, graphical)
    );
    match &analysis.graph {
        Some(graph) => Some(render(graph, &loaded.files, inventory)),
        None => {
            eprint!(
                "{}",
                report::summary(
                    &analysis,
                    &loaded.files,
                    std::path::Path::new(&loaded.label)
                )
            );
            eprintln!("nothing was compared or applied: fix the models first");
            None
        }
    }
}

pub(super) fn target(global: &GlobalArgs) -> Target {
    Target {
        kubeconfig: global.kubeconfig.clone(),
        context: global.context.clone(),
        request_timeout: Some(global.request_timeout),
    }
}

async fn planned(
    global: &GlobalArgs,
    source: &SourceArgs,
    inventory: &Inventory,
    prune: bool,
) -> miette::Result<
    Result<
        (
            kube::Client,
            Vec<RenderedObject>,
            tether::reconcile::Reconciliation,
        ),
        ExitCode,
    >,
> {
    let start = std::time::Instant::now();
    let ms = || start.elapsed().as_millis();
    // The models and the cluster connection do not depend on each other: both at once.
    let models = async {
        let loaded = load(source).await?;
        let objects = objects(&loaded, inventory, global);
        tracing::info!(elapsed_ms = ms(), "models loaded and rendered");
        Ok::<_, miette::Report>((loaded, objects))
    };
    let cluster = async {
        let client = connect(&target(global)).await.into_diagnostic()?;
        let record = read_inventory(&client, inventory).await.into_diagnostic()?;
        tracing::info!(
            recorded = record.entries.len(),
            elapsed_ms = ms(),
            "connected, inventory read"
        );
        Ok::<_, miette::Report>((client, record))
    };
    let (models, cluster) = tokio::join!(models, cluster);
    // Invalid models are reported first: they make the cluster irrelevant.
    let (loaded, objects) = models?;
    let Some(objects) = objects else {
        return Ok(Err(ExitCode::from(EXIT_ERROR)));
    };
    let (client, record) = cluster?;
    let reconciliation = plan(
        &client,
        inventory,
        &objects,
        record,
        loaded.label,
        loaded.revision,
        prune,
    )
    .await
    .into_diagnostic()?;
    tracing::info!(elapsed_ms = ms(), "planned");
    Ok(Ok((client, objects, reconciliation)))
}

pub async fn diff(
    global: &GlobalArgs,
    source: &SourceArgs,
    output: ReportFormat,
    inventory: &Inventory,
) -> miette::Result<ExitCode> {
    let (_, _, reconciliation) = match planned(global, source, inventory, false).await? {
        Ok(planned) => planned,
        Err(code) => return Ok(code),
    };
    let plan = &reconciliation.plan;
    let text = match output {
        ReportFormat::Text => tether::report::text(
            plan,
            report::use_graphics(global.color, std::io::stdout().is_terminal()),
        ),
        ReportFormat::Markdown => tether::report::markdown(plan),
        ReportFormat::Json => tether::report::json(plan),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .into_diagnostic()?;
    Ok(if plan.has_differences() {
        ExitCode::from(EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    })
}

pub async fn apply(
    global: &GlobalArgs,
    source: &SourceArgs,
    command: &ApplyCommand,
    inventory: &Inventory,
) -> miette::Result<ExitCode> {
    let (client, objects, reconciliation) =
        match planned(global, source, inventory, command.prune).await? {
            Ok(planned) => planned,
            Err(code) => return Ok(code),
        };
    if command.dry_run {
        let colour = report::use_graphics(global.color, std::io::stdout().is_terminal());
        print!("{}", tether::report::text(&reconciliation.plan, colour));
        return Ok(ExitCode::SUCCESS);
    }
    let interactive = std::io::stderr().is_terminal();
    let progress = move |done: usize, total: usize| {
        if interactive && total > 20 {
            eprint!("\rapplying: {done}/{total}");
            if done == total {
                eprintln!();
            }
        }
    };
    let options = ApplyOptions {
        prune: command.prune,
        force_conflicts: command.force_conflicts,
    };
    let summary = tether::reconcile::apply(&client, inventory, reconciliation, &options, &progress)
        .await
        .into_diagnostic()
        .wrap_err("apply stopped; run it again to complete it")?;
    let mut out = format!(
        "{} created, {} configured, {} unchanged, {} pruned, {} failed\n",
        summary.created,
        summary.configured,
        summary.unchanged,
        summary.pruned,
        summary.failed.len()
    );
    for (object, why) in &summary.failed {
        out.push_str(&format!("  failed: {object}: {why}\n"));
    }
    if summary.prunable > 0 {
        out.push_str(&format!(
            "{} objects whose model is gone are left in place: apply with --prune to delete them\n",
            summary.prunable
        ));
    }
    print!("{out}");
    let mut ok = summary.failed.is_empty();
    if let Some(timeout) = command.wait {
        let not_ready = wait_ready(&client, &objects, timeout).await;
        if not_ready.is_empty() {
            println!("all workloads are ready");
        } else {
            ok = false;
            println!("not ready after {}s:", timeout.as_secs());
            for (object, state) in not_ready {
                println!("  {object}: {state}");
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_ERROR)
    })
}
