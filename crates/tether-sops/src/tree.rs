//! The walk sops makes over a YAML document: every leaf scalar in document order with
//! its path (the mapping keys above it; list items add nothing), which of them are
//! encrypted, and the MAC over their plain values.

use regex::Regex;
use sha2::{Digest, Sha512};

use tether_core::load::{Node, Value};

/// Which values of a file are encrypted: sops allows one rule per file.
#[derive(Clone, Debug)]
pub enum Selection {
    /// Everything but values under a key ending so (sops' default, `_unencrypted`).
    UnencryptedSuffix(String),
    /// Only values under a key ending so.
    EncryptedSuffix(String),
    /// Everything but values under a key the expression finds.
    UnencryptedRegex(Regex),
    /// Only values under a key the expression finds.
    EncryptedRegex(Regex),
}

/// sops' default selection.
pub const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";

impl Default for Selection {
    fn default() -> Self {
        Selection::UnencryptedSuffix(DEFAULT_UNENCRYPTED_SUFFIX.to_string())
    }
}

impl Selection {
    /// The metadata field and value sops records it as.
    pub fn field(&self) -> (&'static str, &str) {
        match self {
            Selection::UnencryptedSuffix(s) => ("unencrypted_suffix", s),
            Selection::EncryptedSuffix(s) => ("encrypted_suffix", s),
            Selection::UnencryptedRegex(r) => ("unencrypted_regex", r.as_str()),
            Selection::EncryptedRegex(r) => ("encrypted_regex", r.as_str()),
        }
    }

    /// The selection named by a metadata or `.sops.yaml` field, if it is one.
    pub fn from_field(name: &str, value: &str) -> Option<Result<Self, regex::Error>> {
        let regex = || Regex::new(value);
        Some(match name {
            "unencrypted_suffix" => Ok(Selection::UnencryptedSuffix(value.to_string())),
            "encrypted_suffix" => Ok(Selection::EncryptedSuffix(value.to_string())),
            "unencrypted_regex" => regex().map(Selection::UnencryptedRegex),
            "encrypted_regex" => regex().map(Selection::EncryptedRegex),
            _ => return None,
        })
    }

    /// Is a value at `path` encrypted? A key that matches decides for all below it.
    pub fn encrypts(&self, path: &[String]) -> bool {
        match self {
            Selection::UnencryptedSuffix(s) => !path.iter().any(|k| k.ends_with(s.as_str())),
            Selection::EncryptedSuffix(s) => path.iter().any(|k| k.ends_with(s.as_str())),
            Selection::UnencryptedRegex(r) => !path.iter().any(|k| r.is_match(k)),
            Selection::EncryptedRegex(r) => path.iter().any(|k| r.is_match(k)),
        }
    }
}

/// One leaf scalar of a document, with its path.
pub struct Leaf<'n> {
    pub node: &'n Node,
    pub path: Vec<String>,
    /// Is the leaf an item of a list? (An encrypted comment can be one.)
    pub in_list: bool,
}

impl Leaf<'_> {
    /// sops' additional data for the value: the keys joined by `:`, ending in `:`.
    pub fn additional_data(&self) -> String {
        additional_data(&self.path)
    }
}

pub fn additional_data(path: &[String]) -> String {
    let mut text = path.join(":");
    text.push(':');
    text
}

/// A mapping key that is not a string: sops refuses it.
#[derive(Debug)]
pub struct NonStringKey<'n>(pub &'n Node);

/// Every leaf of a document in sops' order, but the top-level `sops` entry.
pub fn leaves(root: &Node) -> Result<Vec<Leaf<'_>>, NonStringKey<'_>> {
    let mut out = Vec::new();
    let Value::Map(entries) = &root.value else {
        return Ok(out);
    };
    for (key, value) in entries {
        let Value::Str(name) = &key.value else {
            return Err(NonStringKey(key));
        };
        if name == "sops" {
            continue;
        }
        walk(value, vec![name.clone()], false, &mut out)?;
    }
    Ok(out)
}

fn walk<'n>(
    node: &'n Node,
    path: Vec<String>,
    in_list: bool,
    out: &mut Vec<Leaf<'n>>,
) -> Result<(), NonStringKey<'n>> {
    match &node.value {
        Value::Map(entries) => {
            for (key, value) in entries {
                let Value::Str(name) = &key.value else {
                    return Err(NonStringKey(key));
                };
                let mut child = path.clone();
                child.push(name.clone());
                walk(value, child, false, out)?;
            }
        }
        Value::Seq(items) => {
            for item in items {
                walk(item, path.clone(), true, out)?;
            }
        }
        _ => out.push(Leaf {
            node,
            path,
            in_list,
        }),
    }
    Ok(())
}

/// A plain value as sops spells it for the MAC and for encryption: Go's formatting
/// of integers, floats (no exponent) and booleans (`True`/`False`).
pub fn plain_spelling(value: &Value) -> Option<(String, super::cipher::ValueType)> {
    use super::cipher::ValueType as T;
    Some(match value {
        Value::Str(s) => (s.clone(), T::Str),
        Value::Int(i) => (i.to_string(), T::Int),
        Value::Float(f) if f.is_infinite() => {
            (if *f > 0.0 { "+Inf" } else { "-Inf" }.to_string(), T::Float)
        }
        Value::Float(f) if f.is_nan() => ("NaN".to_string(), T::Float),
        Value::Float(f) => (f.to_string(), T::Float),
        Value::Bool(b) => (if *b { "True" } else { "False" }.to_string(), T::Bool),
        Value::Null | Value::Map(_) | Value::Seq(_) => return None,
    })
}

/// The MAC of a file: SHA-512 over the plain values in order (comments, nulls and
/// empty values add nothing), upper-case hex.
pub struct Mac {
    hash: Sha512,
    only_encrypted: bool,
}

impl Mac {
    pub fn new(only_encrypted: bool) -> Self {
        let mut hash = Sha512::new();
        if only_encrypted {
            // sops marks such a MAC with the SHA-256 of "sops" first.
            hash.update(sha2::Sha256::digest(b"sops"));
        }
        Mac {
            hash,
            only_encrypted,
        }
    }

    pub fn add(&mut self, plain: &str, encrypted: bool) {
        if !self.only_encrypted || encrypted {
            self.hash.update(plain.as_bytes());
        }
    }

    pub fn finish(self) -> String {
        self.hash
            .finalize()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::load::{Dialect, parse_yaml};

    #[test]
    fn paths_name_keys_never_list_positions() {
        let docs = parse_yaml(
            "a: 1\nb:\n  c: [x, {d: y}]\nsops:\n  mac: z\n",
            Dialect::Kubernetes,
        )
        .unwrap();
        let leaves = leaves(&docs[0]).unwrap();
        let seen: Vec<String> = leaves.iter().map(|l| l.additional_data()).collect();
        assert_eq!(seen, ["a:", "b:c:", "b:c:d:"]);
    }

    #[test]
    fn a_key_that_matches_decides_for_everything_below() {
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let regex = Selection::EncryptedRegex(Regex::new("^(data|stringData)$").unwrap());
        assert!(regex.encrypts(&path(&["data", "password"])));
        assert!(!regex.encrypts(&path(&["name"])));
        assert!(!regex.encrypts(&path(&["metadata", "database"])));
        let suffix = Selection::default();
        assert!(suffix.encrypts(&path(&["a", "b"])));
        assert!(!suffix.encrypts(&path(&["x_unencrypted", "b"])));
    }

    #[test]
    fn the_mac_of_nothing_is_sha512_of_nothing() {
        assert!(Mac::new(false).finish().starts_with("CF83E135"));
    }
}
