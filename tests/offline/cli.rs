//! The `tether` binary as a user runs it: exit codes, output formats, secrets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn tether(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(root())
        .env_remove("TETHER_LOG_LEVEL")
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn validate_exits_0_for_valid_models() {
    let out = tether(&["validate", "examples/models"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "examples/models: 35 models in 8 files: valid\n"
    );
}

#[test]
fn validate_exits_1_with_every_problem_in_plain_text_when_piped() {
    let out = tether(&["validate", "tests/cases/invalid/dangling-references"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    // The path is the file's from the working directory, as the models root was given.
    assert!(stdout.starts_with("tests/cases/invalid/dangling-references/models.yaml:13:15: error: Slice \"pods\": no TrustDomain named \"demo-trsut\"\n    hint: did you mean \"demo\"?\n"), "{stdout}");
    assert!(
        stdout.ends_with(": 5 models in 1 file: 4 errors\n"),
        "{stdout}"
    );
    assert!(!stdout.contains('\u{1b}'), "no colour codes when piped");
}

#[test]
fn graphical_report_shows_the_source_line() {
    let out = tether(&[
        "--color",
        "always",
        "validate",
        "tests/cases/invalid/unknown-kind-typo",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("kind: Slcie"), "{stdout}");
    assert!(
        stdout.contains("tests/cases/invalid/unknown-kind-typo/models.yaml:4:7"),
        "{stdout}"
    );
    assert!(stdout.contains("did you mean \"Slice\"?"), "{stdout}");
}

#[test]
fn unreadable_path_exits_2() {
    let out = tether(&["validate", "no/such/dir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no/such/dir"),
        "{}",
        text(&out.stderr)
    );
    let out = tether(&["render", "-o", "xml", "examples/models"]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn render_refuses_invalid_models_and_prints_nothing() {
    let out = tether(&["render", "tests/cases/invalid/port-ranges"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("internal_port 70000 is out of range"));
}

fn json_items(path: &str) -> Vec<serde_json::Value> {
    let out = tether(&["render", path, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    list["items"].as_array().unwrap().clone()
}

#[test]
fn yaml_and_json_outputs_hold_the_same_objects_in_apply_order() {
    let items = json_items("examples/models");
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "Namespace",
            "LimitRange",
            "ResourceQuota",
            "ServiceAccount",
            "ConfigMap",
            "ConfigMap",
            "Secret",
            "DaemonSet",
            "Deployment",
            "Deployment",
            "Job",
            "Pod",
            "Pod",
            "StatefulSet",
            "NetworkPolicy",
            "Service",
            "Service",
            "Service",
        ]
    );
    for item in &items {
        assert_eq!(
            item["metadata"]["labels"]["app.kubernetes.io/managed-by"], "tether",
            "{item}"
        );
        assert!(
            item["metadata"]["annotations"]["tether.dev/model"].is_string(),
            "{item}"
        );
    }
    // The YAML, read the way kubectl reads it (YAML 1.1: yes/on booleans, 0755 octal),
    // is the same objects: every string that YAML 1.1 would retype is quoted.
    let out = tether(&["render", "examples/models"]);
    let yaml = text(&out.stdout);
    let yaml_1_1 = serde_saphyr::options! { legacy_octal_numbers: true };
    let from_yaml: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple_with_options(&yaml, yaml_1_1).unwrap();
    assert_eq!(from_yaml, items);
}

#[test]
fn yaml_1_1_lookalike_strings_survive_a_yaml_1_1_reader() {
    let dir = "tests/cases/valid/yaml-1-1-spellings";
    let items = json_items(dir);
    let out = tether(&["render", dir]);
    let yaml_1_1 = serde_saphyr::options! { legacy_octal_numbers: true };
    let from_yaml: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple_with_options(&text(&out.stdout), yaml_1_1).unwrap();
    assert_eq!(from_yaml, items);
    let config = items.iter().find(|i| i["kind"] == "ConfigMap").unwrap();
    assert_eq!(config["data"]["enabled"], "yes");
    assert_eq!(config["data"]["mode"], "0755");
    assert_eq!(config["data"]["on"], "off");
}

#[test]
fn secret_values_never_appear_in_plain_text() {
    let plain = ["s3cr3t-example-only", "pk_example_0000"];
    for args in [
        vec!["--log-level", "trace", "validate", "examples/models"],
        vec!["--log-level", "trace", "render", "examples/models"],
        vec![
            "--log-level",
            "trace",
            "render",
            "examples/models",
            "-o",
            "json",
        ],
        vec![
            "--log-format",
            "json",
            "--log-level",
            "trace",
            "render",
            "examples/models",
        ],
    ] {
        let out = tether(&args);
        assert_eq!(out.status.code(), Some(0));
        for output in [text(&out.stdout), text(&out.stderr)] {
            for secret in plain {
                assert!(!output.contains(secret), "{args:?} printed {secret}");
            }
        }
    }
}

#[test]
fn a_single_file_can_be_validated() {
    let out = tether(&["validate", "tests/cases/invalid/missing-kind/models.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).starts_with(
        "tests/cases/invalid/missing-kind/models.yaml:4:1: error: missing required field \"kind\""
    ));
}

#[test]
fn help_shows_examples_and_completions_are_generated() {
    let out = tether(&["render", "--help"]);
    assert!(text(&out.stdout).contains("tether render examples/models | kubectl apply"));
    let out = tether(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("_tether()"));
    assert!(Path::new(env!("CARGO_BIN_EXE_tether")).exists());
}

#[test]
fn a_confined_repository_refuses_what_falls_outside_at_the_models_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".tether.yaml"),
        "confine:\n  namespaces: [shop]\n  kinds: [ConfigMap, Namespace]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("models.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\nkind: TrustDomain\nname: kube-system\n---\n\
         kind: KubernetesConfigMap\nname: fine\ntrust_domain: shop\ndata:\n  a: b\n---\n\
         kind: KubernetesConfigMap\nname: outside\ntrust_domain: kube-system\ndata:\n  a: b\n---\n\
         kind: KubernetesResourceInstance\nname: admin\nresource_definition: |\n  apiVersion: rbac.authorization.k8s.io/v1\n  kind: ClusterRoleBinding\n  metadata:\n    name: everyone-admin\n  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n  subjects: [{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}]\n",
    )
    .unwrap();
    let out = tether(&["validate", dir.path().to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("models.yaml:16:1: error: KubernetesConfigMap \"outside\": ConfigMap kube-system/outside is outside the namespaces this repository may use (shop)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("models.yaml:22:1: error: KubernetesResourceInstance \"admin\": ClusterRoleBinding everyone-admin is cluster-scoped"),
        "{stdout}"
    );
    assert!(
        stdout.contains("models.yaml:7:1: error: TrustDomain \"kube-system\": Namespace kube-system is outside the namespaces"),
        "{stdout}"
    );
    assert!(!stdout.contains("\"fine\""), "{stdout}");
    assert!(!stdout.contains("TrustDomain \"shop\""), "{stdout}");
}

#[test]
fn graphical_diagnostics_never_show_a_secrets_value() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("models.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\n\
         kind: KubernetesSecret\nname: db\ndata:\n  password: hunter2-in-plain\ntrust_domain: shpo\n",
    )
    .unwrap();
    let out = tether(&[
        "validate",
        "--color",
        "always",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("no TrustDomain named"),
        "a graphical report: {stdout}"
    );
    assert!(
        stdout.contains("password"),
        "the snippet is shown: {stdout}"
    );
    assert!(!stdout.contains("hunter2-in-plain"), "{stdout}");
}

#[test]
fn a_short_webhook_secret_is_refused_before_anything_runs() {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "short\n").unwrap();
    let output = tether(&[
        "run",
        "--webhook-secret-file",
        secret.path().to_str().unwrap(),
        "--kubeconfig",
        "/nonexistent",
        "examples/models",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let said = text(&output.stderr);
    assert!(said.contains("at least 16"), "{said}");
}

#[test]
fn the_manual_page_names_every_command() {
    let output = tether(&["man"]);
    assert!(output.status.success());
    let page = text(&output.stdout);
    assert!(page.contains(".TH tether 1"), "{page}");
    for command in [
        "validate",
        "render",
        "diff",
        "apply",
        "run",
        "reconcile",
        "discover",
        "events",
    ] {
        assert!(page.contains(command), "the page lacks {command}");
    }
}

#[test]
fn every_command_shows_an_example_in_its_help() {
    let help = text(&tether(&["--help"]).stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A wrapped description continues on a line indented further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 12, "{help}");
    for command in commands {
        let output = tether(&[command, "--help"]);
        let page = text(&output.stdout);
        assert!(
            page.contains("Example:\n  tether ") || page.contains("Examples:\n  tether "),
            "tether {command} --help shows no example:\n{page}"
        );
    }
}
