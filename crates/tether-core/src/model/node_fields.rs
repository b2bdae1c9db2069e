//! The fields of a Node model (a host): `labels` and `taints`, each entry checked as
//! the API server would check it, each problem at its key or value.

use std::collections::HashMap;

use super::depends::FieldReader;
use super::model_types::{Spanned, Taint, TaintEffect, Text};
use crate::diagnostic::Span;
use crate::diagnostic::suggestion;
use crate::k8s;
use crate::load::{Node, Value};

/// The key of the `NoExecute` taint a locked host carries; tether sets it from
/// `locked: true`, never from `taints`.
pub const LOCK_TAINT_KEY: &str = "tether.dev/locked";

/// The keys of a taint entry.
const TAINT_KEYS: &[&str] = &["key", "value", "effect"];

impl FieldReader<'_> {
    /// `labels:`, a mapping of label keys to values; bad entries are reported and
    /// left out.
    pub fn node_labels(&mut self, node: &Node) -> Vec<(Text, Text)> {
        let entries = match &node.value {
            Value::Null => return Vec::new(),
            Value::Map(entries) => entries,
            other => {
                self.error(
                    node,
                    format!("labels must be a mapping, found {}", other.describe()),
                    "one `key: value` per line under labels:",
                );
                return Vec::new();
            }
        };
        let mut labels = Vec::new();
        for (key, value) in entries {
            let key_text = self.label_key(key);
            let value_text = self.label_value(value);
            if let (Some(k), Some(v)) = (key_text, value_text) {
                labels.push((k, v));
            }
        }
        labels
    }

    fn label_key(&mut self, key: &Node) -> Option<Text> {
        let text = self.text(key, "a label key")?;
        if let Some(why) = k8s::label_key_problem(&text.value) {
            self.error(
                key,
                format!("label key \"{}\" is not valid: {why}", text.value),
                "a label key is [prefix/]name, e.g. example.com/zone or openstack-control-plane",
            );
            return None;
        }
        Some(text)
    }

    fn label_value(&mut self, value: &Node) -> Option<Text> {
        let text = match &value.value {
            // `label:` alone is the empty value, which Kubernetes allows.
            Value::Null => Spanned::new(String::new(), self.document.span(value)),
            Value::Str(s) => Spanned::new(s.clone(), self.document.span(value)),
            other => {
                let raw = value.raw(&self.file.text).to_string();
                self.error(
                    value,
                    format!("a label value is text, found {}", other.describe()),
                    format!("quote it: \"{raw}\""),
                );
                return None;
            }
        };
        if let Some(why) = k8s::label_value_problem(&text.value) {
            self.error(
                value,
                format!("label value \"{}\" is not valid: {why}", text.value),
                "at most 63 of a-z, A-Z, 0-9, '-', '_' and '.', starting and ending alphanumeric",
            );
            return None;
        }
        Some(text)
    }

    /// `taints:`, a list of `{key, value, effect}`; bad entries are reported and left
    /// out, as is the second of two entries with one key and effect (the API server
    /// refuses such a pair).
    pub fn node_taints(&mut self, node: &Node) -> Vec<Taint> {
        let entries = match &node.value {
            Value::Null => return Vec::new(),
            Value::Seq(entries) => entries,
            other => {
                self.error(
                    node,
                    format!("taints must be a list, found {}", other.describe()),
                    "one `- {key: …, value: …, effect: NoSchedule}` per taint",
                );
                return Vec::new();
            }
        };
        let mut taints: Vec<Taint> = Vec::new();
        let mut seen: HashMap<(String, TaintEffect), Span> = HashMap::new();
        for entry in entries {
            let Some(taint) = self.taint(entry) else {
                continue;
            };
            let id = (taint.key.value.clone(), taint.effect.value);
            if let Some(first) = seen.get(&id) {
                let first = *first;
                self.error(
                    entry,
                    format!(
                        "a second taint {}:{} on this node",
                        taint.key.value,
                        taint.effect.value.name()
                    ),
                    format!(
                        "a node has one taint per key and effect; the first is at line {}",
                        first.line
                    ),
                );
                continue;
            }
            seen.insert(id, taint.span);
            taints.push(taint);
        }
        taints
    }

    fn taint(&mut self, entry: &Node) -> Option<Taint> {
        let Value::Map(fields) = &entry.value else {
            self.error(
                entry,
                format!("a taint is a mapping, found {}", entry.value.describe()),
                "write - {key: dedicated, value: storage, effect: NoSchedule}",
            );
            return None;
        };
        let mut ok = true;
        for (name, _) in fields {
            let known = matches!(&name.value, Value::Str(n) if TAINT_KEYS.contains(&n.as_str()));
            if !known {
                let written = name.raw(&self.file.text).to_string();
                let hint = suggestion(&written, TAINT_KEYS.iter().copied())
                    .unwrap_or_else(|| "a taint has key, value and effect".into());
                self.error(
                    name,
                    format!("unknown field \"{written}\" in a taint"),
                    hint,
                );
                ok = false;
            }
        }
        let key = match entry.field("key") {
            Some(key) => self.label_key(key).filter(|k| self.not_the_lock(key, k)),
            None => {
                self.error(entry, "a taint needs a key", "write key: beside effect:");
                None
            }
        };
        let value = entry.field("value").map(|value| self.label_value(value));
        let effect = match entry.field("effect") {
            Some(effect) => self.effect(effect),
            None => {
                self.error(
                    entry,
                    "a taint needs an effect",
                    "effect: NoSchedule, PreferNoSchedule or NoExecute",
                );
                None
            }
        };
        let value = match value {
            Some(Some(v)) if v.value.is_empty() => None,
            Some(Some(v)) => Some(v),
            Some(None) => return None,
            None => None,
        };
        Some(Taint {
            key: key?,
            value,
            effect: effect?,
            span: self.document.span(entry),
        })
        .filter(|_| ok)
    }

    /// tether's own lock taint is set by `locked`, not written by hand.
    fn not_the_lock(&mut self, node: &Node, key: &Text) -> bool {
        if key.value != LOCK_TAINT_KEY {
            return true;
        }
        self.error(
            node,
            format!("{LOCK_TAINT_KEY} is the taint of a locked host"),
            "write locked: true instead (tether sets and removes the taint)",
        );
        false
    }

    fn effect(&mut self, node: &Node) -> Option<Spanned<TaintEffect>> {
        let text = self.text(node, "effect")?;
        if let Some(effect) = TaintEffect::ALL
            .into_iter()
            .find(|e| e.name() == text.value)
        {
            return Some(Spanned::new(effect, text.span));
        }
        let names = TaintEffect::ALL.map(TaintEffect::name);
        let hint = suggestion(&text.value, names.iter().copied())
            .unwrap_or_else(|| format!("one of: {}", names.join(", ")));
        self.error(
            node,
            format!("\"{}\" is not a taint effect", text.value),
            hint,
        );
        None
    }
}
