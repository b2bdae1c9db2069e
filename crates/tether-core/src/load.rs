//! Load: YAML text to documents of [`Node`]s that remember where they came from.
//!
//! serde-saphyr parses (YAML 1.2, fuzzed, panic-free); we deserialize into our own
//! tree rather than straight into model structs so that the model stage can report
//! every unknown field, missing field and bad value of a document, not just the first.
//!
//! YAML 1.1 surprises are settled here, deliberately:
//! - `yes`/`no`/`on`/`off` are strings (YAML 1.2); boolean model fields reject them
//!   with a hint, and Kubernetes YAML inside models warns about them.
//! - in models, `0755` is kept as the string `0755` (an integer field rejects it as
//!   ambiguous); in Kubernetes YAML it is octal, as kubectl reads it (`defaultMode`).
//! - a plain scalar in a string field keeps its source spelling (`tag: 3.10` is "3.10").
//!
//! Every YAML read obeys [`limits`], the one definition of the input limits (the file
//! size the engine checks before it reads a file, depth, values, aliases).

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::diagnostic::{Diagnostic, Diagnostics, Span};
use crate::source::{FileId, Sealing, SourceFile, SourceFiles, TooLarge, to_u32};

/// Where a node is, relative to the text it was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
    pub offset: u32,
    pub len: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in source order (duplicate keys are a parse error).
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What a user would call this kind of value, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Value::Null => "nothing",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl Node {
    /// The node's source text, as written (quotes included).
    pub fn raw<'t>(&self, text: &'t str) -> &'t str {
        let start = self.pos.offset as usize;
        let end = start + self.pos.len as usize;
        text.get(start..end).unwrap_or("")
    }

    /// A scalar as the text it means: strings as parsed, other scalars as spelled.
    pub fn scalar_text(&self, text: &str) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Bool(_) | Value::Int(_) | Value::Float(_) => Some(self.raw(text).to_string()),
            Value::Null | Value::Seq(_) | Value::Map(_) => None,
        }
    }

    /// The value of a mapping's entry named `name` (none when this is not a mapping).
    pub fn field(&self, name: &str) -> Option<&Node> {
        let Value::Map(entries) = &self.value else {
            return None;
        };
        entries
            .iter()
            .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == name))
            .map(|(_, v)| v)
    }

    /// Is this an unquoted scalar (so YAML typed it implicitly)?
    pub fn is_plain(&self, text: &str) -> bool {
        !matches!(self.raw(text).chars().next(), Some('"' | '\'' | '|' | '>'))
    }
}

/// Which dialect a YAML text is read in (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Models,
    Kubernetes,
}

/// A YAML syntax error, positioned in the parsed text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: u32,
    pub column: u32,
    pub message: String,
}

/// Limits on every YAML text tether reads (models files, `resource_definition`
/// texts, settings), so that a small hostile file cannot keep it busy or fill memory.
/// Each is far beyond what a real repository needs.
pub mod limits {
    /// The size of one file, in MiB: a models file, the settings file, a file models
    /// take data from.
    pub const FILE_MIB: usize = 16;
    /// [`FILE_MIB`] in bytes. The engine compares a file's size (from the filesystem
    /// or Git's object header) with it before reading the file, so that a file past
    /// it never reaches memory.
    pub const FILE_BYTES: u64 = FILE_MIB as u64 * 1024 * 1024;

    /// `Some` when a file of `bytes` is past [`FILE_BYTES`] and must not be read.
    pub fn check_file_size(bytes: u64) -> Option<crate::source::TooLarge> {
        (bytes > FILE_BYTES).then_some(crate::source::TooLarge { bytes })
    }
    /// Nesting of mappings and lists.
    pub const DEPTH: usize = 64;
    /// Values (scalars, mappings, lists) in one file: about what a file of
    /// [`FILE_MIB`] holds when it is real YAML (a `helm template` or `kustomize
    /// build` of a large platform, 10,000 documents and more). The number of
    /// documents is not limited: a document costs what its values cost.
    pub const NODES: usize = 4_000_000;
    /// Values produced by aliases (`*name`), across one file.
    pub const ALIAS_VALUES: usize = 10_000;
}

/// The options of every parse: the dialect's typing rules and the input limits.
pub fn yaml_options(dialect: Dialect) -> serde_saphyr::Options {
    let mut options = match dialect {
        Dialect::Models => serde_saphyr::options! {
            strict_booleans: true,
            leading_zero_numbers_as_strings: true,
        },
        Dialect::Kubernetes => serde_saphyr::options! {
            strict_booleans: true,
            legacy_octal_numbers: true,
        },
    };
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = limits::DEPTH;
    budget.max_documents = usize::MAX;
    budget.max_nodes = limits::NODES;
    budget.max_events = 4 * limits::NODES;
    budget.max_aliases = limits::ALIAS_VALUES;
    budget.max_recorded_anchor_events = limits::ALIAS_VALUES;
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = limits::ALIAS_VALUES;
    options
}

/// Parses every document of a YAML stream; empty documents are skipped.
pub fn parse_yaml(text: &str, dialect: Dialect) -> Result<Vec<Node>, SyntaxError> {
    if text.len() as u64 > limits::FILE_BYTES {
        return Err(SyntaxError {
            line: 1,
            column: 1,
            message: format!(
                "the text is {} MiB, past the limit of {} MiB",
                text.len() / (1024 * 1024),
                limits::FILE_MIB
            ),
        });
    }
    serde_saphyr::from_str_multiple_with_options::<Node, Vec<Node>>(text, yaml_options(dialect))
        .map_err(|e| {
            let location = e.location();
            SyntaxError {
                line: location.map_or(1, |l| to_u32(l.line() as usize)).max(1),
                column: location.map_or(1, |l| to_u32(l.column() as usize)).max(1),
                message: limit_message(&e).unwrap_or_else(|| syntax_message(&e)),
            }
        })
}

/// A breach of [`limits`] in words that name the limit.
pub fn limit_message(error: &serde_saphyr::Error) -> Option<String> {
    use serde_saphyr::budget::BudgetBreach as B;
    let aliases = || {
        format!(
            "aliases expand to more than {} values, the limit (an alias bomb?)",
            limits::ALIAS_VALUES
        )
    };
    let depth = || format!("nesting depth past the limit of {} levels", limits::DEPTH);
    // The breach itself, under the wrappers that add alias locations and snippets.
    let mut error = error;
    while let serde_saphyr::Error::AliasError { error: inner, .. }
    | serde_saphyr::Error::WithSnippet { error: inner, .. } = error
    {
        error = inner;
    }
    Some(match error {
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            B::Depth { .. } => depth(),
            B::Aliases { .. }
            | B::Anchors { .. }
            | B::RecordedAnchorEvents { .. }
            | B::RecordedAnchorBytes { .. } => aliases(),
            _ => format!("more than {} values in one file, the limit", limits::NODES),
        },
        serde_saphyr::Error::AliasReplayLimitExceeded { .. }
        | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
        | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. }
        | serde_saphyr::Error::AliasReplayCounterOverflow { .. } => aliases(),
        _ if error.to_string().contains("recursion limit") => depth(),
        _ => return None,
    })
}

/// The error's own words, without the location prefix and snippet that we print ourselves.
fn syntax_message(error: &serde_saphyr::Error) -> String {
    let full = error.without_snippet().to_string();
    let first_line = full.lines().next().unwrap_or("").trim();
    let mut message = first_line.strip_prefix("error: ").unwrap_or(first_line);
    if let Some((location, rest)) = message.split_once(": ")
        && location.starts_with("line ")
    {
        message = rest;
    }
    // Drop the trailing position (we print our own) and advice meant for programmers.
    if let Some(at) = message.rfind(" at line ") {
        message = &message[..at];
    }
    if let Some(advice) = message.find(", set DuplicateKeyPolicy") {
        message = &message[..advice];
    }
    message.to_string()
}

/// One YAML document of a source file.
#[derive(Clone, Debug)]
pub struct Document {
    pub file: FileId,
    pub root: Node,
}

impl Document {
    pub fn span(&self, node: &Node) -> Span {
        span_in(self.file, node.pos)
    }
}

pub fn span_in(file: FileId, pos: Pos) -> Span {
    Span {
        file,
        line: pos.line,
        column: pos.column,
        offset: pos.offset,
        len: pos.len,
    }
}

/// Span of a point given by line and column in a file.
pub fn point_span(file_id: FileId, file: &SourceFile, line: u32, column: u32) -> Span {
    Span {
        file: file_id,
        line,
        column,
        offset: file.offset_of(line, column),
        len: 1,
    }
}

/// Parses every file; a file with a syntax error yields one diagnostic and no documents.
pub fn load(files: &SourceFiles) -> (Vec<Document>, Diagnostics) {
    load_except(files, &std::collections::BTreeSet::new())
}

/// Parses every file but those of `skipped` (files that are not models: a
/// kustomization's, a chart's).
pub fn load_except(
    files: &SourceFiles,
    skipped: &std::collections::BTreeSet<FileId>,
) -> (Vec<Document>, Diagnostics) {
    let mut documents = Vec::new();
    let mut diagnostics = Diagnostics::default();
    unopened_files_warning(files, &mut diagnostics);
    for (id, file) in files.iter().filter(|(id, _)| !skipped.contains(id)) {
        if let Some(too_large) = file.too_large {
            diagnostics.push(too_large_error(id, file, too_large));
            continue;
        }
        if let Sealing::Closed(problem) = &file.sealing {
            diagnostics.push(
                Diagnostic::error(
                    point_span(id, file, problem.line, problem.column),
                    format!("cannot decrypt this file (sops): {}", problem.message),
                )
                .with_optional_hint(problem.hint.clone()),
            );
            continue;
        }
        match parse_yaml(&file.text, Dialect::Models) {
            Ok(nodes) => {
                documents.extend(nodes.into_iter().map(|root| Document { file: id, root }))
            }
            Err(e) => diagnostics.push(
                Diagnostic::error(
                    point_span(id, file, e.line, e.column),
                    format!("YAML syntax error: {}", e.message),
                )
                .with_hint("no model in this file is read until the YAML parses"),
            ),
        }
    }
    (documents, diagnostics)
}

/// A file left unread for its size, at its first line: the whole file is the problem.
fn too_large_error(id: FileId, file: &SourceFile, too_large: TooLarge) -> Diagnostic {
    Diagnostic::error(
        point_span(id, file, 1, 1),
        format!(
            "this file is {} ({} bytes), past the limit of {} MiB per file: it was not read",
            too_large.shown_size(),
            too_large.bytes,
            limits::FILE_MIB
        ),
    )
    .with_hint("split the file, or keep generated data out of the models directory")
}

/// One warning for all the encrypted files read without their key (their structure
/// is checked, their values are not), at the first of them, with how to give a key.
fn unopened_files_warning(files: &SourceFiles, diagnostics: &mut Diagnostics) {
    let mut unopened = files.iter().filter_map(|(id, file)| match &file.sealing {
        Sealing::Unopened { problem, .. } => Some((id, file, problem)),
        _ => None,
    });
    let Some((id, file, problem)) = unopened.next() else {
        return;
    };
    let message = match unopened.count() {
        0 => format!(
            "this encrypted file was read without its key: its models and references were checked, not its encrypted values ({})",
            problem.message
        ),
        others => format!(
            "this encrypted file and {others} other{} were read without their key: their models and references were checked, not their encrypted values ({})",
            if others == 1 { "" } else { "s" },
            problem.message
        ),
    };
    diagnostics.push(
        Diagnostic::warning(point_span(id, file, problem.line, problem.column), message)
            .with_optional_hint(problem.hint.clone()),
    );
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Value>::deserialize(deserializer)?;
        let location = spanned.referenced;
        let span = location.span();
        Ok(Node {
            pos: Pos {
                line: to_u32(location.line() as usize),
                column: to_u32(location.column() as usize),
                offset: to_u32(span.byte_offset().unwrap_or(0) as usize),
                len: to_u32(span.byte_len().unwrap_or(0) as usize),
            },
            value: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(node) = seq.next_element::<Node>()? {
            items.push(node);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

/// YAML 1.1 spellings of booleans that YAML 1.2 (and tether) reads as strings.
const YAML_1_1_BOOLEANS: &[&str] = &["y", "yes", "n", "no", "on", "off"];

/// Is this string a boolean in YAML 1.1 (`yes`, `off`, …)? The model reader warns
/// where a model means a boolean or a string and wrote one of these.
pub fn is_yaml_1_1_boolean(s: &str) -> bool {
    YAML_1_1_BOOLEANS.contains(&s.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(root: &'a Node, name: &str) -> &'a Node {
        let Value::Map(entries) = &root.value else {
            panic!("not a map")
        };
        &entries
            .iter()
            .find(|(k, _)| k.value == Value::Str(name.into()))
            .unwrap()
            .1
    }

    #[test]
    fn keeps_positions_and_source_spelling() {
        let text = "kind: Image\nname: pause\ntag: 3.10\n";
        let docs = parse_yaml(text, Dialect::Models).unwrap();
        let tag = field(&docs[0], "tag");
        assert_eq!((tag.pos.line, tag.pos.column), (3, 6));
        assert_eq!(tag.value, Value::Float(3.1));
        assert_eq!(tag.scalar_text(text).as_deref(), Some("3.10"));
    }

    #[test]
    fn yaml_1_1_spellings_are_settled_per_dialect() {
        let text = "a: yes\nb: on\nc: 0755\nd: true\n";
        let models = &parse_yaml(text, Dialect::Models).unwrap()[0];
        assert_eq!(field(models, "a").value, Value::Str("yes".into()));
        assert_eq!(field(models, "b").value, Value::Str("on".into()));
        assert_eq!(field(models, "c").value, Value::Str("0755".into()));
        assert_eq!(field(models, "d").value, Value::Bool(true));
        let kube = &parse_yaml(text, Dialect::Kubernetes).unwrap()[0];
        assert_eq!(field(kube, "a").value, Value::Str("yes".into()));
        assert_eq!(field(kube, "c").value, Value::Int(0o755));
    }

    #[test]
    fn syntax_errors_carry_a_position_and_a_bare_message() {
        let e = parse_yaml("a: 1\nb: [\n", Dialect::Models).unwrap_err();
        assert_eq!((e.line, e.column), (2, 4));
        assert!(!e.message.contains("line 2"), "{}", e.message);
        let e = parse_yaml("a: 1\na: 2\n", Dialect::Models).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("duplicate"), "{}", e.message);
    }

    #[test]
    fn a_file_refused_for_its_size_is_one_located_error_and_no_documents() {
        let limit = limits::FILE_BYTES;
        assert_eq!(
            limits::check_file_size(limit),
            None,
            "the limit itself is allowed"
        );
        let refused = limits::check_file_size(60 * 1024 * 1024).unwrap();
        assert_eq!(refused.shown_size(), "60.0 MiB");
        let files = SourceFiles::from_files(vec![
            SourceFile::new("site.yaml", "kind: Site\nname: s\n"),
            SourceFile::too_large("generated.yaml", refused),
        ]);
        let (documents, diagnostics) = load(&files);
        assert_eq!(documents.len(), 1, "the other file is still read");
        let errors = diagnostics.sorted(&files);
        assert_eq!(errors.len(), 1);
        let error = errors[0];
        assert_eq!(files.path(error.span.file), "generated.yaml");
        assert_eq!((error.span.line, error.span.column), (1, 1));
        assert!(
            error.message.contains("60.0 MiB (62914560 bytes)")
                && error.message.contains("limit of 16 MiB"),
            "{}",
            error.message
        );
        assert!(error.hint.as_deref().is_some_and(|h| h.contains("split")));
    }

    #[test]
    fn multi_document_streams_skip_empty_documents() {
        let docs = parse_yaml("kind: A\n---\n---\nkind: B\n", Dialect::Models).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].pos.line, 4);
    }
}
