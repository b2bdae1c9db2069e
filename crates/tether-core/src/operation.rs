//! Day-2 operations as changes to the models: scale a slice, restart its pods, put a
//! model back as it was. Each becomes one format-preserving edit (`edit`) of the
//! model's file and a commit message that says what changed (`scale: Slice/web 3 →
//! 4`); `writeback` commits it and the reconciler applies it, so the cluster follows
//! Git and the next reconcile keeps it. Pure: the models and earlier documents come in
//! as text.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::diagnostic::suggestion;
use crate::diagnostic::{Diagnostic, Diagnostics, Severity};
use crate::edit::{self, EditError, ModelRef, Scalar};
use crate::model::{ControllerKind, Host, Models, Slice};
use crate::remedy::Remedy;
use crate::source::{SourceFile, SourceFiles};

/// `tether scale`'s count: `3` sets it, `+1` and `-1` change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaChange {
    To(i64),
    By(i64),
}

impl std::str::FromStr for ReplicaChange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let error = || format!("\"{text}\" is not a replica count: write 3, +1 or -1");
        let digits = text.trim_start_matches(['+', '-']);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(error());
        }
        let number: i64 = digits.parse().map_err(|_| error())?;
        Ok(match text.as_bytes()[0] {
            b'+' => ReplicaChange::By(number),
            b'-' => ReplicaChange::By(-number),
            _ => ReplicaChange::To(number),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    Scale {
        slice: String,
        change: ReplicaChange,
    },
    /// A rolling restart asked for at `at` (an RFC 3339 time).
    Restart { slice: String, at: String },
    /// Models put back as `documents` hold them (each a whole document's text, keyed
    /// by its kind and name), as of `revision` (`describe`d in the message).
    Restore {
        slice: String,
        revision: String,
        documents: Vec<RestoredDocument>,
    },
    /// A change of a host's Node model (StarlingX's host-label and lock actions).
    Host { host: String, change: HostChange },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostChange {
    /// Labels set (added, or given a new value).
    Label(Vec<(String, String)>),
    /// Labels removed, by key.
    Unlabel(Vec<String>),
    /// `locked: true` or `false`.
    Lock(bool),
}

/// A model's document as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredDocument {
    pub kind: String,
    pub name: String,
    pub text: String,
    /// The file it was in, relative to the models root.
    pub path: String,
}

/// The change an operation makes: files rewritten, and its commit message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// Paths relative to the models root, and their new text.
    pub writes: BTreeMap<String, String>,
    /// The commit message's first line, also what the CLI prints.
    pub summary: String,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum OperationError {
    #[error("no Slice named \"{name}\" in the models{}", hint_suffix(suggestion))]
    UnknownSlice {
        name: String,
        suggestion: Option<String>,
    },
    #[error(
        "Slice/{slice} is a record of what others run ({path}: xos_managed: false{}); tether does not own it, so it does not change it",
        owner.as_deref().map(|o| format!(", {o}")).unwrap_or_default()
    )]
    NotOwned {
        slice: String,
        path: String,
        owner: Option<String>,
    },
    #[error("Slice/{slice} {}: it has no replicas to {action}", controller_words(*controller))]
    NoReplicas {
        slice: String,
        controller: Option<ControllerKind>,
        action: &'static str,
    },
    #[error("Slice/{slice} has {from} replicas, and {from} - {} would be {}: a replica count is 0 or more", -by, from + by)]
    NegativeCount { slice: String, from: i64, by: i64 },
    /// `Kind/name` written twice.
    #[error("{model} is written twice in the models")]
    Duplicate { model: String },
    #[error(
        "no Node model named \"{name}\" in the models{}",
        hint_suffix(suggestion)
    )]
    UnknownHost {
        name: String,
        suggestion: Option<String>,
    },
    #[error("Node/{host} has no label {}", keys.join(", "))]
    NoSuchLabel { host: String, keys: Vec<String> },
    /// The edited models would not be valid: nothing is committed.
    #[error("the change would make {path} invalid:\n{report}")]
    Invalid { path: String, report: String },
    #[error("cannot edit {path}")]
    Edit {
        path: String,
        #[source]
        source: EditError,
    },
}

impl OperationError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            OperationError::NotOwned { .. } => Some(Remedy::ChangeWhereManaged),
            OperationError::UnknownSlice { .. } => Some(Remedy::ListModels),
            OperationError::UnknownHost { .. } => Some(Remedy::AddNodeModel),
            _ => None,
        }
    }
}

fn hint_suffix(suggestion: &Option<String>) -> String {
    suggestion
        .as_deref()
        .map(|s| format!("; {s}"))
        .unwrap_or_default()
}

fn controller_words(controller: Option<ControllerKind>) -> String {
    match controller {
        Some(kind) => format!("is a {}", kind.name()),
        None => "has no controller (its pods are bare)".to_string(),
    }
}

/// The edit that carries out `operation` on `files` (the branch's models now).
#[expect(
    clippy::too_many_lines,
    reason = "one edit of one slice: find it, then the same few steps for each operation"
)]
pub fn plan(files: &SourceFiles, operation: &Operation) -> Result<Edit, OperationError> {
    let models = read_models(files);
    let slice_name = match operation {
        Operation::Scale { slice, .. }
        | Operation::Restart { slice, .. }
        | Operation::Restore { slice, .. } => slice,
        Operation::Host { host, change } => return host_edit(&models, files, host, change),
    };
    let slice = find_slice(&models, files, slice_name)?;
    let path = files.get(slice.origin.span.file).path.clone();
    let text = &files.get(slice.origin.span.file).text;
    let name = slice.name.value.as_str();
    let model = ModelRef {
        kind: "Slice",
        name,
    };
    let edit_error = |source| OperationError::Edit {
        path: path.clone(),
        source,
    };
    let controller = slice.controller_kind.as_ref().map(|c| c.value);
    let (new_text, summary) = match operation {
        Operation::Scale { change, .. } => {
            if !matches!(
                controller,
                Some(ControllerKind::Deployment | ControllerKind::StatefulSet)
            ) {
                return Err(OperationError::NoReplicas {
                    slice: name.to_string(),
                    controller,
                    action: "scale",
                });
            }
            let from = slice
                .controller_replica_count
                .as_ref()
                .map_or(1, |c| c.value);
            let to = match *change {
                ReplicaChange::To(n) => n,
                ReplicaChange::By(by) if from + by < 0 => {
                    return Err(OperationError::NegativeCount {
                        slice: name.to_string(),
                        from,
                        by,
                    });
                }
                ReplicaChange::By(by) => from + by,
            };
            let path = ["controller_replica_count"];
            let edited = edit::set_field(text, model, &path, &Scalar::Int(to));
            (
                edited.map_err(edit_error)?,
                format!("scale: Slice/{name} {from} → {to}"),
            )
        }
        Operation::Restart { at, .. } => {
            if !matches!(
                controller,
                Some(
                    ControllerKind::Deployment
                        | ControllerKind::StatefulSet
                        | ControllerKind::DaemonSet
                )
            ) {
                return Err(OperationError::NoReplicas {
                    slice: name.to_string(),
                    controller,
                    action: "restart (recreate its pods one by one instead)",
                });
            }
            let edited = edit::set_field(text, model, &["restarted_at"], &Scalar::Str(at.clone()));
            (
                edited.map_err(edit_error)?,
                format!("restart: Slice/{name} at {at}"),
            )
        }
        Operation::Restore {
            revision,
            documents,
            ..
        } => return restore(&models, files, name, revision, documents),
        Operation::Host { host, change } => return host_edit(&models, files, host, change),
    };
    Ok(Edit {
        writes: BTreeMap::from([(path.clone(), new_text)]),
        summary,
    })
}

/// The edit of a host's Node model, checked as the models are: a label key or value
/// Kubernetes would refuse is reported at its place in the edited file, and
/// nothing is committed.
fn host_edit(
    models: &Models,
    files: &SourceFiles,
    name: &str,
    change: &HostChange,
) -> Result<Edit, OperationError> {
    let hosts: Vec<&Host> = models
        .hosts
        .iter()
        .filter(|h| h.name.value == name)
        .collect();
    let host = match hosts.as_slice() {
        [one] => *one,
        [] => {
            return Err(OperationError::UnknownHost {
                name: name.to_string(),
                suggestion: suggestion(name, models.hosts.iter().map(|h| h.name.value.as_str())),
            });
        }
        _ => {
            return Err(OperationError::Duplicate {
                model: format!("Node/{name}"),
            });
        }
    };
    let file = files.get(host.origin.span.file);
    let path = file.path.clone();
    let model = ModelRef { kind: "Node", name };
    let edit_error = |source| OperationError::Edit {
        path: path.clone(),
        source,
    };
    let mut text = file.text.clone();
    let summary = match change {
        HostChange::Label(labels) => {
            for (key, value) in labels {
                let value = Scalar::Str(value.clone());
                text =
                    edit::set_field(&text, model, &["labels", key], &value).map_err(edit_error)?;
            }
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("label: Node/{name} {}", pairs.join(" "))
        }
        HostChange::Unlabel(keys) => {
            let mut missing = Vec::new();
            for key in keys {
                match edit::remove_field(&text, model, &["labels", key]).map_err(edit_error)? {
                    Some(edited) => text = edited,
                    None => missing.push(key.clone()),
                }
            }
            if !missing.is_empty() {
                return Err(OperationError::NoSuchLabel {
                    host: name.to_string(),
                    keys: missing,
                });
            }
            format!("unlabel: Node/{name} {}", keys.join(" "))
        }
        HostChange::Lock(locked) => {
            text = edit::set_field(&text, model, &["locked"], &Scalar::Bool(*locked))
                .map_err(edit_error)?;
            match locked {
                true => format!("lock: Node/{name}"),
                false => format!("unlock: Node/{name}"),
            }
        }
    };
    // Unlocking a host that is not locked (no `locked` written) changes nothing.
    let same = text == file.text || matches!(change, HostChange::Lock(l) if *l == host.is_locked());
    if same {
        return Ok(Edit {
            writes: BTreeMap::new(),
            summary,
        });
    }
    check_host_file(files, host, &text)?;
    Ok(Edit {
        writes: BTreeMap::from([(path, text)]),
        summary,
    })
}

/// The problems the edit brings into the host's model (those it had before aside).
fn check_host_file(files: &SourceFiles, host: &Host, edited: &str) -> Result<(), OperationError> {
    let file = files.get(host.origin.span.file);
    let problems = |text: &str| {
        let one = SourceFiles::from_files(vec![SourceFile::new(file.path.clone(), text)]);
        let (documents, load) = crate::load::load(&one);
        let (_, mut read) = crate::model::read_models(&one, &documents);
        read.extend(load);
        let label = format!("Node \"{}\"", host.name.value);
        let mine: Vec<Diagnostic> = read
            .sorted(&one)
            .into_iter()
            .filter(|d| d.severity == Severity::Error && d.model.as_deref() == Some(&label))
            .cloned()
            .collect();
        (one, mine)
    };
    let (_, before) = problems(&file.text);
    let (edited_files, after) = problems(edited);
    let mut new = Diagnostics::default();
    for problem in after {
        if !before.iter().any(|b| b.message == problem.message) {
            new.push(problem);
        }
    }
    match new.has_errors() {
        true => Err(OperationError::Invalid {
            path: file.path.clone(),
            report: new.render_plain(&edited_files),
        }),
        false => Ok(()),
    }
}

/// The models of `files`, read as far as they read: an operation needs only the
/// model it names to be sound, and the apply after it validates the rest.
pub fn read_models(files: &SourceFiles) -> Models {
    let (documents, _) = crate::load::load(files);
    crate::model::read_models(files, &documents).0
}

/// Puts each document back in its model's file (the Slice's, and the Images it ran).
fn restore(
    models: &Models,
    files: &SourceFiles,
    slice: &str,
    revision: &str,
    documents: &[RestoredDocument],
) -> Result<Edit, OperationError> {
    let mut writes: BTreeMap<String, String> = BTreeMap::new();
    for document in documents {
        let model = ModelRef {
            kind: &document.kind,
            name: &document.name,
        };
        let Some(file) = file_of(models, model) else {
            continue;
        };
        let path = files.get(file).path.clone();
        let text = writes
            .get(&path)
            .cloned()
            .unwrap_or_else(|| files.get(file).text.clone());
        let edited = edit::replace_document(&text, model, &document.text).map_err(|source| {
            OperationError::Edit {
                path: path.clone(),
                source,
            }
        })?;
        if edited != files.get(file).text {
            writes.insert(path, edited);
        } else {
            writes.remove(&path);
        }
    }
    Ok(Edit {
        writes,
        summary: format!("rollback: Slice/{slice} to {revision}"),
    })
}

/// The file of a Slice or an Image model (the kinds a rollback puts back).
fn file_of(models: &Models, model: ModelRef<'_>) -> Option<crate::source::FileId> {
    let origin = match model.kind {
        "Slice" => models
            .slices
            .iter()
            .find(|s| s.name.value == model.name)
            .map(|s| s.origin),
        "Image" => models
            .images
            .iter()
            .find(|i| i.name.value == model.name)
            .map(|i| i.origin),
        _ => None,
    }?;
    Some(origin.span.file)
}

/// The controller a Slice that tether owns renders: its kind, namespace and name.
pub fn controller_of(
    files: &SourceFiles,
    name: &str,
) -> Result<(ControllerKind, String, String), OperationError> {
    let models = read_models(files);
    let slice = find_slice(&models, files, name)?;
    match (&slice.controller_kind, &slice.trust_domain) {
        (Some(kind), Some(namespace)) if kind.value != ControllerKind::Job => Ok((
            kind.value,
            namespace.value.clone(),
            slice.name.value.clone(),
        )),
        (kind, _) => Err(OperationError::NoReplicas {
            slice: name.to_string(),
            controller: kind.as_ref().map(|k| k.value),
            action: "roll out",
        }),
    }
}

/// Checks that `files` hold a Slice named `name` that tether owns.
pub fn owned_slice(files: &SourceFiles, name: &str) -> Result<(), OperationError> {
    let models = read_models(files);
    find_slice(&models, files, name).map(|_| ())
}

/// The Slice named `name`, if tether owns it.
pub fn find_slice<'m>(
    models: &'m Models,
    files: &SourceFiles,
    name: &str,
) -> Result<&'m Slice, OperationError> {
    let found: Vec<&Slice> = models
        .slices
        .iter()
        .filter(|s| s.name.value == name)
        .collect();
    let slice = match found.as_slice() {
        [one] => *one,
        [] => {
            return Err(OperationError::UnknownSlice {
                name: name.to_string(),
                suggestion: suggestion(name, models.slices.iter().map(|s| s.name.value.as_str())),
            });
        }
        _ => {
            return Err(OperationError::Duplicate {
                model: format!("Slice/{name}"),
            });
        }
    };
    if !slice.is_managed() {
        return Err(OperationError::NotOwned {
            slice: name.to_string(),
            path: files.get(slice.origin.span.file).path.clone(),
            owner: slice.description.as_ref().map(|d| d.value.clone()),
        });
    }
    Ok(slice)
}

/// What a rollback puts back of a slice: its document, and the document of the
/// Image it runs when one Image has that name (several tags of one name are
/// separate models a slice chooses between, and its own document says which).
pub fn rollout_state(files: &SourceFiles, slice: &str) -> Option<Vec<RestoredDocument>> {
    let models = read_models(files);
    let found = find_slice(&models, files, slice).ok()?;
    let document = |kind: &str, name: &str, file| {
        let text = &files.get(file).text;
        let model = ModelRef { kind, name };
        edit::document_text(text, model)
            .ok()
            .map(|text| RestoredDocument {
                kind: kind.to_string(),
                name: name.to_string(),
                text: text.to_string(),
                path: files.path(file).to_string(),
            })
    };
    let mut state = vec![document("Slice", slice, found.origin.span.file)?];
    if let Some(reference) = &found.default_image {
        let (name, _) = crate::model::split_image_reference(&reference.value);
        let images: Vec<_> = models
            .images
            .iter()
            .filter(|i| i.name.value == name)
            .collect();
        if let [image] = images.as_slice() {
            state.extend(document("Image", name, image.origin.span.file));
        }
    }
    Some(state)
}

/// Do two states hold the same models (comments and layout aside)?
pub fn same_state(a: &[RestoredDocument], b: &[RestoredDocument]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.kind == b.kind && a.name == b.name && edit::same_document(&a.text, &b.text)
        })
}
