//! tether's pure core: models in Git to Kubernetes objects and back, with no I/O.
//!
//! The pipeline, one module per stage, data flowing one way:
//! [`source`] (the files, in memory) → [`load`] (YAML with positions) → [`model`]
//! (typed models) → [`resolve`] (a checked, resolved graph) → [`render`] (Kubernetes
//! objects). [`analyze`] runs the part before render and returns a value plus its
//! diagnostics. [`plan`] compares rendered objects with what the engine read from the
//! cluster; [`inventory`] decides what prune may touch; [`report`] writes plans for
//! people and programs. Back from the cluster: [`discovery`] (pods to model files),
//! [`operation`] and [`edit`] (day-2 operations as edits of model files);
//! [`image_automation`] (image policies: which registry tag replaces the one written).
//!
//! Nothing here reads the clock, the environment or the filesystem, opens a
//! connection or spawns a task: the time, the keys and the files are passed in. The
//! crate's dependencies (no client, no runtime, no Git) are checked by
//! `tests/architecture.rs`, and `clippy.toml` forbids the rest.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

pub mod attestation;
pub mod confine;
pub mod diagnostic;
pub mod directive;
pub mod discovery;
pub mod edit;
pub mod events;
pub mod feedback;
pub mod fleet;
pub mod generate;
pub mod health;
pub mod hook;
pub mod host;
pub mod ignore;
pub mod image_automation;
pub mod inventory;
pub mod k8s;
pub mod load;
pub mod managed_fields;
pub mod marks;
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
pub mod revert;
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

/// A repo read up to what other engines must build: its models, every diagnostic so
/// far, and the kustomizations and charts to build ([`generate`]).
#[derive(Debug)]
pub struct Prepared {
    pub models: model::Models,
    pub diagnostics: Diagnostics,
    pub documents: usize,
    pub generators: Vec<generate::Generator>,
}

/// Load and read the models, and find what Kustomize and Helm must build.
/// `allow_remote_bases`: may a kustomization include a remote base?
pub fn prepare(files: &SourceFiles, allow_remote_bases: bool) -> Prepared {
    let (layout, documents, mut diagnostics) = model_documents(files, allow_remote_bases);
    let (models, model_diagnostics) = model::read_models(files, &documents);
    diagnostics.extend(model_diagnostics);
    let generators = generate::generators(&layout, &models, files, &mut diagnostics);
    Prepared {
        models,
        diagnostics,
        documents: documents.len(),
        generators,
    }
}

/// The documents of the model files (every YAML file but a kustomization's, a chart's
/// and the values files charts name), the layout that says which those are, and the
/// problems found on the way.
pub fn model_documents(
    files: &SourceFiles,
    allow_remote_bases: bool,
) -> (generate::Layout, Vec<load::Document>, Diagnostics) {
    let (layout, mut diagnostics) = generate::layout(files, allow_remote_bases);
    let (mut documents, load_diagnostics) = load::load_except(files, &layout.not_models);
    diagnostics.extend(load_diagnostics);
    // The values files a chart names are the chart's, not models.
    let values_files = generate::values_file_paths(files, &documents);
    documents.retain(|d| !values_files.contains(files.path(d.file)));
    (layout, documents, diagnostics)
}

/// Reads what the generators made and resolves the whole: a graph only when no error
/// was found. `generated` answers `prepared.generators`, one for one.
pub fn complete(
    prepared: Prepared,
    files: &SourceFiles,
    generated: Vec<generate::Generated>,
) -> Analysis {
    let Prepared {
        mut models,
        mut diagnostics,
        documents,
        generators,
    } = prepared;
    let before = generated_objects(&models);
    generate::read_generated(&generators, generated, &mut models, files, &mut diagnostics);
    hook::separate(&mut models);
    // A built object counts as a document of the repository, as a plain one does.
    let documents = documents + generated_objects(&models) - before;
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
        documents,
    }
}

fn generated_objects(models: &model::Models) -> usize {
    models
        .resources
        .iter()
        .filter(|r| {
            matches!(
                r.origin.kind,
                model::Kind::Kustomization | model::Kind::HelmChart
            )
        })
        .map(|r| r.objects.len())
        .sum()
}

/// Load, read, validate and resolve: everything before render, without I/O. A
/// kustomization or chart is an error here: building it takes a tool, which the
/// engine runs (`tether_engine::reconcile::build`).
pub fn analyze(files: &SourceFiles) -> Analysis {
    let prepared = prepare(files, false);
    let generated = prepared
        .generators
        .iter()
        .map(|_| generate::Generated {
            output: Err(generate::Failure {
                message: "not built: building it takes Kustomize or Helm".into(),
                hint: "tether validate, render, diff and apply build it".into(),
            }),
        })
        .collect();
    complete(prepared, files, generated)
}

/// An error and its causes on one line, for logs. A cause the line already ends with
/// is said once: some errors (kube's `ServiceError: …`) repeat their cause's words.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let words = cause.to_string();
        if !text.ends_with(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    enum Failure {
        #[error("cannot apply")]
        Apply(#[source] Box<Failure>),
        #[error("ServiceError: {0}")]
        Service(#[source] Box<Failure>),
        #[error("{0}")]
        Leaf(&'static str),
    }

    #[test]
    fn each_cause_is_said_once() {
        let leaf = || Box::new(Failure::Leaf("this replica may not write"));
        let repeated = Failure::Apply(Box::new(Failure::Service(leaf())));
        assert_eq!(
            error_chain(&repeated),
            "cannot apply: ServiceError: this replica may not write"
        );
        let plain = Failure::Apply(leaf());
        assert_eq!(
            error_chain(&plain),
            "cannot apply: this replica may not write"
        );
    }
}
