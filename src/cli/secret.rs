//! `tether secret`: models files encrypted as sops encrypts them, with age keys
//! (encrypt, decrypt, edit, keygen), honouring the team's `.sops.yaml`.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use miette::{IntoDiagnostic, miette};
use tether_sops::{Encryption, Recipient, SopsError};
use zeroize::Zeroizing;

use crate::cli::flags::KeyFlags;

#[derive(Debug, clap::Subcommand)]
pub enum SecretCommand {
    /// Encrypt a models file: each value selected by the rules (all of them unless
    /// `.sops.yaml` or --encrypted-regex says otherwise), for the age recipients of
    /// the first `.sops.yaml` creation rule whose path_regex matches, or --age.
    #[command(
        after_help = "Examples:\n  tether secret encrypt -i models/secrets.yaml\n  tether secret encrypt --age age1… --encrypted-regex '^(data|stringData)$' secrets.yaml > secrets.enc.yaml"
    )]
    Encrypt(EncryptArgs),
    /// Decrypt an encrypted file to plain YAML (standard output, or --in-place).
    Decrypt(DecryptArgs),
    /// Edit an encrypted file: $EDITOR opens a decrypted copy in a private directory;
    /// on save it is encrypted again for the same recipients, and the copy is wiped.
    Edit(EditArgs),
    /// Print a new age key pair: the private key file (keep it secret; give it to
    /// tether with --age-key-file or to the daemon as a Secret) and its public key.
    Keygen(KeygenArgs),
}

#[derive(Debug, clap::Args)]
pub struct EncryptArgs {
    /// The plain YAML file.
    pub file: PathBuf,
    /// An age recipient (public key, age1…) to encrypt for, instead of `.sops.yaml`'s.
    #[arg(long, value_name = "RECIPIENT")]
    pub age: Vec<String>,
    /// Encrypt only the values under keys this expression finds (sops' encrypted_regex).
    #[arg(long, value_name = "REGEX")]
    pub encrypted_regex: Option<String>,
    /// Replace the file instead of printing the result.
    #[arg(long, short = 'i')]
    pub in_place: bool,
}

#[derive(Debug, clap::Args)]
pub struct DecryptArgs {
    /// The encrypted file.
    pub file: PathBuf,
    /// Replace the file (with mode 0600) instead of printing the plain text.
    #[arg(long, short = 'i')]
    pub in_place: bool,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// The encrypted file.
    pub file: PathBuf,
    #[command(flatten)]
    pub keys: KeyFlags,
}

#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Write the private key to this new file (mode 0600) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(command: &SecretCommand) -> miette::Result<ExitCode> {
    match command {
        SecretCommand::Encrypt(args) => encrypt(args),
        SecretCommand::Decrypt(args) => decrypt(args),
        SecretCommand::Edit(args) => edit(args),
        SecretCommand::Keygen(args) => keygen(args),
    }
}

fn read(path: &Path) -> miette::Result<String> {
    std::fs::read_to_string(path)
        .into_diagnostic()
        .map_err(|e| e.wrap_err(format!("cannot read {}", path.display())))
}

/// A sops problem, at its place in the file.
fn located(path: &Path, error: SopsError) -> miette::Report {
    let hint = error
        .hint
        .map(|h| format!("\n    hint: {h}"))
        .unwrap_or_default();
    miette!(
        "{}:{}:{}: {}{hint}",
        path.display(),
        error.line,
        error.column,
        error.message
    )
}

/// The encryption for `file`: `.sops.yaml`'s first matching rule, with the flags
/// over it.
fn encryption_for(file: &Path, args: &EncryptArgs) -> miette::Result<Encryption> {
    let absolute = std::path::absolute(file).into_diagnostic()?;
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    let mut how = match tether_engine::directory::find_sops_config(dir) {
        Some(config) => {
            let root = config.parent().unwrap_or(Path::new("/"));
            let relative = absolute.strip_prefix(root).unwrap_or(&absolute);
            let relative = relative.to_string_lossy().replace('\\', "/");
            tether_sops::creation_rules::rule_for(&read(&config)?, &relative)
                .map_err(|e| located(&config, e))?
        }
        None => None,
    };
    if !args.age.is_empty() {
        let recipients = args
            .age
            .iter()
            .flat_map(|a| a.split(','))
            .map(Recipient::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| miette!("{e}"))?;
        how = Some(Encryption {
            recipients,
            ..how.unwrap_or_default()
        });
    }
    let mut how = how.ok_or_else(|| {
        miette!(
            "no age recipient for {}: no `.sops.yaml` creation rule matches it and no --age was given",
            file.display()
        )
    })?;
    if let Some(regex) = &args.encrypted_regex {
        how.selection = tether_sops::tree::Selection::EncryptedRegex(
            regex::Regex::new(regex).map_err(|e| miette!("--encrypted-regex: {e}"))?,
        );
    }
    Ok(how)
}

fn encrypt(args: &EncryptArgs) -> miette::Result<ExitCode> {
    let plain = Zeroizing::new(read(&args.file)?);
    let how = encryption_for(&args.file, args)?;
    let encrypted = tether_sops::encrypt(&plain, &how, chrono::Utc::now())
        .map_err(|e| located(&args.file, e))?;
    output(&args.file, args.in_place, &encrypted, None)
}

fn decrypt(args: &DecryptArgs) -> miette::Result<ExitCode> {
    let text = read(&args.file)?;
    let plain = tether_sops::decrypt_to_plain(&text, &args.keys.keyring()?)
        .map_err(|e| located(&args.file, e))?;
    output(&args.file, args.in_place, &plain, Some(0o600))
}

/// Prints `text`, or replaces `file` with it (atomically; with `mode`, else the
/// file's own permissions).
fn output(file: &Path, in_place: bool, text: &str, mode: Option<u32>) -> miette::Result<ExitCode> {
    if !in_place {
        std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .into_diagnostic()?;
        return Ok(ExitCode::SUCCESS);
    }
    let mode = match mode {
        Some(mode) => mode,
        None => {
            std::fs::metadata(file)
                .into_diagnostic()?
                .permissions()
                .mode()
                & 0o7777
        }
    };
    replace_file(file, text, mode)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` beside `file` and renames it over: never a half-written file.
fn replace_file(file: &Path, text: &str, mode: u32) -> miette::Result<()> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = file.with_file_name(format!(".{name}.tether-{}", std::process::id()));
    let written = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        out.write_all(text.as_bytes())?;
        out.sync_all()?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&temporary, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
        .into_diagnostic()
        .map_err(|e| e.wrap_err(format!("cannot write {}", file.display())))
}

/// A private directory (0700) holding one decrypted copy (0600), overwritten and
/// removed when dropped, whatever happens in between.
struct PrivateCopy {
    dir: PathBuf,
    file: PathBuf,
}

impl PrivateCopy {
    fn new(name: &str, text: &str) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!("tether-edit-{:016x}", fastrand::u64(..)));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let copy = PrivateCopy {
            file: dir.join(name),
            dir,
        };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&copy.file)?;
        out.write_all(text.as_bytes())?;
        Ok(copy)
    }
}

impl Drop for PrivateCopy {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::metadata(&self.file) {
            let zeros = vec![0u8; meta.len() as usize];
            let _ = std::fs::write(&self.file, zeros);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn edit(args: &EditArgs) -> miette::Result<ExitCode> {
    let text = read(&args.file)?;
    let how = tether_sops::encryption_of(&text).map_err(|e| located(&args.file, e))?;
    let plain = tether_sops::decrypt_to_plain(&text, &args.keys.keyring()?)
        .map_err(|e| located(&args.file, e))?;
    let name = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or("models.yaml".into());
    let copy = PrivateCopy::new(&name, &plain).into_diagnostic()?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    loop {
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("{editor} \"$1\""), "sh"])
            .arg(&copy.file)
            .status()
            .into_diagnostic()?;
        if !status.success() {
            return Err(miette!(
                "{editor} exited with {status}: {} is unchanged",
                args.file.display()
            ));
        }
        let edited = Zeroizing::new(std::fs::read_to_string(&copy.file).into_diagnostic()?);
        if edited.as_str() == plain.as_str() {
            eprintln!("{}: no change", args.file.display());
            return Ok(ExitCode::SUCCESS);
        }
        match tether_sops::encrypt(&edited, &how, chrono::Utc::now()) {
            Ok(encrypted) => {
                let mode = std::fs::metadata(&args.file)
                    .into_diagnostic()?
                    .permissions()
                    .mode()
                    & 0o7777;
                replace_file(&args.file, &encrypted, mode)?;
                eprintln!("{}: encrypted again", args.file.display());
                return Ok(ExitCode::SUCCESS);
            }
            // Nothing is lost: the editor opens the copy again while a person is there.
            Err(error) if std::io::IsTerminal::is_terminal(&std::io::stdin()) => {
                eprintln!("{}", located(&copy.file, error));
                eprintln!("press Enter to edit again (Ctrl-C abandons the change)");
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).into_diagnostic()?;
            }
            Err(error) => {
                return Err(located(&args.file, error).wrap_err("the edited file was not saved"));
            }
        }
    }
}

fn keygen(args: &KeygenArgs) -> miette::Result<ExitCode> {
    let (private, public) = tether_sops::keys::generate(chrono::Utc::now());
    match &args.output {
        Some(path) => {
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .into_diagnostic()
                .map_err(|e| e.wrap_err(format!("cannot create {}", path.display())))?;
            out.write_all(private.as_bytes()).into_diagnostic()?;
        }
        None => std::io::stdout()
            .lock()
            .write_all(private.as_bytes())
            .into_diagnostic()?,
    }
    eprintln!("Public key: {public}");
    Ok(ExitCode::SUCCESS)
}
