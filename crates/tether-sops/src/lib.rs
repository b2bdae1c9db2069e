//! SOPS-compatible encryption of models files with age keys: the format (`file`:
//! the `sops:` block, a file decrypted in place or back to plain YAML, encrypted in
//! place, an edit signed again), the cipher (`cipher`: one `ENC[…]` value), sops'
//! walk and MAC (`tree`), age keys and recipients (`keys`) and `.sops.yaml` creation
//! rules (`creation_rules`). [`open_files`] opens, in memory, the encrypted files of a
//! `SourceFiles` (or leaves each closed with its reason), and [`plain_secret_values`]
//! finds the Secret values a repository with `.sops.yaml` left in plain text.
//!
//! Pure but for random bytes (data keys, nonces): the keys' text and the files are
//! passed in (`tether_engine::key_lookup` reads keys from where sops reads them), and
//! `clippy.toml` forbids the clock, the environment and the filesystem. A crate of
//! its own, beside the core, because age's localization pulls in crates the core must
//! not depend on (`tests/architecture.rs`).

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

pub mod cipher;
pub mod creation_rules;
pub mod file;
pub mod keys;
pub mod tree;

pub use file::{
    Decrypted, Encryption, SopsError, decrypt_in_place, decrypt_to_plain, encrypt, encryption_of,
    is_encrypted, sign_edit,
};
pub use keys::{KeyError, Keyring, Recipient};

use tether_core::source::{Sealing, SealingProblem, SourceFile, SourceFiles};

/// Decrypted strings shorter than this are not starred in messages: they would star
/// unrelated words, and no credential is that short.
const REDACTED_MIN_CHARS: usize = 4;

/// Decrypts, in memory, every file sops encrypted. A file that does not open (no
/// key, a wrong key, tampering) stays closed with its reason, which the load stage
/// reports at its place; plain files are untouched.
pub fn open_files(files: SourceFiles, keys: &Keyring) -> SourceFiles {
    files.map_files(|file| open_file(file, keys, Unopenable::Closed))
}

/// As [`open_files`], for checking models only: a file that no key given opens is
/// read for its structure ([`Sealing::Unopened`]), its encrypted values replaced
/// by placeholders. What is read so must never be rendered or applied.
pub fn open_files_for_checking(files: SourceFiles, keys: &Keyring) -> SourceFiles {
    files.map_files(|file| open_file(file, keys, Unopenable::Structure))
}

/// What becomes of a file that no key given opens.
#[derive(Clone, Copy)]
enum Unopenable {
    Closed,
    Structure,
}

fn open_file(
    mut file: SourceFile,
    keys: &Keyring,
    unopenable: Unopenable,
) -> (SourceFile, Vec<zeroize::Zeroizing<String>>) {
    if !matches!(file.sealing, Sealing::Plain) || !is_encrypted(&file.text) {
        return (file, Vec::new());
    }
    match decrypt_in_place(&file.text, keys) {
        Ok(decrypted) => {
            let values = decrypted
                .values
                .into_iter()
                // A model's kind is never a secret, and starring it would blank
                // every message about that kind.
                .filter(|(path, value)| {
                    value.chars().count() >= REDACTED_MIN_CHARS && path.as_slice() != ["kind"]
                })
                .map(|(_, value)| value)
                .collect();
            let mut opened = SourceFile::new(file.path, decrypted.text.as_str());
            opened.sealing = Sealing::Opened { stored: file.text };
            (opened, values)
        }
        Err(error) => {
            let without_key = error.without_key;
            let problem = SealingProblem {
                line: error.line,
                column: error.column,
                message: error.message,
                hint: error.hint,
            };
            let structure = match (unopenable, without_key) {
                (Unopenable::Structure, true) => Some(file::structure_in_place(&file.text)),
                _ => None,
            };
            match structure {
                Some(Ok(text)) => {
                    let mut unopened = SourceFile::new(file.path, text);
                    unopened.sealing = Sealing::Unopened {
                        stored: file.text,
                        problem,
                    };
                    (unopened, Vec::new())
                }
                // Why the structure cannot be read says more than the missing key.
                Some(Err(unreadable)) => {
                    file.sealing = Sealing::Closed(SealingProblem {
                        line: unreadable.line,
                        column: unreadable.column,
                        message: format!("{} ({})", unreadable.message, problem.message),
                        hint: unreadable.hint.or(problem.hint),
                    });
                    (file, Vec::new())
                }
                None => {
                    file.sealing = Sealing::Closed(problem);
                    (file, Vec::new())
                }
            }
        }
    }
}

/// Each value of a KubernetesSecret's `data` written in plain text, in a repository
/// whose `.sops.yaml` asks for encryption: a value that was meant to be encrypted
/// and was not. A warning, or an error when `as_errors`.
pub fn plain_secret_values(
    files: &SourceFiles,
    as_errors: bool,
) -> tether_core::diagnostic::Diagnostics {
    use tether_core::diagnostic::Diagnostic;
    use tether_core::load::{Dialect, Value, parse_yaml, span_in};
    let mut diagnostics = tether_core::diagnostic::Diagnostics::default();
    for (id, file) in files.iter() {
        if !matches!(file.sealing, Sealing::Plain) {
            continue;
        }
        let Ok(documents) = parse_yaml(&file.text, Dialect::Models) else {
            continue;
        };
        for document in &documents {
            let kind = |name: &str| matches!(document.field("kind").map(|k| &k.value), Some(Value::Str(k)) if k == name);
            let plain_object = matches!(document.field("apiVersion").map(|v| &v.value), Some(Value::Str(v)) if v == "v1");
            // A KubernetesSecret's `data`; a plain Secret's `data` and `stringData`.
            let fields: &[&str] = if kind("KubernetesSecret") {
                &["data"]
            } else if kind("Secret") && plain_object {
                &["data", "stringData"]
            } else {
                &[]
            };
            let entries =
                fields
                    .iter()
                    .filter_map(|field| match document.field(field).map(|d| &d.value) {
                        Some(Value::Map(entries)) => Some(entries),
                        _ => None,
                    });
            for (key, value) in entries.flatten() {
                if matches!(&value.value, Value::Null)
                    || matches!(&value.value, Value::Str(s) if s.is_empty())
                {
                    continue;
                }
                let name = match &key.value {
                    Value::Str(s) => s.clone(),
                    _ => "?".into(),
                };
                let message = format!(
                    "the Secret value `{name}` is in plain text, and this repository's .sops.yaml asks for encryption"
                );
                let span = span_in(id, value.pos);
                let diagnostic = match as_errors {
                    true => Diagnostic::error(span, message),
                    false => Diagnostic::warning(span, message),
                };
                diagnostics.push(diagnostic.with_hint(format!(
                    "encrypt the file: tether secret encrypt -i {}",
                    files.shown_path(id)
                )));
            }
        }
    }
    diagnostics
}
