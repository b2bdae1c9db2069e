//! Format-preserving edits of a models file: set or remove one field of one model, or
//! put back a model's whole document, changing exactly those bytes. Comments, key
//! order, quoting, flow style, other documents and line endings stay as written, so
//! that the commit a day-2 operation makes shows a one-line diff. Pure.
//!
//! An edit works on the byte spans of the parsed document (`load`), never by writing
//! the YAML out again. It refuses what it cannot change locally: a value anchored and
//! shared with aliases elsewhere, a model that is not in the file, or in it twice.

use thiserror::Error;

use crate::load::{Dialect, Node, Value, parse_yaml};

/// Which model of a file to edit: the document with this `kind` and `name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelRef<'a> {
    pub kind: &'a str,
    pub name: &'a str,
}

impl std::fmt::Display for ModelRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum EditError {
    #[error("the file does not parse (line {line}, column {column}): {message}")]
    Syntax {
        line: u32,
        column: u32,
        message: String,
    },
    #[error("{model} is not in the file")]
    NotFound { model: String },
    #[error("{model} is in the file {count} times")]
    Ambiguous { model: String, count: usize },
    #[error(
        "{field} of {model} is anchored (&) and may be shared through aliases; change it by hand"
    )]
    Anchored { model: String, field: String },
    #[error("{field} of {model} is an alias (*) of a value written elsewhere; change it by hand")]
    Aliased { model: String, field: String },
    #[error("{field} of {model} is {found}, not a single value")]
    NotAScalar {
        model: String,
        field: String,
        found: &'static str,
    },
    #[error("{field} of {model} is {found}, not a mapping")]
    NotAMapping {
        model: String,
        field: String,
        found: &'static str,
    },
    #[error("the edit of {model} does not parse back: {message}")]
    Broken { model: String, message: String },
}

/// A value to write, spelled as YAML by [`Scalar::spell`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scalar {
    Int(i64),
    Bool(bool),
    Str(String),
}

impl Scalar {
    /// The YAML spelling: strings keep the quoting style of the value they replace
    /// (`like`); a new string is plain only when it reads back as that same string in
    /// every YAML version (so `yes`, `1.10`, `2026-11-23T…` and `0755` are quoted).
    fn spell(&self, like: Option<&str>) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Str(s) => match like.and_then(|l| l.chars().next()) {
                Some('\'') if !s.contains(['\n', '\r']) => format!("'{}'", s.replace('\'', "''")),
                Some('"') => double_quoted(s),
                _ if is_plain_safe(s) => s.clone(),
                _ => double_quoted(s),
            },
        }
    }
}

fn double_quoted(s: &str) -> String {
    // A JSON string is a YAML double-quoted scalar.
    serde_json::Value::String(s.to_string()).to_string()
}

/// Text that reads back as itself, as a string, in YAML 1.1 and 1.2.
fn is_plain_safe(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let yaml_1_1_word = matches!(
        lower.as_str(),
        "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null" | "nan" | "inf"
    );
    // `:` never last (`a:` would be a key) and never before a blank (none is allowed).
    let in_word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/');
    let word = !s.ends_with(':')
        && s.bytes()
            .all(|b| in_word(b) || matches!(b, b':' | b'@' | b'+'));
    match s.bytes().next() {
        Some(b) if b.is_ascii_alphabetic() => word && !yaml_1_1_word,
        // An image reference on an address (`127.0.0.1:5000/shop/app:1.1`): a `/` makes
        // it no number, date or time in either YAML version.
        Some(b) if b.is_ascii_digit() => is_plain_version(s) || (word && s.contains('/')),
        _ => false,
    }
}

/// A version that starts with a digit (`2.4.1`, `1.25-alpine`, `20240101-abc`) and is
/// a string in YAML 1.1 and 1.2: no number, date, sexagesimal or hexadecimal spelling.
fn is_plain_version(s: &str) -> bool {
    let bytes = s.as_bytes();
    let versionish = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
        && (s.bytes().any(|b| b.is_ascii_alphabetic()) || s.matches('.').count() >= 2);
    let date = bytes.len() >= 6
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[5].is_ascii_digit();
    let radix = s.starts_with("0x") || s.starts_with("0o") || s.starts_with("0b");
    let reads_as_string = |dialect| {
        parse_yaml(&format!("v: {s}"), dialect).is_ok_and(|documents| {
            documents
                .first()
                .and_then(|d| d.field("v"))
                .is_some_and(|v| v.value == Value::Str(s.to_string()))
        })
    };
    versionish
        && !date
        && !radix
        && reads_as_string(Dialect::Models)
        && reads_as_string(Dialect::Kubernetes)
}

/// A string spelled as YAML where `written` was (quoted as it was; plain when plain
/// reads back as the same string everywhere), or as a new value (`None`).
pub fn spell_string(value: &str, written: Option<&str>) -> String {
    Scalar::Str(value.to_string()).spell(written)
}

/// Applies `change` to one document of `text`, the one holding byte `at` (a model's
/// origin), as if it were the file's only document, and puts the result in its place:
/// for models whose kind and name do not single them out in their file (an Image per
/// tag of one name).
pub fn in_document(
    text: &str,
    at: usize,
    change: impl FnOnce(&str) -> Result<String, EditError>,
) -> Result<String, EditError> {
    let documents = parse_yaml(text, Dialect::Models).map_err(|e| EditError::Syntax {
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let range = documents
        .iter()
        .map(|root| document_range(text, root))
        .find(|range| range.contains(&at))
        .ok_or_else(|| EditError::NotFound {
            model: format!("the document at byte {at}"),
        })?;
    let edited = change(&text[range.clone()])?;
    Ok(splice(text, range, &edited))
}

/// Sets `path` (mapping keys from the model's top) to `value`, adding the key (and
/// any missing mappings on the way) after the mapping's last entry when absent.
pub fn set_field(
    text: &str,
    model: ModelRef<'_>,
    path: &[&str],
    value: &Scalar,
) -> Result<String, EditError> {
    let root = find_model(text, model)?;
    let mut map = &root;
    let mut done = 0;
    while done < path.len() {
        let key = path[done];
        let Some((k, v)) = literal_entry(map, text, key) else {
            break;
        };
        let field = path[..=done].join(".");
        if done + 1 == path.len() {
            if matches!(v.value, Value::Map(_) | Value::Seq(_)) {
                return Err(EditError::NotAScalar {
                    model: model.to_string(),
                    field,
                    found: v.value.describe(),
                });
            }
            let range = value_range(text, k, v, model, &field)?;
            let new = value.spell(Some(&text[range.clone()]));
            return checked(splice_value(text, range, &new), model);
        }
        match &v.value {
            Value::Map(_) => {
                writable_mapping(text, k, model, &field)?;
                map = v;
            }
            Value::Null => {
                // `labels:` with nothing after it: the rest as a flow mapping there.
                let range = value_range(text, k, v, model, &field)?;
                let new = format!("{{{}}}", flow_entry(&path[done + 1..], value));
                return checked(splice_value(text, range, &new), model);
            }
            other => {
                return Err(EditError::NotAMapping {
                    model: model.to_string(),
                    field,
                    found: other.describe(),
                });
            }
        }
        done += 1;
    }
    checked(insert_entry(text, map, &path[done..], value), model)
}

/// Removes the entry at `path`; `Ok(None)` when it is not there.
pub fn remove_field(
    text: &str,
    model: ModelRef<'_>,
    path: &[&str],
) -> Result<Option<String>, EditError> {
    let root = find_model(text, model)?;
    let mut map = &root;
    for (i, key) in path.iter().enumerate() {
        let Some((k, v)) = literal_entry(map, text, key) else {
            return Ok(None);
        };
        if i + 1 < path.len() {
            writable_mapping(text, k, model, &path[..=i].join("."))?;
            map = v;
            continue;
        }
        let end = node_end(text, v);
        let edited = if is_flow(map, text) {
            let mut start = k.pos.offset as usize;
            let mut stop = skip(text, end, |c| c == ' ');
            if text[stop..].starts_with(',') {
                stop = skip(text, stop + 1, |c| c == ' ');
            } else {
                // The last entry: take the comma before it instead.
                let before = text[..start].trim_end_matches([' ', '\n', '\r', '\t']);
                if before.ends_with(',') {
                    start = before.len() - 1;
                }
            }
            splice(text, start..stop, "")
        } else {
            splice(
                text,
                line_start(text, k.pos.offset as usize)..line_end(text, end),
                "",
            )
        };
        return checked(edited, model).map(Some);
    }
    Ok(None)
}

/// The text of the model's document, from its first key to the end of its last line.
pub fn document_text<'t>(text: &'t str, model: ModelRef<'_>) -> Result<&'t str, EditError> {
    let root = find_model(text, model)?;
    Ok(&text[document_range(text, &root)])
}

/// Puts `document` (a [`document_text`]) in place of the model's document.
pub fn replace_document(
    text: &str,
    model: ModelRef<'_>,
    document: &str,
) -> Result<String, EditError> {
    let root = find_model(text, model)?;
    let mut document = document.to_string();
    if text.contains("\r\n") != document.contains("\r\n") {
        document = document.replace("\r\n", "\n");
        if text.contains("\r\n") {
            document = document.replace('\n', "\r\n");
        }
    }
    checked(splice(text, document_range(text, &root), &document), model)
}

/// The document of `model` (parsed again: positions are this text's).
pub fn find_model(text: &str, model: ModelRef<'_>) -> Result<Node, EditError> {
    let documents = parse_yaml(text, Dialect::Models).map_err(|e| EditError::Syntax {
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let mut found: Vec<Node> = documents
        .into_iter()
        .filter(|d| {
            let is = |field: &str, want: &str| {
                d.field(field)
                    .and_then(|n| n.scalar_text(text))
                    .is_some_and(|v| v == want)
            };
            is("kind", model.kind) && is("name", model.name)
        })
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(EditError::NotFound {
            model: model.to_string(),
        }),
        count => Err(EditError::Ambiguous {
            model: model.to_string(),
            count,
        }),
    }
}

/// The entry `key` as written in this mapping (not one merged in with `<<`).
fn literal_entry<'n>(map: &'n Node, text: &str, key: &str) -> Option<(&'n Node, &'n Node)> {
    let Value::Map(entries) = &map.value else {
        return None;
    };
    entries.iter().map(|(k, v)| (k, v)).find(|(k, _)| {
        matches!(&k.value, Value::Str(s) if s == key)
            && !k.raw(text).starts_with(['*', '<'])
            && k.raw(text) != "<<"
    })
}

/// A mapping whose entries may be edited in place: not one anchored (`&`), whose
/// entries aliases elsewhere share, nor an alias (`*`) of one.
fn writable_mapping(
    text: &str,
    key: &Node,
    model: ModelRef<'_>,
    field: &str,
) -> Result<(), EditError> {
    let after_colon = after_key(text, key);
    let error = |anchored| {
        let (model, field) = (model.to_string(), field.to_string());
        if anchored {
            EditError::Anchored { model, field }
        } else {
            EditError::Aliased { model, field }
        }
    };
    match text[after_colon..].chars().next() {
        Some('&') => Err(error(true)),
        Some('*') => Err(error(false)),
        _ => Ok(()),
    }
}

/// The first byte after a key's `:` and the blanks after it.
fn after_key(text: &str, key: &Node) -> usize {
    let key_end = (key.pos.offset + key.pos.len) as usize;
    let colon = skip(text, key_end, |c| c == ' ' || c == '\t');
    skip(text, colon + 1, |c| c == ' ' || c == '\t')
}

/// Where an entry's value is written: after the `:` and its spaces, to the value's
/// end (a block scalar's final line break excluded). An anchored value is refused.
fn value_range(
    text: &str,
    key: &Node,
    value: &Node,
    model: ModelRef<'_>,
    field: &str,
) -> Result<std::ops::Range<usize>, EditError> {
    let mut start = after_key(text, key);
    if text[start..].starts_with(['\n', '\r', '#']) && value.pos.len > 0 {
        // The value is on a line of its own.
        start = value.pos.offset as usize;
    }
    if text[start..].starts_with('&') {
        return Err(EditError::Anchored {
            model: model.to_string(),
            field: field.to_string(),
        });
    }
    let end = if value.value == Value::Null && value.pos.len == 0 {
        start
    } else {
        let end = node_end(text, value).max(start);
        start + text[start..end].trim_end_matches(['\n', '\r']).len()
    };
    Ok(start..end)
}

/// Adds `path` = `value` to `map`: in a flow mapping before its `}`, in a block
/// mapping as lines after its last entry, indented like it.
fn insert_entry(text: &str, map: &Node, path: &[&str], value: &Scalar) -> String {
    if is_flow(map, text) {
        let close = flow_end(text, map.pos.offset as usize) - 1;
        let empty = matches!(&map.value, Value::Map(e) if e.is_empty());
        let before = text[..close]
            .trim_end_matches([' ', '\n', '\r', '\t'])
            .len();
        let separator = if empty { "" } else { ", " };
        let entry = format!("{separator}{}", flow_entry(path, value));
        return splice(text, before..before, &entry);
    }
    let Value::Map(entries) = &map.value else {
        return text.to_string();
    };
    let (indent, at) = match entries.iter().rfind(|(k, _)| is_literal_key(k, text)) {
        Some((k, v)) => (
            k.pos.column.saturating_sub(1) as usize,
            line_end(text, node_end(text, v)),
        ),
        None => (
            map.pos.column.saturating_sub(1) as usize,
            line_end(text, map.pos.offset as usize),
        ),
    };
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut lines = String::new();
    if at == text.len() && !text.is_empty() && !text.ends_with('\n') {
        lines.push_str(eol);
    }
    for (depth, key) in path.iter().enumerate() {
        let pad = " ".repeat(indent + 2 * depth);
        let key = Scalar::Str(key.to_string()).spell(None);
        if depth + 1 == path.len() {
            lines.push_str(&format!("{pad}{key}: {}{eol}", value.spell(None)));
        } else {
            lines.push_str(&format!("{pad}{key}:{eol}"));
        }
    }
    splice(text, at..at, &lines)
}

fn is_literal_key(key: &Node, text: &str) -> bool {
    !key.raw(text).starts_with(['*', '<'])
}

fn flow_entry(path: &[&str], value: &Scalar) -> String {
    let key = Scalar::Str(path[0].to_string()).spell(None);
    if path.len() == 1 {
        format!("{key}: {}", value.spell(None))
    } else {
        format!("{key}: {{{}}}", flow_entry(&path[1..], value))
    }
}

fn is_flow(node: &Node, text: &str) -> bool {
    text[node.pos.offset as usize..].starts_with(['{', '['])
}

/// Where a node's text ends: a scalar's span, a block collection's last child, a flow
/// collection's closing bracket.
fn node_end(text: &str, node: &Node) -> usize {
    let own = (node.pos.offset + node.pos.len) as usize;
    if matches!(node.value, Value::Map(_) | Value::Seq(_)) && is_flow(node, text) {
        return flow_end(text, node.pos.offset as usize);
    }
    match &node.value {
        Value::Map(entries) => entries
            .iter()
            .filter(|(k, _)| is_literal_key(k, text))
            .map(|(_, v)| node_end(text, v))
            .fold(own, usize::max),
        Value::Seq(items) => items
            .iter()
            .map(|i| node_end(text, i))
            .fold(own, usize::max),
        _ => own,
    }
}

/// The byte after the bracket that closes the one at `open`, skipping quoted text.
fn flow_end(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut chars = text[open..].char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some('\''), '\'') if chars.peek().is_some_and(|(_, n)| *n == '\'') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

fn document_range(text: &str, root: &Node) -> std::ops::Range<usize> {
    let start = root.pos.offset as usize;
    start..line_end(text, node_end(text, root))
}

fn skip(text: &str, from: usize, what: impl Fn(char) -> bool) -> usize {
    from + text[from..]
        .find(|c: char| !what(c))
        .unwrap_or(text.len() - from)
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// The start of the next line (`at` itself when it already is one).
fn line_end(text: &str, at: usize) -> usize {
    if at == 0 || text.as_bytes().get(at - 1) == Some(&b'\n') {
        return at;
    }
    text[at..].find('\n').map_or(text.len(), |i| at + i + 1)
}

fn splice(text: &str, range: std::ops::Range<usize>, with: &str) -> String {
    let mut out = String::with_capacity(text.len() + with.len());
    out.push_str(&text[..range.start]);
    out.push_str(with);
    out.push_str(&text[range.end..]);
    out
}

/// A value written where an entry's value was, kept apart from its `:`.
fn splice_value(text: &str, range: std::ops::Range<usize>, with: &str) -> String {
    if text[..range.start].ends_with(':') {
        splice(text, range, &format!(" {with}"))
    } else {
        splice(text, range, with)
    }
}

/// An edit that does not parse, or loses the model, is a bug here: refuse it.
fn checked(edited: String, model: ModelRef<'_>) -> Result<String, EditError> {
    match find_model(&edited, model) {
        Ok(_) => Ok(edited),
        Err(e) => Err(EditError::Broken {
            model: model.to_string(),
            message: e.to_string(),
        }),
    }
}

/// Do two document texts hold the same values (comments, quoting and layout aside)?
pub fn same_document(a: &str, b: &str) -> bool {
    fn same(a: &Node, b: &Node) -> bool {
        match (&a.value, &b.value) {
            (Value::Seq(x), Value::Seq(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
            }
            (Value::Map(x), Value::Map(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .zip(y)
                        .all(|((xk, xv), (yk, yv))| same(xk, yk) && same(xv, yv))
            }
            (x, y) => x == y,
        }
    }
    match (
        parse_yaml(a, Dialect::Models),
        parse_yaml(b, Dialect::Models),
    ) {
        (Ok(x), Ok(y)) => x.len() == y.len() && x.iter().zip(&y).all(|(x, y)| same(x, y)),
        _ => a == b,
    }
}
