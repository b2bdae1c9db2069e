//! SOPS compatibility: tether against files and programs it did not write.
//!
//! - reference files published by the sops project and by rops (`tests/sops/reference/`),
//!   decrypted and compared with their plain twins;
//! - the Go sops (3.11.0, installed by `scripts/sops-tools` from PyPI) decrypting what
//!   tether encrypts, and tether decrypting what sops encrypts;
//! - Debian's `age` opening the data key tether sealed;
//! - every kind of tampering, each a clear error at its place.

use std::path::Path;

use tether_core::load::{Dialect, Node, Value, parse_yaml};
use tether_sops::{Encryption, Keyring, Recipient, decrypt_in_place, decrypt_to_plain, encrypt};

fn reference(name: &str) -> String {
    std::fs::read_to_string(Path::new("tests/sops/reference").join(name)).unwrap()
}

fn keyring(name: &str) -> Keyring {
    Keyring::parse(&reference(name), name).unwrap()
}

/// The documents of a YAML text as JSON values (positions and layout left out).
fn values(text: &str) -> Vec<serde_json::Value> {
    fn json(node: &Node) -> serde_json::Value {
        match &node.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            Value::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
            }
            Value::Str(s) => s.clone().into(),
            Value::Seq(items) => items.iter().map(json).collect(),
            Value::Map(entries) => entries
                .iter()
                .filter(|(k, _)| !matches!(&k.value, Value::Str(s) if s == "sops"))
                .map(|(k, v)| (json_key(k), json(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }
    fn json_key(node: &Node) -> String {
        match &node.value {
            Value::Str(s) => s.clone(),
            other => format!("{other:?}"),
        }
    }
    parse_yaml(text, Dialect::Kubernetes)
        .unwrap()
        .iter()
        .map(json)
        .collect()
}

#[test]
fn reference_files_decrypt_to_their_plain_twins() {
    let cases = [
        ("sops-pr1031-example", "sops-test-keys.txt"),
        ("rops-example", "rops-test-keys.txt"),
        ("rops-empty_value", "rops-test-keys.txt"),
        ("rops-encrypted_regex", "rops-test-keys.txt"),
        ("rops-encrypted_suffix", "rops-test-keys.txt"),
        ("rops-mac_only_encrypted", "rops-test-keys.txt"),
        ("rops-unencrypted_regex", "rops-test-keys.txt"),
        ("rops-unencrypted_suffix", "rops-test-keys.txt"),
    ];
    for (name, keys) in cases {
        let encrypted = reference(&format!("{name}.yaml"));
        let twin = reference(&format!("{name}.plain.yaml"));
        let plain = decrypt_to_plain(&encrypted, &keyring(keys))
            .unwrap_or_else(|e| panic!("{name}: {}:{}: {e}", e.line, e.column));
        assert_eq!(
            values(&plain),
            values(&twin),
            "{name}: decrypted to plain YAML"
        );
        // In memory, for loading models: the same values, every line where it was.
        let in_place = decrypt_in_place(&encrypted, &keyring(keys)).unwrap();
        assert_eq!(
            values(&in_place.text),
            values(&twin),
            "{name}: decrypted in place"
        );
        assert_eq!(
            in_place.text.lines().count(),
            encrypted.lines().count(),
            "{name}"
        );
    }
}

#[test]
fn encrypted_comments_come_back_as_comments() {
    let plain = decrypt_to_plain(
        &reference("sops-pr1031-example.yaml"),
        &keyring("sops-test-keys.txt"),
    )
    .unwrap();
    for comment in [
        "# private key for secret operations in app2",
        "# sops supports unencrypted fields",
        "# by adding the `_unencrypted` suffix",
    ] {
        assert!(plain.contains(comment), "{comment} in\n{}", plain.as_str());
    }
    assert!(!plain.contains("ENC["), "{}", plain.as_str());
}

pub(crate) fn test_recipient() -> (Keyring, Recipient, String) {
    let (private, public) = tether_sops::keys::generate(chrono::Utc::now());
    (
        Keyring::parse(&private, "generated").unwrap(),
        Recipient::parse(&public).unwrap(),
        private.to_string(),
    )
}

fn secret_model() -> &'static str {
    "# the database's credentials\nkind: KubernetesSecret\nname: db-credentials\ntrust_domain: shop\ndata:\n  password: hunter2-very-secret\n  token: |\n    line one\n    line two\n  port: 5432\n  tls: true\n  empty: \"\"\n"
}

fn encryption(recipient: &Recipient, regex: Option<&str>) -> Encryption {
    Encryption {
        recipients: vec![recipient.clone()],
        selection: regex.map_or_else(Default::default, |r| {
            tether_sops::tree::Selection::EncryptedRegex(regex::Regex::new(r).unwrap())
        }),
        mac_only_encrypted: false,
    }
}

#[test]
fn tether_reads_back_what_it_writes_and_no_value_is_left_in_clear() {
    let (keys, recipient, _) = test_recipient();
    for regex in [None, Some("^(data|stringData)$")] {
        let encrypted = encrypt(
            secret_model(),
            &encryption(&recipient, regex),
            chrono::Utc::now(),
        )
        .unwrap();
        for secret in ["hunter2-very-secret", "line one", "5432"] {
            assert!(!encrypted.contains(secret), "{secret} in\n{encrypted}");
        }
        assert_eq!(
            regex.is_some(),
            encrypted.contains("name: db-credentials"),
            "{encrypted}"
        );
        let plain = decrypt_to_plain(&encrypted, &keys).unwrap();
        assert_eq!(values(&plain), values(secret_model()));
    }
}

/// Replaces the first occurrence, asserting it is there.
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from} not in\n{text}");
    text.replacen(from, to, 1)
}

#[test]
fn tampering_is_an_error_at_its_place_and_never_shows_a_value() {
    let (_, recipient, private) = test_recipient();
    let keys = || Keyring::parse(&private, "k").unwrap();
    let encrypted = encrypt(
        secret_model(),
        &encryption(&recipient, Some("^data$")),
        chrono::Utc::now(),
    )
    .unwrap();
    let password_line = encrypted
        .lines()
        .find(|l| l.trim_start().starts_with("password:"))
        .unwrap();
    let data_start = password_line.find("data:").unwrap() + 5;
    let mut changed_value = password_line.to_string();
    let flipped = if &changed_value[data_start..=data_start] == "A" {
        "B"
    } else {
        "A"
    };
    changed_value.replace_range(data_start..=data_start, flipped);
    let (other_keys, _, _) = test_recipient();
    let cases: Vec<(&str, String, Keyring, &str, u32)> = vec![
        (
            "a changed value",
            replaced(&encrypted, password_line, &changed_value),
            keys(),
            "`data.password` does not decrypt",
            6,
        ),
        (
            "a removed value",
            replaced(&encrypted, &format!("{password_line}\n"), ""),
            keys(),
            "MAC mismatch",
            0,
        ),
        (
            "a value in clear",
            replaced(&encrypted, password_line, "  password: plain"),
            keys(),
            "`data.password` should be encrypted",
            6,
        ),
        (
            "a clear value changed",
            replaced(&encrypted, "name: db-credentials", "name: db-other"),
            keys(),
            "MAC mismatch",
            0,
        ),
        (
            "a changed sops block",
            replaced(&encrypted, "lastmodified: \"", "lastmodified: \"1"),
            keys(),
            "lastmodified",
            0,
        ),
        (
            "a wrong key",
            encrypted.clone(),
            other_keys,
            "no key given opens this file",
            0,
        ),
        (
            "no key",
            encrypted.clone(),
            Keyring::default(),
            "no age key was given",
            0,
        ),
    ];
    for (what, text, keys, message, line) in cases {
        let error = decrypt_in_place(&text, &keys)
            .err()
            .unwrap_or_else(|| panic!("{what}: decrypted"));
        assert!(error.message.contains(message), "{what}: {}", error.message);
        if line > 0 {
            assert_eq!(error.line, line, "{what}: {error:?}");
        }
        let shown = format!("{error:?} {}", error.hint.clone().unwrap_or_default());
        assert!(!shown.contains("hunter2"), "{what}: {shown}");
    }
}

/// The Go sops and Debian's age, installed by `scripts/sops-tools` if missing.
pub(crate) struct Tools {
    sops: std::path::PathBuf,
    age: std::path::PathBuf,
}

pub(crate) fn tools() -> Tools {
    let output = std::process::Command::new("scripts/sops-tools")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "scripts/sops-tools: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let path = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    Tools {
        sops: path("sops"),
        age: path("age"),
    }
}

/// Runs the Go sops in `dir` (so no `.sops.yaml` of ours applies), with `key_file`.
pub(crate) fn run_sops(tools: &Tools, dir: &Path, key_file: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new(&tools.sops)
        .args(args)
        .current_dir(dir)
        .env("SOPS_AGE_KEY_FILE", key_file)
        .env("HOME", dir)
        .env_remove("SOPS_AGE_KEY")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "sops {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Shapes tether must encrypt so that sops reads them, and read when sops wrote them.
fn plain_shapes() -> Vec<(&'static str, String)> {
    vec![
        ("secret", secret_model().to_string()),
        (
            "kinds",
            "kind: KubernetesSecret\nname: s\ndata:\n  float: 1.5\n  big: 1e6\n  negative: -42\n  octal: 0755\n  yes: yes\n  unicode: \"päss wörd ✓\"\n  quoted: \"it's: #1\"\n  folded: >-\n    one\n    two\n  nothing: null\n  list:\n    - a\n    - 2\n    - {inner: x}\n  keep_unencrypted: visible\n".to_string(),
        ),
        (
            "documents",
            "kind: KubernetesSecret\nname: a\ndata:\n  k: one\n---\nkind: KubernetesSecret\nname: b\ndata:\n  k: two\n".to_string(),
        ),
        (
            "example",
            std::fs::read_to_string("examples/models/shop/config.yaml").unwrap(),
        ),
    ]
}

#[test]
fn the_go_sops_decrypts_what_tether_encrypts() {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let (_, recipient, private) = test_recipient();
    let key_file = dir.path().join("keys.txt");
    std::fs::write(&key_file, &private).unwrap();
    for regex in [None, Some("^(data|stringData)$")] {
        for (name, plain) in plain_shapes() {
            let encrypted = encrypt(&plain, &encryption(&recipient, regex), chrono::Utc::now())
                .unwrap_or_else(|e| panic!("{name}: {}:{}: {e}", e.line, e.column));
            let file = dir.path().join(format!("{name}.yaml"));
            std::fs::write(&file, &encrypted).unwrap();
            let decrypted = run_sops(
                &tools,
                dir.path(),
                &key_file,
                &["-d", file.to_str().unwrap()],
            );
            assert_eq!(
                values(&decrypted),
                values(&plain),
                "{name} ({regex:?}): sops -d gave\n{decrypted}"
            );
        }
    }
}

#[test]
fn tether_decrypts_what_the_go_sops_encrypts() {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let (_, recipient, private) = test_recipient();
    let key_file = dir.path().join("keys.txt");
    std::fs::write(&key_file, &private).unwrap();
    let keys = || Keyring::parse(&private, "k").unwrap();
    let age = recipient.to_text();
    for extra in [
        &[][..],
        &["--encrypted-regex", "^(data|stringData)$"][..],
        &["--mac-only-encrypted"][..],
    ] {
        for (name, plain) in plain_shapes() {
            let file = dir.path().join(format!("{name}.yaml"));
            std::fs::write(&file, &plain).unwrap();
            let mut args = vec!["-e", "--age", age.as_str()];
            args.extend_from_slice(extra);
            args.push(file.to_str().unwrap());
            let encrypted = run_sops(&tools, dir.path(), &key_file, &args);
            let decrypted = decrypt_to_plain(&encrypted, &keys()).unwrap_or_else(|e| {
                panic!(
                    "{name} {extra:?}: {}:{}: {e}\n{encrypted}",
                    e.line, e.column
                )
            });
            assert_eq!(values(&decrypted), values(&plain), "{name} {extra:?}");
            let in_place = decrypt_in_place(&encrypted, &keys()).unwrap();
            assert_eq!(
                values(&in_place.text),
                values(&plain),
                "{name} {extra:?}: in place"
            );
            assert_eq!(in_place.text.lines().count(), encrypted.lines().count());
        }
    }
}

#[test]
fn debian_age_opens_the_data_key_tether_sealed() {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let (_, recipient, private) = test_recipient();
    let key_file = dir.path().join("keys.txt");
    std::fs::write(&key_file, &private).unwrap();
    let encrypted = encrypt(
        secret_model(),
        &encryption(&recipient, None),
        chrono::Utc::now(),
    )
    .unwrap();
    let armored: String = encrypted
        .lines()
        .skip_while(|l| !l.contains("BEGIN AGE ENCRYPTED FILE"))
        .take_while(|l| !l.contains("lastmodified"))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    let enc_file = dir.path().join("data-key.age");
    std::fs::write(&enc_file, armored).unwrap();
    let output = std::process::Command::new(&tools.age)
        .args(["-d", "-i"])
        .arg(&key_file)
        .arg(&enc_file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "age -d: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.stdout.len(), 32, "a data key is 32 bytes");
}

#[test]
fn a_problem_in_an_encrypted_file_is_at_its_line_and_never_shows_the_value() {
    use tether_core::source::{SourceFile, SourceFiles};
    let (_, recipient, private) = test_recipient();
    let model = "kind: KubernetesSecret\nname: Leaked_Name_Value\ntrust_domain: shop\ndata:\n  password: hunter2-very-secret\n";
    let encrypted = encrypt(model, &encryption(&recipient, None), chrono::Utc::now()).unwrap();
    let files = SourceFiles::from_files(vec![SourceFile::new("secret.yaml", encrypted.clone())]);
    let files = tether_sops::open_files(files, &Keyring::parse(&private, "k").unwrap());
    let analysis = tether_core::analyze(&files);
    let shown = files.redact(&analysis.diagnostics.render_plain(&files));
    assert!(shown.contains("secret.yaml:2:7: error:"), "{shown}");
    for value in ["Leaked_Name_Value", "hunter2"] {
        assert!(!shown.contains(value), "{value} in {shown}");
    }
    // What snippets show is the file as stored.
    assert_eq!(
        files.get(tether_core::source::FileId(0)).shown_text(),
        encrypted
    );
}

/// An attacker with write access to the repository but not the key swaps two
/// encrypted values (the password into the username): each value is bound to its
/// key, so the file does not open.
#[test]
fn a_value_moved_to_another_key_does_not_open() {
    let (_, recipient, private) = test_recipient();
    let model = "kind: KubernetesSecret\nname: s\ntrust_domain: shop\ndata:\n  username: shop\n  password: hunter2-very-secret\n";
    let encrypted = encrypt(
        model,
        &encryption(&recipient, Some("^data$")),
        chrono::Utc::now(),
    )
    .unwrap();
    let value_of = |key: &str| {
        encrypted
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(&format!("{key}: ")))
            .unwrap()
            .to_string()
    };
    let (user, password) = (value_of("username"), value_of("password"));
    let swapped = encrypted
        .replace(&user, "USER")
        .replace(&password, &user)
        .replace("USER", &password);
    let error = decrypt_in_place(&swapped, &Keyring::parse(&private, "k").unwrap())
        .err()
        .unwrap();
    assert_eq!(error.line, 5, "{error:?}");
    assert!(
        error.message.contains("moved here from another key"),
        "{}",
        error.message
    );
}

#[test]
fn a_plain_value_edited_in_an_encrypted_file_is_signed_again_and_sops_reads_it() {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let (keys, recipient, private) = test_recipient();
    let key_file = dir.path().join("keys.txt");
    std::fs::write(&key_file, &private).unwrap();
    let plain = "kind: Slice\nname: web\ncontroller_kind: Deployment\ncontroller_replica_count: 1\n---\n# credentials\nkind: KubernetesSecret\nname: db\ndata:\n  password: hunter2-very-secret\n";
    let file = dir.path().join("models.yaml");
    std::fs::write(&file, plain).unwrap();
    // Encrypted by sops itself, as a team's .sops.yaml would have it.
    let original = run_sops(
        &tools,
        dir.path(),
        &key_file,
        &[
            "-e",
            "--age",
            &recipient.to_text(),
            "--encrypted-regex",
            "^(data|stringData)$",
            file.to_str().unwrap(),
        ],
    );
    let edited = replaced(
        &original,
        "controller_replica_count: 1",
        "controller_replica_count: 3",
    );
    // A few seconds after sops wrote it (lastmodified counts whole seconds).
    let later = chrono::Utc::now() + chrono::TimeDelta::seconds(5);
    let signed = tether_sops::sign_edit(&original, &edited, &keys, later).unwrap();
    let changed: Vec<(&str, &str)> = original
        .lines()
        .zip(signed.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(original.lines().count(), signed.lines().count());
    // The edit, and each document's lastmodified and mac: no encrypted value moved.
    assert_eq!(changed.len(), 5, "{changed:#?}");
    assert!(
        changed
            .iter()
            .all(|(a, _)| a.contains("controller_replica_count")
                || a.contains("lastmodified:")
                || a.contains("mac:")),
        "{changed:#?}"
    );
    std::fs::write(&file, &signed).unwrap();
    let by_sops = run_sops(
        &tools,
        dir.path(),
        &key_file,
        &["-d", file.to_str().unwrap()],
    );
    let expected = replaced(
        plain,
        "controller_replica_count: 1",
        "controller_replica_count: 3",
    );
    assert_eq!(values(&by_sops), values(&expected), "{by_sops}");
    let by_tether = decrypt_to_plain(&signed, &keys).unwrap();
    assert_eq!(values(&by_tether), values(&expected));

    // A file changed before the edit is not vouched for.
    let tampered = replaced(&original, "name: web", "name: api");
    let edited = replaced(
        &tampered,
        "controller_replica_count: 1",
        "controller_replica_count: 3",
    );
    let refused =
        tether_sops::sign_edit(&tampered, &edited, &keys, chrono::Utc::now()).unwrap_err();
    assert!(refused.message.contains("MAC mismatch"), "{refused}");
    // Nor without the key.
    let (other, _, _) = test_recipient();
    let refused =
        tether_sops::sign_edit(&original, &edited, &other, chrono::Utc::now()).unwrap_err();
    assert!(
        refused.message.contains("no key given opens this file"),
        "{refused}"
    );
}
