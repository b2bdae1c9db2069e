//! Secret values hidden from what is shown of a models file: a graphical diagnostic
//! prints the lines around a problem, and those may hold a KubernetesSecret's values,
//! or a Secret written in a `resource_definition`. [`masked`] gives the text with
//! each such value's characters replaced by `*` (line breaks kept), so that every
//! position still points where it did. Pure.

use crate::load::{Dialect, Node, Value, parse_yaml};

/// `text` with the values of the Secrets it defines masked.
pub fn masked(text: &str) -> String {
    let Ok(documents) = parse_yaml(text, Dialect::Models) else {
        // Unparsable: a value cannot be told from the rest; a file that may define a
        // Secret is not shown at all.
        let may_hold_secrets = text.contains("KubernetesSecret") || defines_secret(text);
        return match may_hold_secrets {
            true => mask_range(text, 0, text.len()),
            false => text.to_string(),
        };
    };
    let mut bytes = text.as_bytes().to_vec();
    for document in &documents {
        let kind = document.field("kind").and_then(|k| match &k.value {
            Value::Str(s) => Some(s.as_str()),
            _ => None,
        });
        let secret_values: Vec<&Node> = match kind {
            Some("KubernetesSecret") => match document.field("data").map(|d| &d.value) {
                Some(Value::Map(entries)) => entries.iter().map(|(_, v)| v).collect(),
                _ => Vec::new(),
            },
            // Kubernetes YAML as text: a Secret in it is masked whole.
            Some("KubernetesResourceInstance") => document
                .field("resource_definition")
                .filter(|d| matches!(&d.value, Value::Str(s) if defines_secret(s)))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        for value in secret_values {
            let start = value.pos.offset as usize;
            let end = (start + value.pos.len as usize).min(bytes.len());
            for byte in bytes.get_mut(start..end).into_iter().flatten() {
                if !matches!(*byte, b'\n' | b'\r') {
                    *byte = b'*';
                }
            }
        }
    }
    // Masking replaced whole UTF-8 sequences byte by byte with ASCII: still UTF-8
    // only if no sequence was cut, which value boundaries guarantee.
    String::from_utf8(bytes).unwrap_or_else(|_| mask_range(text, 0, text.len()))
}

fn mask_range(text: &str, start: usize, end: usize) -> String {
    text.char_indices()
        .map(|(i, c)| match c {
            '\n' | '\r' => c,
            _ if (start..end).contains(&i) => '*',
            _ => c,
        })
        .collect()
}

fn defines_secret(text: &str) -> bool {
    text.lines()
        .any(|l| l.trim_start().trim_start_matches("- ").trim() == "kind: Secret")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_starred_and_positions_kept() {
        let text = "kind: KubernetesSecret\nname: db\ntrust_domain: shop\ndata:\n  password: hunter2\n  token: \"abc\"\n---\nkind: KubernetesConfigMap\nname: c\ndata:\n  visible: yes-please\n";
        let masked = masked(text);
        assert_eq!(masked.len(), text.len());
        assert!(
            !masked.contains("hunter2") && !masked.contains("abc"),
            "{masked}"
        );
        assert!(masked.contains("password: *******"), "{masked}");
        assert!(masked.contains("visible: yes-please"), "{masked}");
        assert_eq!(masked.lines().count(), text.lines().count());
    }

    #[test]
    fn a_secret_in_a_resource_definition_is_starred_whole() {
        let text = "kind: KubernetesResourceInstance\nname: r\nresource_definition: |\n  apiVersion: v1\n  kind: Secret\n  metadata:\n    name: s\n  stringData:\n    key: sesame\n";
        let masked = masked(text);
        assert!(!masked.contains("sesame"), "{masked}");
        assert!(masked.starts_with("kind: KubernetesResourceInstance\nname: r\n"));
    }
}
