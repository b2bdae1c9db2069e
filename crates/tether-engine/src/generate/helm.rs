//! `helm template` of one chart: a chart directory of the repository, or a chart
//! fetched (`helm pull`) from a chart repository or an OCI registry into the chart
//! cache. A chart of an exact version is fetched once, however many Sources render it
//! at once; a range is resolved by Helm at each build (a build is kept per commit, so
//! a quiet pass fetches nothing). A fetched chart is checked before it enters the
//! cache ([`super::verify`]). Values are written to a private directory removed
//! after the build; the templates see the cluster's [`Capabilities`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use sha2::{Digest, Sha256};
use tether_core::generate::{Failure, HelmRequest};
use tether_core::model::ChartSource;

use tether_trust::trusted_keys::TrustedKeys;

use super::tools::{Tools, run_tool, run_tool_saying};
use super::verify;

/// What the cluster serves, as the templates' `.Capabilities` see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Capabilities {
    /// `v1.37.2`
    pub kube_version: String,
    /// `apps/v1`, `policy/v1`, `policy/v1/PodDisruptionBudget`, …
    pub api_versions: Vec<String>,
}

pub(super) fn template(
    tools: &Tools,
    chart_cache: &Path,
    root: &Path,
    request: &HelmRequest,
    capabilities: Option<&Capabilities>,
    keys: Option<&TrustedKeys>,
) -> Result<String, Failure> {
    let helm = tools.helm().map_err(|e| Failure {
        message: e.to_string(),
        hint: e.hint(),
    })?;
    let chart = chart_path(helm, chart_cache, root, request, keys)?;
    let values = ValuesDir::write(chart_cache, &request.values).map_err(|e| Failure {
        message: format!("cannot write the values for Helm: {e}"),
        hint: "tether writes values files to a private directory of the chart cache \
               (TETHER_CHART_CACHE); check that it is writable"
            .into(),
    })?;
    let mut command = helm_command(helm, chart_cache);
    command
        .arg("template")
        .arg(&request.release)
        .arg(&chart)
        .args(["--namespace", &request.namespace, "--include-crds"]);
    if let Some(capabilities) = capabilities {
        command.args(["--kube-version", &capabilities.kube_version]);
        for api_version in &capabilities.api_versions {
            command.args(["--api-versions", api_version]);
        }
    }
    for file in &values.files {
        command.arg("--values").arg(file);
    }
    let rendered = run_tool(command, helm);
    drop(values);
    rendered.map_err(|message| Failure {
        message,
        hint: "Helm's own message: `helm template` of the chart with these values shows the same"
            .into(),
    })
}

/// Helm with its configuration, cache and data under the chart cache: the daemon's
/// user has no home, and a user's own Helm settings must not change what renders.
fn helm_command(helm: &Path, chart_cache: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(helm);
    let home = chart_cache.join("helm");
    // The daemon's root filesystem is read-only: Helm's own temporary files go there too.
    let _ = std::fs::create_dir_all(home.join("tmp"));
    command
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("TMPDIR", home.join("tmp"));
    command
}

/// The chart on disk: the repository's directory, or the archive in the cache
/// (checked by [`super::verify`]; with `keys`, a chart from a registry is pulled and
/// checked at each build).
fn chart_path(
    helm: &Path,
    chart_cache: &Path,
    root: &Path,
    request: &HelmRequest,
    keys: Option<&TrustedKeys>,
) -> Result<PathBuf, Failure> {
    let (reference, repo) = match &request.chart {
        ChartSource::Path(path) => {
            let dir = root.join(path);
            if !dir.join(tether_core::generate::CHART_FILE).is_file() {
                return Err(Failure {
                    message: format!("{path} is not a chart directory (it has no Chart.yaml)"),
                    hint: "name a directory of the repository that holds a chart (helm create makes one)".into(),
                });
            }
            return Ok(dir);
        }
        ChartSource::Repository { url, name } => (name.clone(), Some(url.clone())),
        ChartSource::Oci(url) => (url.clone(), None),
    };
    let source = format!("{}{}", repo.as_deref().unwrap_or_default(), reference);
    let digest = Sha256::digest(source.as_bytes());
    let dir = chart_cache.join(
        digest
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
    );
    let short_name = reference
        .rsplit('/')
        .next()
        .unwrap_or(&reference)
        .to_string();
    let exact = request
        .version
        .as_deref()
        .filter(|v| is_exact(v))
        .map(|version| {
            dir.join(format!(
                "{short_name}-{}.tgz",
                version.trim_start_matches('v')
            ))
        });
    let cached = || -> Result<Option<PathBuf>, Failure> {
        let Some(archive) = exact.as_ref().filter(|archive| archive.is_file()) else {
            return Ok(None);
        };
        match (keys, &repo) {
            (None, _) => Ok(Some(archive.clone())),
            (Some(keys), Some(_)) => {
                Ok(verify::cached_chart(archive, keys)?.then(|| archive.clone()))
            }
            (Some(_), None) => Ok(None),
        }
    };
    if let Some(archive) = cached()? {
        return Ok(archive);
    }
    // The Sources that render an exact version at once wait for the first one's pull.
    let one_pull = exact.as_ref().map(|_| pulling(&dir));
    let _pulling = one_pull
        .as_ref()
        .map(|pull| pull.lock().unwrap_or_else(PoisonError::into_inner));
    if let Some(archive) = cached()? {
        return Ok(archive);
    }
    let pull = Pull {
        helm,
        chart_cache,
        dir: &dir,
        reference: &reference,
        repo: repo.as_deref(),
        version: request.version.as_deref(),
    };
    pull.run(keys)
}

/// The lock of the pulls into a chart's directory of the cache.
fn pulling(dir: &Path) -> Arc<Mutex<()>> {
    static PULLS: LazyLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = LazyLock::new(Mutex::default);
    let mut pulls = PULLS.lock().unwrap_or_else(PoisonError::into_inner);
    pulls.entry(dir.to_path_buf()).or_default().clone()
}

/// One `helm pull` of a chart.
struct Pull<'a> {
    helm: &'a Path,
    chart_cache: &'a Path,
    dir: &'a Path,
    reference: &'a str,
    repo: Option<&'a str>,
    version: Option<&'a str>,
}

impl Pull<'_> {
    /// `helm pull` into a fresh directory, checked there ([`verify`]), then moved into
    /// the cache: the archive it wrote. Nothing that fails a check enters the cache.
    fn run(&self, keys: Option<&TrustedKeys>) -> Result<PathBuf, Failure> {
        let chart_cache = self.chart_cache;
        let io = |e: std::io::Error| Failure {
            message: format!(
                "cannot write the chart cache {}: {e}",
                chart_cache.display()
            ),
            hint: "set TETHER_CHART_CACHE to a writable directory".into(),
        };
        std::fs::create_dir_all(self.dir).map_err(io)?;
        let incoming = self.dir.join(format!(".pull-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&incoming).map_err(io)?;
        let result = self.pull_into(&incoming, keys).and_then(|archive| {
            let target = self.dir.join(archive.file_name().unwrap_or_default());
            let prov = verify::prov_path(&archive);
            if prov.is_file() {
                std::fs::rename(&prov, verify::prov_path(&target)).map_err(io)?;
            }
            std::fs::rename(&archive, &target).map_err(io)?;
            Ok(target)
        });
        let _ = std::fs::remove_dir_all(&incoming);
        result
    }

    fn pull_into(&self, incoming: &Path, keys: Option<&TrustedKeys>) -> Result<PathBuf, Failure> {
        let insecure = self.reference.starts_with("oci://") && is_loopback(self.reference);
        let mut command = helm_command(self.helm, self.chart_cache);
        command
            .arg("pull")
            .arg(self.reference)
            .arg("--destination")
            .arg(incoming);
        if let Some(repo) = self.repo {
            command.args(["--repo", repo]);
        }
        if let Some(version) = self.version {
            command.args(["--version", version]);
        }
        if insecure {
            // A registry on this machine (a test's, a kind cluster's) serves plain HTTP.
            command.arg("--plain-http");
        }
        let (printed, said) = run_tool_saying(command, self.helm).map_err(|message| Failure {
            message: format!("cannot fetch the chart: {message}"),
            hint: "check the chart's repository, name and version; the last good revision stays applied"
                .into(),
        })?;
        let archive = std::fs::read_dir(incoming)
            .map_err(|e| Failure {
                message: format!("cannot read the chart Helm fetched: {e}"),
                hint: "set TETHER_CHART_CACHE to a writable directory".into(),
            })?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "tgz"))
            .ok_or_else(|| Failure {
                message: "helm pull wrote no chart archive".into(),
                hint: "check the chart's reference".into(),
            })?;
        match (self.repo, keys) {
            (Some(repo), keys) => verify::repository_chart(repo, self.reference, &archive, keys)?,
            (None, Some(keys)) => {
                let (pulled, digest) = verify::pulled(&said)
                    .or_else(|| verify::pulled(&printed))
                    .ok_or_else(|| Failure {
                    message: "helm pull printed no digest of the chart it pulled".into(),
                    hint: "use Helm 3.8 or later, which prints it".into(),
                })?;
                verify::registry_chart(&pulled, digest, insecure, keys)?;
            }
            (None, None) => {}
        }
        Ok(archive)
    }
}

/// Is a version written exactly (`1.2.3`, `v1.2.3-rc.1`), not a range?
fn is_exact(version: &str) -> bool {
    !version.is_empty()
        && version
            .trim_start_matches('v')
            .starts_with(|c: char| c.is_ascii_digit())
        && !version.contains(['^', '~', '<', '>', '=', '*', '|', ',', ' '])
        && !version
            .split(['.', '-'])
            .any(|part| part.eq_ignore_ascii_case("x"))
}

fn is_loopback(reference: &str) -> bool {
    let host = reference.trim_start_matches("oci://");
    host.starts_with("127.") || host.starts_with("localhost") || host.starts_with("[::1]")
}

/// The values of one build, each in a file of a private directory (0700) of the chart
/// cache (the daemon's root filesystem is read-only), removed when dropped:
/// sops-decrypted values never outlive the build.
struct ValuesDir {
    dir: PathBuf,
    files: Vec<PathBuf>,
}

impl ValuesDir {
    fn write(chart_cache: &Path, values: &[(String, String)]) -> std::io::Result<ValuesDir> {
        std::fs::create_dir_all(chart_cache)?;
        let dir = chart_cache.join(format!(".values-{}", fastrand::u64(..)));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir)?;
        let mut written = ValuesDir {
            dir,
            files: Vec::new(),
        };
        for (index, (_, text)) in values.iter().enumerate() {
            let file = written.dir.join(format!("{index}.yaml"));
            std::fs::write(&file, text)?;
            written.files.push(file);
        }
        Ok(written)
    }
}

impl Drop for ValuesDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::is_exact;

    #[test]
    fn exact_versions_and_ranges() {
        for exact in ["1.2.3", "v1.2.3", "0.1.0-rc.1", "1.0.0+build"] {
            assert!(is_exact(exact), "{exact}");
        }
        for range in [
            "^1.2",
            "~1.2.3",
            ">=1.0.0",
            "1.x",
            "1.2.*",
            "1.0.0 || 2.0.0",
            "",
        ] {
            assert!(!is_exact(range), "{range}");
        }
    }
}
