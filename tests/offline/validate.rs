//! `tether validate` as a CI job runs it: a wrong path fails instead of passing, the
//! errors are capped, file paths click through from the working directory, GitHub
//! annotations and JSON for machines, Kubernetes spellings answered with the model
//! field, and encrypted files checked without their key.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::sops::{run_sops, test_recipient, tools};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The binary run from `dir`, with no age key from the environment or the home
/// directory (a key is given with `--age-key-file` where a test means one).
fn tether_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(dir)
        .env_remove("TETHER_LOG_LEVEL")
        .env_remove("NO_COLOR")
        .env_remove("TETHER_PATH")
        .env_remove("TETHER_AGE_KEY")
        .env_remove("TETHER_AGE_KEY_FILE")
        .env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join(".config"))
        .output()
        .unwrap()
}

fn tether(args: &[&str]) -> Output {
    tether_in(&root(), args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

const DANGLING: &str = "tests/cases/invalid/dangling-references";

#[test]
fn a_directory_without_models_fails_unless_empty_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("models");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("README.md"), "not a model\n").unwrap();
    let out = tether_in(dir.path(), &["validate", "models"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "error: no models found in models: no *.yaml or *.yml file (dot-files and dot-directories are skipped)\n    \
         hint: check the path (relative to the working directory); pass --allow-empty if a models root without models is intended\n"
    );
    // A file with nothing but comments holds no model either.
    std::fs::write(empty.join("models.yaml"), "# to do\n").unwrap();
    let out = tether_in(dir.path(), &["validate", "models"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let why = "no models found in models: its one *.yaml/*.yml file holds no model";
    assert!(stdout.starts_with(&format!("error: {why}\n")), "{stdout}");
    let allowed = tether_in(dir.path(), &["validate", "models", "--allow-empty"]);
    assert_eq!(allowed.status.code(), Some(0));
    assert_eq!(text(&allowed.stdout), "models: 0 models in 1 file: valid\n");
    // For machines: not valid, and why.
    let json = tether_in(dir.path(), &["validate", "models", "-o", "json"]);
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["models"], 0);
    assert!(
        report["failure"]
            .as_str()
            .unwrap()
            .starts_with("no models found in models")
    );
}

#[test]
fn a_misspelt_path_exits_2_naming_it() {
    let out = tether(&["validate", "tests/casse/invalid"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stdout).is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tests/casse/invalid") && stderr.contains("No such file or directory"),
        "{stderr}"
    );
}

/// A models root with `errors` unknown fields and `warnings` XOS feedback fields.
fn many_problems(errors: usize, warnings: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("kind: KubernetesService\nname: kubernetes\n");
    for i in 0..errors {
        text.push_str(&format!("---\nkind: Site\nname: site-{i}\nlatitude: 1\n"));
    }
    for i in 0..warnings {
        text.push_str(&format!(
            "---\nkind: TrustDomain\nname: td-{i}\nbackend_status: OK\n"
        ));
    }
    std::fs::write(dir.path().join("models.yaml"), text).unwrap();
    dir
}

fn lines_with(stdout: &str, severity: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.contains(&format!(": {severity}: ")))
        .count()
}

#[test]
fn errors_are_capped_and_the_summary_counts_every_one() {
    let dir = many_problems(30, 25);
    let out = tether_in(dir.path(), &["validate", "."]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(lines_with(&stdout, "error"), 20, "{stdout}");
    assert_eq!(lines_with(&stdout, "warning"), 20, "{stdout}");
    let tail: Vec<&str> = stdout.lines().rev().take(2).collect();
    assert_eq!(
        tail,
        [
            ".: 56 models in 1 file: 30 errors, 25 warnings",
            "… and 10 more errors and 5 more warnings (--max-errors 0 shows every one)",
        ]
    );
    // The first problems in file order are the ones shown.
    assert!(
        stdout.starts_with("models.yaml:6:1: error: Site \"site-0\": unknown field \"latitude\""),
        "{stdout}"
    );

    let few = tether_in(dir.path(), &["validate", ".", "--max-errors", "3"]);
    assert_eq!(
        few.status.code(),
        Some(1),
        "the cap does not change the verdict"
    );
    let stdout = text(&few.stdout);
    assert_eq!(lines_with(&stdout, "error"), 3);
    assert!(
        stdout.contains("… and 27 more errors and 22 more warnings"),
        "{stdout}"
    );

    let all = tether_in(dir.path(), &["validate", ".", "--max-errors", "0"]);
    let stdout = text(&all.stdout);
    assert_eq!(lines_with(&stdout, "error"), 30);
    assert_eq!(lines_with(&stdout, "warning"), 25);
    assert!(!stdout.contains("more errors"), "{stdout}");

    // Warnings alone never fail, however many were left out.
    let warned = many_problems(0, 22);
    let out = tether_in(warned.path(), &["validate", "."]);
    assert_eq!(out.status.code(), Some(0));
    let tail: Vec<String> = text(&out.stdout)
        .lines()
        .rev()
        .take(2)
        .map(String::from)
        .collect();
    assert_eq!(
        tail,
        [
            ".: 23 models in 1 file: valid, 22 warnings",
            "… and 2 more warnings (--max-errors 0 shows every one)",
        ]
    );
}

#[test]
fn paths_are_shown_from_the_working_directory() {
    let first = "models.yaml:13:15: error: Slice \"pods\": no TrustDomain named \"demo-trsut\"";
    for (dir, path, shown) in [
        (root(), DANGLING, format!("{DANGLING}/")),
        (
            root(),
            "./tests/cases/invalid/dangling-references/",
            format!("{DANGLING}/"),
        ),
        (
            root().join("tests/cases"),
            "invalid/dangling-references",
            "invalid/dangling-references/".to_string(),
        ),
        (root().join(DANGLING), ".", String::new()),
        (root().join(DANGLING), "models.yaml", String::new()),
        (
            root().join("tests/cases/invalid"),
            "dangling-references/models.yaml",
            "dangling-references/".to_string(),
        ),
    ] {
        let out = tether_in(&dir, &["validate", path]);
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with(&format!("{shown}{first}\n")),
            "validate {path} from {}: {stdout}",
            dir.display()
        );
        // Each path names a file that is there, from where tether ran.
        for line in stdout.lines().filter(|l| l.contains(": error: ")) {
            let file = line.split(':').next().unwrap();
            assert!(dir.join(file).is_file(), "{file} from {}", dir.display());
        }
    }
    // render and graph print the problems of invalid models the same way.
    for command in ["render", "graph"] {
        let out = tether(&[command, DANGLING]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).starts_with(&format!("{DANGLING}/{first}\n")),
            "{command}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn github_format_prints_one_workflow_command_per_problem() {
    let out = tether(&["validate", DANGLING, "--output-format", "github"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let file = format!("{DANGLING}/models.yaml");
    let expected = [
        format!(
            "::error file={file},line=13,col=15,title=tether%3A Slice \"pods\"::no TrustDomain named \"demo-trsut\"%0Ahint: did you mean \"demo\"?"
        ),
        format!(
            "::error file={file},line=14,col=7,title=tether%3A Slice \"pods\"::no Site named \"nowhere\"%0Ahint: add a Site model named \"nowhere\""
        ),
        format!(
            "::error file={file},line=18,col=8,title=tether%3A KubernetesServiceInstance \"web\"::no Slice named \"podz\"%0Ahint: did you mean \"pods\"?"
        ),
        format!(
            "::error file={file},line=20,col=8,title=tether%3A KubernetesServiceInstance \"web\"::no KubernetesService named \"kubernetez\"%0Ahint: did you mean \"kubernetes\"?"
        ),
        format!("{DANGLING}: 5 models in 1 file: 4 errors"),
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
    // `--error-format` is the same flag, as other CI linters spell it.
    let alias = tether(&["validate", DANGLING, "--error-format", "github"]);
    assert_eq!(text(&alias.stdout), stdout);
}

#[test]
fn github_format_escapes_what_would_end_a_property_or_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("a,b:c");
    std::fs::create_dir(&odd).unwrap();
    std::fs::write(
        odd.join("models.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\nbackend_status: OK\n---\nkind: Site\nname: \"100%\"\n\"x,y:z\": 1\n",
    )
    .unwrap();
    let out = tether_in(dir.path(), &["validate", "a,b:c", "-o", "github"]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(
        lines[0],
        "::warning file=a%2Cb%3Ac/models.yaml,line=6,col=1,title=tether%3A TrustDomain \"shop\"::XOS feedback field \"backend_status\" is ignored%0Ahint: tether keeps state in the cluster, not in models; remove it"
    );
    assert_eq!(
        lines[1],
        "::error file=a%2Cb%3Ac/models.yaml,line=10,col=1,title=tether%3A Site \"100%25\"::unknown field \"x,y:z\" in Site%0Ahint: fields of Site: name, abbreviated_name, site_url"
    );
}

#[test]
fn json_format_is_one_object_with_every_diagnostic() {
    let dir = many_problems(25, 1);
    let out = tether_in(dir.path(), &["validate", ".", "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["path"], ".");
    assert_eq!(report["valid"], false);
    assert_eq!(report["models"], 27);
    assert_eq!(report["files"], 1);
    assert_eq!(report["errors"], 25);
    assert_eq!(report["warnings"], 1);
    assert_eq!(report["failure"], serde_json::Value::Null);
    let diagnostics = report["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 26, "JSON is never capped");

    let out = tether(&["validate", DANGLING, "-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["diagnostics"][0],
        serde_json::json!({
            "severity": "error",
            "file": format!("{DANGLING}/models.yaml"),
            "line": 13,
            "column": 15,
            "end_line": 13,
            "end_column": 25,
            "message": "no TrustDomain named \"demo-trsut\"",
            "hint": "did you mean \"demo\"?",
            "model": {"kind": "Slice", "name": "pods"},
        })
    );
    let valid = tether(&["validate", "examples/models", "-o", "json"]);
    assert_eq!(valid.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&valid.stdout).unwrap();
    assert_eq!(report["valid"], true);
    assert_eq!(report["models"], 35);
    assert_eq!(report["diagnostics"], serde_json::json!([]));
}

#[test]
fn kubernetes_spellings_are_answered_with_the_model_field() {
    let out = tether(&["validate", "tests/cases/invalid/kubernetes-spellings"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    for (field, hint) in [
        (
            "namespace",
            "write trust_domain: tether models name the namespace through trust_domain",
        ),
        (
            "image",
            "write default_image: a Slice's controller runs its default_image",
        ),
        (
            "replicas",
            "write controller_replica_count: a Slice's controller runs controller_replica_count replicas",
        ),
    ] {
        let problem =
            format!("Slice \"web\": unknown field \"{field}\" in Slice\n    hint: {hint}");
        assert!(stdout.contains(&problem), "{problem}\nnot in\n{stdout}");
    }
    assert!(!stdout.contains("did you mean \"name\""), "{stdout}");
    assert!(!stdout.contains("fields of Slice:"), "{stdout}");

    let out = tether(&["validate", "tests/cases/invalid/kubernetes-object-shape"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        lines_with(&stdout, "error"),
        2,
        "one error for each model written as a Kubernetes object: {stdout}"
    );
    assert!(
        stdout.contains("hint: write the model's fields at the top level, beside kind: name (for metadata.name), trust_domain (for metadata.namespace), controller_replica_count (for spec.replicas)"),
        "{stdout}"
    );
}

/// Models that mount a Secret defined in `secrets.yaml`, which the test writes.
const MOUNTING_MODELS: &str = "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\n\
kind: Image\nname: web\ntag: \"1.0\"\n---\nkind: Slice\nname: web\ntrust_domain: shop\ncontroller_kind: Deployment\ndefault_image: web:1.0\n---\n\
kind: KubernetesSecretVolumeMount\nsecret: db-credentials\nslice: web\nmount_path: /etc/db\n";

const SECRET: &str = "# the database's credentials\nkind: KubernetesSecret\nname: db-credentials\ntrust_domain: shop\ndata:\n  password: hunter2-very-secret\n  token: |\n    line one\n    line two\n";

fn never_shows_a_value(output: &str) {
    for value in ["hunter2-very-secret", "line one", "ENC[", "AES256_GCM"] {
        assert!(!output.contains(value), "{value} in\n{output}");
    }
}

/// A directory with `models/` (the [`MOUNTING_MODELS`]), an age key in `keys.txt`,
/// and the key's recipient.
fn mounting_models_and_a_key() -> (tempfile::TempDir, PathBuf, tether_sops::Recipient, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::write(models.join("models.yaml"), MOUNTING_MODELS).unwrap();
    let (_, recipient, private) = test_recipient();
    let key_file = dir.path().join("keys.txt");
    std::fs::write(&key_file, &private).unwrap();
    (dir, models, recipient, key_file)
}

#[test]
fn an_encrypted_file_is_checked_for_structure_without_its_key() {
    let (dir, models, recipient, key_file) = mounting_models_and_a_key();
    let only_values = tether_sops::Encryption {
        recipients: vec![recipient],
        selection: tether_sops::tree::Selection::EncryptedRegex(
            regex::Regex::new("^(data|stringData)$").unwrap(),
        ),
        mac_only_encrypted: false,
    };
    let encrypted = tether_sops::encrypt(SECRET, &only_values, chrono::Utc::now()).unwrap();
    std::fs::write(models.join("secrets.yaml"), &encrypted).unwrap();

    let out = tether_in(dir.path(), &["validate", "models"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout,
        "models/secrets.yaml:8:1: warning: this encrypted file was read without its key: its models and references were checked, not its encrypted values (this file is encrypted (sops, age: "
            .to_string()
            + &format!("{}) and no age key was given)\n", only_values.recipients[0].to_text())
            + "    hint: give tether the age private key: --age-key-file, TETHER_AGE_KEY, SOPS_AGE_KEY or SOPS_AGE_KEY_FILE\n"
            + "models: 6 models in 2 files: valid, 1 warning\n"
    );
    never_shows_a_value(&stdout);

    // With the key, the values are checked as well, and nothing is left unchecked.
    let key = key_file.to_str().unwrap();
    let out = tether_in(dir.path(), &["validate", "models", "--age-key-file", key]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "models: 6 models in 2 files: valid\n");

    // References are still checked without the key: a mount of a Secret nobody
    // defines is an error, and the Secret the encrypted file defines is suggested.
    std::fs::write(
        models.join("models.yaml"),
        MOUNTING_MODELS.replace("secret: db-credentials", "secret: db-credentialz"),
    )
    .unwrap();
    for format in ["human", "github", "json"] {
        let out = tether_in(dir.path(), &["validate", "models", "-o", format]);
        assert_eq!(out.status.code(), Some(1));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("db-credentialz"), "{stdout}");
        // JSON escapes the quotes.
        let suggestion = match format {
            "json" => r#"did you mean \"db-credentials\"?"#,
            _ => r#"did you mean "db-credentials"?"#,
        };
        assert!(stdout.contains(suggestion), "{stdout}");
        assert!(!stdout.contains("add a KubernetesSecret model"), "{stdout}");
        never_shows_a_value(&stdout);
    }
}

#[test]
fn an_encrypted_file_whose_kinds_are_encrypted_cannot_be_checked_without_its_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("models.yaml"), MOUNTING_MODELS).unwrap();
    let (_, recipient, _) = test_recipient();
    let everything = tether_sops::Encryption {
        recipients: vec![recipient],
        ..Default::default()
    };
    let encrypted = tether_sops::encrypt(SECRET, &everything, chrono::Utc::now()).unwrap();
    std::fs::write(dir.path().join("secrets.yaml"), &encrypted).unwrap();
    let out = tether_in(dir.path(), &["validate", "."]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    // The mount's Secret may well be in the file that was not read.
    assert!(
        stdout.starts_with("models.yaml:18:9: error: KubernetesSecretVolumeMount \"db-credentials\" at \"/etc/db\": no KubernetesSecret named \"db-credentials\"\n    \
             hint: it may be in secrets.yaml, encrypted and not read; if not, add a KubernetesSecret model named \"db-credentials\"\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("secrets.yaml:2:7: error: cannot decrypt this file (sops): the model's `kind` is encrypted: without the key, this file's models cannot be read"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hint: encrypt only the values (a .sops.yaml creation rule with `encrypted_regex: ^(data|stringData)$`), so that models are checked without the key"),
        "{stdout}"
    );
    never_shows_a_value(&stdout);
}

#[test]
fn a_file_the_go_sops_encrypted_is_checked_without_its_key() {
    let tools = tools();
    let (dir, models, recipient, key_file) = mounting_models_and_a_key();
    let plain = dir.path().join("secrets.yaml");
    std::fs::write(&plain, SECRET).unwrap();
    let age = recipient.to_text();
    let encrypted = run_sops(
        &tools,
        dir.path(),
        &key_file,
        &[
            "-e",
            "--age",
            &age,
            "--encrypted-regex",
            "^(data|stringData)$",
            plain.to_str().unwrap(),
        ],
    );
    std::fs::write(models.join("secrets.yaml"), &encrypted).unwrap();
    let out = tether_in(dir.path(), &["validate", "models"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(lines_with(&stdout, "warning"), 1, "{stdout}");
    assert!(stdout.contains("read without its key"), "{stdout}");
    assert!(
        stdout.ends_with("models: 6 models in 2 files: valid, 1 warning\n"),
        "{stdout}"
    );
    never_shows_a_value(&stdout);
    let key = key_file.to_str().unwrap();
    let out = tether_in(dir.path(), &["validate", "models", "--age-key-file", key]);
    assert_eq!(text(&out.stdout), "models: 6 models in 2 files: valid\n");
}

/// Flux's and Argo CD's annotations are read strictly: each value tether does not
/// know is an error at its place, naming what it reads; the values it knows, and the
/// annotations of other tools, are valid.
#[test]
fn a_misspelt_flux_or_argo_cd_annotation_is_an_error_at_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let object = |name: &str, annotations: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: shop\n  annotations:\n{annotations}data: {{a: \"1\"}}\n"
        )
    };
    std::fs::write(
        dir.path().join("good.yaml"),
        object(
            "good",
            "    kustomize.toolkit.fluxcd.io/prune: disabled\n    kustomize.toolkit.fluxcd.io/ssa: IfNotPresent\n    \"argocd.argoproj.io/sync-options\": Replace=true, Prune=confirm\n    argocd.argoproj.io/sync-wave: \"-1\"\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        object(
            "bad",
            "    kustomize.toolkit.fluxcd.io/ssa: ifnotpresent\n    argocd.argoproj.io/sync-options: CreateNamespace=true\n    kustomize.toolkit.fluxcd.io/force: \"true\"\n    argocd.argoproj.io/sync-wave: first\n",
        ),
    )
    .unwrap();
    let out = tether_in(dir.path(), &["validate", "."]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for (at, says) in [
        (
            "bad.yaml:7:38:",
            "kustomize.toolkit.fluxcd.io/ssa: \"ifnotpresent\" is not a value tether knows (it reads Override, Merge, IfNotPresent or Ignore)",
        ),
        (
            "bad.yaml:8:38:",
            "argocd.argoproj.io/sync-options: \"CreateNamespace=true\" is not an option of an object tether reads",
        ),
        (
            "bad.yaml:9:40:",
            "kustomize.toolkit.fluxcd.io/force: \"true\" is not a value tether knows (it reads enabled or disabled)",
        ),
        (
            "bad.yaml:10:35:",
            "argocd.argoproj.io/sync-wave: \"first\" is not a value tether knows (it reads an integer, as \"-1\" or \"5\")",
        ),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(at) && l.contains(says)),
            "{at} {says} in:\n{stdout}"
        );
    }
    assert!(!stdout.contains("good.yaml"), "{stdout}");
    assert!(stdout.contains("4 errors"), "{stdout}");
}

#[test]
fn a_health_check_that_does_not_compile_is_an_error_at_its_expression() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("models.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(".tether.yaml"),
        "# Flux's spelling\nhealthCheckExprs:\n  - apiVersion: example.org/v1\n    kind: Gadget\n    current: status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')\n    failed: status.conditions.exists(c, c.type == 'Failed'\n",
    )
    .unwrap();
    let out = tether_in(dir.path(), &["validate", "."]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_ne!(out.status.code(), Some(0), "{all}");
    let flat: String = all
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        flat.contains(".tether.yaml:6:13: healthCheckExprs: the failed expression of Gadget does not compile, at character 47 of `status.conditions.exists(c, c.type == 'Failed'`: Syntax error: missing ')' at '<EOF>'"),
        "{all}"
    );
    assert!(flat.contains("hint:"), "{all}");

    // The same check, compiled: the models validate.
    std::fs::write(
        dir.path().join(".tether.yaml"),
        "healthCheckExprs:\n  - apiVersion: example.org/v1\n    kind: Gadget\n    current: status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')\n    failed: status.?conditions.orValue([]).exists(c, c.type == 'Failed')\n",
    )
    .unwrap();
    let out = tether_in(dir.path(), &["validate", "."]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
