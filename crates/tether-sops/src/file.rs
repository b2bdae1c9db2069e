//! A whole sops file: reading its `sops:` metadata, decrypting it (in place, so that
//! every line stays where it was, or back to plain YAML), and encrypting plain YAML
//! the way sops does. Pure but for the random data key and nonces.

use zeroize::Zeroizing;

use super::cipher::{CipherError, DataKey, Sealed, ValueType, is_sealed};
use super::keys::{DataKeyError, Keyring, Recipient};
use super::tree::{Leaf, Mac, Selection, additional_data, leaves, plain_spelling};
use tether_core::load::{Dialect, Node, Pos, Value, parse_yaml};

/// The version of sops whose files tether writes (and is tested against).
pub const SOPS_VERSION: &str = "3.11.0";

/// A problem with a sops file, at a place in it. Never holds a decrypted value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SopsError {
    pub line: u32,
    pub column: u32,
    pub message: String,
    pub hint: Option<String>,
    /// It failed for want of a key that opens it (none given, or none of those given
    /// is a recipient), not because the file is damaged or changed.
    pub without_key: bool,
}

impl SopsError {
    pub(super) fn at(pos: Pos, message: impl Into<String>) -> Self {
        SopsError {
            line: pos.line.max(1),
            column: pos.column.max(1),
            message: message.into(),
            hint: None,
            without_key: false,
        }
    }

    fn for_want_of_a_key(mut self) -> Self {
        self.without_key = true;
        self
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Parses YAML as sops (Go's yaml.v3) types it: old-style octal, strict booleans.
pub(super) fn parse(text: &str) -> Result<Vec<Node>, SopsError> {
    parse_yaml(text, Dialect::Kubernetes).map_err(|e| {
        SopsError::at(
            Pos {
                line: e.line,
                column: e.column,
                ..Pos::default()
            },
            format!("YAML syntax error: {}", e.message),
        )
    })
}

/// Is this text a file sops encrypted (its first document has a `sops:` mapping)?
pub fn is_encrypted(text: &str) -> bool {
    if !text.contains("sops:") || !text.contains("ENC[AES256_GCM,") {
        return false;
    }
    parse_yaml(text, Dialect::Kubernetes).is_ok_and(|docs| {
        docs.first()
            .and_then(|d| d.field("sops"))
            .is_some_and(|s| matches!(s.value, Value::Map(_)))
    })
}

/// What the `sops:` mapping says.
struct Metadata<'n> {
    age: Vec<(String, String)>,
    others: Vec<String>,
    lastmodified: Option<&'n Node>,
    mac: Option<&'n Node>,
    selection: Selection,
    mac_only_encrypted: bool,
}

const SELECTION_FIELDS: [&str; 6] = [
    "unencrypted_suffix",
    "encrypted_suffix",
    "unencrypted_regex",
    "encrypted_regex",
    "unencrypted_comment_regex",
    "encrypted_comment_regex",
];

fn metadata<'n>(sops: &'n Node, sops_key: &Node) -> Result<Metadata<'n>, SopsError> {
    let Value::Map(entries) = &sops.value else {
        return Err(SopsError::at(sops_key.pos, "`sops` is not a mapping"));
    };
    let mut meta = Metadata {
        age: Vec::new(),
        others: Vec::new(),
        lastmodified: None,
        mac: None,
        selection: Selection::default(),
        mac_only_encrypted: false,
    };
    let mut selections = 0;
    for (key, value) in entries {
        let Value::Str(name) = &key.value else {
            continue;
        };
        match (name.as_str(), &value.value) {
            ("age", Value::Seq(items)) => {
                for item in items {
                    let text = |f: &str| match item.field(f).map(|n| &n.value) {
                        Some(Value::Str(s)) => Some(s.clone()),
                        _ => None,
                    };
                    if let (Some(recipient), Some(enc)) = (text("recipient"), text("enc")) {
                        meta.age.push((recipient, enc));
                    }
                }
            }
            ("lastmodified", _) => meta.lastmodified = Some(value),
            ("mac", _) => meta.mac = Some(value),
            ("mac_only_encrypted", Value::Bool(b)) => meta.mac_only_encrypted = *b,
            ("pgp" | "kms" | "gcp_kms" | "azure_kv" | "hc_vault" | "hckms", Value::Seq(s))
                if !s.is_empty() =>
            {
                meta.others.push(name.clone())
            }
            ("key_groups", Value::Seq(groups)) if !groups.is_empty() => {
                return Err(SopsError::at(
                    key.pos,
                    "this file's data key is split into key groups (Shamir): tether reads files encrypted to age recipients in one group",
                ));
            }
            (field, Value::Str(text)) if SELECTION_FIELDS.contains(&field) => {
                selections += 1;
                meta.selection = match Selection::from_field(field, text) {
                    Some(Ok(selection)) => selection,
                    Some(Err(_)) => {
                        return Err(SopsError::at(
                            value.pos,
                            format!("`{field}` is not a valid regular expression"),
                        ));
                    }
                    None => {
                        return Err(SopsError::at(
                            key.pos,
                            format!("`{field}` (comment selection) is not supported by tether"),
                        )
                        .hint("select values by key (encrypted_regex, unencrypted_suffix, …)"));
                    }
                };
            }
            _ => {}
        }
    }
    if selections > 1 {
        return Err(SopsError::at(
            sops_key.pos,
            "more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex in one file",
        ));
    }
    Ok(meta)
}

/// `lastmodified` as sops authenticates the MAC with it: RFC 3339, whole seconds.
fn lastmodified_text(node: &Node) -> Option<String> {
    let Value::Str(text) = &node.value else {
        return None;
    };
    let time = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// The data key of the file, opened with one of `keys`.
fn data_key(meta: &Metadata, keys: &Keyring, sops_pos: Pos) -> Result<DataKey, SopsError> {
    if meta.age.is_empty() {
        let others = match meta.others.is_empty() {
            true => "no key at all".to_string(),
            false => meta.others.join(", "),
        };
        return Err(SopsError::at(
            sops_pos,
            format!("this file is encrypted with {others}, not to an age recipient"),
        )
        .hint("tether decrypts files encrypted with age keys: re-encrypt with `tether secret encrypt`, or with sops for an age recipient")
        .for_want_of_a_key());
    }
    let recipients: Vec<&str> = meta.age.iter().map(|(r, _)| r.as_str()).collect();
    if keys.is_empty() {
        return Err(SopsError::at(
            sops_pos,
            format!(
                "this file is encrypted (sops, age: {}) and no age key was given",
                recipients.join(", ")
            ),
        )
        .hint(match keys.how_to_give() {
            Some(how) => format!("give tether the age private key: {how}"),
            None => "give tether the age private key".to_string(),
        })
        .for_want_of_a_key());
    }
    let mut malformed = false;
    for (_, enc) in &meta.age {
        match keys.open_data_key(enc) {
            Ok(key) => return Ok(key),
            Err(DataKeyError::Malformed) => malformed = true,
            Err(DataKeyError::NoMatchingKey) => {}
        }
    }
    if malformed {
        return Err(SopsError::at(
            sops_pos,
            "the file's encrypted data key is damaged (the `sops.age` block was changed)",
        ));
    }
    Err(SopsError::at(
        sops_pos,
        format!(
            "no key given opens this file: it is encrypted for {} (keys tried: {})",
            recipients.join(", "),
            keys.origins().join(", ")
        ),
    )
    .for_want_of_a_key())
}

/// A file decrypted in memory, every line where it was.
pub struct Decrypted {
    /// The text with each encrypted value replaced by its plain value (one line each)
    /// and the `sops:` block blanked.
    pub text: Zeroizing<String>,
    /// The plain strings that were encrypted, with their paths, so that they can be
    /// kept out of messages.
    pub values: Vec<(Vec<String>, Zeroizing<String>)>,
}

/// One value opened: where it was, and its plain text and type.
struct Opened {
    pos: Pos,
    in_list: bool,
    path: Vec<String>,
    plain: Zeroizing<String>,
    value_type: ValueType,
}

/// Opens every value of a file and checks its MAC.
fn open_all<'n>(
    docs: &'n [Node],
    keys: &Keyring,
) -> Result<(Vec<Opened>, Metadata<'n>, DataKey), SopsError> {
    let (sops_key, meta) = first_metadata(docs)?;
    let key = data_key(&meta, keys, sops_key.pos)?;
    let (opened, mac) = open_values(docs, &meta, &key)?;
    check_mac(&meta, &key, mac, sops_key.pos)?;
    Ok((opened, meta, key))
}

/// The `sops` key of the first document, and what its block says.
fn first_metadata(docs: &[Node]) -> Result<(&Node, Metadata<'_>), SopsError> {
    let first = docs
        .first()
        .ok_or_else(|| SopsError::at(Pos::default(), "the file is empty"))?;
    if !matches!(&first.value, Value::Map(_)) {
        return Err(SopsError::at(
            first.pos,
            "the first document is not a mapping",
        ));
    }
    let (sops_key, sops) = sops_entry(first)
        .ok_or_else(|| SopsError::at(first.pos, "no `sops` metadata in the first document"))?;
    Ok((sops_key, metadata(sops, sops_key)?))
}

/// Opens every encrypted value; returns them with the MAC of the values as they are.
fn open_values(
    docs: &[Node],
    meta: &Metadata,
    key: &DataKey,
) -> Result<(Vec<Opened>, String), SopsError> {
    let mut mac = Mac::new(meta.mac_only_encrypted);
    let mut opened = Vec::new();
    for doc in docs {
        let leaves = leaves(doc)
            .map_err(|k| SopsError::at(k.0.pos, "a mapping key that is not a string"))?;
        for leaf in leaves {
            let encrypted = meta.selection.encrypts(&leaf.path);
            match (&leaf.node.value, encrypted) {
                (Value::Null, _) => {}
                (Value::Str(s), true) if s.is_empty() => {}
                (Value::Str(s), true) if is_sealed(s) => {
                    let value = open_leaf(&leaf, s, key)?;
                    if value.value_type != ValueType::Comment {
                        mac.add(&value.plain, true);
                    }
                    opened.push(value);
                }
                (_, true) => {
                    return Err(SopsError::at(
                        leaf.node.pos,
                        format!("`{}` should be encrypted and is in plain text (written after the file was encrypted?)", leaf.path.join(".")),
                    )
                    .hint("encrypt it: `tether secret edit FILE` re-encrypts on save"));
                }
                (value, false) => {
                    if let Some((plain, _)) = plain_spelling(value) {
                        mac.add(&plain, false);
                    }
                }
            }
        }
    }
    Ok((opened, mac.finish()))
}

/// Signs `edited` again: a copy of the encrypted file `original` whose unencrypted
/// values tether changed in place (a day-2 operation's edit), which sops' MAC covers
/// too. `original` must open and check (an edit never vouches for a tampered file);
/// the encrypted values stay as they are, so the change shows alone in a diff, with a
/// new `lastmodified` and `mac`.
pub fn sign_edit(
    original: &str,
    edited: &str,
    keys: &Keyring,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<String, SopsError> {
    open_all(&parse(original)?, keys)?;
    let docs = parse(edited)?;
    let (sops_key, meta) = first_metadata(&docs)?;
    let key = data_key(&meta, keys, sops_key.pos)?;
    let (_, mac) = open_values(&docs, &meta, &key)?;
    let lastmodified = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mac = Sealed::seal(&key, &mac, ValueType::Str, &lastmodified).to_text();
    let mut edits = Vec::new();
    for (sops_key, sops) in docs.iter().filter_map(sops_entry) {
        let meta = metadata(sops, sops_key)?;
        let (Some(old_mac), Some(old_date)) = (meta.mac, meta.lastmodified) else {
            return Err(unsigned(sops_key.pos));
        };
        let (start, end) = value_range(edited, old_date.pos);
        edits.push((start, end, format!("\"{lastmodified}\"")));
        let (start, end) = value_range(edited, old_mac.pos);
        edits.push((start, end, mac.clone()));
    }
    Ok(apply_edits(edited, edits))
}

fn open_leaf(leaf: &Leaf, text: &str, key: &DataKey) -> Result<Opened, SopsError> {
    let path = leaf.path.join(".");
    let sealed =
        Sealed::parse(text).map_err(|e| SopsError::at(leaf.node.pos, format!("`{path}`: {e}")))?;
    let plain = sealed.open(key, &leaf.additional_data()).map_err(|e| {
        let message = match e {
            CipherError::Authentication => {
                format!("`{path}` does not decrypt: it was changed, or moved here from another key")
            }
            other => format!("`{path}`: {other}"),
        };
        SopsError::at(leaf.node.pos, message)
    })?;
    let valid = match sealed.value_type {
        ValueType::Int => plain.parse::<i64>().is_ok(),
        ValueType::Float => {
            plain.parse::<f64>().is_ok() || matches!(plain.as_str(), "+Inf" | "-Inf" | "NaN")
        }
        ValueType::Bool => matches!(
            plain.as_str(),
            "1" | "t"
                | "T"
                | "TRUE"
                | "true"
                | "True"
                | "0"
                | "f"
                | "F"
                | "FALSE"
                | "false"
                | "False"
        ),
        _ => true,
    };
    if !valid {
        return Err(SopsError::at(
            leaf.node.pos,
            format!(
                "`{path}` decrypts to a value that is not a valid {}",
                sealed.value_type.name()
            ),
        ));
    }
    Ok(Opened {
        pos: leaf.node.pos,
        in_list: leaf.in_list,
        path: leaf.path.clone(),
        plain,
        value_type: sealed.value_type,
    })
}

fn unsigned(sops_pos: Pos) -> SopsError {
    SopsError::at(
        sops_pos,
        "the `sops` metadata has no MAC or no lastmodified: the file cannot be checked",
    )
}

fn check_mac(
    meta: &Metadata,
    key: &DataKey,
    computed: String,
    sops_pos: Pos,
) -> Result<(), SopsError> {
    let at = meta.mac.map_or(sops_pos, |m| m.pos);
    let (Some(mac), Some(lastmodified)) = (meta.mac, meta.lastmodified) else {
        return Err(unsigned(sops_pos));
    };
    let Some(aad) = lastmodified_text(lastmodified) else {
        return Err(SopsError::at(
            lastmodified.pos,
            "`sops.lastmodified` is not an RFC 3339 time",
        ));
    };
    let recorded = match &mac.value {
        Value::Str(text) => Sealed::parse(text)
            .ok()
            .and_then(|s| s.open(key, &aad).ok()),
        _ => None,
    };
    match recorded {
        Some(recorded) if recorded.as_str() == computed => Ok(()),
        Some(_) => Err(SopsError::at(at, "MAC mismatch: the file's values were changed, added, removed or reordered after it was encrypted")
            .hint("if the change is yours, make it with `tether secret edit FILE` (or sops), which re-encrypts and signs the file")),
        None => Err(SopsError::at(at, "the MAC does not decrypt: the `sops` block was changed (mac or lastmodified)")),
    }
}

/// Decrypts a file in memory for reading models: same lines, values one line each.
pub fn decrypt_in_place(text: &str, keys: &Keyring) -> Result<Decrypted, SopsError> {
    let docs = parse(text)?;
    let (opened, _, _) = open_all(&docs, keys)?;
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut values = Vec::new();
    for value in &opened {
        let (start, end) = value_range(text, value.pos);
        let replacement = match (value.value_type, value.in_list) {
            // A comment sops moved into a list: the item goes, its line stays.
            (ValueType::Comment, true) => {
                let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
                edits.push((
                    line_start,
                    end,
                    " ".repeat(text[line_start..end].chars().count()),
                ));
                continue;
            }
            (ValueType::Comment, false) => continue,
            (ValueType::Str | ValueType::Bytes, _) => {
                values.push((value.path.clone(), value.plain.clone()));
                serde_json::to_string(value.plain.as_str()).unwrap_or_default()
            }
            (ValueType::Float, _) => float_yaml(&value.plain),
            (ValueType::Bool, _) => bool_yaml(&value.plain).to_string(),
            (ValueType::Int, _) => value.plain.to_string(),
        };
        edits.push((start, end, replacement));
    }
    edits.extend(sops_blocks_blanked(text, &docs));
    Ok(Decrypted {
        text: Zeroizing::new(apply_edits(text, edits)),
        values,
    })
}

/// The edits that blank each document's `sops:` block, its lines kept.
fn sops_blocks_blanked(text: &str, docs: &[Node]) -> Vec<(usize, usize, String)> {
    docs.iter()
        .filter_map(sops_entry)
        .map(|(key, sops)| {
            let (start, end) = entry_lines(text, key.pos, sops);
            (start, end, blank(&text[start..end]))
        })
        .collect()
}

/// What stands in for an encrypted string when a file is read without its key: the
/// structure is checked, never a value (none is known).
pub const ENCRYPTED_PLACEHOLDER: &str = "ENCRYPTED";

/// The structure of an encrypted file without its key, for checking models: each
/// encrypted value replaced by a placeholder of its type (a string, `0`, `0.0`,
/// `false`), the `sops:` block blanked, every line where it was. An error when a
/// model's `kind` or `name` is encrypted: then there is no structure to check (sops'
/// default rule encrypts them; `encrypted_regex: ^(data|stringData)$` does not).
pub fn structure_in_place(text: &str) -> Result<String, SopsError> {
    let docs = parse(text)?;
    let mut edits = sops_blocks_blanked(text, &docs);
    for doc in &docs {
        let doc_leaves = leaves(doc).map_err(|key| {
            SopsError::at(
                key.0.pos,
                "sops reads only string keys: this key is not one",
            )
        })?;
        for leaf in doc_leaves {
            let Value::Str(value) = &leaf.node.value else {
                continue;
            };
            if !is_sealed(value) {
                continue;
            }
            if matches!(leaf.path.as_slice(), [field] if field == "kind" || field == "name") {
                return Err(SopsError::at(
                    leaf.node.pos,
                    format!("the model's `{}` is encrypted: without the key, this file's models cannot be read", leaf.path[0]),
                )
                .hint("encrypt only the values (a .sops.yaml creation rule with `encrypted_regex: ^(data|stringData)$`), so that models are checked without the key"));
            }
            let value_type = Sealed::parse(value)
                .map_err(|e| SopsError::at(leaf.node.pos, e.to_string()))?
                .value_type;
            let placeholder = match (value_type, leaf.in_list) {
                (ValueType::Comment, true) => {
                    let (start, end) = value_range(text, leaf.node.pos);
                    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
                    edits.push((line_start, end, blank(&text[line_start..end])));
                    continue;
                }
                (ValueType::Comment, false) => continue,
                (ValueType::Str | ValueType::Bytes, _) => format!("\"{ENCRYPTED_PLACEHOLDER}\""),
                (ValueType::Int, _) => "0".to_string(),
                (ValueType::Float, _) => "0.0".to_string(),
                (ValueType::Bool, _) => "false".to_string(),
            };
            let (start, end) = value_range(text, leaf.node.pos);
            edits.push((start, end, placeholder));
        }
    }
    Ok(apply_edits(text, edits))
}

fn sops_entry(doc: &Node) -> Option<(&Node, &Node)> {
    let Value::Map(entries) = &doc.value else {
        return None;
    };
    entries
        .iter()
        .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == "sops"))
        .map(|(k, v)| (k, v))
}

/// The byte range of a scalar's text, without trailing line breaks; a block
/// scalar's range starts at its indicator (`|`, `>-`, …), which its span leaves out.
fn value_range(text: &str, pos: Pos) -> (usize, usize) {
    let start = (pos.offset as usize).min(text.len());
    let end = (start + pos.len as usize).min(text.len());
    let raw = &text[start..end];
    let end = start + raw.trim_end().len();
    let before = text[..start].trim_end_matches([' ', '\n', '\r', '\t']);
    let indicator = before
        .rfind(['|', '>'])
        .filter(|&i| {
            let header = &before[i + 1..];
            header.len() <= 2 && header.chars().all(|c| matches!(c, '+' | '-' | '1'..='9'))
        })
        .filter(|_| before.len() < start && text[before.len()..start].contains('\n'));
    (indicator.unwrap_or(start), end)
}

/// From the start of a key's line to the end of the line where its value ends.
fn entry_lines(text: &str, key: Pos, value: &Node) -> (usize, usize) {
    let key_start = (key.offset as usize).min(text.len());
    let start = text[..key_start].rfind('\n').map_or(0, |i| i + 1);
    let end_of_value = last_offset(value).min(text.len()).max(key_start);
    let end = text[end_of_value..]
        .find('\n')
        .map_or(text.len(), |i| end_of_value + i);
    (start, end)
}

/// The last byte any part of a node covers.
fn last_offset(node: &Node) -> usize {
    let own = (node.pos.offset + node.pos.len) as usize;
    let children = match &node.value {
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| last_offset(k).max(last_offset(v)))
            .max(),
        Value::Seq(items) => items.iter().map(last_offset).max(),
        _ => None,
    };
    // A block scalar's span may end after its line break.
    let own = match &node.value {
        Value::Map(_) | Value::Seq(_) => 0,
        _ => own.saturating_sub(1),
    };
    own.max(children.unwrap_or(0))
}

fn blank(text: &str) -> String {
    text.chars()
        .map(|c| if c == '\n' || c == '\r' { c } else { ' ' })
        .collect()
}

fn apply_edits(text: &str, mut edits: Vec<(usize, usize, String)>) -> String {
    edits.sort_by_key(|(start, _, _)| std::cmp::Reverse(*start));
    let mut out = text.to_string();
    for (start, end, replacement) in edits {
        out.replace_range(start..end, &replacement);
    }
    out
}

fn float_yaml(plain: &str) -> String {
    match plain {
        "+Inf" => ".inf".into(),
        "-Inf" => "-.inf".into(),
        "NaN" => ".nan".into(),
        // sops spells 1234568000.0 `1.234568e+09`: a float either way when read back.
        other if other.contains(['.', 'e', 'E']) => other.to_string(),
        other => format!("{other}.0"),
    }
}

fn bool_yaml(plain: &str) -> &'static str {
    match plain {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => "true",
        _ => "false",
    }
}

/// Decrypts a file back to plain YAML (what `sops -d` prints): values as YAML
/// scalars, comments decrypted, the `sops:` block removed.
pub fn decrypt_to_plain(text: &str, keys: &Keyring) -> Result<Zeroizing<String>, SopsError> {
    let docs = parse(text)?;
    let (opened, _, key) = open_all(&docs, keys)?;
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for value in &opened {
        let (start, end) = value_range(text, value.pos);
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let replacement = match value.value_type {
            ValueType::Comment if value.in_list => {
                let dash = text[line_start..start]
                    .rfind('-')
                    .map_or(start, |i| line_start + i);
                edits.push((dash, end, format!("#{}", value.plain.as_str())));
                continue;
            }
            ValueType::Comment => continue,
            ValueType::Str | ValueType::Bytes => {
                yaml_string(&value.plain, nesting(&text[line_start..start]))
            }
            ValueType::Float => float_yaml(&value.plain),
            ValueType::Bool => bool_yaml(&value.plain).to_string(),
            ValueType::Int => value.plain.to_string(),
        };
        edits.push((start, end, replacement));
    }
    edits.extend(comment_edits(text, &docs, &key));
    for doc in &docs {
        if let Some((k, sops)) = sops_entry(doc) {
            let (start, end) = entry_lines(text, k.pos, sops);
            let end = (end + 1).min(text.len());
            edits.push((start, end, String::new()));
        }
    }
    Ok(Zeroizing::new(apply_edits(text, edits)))
}

/// The columns a block scalar's lines need: past the key (or list item) on its line.
fn nesting(line_before_value: &str) -> usize {
    let mut indent = 0;
    let mut rest = line_before_value;
    loop {
        let trimmed = rest.trim_start_matches(' ');
        indent += rest.len() - trimmed.len();
        match trimmed.strip_prefix("- ") {
            Some(after) => {
                indent += 2;
                rest = after;
            }
            None => return indent + 2,
        }
    }
}

/// A string as YAML writes it: plain when it reads back the same, a literal block
/// when it has lines, else double-quoted.
fn yaml_string(value: &str, indent: usize) -> String {
    let reads_back = |candidate: &str| {
        parse_yaml(&format!("k: {candidate}\n"), Dialect::Kubernetes).is_ok_and(|docs| {
            docs.first()
                .and_then(|d| d.field("k"))
                .is_some_and(|n| matches!(&n.value, Value::Str(s) if s == value))
        })
    };
    if !value.contains('\n') && !value.is_empty() && reads_back(value) {
        return value.to_string();
    }
    if value.contains('\n') && !value.starts_with([' ', '\n']) && !value.contains('\r') {
        let body = value.trim_end_matches('\n');
        let chomp = match value.len() - body.len() {
            0 => "-",
            1 => "",
            _ => "+",
        };
        let pad = " ".repeat(indent);
        let mut block = format!("|{chomp}");
        for line in value.trim_end_matches('\n').split('\n') {
            block.push('\n');
            if !line.is_empty() {
                block.push_str(&pad);
                block.push_str(line);
            }
        }
        for _ in 1..(value.len() - body.len()) {
            block.push('\n');
        }
        return block;
    }
    serde_json::to_string(value).unwrap_or_default()
}

/// Encrypted comments (`#ENC[…]`) decrypted back to comments. sops authenticates a
/// comment with the path of the mapping (or list) holding it; the candidates are the
/// file's paths, and only the right one opens it.
fn comment_edits(text: &str, docs: &[Node], key: &DataKey) -> Vec<(usize, usize, String)> {
    let mut candidates: Vec<String> = vec![":".to_string()];
    for doc in docs {
        for leaf in leaves(doc).unwrap_or_default() {
            for depth in 0..=leaf.path.len() {
                let aad = additional_data(&leaf.path[..depth]);
                if !candidates.contains(&aad) {
                    candidates.push(aad);
                }
            }
        }
    }
    let mut edits = Vec::new();
    let mut search = 0;
    while let Some(found) = text[search..].find("#ENC[AES256_GCM,") {
        let start = search + found;
        let Some(close) = text[start..].find(']') else {
            break;
        };
        let end = start + close + 1;
        search = end;
        let preceded_by_space = start == 0 || text[..start].ends_with([' ', '\n', '\t']);
        let Ok(sealed) = Sealed::parse(&text[start + 1..end]) else {
            continue;
        };
        if !preceded_by_space || sealed.value_type != ValueType::Comment {
            continue;
        }
        if let Some(plain) = candidates.iter().find_map(|aad| sealed.open(key, aad).ok()) {
            edits.push((start, end, format!("#{}", plain.as_str())));
        }
    }
    edits
}

/// How a file is to be encrypted: from a `.sops.yaml` creation rule or flags.
#[derive(Clone, Debug, Default)]
pub struct Encryption {
    pub recipients: Vec<Recipient>,
    pub selection: Selection,
    pub mac_only_encrypted: bool,
}

/// Encrypts plain YAML as sops does (values selected by the rule, in place; the
/// layout and comments of the file kept), with a `sops:` block in each document.
#[expect(
    clippy::too_many_lines,
    reason = "sops' encryption in its order: check, make the data key, encrypt and sign each document"
)]
pub fn encrypt(
    text: &str,
    how: &Encryption,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<String, SopsError> {
    let docs = parse(text)?;
    let first = docs.first().ok_or_else(|| {
        SopsError::at(
            Pos::default(),
            "the file is empty: there is nothing to encrypt",
        )
    })?;
    if let Some((k, _)) = sops_entry(first) {
        return Err(SopsError::at(
            k.pos,
            "the file is already encrypted (it has a `sops` block)",
        ));
    }
    if how.recipients.is_empty() {
        return Err(SopsError::at(first.pos, "no age recipient to encrypt for"));
    }
    let key = DataKey::generate();
    let mut mac = Mac::new(how.mac_only_encrypted);
    let mut sealed_values: Vec<(usize, usize, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for doc in &docs {
        if !matches!(doc.value, Value::Map(_)) {
            return Err(SopsError::at(
                doc.pos,
                "a document that is not a mapping: sops encrypts mappings",
            ));
        }
        let leaves = leaves(doc)
            .map_err(|k| SopsError::at(k.0.pos, "a mapping key that is not a string"))?;
        for leaf in leaves {
            let raw = leaf.node.raw(text);
            if raw.starts_with(['&', '*']) || !seen.insert(leaf.node.pos.offset) {
                return Err(SopsError::at(
                    leaf.node.pos,
                    "anchors and aliases cannot be encrypted value by value",
                )
                .hint("write the value out where it is used"));
            }
            let Some((plain, value_type)) = plain_spelling(&leaf.node.value) else {
                continue;
            };
            let encrypted = how.selection.encrypts(&leaf.path);
            mac.add(&plain, encrypted);
            if encrypted && !plain.is_empty() {
                let (start, end) = value_range(text, leaf.node.pos);
                let sealed = Sealed::seal(&key, &plain, value_type, &leaf.additional_data());
                sealed_values.push((start, end, sealed.to_text()));
            }
        }
    }
    let lastmodified = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mac = Sealed::seal(&key, &mac.finish(), ValueType::Str, &lastmodified).to_text();
    let block = metadata_block(how, &key, &lastmodified, &mac)?;
    let mut inserts = Vec::new();
    for doc in &docs {
        let end = last_offset(doc).min(text.len());
        let at = text[end..].find('\n').map_or(text.len(), |i| end + i + 1);
        let lead = if at == text.len() && !text.ends_with('\n') {
            "\n"
        } else {
            ""
        };
        inserts.push((at, at, format!("{lead}{block}")));
    }
    for quote in [false, true] {
        let mut edits = inserts.clone();
        edits.extend(
            sealed_values
                .iter()
                .map(|(s, e, v)| (*s, *e, if quote { format!("'{v}'") } else { v.clone() })),
        );
        let encrypted = apply_edits(text, edits);
        if reads_as_sealed(&encrypted, sealed_values.len(), docs.len()) {
            return Ok(encrypted);
        }
    }
    Err(SopsError::at(
        first.pos,
        "the encrypted file does not read back as written (an unusual YAML layout?)",
    )
    .hint("write the file in block style (one key per line)"))
}

/// Does an encrypted text parse back with as many sealed values and documents?
fn reads_as_sealed(text: &str, sealed: usize, documents: usize) -> bool {
    let Ok(docs) = parse_yaml(text, Dialect::Kubernetes) else {
        return false;
    };
    let count: usize = docs
        .iter()
        .filter_map(|d| leaves(d).ok())
        .flatten()
        .filter(|l| matches!(&l.node.value, Value::Str(s) if is_sealed(s)))
        .count();
    docs.len() == documents && count == sealed && docs.iter().all(|d| sops_entry(d).is_some())
}

fn metadata_block(
    how: &Encryption,
    key: &DataKey,
    lastmodified: &str,
    mac: &str,
) -> Result<String, SopsError> {
    let mut block = String::from("sops:\n    age:\n");
    for recipient in &how.recipients {
        let enc = recipient.seal_data_key(key).map_err(|e| {
            SopsError::at(
                Pos::default(),
                format!(
                    "cannot encrypt the data key for {}: {e}",
                    recipient.to_text()
                ),
            )
        })?;
        block.push_str(&format!(
            "        - recipient: {}\n          enc: |\n",
            recipient.to_text()
        ));
        for line in enc.lines() {
            block.push_str(&format!("            {line}\n"));
        }
    }
    block.push_str(&format!(
        "    lastmodified: \"{lastmodified}\"\n    mac: {mac}\n"
    ));
    if how.mac_only_encrypted {
        block.push_str("    mac_only_encrypted: true\n");
    }
    let (field, value) = how.selection.field();
    block.push_str(&format!("    {field}: '{}'\n", value.replace('\'', "''")));
    block.push_str(&format!("    version: {SOPS_VERSION}\n"));
    Ok(block)
}

/// How an encrypted file was encrypted (its recipients and selection), so that an
/// edited copy is encrypted the same way.
pub fn encryption_of(text: &str) -> Result<Encryption, SopsError> {
    let docs = parse(text)?;
    let (key, sops) = docs.first().and_then(sops_entry).ok_or_else(|| {
        SopsError::at(
            Pos::default(),
            "the file is not encrypted (no `sops` block)",
        )
    })?;
    let meta = metadata(sops, key)?;
    let recipients = meta
        .age
        .iter()
        .map(|(r, _)| Recipient::parse(r).map_err(|e| SopsError::at(sops.pos, e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Encryption {
        recipients,
        selection: meta.selection,
        mac_only_encrypted: meta.mac_only_encrypted,
    })
}
