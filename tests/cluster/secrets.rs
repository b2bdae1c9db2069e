//! Models files encrypted with sops and age, against the control plane: a file that
//! does not open (tampered, or without its key) stops the whole repository, and the
//! daemon decrypts with the key of the Secret its Source names, without a plain value
//! in its trace-level log.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams};

use crate::daemon::{Daemon, Remote, install_crd, kubectl_apply_text, source_yaml, status};
use crate::harness::{cluster, eventually};
use crate::reconcile::{base, config_map, setup};

/// The variables a key could come from, cleared so that only the test's keys count.
const KEY_VARIABLES: [&str; 4] = [
    "TETHER_AGE_KEY",
    "TETHER_AGE_KEY_FILE",
    "SOPS_AGE_KEY",
    "SOPS_AGE_KEY_FILE",
];

/// tether against the test cluster, with no age key but `key_file` (a HOME of its own,
/// so that sops' default key file is not read either).
fn tether(home: &Path, key_file: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
    for variable in KEY_VARIABLES {
        command.env_remove(variable);
    }
    // The connection goes by variable: `validate` and `secret` take no --kubeconfig.
    command.args(args);
    if let Some(key_file) = key_file {
        command.arg("--age-key-file").arg(key_file);
    }
    command
        .env("TETHER_KUBECONFIG", cluster().kubeconfig())
        .env("HOME", home)
        .env("TETHER_COLOR", "never")
        .output()
        .unwrap()
}

fn all_output(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `plain` encrypted by `tether secret encrypt` for `recipient`: every value, or those
/// under the keys `regex` finds.
fn encrypt(plain: &str, recipient: &str, regex: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.yaml");
    std::fs::write(&file, plain).unwrap();
    let mut args = vec!["secret", "encrypt", "--age", recipient];
    if let Some(regex) = regex {
        args.extend(["--encrypted-regex", regex]);
    }
    args.push(file.to_str().unwrap());
    let output = tether(dir.path(), None, &args);
    assert!(output.status.success(), "{}", all_output(&output));
    String::from_utf8(output.stdout).unwrap()
}

fn secret_model(name: &str, namespace: &str, values: &[(&str, &str)]) -> String {
    let mut text =
        format!("kind: KubernetesSecret\nname: {name}\ntrust_domain: {namespace}\ndata:\n");
    for (key, value) in values {
        text.push_str(&format!("  {key}: {value}\n"));
    }
    text
}

/// A key file (0600) holding `private`.
fn key_file(dir: &Path, name: &str, private: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{private}\n")).unwrap();
    path
}

/// `text` with the first line containing `needle` replaced by what `change` makes of it.
fn change_line(text: &str, needle: &str, change: impl Fn(&str) -> String) -> String {
    let mut done = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| match !done && line.contains(needle) {
            true => {
                done = true;
                change(line)
            }
            false => line.to_string(),
        })
        .collect();
    assert!(done, "no line holds {needle:?}");
    lines.join("\n") + "\n"
}

/// A different base64 character at the start of an `ENC[…,data:` value.
fn flip_first_data_character(line: &str) -> String {
    let at = line.find("data:").unwrap() + "data:".len();
    let old = &line[at..=at];
    let new = if old == "A" { "B" } else { "A" };
    format!("{}{new}{}", &line[..at], &line[at + 1..])
}

async fn nothing_applied(client: &Client, ns: &str, inventory: &str) {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    assert!(config_maps.get_opt("settings").await.unwrap().is_none());
    assert!(secrets.get_opt("db-credentials").await.unwrap().is_none());
    let inventories: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let record = format!("{}{inventory}", tether_core::ownership::RECORD_PREFIX);
    assert!(inventories.get_opt(&record).await.unwrap().is_none());
    assert!(inventories.get_opt(inventory).await.unwrap().is_none());
}

#[tokio::test]
async fn an_encrypted_file_that_does_not_open_is_an_error_naming_it_and_nothing_is_applied() {
    let (client, ns, inventory) = setup("sops-tamper").await;
    let home = tempfile::tempdir().unwrap();
    let (private, public) = tether_sops::keys::generate(chrono::Utc::now());
    let (other_private, _) = tether_sops::keys::generate(chrono::Utc::now());
    let right_key = key_file(home.path(), "right.txt", &private);
    let wrong_key = key_file(home.path(), "wrong.txt", &other_private);
    let password = format!("Pa55-{ns}-horse");
    let username = format!("admin-{ns}");
    let plain = secret_model(
        "db-credentials",
        &ns,
        &[("username", &username), ("password", &password)],
    );
    let sealed = encrypt(&plain, &public, None);
    let changed_value = change_line(&sealed, "password: ENC[", flip_first_data_character);
    let removed_value = change_line(&sealed, "username: ENC[", |_| String::new());
    let added_in_clear = change_line(&sealed, "password: ENC[", |line| {
        let indent = &line[..line.len() - line.trim_start().len()];
        format!("{line}\n{indent}extra: added-in-clear")
    });
    let changed_date = change_line(&sealed, "lastmodified:", |_| {
        "    lastmodified: \"2020-01-01T00:00:00Z\"".into()
    });
    let changed_data_key = change_line(&sealed, "-----BEGIN AGE ENCRYPTED FILE-----", |line| {
        format!(
            "{line}\n            AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        )
    });
    let cases: [(&str, &str, Option<&Path>, &str); 7] = [
        (
            "a changed value",
            &changed_value,
            Some(&right_key),
            "`data.password` does not decrypt",
        ),
        (
            "a removed value",
            &removed_value,
            Some(&right_key),
            "MAC mismatch",
        ),
        (
            "a value added in clear",
            &added_in_clear,
            Some(&right_key),
            "`data.extra` should be encrypted and is in plain text",
        ),
        (
            "a changed sops block (lastmodified)",
            &changed_date,
            Some(&right_key),
            "the MAC does not decrypt",
        ),
        (
            "a changed sops block (data key)",
            &changed_data_key,
            Some(&right_key),
            "data key is damaged",
        ),
        (
            "a wrong key",
            &sealed,
            Some(&wrong_key),
            "no key given opens this file",
        ),
        ("no key", &sealed, None, "no age key was given"),
    ];
    let repo = crate::reconcile::Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("settings.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let path = repo.path().to_str().unwrap();
    for (case, text, key, expected) in cases {
        repo.write("credentials.yaml", text);
        let output = tether(
            home.path(),
            key,
            &[
                "--log-level",
                "trace",
                "apply",
                "--inventory-name",
                &inventory,
                path,
            ],
        );
        let said = all_output(&output);
        assert_eq!(output.status.code(), Some(2), "{case}: {said}");
        assert!(
            said.contains("credentials.yaml:") && said.contains(expected),
            "{case}: the error names the file and says {expected:?}:\n{said}"
        );
        assert!(
            !said.contains(&password) && !said.contains(&username),
            "{case}: a value was printed:\n{said}"
        );
        nothing_applied(&client, &ns, &inventory).await;
    }

    // The same file, intact and with its key, applies.
    repo.write("credentials.yaml", &sealed);
    let output = tether(
        home.path(),
        Some(&right_key),
        &["apply", "--inventory-name", &inventory, path],
    );
    assert_eq!(output.status.code(), Some(0), "{}", all_output(&output));
    let live = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("db-credentials")
        .await
        .unwrap();
    let data = live.data.unwrap();
    assert_eq!(data["password"].0, password.as_bytes());
    assert_eq!(data["username"].0, username.as_bytes());
}

/// A key file as `tether secret keygen -o` (and age-keygen) writes it: comments, then
/// the key. Returns its path, the private key and the public key.
fn keygen(dir: &Path, name: &str) -> (std::path::PathBuf, String, String) {
    let path = dir.join(name);
    let output = tether(
        dir,
        None,
        &["secret", "keygen", "-o", path.to_str().unwrap()],
    );
    assert!(output.status.success(), "{}", all_output(&output));
    let text = std::fs::read_to_string(&path).unwrap();
    let public = text
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .unwrap()
        .to_string();
    let private = text
        .lines()
        .find(|l| l.starts_with("AGE-SECRET-KEY-1"))
        .unwrap()
        .to_string();
    (path, private, public)
}

/// The Secret `sops-age` made (or replaced) as its docs say: `kubectl create secret
/// generic --from-file=age.agekey=KEYFILE`, piped to `kubectl apply`.
fn key_secret_from_file(ns: &str, key_file: &Path) {
    let from_file = format!("--from-file=age.agekey={}", key_file.display());
    let yaml = crate::discover::kubectl(&[
        "create",
        "secret",
        "generic",
        "sops-age",
        "-n",
        ns,
        &from_file,
        "--from-literal=README=not a key",
        "--dry-run=client",
        "-o",
        "yaml",
    ])
    .stdout;
    kubectl_apply_text(&String::from_utf8(yaml).unwrap());
}

/// The Ready condition of the Source `web`: status, reason, message.
fn ready_reason(ns: &str) -> Option<(String, String, String)> {
    let status = status(ns, "web");
    let ready = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    let text = |field: &str| ready[field].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// Asks for a pass of the Source `web` and waits until its Ready condition (status,
/// reason) is as `wanted`.
async fn reconcile_until(
    sources: &Api<tether_api::source_spec::Source>,
    ns: &str,
    wanted: impl Fn(&str, &str) -> bool,
) {
    tether_admin::reconcile_request::request_reconcile(sources, "web", None)
        .await
        .unwrap();
    eventually(Duration::from_secs(30), || async {
        ready_reason(ns).is_some_and(|(ready, reason, _)| wanted(&ready, &reason))
    })
    .await;
}

#[tokio::test]
async fn the_daemon_decrypts_with_the_key_its_source_names_and_logs_no_plain_value() {
    install_crd();
    let (client, ns, _) = setup("sops-daemon").await;
    let keys = tempfile::tempdir().unwrap();
    let (right_key, private, public) = keygen(keys.path(), "right.txt");
    let (wrong_key, other_private, _) = keygen(keys.path(), "wrong.txt");
    let password = format!("Pa55-{ns}-staple");
    let token = format!("tok-{ns}-battery");
    // Every value encrypted (sops' default), and only `data` (a team's .sops.yaml).
    let all_values = encrypt(
        &secret_model("db-credentials", &ns, &[("password", &password)]),
        &public,
        None,
    );
    let data_only = encrypt(
        &secret_model("api-token", &ns, &[("token", &token)]),
        &public,
        Some("^(data|stringData)$"),
    );
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("settings.yaml", &config_map("settings", &ns, "v1")),
        ("credentials.yaml", &all_values),
        ("token.yaml", &data_only),
    ]);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    // A wrong key first.
    key_secret_from_file(&ns, &wrong_key);
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut daemon = Daemon::start_logging(
        &["--sources", "--sources-namespace", &ns],
        "trace",
        Stdio::from(log),
    );
    let decryption = "  decryption:\n    provider: sops\n    secretRef:\n      name: sops-age\n";
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, decryption));

    eventually(Duration::from_secs(30), || async {
        ready_reason(&ns)
            .is_some_and(|(ready, reason, _)| ready == "False" && reason == "InvalidModels")
    })
    .await;
    let (_, _, message) = ready_reason(&ns).unwrap();
    assert!(
        message.contains("credentials.yaml:6:1:")
            && message.contains("no key given opens this file"),
        "the status names the file and the problem: {message}"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(
        config_maps.get_opt("settings").await.unwrap().is_none(),
        "nothing is applied"
    );
    assert!(secrets.get_opt("db-credentials").await.unwrap().is_none());

    // The right key, and a reconcile asked for: no restart.
    key_secret_from_file(&ns, &right_key);
    let sources: Api<tether_api::source_spec::Source> = Api::namespaced(client.clone(), &ns);
    reconcile_until(&sources, &ns, |ready, _| ready == "True").await;
    let live = |name: &'static str| {
        let secrets = secrets.clone();
        async move { secrets.get(name).await.unwrap().data.unwrap() }
    };
    assert_eq!(
        live("db-credentials").await["password"].0,
        password.as_bytes()
    );
    assert_eq!(live("api-token").await["token"].0, token.as_bytes());
    assert!(config_maps.get_opt("settings").await.unwrap().is_some());

    // Without its key Secret, a pass fails and says why; the objects stay.
    secrets
        .delete("sops-age", &DeleteParams::default())
        .await
        .unwrap();
    reconcile_until(&sources, &ns, |_, reason| {
        reason == "DecryptionKeysUnavailable"
    })
    .await;
    let (ready, _, message) = ready_reason(&ns).unwrap();
    assert_eq!(ready, "False");
    assert!(message.contains(&format!("{ns}/sops-age")), "{message}");
    assert!(secrets.get_opt("db-credentials").await.unwrap().is_some());

    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.lines().filter(|l| l.contains("\"TRACE\"")).count() > 100,
        "the log is a trace-level log"
    );
    use base64::Engine as _;
    let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let source_status = status(&ns, "web").to_string();
    for value in [
        password.as_str(),
        token.as_str(),
        private.as_str(),
        other_private.as_str(),
    ] {
        for text in [&log, &source_status] {
            assert!(
                !text.contains(value) && !text.contains(&encode(value)),
                "a plain value is in the daemon's log or the Source's status"
            );
        }
    }
}

#[tokio::test]
async fn scaling_a_slice_in_an_encrypted_file_commits_a_file_that_still_opens() {
    let (client, ns, inventory) = setup("sops-scale").await;
    let home = tempfile::tempdir().unwrap();
    let (private, public) = tether_sops::keys::generate(chrono::Utc::now());
    let key = key_file(home.path(), "key.txt", &private);
    let password = format!("Pa55-{ns}-scale");
    let plain = format!(
        "{}---\nkind: Image\nname: nginx\ntag: \"1.25\"\n---\nkind: Slice\nname: web\ntrust_domain: {ns}\ncontroller_kind: Deployment\ncontroller_replica_count: 1\ndefault_image: nginx\n---\n{}",
        base(&ns),
        secret_model("db-credentials", &ns, &[("password", &password)])
    );
    let repo = tempfile::tempdir().unwrap();
    let models = repo.path().join("models.yaml");
    std::fs::write(
        &models,
        encrypt(&plain, &public, Some("^(data|stringData)$")),
    )
    .unwrap();
    let git = |args: &[&str]| crate::reconcile::git(repo.path(), args);
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "models"]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(
        home.path(),
        Some(&key),
        &["apply", "--inventory-name", &inventory, path],
    );
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));

    // Without the key, the edit cannot be signed: nothing is committed.
    let head = git(&["rev-parse", "HEAD"]);
    let refused = tether(
        home.path(),
        None,
        &[
            "scale",
            "web",
            "2",
            "-C",
            path,
            "--inventory-name",
            &inventory,
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    // The error as one line (the terminal report wraps it).
    let said = all_output(&refused)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        said.contains("models.yaml:")
            && said.contains("the edit cannot be signed again")
            && said.contains("no age key was given"),
        "{said}"
    );
    assert_eq!(git(&["rev-parse", "HEAD"]), head);
    assert_eq!(git(&["status", "--porcelain"]), "");

    let scaled = tether(
        home.path(),
        Some(&key),
        &[
            "scale",
            "web",
            "3",
            "-C",
            path,
            "--inventory-name",
            &inventory,
        ],
    );
    assert_eq!(scaled.status.code(), Some(0), "{}", all_output(&scaled));
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);
    let replicas = deployments.get("web").await.unwrap().spec.unwrap().replicas;
    assert_eq!(replicas, Some(3));
    // The commit changes the count and each document's signature, no encrypted value.
    let changed = git(&["diff", "--unified=0", "HEAD~1", "HEAD"]);
    let removed: Vec<&str> = changed
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .collect();
    assert!(
        removed
            .iter()
            .all(|l| l.contains("controller_replica_count: 1")
                || l.contains("lastmodified:")
                || l.contains("mac: ENC[")),
        "{changed}"
    );
    assert!(
        removed
            .iter()
            .any(|l| l.contains("controller_replica_count"))
    );
    let validated = tether(home.path(), Some(&key), &["validate", path]);
    assert_eq!(
        validated.status.code(),
        Some(0),
        "{}",
        all_output(&validated)
    );
    let again = tether(
        home.path(),
        Some(&key),
        &["diff", "--inventory-name", &inventory, path],
    );
    assert_eq!(again.status.code(), Some(0), "{}", all_output(&again));
    for output in [&refused, &scaled, &validated, &again] {
        assert!(!all_output(output).contains(&password));
    }
}
