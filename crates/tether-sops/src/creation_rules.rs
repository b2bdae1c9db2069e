//! `.sops.yaml`: the creation rules a team already keeps for sops (a path regex, the
//! age recipients, which values to encrypt), read as sops reads them.

use regex::Regex;

use super::file::{Encryption, SopsError};
use super::keys::Recipient;
use super::tree::Selection;
use tether_core::load::{Node, Value};

pub const CONFIG_FILE: &str = ".sops.yaml";

/// The encryption the first rule whose `path_regex` finds `relative` (the file's
/// path from the config's directory, `/`-separated) asks for; none when no rule
/// matches.
pub fn rule_for(config: &str, relative: &str) -> Result<Option<Encryption>, SopsError> {
    let docs = super::file::parse(config)?;
    let Some(rules) = docs.first().and_then(|d| d.field("creation_rules")) else {
        return Ok(None);
    };
    let Value::Seq(rules) = &rules.value else {
        return Err(SopsError::at(rules.pos, "`creation_rules` is not a list"));
    };
    for rule in rules {
        let matches = match rule.field("path_regex").map(|n| (n, &n.value)) {
            None | Some((_, Value::Null)) => true,
            Some((node, Value::Str(pattern))) => Regex::new(pattern)
                .map_err(|_| {
                    SopsError::at(
                        node.pos,
                        format!("`path_regex` {pattern:?} is not a valid regular expression"),
                    )
                })?
                .is_match(relative),
            Some((node, _)) => {
                return Err(SopsError::at(node.pos, "`path_regex` is not a string"));
            }
        };
        if matches {
            return read_rule(rule).map(Some);
        }
    }
    Ok(None)
}

fn read_rule(rule: &Node) -> Result<Encryption, SopsError> {
    let at = |node: &Node, message: String| SopsError::at(node.pos, message);
    let mut recipients = Vec::new();
    let mut age_nodes: Vec<&Node> = rule.field("age").into_iter().collect();
    if let Some(groups) = rule.field("key_groups") {
        match &groups.value {
            Value::Seq(groups) if groups.len() == 1 => {
                age_nodes = groups[0].field("age").into_iter().collect()
            }
            Value::Seq(groups) if groups.is_empty() => {}
            _ => {
                return Err(at(
                    groups,
                    "more than one key group (Shamir) is not supported by tether".into(),
                ));
            }
        }
    }
    for node in age_nodes {
        let texts: Vec<&str> = match &node.value {
            Value::Str(text) => text.split(',').collect(),
            Value::Seq(items) => items
                .iter()
                .filter_map(|i| match &i.value {
                    Value::Str(t) => Some(t.as_str()),
                    _ => None,
                })
                .flat_map(|t| t.split(','))
                .collect(),
            _ => {
                return Err(at(
                    node,
                    "`age` is neither a string nor a list of strings".into(),
                ));
            }
        };
        for text in texts.into_iter().map(str::trim).filter(|t| !t.is_empty()) {
            recipients.push(Recipient::parse(text).map_err(|e| at(node, e.to_string()))?);
        }
    }
    let mut selection = None;
    for field in [
        "unencrypted_suffix",
        "encrypted_suffix",
        "unencrypted_regex",
        "encrypted_regex",
    ] {
        let Some(node) = rule.field(field) else {
            continue;
        };
        let Value::Str(text) = &node.value else {
            return Err(at(node, format!("`{field}` is not a string")));
        };
        if selection.is_some() {
            return Err(at(node, "more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex in one rule".into()));
        }
        selection = Some(
            Selection::from_field(field, text)
                .and_then(Result::ok)
                .ok_or_else(|| at(node, format!("`{field}` is not a valid regular expression")))?,
        );
    }
    if let Some(node) = rule
        .field("encrypted_comment_regex")
        .or(rule.field("unencrypted_comment_regex"))
    {
        return Err(at(
            node,
            "comment selection is not supported by tether".into(),
        ));
    }
    let mac_only_encrypted = matches!(
        rule.field("mac_only_encrypted").map(|n| &n.value),
        Some(Value::Bool(true))
    );
    Ok(Encryption {
        recipients,
        selection: selection.unwrap_or_default(),
        mac_only_encrypted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "creation_rules:\n  - path_regex: secrets/.*\\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: >-\n      age1yt3tfqlfrwdwx0z0ynwplcr6qxcxfaqycuprpmy89nr83ltx74tqdpszlw,\n      age1tmaae3ld5vpevmsh5yacsauzx8jetg300mpvc4ugp5zr5l6ssq9sla97ep\n  - path_regex: ''\n    key_groups:\n      - age:\n          - age1yt3tfqlfrwdwx0z0ynwplcr6qxcxfaqycuprpmy89nr83ltx74tqdpszlw\n";

    #[test]
    fn the_first_rule_whose_path_regex_matches_decides() {
        let rule = rule_for(CONFIG, "models/secrets/db.yaml").unwrap().unwrap();
        assert_eq!(rule.recipients.len(), 2);
        assert_eq!(
            rule.selection.field(),
            ("encrypted_regex", "^(data|stringData)$")
        );
        let fallback = rule_for(CONFIG, "models/app.yaml").unwrap().unwrap();
        assert_eq!(fallback.recipients.len(), 1);
        assert_eq!(
            fallback.selection.field(),
            ("unencrypted_suffix", "_unencrypted")
        );
    }

    #[test]
    fn a_bad_recipient_is_an_error_at_its_line() {
        let error = rule_for("creation_rules:\n  - age: age1nope\n", "a.yaml")
            .err()
            .unwrap();
        assert_eq!(
            (error.line, error.message.as_str()),
            (2, "`age1nope` is not an age recipient (a public key age1…)")
        );
    }
}
