//! An OCI registry for tests: Debian's `docker-registry` (distribution) on a free
//! loopback port, storing into a temporary directory, its access log in a file so
//! that a test can count the requests a client made. Images are pushed by skopeo (a
//! second client) from OCI layouts made here, deleted by skopeo (the registry allows
//! deletes), or their tags (and copies of whole repositories) written straight into
//! the storage by the thousand.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::remote::{KillOnDrop, free_port, http, status_and_body};

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

    /// Starts a registry, open to all, that POSTs its notifications (distribution's
    /// events envelope) to `url`, with `headers` (an `Authorization` for a receiver
    /// that asks for one).
    pub fn start_with_notifications(url: &str, headers: &[(&str, &str)]) -> Registry {
        let headers: String = headers
            .iter()
            .map(|(name, value)| format!("        {name}: [\"{value}\"]\n"))
            .collect();
        let headers = match headers.is_empty() {
            true => String::new(),
            false => format!("      headers:\n{headers}"),
        };
        Registry::start_configured(
            None,
            &format!(
                "notifications:\n  endpoints:\n    - name: tests\n      url: {url}\n{headers}      timeout: 2s\n      threshold: 3\n      backoff: 1s\n"
            ),
        )
    }

    /// A registry open to all, or to the one user of an htpasswd line.
    fn start_with(htpasswd: Option<&str>) -> Registry {
        Registry::start_configured(htpasswd, "")
    }

    /// A registry open to all or to an htpasswd line's user, with `extra` appended to
    /// its configuration. Deletes are allowed (distribution refuses them otherwise).
    fn start_configured(htpasswd: Option<&str>, extra: &str) -> Registry {
        // In memory where the machine has it: hundreds of thousands of tags are
        // written (and removed) ten times faster there than on disk.
        let shm = std::path::Path::new("/dev/shm");
        let storage = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .unwrap();
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
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  delete:\n    enabled: true\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}{extra}",
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
            .filter(|line| line.contains(" HTTP/1."))
            .map(str::to_string)
            .collect()
    }

    fn access_log(&self) -> PathBuf {
        self.storage.path().join("access.log")
    }

    /// Pushes a small image (one layer, a config with `created` and linux/amd64) as
    /// `repository:tag`; returns what was pushed.
    pub fn push_image(
        &self,
        repository: &str,
        tag: &str,
        created: chrono::DateTime<chrono::Utc>,
    ) -> PushedImage {
        let config = serde_json::json!({
            "created": created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        self.push_image_with_config(repository, tag, &serde_json::to_vec(&config).unwrap())
    }

    /// Pushes an image whose config blob is `config` as it is (JSON or not):
    /// python3 makes the OCI layout, skopeo pushes it.
    pub fn push_image_with_config(
        &self,
        repository: &str,
        tag: &str,
        config: &[u8],
    ) -> PushedImage {
        let layout = tempfile::tempdir().unwrap();
        std::fs::write(layout.path().join("config"), config).unwrap();
        let made = Command::new("python3")
            .args(["-c", LAYOUT_SCRIPT])
            .arg(layout.path())
            .arg(tag)
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let digests: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
        skopeo(&[
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &format!("oci:{}:{tag}", layout.path().display()),
            &format!("docker://{}/{repository}:{tag}", self.host()),
        ]);
        PushedImage {
            manifest_digest: digests["manifest"].as_str().unwrap().to_string(),
            config_digest: digests["config"].as_str().unwrap().to_string(),
        }
    }

    /// Deletes `repository:tag`'s manifest (skopeo resolves the tag and deletes by
    /// digest, as distribution requires): the tag, and any other on that manifest,
    /// is gone.
    pub fn delete_tag(&self, repository: &str, tag: &str) {
        skopeo(&[
            "delete",
            "--tls-verify=false",
            &format!("docker://{}/{repository}:{tag}", self.host()),
        ]);
    }

    /// Writes `tags` straight into the registry's storage, each the same as an
    /// already pushed tag of `repository` (`existing`; a symlink to its directory, so
    /// its link names the same manifest): how tests make 200,000 tags in seconds.
    pub fn add_tags_in_storage(
        &self,
        repository: &str,
        existing: &str,
        tags: impl IntoIterator<Item = String>,
    ) {
        let tags_dir = self
            .storage
            .path()
            .join("data/docker/registry/v2/repositories")
            .join(repository)
            .join("_manifests/tags");
        assert!(
            tags_dir.join(existing).join("current/link").is_file(),
            "{repository}:{existing} was pushed"
        );
        for tag in tags {
            std::os::unix::fs::symlink(existing, tags_dir.join(tag)).unwrap();
        }
    }

    /// Makes `copy` a repository with the same tags as the already pushed
    /// `repository`, straight in the registry's storage (its `_manifests` and
    /// `_layers` links copied; the blobs they name are shared): how a benchmark makes
    /// a thousand repositories in a second, where a thousand skopeo pushes take
    /// minutes.
    pub fn copy_repository_in_storage(&self, repository: &str, copy: &str) {
        let repositories = self
            .storage
            .path()
            .join("data/docker/registry/v2/repositories");
        let from = repositories.join(repository);
        assert!(
            from.join("_manifests/tags").is_dir(),
            "{repository} was pushed"
        );
        let to = repositories.join(copy);
        assert!(!to.exists(), "{copy} is a new repository");
        copy_tree(&from, &to);
    }

    /// A front to this registry that pages its tag lists as the distribution spec
    /// says (`n`, `last`, `Link: <…>; rel="next"`), which distribution 2.8 does not:
    /// it answers every list whole. The tags are the registry's own, asked of it
    /// afresh for each page; other requests are not served.
    pub fn paging_front(&self) -> PagingFront {
        PagingFront::start(self.port)
    }
}

/// An image [`Registry::push_image`] pushed.
#[derive(Clone, Debug)]
pub struct PushedImage {
    /// The digest of its manifest as made (skopeo pushes it unchanged).
    pub manifest_digest: String,
    /// The digest of its config blob ([`Registry::blob_path`] finds it).
    pub config_digest: String,
}

/// Copies the directory `from` to `to` (made), symbolic links as links (a tag
/// [`Registry::add_tags_in_storage`] wrote stays a link to its sibling).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn skopeo(args: &[&str]) -> String {
    let output = Command::new("skopeo")
        .args(args)
        .output()
        .expect("skopeo is installed (scripts/test-tools install)");
    assert!(
        output.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Makes an OCI layout in argv[1] of the config file there and one gzipped tar
/// layer, the manifest tagged argv[2]; prints the manifest's and config's digests.
const LAYOUT_SCRIPT: &str = r#"
import gzip, hashlib, io, json, os, sys, tarfile
root, tag = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(root, "blobs", "sha256"))
def blob(data):
    hexdigest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "blobs", "sha256", hexdigest), "wb") as out:
        out.write(data)
    return "sha256:" + hexdigest
buffer = io.BytesIO()
with tarfile.open(fileobj=buffer, mode="w") as archive:
    data = ("image " + tag + "\n").encode()
    info = tarfile.TarInfo("etc/image-tag")
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))
layer = gzip.compress(buffer.getvalue(), mtime=0)
config = open(os.path.join(root, "config"), "rb").read()
os.remove(os.path.join(root, "config"))
config_digest = blob(config)
manifest = json.dumps({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(layer), "size": len(layer)}],
}).encode()
manifest_digest = blob(manifest)
with open(os.path.join(root, "oci-layout"), "w") as out:
    json.dump({"imageLayoutVersion": "1.0.0"}, out)
with open(os.path.join(root, "index.json"), "w") as out:
    json.dump({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
        "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": tag}}]}, out)
print(json.dumps({"manifest": manifest_digest, "config": config_digest}))
"#;

/// See [`Registry::paging_front`]. Its thread serves until the test process ends
/// (one connection, one request: it answers `Connection: close`).
pub struct PagingFront {
    pub port: u16,
    calls: Arc<AtomicU32>,
}

impl PagingFront {
    fn start(registry_port: u16) -> PagingFront {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                serve_page(stream, registry_port);
            }
        });
        PagingFront { port, calls }
    }

    /// `127.0.0.1:PORT`, as a client names the front.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The requests served so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// The registry's status and body for `GET path`, asked in HTTP/1.0 so that a long
/// list comes whole, not in chunks.
fn whole_answer(registry_port: u16, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", registry_port)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    status_and_body(&response)
}

/// Answers one `GET /v2/<repository>/tags/list?n=…&last=…` with the page after
/// `last` of the registry's tags in lexical order (as distribution 3 pages them).
fn serve_page(mut stream: TcpStream, registry_port: u16) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let target = request_line
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
    };
    let (status, body) = whole_answer(registry_port, path);
    let answer = if status == 200 && path.ends_with("/tags/list") {
        let whole: serde_json::Value = serde_json::from_str(&body).unwrap();
        let mut tags: Vec<&str> = whole["tags"]
            .as_array()
            .map(|tags| tags.iter().filter_map(|t| t.as_str()).collect())
            .unwrap_or_default();
        tags.sort_unstable();
        let last = param("last");
        let after: Vec<&str> = tags
            .into_iter()
            .filter(|tag| last.as_deref().is_none_or(|last| *tag > last))
            .collect();
        let n = param("n")
            .and_then(|n| n.parse().ok())
            .unwrap_or(after.len());
        let page = &after[..n.min(after.len())];
        let link = match (page.last(), after.len() > n) {
            (Some(last), true) => format!("Link: <{path}?n={n}&last={last}>; rel=\"next\"\r\n"),
            _ => String::new(),
        };
        let json = serde_json::json!({"name": whole["name"], "tags": page}).to_string();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{link}Connection: close\r\n\r\n{json}",
            json.len()
        )
    } else {
        format!(
            "HTTP/1.1 {status} From-Registry\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let _ = stream.write_all(answer.as_bytes());
}
