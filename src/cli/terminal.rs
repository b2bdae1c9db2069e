//! Diagnostics for people: graphical with source snippets on a terminal, plain lines
//! (`path:line:column: error: ...`) when piped.

use std::path::Path;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteDiagnostic, NamedSource};
use tether_core::diagnostic::{Diagnostic, Diagnostics, Severity};
use tether_core::remedy::Remedy;
use tether_core::source::{FileId, SourceFiles};

/// Each remedy in the CLI's words: a flag where a report names it inside a sentence
/// (`(with --prune)`), else the hint under an error.
pub fn remedy_text(remedy: Remedy) -> &'static str {
    match remedy {
        Remedy::Prune => "--prune",
        Remedy::ApproveDeletions => "--approve-deletions",
        Remedy::AllowEmpty => "pass --allow-empty to prune every object of the inventory",
        Remedy::GiveCluster => "pass --kubeconfig",
        Remedy::MapCluster => {
            "map the KubernetesService to a context: --cluster NAME=CONTEXT, or clusters: {NAME: {context: CONTEXT}} in .tether.yaml"
        }
        Remedy::ChooseAnotherInventory => "choose another --inventory-name",
        Remedy::CreateInventoryNamespace => {
            "the inventory's namespace must exist: create it, or pass --inventory-namespace"
        }
        Remedy::ValidInventoryName => {
            "--inventory-name must be a valid ConfigMap name (lower case, digits, '-' and '.')"
        }
        Remedy::GiveBranchTagOrCommit => {
            "--ref takes a branch, a tag or a full commit id of the repository"
        }
        Remedy::GiveBranch => "pass --branch",
        Remedy::ChooseAnotherProposalBranch => "pass another --propose branch",
        Remedy::RecreateInstead => {
            "restart-containers needs the pods/exec permission, a kubelet that serves exec, and a kill command in the image; tether recreate makes the pod again instead"
        }
        Remedy::DeleteItYourself => "delete it with kubectl if it should go for good",
        Remedy::ChangeWhereManaged => {
            "change it where it is managed; or take it over: move its model out of discovered/ and set xos_managed: true"
        }
        Remedy::ListModels => "tether validate lists the models; --path names the models root",
        Remedy::AddNodeModel => {
            "a host is managed once it has a Node model: add `kind: Node` with `name:` the node's name"
        }
        Remedy::NameKubernetesService => {
            "pass --kubernetes-service NAME (tether run: --cluster-name NAME), or use a kubeconfig context named like the KubernetesService"
        }
    }
}

/// Says on standard error who signed what was read, when the source verifies it.
pub fn say_verified(loaded: &tether_engine::repo::LoadedModels) {
    if let Some(verified) = &loaded.verified {
        eprintln!("verified: {verified}");
    }
}

pub fn use_graphics(color: Color, is_terminal: bool) -> bool {
    match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => is_terminal && std::env::var_os("NO_COLOR").is_none(),
    }
}

pub fn diagnostics(diagnostics: &Diagnostics, files: &SourceFiles, graphical: bool) -> String {
    shown(&diagnostics.sorted(files), files, graphical)
}

/// Some diagnostics, in the order given: graphical with snippets, or a plain line
/// each.
fn shown(items: &[&Diagnostic], files: &SourceFiles, graphical: bool) -> String {
    // A message may quote a value of the models: decrypted ones are starred.
    if !graphical {
        let plain: String = items.iter().map(|d| d.render_plain(files)).collect();
        return files.redact(&plain);
    }
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode());
    let mut out = String::new();
    // The snippets show the lines around each problem: never a Secret's value. Each
    // file is masked once, however many problems it has.
    let mut masked: std::collections::HashMap<FileId, String> = Default::default();
    for d in items {
        let file = files.get(d.span.file);
        let text = masked
            .entry(d.span.file)
            .or_insert_with(|| tether_core::mask::masked(file.shown_text()))
            .clone();
        let message = match &d.model {
            Some(model) => format!("{model}: {}", d.message),
            None => d.message.clone(),
        };
        let mut diagnostic = MietteDiagnostic::new(message)
            .with_severity(match d.severity {
                Severity::Error => miette::Severity::Error,
                Severity::Warning => miette::Severity::Warning,
            })
            .with_label(LabeledSpan::underline(file.shown_range(
                d.span.line,
                d.span.column,
                d.span.offset,
                d.span.len,
            )));
        if let Some(hint) = &d.hint {
            diagnostic = diagnostic.with_help(hint.clone());
        }
        let report = miette::Report::new(diagnostic)
            .with_source_code(NamedSource::new(files.shown_path(d.span.file), text));
        if handler.render_report(&mut out, report.as_ref()).is_err() {
            out.push_str(&d.render_plain(files));
        }
        out.push('\n');
    }
    files.redact(&out)
}

/// The sorted diagnostics, at most `max` of each severity (`0`: all of them), and how
/// many errors and warnings were left out.
pub fn capped<'d>(
    diagnostics: &'d Diagnostics,
    files: &SourceFiles,
    max: usize,
) -> (Vec<&'d Diagnostic>, usize, usize) {
    let sorted = diagnostics.sorted(files);
    if max == 0 {
        return (sorted, 0, 0);
    }
    let (mut errors, mut warnings) = (0, 0);
    let kept = sorted
        .into_iter()
        .filter(|d| {
            let seen = match d.severity {
                Severity::Error => &mut errors,
                Severity::Warning => &mut warnings,
            };
            *seen += 1;
            *seen <= max
        })
        .collect();
    (
        kept,
        errors.saturating_sub(max),
        warnings.saturating_sub(max),
    )
}

/// `… and 640 more errors and 3 more warnings`, when any were left out.
pub fn left_out(errors: usize, warnings: usize) -> Option<String> {
    let plural = |n: usize, word: &str| format!("{n} more {word}{}", if n == 1 { "" } else { "s" });
    let parts: Vec<String> = [(errors, "error"), (warnings, "warning")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, word)| plural(n, word))
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "… and {} (--max-errors 0 shows every one)\n",
            parts.join(" and ")
        )
    })
}

/// Problems as they are shown in `format` (JSON is [`json_report`]'s).
pub fn problems(
    items: &[&Diagnostic],
    files: &SourceFiles,
    format: ProblemFormat,
    graphical: bool,
) -> String {
    match format {
        ProblemFormat::Github => files.redact(
            &items
                .iter()
                .map(|d| github_command(d, files))
                .collect::<String>(),
        ),
        ProblemFormat::Human | ProblemFormat::Json => shown(items, files, graphical),
    }
}

/// A GitHub Actions workflow command for one diagnostic:
/// `::error file=…,line=…,col=…,title=…::message` (the hint on a line of its own in
/// the message).
fn github_command(d: &Diagnostic, files: &SourceFiles) -> String {
    let command = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let title = match &d.model {
        Some(model) => format!("tether: {model}"),
        None => "tether".to_string(),
    };
    let mut message = d.message.clone();
    if let Some(hint) = &d.hint {
        message.push_str(&format!("\nhint: {hint}"));
    }
    format!(
        "::{command} file={},line={},col={},title={}::{}\n",
        github_property(&files.shown_path(d.span.file)),
        d.span.line,
        d.span.column,
        github_property(&title),
        github_data(&message)
    )
}

/// A workflow command's message, escaped as GitHub's toolkit does (`escapeData`).
pub fn github_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value, escaped as GitHub's toolkit does
/// (`escapeProperty`).
pub fn github_property(text: &str) -> String {
    github_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// `validate`'s verdict as one JSON object, every diagnostic in it (see the book,
/// reference/json-formats.md). Decrypted values are starred, as everywhere.
pub fn json_report(
    diagnostics: &Diagnostics,
    files: &SourceFiles,
    models: usize,
    root: &Path,
    failure: Option<&str>,
) -> String {
    let items: Vec<serde_json::Value> = diagnostics
        .sorted(files)
        .into_iter()
        .map(|d| json_diagnostic(d, files))
        .collect();
    let report = serde_json::json!({
        "path": root.display().to_string(),
        "valid": failure.is_none() && !diagnostics.has_errors(),
        "models": models,
        "files": files.len(),
        "errors": diagnostics.count(Severity::Error),
        "warnings": diagnostics.count(Severity::Warning),
        "failure": failure,
        "diagnostics": items,
    });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    files.redact(&format!("{text}\n"))
}

fn json_diagnostic(d: &Diagnostic, files: &SourceFiles) -> serde_json::Value {
    // The model as `Kind "name"` (or the kind alone), as the core labels it.
    let model = d.model.as_deref().map(|label| match label.split_once(' ') {
        Some((kind, name)) => serde_json::json!({
            "kind": kind,
            "name": name.strip_prefix('"').and_then(|n| n.strip_suffix('"')).unwrap_or(name),
        }),
        None => serde_json::json!({ "kind": label, "name": null }),
    });
    let end = span_end(files.get(d.span.file), d.span.offset, d.span.len);
    serde_json::json!({
        "severity": d.severity.to_string(),
        "file": files.shown_path(d.span.file),
        "line": d.span.line,
        "column": d.span.column,
        "end_line": end.map(|(line, _)| line),
        "end_column": end.map(|(_, column)| column),
        "message": d.message,
        "hint": d.hint,
        "model": model,
    })
}

/// The line and column (1-based, characters) just past a span, in a plain file
/// (in an encrypted one the stored values have other lengths: unknown).
fn span_end(file: &tether_core::source::SourceFile, offset: u32, len: u32) -> Option<(u32, u32)> {
    if len == 0 || !matches!(file.sealing, tether_core::source::Sealing::Plain) {
        return None;
    }
    let before = file.text.get(..(offset + len) as usize)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    Some((u32::try_from(line).ok()?, u32::try_from(column).ok()?))
}

/// The closing line: what was checked and the verdict.
pub fn summary(
    diagnostics: &Diagnostics,
    documents: usize,
    files: &SourceFiles,
    root: &Path,
) -> String {
    let errors = diagnostics.count(Severity::Error);
    let warnings = diagnostics.count(Severity::Warning);
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let scope = format!(
        "{}: {} in {}",
        root.display(),
        plural(documents, "model"),
        plural(files.len(), "file")
    );
    match (errors, warnings) {
        (0, 0) => format!("{scope}: valid\n"),
        (0, w) => format!("{scope}: valid, {}\n", plural(w, "warning")),
        (e, 0) => format!("{scope}: {}\n", plural(e, "error")),
        (e, w) => format!(
            "{scope}: {}, {}\n",
            plural(e, "error"),
            plural(w, "warning")
        ),
    }
}

/// A library error for people: its message and causes, plus which flag helps where
/// one does (the library does not know its flags).
pub fn error<E: std::error::Error + 'static>(error: E) -> miette::Report {
    let help = remedy_of(&error).map(|remedy| remedy_text(remedy).to_string());
    let mut causes = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        // The server's own words, not the structure they came in.
        let message = match cause.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) if !status.message.is_empty() => status.message.clone(),
            _ => cause.to_string(),
        };
        // A cause that repeats the one before it (with a suffix) says nothing new.
        if !causes
            .last()
            .is_some_and(|previous: &String| message.starts_with(previous.trim_end_matches('…')))
        {
            causes.push(cut(&message));
        }
        source = cause.source();
    }
    let cause = causes.into_iter().rev().fold(None, |next, message| {
        Some(Box::new(Cause { message, next }))
    });
    miette::Report::new(Failure {
        message: cut(&error.to_string()),
        cause,
        help,
    })
}

/// A message cut to what an error line can hold.
fn cut(message: &str) -> String {
    tether_core::report::cut(message, 500)
}

/// The remedy a library error names, looked for along its causes (each library
/// error says its own, and those of the errors it wraps).
fn remedy_of(error: &(dyn std::error::Error + 'static)) -> Option<Remedy> {
    use tether_engine::actions::ActionError;
    use tether_engine::actions::pods::PodActionError;
    use tether_engine::cluster::ClusterError;
    use tether_engine::discovery::DiscoverError;
    use tether_engine::discovery::session::SessionError;
    use tether_engine::git::GitError;
    use tether_engine::reconcile::ReconcileError;
    use tether_engine::writeback::WritebackError;
    let own = |e: &(dyn std::error::Error + 'static)| {
        None.or_else(|| e.downcast_ref::<ReconcileError>()?.remedy())
            .or_else(|| e.downcast_ref::<ActionError>()?.remedy())
            .or_else(|| e.downcast_ref::<PodActionError>()?.remedy())
            .or_else(|| e.downcast_ref::<SessionError>()?.remedy())
            .or_else(|| e.downcast_ref::<DiscoverError>()?.remedy())
            .or_else(|| e.downcast_ref::<ClusterError>()?.remedy())
            .or_else(|| e.downcast_ref::<WritebackError>()?.remedy())
            .or_else(|| e.downcast_ref::<GitError>()?.remedy())
    };
    std::iter::successors(Some(error), |e| e.source()).find_map(own)
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
struct Failure {
    message: String,
    #[source]
    cause: Option<Box<Cause>>,
    #[help]
    help: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Cause {
    message: String,
    #[source]
    next: Option<Box<Cause>>,
}

/// Colour and graphics in reports (`--color`): auto (when the output is a terminal),
/// always, never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

/// How `validate` prints the problems it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProblemFormat {
    /// For people: snippets on a terminal, `path:line:column: error: …` lines when
    /// piped.
    Human,
    /// GitHub Actions workflow commands (`::error file=…,line=…::…`): annotations on
    /// the pull request's lines.
    Github,
    /// One JSON object: the verdict, the counts and every diagnostic (never capped).
    Json,
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tether_engine::actions::ActionError;
    use tether_engine::cluster::ClusterError;
    use tether_engine::discovery::DiscoverError;
    use tether_engine::discovery::session::SessionError;
    use tether_engine::reconcile::ReconcileError;
    use tether_engine::writeback::WritebackError;

    use super::*;

    fn help(report: &miette::Report) -> Option<String> {
        report.help().map(|help| help.to_string())
    }

    /// The remedy is found however deep the library wrapped the error that names it,
    /// through transparent wrappers (whose causes skip the wrapped error) as well.
    #[test]
    fn a_wrapped_library_error_is_worded_as_the_flag_that_solves_it() {
        let cases: Vec<(miette::Report, &str)> = vec![
            (
                error(ReconcileError::Cluster(ClusterError::NoCluster)),
                "pass --kubeconfig",
            ),
            (
                error(ReconcileError::NothingRendered),
                "pass --allow-empty to prune every object of the inventory",
            ),
            (
                error(ActionError::Writeback(WritebackError::BranchExists {
                    branch: "tether/scale".into(),
                })),
                "pass another --propose branch",
            ),
            (
                error(SessionError::Discover(DiscoverError::Writeback(
                    WritebackError::DetachedHead {
                        path: PathBuf::from("models"),
                    },
                ))),
                "pass --branch",
            ),
        ];
        for (report, expected) in cases {
            assert_eq!(help(&report).as_deref(), Some(expected), "{report:?}");
        }
        let unhelped = error(ReconcileError::Selection("no model named x".into()));
        assert_eq!(help(&unhelped), None);
    }
}
