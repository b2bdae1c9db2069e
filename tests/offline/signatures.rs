//! Signed commits in and out, with the real tools: commits and tags signed by `git`
//! with SSH keys made by `ssh-keygen` and with an OpenPGP key made by `gpg`, read by
//! `tether render --repo … --verify-keys …` (an unverified one refused before any of
//! it is read, naming the commit, its signer and the keys); and the commits tether
//! writes with `--signing-key`, checked by `git verify-commit`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tether_testkit::git::{git, try_git};

use super::cli::tether;

const MODELS: &str = "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\nkind: Image\nname: nginx\ntag: \"1.27\"\n---\nkind: Slice\nname: web\ntrust_domain: shop\ncontroller_kind: Deployment\ncontroller_replica_count: 1\ndefault_image: nginx:1.27\n";

fn run(program: &str, dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// An SSH key pair made by ssh-keygen: the private key's path and its fingerprint.
fn ssh_key(dir: &Path, name: &str, comment: &str) -> (PathBuf, String) {
    let key = dir.join(name);
    run(
        "ssh-keygen",
        dir,
        &["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", name],
        &[],
    );
    let listed = run(
        "ssh-keygen",
        dir,
        &["-l", "-f", &format!("{name}.pub")],
        &[],
    );
    let fingerprint = listed.split_whitespace().nth(1).unwrap().to_string();
    (key, fingerprint)
}

fn public(key: &Path) -> String {
    std::fs::read_to_string(key.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

/// An OpenPGP key made by gpg in its own home, as careful users make one: a primary
/// key that only certifies, and a subkey that signs. The home, the armored public
/// key's file, and both fingerprints. Its agent is stopped when the home is dropped.
struct Gpg {
    home: PathBuf,
    public: PathBuf,
    fingerprint: String,
    signing_subkey: String,
}

impl Gpg {
    fn new(dir: &Path) -> Gpg {
        let home = dir.join("gnupg");
        std::fs::create_dir_all(&home).unwrap();
        let env = [("GNUPGHOME", home.as_path())];
        // Keys without a passphrase, made without asking.
        let make = |args: &[&str]| {
            run(
                "gpg",
                dir,
                &[&["--batch", "--passphrase", ""], args].concat(),
                &env,
            )
        };
        make(&[
            "--quick-gen-key",
            "Dev <dev@example.org>",
            "ed25519",
            "cert",
            "never",
        ]);
        let fingerprints = || {
            let listed = run("gpg", dir, &["--with-colons", "--list-keys"], &env);
            listed
                .lines()
                .filter_map(|line| line.strip_prefix("fpr:"))
                .map(|rest| rest.trim_matches(':').to_string())
                .collect::<Vec<_>>()
        };
        let fingerprint = fingerprints()[0].clone();
        make(&["--quick-add-key", &fingerprint, "ed25519", "sign", "never"]);
        let signing_subkey = fingerprints()[1].clone();
        let public = dir.join("dev.asc");
        let armored = run("gpg", dir, &["--armor", "--export", &fingerprint], &env);
        std::fs::write(&public, armored).unwrap();
        Gpg {
            home,
            public,
            fingerprint,
            signing_subkey,
        }
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .args(["--kill", "gpg-agent"])
            .env("GNUPGHOME", &self.home)
            .output();
    }
}

fn commit_signed_with_ssh(work: &Path, key: &Path, message: &str) -> String {
    std::fs::write(work.join("note.txt"), message).unwrap();
    git(work, &["add", "-A"]);
    let signing = format!("user.signingkey={}", key.display());
    git(
        work,
        &[
            "-c",
            "gpg.format=ssh",
            "-c",
            &signing,
            "commit",
            "-q",
            "-S",
            "-m",
            message,
        ],
    );
    git(work, &["rev-parse", "HEAD"])
}

/// Writes a commit object of `text` as git would store it; its id.
fn write_object(work: &Path, text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(["hash-object", "-t", "commit", "-w", "--stdin"])
        .current_dir(work)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn render(url: &str, reference: &str, extra: &[String]) -> Output {
    let mut args = vec!["render", "--repo", url, "--ref", reference];
    args.extend(extra.iter().map(String::as_str));
    tether(&args)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The text without its spacing: the terminal's report wraps a long message in a box,
/// breaking lines at spaces and after slashes (inside a key's fingerprint).
fn flat(text: &str) -> String {
    text.replace(['│', '×'], "").split_whitespace().collect()
}

fn assert_refused(output: &Output, says: &[&str]) {
    let text = flat(&stderr(output));
    assert!(!output.status.success(), "refused: {text}");
    assert!(
        output.stdout.is_empty(),
        "nothing rendered: {:?}",
        output.stdout
    );
    for part in says {
        assert!(
            text.contains(&flat(part)),
            "{part:?} in:\n{}",
            stderr(output)
        );
    }
}

#[test]
fn only_commits_and_tags_signed_by_a_trusted_key_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (dev, dev_fingerprint) = ssh_key(root, "dev", "dev@laptop");
    let (stranger, stranger_fingerprint) = ssh_key(root, "stranger", "someone@else");
    let signers = root.join("allowed_signers");
    std::fs::write(&signers, format!("dev@example.org {}\n", public(&dev))).unwrap();
    let gpg = Gpg::new(root);

    let work = root.join("work");
    git(root, &["init", "-q", "work"]);
    std::fs::write(work.join("models.yaml"), MODELS).unwrap();
    let trusted = commit_signed_with_ssh(&work, &dev, "trusted");
    let signing = format!("user.signingkey={}", dev.display());
    git(
        &work,
        &[
            "-c",
            "gpg.format=ssh",
            "-c",
            &signing,
            "tag",
            "-s",
            "v1",
            "-m",
            "v1",
        ],
    );
    git(&work, &["branch", "trusted"]);
    let strange = commit_signed_with_ssh(&work, &stranger, "by a stranger");
    git(&work, &["branch", "strange"]);
    std::fs::write(work.join("note.txt"), "unsigned").unwrap();
    git(&work, &["commit", "-q", "-am", "unsigned"]);
    let unsigned = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["branch", "unsigned"]);
    git(&work, &["tag", "-a", "v2", "-m", "unsigned tag"]);
    git(&work, &["tag", "light"]);
    std::fs::write(work.join("note.txt"), "openpgp").unwrap();
    git(&work, &["add", "-A"]);
    let key = format!("user.signingkey={}", gpg.fingerprint);
    let gnupg = [("GNUPGHOME", gpg.home.as_path())];
    run(
        "git",
        &work,
        &[
            "-c",
            "user.name=Dev",
            "-c",
            "user.email=dev@example.org",
            "-c",
            &key,
            "commit",
            "-q",
            "-S",
            "-m",
            "openpgp",
        ],
        &gnupg,
    );
    git(&work, &["branch", "openpgp"]);
    let openpgp = git(&work, &["rev-parse", "HEAD"]);
    // A signature over other content: the trusted commit's signature on a commit
    // whose message was changed, written as git would write it.
    let raw = git(&work, &["cat-file", "commit", &trusted]);
    let forged_text = format!("{}\n", raw.replace("\n\ntrusted", "\n\nforged"));
    let forged = write_object(&work, &forged_text);
    git(&work, &["branch", "forged", &forged]);
    let signature_start = raw.find("gpgsig ").unwrap();
    let signature_end = raw.find("-----END SSH SIGNATURE-----").unwrap() + 27;
    let garbled_text = format!(
        "{}gpgsig -----BEGIN SSH SIGNATURE-----\n AAAA not base64 at all\n -----END SSH SIGNATURE-----{}\n",
        &raw[..signature_start],
        &raw[signature_end..]
    );
    let garbled = write_object(&work, &garbled_text);
    git(&work, &["branch", "garbled", &garbled]);
    git(root, &["clone", "-q", "--bare", "work", "remote.git"]);
    let url = format!("file://{}", root.join("remote.git").display());
    let cache = root.join("cache");
    let cache = cache.to_str().unwrap();
    let keys = signers.to_str().unwrap();
    let with_mode = |file: &str, mode: &str| -> Vec<String> {
        [
            "--cache-dir",
            cache,
            "--verify-keys",
            file,
            "--verify-mode",
            mode,
        ]
        .map(str::to_string)
        .to_vec()
    };
    let with = |file: &str| with_mode(file, "head");

    // git itself agrees on what is good and what is not.
    let allowed = format!("gpg.ssh.allowedSignersFile={keys}");
    let check = |commit: &str| try_git(&work, &["-c", &allowed, "verify-commit", commit]);
    assert!(check(&trusted).status.success());
    assert!(!check(&strange).status.success());
    assert!(!check(&forged).status.success());

    let read = render(&url, "trusted", &with(keys));
    assert!(read.status.success(), "{}", stderr(&read));
    assert!(String::from_utf8_lossy(&read.stdout).contains("name: web"));
    assert!(
        stderr(&read).contains(&format!(
            "verified: commit signed by {dev_fingerprint} (dev@example.org)"
        )),
        "{}",
        stderr(&read)
    );

    let short = |commit: &str| commit[..12].to_string();
    assert_refused(
        &render(&url, "strange", &with(keys)),
        &[
            &format!("commit {} is not verified", short(&strange)),
            &format!("signed by {stranger_fingerprint}, which is not among the trusted keys"),
            &format!("trusted keys: {dev_fingerprint} (dev@example.org)"),
        ],
    );
    assert_refused(
        &render(&url, "unsigned", &with(keys)),
        &[&format!(
            "commit {} is not verified: it is not signed",
            short(&unsigned)
        )],
    );
    assert_refused(
        &render(&url, "forged", &with(keys)),
        &[
            &format!("commit {} is not verified", short(&forged)),
            &format!(
                "its signature by {dev_fingerprint} (dev@example.org) does not match its content"
            ),
        ],
    );
    // OpenPGP, signed by the key's signing subkey: trusted by the key, and not by the
    // SSH keys.
    let both = format!("{keys},{}", gpg.public.display());
    let read = render(&url, "openpgp", &with(&both));
    assert!(read.status.success(), "{}", stderr(&read));
    assert_refused(
        &render(&url, "openpgp", &with(keys)),
        &[
            &format!("commit {} is not verified", short(&openpgp)),
            &format!("signed by OpenPGP {}", gpg.signing_subkey),
        ],
    );
    // A signature that is not one: refused as unreadable.
    assert_refused(
        &render(&url, "garbled", &with(keys)),
        &[
            &format!("commit {} is not verified", short(&garbled)),
            "its signature cannot be read",
        ],
    );

    // Tags: a signed tag; an unsigned tag re-pointed where a signed one was; a
    // lightweight tag, which cannot carry a signature; and the head commit behind a
    // tag, checked in mode head.
    let tag_args = with_mode(keys, "tag");
    let read = render(&url, "v1", &tag_args);
    assert!(read.status.success(), "{}", stderr(&read));
    let read = render(&url, "v1", &with_mode(keys, "tag-and-head"));
    assert!(read.status.success(), "{}", stderr(&read));
    assert!(
        stderr(&read).contains(&format!(
            "verified: tag v1 signed by {dev_fingerprint} (dev@example.org); commit signed by {dev_fingerprint}"
        )),
        "{}",
        stderr(&read)
    );
    assert_refused(
        &render(&url, "v2", &tag_args),
        &["tag v2 is not verified: it is not signed"],
    );
    assert_refused(
        &render(&url, "light", &tag_args),
        &["\"light\" cannot be verified as a tag: it is a lightweight tag"],
    );
    assert_refused(
        &render(&url, "trusted", &tag_args),
        &["\"trusted\" cannot be verified as a tag: it is not a tag"],
    );
    // The tag v1 moved to the unsigned commit: refused in mode head as in mode tag.
    git(&work, &["tag", "-f", "-a", "v1", "-m", "moved", &unsigned]);
    git(
        &work,
        &["push", "-q", "-f", "../remote.git", "refs/tags/v1"],
    );
    assert_refused(
        &render(&url, "v1", &with(keys)),
        &[&format!(
            "commit {} is not verified: it is not signed",
            short(&unsigned)
        )],
    );
    assert_refused(
        &render(&url, "v1", &tag_args),
        &["tag v1 is not verified: it is not signed"],
    );

    // A key file that holds no key is refused before anything is fetched.
    let empty = root.join("empty");
    std::fs::write(&empty, "# nobody\n").unwrap();
    assert_refused(
        &render(&url, "trusted", &with(empty.to_str().unwrap())),
        &["holds no key"],
    );
}

#[test]
fn commits_tether_writes_are_signed_as_git_verifies_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (key, fingerprint) = ssh_key(root, "tether", "tether@cluster");
    let signers = root.join("allowed_signers");
    std::fs::write(&signers, format!("tether@example.org {}\n", public(&key))).unwrap();
    let work = root.join("work");
    git(root, &["init", "-q", "work"]);
    std::fs::write(work.join("models.yaml"), MODELS).unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "models"]);
    git(root, &["clone", "-q", "--bare", "work", "remote.git"]);
    let key_file = key.to_str().unwrap();
    let allowed = format!("gpg.ssh.allowedSignersFile={}", signers.display());

    // In a checkout.
    let work_dir = work.to_str().unwrap();
    let scaled = tether(&[
        "scale",
        "web",
        "3",
        "-C",
        work_dir,
        "--no-apply",
        "--signing-key",
        key_file,
    ]);
    assert!(scaled.status.success(), "{}", stderr(&scaled));
    let verified = try_git(&work, &["-c", &allowed, "verify-commit", "HEAD"]);
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(verified.status.success(), "{said}");
    assert!(
        said.contains("Good \"git\" signature for tether@example.org")
            && said.contains(&fingerprint),
        "{said}"
    );

    // Through tether's clone of a remote: the pushed commit is signed.
    let url = format!("file://{}", root.join("remote.git").display());
    let cache = root.join("cache");
    let pushed = tether(&[
        "scale",
        "web",
        "4",
        "--repo",
        &url,
        "--no-apply",
        "--signing-key",
        key_file,
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let remote = root.join("remote.git");
    let verified = try_git(&remote, &["-c", &allowed, "verify-commit", "main"]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    // And tether trusts its own commit by the same key.
    let read = render(
        &url,
        "main",
        &[
            "--cache-dir",
            cache.to_str().unwrap(),
            "--verify-keys",
            signers.to_str().unwrap(),
        ]
        .map(str::to_string),
    );
    assert!(read.status.success(), "{}", stderr(&read));

    // A key with a passphrase is refused before anything is committed, and the
    // message does not show the key.
    let locked = root.join("locked");
    run(
        "ssh-keygen",
        root,
        &["-q", "-t", "ed25519", "-N", "secret", "-f", "locked"],
        &[],
    );
    let head = git(&work, &["rev-parse", "HEAD"]);
    let refused = tether(&[
        "scale",
        "web",
        "5",
        "-C",
        work_dir,
        "--no-apply",
        "--signing-key",
        locked.to_str().unwrap(),
    ]);
    let said = flat(&stderr(&refused));
    assert!(!refused.status.success());
    assert!(
        said.contains(&flat("is encrypted with a passphrase")),
        "{said}"
    );
    assert!(!said.contains("OPENSSH PRIVATE KEY"), "{said}");
    assert_eq!(
        git(&work, &["rev-parse", "HEAD"]),
        head,
        "nothing committed"
    );
}
