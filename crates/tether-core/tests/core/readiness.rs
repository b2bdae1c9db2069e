//! The readiness rules on recorded object states: each document of
//! `tests/readiness/*.yaml` is an object of a kind (or none: it does not exist), an
//! optional `ready_when` rule and Endpoints, and the readiness expected
//! (`ready`, `waiting: …`, `failed: …`). Cases with `rollout: true` are judged as
//! `tether rollout status` judges a controller. Objects of custom kinds are judged by
//! the shipped health checks, and each checked kind has a recorded state that is
//! ready and one that is not.

use std::path::Path;

use serde_json::Value;
use tether_core::health::HealthChecks;
use tether_core::readiness::{Readiness, assess, rollout};
use tether_core::workflow::Rule;

fn rule_of(case: &Value) -> Rule {
    let rule = &case["rule"];
    if let Some(condition) = rule["condition"].as_str() {
        Rule::Condition(condition.into())
    } else if let Some(path) = rule["field"].as_str() {
        Rule::Field {
            path: path.into(),
            value: rule["value"].as_str().unwrap().into(),
        }
    } else if rule["endpoints"] == Value::Bool(true) {
        Rule::Endpoints
    } else {
        Rule::BuiltIn
    }
}

fn shown(readiness: &Readiness) -> String {
    match readiness {
        Readiness::Ready => "ready".into(),
        Readiness::Waiting(why) => format!("waiting: {why}"),
        Readiness::Failed(why) => format!("failed: {why}"),
    }
}

#[test]
fn every_kind_is_ready_waiting_or_failed_as_recorded() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/readiness");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let mut count = 0;
    let mut kinds = std::collections::BTreeSet::new();
    let (mut checked_ready, mut checked_not) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let cases: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        for (i, case) in cases.iter().enumerate() {
            count += 1;
            let kind = case["kind"].as_str().unwrap();
            kinds.insert(kind.to_string());
            let object = case.get("object");
            let endpoints = case.get("endpoints");
            let readiness = match case["rollout"].as_bool() {
                // `tether rollout status`'s judgement of a controller.
                Some(true) => rollout(kind, "web", object.unwrap()),
                _ => assess(
                    kind,
                    &rule_of(case),
                    object,
                    endpoints,
                    HealthChecks::library(),
                ),
            };
            let actual = shown(&readiness);
            let expected = case["expect"].as_str().unwrap();
            if let Some(api_version) = object.and_then(|o| o["apiVersion"].as_str()) {
                let kind = format!("{kind} {api_version}");
                match expected == "ready" {
                    true => checked_ready.insert(kind),
                    false => checked_not.insert(kind),
                };
            }
            if actual != expected {
                failures.push(format!(
                    "{} case {} ({kind}):\n  expected {expected}\n  actual   {actual}",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for kind in [
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "Pod",
        "PersistentVolumeClaim",
        "CustomResourceDefinition",
        "Namespace",
        "Service",
    ] {
        assert!(kinds.contains(kind), "no recorded state of a {kind}");
    }
    assert!(count >= 40, "{count} cases");
    let library = HealthChecks::library();
    for kind in library.kinds() {
        let (name, group) = kind.split_once('.').unwrap();
        let recorded = |set: &std::collections::BTreeSet<String>| {
            set.iter().any(|k| {
                let (k, api_version) = k.split_once(' ').unwrap();
                k == name && library.covers(api_version, name) && api_version.starts_with(group)
            })
        };
        assert!(recorded(&checked_ready), "no ready state of {kind}");
        assert!(
            recorded(&checked_not),
            "no state of {kind} that is not ready"
        );
    }
}
