//! Marker comments: `# tether:image-policy <policy>[:tag|:name|:digest]` on the line of
//! a YAML value, in any YAML file of the repository (plain manifests, kustomizations'
//! `images:`, Helm values files, models, YAML data files), says that policy writes
//! that value. Pure.
//!
//! A marker is found with the parser's spans, never by a pattern over the line: a `#`
//! inside a scalar (a quoted string, a block scalar's text) is text, not a comment,
//! and the value a marker names is the one scalar the parser places on its line
//! before the comment. What cannot be rewritten in place (a block scalar, a value
//! over several lines, several values of a flow collection on the line, an anchor or
//! an alias) is an error located at the marker.

use thiserror::Error;

use crate::load::{Dialect, Node, Value, parse_yaml};
use crate::source::{Sealing, SourceFiles};

/// The word a marker comment starts with.
pub const MARKER: &str = "tether:image-policy";

/// One marker and the value it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    /// The file, relative to the models root.
    pub path: String,
    /// Where the value starts (1-based; the column counts characters).
    pub line: u32,
    pub column: u32,
    pub policy: String,
    pub field: MarkerField,
    /// The value's text as it means (quotes taken off).
    pub value: String,
    /// The file is sops-encrypted: the marker may be read, its value not rewritten.
    pub sealed: bool,
}

/// What part of an image reference a marked value holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerField {
    /// A whole reference: `repository:tag` or `repository:tag@sha256:…`.
    Image,
    /// The tag alone.
    Tag,
    /// The repository alone.
    Name,
    /// A digest alone (`sha256:…`).
    Digest,
}

impl MarkerField {
    /// The suffix that names the field in a marker (`:tag`), empty for a whole reference.
    pub fn suffix(self) -> &'static str {
        match self {
            MarkerField::Image => "",
            MarkerField::Tag => ":tag",
            MarkerField::Name => ":name",
            MarkerField::Digest => ":digest",
        }
    }
}

/// A marker that cannot be used, where it is written.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{path}:{line}:{column}: {problem}")]
pub struct MarkerError {
    pub path: String,
    pub line: u32,
    pub column: u32,
    /// The policy the marker names, when it names one.
    pub policy: Option<String>,
    pub problem: MarkerProblem,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum MarkerProblem {
    #[error(
        "the marker names no policy: write `# {MARKER} <policy>` (or <policy>:tag, :name, :digest)"
    )]
    NoPolicy,
    #[error(
        "the marker's field \"{0}\" is not one of :tag, :name, :digest (nothing after the policy means a whole image reference)"
    )]
    UnknownField(String),
    #[error(
        "the marker has text after its policy (\"{0}\"); a marker is `# {MARKER} <policy>[:field]` alone"
    )]
    TrailingText(String),
    #[error("the marker's line holds no value to update; put the marker on the line of the value")]
    NoValue,
    #[error("cannot update a value that is {what}; put it on its own line")]
    NotInPlace { what: &'static str },
    #[error("cannot update a value that is {what}; write the value itself on the marker's line")]
    Shared { what: &'static str },
    #[error("the file does not parse (line {line}, column {column}): {message}")]
    Syntax {
        line: u32,
        column: u32,
        message: String,
    },
}

/// One value a marker may rewrite: its byte range in its file's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    pub marker: Marker,
    pub range: std::ops::Range<usize>,
}

/// Every marker of the repository's YAML files (models, plain manifests,
/// kustomizations, charts' values, YAML data files), and those that cannot be used.
/// Files without a marker are not parsed. A sops-encrypted file's markers are read
/// (from its opened text, or its structure when no key opened it) and marked
/// `sealed`: they are an error only when an update would rewrite them; a file that
/// could not be read at all is passed over.
pub fn find(files: &SourceFiles) -> (Vec<Marker>, Vec<MarkerError>) {
    let (located, errors) = find_located(files);
    (located.into_iter().map(|l| l.marker).collect(), errors)
}

pub(crate) fn find_located(files: &SourceFiles) -> (Vec<Located>, Vec<MarkerError>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for (_, file) in files.iter() {
        let sealed = match &file.sealing {
            Sealing::Plain => false,
            Sealing::Opened { .. } | Sealing::Unopened { .. } => true,
            Sealing::Closed(_) => continue,
        };
        in_text(&file.path, &file.text, sealed, &mut found, &mut errors);
    }
    for (path, bytes) in files.assets() {
        let is_yaml = path.ends_with(".yaml") || path.ends_with(".yml");
        if let (true, Ok(text)) = (is_yaml, std::str::from_utf8(bytes)) {
            in_text(path, text, false, &mut found, &mut errors);
        }
    }
    (found, errors)
}

/// The markers of one file's text.
pub(crate) fn in_text(
    path: &str,
    text: &str,
    sealed: bool,
    found: &mut Vec<Located>,
    errors: &mut Vec<MarkerError>,
) {
    if !text.contains(MARKER) {
        return;
    }
    let documents = match parse_yaml(text, Dialect::Models) {
        Ok(documents) => documents,
        Err(e) => {
            errors.push(MarkerError {
                path: path.to_string(),
                line: e.line,
                column: e.column,
                policy: None,
                problem: MarkerProblem::Syntax {
                    line: e.line,
                    column: e.column,
                    message: e.message,
                },
            });
            return;
        }
    };
    let scalars = Scalars::of(&documents, text);
    let mut line_start = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let line_number = crate::source::to_u32(index + 1);
        if let Some(hash) = comment_start(text, line_start, line, &scalars)
            && let Some(comment) = marker_words(&text[hash + 1..line_start + line.len()])
        {
            let at = |offset: usize| position(text, offset, line_number, line_start);
            let error = |offset: usize, policy: Option<String>, problem| {
                let (line, column) = at(offset);
                MarkerError {
                    path: path.to_string(),
                    line,
                    column,
                    policy,
                    problem,
                }
            };
            match parse_marker(comment) {
                Err(problem) => errors.push(error(hash, None, problem)),
                Ok((policy, field)) => match value_on_line(text, line_start..hash, &scalars) {
                    Ok(node) => {
                        let (line, column) = at(node.pos.offset as usize);
                        let start = node.pos.offset as usize;
                        found.push(Located {
                            marker: Marker {
                                path: path.to_string(),
                                line,
                                column,
                                policy,
                                field,
                                value: node.scalar_text(text).unwrap_or_default(),
                                sealed,
                            },
                            range: start..start + node.pos.len as usize,
                        });
                    }
                    Err(problem) => errors.push(error(hash, Some(policy), problem)),
                },
            }
        }
        line_start += line.len();
    }
}

/// Line and character column of `offset`, which is on the line starting at `line_start`.
fn position(text: &str, offset: usize, line: u32, line_start: usize) -> (u32, u32) {
    let column = text[line_start..offset].chars().count() + 1;
    (line, crate::source::to_u32(column))
}

/// The scalars of a file, keys and values, with where each sits.
struct Scalars<'n> {
    /// Every scalar's byte range (keys too): a `#` inside one is text.
    spans: Vec<std::ops::Range<usize>>,
    /// Values (not keys), each with whether a flow collection holds it.
    values: Vec<(&'n Node, bool)>,
}

impl<'n> Scalars<'n> {
    fn of(documents: &'n [Node], text: &str) -> Self {
        let mut scalars = Scalars {
            spans: Vec::new(),
            values: Vec::new(),
        };
        for document in documents {
            scalars.add(document, text, false, false);
        }
        scalars
    }

    fn add(&mut self, node: &'n Node, text: &str, is_key: bool, in_flow: bool) {
        let start = node.pos.offset as usize;
        let flow = in_flow || text[start..].starts_with(['[', '{']);
        match &node.value {
            Value::Map(entries) => {
                for (key, value) in entries {
                    self.add(key, text, true, flow);
                    self.add(value, text, false, flow);
                }
            }
            Value::Seq(items) => {
                for item in items {
                    self.add(item, text, false, flow);
                }
            }
            _ => {
                self.spans.push(start..start + node.pos.len as usize);
                if !is_key && node.pos.len > 0 {
                    self.values.push((node, in_flow));
                }
            }
        }
    }

    fn is_inside(&self, offset: usize) -> bool {
        self.spans.iter().any(|span| span.contains(&offset))
    }
}

/// Where the comment of a line starts: the first `#` after a blank (or at the line's
/// start) that no scalar holds.
fn comment_start(
    text: &str,
    line_start: usize,
    line: &str,
    scalars: &Scalars<'_>,
) -> Option<usize> {
    line.char_indices()
        .filter(|(_, c)| *c == '#')
        .map(|(i, _)| line_start + i)
        .filter(|at| *at == line_start || text[..*at].ends_with([' ', '\t']))
        .find(|at| !scalars.is_inside(*at))
}

/// The words of a marker comment after `tether:image-policy`, if the comment is one.
fn marker_words(comment: &str) -> Option<&str> {
    let rest = comment.trim_start().strip_prefix(MARKER)?;
    let rest = rest.trim_end_matches(['\n', '\r']);
    (rest.is_empty() || rest.starts_with([' ', '\t'])).then_some(rest.trim())
}

/// The policy and field a marker names: `policy`, `policy:tag`, `policy:name`, `policy:digest`.
fn parse_marker(words: &str) -> Result<(String, MarkerField), MarkerProblem> {
    let mut split = words.split_whitespace();
    let Some(word) = split.next() else {
        return Err(MarkerProblem::NoPolicy);
    };
    if let Some(extra) = split.next() {
        return Err(MarkerProblem::TrailingText(extra.to_string()));
    }
    let (policy, field) = match word.rsplit_once(':') {
        None => (word, MarkerField::Image),
        Some((policy, "tag")) => (policy, MarkerField::Tag),
        Some((policy, "name")) => (policy, MarkerField::Name),
        Some((policy, "digest")) => (policy, MarkerField::Digest),
        Some((_, other)) => return Err(MarkerProblem::UnknownField(other.to_string())),
    };
    match policy.is_empty() {
        true => Err(MarkerProblem::NoPolicy),
        false => Ok((policy.to_string(), field)),
    }
}

/// The one value the parser places on a line before its comment (`before`: from the
/// line's start to the `#`), if it can be rewritten in place.
fn value_on_line<'n>(
    text: &str,
    before: std::ops::Range<usize>,
    scalars: &Scalars<'n>,
) -> Result<&'n Node, MarkerProblem> {
    let not_in_place = |what| Err(MarkerProblem::NotInPlace { what });
    // A block scalar's span runs on over the line breaks and indentation after it.
    let ends = |node: &Node| {
        let trailing = [' ', '\t', '\n', '\r'];
        node.pos.offset as usize + node.raw(text).trim_end_matches(trailing).len()
    };
    if scalars
        .values
        .iter()
        .any(|(n, _)| (n.pos.offset as usize) < before.start && ends(n) > before.start)
    {
        return not_in_place("written over several lines");
    }
    let on_line: Vec<&(&Node, bool)> = scalars
        .values
        .iter()
        .filter(|(n, _)| before.contains(&(n.pos.offset as usize)))
        .collect();
    let written = text[before.clone()].trim_end();
    let node = match on_line.as_slice() {
        [] if written.ends_with(['|', '>']) || block_header(written) => {
            return not_in_place("a block scalar (| or >)");
        }
        [] => return Err(MarkerProblem::NoValue),
        [(one, _)] => *one,
        _ if on_line.iter().any(|(_, flow)| *flow) => {
            return not_in_place("one of several values of a flow collection");
        }
        _ => return not_in_place("one of several values on the line"),
    };
    let raw = node.raw(text);
    let shared = |what| Err(MarkerProblem::Shared { what });
    if raw.starts_with('*') {
        return shared("an alias (*) of a value written elsewhere");
    }
    let head = text[before.start..node.pos.offset as usize].trim_end();
    if head
        .rsplit([' ', '\t'])
        .next()
        .is_some_and(|w| w.starts_with('&'))
    {
        return shared("anchored (&) and may be shared through aliases");
    }
    if ends(node) > before.end || raw.trim_end().contains('\n') {
        return not_in_place("written over several lines");
    }
    Ok(node)
}

/// A block scalar's header with its indicators (`|-`, `>+`, `|2`).
fn block_header(written: &str) -> bool {
    let last = written.rsplit([' ', '\t']).next().unwrap_or("");
    last.starts_with(['|', '>'])
        && last[1..]
            .chars()
            .all(|c| matches!(c, '-' | '+') || c.is_ascii_digit())
}
