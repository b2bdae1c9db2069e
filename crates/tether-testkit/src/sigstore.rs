//! A private Sigstore as a test needs one, made by the real tools: a certificate
//! authority (`openssl`), its trusted root (`cosign trusted-root create`), code-signing
//! certificates it issues for an identity (an email address and the OIDC issuer
//! Fulcio writes), and signatures as `cosign sign --new-bundle-format` pushes them (a
//! Sigstore bundle referring to the artifact, no transparency log).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tools::cosign;

/// A certificate authority in a directory of its own.
pub struct PrivateSigstore {
    dir: tempfile::TempDir,
    name: String,
}

/// A certificate the authority issued, with its key in cosign's format.
pub struct Certificate {
    dir: PathBuf,
    name: String,
}

impl PrivateSigstore {
    /// A new authority `name` (`https://NAME.example.org` in its trusted root).
    pub fn new(name: &str) -> PrivateSigstore {
        let dir = tempfile::tempdir().unwrap();
        let ca = |file: &str| format!("{name}.{file}");
        p256_key(dir.path(), &ca("key"));
        run(
            dir.path(),
            "openssl",
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &ca("key"),
                "-days",
                "3650",
                "-subj",
                &format!("/O=Private Sigstore/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-out",
                &ca("pem"),
            ],
        );
        run(
            dir.path(),
            cosign().to_str().unwrap(),
            &[
                "trusted-root",
                "create",
                &format!(
                    "--fulcio=url=https://{name}.example.org,certificate-chain={}",
                    ca("pem")
                ),
                "--out",
                "trusted_root.json",
            ],
        );
        PrivateSigstore {
            dir,
            name: name.to_string(),
        }
    }

    /// Its trusted root (JSON), as a Source's Secret or `--verify-keys` takes it.
    pub fn trusted_root(&self) -> PathBuf {
        self.dir.path().join("trusted_root.json")
    }

    /// A code-signing certificate for `email`, of the OIDC `issuer`, valid for a day.
    pub fn issue(&self, email: &str, issuer: &str) -> Certificate {
        let dir = self.dir.path();
        let name = email.replace(['@', '.'], "-");
        let file = |ext: &str| format!("{name}.{ext}");
        p256_key(dir, &file("pkey"));
        run(
            dir,
            "openssl",
            &[
                "req",
                "-new",
                "-key",
                &file("pkey"),
                "-subj",
                "/",
                "-out",
                &file("csr"),
            ],
        );
        std::fs::write(
            dir.join(file("ext")),
            format!(
                "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\nsubjectAltName=critical,email:{email}\n1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:{issuer}\n"
            ),
        )
        .unwrap();
        run(
            dir,
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &file("csr"),
                "-CA",
                &format!("{}.pem", self.name),
                "-CAkey",
                &format!("{}.key", self.name),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &file("ext"),
                "-out",
                &file("pem"),
            ],
        );
        let cosign_path = cosign().to_str().unwrap().to_string();
        run(
            dir,
            &cosign_path,
            &[
                "import-key-pair",
                "--key",
                &file("pkey"),
                "--output-key-prefix",
                &name,
            ],
        );
        std::fs::copy(
            dir.join(format!("{}.pem", self.name)),
            dir.join(file("chain")),
        )
        .unwrap();
        Certificate {
            dir: dir.to_path_buf(),
            name,
        }
    }
}

impl Certificate {
    /// `cosign sign --new-bundle-format` of `reference` with this certificate.
    pub fn sign(&self, reference: &str) {
        let file = |ext: &str| format!("{}.{ext}", self.name);
        crate::tools::cosign_sign_with(
            &self.dir,
            &[
                "--key",
                &file("key"),
                "--certificate",
                &file("pem"),
                "--certificate-chain",
                &file("chain"),
                "--new-bundle-format",
            ],
            reference,
        );
    }
}

/// An ECDSA P-256 private key made by openssl, as `file` in `dir`.
fn p256_key(dir: &Path, file: &str) {
    run(
        dir,
        "openssl",
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            file,
        ],
    );
}

fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
