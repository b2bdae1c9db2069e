//! Encrypted models: what sops encryption costs tether, and tether beside the Go sops
//! (3.11.0, installed by `scripts/sops-tools`) on the same files. A repository of
//! `--files` KubernetesSecret files (default 200) of 10 values each, encrypted for one
//! age key: tether encrypts and decrypts them in process, then file by file as a user
//! runs `tether secret decrypt` and `sops -d`; and a validate of the encrypted
//! repository beside one of its plain twin. Run with `cargo bench --bench sops`; a
//! smoke run (`cargo test --bench sops`) takes 10 files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tether_engine::directory::read_models_dir;
use tether_sops::tree::Selection;
use tether_sops::{Encryption, Keyring, Recipient, decrypt_in_place, encrypt};

#[path = "common/mode.rs"]
mod mode;

const VALUES_PER_FILE: usize = 10;

fn main() {
    let files = mode::arg("--files", 200, 10);
    let sops = sops_binary();
    let dir = tempfile::tempdir().expect("temporary directory");
    let (plain_dir, sealed_dir) = (dir.path().join("plain"), dir.path().join("sealed"));
    std::fs::create_dir_all(&plain_dir).expect("mkdir");
    std::fs::create_dir_all(&sealed_dir).expect("mkdir");
    let (private, public) = tether_sops::keys::generate(chrono::Utc::now());
    let key_file = dir.path().join("keys.txt");
    std::fs::write(&key_file, private.as_str()).expect("key file");
    let keys = Keyring::parse(&private, "bench").expect("key");
    let how = Encryption {
        recipients: vec![Recipient::parse(&public).expect("recipient")],
        selection: Selection::EncryptedRegex(regex::Regex::new("^(data|stringData)$").unwrap()),
        mac_only_encrypted: false,
    };
    let texts: Vec<String> = (0..files).map(secret_file).collect();
    std::fs::write(
        plain_dir.join("base.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: bench\n",
    )
    .expect("write");
    std::fs::copy(plain_dir.join("base.yaml"), sealed_dir.join("base.yaml")).expect("copy");

    let (encrypted, encrypt_took) = timed(|| {
        texts
            .iter()
            .map(|t| encrypt(t, &how, chrono::Utc::now()).expect("encrypt"))
            .collect::<Vec<_>>()
    });
    for (i, (plain, sealed)) in texts.iter().zip(&encrypted).enumerate() {
        std::fs::write(plain_dir.join(format!("s{i:04}.yaml")), plain).expect("write");
        std::fs::write(sealed_dir.join(format!("s{i:04}.yaml")), sealed).expect("write");
    }
    let (_, decrypt_took) = timed(|| {
        for sealed in &encrypted {
            decrypt_in_place(sealed, &keys).expect("decrypt");
        }
    });
    let validate = |dir: &Path, keys: &Keyring| {
        let files = tether_sops::open_files(read_models_dir(dir).expect("read"), keys);
        let analysis = tether_core::analyze(&files);
        assert!(
            !analysis.diagnostics.has_errors(),
            "the bench repo is valid"
        );
    };
    let (_, validate_plain) = timed(|| validate(&plain_dir, &Keyring::default()));
    let (_, validate_sealed) = timed(|| validate(&sealed_dir, &keys));

    let sample: Vec<PathBuf> = (0..files.min(50))
        .map(|i| sealed_dir.join(format!("s{i:04}.yaml")))
        .collect();
    let tether_bin = env!("CARGO_BIN_EXE_tether");
    let per_file = |program: &Path, args: &[&str]| {
        let (_, took) = timed(|| {
            for file in &sample {
                let output = Command::new(program)
                    .args(args)
                    .arg(file)
                    .env("SOPS_AGE_KEY_FILE", &key_file)
                    .env_remove("SOPS_AGE_KEY")
                    .env("HOME", dir.path())
                    .output()
                    .expect("run");
                assert!(output.status.success(), "{program:?} {args:?} {file:?}");
            }
        });
        took / sample.len() as u32
    };
    let tether_decrypt = per_file(Path::new(tether_bin), &["secret", "decrypt"]);
    let sops_decrypt = per_file(&sops, &["-d"]);

    let values = files * VALUES_PER_FILE;
    println!("sops-encrypted models: {files} KubernetesSecret files, {values} encrypted values");
    println!(
        "  tether encrypt (in process)    {:>8.1} ms  ({:.1} µs a value)",
        ms(encrypt_took),
        micros(encrypt_took) / values as f64
    );
    println!(
        "  tether decrypt (in process)    {:>8.1} ms  ({:.1} µs a value)",
        ms(decrypt_took),
        micros(decrypt_took) / values as f64
    );
    println!(
        "  validate, plain repository     {:>8.1} ms",
        ms(validate_plain)
    );
    println!(
        "  validate, encrypted repository {:>8.1} ms",
        ms(validate_sealed)
    );
    println!(
        "  one file decrypted by its CLI, mean of {}: tether secret decrypt {:.1} ms, sops -d {:.1} ms",
        sample.len(),
        ms(tether_decrypt),
        ms(sops_decrypt)
    );
}

/// A KubernetesSecret model whose values look like credentials.
fn secret_file(index: usize) -> String {
    let mut text =
        format!("kind: KubernetesSecret\nname: secret-{index}\ntrust_domain: bench\ndata:\n");
    for value in 0..VALUES_PER_FILE {
        text.push_str(&format!(
            "  key-{value}: \"credential-{index}-{value}-0123456789abcdef\"\n"
        ));
    }
    text
}

fn sops_binary() -> PathBuf {
    let output = Command::new("scripts/sops-tools")
        .output()
        .expect("scripts/sops-tools");
    assert!(output.status.success(), "scripts/sops-tools failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("sops="))
        .map(PathBuf::from)
        .expect("the sops path")
}

fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = work();
    (value, start.elapsed())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000_000.0
}
