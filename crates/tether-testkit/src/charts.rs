//! Signed chart repositories, as chart publishers make them: a signing key made by
//! `gpg` as Helm's documentation makes one ([`ChartSigner`]), and a directory of
//! charts served over HTTP on loopback ([`serve`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::remote::{KillOnDrop, free_port};

/// A chart signing key (`gpg --quick-gen-key`, a primary key that signs: Helm signs
/// with the primary key): its secret keyring (`gpg --export-secret-keys`, as `helm
/// package --sign --keyring` reads it), its public keyring for `helm verify`, and its
/// armored public key for tether.
pub struct ChartSigner {
    pub secring: PathBuf,
    pub pubring: PathBuf,
    pub public: PathBuf,
}

impl ChartSigner {
    /// A new key for `user` (`Charts <charts@example.org>`), its files in `dir`.
    pub fn new(dir: &Path, user: &str) -> ChartSigner {
        let home = dir.join("gnupg");
        std::fs::create_dir_all(&home).unwrap();
        let gpg = |args: &[&str], out: Option<&str>| {
            let output = Command::new("gpg")
                .args(["--batch", "--passphrase", ""])
                .args(args)
                .env("GNUPGHOME", &home)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "gpg {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            if let Some(file) = out {
                std::fs::write(dir.join(file), output.stdout).unwrap();
            }
        };
        gpg(&["--quick-gen-key", user, "ed25519", "sign", "never"], None);
        gpg(&["--export-secret-keys"], Some("secring.gpg"));
        gpg(&["--export"], Some("pubring.gpg"));
        gpg(&["--armor", "--export"], Some("public.asc"));
        let _ = Command::new("gpgconf")
            .args(["--kill", "gpg-agent"])
            .env("GNUPGHOME", &home)
            .output();
        ChartSigner {
            secring: dir.join("secring.gpg"),
            pubring: dir.join("pubring.gpg"),
            public: dir.join("public.asc"),
        }
    }
}

/// A directory a python3 HTTP server serves on loopback, stopped when dropped.
pub struct Served {
    _server: KillOnDrop,
    pub url: String,
}

pub fn serve(dir: &Path) -> Served {
    let port = free_port();
    let server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Served {
        _server: KillOnDrop(server),
        url: format!("http://127.0.0.1:{port}"),
    }
}
