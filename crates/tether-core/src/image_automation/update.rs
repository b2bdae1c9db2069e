//! Writing the images that policies chose into the repository's files: where a policy
//! writes (its [`Target`]s: the Image models of its image, the values marked with its
//! name), the format-preserving edit of a set of [`Update`]s, and the commit message
//! that says which policy chose what, from what (a `Tether-Image-Policy` trailer per
//! policy). Pure.
//!
//! Every edit changes the bytes of one value and nothing else: comments, layout, quoting,
//! other documents and line endings stay as written. An Image model's `tag` (and
//! `digest`) are set by name (`edit::set_field`), and the references `name:old` of
//! Slices and KubernetesServiceInstances follow; a marked value is replaced where the
//! parser placed it. A value in a sops-encrypted file is never rewritten (its MAC would
//! break): an update that needs one is refused as sealed.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use super::markers::{self, Located, MarkerError, MarkerField};
use crate::edit::{self, EditError, ModelRef, Scalar};
use crate::load::{Dialect, Node, parse_yaml};
use crate::model::split_image_reference;
use crate::operation::Edit;
use crate::source::{Sealing, SourceFiles};

/// Where a policy's image is written in the repository, and its value now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub path: String,
    /// The Image model's document, or the marked value (1-based).
    pub line: u32,
    pub column: u32,
    pub place: Place,
    /// The tag written there (`latest` for an Image model or reference without one);
    /// empty where the place holds no tag (a `:name` or `:digest` marker).
    pub current_tag: String,
    pub current_digest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The Image model (name, tag), whose references follow it.
    ImageModel { name: String, tag: String },
    /// A value marked `# tether:image-policy <policy>[:field]`.
    Marker(MarkerField),
}

/// One chosen change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub policy: String,
    /// The image repository the policy follows.
    pub image: String,
    pub target: Target,
    pub to_tag: String,
    pub to_digest: Option<String>,
    /// Why the policy chose it (the decision's words).
    pub why: String,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum UpdateError {
    #[error(
        "image policy {policy} writes nowhere: no Image model is named {image}, and no value is marked `# {marker} {policy}`",
        marker = markers::MARKER
    )]
    NoTarget { policy: String, image: String },
    #[error(transparent)]
    Marker(#[from] MarkerError),
    #[error(
        "{path}:{line}:{column}: the value marked for image policy {policy} names the repository {written}, not the policy's {image}; write {image} there, or mark it for another policy"
    )]
    OtherRepository {
        path: String,
        line: u32,
        column: u32,
        policy: String,
        image: String,
        written: String,
    },
    #[error(
        "{path}: Image {name}:{to} is a model already; updating Image {name}:{from} to {to} would write it twice"
    )]
    Duplicate {
        path: String,
        name: String,
        from: String,
        to: String,
    },
    #[error(
        "{path}:{line}:{column}: the value is in a sops-encrypted file (sealed): tether does not rewrite a sealed file, whose MAC would break; move the value to a plain file, or update it by hand"
    )]
    Sealed {
        path: String,
        line: u32,
        column: u32,
    },
    #[error(
        "{path}:{line}:{column}: the value marked `{policy}:digest` needs a digest, and image policy {policy} chose none"
    )]
    NoDigest {
        path: String,
        line: u32,
        column: u32,
        policy: String,
    },
    #[error(
        "{path}:{line}:{column}: the value image policy {policy} read there has changed since (the files are not those its targets came from)"
    )]
    Moved {
        path: String,
        line: u32,
        column: u32,
        policy: String,
    },
    #[error(
        "{path}:{line}:{column}: two updates write different values here: {first} and {second}"
    )]
    Conflict {
        path: String,
        line: u32,
        column: u32,
        first: String,
        second: String,
    },
    #[error("cannot edit {path}")]
    Edit {
        path: String,
        #[source]
        source: EditError,
    },
}

/// Every place policy `policy` (for image repository `image`) writes: the Image models
/// with that name, and the values marked with the policy. An error when there is none,
/// when a marker of the policy cannot be used, or when a marked value names another
/// repository.
pub fn targets(files: &SourceFiles, policy: &str, image: &str) -> Result<Vec<Target>, UpdateError> {
    Places::read(files).targets(policy, image)
}

/// The places any policy may write, read from the files once: the Image models and
/// the marked values. Many policies are answered without parsing the files again.
pub struct Places {
    models: Vec<ImageModel>,
    located: Vec<Located>,
    errors: Vec<MarkerError>,
}

impl Places {
    pub fn read(files: &SourceFiles) -> Places {
        let (located, errors) = markers::find_located(files);
        Places {
            models: image_models(files),
            located,
            errors,
        }
    }

    /// What [`targets`] says of `policy`.
    pub fn targets(&self, policy: &str, image: &str) -> Result<Vec<Target>, UpdateError> {
        let mut targets: Vec<Target> = self
            .models
            .iter()
            .filter(|model| model.name == image)
            .map(|model| model.target.clone())
            .collect();
        if let Some(error) = self
            .errors
            .iter()
            .find(|e| e.policy.as_deref() == Some(policy))
        {
            return Err(error.clone().into());
        }
        for found in self.located.iter().filter(|l| l.marker.policy == policy) {
            targets.push(marker_target(found, image)?);
        }
        match targets.is_empty() {
            true => Err(UpdateError::NoTarget {
                policy: policy.to_string(),
                image: image.to_string(),
            }),
            false => Ok(targets),
        }
    }
}

/// The target a marked value is, checked against the policy's image.
fn marker_target(found: &Located, image: &str) -> Result<Target, UpdateError> {
    let marker = &found.marker;
    let other_repository = |written: &str| UpdateError::OtherRepository {
        path: marker.path.clone(),
        line: marker.line,
        column: marker.column,
        policy: marker.policy.clone(),
        image: image.to_string(),
        written: written.to_string(),
    };
    let (current_tag, current_digest) = match marker.field {
        MarkerField::Image => {
            let (repository, tag, digest) = split_reference(&marker.value);
            if repository != image {
                return Err(other_repository(repository));
            }
            (
                tag.unwrap_or("latest").to_string(),
                digest.map(String::from),
            )
        }
        MarkerField::Name if marker.value != image => return Err(other_repository(&marker.value)),
        MarkerField::Name => (String::new(), None),
        MarkerField::Tag => (marker.value.clone(), None),
        MarkerField::Digest => (String::new(), Some(marker.value.clone())),
    };
    Ok(Target {
        path: marker.path.clone(),
        line: marker.line,
        column: marker.column,
        place: Place::Marker(marker.field),
        current_tag,
        current_digest,
    })
}

/// `repository[:tag][@digest]` in its parts.
fn split_reference(reference: &str) -> (&str, Option<&str>, Option<&str>) {
    let (named, digest) = match reference.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (reference, None),
    };
    let (repository, tag) = split_image_reference(named);
    (repository, tag, digest)
}

/// An Image model as written: its name, and the target it is.
struct ImageModel {
    name: String,
    /// Where its document starts in its file's text.
    offset: usize,
    target: Target,
}

/// A model document of kind `kind` (a model, not a Kubernetes object of that kind).
fn is_model(root: &Node, kind: &str) -> bool {
    root.field("apiVersion").is_none()
        && root
            .field("kind")
            .is_some_and(|k| k.value == crate::load::Value::Str(kind.to_string()))
}

fn text_field(root: &Node, text: &str, field: &str) -> Option<String> {
    root.field(field).and_then(|n| n.scalar_text(text))
}

/// The Image models of `text` (a model file's).
fn image_models_in(path: &str, text: &str) -> Vec<ImageModel> {
    let Ok(documents) = parse_yaml(text, Dialect::Models) else {
        return Vec::new();
    };
    documents
        .iter()
        .filter(|root| is_model(root, "Image"))
        .filter_map(|root| {
            let name = text_field(root, text, "name")?;
            let tag = text_field(root, text, "tag").unwrap_or_else(|| "latest".to_string());
            Some(ImageModel {
                offset: root.pos.offset as usize,
                target: Target {
                    path: path.to_string(),
                    line: root.pos.line,
                    column: root.pos.column,
                    place: Place::ImageModel {
                        name: name.clone(),
                        tag: tag.clone(),
                    },
                    current_tag: tag,
                    current_digest: text_field(root, text, "digest"),
                },
                name,
            })
        })
        .collect()
}

/// The paths of the model files (not a kustomization's, a chart's or a values file).
fn model_paths(files: &SourceFiles) -> BTreeSet<String> {
    let (_, documents, _) = crate::model_documents(files, true);
    documents
        .iter()
        .map(|d| files.path(d.file).to_string())
        .collect()
}

fn image_models(files: &SourceFiles) -> Vec<ImageModel> {
    model_paths(files)
        .iter()
        .filter_map(|path| files.by_path(path))
        .flat_map(|(_, file)| image_models_in(&file.path, &file.text))
        .collect()
}

/// The repository's texts as an edit goes: what is written so far, else as read.
struct Texts<'f> {
    files: &'f SourceFiles,
    written: BTreeMap<String, String>,
}

impl<'f> Texts<'f> {
    fn get(&self, path: &str) -> Option<&str> {
        match self.written.get(path) {
            Some(text) => Some(text),
            None => self.as_read(path),
        }
    }

    /// The text of a model file or a data file as the edit found it.
    fn as_read(&self, path: &str) -> Option<&str> {
        match self.files.by_path(path) {
            Some((_, file)) => Some(&file.text),
            None => self
                .files
                .assets()
                .get(path)
                .and_then(|bytes| std::str::from_utf8(bytes).ok()),
        }
    }

    fn is_sealed(&self, path: &str) -> bool {
        self.files
            .by_path(path)
            .is_some_and(|(_, file)| !matches!(file.sealing, Sealing::Plain))
    }

    fn put(&mut self, path: &str, text: String) {
        self.written.insert(path.to_string(), text);
    }
}

/// The edit of all `updates` (one commit): for an Image model, its `tag` (and `digest`)
/// set in place and every reference `name:old` of a Slice's `default_image` or a
/// KubernetesServiceInstance's `image` rewritten to `name:new` (bare `name` references
/// follow by themselves); for a marker, the marked value replaced in place. Refused:
/// an Image (name, new tag) that is a model already, a sealed file to rewrite, a value
/// that is no longer what its target read.
pub fn plan(files: &SourceFiles, updates: &[Update]) -> Result<Edit, UpdateError> {
    let mut texts = Texts {
        files,
        written: BTreeMap::new(),
    };
    // Markers first: a marked value's edit moves no line, so the others' positions hold.
    write_markers(&mut texts, updates)?;
    let models = model_paths(files);
    for update in updates {
        if let Place::ImageModel { name, tag } = &update.target.place {
            write_image_model(&mut texts, &models, update, name, tag)?;
        }
    }
    check_no_duplicates(&texts, &models, updates)?;
    let writes = texts
        .written
        .iter()
        .filter(|(path, text)| texts.as_read(path) != Some(text.as_str()))
        .map(|(path, text)| (path.clone(), text.clone()))
        .collect();
    Ok(Edit {
        writes,
        summary: message(updates)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
    })
}

/// The marked values of `updates`, replaced in place, file by file.
fn write_markers(texts: &mut Texts<'_>, updates: &[Update]) -> Result<(), UpdateError> {
    let mut by_path: BTreeMap<&str, Vec<&Update>> = BTreeMap::new();
    for update in updates {
        if matches!(update.target.place, Place::Marker(_)) {
            by_path.entry(&update.target.path).or_default().push(update);
        }
    }
    for (path, updates) in by_path {
        let Some(text) = texts.get(path) else {
            return Err(moved(updates[0]));
        };
        let (mut located, mut errors) = (Vec::new(), Vec::new());
        markers::in_text(path, text, texts.is_sealed(path), &mut located, &mut errors);
        // (start, end, new text): one per value, however many updates name it.
        let mut replacements: BTreeMap<usize, (usize, String)> = BTreeMap::new();
        for update in updates {
            let found = located
                .iter()
                .find(|l| {
                    l.marker.policy == update.policy
                        && (l.marker.line, l.marker.column)
                            == (update.target.line, update.target.column)
                })
                .filter(|l| marker_target(l, &update.image).ok().as_ref() == Some(&update.target))
                .ok_or_else(|| moved(update))?;
            if found.marker.sealed {
                return Err(UpdateError::Sealed {
                    path: path.to_string(),
                    line: found.marker.line,
                    column: found.marker.column,
                });
            }
            let new = marker_value(found, update)?;
            let spelled = edit::spell_string(&new, Some(&text[found.range.clone()]));
            let end = found.range.end;
            match replacements.insert(found.range.start, (end, spelled.clone())) {
                Some((_, earlier)) if earlier != spelled => {
                    return Err(UpdateError::Conflict {
                        path: path.to_string(),
                        line: found.marker.line,
                        column: found.marker.column,
                        first: earlier,
                        second: spelled,
                    });
                }
                _ => {}
            }
        }
        let mut edited = text.to_string();
        for (start, (end, spelled)) in replacements.into_iter().rev() {
            edited.replace_range(start..end, &spelled);
        }
        texts.put(path, edited);
    }
    Ok(())
}

fn moved(update: &Update) -> UpdateError {
    UpdateError::Moved {
        path: update.target.path.clone(),
        line: update.target.line,
        column: update.target.column,
        policy: update.policy.clone(),
    }
}

/// What a marked value becomes.
fn marker_value(found: &Located, update: &Update) -> Result<String, UpdateError> {
    let marker = &found.marker;
    let with_digest = |named: String| match &update.to_digest {
        Some(digest) => format!("{named}@{digest}"),
        None => named,
    };
    Ok(match marker.field {
        MarkerField::Image => with_digest(format!("{}:{}", update.image, update.to_tag)),
        MarkerField::Tag => update.to_tag.clone(),
        MarkerField::Name => update.image.clone(),
        MarkerField::Digest => update
            .to_digest
            .clone()
            .ok_or_else(|| UpdateError::NoDigest {
                path: marker.path.clone(),
                line: marker.line,
                column: marker.column,
                policy: update.policy.clone(),
            })?,
    })
}

/// An Image model's tag and digest set, and the references to it rewritten.
fn write_image_model(
    texts: &mut Texts<'_>,
    models: &BTreeSet<String>,
    update: &Update,
    name: &str,
    tag: &str,
) -> Result<(), UpdateError> {
    let path = update.target.path.as_str();
    let text = texts.get(path).ok_or_else(|| moved(update))?;
    // Found where it was read; its tag may have been written already, by a marker of
    // the same policy on the model's own `tag` line.
    let at = (update.target.line, update.target.column);
    let model = image_models_in(path, text)
        .into_iter()
        .find(|m| m.name == name && (m.target.line, m.target.column) == at)
        .filter(|m| [tag, update.to_tag.as_str()].contains(&m.target.current_tag.as_str()))
        .ok_or_else(|| moved(update))?;
    let unchanged = update.to_tag == tag && update.to_digest == update.target.current_digest;
    if unchanged {
        return Ok(());
    }
    if texts.is_sealed(path) {
        return Err(UpdateError::Sealed {
            path: path.to_string(),
            line: model.target.line,
            column: model.target.column,
        });
    }
    let edit_error = |source| UpdateError::Edit {
        path: path.to_string(),
        source,
    };
    let edited = edit::in_document(text, model.offset, |document| {
        let image = ModelRef {
            kind: "Image",
            name,
        };
        let document = edit::set_field(
            document,
            image,
            &["tag"],
            &Scalar::Str(update.to_tag.clone()),
        )?;
        match &update.to_digest {
            Some(digest) => {
                edit::set_field(&document, image, &["digest"], &Scalar::Str(digest.clone()))
            }
            None => Ok(edit::remove_field(&document, image, &["digest"])?.unwrap_or(document)),
        }
    })
    .map_err(edit_error)?;
    texts.put(path, edited);
    if update.to_tag != tag {
        let from = format!("{name}:{tag}");
        let to = format!("{name}:{}", update.to_tag);
        for path in models {
            rewrite_references(texts, path, &from, &to)?;
        }
    }
    Ok(())
}

/// The models' fields that name an Image: `(kind, field)`.
const REFERENCES: [(&str, &str); 2] = [
    ("Slice", "default_image"),
    ("KubernetesServiceInstance", "image"),
];

/// Every reference `from` in a model file rewritten to `to`, document by document.
fn rewrite_references(
    texts: &mut Texts<'_>,
    path: &str,
    from: &str,
    to: &str,
) -> Result<(), UpdateError> {
    let edit_error = |source| UpdateError::Edit {
        path: path.to_string(),
        source,
    };
    loop {
        let Some(text) = texts.get(path) else {
            return Ok(());
        };
        let Ok(documents) = parse_yaml(text, Dialect::Models) else {
            return Ok(());
        };
        let found = documents.iter().find_map(|root| {
            REFERENCES.iter().find_map(|(kind, field)| {
                let is_reference =
                    is_model(root, kind) && text_field(root, text, field).as_deref() == Some(from);
                is_reference.then_some((root, *kind, *field))
            })
        });
        let Some((root, kind, field)) = found else {
            return Ok(());
        };
        if texts.is_sealed(path) {
            let at = root.field(field).map_or(root.pos, |n| n.pos);
            return Err(UpdateError::Sealed {
                path: path.to_string(),
                line: at.line,
                column: at.column,
            });
        }
        let name = text_field(root, text, "name").unwrap_or_default();
        let edited = edit::in_document(text, root.pos.offset as usize, |document| {
            let model = ModelRef { kind, name: &name };
            edit::set_field(document, model, &[field], &Scalar::Str(to.to_string()))
        })
        .map_err(edit_error)?;
        texts.put(path, edited);
    }
}

/// Refuses an update that makes an Image (name, tag) a model twice.
fn check_no_duplicates(
    texts: &Texts<'_>,
    models: &BTreeSet<String>,
    updates: &[Update],
) -> Result<(), UpdateError> {
    let images: Vec<ImageModel> = models
        .iter()
        .filter_map(|path| texts.get(path).map(|text| image_models_in(path, text)))
        .flatten()
        .collect();
    for update in updates {
        let Place::ImageModel { name, tag } = &update.target.place else {
            continue;
        };
        let same = |m: &&ImageModel| m.name == *name && m.target.current_tag == update.to_tag;
        if images.iter().filter(same).count() > 1 {
            return Err(UpdateError::Duplicate {
                path: update.target.path.clone(),
                name: name.clone(),
                from: tag.clone(),
                to: update.to_tag.clone(),
            });
        }
    }
    Ok(())
}

/// The trailer that names a policy an image commit updated (one per policy).
pub const POLICY_TRAILER: &str = "Tether-Image-Policy";

/// A version as a message shows it: `tag`, `tag@sha256:0123456789ab` (digests cut
/// to 12 digits when `short`), the digest alone, or `(nothing)`.
fn shown(tag: &str, digest: Option<&str>, short: bool) -> String {
    let digest = digest.map(|d| match short {
        true => short_digest(d),
        false => d,
    });
    match (tag, digest) {
        ("", None) => "(nothing)".to_string(),
        ("", Some(digest)) => digest.to_string(),
        (tag, Some(digest)) => format!("{tag}@{digest}"),
        (tag, None) => tag.to_string(),
    }
}

/// `sha256:` and the first 12 hex digits.
fn short_digest(digest: &str) -> &str {
    let end = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..end).unwrap_or(digest)
}

/// The updates of one policy to one version: written at one place or several.
struct Change<'u> {
    policy: &'u str,
    image: &'u str,
    to_tag: &'u str,
    to_digest: Option<&'u str>,
    updates: Vec<&'u Update>,
}

impl Change<'_> {
    /// What was written before, as the places that hold a version had it (a
    /// `:name` marker holds none).
    fn from(&self, short: bool) -> String {
        let mut froms: Vec<String> = Vec::new();
        for update in &self.updates {
            let target = &update.target;
            if target.place == Place::Marker(MarkerField::Name) {
                continue;
            }
            let from = shown(&target.current_tag, target.current_digest.as_deref(), short);
            if !froms.contains(&from) {
                froms.push(from);
            }
        }
        match froms.is_empty() {
            true => "(nothing)".to_string(),
            false => froms.join(", "),
        }
    }

    fn to(&self, short: bool) -> String {
        shown(self.to_tag, self.to_digest, short)
    }
}

fn changes(updates: &[Update]) -> Vec<Change<'_>> {
    let mut changes: Vec<Change<'_>> = Vec::new();
    for update in updates {
        let same = |c: &&mut Change<'_>| {
            (c.policy, c.image, c.to_tag, c.to_digest)
                == (
                    update.policy.as_str(),
                    update.image.as_str(),
                    update.to_tag.as_str(),
                    update.to_digest.as_deref(),
                )
        };
        match changes.iter_mut().find(same) {
            Some(change) => change.updates.push(update),
            None => changes.push(Change {
                policy: &update.policy,
                image: &update.image,
                to_tag: &update.to_tag,
                to_digest: update.to_digest.as_deref(),
                updates: vec![update],
            }),
        }
    }
    changes
}

/// The commit message: a first line `images: <policy> <image> <from> → <to>` (or
/// `images: N updates` when several policies or versions change); a body with, per
/// change, the policy, what it chose, from what, why, and where it is written; a
/// trailer `Tether-Image-Policy: <policy>` per policy.
pub fn message(updates: &[Update]) -> String {
    let changes = changes(updates);
    let subject = match changes.as_slice() {
        [one] => format!(
            "images: {} {} {} → {}",
            one.policy,
            one.image,
            one.from(true),
            one.to(true)
        ),
        _ => format!("images: {} updates", changes.len()),
    };
    let mut message = format!("{subject}\n");
    for change in &changes {
        message.push_str(&format!(
            "\n{policy} ({image}) chose {to}, was {from}: {why}\n",
            policy = change.policy,
            image = change.image,
            to = change.to(false),
            from = change.from(false),
            why = change.updates[0].why,
        ));
        for update in &change.updates {
            let target = &update.target;
            let place = match &target.place {
                Place::ImageModel { name, tag } => format!("Image {name}:{tag}"),
                Place::Marker(field) => format!("marker {}{}", update.policy, field.suffix()),
            };
            message.push_str(&format!(
                "- {}:{}:{} ({place})\n",
                target.path, target.line, target.column
            ));
        }
    }
    let policies: BTreeSet<&str> = updates.iter().map(|u| u.policy.as_str()).collect();
    message.push('\n');
    for policy in policies {
        message.push_str(&format!("{POLICY_TRAILER}: {policy}\n"));
    }
    message
}
