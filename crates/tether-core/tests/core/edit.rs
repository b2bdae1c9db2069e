//! Format-preserving edits as data: each `tests/edit/<case>.ops` line is one edit of
//! `<case>.yaml` (each on the original text); `<case>.expected` holds, per edit, the
//! diff it makes or its error. Beyond the snapshot, every edit is checked to change
//! exactly the value it names: the parsed documents before and after are equal but
//! for that value (`TETHER_BLESS=1` rewrites the snapshots).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};
use tether_core::edit::{self, ModelRef, Scalar};
use tether_core::load::{Dialect, Node, Value, parse_yaml};
use tether_testkit::snapshot::Cases;

fn json(node: &Node) -> Json {
    match &node.value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Float(f) => Json::from(*f),
        Value::Str(s) => Json::String(s.clone()),
        Value::Seq(items) => Json::Array(items.iter().map(json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (json(k).as_str().unwrap_or("?").to_string(), json(v)))
                .collect(),
        ),
    }
}

fn documents(text: &str) -> Vec<Json> {
    parse_yaml(text, Dialect::Models)
        .unwrap()
        .iter()
        .map(json)
        .collect()
}

fn is_model(document: &Json, model: ModelRef<'_>) -> bool {
    document["kind"] == model.kind && document["name"] == model.name
}

enum Op<'a> {
    Set(Vec<&'a str>, Scalar),
    Remove(Vec<&'a str>),
    Restore(&'a str),
}

fn parse_op(line: &str) -> (ModelRef<'_>, Op<'_>) {
    let mut words = line.split(' ');
    let verb = words.next().unwrap();
    let (kind, name) = words.next().unwrap().split_once('/').unwrap();
    let model = ModelRef { kind, name };
    let rest: Vec<&str> = words.collect();
    let op = match verb {
        "set" => {
            let at = rest.iter().position(|w| *w == "=").unwrap();
            let value = rest[at + 1..].join(" ");
            let value = if let Ok(i) = value.parse() {
                Scalar::Int(i)
            } else if let Ok(b) = value.parse() {
                Scalar::Bool(b)
            } else {
                Scalar::Str(value.trim_matches('"').to_string())
            };
            Op::Set(rest[..at].to_vec(), value)
        }
        "remove" => Op::Remove(rest),
        "restore" => Op::Restore(rest[1]),
        other => panic!("unknown op {other}"),
    };
    (model, op)
}

/// The documents as they must be after the edit: the model's value changed, nothing else.
fn expected_documents(before: &[Json], model: ModelRef<'_>, op: &Op<'_>, dir: &Path) -> Vec<Json> {
    let mut after = before.to_vec();
    let target = after.iter_mut().find(|d| is_model(d, model)).unwrap();
    match op {
        Op::Set(path, value) => {
            let mut map = target;
            for key in &path[..path.len() - 1] {
                if map.get(*key).is_none_or(Json::is_null) {
                    map[*key] = Json::Object(Map::new());
                }
                map = &mut map[*key];
            }
            map[path[path.len() - 1]] = match value {
                Scalar::Int(i) => Json::from(*i),
                Scalar::Bool(b) => Json::Bool(*b),
                Scalar::Str(s) => Json::String(s.clone()),
            };
        }
        Op::Remove(path) => {
            let mut map = target;
            for key in &path[..path.len() - 1] {
                map = &mut map[*key];
            }
            map.as_object_mut().unwrap().remove(path[path.len() - 1]);
        }
        Op::Restore(file) => {
            let old = documents(&std::fs::read_to_string(dir.join(file)).unwrap());
            *target = old.into_iter().find(|d| is_model(d, model)).unwrap();
        }
    }
    after
}

fn run_case(ops_file: &Path) -> String {
    let dir = ops_file.parent().unwrap();
    let text = std::fs::read_to_string(ops_file.with_extension("yaml")).unwrap();
    let before = documents(&text);
    let mut report = String::new();
    for line in std::fs::read_to_string(ops_file).unwrap().lines() {
        let (model, op) = parse_op(line);
        let result = match &op {
            Op::Set(path, value) => edit::set_field(&text, model, path, value).map(Some),
            Op::Remove(path) => edit::remove_field(&text, model, path),
            Op::Restore(file) => {
                let old = std::fs::read_to_string(dir.join(file)).unwrap();
                edit::document_text(&old, model)
                    .and_then(|document| edit::replace_document(&text, model, document))
                    .map(Some)
            }
        };
        report.push_str(&format!("## {line}\n"));
        match result {
            Ok(Some(edited)) => {
                assert_eq!(
                    documents(&edited),
                    expected_documents(&before, model, &op, dir),
                    "{line}: more than the value changed:\n{edited}"
                );
                let bare_newlines = |t: &str| t.matches('\n').count() - t.matches("\r\n").count();
                if bare_newlines(&text) == 0 {
                    assert_eq!(bare_newlines(&edited), 0, "{line}: a line ending changed");
                }
                let diff = similar::TextDiff::from_lines(&text, &edited)
                    .unified_diff()
                    .context_radius(1)
                    .to_string();
                report.push_str(&diff.replace('\r', "␍"));
            }
            Ok(None) => report.push_str("(not there: no change)\n"),
            Err(e) => report.push_str(&format!("error: {e}\n")),
        }
    }
    report
}

#[test]
fn edits_change_exactly_the_value_they_name() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/edit");
    Cases::files(dir, "ops").at_least(5).check(run_case);
}
