//! The [`Resolver`] that every check and resolution of the pass is a method of, with
//! the helpers they share: reporting an error, pointing at a place, labelling a model.

use super::name_index::NameIndex;
use crate::diagnostic::{Diagnostic, Diagnostics, Span};
use crate::model::{Kind, Models};
use crate::source::SourceFiles;

/// The state of one pass: the models, the files they come from, the problems found so
/// far and the index of names.
pub(super) struct Resolver<'m> {
    pub(super) models: &'m Models,
    pub(super) files: &'m SourceFiles,
    pub(super) diagnostics: Diagnostics,
    pub(super) names: NameIndex<'m>,
}

/// `Kind "name"`, the label diagnostics carry.
pub(super) fn label(kind: Kind, name: &str) -> String {
    format!("{kind} \"{name}\"")
}

impl Resolver<'_> {
    pub(super) fn error(
        &mut self,
        model: &str,
        span: Span,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.diagnostics.push(
            Diagnostic::error(span, message)
                .in_model(model)
                .with_optional_hint(hint),
        );
    }

    /// `path:line:column` of a span, for hints that point at another place in the repo.
    pub(super) fn at(&self, span: Span) -> String {
        format!(
            "{}:{}:{}",
            self.files.shown_path(span.file),
            span.line,
            span.column
        )
    }
}
