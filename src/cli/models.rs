//! `validate` and `render`: the offline pipeline, no cluster.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether::ownership::Inventory;
use tether::reconcile::check;
use tether::render::{render as render_objects, to_json_list, to_yaml};
use tether::repo::{Repo, read_directory};

use super::{EXIT_INVALID, GlobalArgs, OutputFormat, RenderArgs, ValidateArgs, report};

pub async fn validate(global: &GlobalArgs, args: &ValidateArgs) -> miette::Result<ExitCode> {
    let loaded = Repo::Directory(args.path.clone())
        .load()
        .await
        .map_err(report::error)?;
    // The repository's confinement is checked too: validate renders (without an
    // inventory, whose labels do not change what is checked).
    let (models, objects) = check(loaded, &Inventory::default()).map_err(report::error)?;
    let files = &models.loaded.files;
    let styled = report::use_graphics(global.color, std::io::stdout().is_terminal());
    let text = report::diagnostics(&models.diagnostics, files, styled);
    let summary = report::summary(&models.diagnostics, models.documents, files, &args.path);
    write!(std::io::stdout().lock(), "{text}{summary}").into_diagnostic()?;
    Ok(match objects {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::from(EXIT_INVALID),
    })
}

pub async fn render(global: &GlobalArgs, args: &RenderArgs) -> miette::Result<ExitCode> {
    let files = read_directory(args.path.clone())
        .await
        .map_err(report::error)?;
    let analysis = tether::analyze(&files);
    let styled = report::use_graphics(global.color, std::io::stderr().is_terminal());
    eprint!(
        "{}",
        report::diagnostics(&analysis.diagnostics, &files, styled)
    );
    let Some(graph) = &analysis.graph else {
        eprint!(
            "{}",
            report::summary(
                &analysis.diagnostics,
                analysis.documents,
                &files,
                &args.path
            )
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    let objects = render_objects(graph, &files, &args.inventory.inventory());
    tracing::info!(objects = objects.len(), "rendered");
    let text = match args.output {
        OutputFormat::Yaml => to_yaml(&objects).into_diagnostic()?,
        OutputFormat::Json => to_json_list(&objects),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}
