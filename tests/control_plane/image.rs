//! `scripts/image`: the release image, built as a user would on a machine without a
//! container engine, pushed to a real registry (Debian's docker-registry) with skopeo,
//! inspected there, copied back out and run from its own root filesystem.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;
use tether_testkit::registry::Registry;
use tether_testkit::remote::{KillOnDrop, http};

/// The image reference deploy/base/daemon.yaml runs and `scripts/image build` records
/// by default: the version is the package's.
fn default_reference() -> String {
    format!("ghcr.io/tether-dev/tether:{}", env!("CARGO_PKG_VERSION"))
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(command: &mut Command) -> String {
    let output = command.stderr(Stdio::inherit()).output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        output.status
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `scripts/image build`, in the environment of the user's shell: without the
/// variables cargo sets for a test process (ring's build script reruns when
/// CARGO_MANIFEST_DIR changes, which rebuilt half the release build in every test run).
fn build_image(out: &Path) -> String {
    let mut command = Command::new(root().join("scripts/image"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
        ]
        .contains(&name.as_ref())
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_PRIMARY_PACKAGE")
        {
            command.env_remove(name.as_ref());
        }
    }
    run(command.args(["build", "--out"]).arg(out))
}

/// The image layout of `scripts/image build`, built once per test binary: the release
/// build takes minutes, and its artifacts (target/<host>/release) are reused by every
/// later build.
pub(crate) fn release_image() -> &'static Path {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image/tether");
        let printed = build_image(&out);
        assert_eq!(
            printed.trim(),
            out.to_str().unwrap(),
            "build prints the layout's directory"
        );
        out
    })
}

/// An HTTPS server on localhost (python3's http.server, a certificate for `localhost`
/// made here) that answers every Git request with 404: enough to show that a client
/// resolved the name, verified the certificate and read the answer.
struct HttpsServer {
    _process: KillOnDrop,
    port: u16,
    certificate: PathBuf,
    _dir: tempfile::TempDir,
}

impl HttpsServer {
    fn start() -> HttpsServer {
        let dir = tempfile::tempdir().unwrap();
        let (certificate, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        run(Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&certificate));
        let mut process = Command::new("python3")
            .args([
                "-c",
                "import http.server, ssl, sys\n\
                 server = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n\
                 tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
                 tls.load_cert_chain(sys.argv[1], sys.argv[2])\n\
                 server.socket = tls.wrap_socket(server.socket, server_side=True)\n\
                 print(server.server_address[1], flush=True)\n\
                 server.serve_forever()",
            ])
            .arg(&certificate)
            .arg(&key)
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut port = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(process.stdout.take().unwrap()),
            &mut port,
        )
        .unwrap();
        HttpsServer {
            port: port.trim().parse().unwrap(),
            _process: KillOnDrop(process),
            certificate,
            _dir: dir,
        }
    }
}

fn skopeo(args: &[&str]) -> String {
    run(Command::new("skopeo").args(args))
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn read_json(path: &Path) -> Value {
    json(&std::fs::read_to_string(path).unwrap())
}

/// The blob a descriptor names, in an OCI image layout.
fn blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().unwrap();
    layout
        .join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

/// The layout's one manifest: its index entry and the manifest itself.
fn manifest(layout: &Path) -> (Value, Value) {
    let index = read_json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "one image in {index}");
    let entry = manifests[0].clone();
    let manifest = read_json(&blob(layout, &entry));
    (entry, manifest)
}

/// Runs a program of an unpacked image as a container runtime would: chrooted into
/// its root filesystem, as the given user, with only the image's environment.
fn run_in_rootfs(rootfs: &Path, user: &str, env: &[Value], args: &[&str]) -> std::process::Output {
    // Found on the test's PATH: the command's own PATH is the image's.
    let chroot = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("chroot"))
        .find(|path| path.is_file())
        .expect("chroot (coreutils) on PATH");
    let mut command = Command::new(chroot);
    command
        .env_clear()
        .arg(format!("--userspec={user}"))
        .arg(rootfs)
        .args(args);
    for variable in env {
        let (name, value) = variable.as_str().unwrap().split_once('=').unwrap();
        command.env(name, value);
    }
    command.output().unwrap()
}

#[test]
fn the_image_is_pushed_inspected_copied_back_and_runs_with_no_host_library() {
    let layout = release_image();
    let (entry, _) = manifest(layout);
    assert_eq!(
        entry["annotations"]["org.opencontainers.image.ref.name"],
        default_reference().as_str(),
        "the default reference is the package's version"
    );
    let deployment = std::fs::read_to_string(root().join("deploy/base/daemon.yaml")).unwrap();
    assert!(
        deployment.contains(&format!("image: {}\n", default_reference())),
        "deploy/base/daemon.yaml runs the image scripts/image builds ({})",
        default_reference()
    );

    let registry = Registry::start();
    let pushed = format!(
        "docker://{}/tether-dev/tether:{}",
        registry.host(),
        env!("CARGO_PKG_VERSION")
    );
    run(Command::new(root().join("scripts/image"))
        .arg("push")
        .arg(layout)
        .arg(&pushed)
        .arg("--dest-tls-verify=false"));
    let (status, tags) = http(
        registry.port,
        "GET",
        "/v2/tether-dev/tether/tags/list",
        &[],
        b"",
    );
    assert_eq!(
        (status, json(&tags)["tags"][0].as_str()),
        (200, Some(env!("CARGO_PKG_VERSION")))
    );

    let config = json(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--config",
        &pushed,
    ]));
    let runtime = &config["config"];
    assert_eq!(
        runtime["User"], "65532:65532",
        "runs as the non-root user: {config}"
    );
    assert_eq!(
        runtime["Entrypoint"],
        serde_json::json!(["/usr/local/bin/tether"])
    );
    assert_eq!(
        runtime["Cmd"],
        serde_json::json!([
            "run",
            "--sources",
            "--leader-elect",
            "--listen=0.0.0.0:8080",
            "--log-format=json"
        ])
    );
    assert_eq!(
        runtime["Labels"]["org.opencontainers.image.licenses"],
        "Apache-2.0"
    );
    assert_eq!(
        runtime["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );

    let pushed_manifest = json(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &pushed,
    ]));
    let layers = pushed_manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one layer: {pushed_manifest}");
    let compressed: u64 = layers.iter().map(|l| l["size"].as_u64().unwrap()).sum();
    // Compressed, the stripped static binary (63 MB since the signatures' crates:
    // sequoia-openpgp, ssh-key, sigstore-verify with aws-lc) is 24.1 MB, helm (63 MB)
    // 19.2 MB, kubectl (59 MB) 17.3 MB and the CA bundle 0.1 MB: 60.3 MB in all. 70 MB
    // leaves room for growth and still catches an unstripped tether (its symbols added
    // 30 MB compressed when the binary was 40 MB) or a base image's worth of files.
    assert!(
        compressed < 70_000_000,
        "the image is {compressed} bytes compressed"
    );

    // Back out of the registry, as a node would pull it, and unpacked into a root
    // filesystem of its own.
    let pulled = tempfile::tempdir().unwrap();
    let pulled_layout = pulled.path().join("layout");
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &pushed,
        &format!("oci:{}:pulled", pulled_layout.display()),
    ]);
    let (_, manifest) = manifest(&pulled_layout);
    let layer = blob(&pulled_layout, &manifest["layers"][0]);
    let listing = run(Command::new("tar").arg("-tzf").arg(&layer));
    assert_eq!(
        listing.lines().collect::<Vec<_>>(),
        [
            "etc/",
            "etc/group",
            "etc/nsswitch.conf",
            "etc/passwd",
            "etc/ssl/",
            "etc/ssl/certs/",
            "etc/ssl/certs/ca-certificates.crt",
            "home/",
            "home/nonroot/",
            "tmp/",
            "usr/",
            "usr/local/",
            "usr/local/bin/",
            "usr/local/bin/helm",
            "usr/local/bin/kubectl",
            "usr/local/bin/tether",
        ]
    );
    let rootfs = pulled.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(&rootfs));

    // Nothing but the layer's files: no /lib, no loader, no libssl. As root (chroot
    // needs it) and as the image's user.
    let env = runtime["Env"].as_array().unwrap();
    for user in ["0:0", "65532:65532"] {
        let output = run_in_rootfs(
            &rootfs,
            user,
            env,
            &["/usr/local/bin/tether", "version", "--client"],
        );
        assert!(
            output.status.success(),
            "tether version --client as {user} in the image's root: {output:?}"
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!("client: {}", env!("CARGO_PKG_VERSION"))
        );
    }
    assert_git_https_works_in_rootfs(&rootfs, env);
    assert_helm_and_kustomize_work_in_rootfs(&rootfs, env);
}

/// The engines tether runs for charts and overlays, found on the image's PATH and run
/// as its user: `helm template` of a tiny chart and `kubectl kustomize` of a tiny
/// overlay print the objects they make, with no HOME and nothing of the host.
fn assert_helm_and_kustomize_work_in_rootfs(rootfs: &Path, env: &[Value]) {
    let run_as_nonroot = |args: &[&str]| {
        let output = run_in_rootfs(rootfs, "65532:65532", env, args);
        assert!(
            output.status.success(),
            "{args:?} in the image's root: {output:?}"
        );
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(
        run_as_nonroot(&["helm", "version", "--template", "{{.Version}}"]),
        "v4.1.4"
    );
    write_files(
        &rootfs.join("tmp/chart"),
        &[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: hello\nversion: 0.1.0\n",
            ),
            (
                "templates/greeting.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n",
            ),
        ],
    );
    let rendered = run_as_nonroot(&["helm", "template", "demo", "/tmp/chart"]);
    assert!(
        rendered.contains("kind: ConfigMap") && rendered.contains("name: demo-greeting"),
        "{rendered}"
    );

    write_files(
        &rootfs.join("tmp/overlay"),
        &[
            (
                "kustomization.yaml",
                "resources:\n- greeting.yaml\nnamePrefix: staging-\nlabels:\n- pairs:\n    env: staging\n",
            ),
            (
                "greeting.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  message: hello\n",
            ),
        ],
    );
    let built = run_as_nonroot(&["kubectl", "kustomize", "/tmp/overlay"]);
    assert_eq!(
        built,
        "apiVersion: v1\ndata:\n  message: hello\nkind: ConfigMap\nmetadata:\n  labels:\n    env: staging\n  name: staging-greeting\n"
    );
}

/// Git over HTTPS from inside the image: the name resolved by the static glibc
/// (nsswitch.conf, /etc/hosts as Kubernetes mounts it), the server's certificate
/// verified against the image's CA bundle (SSL_CERT_FILE). The server's certificate is
/// added to the bundle as a cluster's private CA would be.
fn assert_git_https_works_in_rootfs(rootfs: &Path, env: &[Value]) {
    let server = HttpsServer::start();
    std::fs::write(rootfs.join("etc/hosts"), "127.0.0.1 localhost\n").unwrap();
    let fetch = |rootfs: &Path| {
        let url = format!("https://localhost:{}/models.git", server.port);
        let output = run_in_rootfs(
            rootfs,
            "65532:65532",
            env,
            &["/usr/local/bin/tether", "diff", "--repo", &url],
        );
        assert!(!output.status.success(), "there is no repository at {url}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let untrusted = fetch(rootfs);
    assert!(
        untrusted.contains("certificate"),
        "a certificate not in the bundle is refused: {untrusted}"
    );

    let bundle = rootfs.join("etc/ssl/certs/ca-certificates.crt");
    let mut trusted = std::fs::read(&bundle).unwrap();
    trusted.extend(std::fs::read(&server.certificate).unwrap());
    std::fs::write(&bundle, trusted).unwrap();
    let answered = fetch(rootfs);
    assert!(
        answered.contains("unexpected http status code: 404"),
        "resolved, verified and answered: {answered}"
    );
}

/// Writes each file (a path relative to `dir`, and its text), with its folders.
fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

#[test]
fn building_the_image_twice_gives_the_same_bytes() {
    let first = release_image();
    let second = tempfile::tempdir().unwrap();
    let second = second.path().join("tether");
    build_image(&second);
    let (first_entry, first_manifest) = manifest(first);
    let (second_entry, second_manifest) = manifest(&second);
    assert_eq!(first_manifest["layers"], second_manifest["layers"]);
    assert_eq!(
        first_entry["digest"], second_entry["digest"],
        "the same manifest digest"
    );
}
