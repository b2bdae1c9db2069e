//! Diagnostics for people: graphical with source snippets on a terminal, plain lines
//! (`path:line:column: error: ...`) when piped.

use std::path::Path;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteDiagnostic, NamedSource};
use tether::Analysis;
use tether::diagnostic::{Diagnostics, Severity};
use tether::source::SourceFiles;

use super::Color;

pub fn use_graphics(color: Color, is_terminal: bool) -> bool {
    match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => is_terminal && std::env::var_os("NO_COLOR").is_none(),
    }
}

pub fn diagnostics(diagnostics: &Diagnostics, files: &SourceFiles, graphical: bool) -> String {
    if !graphical {
        return diagnostics.render_plain(files);
    }
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode());
    let mut out = String::new();
    for d in diagnostics.sorted(files) {
        let file = files.get(d.span.file);
        let message = match &d.model {
            Some(model) => format!("{model}: {}", d.message),
            None => d.message.clone(),
        };
        let mut diagnostic = MietteDiagnostic::new(message)
            .with_severity(match d.severity {
                Severity::Error => miette::Severity::Error,
                Severity::Warning => miette::Severity::Warning,
            })
            .with_label(LabeledSpan::underline(
                d.span.offset as usize..(d.span.offset + d.span.len.max(1)) as usize,
            ));
        if let Some(hint) = &d.hint {
            diagnostic = diagnostic.with_help(hint.clone());
        }
        let report = miette::Report::new(diagnostic)
            .with_source_code(NamedSource::new(&file.path, file.text.clone()));
        if handler.render_report(&mut out, report.as_ref()).is_err() {
            out.push_str(&d.render_plain(files));
        }
        out.push('\n');
    }
    out
}

/// The closing line: what was checked and the verdict.
pub fn summary(analysis: &Analysis, files: &SourceFiles, root: &Path) -> String {
    let errors = analysis.diagnostics.count(Severity::Error);
    let warnings = analysis.diagnostics.count(Severity::Warning);
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let scope = format!(
        "{}: {} in {}",
        root.display(),
        plural(analysis.documents, "model"),
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
