//! `run`: flags to a `SourceLoop` under the driver; each pass's outcome printed.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use miette::IntoDiagnostic;
use tether::driver::{Backoff, Schedule, drive, shutdown_on_signal};
use tether::reconcile::{ApplyOptions, PlanOptions, ReconcileError, Reconciler};
use tether::runner::SourceLoop;

use super::reconcile::report_text;
use super::{GlobalArgs, RunArgs, report};

pub async fn run(global: &GlobalArgs, args: &RunArgs) -> miette::Result<ExitCode> {
    let reconciler = Reconciler::new(
        args.source.repo(),
        global.cluster.target(),
        args.inventory.inventory(),
    );
    let plan = PlanOptions {
        prune: args.prune,
        allow_empty: args.allow_empty,
        dry_run_new: false,
    };
    let apply = ApplyOptions {
        prune: args.prune,
        ..ApplyOptions::default()
    };
    let mut work = SourceLoop::new(reconciler, plan, apply, args.interval);
    if args.source.repo.is_none() && args.source.path.is_dir() {
        work = work.watch_directory(&args.source.path).into_diagnostic()?;
    }
    let schedule = Schedule {
        name: "run",
        // Saving several files at once is one pass.
        debounce: Duration::from_millis(200),
        backoff: Backoff::pass(),
    };
    let graphical = report::use_graphics(global.color, std::io::stderr().is_terminal());
    let shutdown = shutdown_on_signal();
    drive(&mut work, &schedule, &shutdown, |outcome| match outcome {
        Ok(pass) => {
            let at = pass.revision.as_deref().unwrap_or("the working tree");
            print!("applied {at}: {}", report_text(&pass.report));
        }
        // The driver logs the error; invalid models are shown as validate shows them.
        Err(ReconcileError::Invalid(models)) => eprint!(
            "{}",
            report::diagnostics(&models.diagnostics, &models.loaded.files, graphical)
        ),
        Err(_) => {}
    })
    .await;
    Ok(ExitCode::SUCCESS)
}
