//! Fields that hold text in another format: `data` (a mapping, or JSON as XOS stored
//! it) and `resource_definition` (Kubernetes YAML). Problems inside them are reported
//! at their position in the model file, not in the embedded text.

use super::model_types::{Data, DataKind, ResourceObject, Spanned};
use crate::diagnostic::{Diagnostic, Diagnostics, Span};
use crate::directive;
use crate::k8s;
use crate::load::is_yaml_1_1_boolean;
use crate::load::{Dialect, Document, Node, Value, parse_yaml, point_span};
use crate::source::SourceFile;

/// Maps a 1-based line and column inside a scalar's value to the model file.
/// Exact for block scalars (`|`) and single-line values; for multi-line quoted
/// strings the line is exact and the column approximate.
fn inner_span(
    file: &SourceFile,
    document: &Document,
    key: &Node,
    node: &Node,
    line: u32,
    column: u32,
) -> Span {
    let raw = node.raw(&file.text);
    let quoted = raw.starts_with('"') || raw.starts_with('\'');
    let (file_line, file_column) = if node.pos.line > key.pos.line && !quoted {
        // Block scalar: content starts at the node, with the node's indentation.
        (node.pos.line + line - 1, node.pos.column + column - 1)
    } else if line == 1 {
        (
            node.pos.line,
            node.pos.column + column - 1 + u32::from(quoted),
        )
    } else {
        (node.pos.line + line - 1, column)
    };
    point_span(document.file, file, file_line, file_column)
}

/// Is this a valid key of a ConfigMap's or Secret's data?
fn is_valid_data_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

pub(super) fn read_data(
    file: &SourceFile,
    document: &Document,
    key: &Node,
    node: &Node,
    data_kind: DataKind,
    label: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Data> {
    let span = document.span(node);
    let (entries, mut ok) = match &node.value {
        Value::Map(map) => entries_of_mapping(file, document, map, label, diagnostics),
        Value::Str(json) => match entries_of_json(json, span, label, diagnostics) {
            Ok(read) => read,
            Err(e) => {
                let at = inner_span(
                    file,
                    document,
                    key,
                    node,
                    e.line() as u32,
                    e.column().max(1) as u32,
                );
                let message = e.to_string();
                let message = message.split(" at line ").next().unwrap_or(&message);
                diagnostics.push(
                    Diagnostic::error(at, format!("data is not a valid JSON object: {message}"))
                        .in_model(label)
                        .with_hint("write data as a YAML mapping, or as a JSON object of strings"),
                );
                (Vec::new(), false)
            }
        },
        other => {
            diagnostics.push(
                Diagnostic::error(
                    span,
                    format!(
                        "data must be a mapping or a JSON string, found {}",
                        other.describe()
                    ),
                )
                .in_model(label)
                .with_hint("key: value pairs, one per line, under data:"),
            );
            (Vec::new(), false)
        }
    };
    ok &= check_data_keys(&entries, data_kind, label, diagnostics);
    ok.then_some(entries)
}

/// `data` written as a YAML mapping of strings; false when an entry is not one.
fn entries_of_mapping(
    file: &SourceFile,
    document: &Document,
    map: &[(Node, Node)],
    label: &str,
    diagnostics: &mut Diagnostics,
) -> (Data, bool) {
    let error = |span: Span, message: String| Diagnostic::error(span, message).in_model(label);
    let mut entries: Data = Vec::new();
    let mut ok = true;
    for (k, v) in map {
        let Some(name) = k.scalar_text(&file.text) else {
            diagnostics.push(error(
                document.span(k),
                format!("a data key must be a string, found {}", k.value.describe()),
            ));
            ok = false;
            continue;
        };
        let key_span = document.span(k);
        match v.scalar_text(&file.text) {
            Some(value) => entries.push((
                Spanned::new(name, key_span),
                Spanned::new(value, document.span(v)),
            )),
            None => {
                let hint = match v.value {
                    Value::Null => "write \"\" for an empty value",
                    _ => "data values are strings: write structured content as a block scalar (|)",
                };
                diagnostics.push(
                    error(
                        document.span(v),
                        format!(
                            "data \"{name}\" must be a string, found {}",
                            v.value.describe()
                        ),
                    )
                    .with_hint(hint),
                );
                ok = false;
            }
        }
    }
    (entries, ok)
}

/// `data` written as a JSON object, as XOS stored it: numbers and booleans become
/// their text; every entry is reported at the field's `span`.
fn entries_of_json(
    json: &str,
    span: Span,
    label: &str,
    diagnostics: &mut Diagnostics,
) -> Result<(Data, bool), serde_json::Error> {
    let object = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)?;
    let mut entries: Data = Vec::new();
    let mut ok = true;
    for (name, value) in object {
        let value = match value {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            other => {
                let found = match other {
                    serde_json::Value::Null => "null",
                    serde_json::Value::Array(_) => "an array",
                    _ => "an object",
                };
                diagnostics.push(
                    Diagnostic::error(
                        span,
                        format!("data \"{name}\" must be a string, found {found}"),
                    )
                    .in_model(label),
                );
                ok = false;
                continue;
            }
        };
        entries.push((Spanned::new(name, span), Spanned::new(value, span)));
    }
    Ok((entries, ok))
}

/// Keys valid in a ConfigMap or Secret, each set once; false on an error.
fn check_data_keys(
    entries: &Data,
    data_kind: DataKind,
    label: &str,
    diagnostics: &mut Diagnostics,
) -> bool {
    let what = data_kind.kubernetes_kind();
    let mut ok = true;
    for (name, _) in entries {
        if !is_valid_data_key(&name.value) {
            diagnostics.push(
                Diagnostic::error(
                    name.span,
                    format!("\"{}\" is not a valid {what} key", name.value),
                )
                .in_model(label)
                .with_hint("keys use letters, digits, '-', '_' and '.' (at most 253)"),
            );
            ok = false;
        }
    }
    for (i, (name, _)) in entries.iter().enumerate() {
        if entries[..i].iter().any(|(n, _)| n.value == name.value) {
            diagnostics.push(
                Diagnostic::error(
                    name.span,
                    format!("data key \"{}\" is set twice", name.value),
                )
                .in_model(label),
            );
            ok = false;
        }
    }
    ok
}

pub(super) fn read_resource_definition(
    file: &SourceFile,
    document: &Document,
    key: &Node,
    node: &Node,
    label: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<ResourceObject>> {
    let error = |span: Span, message: String| Diagnostic::error(span, message).in_model(label);
    let Value::Str(text) = &node.value else {
        diagnostics.push(
            error(
                document.span(node),
                format!(
                    "resource_definition must be YAML text, found {}",
                    node.value.describe()
                ),
            )
            .with_hint("write the Kubernetes YAML as a block scalar: resource_definition: |"),
        );
        return None;
    };
    let nodes = match parse_yaml(text, Dialect::Kubernetes) {
        Ok(nodes) => nodes,
        Err(e) => {
            diagnostics.push(
                error(
                    inner_span(file, document, key, node, e.line, e.column),
                    format!("resource_definition is not valid YAML: {}", e.message),
                )
                .with_hint("check the indentation of the embedded YAML"),
            );
            return None;
        }
    };
    if nodes.is_empty() {
        diagnostics.push(error(
            document.span(node),
            "resource_definition has no objects".into(),
        ));
        return None;
    }
    let at = |n: &Node| inner_span(file, document, key, node, n.pos.line, n.pos.column);
    let mut objects = Vec::new();
    let mut ok = true;
    for object in &nodes {
        let read = ObjectReader {
            text,
            at: &at,
            label,
            context: "resource_definition object: ",
            octal: false,
        }
        .read(object, diagnostics);
        match read {
            Some(value) => objects.push(ResourceObject {
                value,
                span: at(object),
                template: None,
            }),
            None => ok = false,
        }
    }
    ok.then_some(objects)
}

/// Reads one Kubernetes object written as YAML, reporting each problem at its place.
pub struct ObjectReader<'a> {
    /// The text the object's nodes were parsed from.
    pub text: &'a str,
    /// Where a node of the object is, in a file of the repository.
    pub at: &'a dyn Fn(&Node) -> Span,
    /// The model the object belongs to, for messages.
    pub label: &'a str,
    /// What the messages call the object: "resource_definition object: ", or nothing.
    pub context: &'a str,
    /// Is a plain `0755` an octal number, as kubectl reads it? The texts parsed in the
    /// models dialect keep it a string.
    pub octal: bool,
}

impl ObjectReader<'_> {
    /// A YAML value as JSON, warning about plain words kubectl reads as booleans.
    pub fn convert(&self, node: &Node, diagnostics: &mut Diagnostics) -> serde_json::Value {
        let mut converter = JsonConverter {
            text: self.text,
            octal: self.octal,
            warnings: Vec::new(),
        };
        let value = converter.convert(node);
        for (n, word) in converter.warnings {
            diagnostics.push(
                Diagnostic::warning((self.at)(n), format!("\"{word}\" is the string \"{word}\" here (YAML 1.2), but kubectl reads it as a boolean (YAML 1.1)"))
                    .in_model(self.label)
                    .with_hint("quote it to keep the string, or write true or false"),
            );
        }
        value
    }

    /// The object as JSON, when it has no error (warnings are reported either way).
    pub fn read(&self, object: &Node, diagnostics: &mut Diagnostics) -> Option<serde_json::Value> {
        let at = self.at;
        let context = self.context;
        let error =
            |span: Span, message: String| Diagnostic::error(span, message).in_model(self.label);
        let value = self.convert(object, diagnostics);
        let mut ok = true;
        for (node, problem) in label_problems(object) {
            diagnostics.push(
                error(at(node), format!("{context}{problem}"))
                    .with_hint("the API server refuses it: label keys are [prefix/]name, values 63 characters of [A-Za-z0-9_.-] at most"),
            );
            ok = false;
        }
        for (node, problem) in directive_problems(object, self.text) {
            diagnostics.push(error(at(node), format!("{context}{problem}")).with_hint(
                "write a value tether reads (the book's \"Flux and Argo CD annotations\" lists them): it never guesses what a misspelt prune or apply annotation meant",
            ));
            ok = false;
        }
        for (field, found) in metadata_map_problems(object) {
            diagnostics.push(
                error(
                    at(found),
                    format!(
                        "{context}metadata.{field} must be a mapping of strings, found {}",
                        found.value.describe()
                    ),
                )
                .with_hint(format!(
                    "write {field} as `key: \"value\"` pairs; quote numbers and booleans"
                )),
            );
            ok = false;
        }
        if let Some(namespace) = cluster_scoped_namespace(object) {
            diagnostics.push(
                Diagnostic::warning(
                    at(namespace),
                    format!(
                        "{context}a cluster-scoped object has no namespace: this one is ignored"
                    ),
                )
                .in_model(self.label)
                .with_hint("the API server ignores it too; remove metadata.namespace"),
            );
        }
        let problems = object_problems(&value);
        for problem in &problems {
            diagnostics.push(
                error(at(object), format!("{context}{problem}"))
                    .with_hint("every object needs apiVersion, kind and metadata.name (an Argo CD hook, argocd.argoproj.io/hook, may have metadata.generateName instead)"),
            );
        }
        (ok && problems.is_empty()).then_some(value)
    }
}

/// The namespace written on an object of a kind that Kubernetes serves cluster-wide.
fn cluster_scoped_namespace(object: &Node) -> Option<&Node> {
    let Some(Value::Str(kind)) = object.field("kind").map(|k| &k.value) else {
        return None;
    };
    if !k8s::is_cluster_scoped(kind) {
        return None;
    }
    object
        .field("metadata")?
        .field("namespace")
        .filter(|n| matches!(&n.value, Value::Str(s) if !s.is_empty()))
}

/// `metadata.labels` and `metadata.annotations` that are neither absent, nothing
/// (`labels:`), nor a mapping of strings, with the node at fault.
fn metadata_map_problems(object: &Node) -> Vec<(&'static str, &Node)> {
    let Some(metadata) = object.field("metadata") else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for field in ["labels", "annotations"] {
        let Some(map) = metadata.field(field) else {
            continue;
        };
        match &map.value {
            Value::Null => {}
            Value::Map(entries) => {
                if let Some((_, bad)) = entries
                    .iter()
                    .find(|(_, v)| !matches!(v.value, Value::Str(_)))
                {
                    problems.push((field, bad));
                }
            }
            _ => problems.push((field, map)),
        }
    }
    problems
}

/// The entries of `metadata.<field>` (labels, annotations) when it is a mapping.
fn metadata_entries<'n>(object: &'n Node, field: &str) -> &'n [(Node, Node)] {
    match object
        .field("metadata")
        .and_then(|m| m.field(field))
        .map(|f| &f.value)
    {
        Some(Value::Map(entries)) => entries,
        _ => &[],
    }
}

/// Label keys and values (`metadata.labels`) that the API server would refuse,
/// each with the node at fault.
fn label_problems(object: &Node) -> Vec<(&Node, String)> {
    let mut problems = Vec::new();
    for (key, value) in metadata_entries(object, "labels") {
        if let Value::Str(k) = &key.value
            && let Some(why) = k8s::label_key_problem(k)
        {
            problems.push((key, format!("label key \"{k}\" is not valid: {why}")));
        }
        if let Value::Str(v) = &value.value
            && let Some(why) = k8s::label_value_problem(v)
        {
            problems.push((value, format!("label value \"{v}\" is not valid: {why}")));
        }
    }
    problems
}

/// Flux's and Argo CD's annotations (`metadata.annotations`) whose values tether
/// cannot read, each with the value's node.
fn directive_problems<'n>(object: &'n Node, text: &str) -> Vec<(&'n Node, String)> {
    metadata_entries(object, "annotations")
        .iter()
        .filter_map(|(key, value)| {
            let (Some(key), Value::Str(value_text)) = (key.scalar_text(text), &value.value) else {
                return None;
            };
            directive::problem(&key, value_text).map(|problem| (value, problem))
        })
        .collect()
}

fn object_problems(value: &serde_json::Value) -> Vec<String> {
    let Some(object) = value.as_object() else {
        return vec!["is not a mapping".into()];
    };
    let mut problems = Vec::new();
    for field in ["apiVersion", "kind"] {
        if object
            .get(field)
            .is_none_or(|v| v.as_str().is_none_or(|s| s.is_empty()))
        {
            problems.push(format!("missing \"{field}\""));
        }
    }
    let named = |field: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(|n| n.as_str())
            .is_some_and(|n| !n.is_empty())
    };
    // An Argo CD hook is made anew by each apply: a name made by the server will do.
    let hook = || directive::directives(value).is_ok_and(|d| !d.hook.is_empty());
    if !(named("name") || named("generateName") && hook()) {
        problems.push("missing \"metadata.name\"".into());
    }
    problems
}

/// Node tree to JSON, noting plain scalars that YAML 1.1 (kubectl) reads as booleans.
struct JsonConverter<'t, 'n> {
    text: &'t str,
    octal: bool,
    warnings: Vec<(&'n Node, String)>,
}

impl<'n> JsonConverter<'_, 'n> {
    fn convert(&mut self, node: &'n Node) -> serde_json::Value {
        use serde_json::Value as J;
        match &node.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map_or_else(|| J::String(node.raw(self.text).to_string()), J::Number),
            Value::Str(s) => {
                let plain = node.is_plain(self.text);
                if is_yaml_1_1_boolean(s) && plain {
                    self.warnings.push((node, s.clone()));
                }
                match legacy_octal(s).filter(|_| self.octal && plain) {
                    Some(number) => J::from(number),
                    None => J::String(s.clone()),
                }
            }
            Value::Seq(items) => J::Array(items.iter().map(|n| self.convert(n)).collect()),
            Value::Map(entries) => J::Object(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = k
                            .scalar_text(self.text)
                            .unwrap_or_else(|| k.raw(self.text).to_string());
                        (key, self.convert(v))
                    })
                    .collect(),
            ),
        }
    }
}

/// A YAML 1.1 octal number (`0755`), as kubectl reads a plain `defaultMode: 0755`.
fn legacy_octal(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('0')?;
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    i64::from_str_radix(digits, 8).ok()
}
