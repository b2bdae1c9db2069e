//! `validate` and `render`: the offline pipeline, no cluster.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_core::ownership::Inventory;
use tether_core::render::{render as render_objects, to_json_list, to_yaml};
use tether_engine::reconcile::check;
use tether_engine::repo::read_directory;

use super::report::ProblemFormat;
use crate::cli::flags::KeyFlags;

use super::{
    EXIT_INVALID, GlobalArgs, GraphArgs, GraphFormat, OutputFormat, RenderArgs, ValidateArgs,
    report,
};

pub async fn validate(global: &GlobalArgs, args: &ValidateArgs) -> miette::Result<ExitCode> {
    let mut loaded = args.source.repo()?.load().await.map_err(report::error)?;
    // Without its key, an encrypted file is checked for its structure only.
    loaded.files = tether_sops::open_files_for_checking(loaded.files, &args.keys.keyring()?);
    loaded.plain_secrets_are_errors = args.require_encrypted_secrets;
    // The repository's confinement is checked too: validate renders (without an
    // inventory, whose labels do not change what is checked).
    let (models, objects) = check(loaded, &Inventory::default()).map_err(report::error)?;
    let files = &models.loaded.files;
    let diagnostics = &models.diagnostics;
    let failure = (models.documents == 0 && !diagnostics.has_errors() && !args.allow_empty)
        .then(|| no_models(&args.source.shown_root(), files.len()));
    let mut out = String::new();
    match args.output_format {
        ProblemFormat::Json => out.push_str(&report::json_report(
            diagnostics,
            files,
            models.documents,
            &args.source.shown_root(),
            failure.as_ref().map(|(message, _)| message.as_str()),
        )),
        format => {
            let styled = report::use_graphics(global.color, std::io::stdout().is_terminal());
            let (shown, more_errors, more_warnings) =
                report::capped(diagnostics, files, args.max_errors);
            out.push_str(&report::problems(&shown, files, format, styled));
            out.extend(report::left_out(more_errors, more_warnings));
            // The failure is the verdict: a summary would call nothing "valid".
            out.push_str(&match (&failure, format) {
                (Some((message, hint)), ProblemFormat::Github) => format!(
                    "::error title=tether%3A no models::{}\n",
                    report::github_data(&format!("{message}\nhint: {hint}"))
                ),
                (Some((message, hint)), _) => format!("error: {message}\n    hint: {hint}\n"),
                (None, _) => report::summary(
                    diagnostics,
                    models.documents,
                    files,
                    &args.source.shown_root(),
                ),
            });
        }
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .into_diagnostic()?;
    Ok(match objects {
        Some(_) if failure.is_none() => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_INVALID),
    })
}

/// Why finding no model fails validation, and what to do: the path is most likely
/// wrong (a typo, or a CI step run from another directory).
fn no_models(root: &std::path::Path, files: usize) -> (String, String) {
    let found = match files {
        0 => "no *.yaml or *.yml file (dot-files and dot-directories are skipped)".to_string(),
        1 => "its one *.yaml/*.yml file holds no model".to_string(),
        n => format!("its {n} *.yaml/*.yml files hold no model"),
    };
    (
        format!("no models found in {}: {found}", root.display()),
        "check the path (relative to the working directory); pass --allow-empty if a models root without models is intended".to_string(),
    )
}

/// The models of a root (`path`, as the summary names it), analysed; their problems
/// printed on standard error. `Err` with the exit code when they are invalid.
fn analysed(
    global: &GlobalArgs,
    keys: &KeyFlags,
    files: tether_core::source::SourceFiles,
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
    let files = read_directory(args.path.clone())
        .await
        .map_err(report::error)?
        .with_shown_root(tether_core::source::shown_root_of(
            &args.path,
            args.path.is_file(),
        ));
    let (_, graph) = match analysed(global, &args.keys, files, &args.path)? {
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
    let files = args
        .source
        .repo()?
        .load()
        .await
        .map_err(report::error)?
        .files;
    let (files, graph) = match analysed(global, &args.keys, files, &args.source.shown_root())? {
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
