//! A private Sigstore as a test needs one, made by the real tools: a certificate
//! authority (`openssl`), a timestamp authority (sigstore's `timestamp-server`, its
//! key in memory), their trusted root (`cosign trusted-root create`), short-lived
//! code-signing certificates the authority issues for an identity (an email address
//! and the OIDC issuer Fulcio writes), and signatures as `cosign sign
//! --new-bundle-format --timestamp-server-url` pushes them (a Sigstore bundle
//! referring to the artifact, with an RFC 3161 timestamp, no transparency log).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::remote::{KillOnDrop, free_port};
use crate::tools::{cosign, timestamp_server};

/// A certificate authority and a timestamp authority, in a directory of their own.
pub struct PrivateSigstore {
    dir: tempfile::TempDir,
    name: String,
    timestamps: Arc<TimestampAuthority>,
}

/// A certificate the authority issued, with its key in cosign's format.
pub struct Certificate {
    dir: PathBuf,
    name: String,
    timestamps: Arc<TimestampAuthority>,
    /// When it expires, in seconds since the epoch.
    pub not_after: u64,
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
        let timestamps = TimestampAuthority::shared();
        std::fs::write(dir.path().join("tsa-chain.pem"), &timestamps.chain).unwrap();
        let fulcio = format!(
            "--fulcio=url=https://{name}.example.org,certificate-chain={}",
            ca("pem")
        );
        let tsa = format!(
            "--tsa=url={},certificate-chain=tsa-chain.pem",
            timestamps.url
        );
        let cosign = cosign().to_str().unwrap();
        let create = ["trusted-root", "create", &fulcio];
        run(
            dir.path(),
            cosign,
            &[&create[..], &[&tsa, "--out", "trusted_root.json"]].concat(),
        );
        run(
            dir.path(),
            cosign,
            &[&create[..], &["--out", "untimed_root.json"]].concat(),
        );
        std::fs::write(dir.path().join("serial"), "01\n").unwrap();
        std::fs::write(dir.path().join("index.txt"), "").unwrap();
        std::fs::write(
            dir.path().join("ca.cnf"),
            "[ca]\ndefault_ca = ca\n[ca]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\n[any]\norganizationName = optional\n",
        )
        .unwrap();
        PrivateSigstore {
            dir,
            name: name.to_string(),
            timestamps,
        }
    }

    /// Its trusted root (JSON), as a Source's Secret or `--verify-keys` takes it: the
    /// certificate authority and the timestamp authority.
    pub fn trusted_root(&self) -> PathBuf {
        self.dir.path().join("trusted_root.json")
    }

    /// A trusted root of the certificate authority alone: nothing in it can say
    /// when a certificate signed.
    pub fn untimed_root(&self) -> PathBuf {
        self.dir.path().join("untimed_root.json")
    }

    /// A code-signing certificate for `email`, of the OIDC `issuer`, valid from now
    /// for ten minutes, as long as Fulcio's.
    pub fn issue(&self, email: &str, issuer: &str) -> Certificate {
        self.issue_for(email, issuer, Duration::from_secs(600))
    }

    /// A code-signing certificate for `email`, of the OIDC `issuer`, valid from now
    /// for `lifetime`.
    pub fn issue_for(&self, email: &str, issuer: &str, lifetime: Duration) -> Certificate {
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
        // openssl 3.0's x509 counts in days: `openssl ca` issues to the second.
        let not_after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + lifetime.as_secs();
        let end = chrono::DateTime::from_timestamp(not_after as i64, 0)
            .unwrap()
            .format("%y%m%d%H%M%SZ")
            .to_string();
        run(
            dir,
            "openssl",
            &[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-cert",
                &format!("{}.pem", self.name),
                "-keyfile",
                &format!("{}.key", self.name),
                "-in",
                &file("csr"),
                "-enddate",
                &end,
                "-extfile",
                &file("ext"),
                "-notext",
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
            timestamps: self.timestamps.clone(),
            not_after,
        }
    }
}

/// sigstore's timestamp authority, one per machine at a time: its metrics server
/// takes port 2112, whatever it is told. The private Sigstores of a test process
/// share it; a lock file keeps other processes' (the demo's) apart.
struct TimestampAuthority {
    /// Its timestamps' URL.
    url: String,
    /// Its certificate chain (PEM).
    chain: String,
    // Dropped in this order: the server stopped, then the lock let go.
    _server: KillOnDrop,
    _lock: std::fs::File,
    _dir: tempfile::TempDir,
}

impl TimestampAuthority {
    /// The process's timestamp authority, started if none is running.
    fn shared() -> Arc<TimestampAuthority> {
        static SHARED: Mutex<Weak<TimestampAuthority>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = shared.upgrade() {
            return running;
        }
        let started = Arc::new(TimestampAuthority::start());
        *shared = Arc::downgrade(&started);
        started
    }

    fn start() -> TimestampAuthority {
        let lock =
            std::fs::File::create(std::env::temp_dir().join("tether-timestamp-authority.lock"))
                .unwrap();
        lock.lock().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("tsa.log")).unwrap();
        let server = KillOnDrop(
            Command::new(timestamp_server())
                .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--timestamp-signer", "memory", "--disable-ntp-monitoring"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        for _ in 0..300 {
            let (status, chain) =
                crate::remote::http(port, "GET", "/api/v1/timestamp/certchain", &[], b"");
            if status == 200 {
                return TimestampAuthority {
                    url: format!("http://127.0.0.1:{port}/api/v1/timestamp"),
                    chain,
                    _server: server,
                    _lock: lock,
                    _dir: dir,
                };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the timestamp authority did not answer: {}",
            std::fs::read_to_string(dir.path().join("tsa.log")).unwrap_or_default()
        );
    }
}

impl Certificate {
    /// `cosign sign --new-bundle-format` of `reference` with this certificate, the
    /// signature countersigned by the timestamp authority.
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
                "--timestamp-server-url",
                &self.timestamps.url,
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
