//! Diagnostics: what is wrong, where (file:line:column), in which model, and a hint.
//!
//! Every stage returns its value together with the diagnostics it found, instead of
//! stopping at the first problem, so a user sees all of them in one run. Also the
//! plain output format (one line a problem, an optional hint) and did-you-mean.

use std::fmt;

use crate::source::{FileId, SourceFiles};

/// A place in a source file. Lines and columns are 1-based and count characters;
/// `offset`/`len` are byte offsets into the file's text (for snippets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    pub file: FileId,
    pub line: u32,
    pub column: u32,
    pub offset: u32,
    pub len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub span: Span,
    /// The model the problem belongs to, as `Kind name`, when one is known.
    pub model: Option<String>,
    pub message: String,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            span,
            model: None,
            message: message.into(),
            hint: None,
        }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(span, message)
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_optional_hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }

    pub fn in_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
}

/// The diagnostics of a run, in the order they were found; [`Diagnostics::sorted`]
/// gives the stable order used for output.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.items.push(diagnostic);
    }

    /// Adds a diagnostic and returns it, to add a hint in place.
    pub fn push_mut(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic {
        self.items.push(diagnostic);
        let last = self.items.len() - 1;
        &mut self.items[last]
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn count(&self, severity: Severity) -> usize {
        self.items.iter().filter(|d| d.severity == severity).count()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// By file path, line, column, then message: the same input gives the same output.
    pub fn sorted(&self, files: &SourceFiles) -> Vec<&Diagnostic> {
        let mut items: Vec<&Diagnostic> = self.items.iter().collect();
        items.sort_by(|a, b| {
            (
                files.path(a.span.file),
                a.span.line,
                a.span.column,
                &a.message,
            )
                .cmp(&(
                    files.path(b.span.file),
                    b.span.line,
                    b.span.column,
                    &b.message,
                ))
        });
        items.dedup();
        items
    }

    /// The plain, one-problem-per-paragraph form used when output is not a terminal:
    /// `path:line:column: error: [Kind name] message`, then an indented hint.
    pub fn render_plain(&self, files: &SourceFiles) -> String {
        self.sorted(files)
            .into_iter()
            .map(|d| d.render_plain(files))
            .collect()
    }
}

impl Diagnostic {
    /// `path:line:column: severity: [model: ]message`, then `    hint: ...` if any.
    pub fn render_plain(&self, files: &SourceFiles) -> String {
        let mut out = format!(
            "{}:{}:{}: {}: ",
            files.shown_path(self.span.file),
            self.span.line,
            self.span.column,
            self.severity
        );
        if let Some(model) = &self.model {
            out.push_str(&format!("{}: ", one_line(model)));
        }
        out.push_str(&one_line(&self.message));
        out.push('\n');
        if let Some(hint) = &self.hint {
            out.push_str(&format!("    hint: {}\n", one_line(hint)));
        }
        out
    }
}

/// Keeps a diagnostic on its line: names and values quoted in messages may hold
/// line breaks or tabs.
fn one_line(text: &str) -> String {
    text.replace('\n', "\\n")
        .replace('\r', "\\r")
        .replace('\t', "\\t")
}

/// The closest of `candidates` to `word`, when it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.cmp(a.1)))
        .map(|(_, c)| c)
}

/// `did you mean "x"?`, when there is a close candidate.
pub fn suggestion<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    did_you_mean(word, candidates).map(|c| format!("did you mean \"{c}\"?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_diagnostic_stays_on_its_line() {
        let files = SourceFiles::from_files(vec![crate::source::SourceFile::new("m.yaml", "x\n")]);
        let span = Span {
            file: crate::source::FileId(0),
            line: 1,
            column: 1,
            offset: 0,
            len: 1,
        };
        let mut diagnostics = Diagnostics::default();
        diagnostics.push(
            Diagnostic::error(span, "bad \"a\nb\"")
                .in_model("Slice \"a\nb\"")
                .with_hint("tab\there"),
        );
        assert_eq!(
            diagnostics.render_plain(&files),
            "m.yaml:1:1: error: Slice \"a\\nb\": bad \"a\\nb\"\n    hint: tab\\there\n"
        );
    }

    #[test]
    fn suggests_close_names_only() {
        let fields = ["image", "slice", "owner", "xos_managed"];
        assert_eq!(did_you_mean("imge", fields), Some("image"));
        assert_eq!(did_you_mean("xos_manged", fields), Some("xos_managed"));
        assert_eq!(did_you_mean("completely_else", fields), None);
    }
}
