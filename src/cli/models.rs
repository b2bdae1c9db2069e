//! `validate` and `render`: the offline pipeline, no cluster.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_core::ownership::Inventory;
use tether_core::render::{render as render_objects, to_json_list, to_yaml};
use tether_engine::reconcile::check;
use tether_engine::repo::{Repo, read_directory};

use crate::cli::flags::KeyFlags;

use super::{
    EXIT_INVALID, GlobalArgs, GraphArgs, GraphFormat, OutputFormat, RenderArgs, ValidateArgs,
    report,
};

pub async fn validate(global: &GlobalArgs, args: &ValidateArgs) -> miette::Result<ExitCode> {
    let mut loaded = Repo::Directory(args.path.clone())
        .load()
        .await
        .map_err(report::error)?;
    loaded.files = tether_sops::open_files(loaded.files, &args.keys.keyring()?);
    loaded.plain_secrets_are_errors = args.require_encrypted_secrets;
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

/// The models of a directory, analysed; their problems printed on standard error.
/// `Err` with the exit code when they are invalid.
async fn analysed(
    global: &GlobalArgs,
    keys: &KeyFlags,
    path: &std::path::Path,
) -> miette::Result<
    Result<
        (
            tether_core::source::SourceFiles,
            tether_core::resolve::Graph,
        ),
        ExitCode,
    >,
> {
    let files = read_directory(path.to_path_buf())
        .await
        .map_err(report::error)?;
    let files = tether_sops::open_files(files, &keys.keyring()?);
    let analysis = tether_core::analyze(&files);
    let styled = report::use_graphics(global.color, std::io::stderr().is_terminal());
    eprint!(
        "{}",
        report::diagnostics(&analysis.diagnostics, &files, styled)
    );
    match analysis.graph {
        Some(graph) => Ok(Ok((files, graph))),
        None => {
            eprint!(
                "{}",
                report::summary(&analysis.diagnostics, analysis.documents, &files, path)
            );
            Ok(Err(ExitCode::from(EXIT_INVALID)))
        }
    }
}

pub async fn graph(global: &GlobalArgs, args: &GraphArgs) -> miette::Result<ExitCode> {
    let (_, graph) = match analysed(global, &args.keys, &args.path).await? {
        Ok(analysed) => analysed,
        Err(code) => return Ok(code),
    };
    let workflow = &graph.workflow;
    if !workflow.has_dependencies() {
        eprintln!("no model depends on another (depends_on): everything is applied in one wave");
    }
    let text = match args.format {
        GraphFormat::Mermaid => workflow.mermaid(),
        GraphFormat::Dot => workflow.dot(),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}

pub async fn render(global: &GlobalArgs, args: &RenderArgs) -> miette::Result<ExitCode> {
    let (files, graph) = match analysed(global, &args.keys, &args.path).await? {
        Ok(analysed) => analysed,
        Err(code) => return Ok(code),
    };
    let graph = &graph;
    let mut objects = render_objects(graph, &files, &args.inventory.inventory());
    tracing::info!(objects = objects.len(), "rendered");
    let encrypted = files
        .iter()
        .any(|(_, f)| matches!(f.sealing, tether_core::source::Sealing::Opened { .. }));
    if encrypted && !args.show_secrets {
        tether_core::render::hide_secret_values(&mut objects);
        eprintln!(
            "Secret values are shown as ***: the repository has encrypted files (--show-secrets prints them)"
        );
    }
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
