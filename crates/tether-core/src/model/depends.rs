//! The workflow fields: `depends_on` (models and cluster objects to wait for) and
//! `ready_when` (when an object counts as ready). Each entry is checked on its own, so
//! one document reports every bad entry.

use super::kind::Kind;
use super::model_types::{Dependency, DependencyTarget, ReadyWhen, Spanned, Text};
use crate::diagnostic::{Diagnostic, Diagnostics, suggestion};
use crate::load::{Document, Node, Value};
use crate::source::SourceFile;

/// The keys of a `depends_on` entry that names a cluster object.
const OBJECT_KEYS: &[&str] = &["apiVersion", "kind", "namespace", "name", "ready_when"];
/// The keys of a `ready_when` mapping.
const READY_KEYS: &[&str] = &["condition", "field", "value", "endpoints"];

/// Reads one workflow field of one model, reporting each problem in it.
pub(super) struct FieldReader<'a> {
    pub file: &'a SourceFile,
    pub document: &'a Document,
    pub label: &'a str,
    pub diagnostics: &'a mut Diagnostics,
}

impl FieldReader<'_> {
    pub(super) fn error(
        &mut self,
        node: &Node,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.diagnostics.push(
            Diagnostic::error(self.document.span(node), message)
                .in_model(self.label)
                .with_hint(hint),
        );
    }

    pub(super) fn text(&mut self, node: &Node, what: &str) -> Option<Text> {
        match node.scalar_text(&self.file.text) {
            Some(text) if !text.is_empty() => Some(Spanned::new(text, self.document.span(node))),
            _ => {
                let found = match &node.value {
                    Value::Str(_) => "an empty string",
                    other => other.describe(),
                };
                self.error(
                    node,
                    format!("{what} must be a non-empty string, found {found}"),
                    format!("write {what} as text"),
                );
                None
            }
        }
    }

    /// `depends_on:`, a list of entries; those that are wrong are reported and left
    /// out (so that resolve still checks the others).
    pub fn depends_on(&mut self, node: &Node) -> Vec<Dependency> {
        let Value::Seq(entries) = &node.value else {
            self.error(
                node,
                format!("depends_on must be a list, found {}", node.value.describe()),
                "one entry per line: `- Slice/name`, or `- kind: …, namespace: …, name: …` for an object tether does not manage",
            );
            return Vec::new();
        };
        entries.iter().filter_map(|e| self.dependency(e)).collect()
    }

    fn dependency(&mut self, entry: &Node) -> Option<Dependency> {
        let span = self.document.span(entry);
        match &entry.value {
            Value::Str(_) => {
                let reference = self.text(entry, "a depends_on entry")?;
                let target = self.model_reference(entry, reference)?;
                Some(Dependency {
                    target,
                    ready_when: None,
                    span,
                })
            }
            Value::Map(fields) => self.object_dependency(entry, fields),
            other => {
                self.error(
                    entry,
                    format!(
                        "a depends_on entry is `Kind/name` or a mapping, found {}",
                        other.describe()
                    ),
                    "write `- Slice/name` for a model, or kind, namespace and name for an object in the cluster",
                );
                None
            }
        }
    }

    /// `Kind/name` or `Kind/trust_domain/name`.
    fn model_reference(&mut self, entry: &Node, reference: Text) -> Option<DependencyTarget> {
        let Some((kind_name, name)) = reference.value.split_once('/') else {
            self.error(
                entry,
                format!(
                    "\"{}\" does not say which kind of model it is",
                    reference.value
                ),
                format!("write Kind/name, such as Slice/{}", reference.value),
            );
            return None;
        };
        let Some(kind) = Kind::parse_step(kind_name) else {
            let hint = if Kind::for_kubernetes_kind(kind_name).is_some()
                || crate::k8s::builtin_api_version(kind_name).is_some()
            {
                format!(
                    "\"{kind_name}\" is a Kubernetes kind: for an object tether does not manage, write `kind: {kind_name}`, `namespace:` and `name:`; for a model, its model kind (Slice, KubernetesResourceInstance, …)"
                )
            } else {
                suggestion(kind_name, Kind::ALL.into_iter().map(Kind::name)).unwrap_or_else(|| {
                    "write Kind/name with a model kind, such as Slice/keystone".into()
                })
            };
            self.error(entry, format!("unknown model kind \"{kind_name}\""), hint);
            return None;
        };
        if name.is_empty() {
            self.error(
                entry,
                format!("\"{}\" names no model", reference.value),
                format!("write {kind}/<name>"),
            );
            return None;
        }
        Some(DependencyTarget::Model {
            kind,
            name: Spanned::new(name.to_string(), reference.span),
        })
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one dependency entry's fields read in turn, each checked where it stands"
    )]
    fn object_dependency(&mut self, entry: &Node, fields: &[(Node, Node)]) -> Option<Dependency> {
        let mut ok = true;
        for (key, _) in fields {
            let name = key.scalar_text(&self.file.text).unwrap_or_default();
            if !OBJECT_KEYS.contains(&name.as_str()) {
                let hint = if name == "model" {
                    "a model is written as a plain entry: `- Slice/name`".to_string()
                } else {
                    suggestion(&name, OBJECT_KEYS.iter().copied()).unwrap_or_else(|| {
                        format!("an object is named by {}", OBJECT_KEYS.join(", "))
                    })
                };
                self.error(
                    key,
                    format!("unknown field \"{name}\" in a depends_on entry"),
                    hint,
                );
                ok = false;
            }
        }
        let field = |this: &mut Self, name: &str| {
            entry
                .field(name)
                .filter(|n| n.value != Value::Null)
                .and_then(|n| this.text(n, name))
        };
        let kind = field(self, "kind");
        let name = field(self, "name");
        let namespace = field(self, "namespace");
        let api_version = field(self, "apiVersion");
        let ready_when = match entry.field("ready_when") {
            Some(node) => {
                let read = self.ready_when(node);
                ok &= read.is_some();
                read
            }
            None => None,
        };
        if kind.is_none() || name.is_none() {
            self.error(
                entry,
                "a depends_on object needs kind and name",
                "write kind, name and (for a namespaced kind) namespace of the object to wait for",
            );
            return None;
        }
        let (kind, name) = (kind?, name?);
        // `Service` is a model kind and a Kubernetes kind: a mapping names the object.
        if let Some(model) = Kind::parse(&kind.value)
            && crate::k8s::builtin_api_version(&kind.value).is_none()
        {
            self.error(
                entry,
                format!("{model} is a model kind, not a Kubernetes kind"),
                format!("write the model as `- {model}/{}`", name.value),
            );
            return None;
        }
        if api_version.is_none() && crate::k8s::builtin_api_version(&kind.value).is_none() {
            self.error(
                entry,
                format!(
                    "\"{}\" is not a built-in kind: its apiVersion is needed",
                    kind.value
                ),
                "add apiVersion: <group>/<version>",
            );
            ok = false;
        }
        if namespace.is_none() && crate::k8s::is_namespaced_builtin(&kind.value) {
            self.error(
                entry,
                format!("a {} is namespaced: which namespace?", kind.value),
                "add namespace: <namespace>",
            );
            ok = false;
        }
        ok.then(|| Dependency {
            target: DependencyTarget::Object {
                api_version,
                kind,
                namespace,
                name,
            },
            ready_when,
            span: self.document.span(entry),
        })
    }

    /// `ready_when:` `{condition: T}`, `{field: path, value: v}` or `{endpoints: true}`.
    pub fn ready_when(&mut self, node: &Node) -> Option<Spanned<ReadyWhen>> {
        let span = self.document.span(node);
        let hint = "write one of `condition: Ready`, `field: status.phase` with `value: Bound`, or `endpoints: true`";
        let Value::Map(fields) = &node.value else {
            self.error(
                node,
                format!(
                    "ready_when must be a mapping, found {}",
                    node.value.describe()
                ),
                hint,
            );
            return None;
        };
        for (key, _) in fields {
            let name = key.scalar_text(&self.file.text).unwrap_or_default();
            if !READY_KEYS.contains(&name.as_str()) {
                let hint =
                    suggestion(&name, READY_KEYS.iter().copied()).unwrap_or_else(|| hint.into());
                self.error(key, format!("unknown field \"{name}\" in ready_when"), hint);
                return None;
            }
        }
        let condition = node.field("condition");
        let field = node.field("field");
        let value = node.field("value");
        let endpoints = node.field("endpoints");
        let rule = match (condition, field, value, endpoints) {
            (Some(c), None, None, None) => ReadyWhen::Condition(self.text(c, "condition")?),
            (None, Some(f), Some(v), None) => ReadyWhen::Field {
                path: self.text(f, "field")?,
                value: Spanned::new(
                    v.scalar_text(&self.file.text).unwrap_or_default(),
                    self.document.span(v),
                ),
            },
            (None, Some(f), None, None) => {
                self.error(
                    f,
                    "ready_when field needs the value to wait for",
                    "add value: <value>",
                );
                return None;
            }
            (None, None, None, Some(e)) if e.value == Value::Bool(true) => ReadyWhen::Endpoints,
            (None, None, None, Some(e)) => {
                self.error(
                    e,
                    "endpoints can only be true",
                    "write endpoints: true, or leave it out",
                );
                return None;
            }
            _ => {
                self.error(node, "ready_when takes exactly one rule", hint);
                return None;
            }
        };
        Some(Spanned::new(rule, span))
    }
}
