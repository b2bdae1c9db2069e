//! An OCI registry for tests: Debian's `docker-registry` (distribution) on a free
//! loopback port, storing into a temporary directory, its access log in a file so
//! that a test can count the requests a client made.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::remote::{KillOnDrop, free_port, http};

/// A running registry; stopped when dropped.
pub struct Registry {
    _process: KillOnDrop,
    pub port: u16,
    storage: tempfile::TempDir,
}

impl Registry {
    /// Starts the registry, open to all, and waits until `/v2/` answers.
    pub fn start() -> Registry {
        Registry::start_with(None)
    }

    /// Starts a registry that takes only `user` with `password` (basic auth, as
    /// distribution's htpasswd checks it: a bcrypt hash made by python3's crypt).
    pub fn start_for_user(user: &str, password: &str) -> Registry {
        let hash = Command::new("python3")
            .args([
                "-W",
                "ignore",
                "-c",
                "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                password,
            ])
            .output()
            .unwrap();
        assert!(hash.status.success(), "python3 hashes the password");
        let line = format!("{user}:{}", String::from_utf8(hash.stdout).unwrap());
        Registry::start_with(Some(&line))
    }

    /// A registry open to all, or to the one user of an htpasswd line.
    fn start_with(htpasswd: Option<&str>) -> Registry {
        let storage = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = storage.path().join("config.yml");
        let auth = match htpasswd {
            Some(line) => {
                let path = storage.path().join("htpasswd");
                std::fs::write(&path, line).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: tether-tests\n    path: {}\n",
                    path.display()
                )
            }
            None => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        // The access log (one combined-format line per request) goes to standard
        // output; the registry's own log to standard error.
        let process = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::fs::File::create(storage.path().join("access.log")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry is installed (scripts/test-tools install)");
        let registry = Registry {
            _process: KillOnDrop(process),
            port,
            storage,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        // Up once `/v2/` answers: 200, or 401 when it asks for credentials.
        while ![200, 401].contains(&http(port, "GET", "/v2/", &[], b"").0) {
            assert!(
                Instant::now() < deadline,
                "the registry did not answer /v2/ within 20 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    /// `127.0.0.1:PORT`, as a reference names the registry.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where the registry keeps blob `digest` (`sha256:<hex>`): a test may tamper
    /// with it.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The access log's lines so far: one per request.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.access_log())
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("HTTP/1.1\""))
            .map(str::to_string)
            .collect()
    }

    fn access_log(&self) -> PathBuf {
        self.storage.path().join("access.log")
    }
}
