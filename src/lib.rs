//! tether: models in Git to Kubernetes objects, and the cluster back to models.
//!
//! The pipeline, one module per stage, data flowing one way:
//! [`source`] (read files) → [`load`] (YAML with positions) → [`model`] (typed models)
//! → [`resolve`] (a checked, resolved graph) → [`render`] (Kubernetes objects).
//! [`analyze`] runs the pure part of it and returns a value plus its diagnostics.
//! Against a cluster: [`plan`] (what would change, pure comparisons) and
//! [`reconcile`] (list, dry-run, apply, prune) through [`cluster`]; models may come
//! from [`git`]; [`report`] writes plans for people and programs.
//! Back from the cluster: [`discover`] (pods to model files) and [`writeback`]
//! (commit and push them).

pub mod actions;
pub mod cluster;
pub mod config;
pub mod confine;
pub mod daemon;
pub mod diagnostic;
pub mod discover;
pub mod discoverer;
pub mod driver;
pub mod edit;
pub mod events;
pub mod git;
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
pub mod reconcile;
pub mod render;
pub mod repo;
pub mod report;
pub mod resolve;

pub mod sops;
pub mod source;
pub mod watch;
pub mod workflow;
pub mod writeback;

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
