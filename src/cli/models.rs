//! `validate` and `render`: the offline pipeline, no cluster.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_core::health::HealthChecks;
use tether_core::ownership::Inventory;
use tether_core::render::{to_json_list, to_yaml};
use tether_engine::reconcile::{Rendered, build};
use tether_engine::repo::Repo;

use super::terminal::ProblemFormat;
use crate::cli::flags::KeyFlags;

use super::args::{
    EXIT_INVALID, GlobalArgs, GraphArgs, GraphFormat, OutputFormat, RenderArgs, ValidateArgs,
};
use super::terminal;

pub async fn validate(global: &GlobalArgs, args: &ValidateArgs) -> miette::Result<ExitCode> {
    let mut loaded = args.source.repo()?.load().await.map_err(terminal::error)?;
    terminal::say_verified(&loaded);
    // Without its key, an encrypted file is checked for its structure only.
    loaded.files = tether_sops::open_files_for_checking(loaded.files, &args.keys.keyring()?);
    loaded.plain_secrets_are_errors = args.require_encrypted_secrets;
    // The repository's confinement is checked too: validate renders (without an
    // inventory, whose labels do not change what is checked).
    let (models, objects) = build(
        loaded,
        &Inventory::default(),
        &args.keys.generate()?,
        None,
        None,
        &HealthChecks::default(),
    )
    .await
    .map_err(terminal::error)?;
    let files = &models.loaded.files;
    let diagnostics = &models.diagnostics;
    let failure = (models.documents == 0 && !diagnostics.has_errors() && !args.allow_empty)
        .then(|| no_models(&args.source.shown_root(), files.len()));
    let mut out = String::new();
    match args.output_format {
        ProblemFormat::Json => out.push_str(&terminal::json_report(
            diagnostics,
            files,
            models.documents,
            &args.source.shown_root(),
            failure.as_ref().map(|(message, _)| message.as_str()),
        )),
        format => {
            let styled = terminal::use_graphics(global.color, std::io::stdout().is_terminal());
            let (shown, more_errors, more_warnings) =
                terminal::capped(diagnostics, files, args.max_errors);
            out.push_str(&terminal::problems(&shown, files, format, styled));
            out.extend(terminal::left_out(more_errors, more_warnings));
            // The failure is the verdict: a summary would call nothing "valid".
            out.push_str(&match (&failure, format) {
                (Some((message, hint)), ProblemFormat::Github) => format!(
                    "::error title=tether%3A no models::{}\n",
                    terminal::github_data(&format!("{message}\nhint: {hint}"))
                ),
                (Some((message, hint)), _) => format!("error: {message}\n    hint: {hint}\n"),
                (None, _) => terminal::summary(
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

/// The models of a source checked (kustomizations and charts built, for no
/// cluster in particular) and rendered with `inventory`'s labels; their problems
/// printed on standard error (the summary naming the models root `shown`). `Err`
/// with the exit code when they are invalid.
async fn analysed(
    global: &GlobalArgs,
    keys: &KeyFlags,
    repo: Repo,
    shown: &std::path::Path,
    inventory: &Inventory,
) -> miette::Result<Result<(tether_core::source::SourceFiles, Rendered), ExitCode>> {
    let mut loaded = repo.load().await.map_err(terminal::error)?;
    terminal::say_verified(&loaded);
    loaded.files = tether_sops::open_files(loaded.files, &keys.keyring()?);
    let (models, rendered) = build(
        loaded,
        inventory,
        &keys.generate()?,
        None,
        None,
        &HealthChecks::default(),
    )
    .await
    .map_err(terminal::error)?;
    let files = models.loaded.files;
    let styled = terminal::use_graphics(global.color, std::io::stderr().is_terminal());
    eprint!(
        "{}",
        terminal::diagnostics(&models.diagnostics, &files, styled)
    );
    match rendered {
        Some(rendered) => Ok(Ok((files, rendered))),
        None => {
            eprint!(
                "{}",
                terminal::summary(&models.diagnostics, models.documents, &files, shown)
            );
            Ok(Err(ExitCode::from(EXIT_INVALID)))
        }
    }
}

pub async fn graph(global: &GlobalArgs, args: &GraphArgs) -> miette::Result<ExitCode> {
    let repo = Repo::Directory(args.path.clone());
    let (_, rendered) =
        match analysed(global, &args.keys, repo, &args.path, &Inventory::default()).await? {
            Ok(analysed) => analysed,
            Err(code) => return Ok(code),
        };
    let workflow = &rendered.workflow;
    if !workflow.has_dependencies() {
        eprintln!(
            "no model depends on another (depends_on) and no object carries a later sync-wave: everything is applied in one wave"
        );
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
    let inventory = args.inventory.inventory();
    let repo = args.source.repo()?;
    let shown = args.source.shown_root();
    let (files, rendered) = match analysed(global, &args.keys, repo, &shown, &inventory).await? {
        Ok(analysed) => analysed,
        Err(code) => return Ok(code),
    };
    let mut objects = rendered.objects;
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
