//! tether's pure core: models in Git to Kubernetes objects and back, with no I/O.
//!
//! The pipeline, one module per stage, data flowing one way:
//! [`source`] (the files, in memory) → [`load`] (YAML with positions) → [`model`]
//! (typed models) → [`resolve`] (a checked, resolved graph) → [`render`] (Kubernetes
//! objects). [`analyze`] runs the part before render and returns a value plus its
//! diagnostics. [`plan`] compares rendered objects with what the engine read from the
//! cluster; [`inventory`] decides what prune may touch; [`report`] writes plans for
//! people and programs. Back from the cluster: [`discover`] (pods to model files),
//! [`operation`] and [`edit`] (day-2 operations as edits of model files).
//!
//! Nothing here reads the clock, the environment or the filesystem, opens a
//! connection or spawns a task: the time, the keys and the files are passed in. The
//! crate's dependencies (no client, no runtime, no Git) are checked by
//! `tests/architecture.rs`, and `clippy.toml` forbids the rest.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

pub mod confine;
pub mod diagnostic;
pub mod discover;
pub mod edit;
pub mod events;
pub mod host;
pub mod inventory;
pub mod k8s;
pub mod load;
pub mod managed_fields;
pub mod mask;
pub mod model;
pub mod normalize;
pub mod operation;
pub mod ownership;
pub mod plan;
pub mod readiness;
pub mod remedy;
pub mod render;
pub mod report;
pub mod resolve;
pub mod settings;
pub mod source;
pub mod workflow;

use diagnostic::Diagnostics;
use resolve::Graph;
use source::SourceFiles;

/// The offline checks of a repo: the resolved graph (when there is no error) and
/// every diagnostic, from syntax to references.
#[derive(Debug)]
pub struct Analysis {
    pub graph: Option<Graph>,
    pub diagnostics: Diagnostics,
    pub documents: usize,
}

/// Load, read, validate and resolve: everything before render, without I/O.
pub fn analyze(files: &SourceFiles) -> Analysis {
    let (documents, mut diagnostics) = load::load(files);
    let (models, model_diagnostics) = model::read_models(files, &documents);
    diagnostics.extend(model_diagnostics);
    let (graph, resolve_diagnostics) = resolve::resolve(models, files);
    diagnostics.extend(resolve_diagnostics);
    let graph = if diagnostics.has_errors() {
        None
    } else {
        graph
    };
    Analysis {
        graph,
        diagnostics,
        documents: documents.len(),
    }
}

/// An error and its causes on one line, for logs.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
