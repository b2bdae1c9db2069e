//! OCI artifacts as a models source, against a real registry (Debian's
//! docker-registry): `tether push artifact` publishes a models directory in Flux's
//! format, skopeo (a second client) reads its manifest, and `validate` / `render
//! --repo oci://…` read it back as the directory reads. A tampered blob, a missing
//! tag, a registry that is down, an artifact that is not Flux's and a hostile tarball
//! (pushed by python3, a third client) each give a clear error naming the reference;
//! a registry behind basic auth takes `--creds`. Signatures are made by cosign: with a
//! key, and in Sigstore bundles by a key or a private Sigstore's certificate.

use std::path::Path;
use std::process::{Command, Output};

use tether_testkit::registry::Registry;
use tether_testkit::sigstore::PrivateSigstore;

use crate::cli::{tether, text};
use tether_testkit::remote::free_port;

/// Does the error report on `stderr` say `expected`? The report wraps its lines (at
/// any space or after a `/`) inside miette's frame: both are compared without
/// whitespace and frame.
fn says(stderr: &[u8], expected: &str) -> bool {
    let squeezed = |text: &str| -> String {
        text.chars()
            .filter(|c| !c.is_whitespace() && !matches!(c, '│' | '×'))
            .collect()
    };
    squeezed(&text(stderr)).contains(&squeezed(expected))
}

/// `tether push artifact` of `dir` to `reference`; its standard output.
fn push(reference: &str, dir: &str) -> String {
    let out = tether(&[
        "push",
        "artifact",
        reference,
        "--path",
        dir,
        "--source",
        "https://git.example.org/ops/models.git",
        "--revision",
        "main@sha1:0123456789abcdef0123456789abcdef01234567",
        "--insecure-registry",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// `tether COMMAND --repo REFERENCE` with its own cache directory.
fn from_artifact(command: &str, reference: &str, cache: &Path) -> Output {
    tether(&[
        command,
        "--repo",
        reference,
        "--insecure-registry",
        "--cache-dir",
        cache.to_str().unwrap(),
    ])
}

#[test]
fn a_pushed_directory_reads_back_as_the_directory_itself() {
    let registry = Registry::start();
    let host = registry.host();
    let reference = format!("oci://{host}/team/models:v1");
    let pushed = push(&reference, "examples/models");
    let digest = pushed
        .trim()
        .strip_prefix(&format!("{host}/team/models@"))
        .unwrap_or_else(|| panic!("prints HOST/REPOSITORY@DIGEST: {pushed}"));
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    // Deterministic: the same directory gives the same digest, under any tag.
    assert_eq!(push(&reference, "examples/models"), pushed);
    assert_eq!(
        push(
            &format!("oci://{host}/team/models:again"),
            "examples/models"
        ),
        pushed
    );

    // skopeo, a second client, sees Flux's media types and annotations, and the
    // manifest's bytes hash to the printed digest.
    let raw = skopeo_manifest(&host, "team/models", "v1");
    let manifest: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.cncf.flux.config.v1+json"
    );
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.cncf.flux.content.v1.tar+gzip"
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.source"],
        "https://git.example.org/ops/models.git"
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.revision"],
        "main@sha1:0123456789abcdef0123456789abcdef01234567"
    );
    assert_eq!(sha256_of(&raw), digest);

    let cache = tempfile::tempdir().unwrap();
    let validated = from_artifact("validate", &reference, cache.path());
    assert_eq!(
        validated.status.code(),
        Some(0),
        "{}",
        text(&validated.stderr)
    );
    assert_eq!(
        text(&validated.stdout),
        format!("{reference}: 35 models in 8 files: valid\n")
    );
    let rendered = from_artifact("render", &reference, cache.path());
    assert_eq!(
        rendered.status.code(),
        Some(0),
        "{}",
        text(&rendered.stderr)
    );
    let directly = tether(&["render", "examples/models"]);
    assert_eq!(text(&rendered.stdout), text(&directly.stdout));

    // Pinned by digest: the same models, and nothing moves.
    let pinned = format!("oci://{host}/team/models@{digest}");
    let rendered = from_artifact("render", &pinned, cache.path());
    assert_eq!(
        rendered.status.code(),
        Some(0),
        "{}",
        text(&rendered.stderr)
    );
    assert_eq!(text(&rendered.stdout), text(&directly.stdout));

    // A --ref does not go with an artifact: the tag is in the reference.
    let with_ref = tether(&["render", "--repo", &reference, "--ref", "main"]);
    assert_eq!(with_ref.status.code(), Some(2));
    assert!(
        says(
            &with_ref.stderr,
            "--ref main is not taken with an oci:// --repo"
        ),
        "{}",
        text(&with_ref.stderr)
    );
}

#[test]
fn a_tampered_blob_a_missing_tag_and_a_registry_that_is_down_are_named() {
    let registry = Registry::start();
    let host = registry.host();
    let reference = format!("oci://{host}/team/models:v1");
    push(&reference, "examples/models/shop");

    let cache = tempfile::tempdir().unwrap();
    let missing = format!("oci://{host}/team/models:nope");
    let out = from_artifact("validate", &missing, cache.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        says(
            &out.stderr,
            &format!("{missing} does not exist in the registry")
        ),
        "{}",
        text(&out.stderr)
    );

    let down = format!("oci://127.0.0.1:{}/team/models:v1", free_port());
    let out = from_artifact("validate", &down, cache.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        says(&out.stderr, &format!("cannot reach the registry of {down}")),
        "{}",
        text(&out.stderr)
    );

    // The layer's bytes in the registry's storage changed (its digest did not): the
    // download is refused and nothing is unpacked.
    let layer = layer_digest(&host, "team/models", "v1");
    let blob = registry.blob_path(&layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let out = from_artifact("render", &reference, cache.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        says(
            &out.stderr,
            &format!("{reference}: the layer {layer} has digest sha256:")
        ) && says(
            &out.stderr,
            &format!("not the {layer} it was asked for; nothing is read from it")
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stdout).is_empty(), "nothing rendered");
    let unpacked: Vec<_> = std::fs::read_dir(cache.path().join("oci"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(unpacked.is_empty(), "nothing unpacked: {unpacked:?}");
}

#[test]
fn a_hostile_tarball_and_an_artifact_of_another_kind_are_refused() {
    let registry = Registry::start();
    let host = registry.host();
    let work = tempfile::tempdir().unwrap();

    push_raw(
        &host,
        "team/hostile",
        "v1",
        "application/vnd.cncf.flux.config.v1+json",
        &[
            ("ok.yaml", "kind: Site\nname: s\n"),
            ("../evil.yaml", "x: 1\n"),
        ],
        work.path(),
    );
    let cache = tempfile::tempdir().unwrap();
    let hostile = format!("oci://{host}/team/hostile:v1");
    let out = from_artifact("validate", &hostile, &cache.path().join("nested"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        says(
            &out.stderr,
            &format!("{hostile}: the artifact's content is refused")
        ) && says(
            &out.stderr,
            "the tar entry \"../evil.yaml\" is refused: its path goes up with '..'"
        ),
        "{}",
        text(&out.stderr)
    );
    // Beside the staging directory is where `../evil.yaml` would have landed.
    assert!(!cache.path().join("nested/oci/evil.yaml").exists());

    push_raw(
        &host,
        "team/image",
        "v1",
        "application/vnd.oci.image.config.v1+json",
        &[("ok.yaml", "kind: Site\nname: s\n")],
        work.path(),
    );
    let image = format!("oci://{host}/team/image:v1");
    let out = from_artifact("validate", &image, cache.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        says(
            &out.stderr,
            &format!(
                "{image} is not a Flux artifact: its config's media type is application/vnd.oci.image.config.v1+json"
            )
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_registry_that_asks_for_credentials_gets_them_from_creds() {
    let registry = Registry::start_for_user("ci", "s3cret");
    let reference = format!("oci://{}/team/models:v1", registry.host());
    let push_as = |creds: Option<&str>| {
        let mut args = vec![
            "push",
            "artifact",
            &reference,
            "--path",
            "examples/models",
            "--insecure-registry",
        ];
        if let Some(creds) = creds {
            args.extend(["--creds", creds]);
        }
        tether(&args)
    };
    let anonymous = push_as(None);
    assert_eq!(anonymous.status.code(), Some(2));
    assert!(
        says(
            &anonymous.stderr,
            &format!("the registry of {reference} asks for credentials, and none were given")
        ),
        "{}",
        text(&anonymous.stderr)
    );
    let wrong = push_as(Some("ci:guess"));
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        says(
            &wrong.stderr,
            &format!("the registry of {reference} refused the credentials (HTTP 401)")
        ),
        "{}",
        text(&wrong.stderr)
    );
    let pushed = push_as(Some("ci:s3cret"));
    assert_eq!(pushed.status.code(), Some(0), "{}", text(&pushed.stderr));

    let cache = tempfile::tempdir().unwrap();
    let validated = tether(&[
        "validate",
        "--repo",
        &reference,
        "--insecure-registry",
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--creds",
        "ci:s3cret",
    ]);
    assert_eq!(
        text(&validated.stdout),
        format!("{reference}: 35 models in 8 files: valid\n"),
        "{}",
        text(&validated.stderr)
    );
}

fn sha256_of(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    format!("sha256:{}", text(&out.stdout).split(' ').next().unwrap())
}

/// The manifest of `repository:tag` as skopeo reads it: its bytes.
fn skopeo_manifest(host: &str, repository: &str, tag: &str) -> Vec<u8> {
    let raw = Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{host}/{repository}:{tag}"))
        .output()
        .expect("skopeo is installed (scripts/test-tools install)");
    assert!(raw.status.success(), "{}", text(&raw.stderr));
    raw.stdout
}

/// The digest of the one layer of `repository:tag`, as skopeo reads the manifest.
fn layer_digest(host: &str, repository: &str, tag: &str) -> String {
    let manifest: serde_json::Value =
        serde_json::from_slice(&skopeo_manifest(host, repository, tag)).unwrap();
    manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Pushes an artifact made by python3 (its tarfile writes any entry name, `../`
/// included): the given files as one gzipped tar layer, and a config of
/// `config_type`.
fn push_raw(
    host: &str,
    repository: &str,
    tag: &str,
    config_type: &str,
    files: &[(&str, &str)],
    work: &Path,
) {
    let script = work.join("push.py");
    std::fs::write(&script, PUSH_SCRIPT).unwrap();
    let entries = serde_json::to_string(files).unwrap();
    let out = Command::new("python3")
        .arg(&script)
        .args([host, repository, tag, config_type, &entries])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

const PUSH_SCRIPT: &str = r#"
import gzip, hashlib, io, json, sys, tarfile, urllib.request
host, repository, tag, config_type, entries = sys.argv[1:6]
buffer = io.BytesIO()
with tarfile.open(fileobj=buffer, mode="w") as archive:
    for name, content in json.loads(entries):
        data = content.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
layer = gzip.compress(buffer.getvalue())
config = b"{}"
def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()
def upload(data):
    start = urllib.request.Request(f"http://{host}/v2/{repository}/blobs/uploads/", method="POST", data=b"")
    location = urllib.request.urlopen(start).headers["Location"]
    if location.startswith("/"):
        location = f"http://{host}{location}"
    separator = "&" if "?" in location else "?"
    put = urllib.request.Request(f"{location}{separator}digest={digest(data)}", method="PUT", data=data,
                                 headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(put)
upload(config)
upload(layer)
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": config_type, "digest": digest(config), "size": len(config)},
    "layers": [{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                "digest": digest(layer), "size": len(layer)}],
}
put = urllib.request.Request(f"http://{host}/v2/{repository}/manifests/{tag}", method="PUT",
                             data=json.dumps(manifest).encode(),
                             headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
urllib.request.urlopen(put)
"#;

/// `cosign` with `args`, no passphrase asked, no transparency log, the local registry
/// taken over plain HTTP.
pub(crate) fn cosign(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(tether_testkit::tools::cosign())
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cosign {args:?}: {}",
        text(&out.stderr)
    );
    out
}

/// `tether validate --repo REFERENCE --verify-keys KEYS EXTRA…` with `cache`.
fn verified_read(reference: &str, cache: &Path, keys: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "validate",
        "--repo",
        reference,
        "--insecure-registry",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--verify-keys",
        keys.to_str().unwrap(),
    ];
    args.extend(extra);
    tether(&args)
}

#[test]
fn only_an_artifact_a_trusted_cosign_key_signed_is_read() {
    let registry = Registry::start();
    let host = registry.host();
    let keys = tempfile::tempdir().unwrap();
    cosign(keys.path(), &["generate-key-pair"]);
    cosign(
        keys.path(),
        &["generate-key-pair", "--output-key-prefix", "other"],
    );
    let trusted = keys.path().join("cosign.pub");
    let other = keys.path().join("other.pub");
    let cache = tempfile::tempdir().unwrap();
    let read = |reference: &str, key: &Path| verified_read(reference, cache.path(), key, &[]);
    let sign =
        |pushed: &str| tether_testkit::tools::cosign_sign(keys.path(), "cosign.key", pushed.trim());
    let signed = format!("oci://{host}/team/models:v1");
    let pushed = push(&signed, "examples/models");
    let digest = pushed.trim().rsplit('@').next().unwrap().to_string();
    sign(&pushed);

    // cosign itself agrees.
    cosign(
        keys.path(),
        &[
            "verify",
            "--key",
            "cosign.pub",
            "--insecure-ignore-tlog=true",
            "--allow-insecure-registry",
            "--allow-http-registry",
            pushed.trim(),
        ],
    );
    let out = read(&signed, &trusted);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Another key; the tag re-pushed with other content and no signature; a digest
    // never signed: each refused, naming the digest, and nothing read.
    let out = read(&signed, &other);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(
            &out.stderr,
            &format!(
                "({digest}) is not verified: it is signed by a cosign key, which is not among the trusted keys"
            )
        ),
        "{}",
        text(&out.stderr)
    );
    let repushed = push(&signed, "examples/openstack");
    let unsigned_digest = repushed.trim().rsplit('@').next().unwrap().to_string();
    let out = read(&signed, &trusted);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(
            &out.stderr,
            &format!("({unsigned_digest}) is not verified: it is not signed")
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "nothing validated: {}",
        text(&out.stdout)
    );
    // The signed digest, pinned, is still read.
    let out = read(&format!("oci://{host}/team/models@{digest}"), &trusted);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A signature that names another digest: the signature manifest of the signed
    // artifact copied under the unsigned one's tag.
    let signature = skopeo_manifest(
        &host,
        "team/models",
        &format!("{}.sig", digest.replacen(':', "-", 1)),
    );
    let moved = format!("{}.sig", unsigned_digest.replacen(':', "-", 1));
    let put = Command::new("curl")
        .args([
            "-sS",
            "-f",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/vnd.oci.image.manifest.v1+json",
            "--data-binary",
            "@-",
            &format!("http://{host}/v2/team/models/manifests/{moved}"),
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(&signature)?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(put.status.success());
    let out = read(&signed, &trusted);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(
            &out.stderr,
            &format!("it signs {digest}, not {unsigned_digest}")
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_artifact_signed_in_a_sigstore_bundle_is_read_by_its_key_or_a_private_trusted_root() {
    let registry = Registry::start();
    let host = registry.host();
    let sigstore = PrivateSigstore::new("fulcio");
    let other = PrivateSigstore::new("other");
    // Fulcio's certificates live ten minutes; this one five seconds.
    let ci = sigstore.issue_for(
        "ci@example.org",
        "https://issuer.example.org",
        std::time::Duration::from_secs(5),
    );
    let cache = tempfile::tempdir().unwrap();
    let read = |reference: &str, keys: &Path, identity: &[&str]| {
        verified_read(reference, cache.path(), keys, identity)
    };
    let trusted_identity = [
        "--certificate-identity",
        "ci@example\\.org",
        "--certificate-oidc-issuer",
        "https://issuer.example.org",
    ];
    let signed = format!("oci://{host}/team/models:v1");
    let pushed = push(&signed, "examples/models");
    let digest = pushed.trim().rsplit('@').next().unwrap().to_string();
    ci.sign(pushed.trim());
    // Read once the certificate has expired: the timestamp authority's countersignature
    // shows that it signed while valid.
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        <= ci.not_after
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // cosign itself agrees, against the same trusted root.
    cosign(
        Path::new("."),
        &[
            "verify",
            "--trusted-root",
            sigstore.trusted_root().to_str().unwrap(),
            "--new-bundle-format",
            "--certificate-identity",
            "ci@example.org",
            "--certificate-oidc-issuer",
            "https://issuer.example.org",
            "--insecure-ignore-tlog",
            "--insecure-ignore-sct",
            "--use-signed-timestamps",
            "--allow-insecure-registry",
            "--allow-http-registry",
            pushed.trim(),
        ],
    );
    let out = read(&signed, &sigstore.trusted_root(), &trusted_identity);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A trusted root without the timestamp authority: nothing says when it signed.
    let out = read(&signed, &sigstore.untimed_root(), &trusted_identity);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(&out.stderr, "nothing proves when the certificate signed"),
        "{}",
        text(&out.stderr)
    );

    // Another identity, no identity, another authority: refused, naming why.
    let out = read(
        &signed,
        &sigstore.trusted_root(),
        &[
            "--certificate-identity",
            "release@example\\.org",
            "--certificate-oidc-issuer",
            "https://issuer.example.org",
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(
            &out.stderr,
            &format!(
                "({digest}) is not verified: it is signed by ci@example.org (issuer https://issuer.example.org, certificate of https://fulcio.example.org), which may not sign it: its identity is none of the trusted ones: subject release@example\\.org of issuer https://issuer.example.org"
            )
        ),
        "{}",
        text(&out.stderr)
    );
    let out = read(&signed, &sigstore.trusted_root(), &[]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(&out.stderr, "no certificate identity is trusted"),
        "{}",
        text(&out.stderr)
    );
    let out = read(&signed, &other.trusted_root(), &trusted_identity);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        says(
            &out.stderr,
            "it is signed by a certificate for ci@example.org of issuer https://issuer.example.org, which is not among the trusted keys"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "nothing validated: {}",
        text(&out.stdout)
    );

    // The tag re-pushed, unsigned: refused; the signed digest, pinned, still read.
    let repushed = push(&signed, "examples/openstack");
    let unsigned = repushed.trim().rsplit('@').next().unwrap().to_string();
    let out = read(&signed, &sigstore.trusted_root(), &trusted_identity);
    assert!(
        says(
            &out.stderr,
            &format!("({unsigned}) is not verified: it is not signed")
        ),
        "{}",
        text(&out.stderr)
    );
    let pinned = format!("oci://{host}/team/models@{digest}");
    let out = read(&pinned, &sigstore.trusted_root(), &trusted_identity);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A bundle by a cosign key (cosign sign --key --new-bundle-format): its key reads it.
    let keys = tempfile::tempdir().unwrap();
    cosign(keys.path(), &["generate-key-pair"]);
    tether_testkit::tools::cosign_sign_with(
        keys.path(),
        &["--key", "cosign.key", "--new-bundle-format"],
        repushed.trim(),
    );
    let out = read(&signed, &keys.path().join("cosign.pub"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The trusted root alone does not trust that key.
    let out = read(&signed, &sigstore.trusted_root(), &trusted_identity);
    assert!(
        says(&out.stderr, "which is not among the trusted keys"),
        "{}",
        text(&out.stderr)
    );
}
