//! The real Helm and Kustomize engines for tests and benchmarks: the pinned ones that
//! `scripts/helm-tools` installs (helm 4.1.4; kubectl 1.35.2 with Kustomize 5.7.1;
//! Helm 3 and Kustomize 4 built from their Go modules); and cosign, built from its Go
//! module (`tools/go/cosign`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The paths of the pinned `helm` and `kubectl`, and of Helm 3 and Kustomize 4.
#[derive(Clone, Debug)]
pub struct HelmTools {
    /// Helm 4.
    pub helm: PathBuf,
    pub kubectl: PathBuf,
    /// Helm 3 (`helm.sh/helm/v3`): users bring either.
    pub helm3: PathBuf,
    /// Kustomize 4, older than tether takes.
    pub kustomize4: PathBuf,
}

impl HelmTools {
    /// The variables that make tether use them.
    pub fn env(&self) -> [(&'static str, &Path); 2] {
        [
            ("TETHER_HELM", self.helm.as_path()),
            ("TETHER_KUSTOMIZE", self.kubectl.as_path()),
        ]
    }
}

/// Installs the tools if missing (once per process) and returns their paths.
pub fn helm_tools() -> &'static HelmTools {
    static TOOLS: OnceLock<HelmTools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let script = crate::workspace_root().join("scripts/helm-tools");
        let output = std::process::Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(
            output.status.success(),
            "scripts/helm-tools: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let path = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("scripts/helm-tools printed no {name}=: {text}"))
        };
        HelmTools {
            helm: path("helm"),
            kubectl: path("kubectl"),
            helm3: path("helm3"),
            kustomize4: path("kustomize4"),
        }
    })
}

/// sigstore's cosign, built by `scripts/go-build` from `tools/go/cosign` (once: the
/// test tools build it before `cargo test`).
pub fn cosign() -> &'static Path {
    static COSIGN: OnceLock<PathBuf> = OnceLock::new();
    COSIGN.get_or_init(|| go_built("cosign", "github.com/sigstore/cosign/v2/cmd/cosign"))
}

/// sigstore's RFC 3161 timestamp authority (`timestamp-server`), built once by
/// `scripts/go-build timestamp-authority`.
pub fn timestamp_server() -> &'static Path {
    static SERVER: OnceLock<PathBuf> = OnceLock::new();
    SERVER.get_or_init(|| {
        go_built(
            "timestamp-authority",
            "github.com/sigstore/timestamp-authority/v2/cmd/timestamp-server",
        )
    })
}

/// The command `package` of the Go tools module `module`, built by `scripts/go-build`.
fn go_built(module: &str, package: &str) -> PathBuf {
    let script = crate::workspace_root().join("scripts/go-build");
    let output = std::process::Command::new(&script)
        .args([module, package])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        output.status.success(),
        "scripts/go-build {module}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let command = package.rsplit('/').next().unwrap_or(package);
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join(command)
}

/// `cosign sign --key KEY REFERENCE` in `dir` (its key files' directory), as a
/// publisher signs what they pushed: no passphrase asked, no transparency log, the
/// local registry taken over plain HTTP.
pub fn cosign_sign(dir: &Path, key: &str, reference: &str) {
    cosign_sign_with(dir, &["--key", key], reference);
}

/// `cosign sign ARGS REFERENCE` in `dir`, as [`cosign_sign`]: `--new-bundle-format`
/// for a Sigstore bundle, `--certificate` for a certificate's.
pub fn cosign_sign_with(dir: &Path, args: &[&str], reference: &str) {
    let out = std::process::Command::new(cosign())
        .arg("sign")
        .args(args)
        .args([
            "--tlog-upload=false",
            "--allow-insecure-registry",
            "--allow-http-registry",
            "--yes",
        ])
        .arg(reference)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cosign sign {args:?} {reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
