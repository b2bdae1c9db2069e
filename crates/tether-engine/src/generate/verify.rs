//! The checks of a chart fetched from a chart repository or a registry, made on the
//! archive Helm wrote before it enters the chart cache, so that what is checked is
//! what renders:
//!
//! - from a repository, always: the archive's SHA-256 is the `digest` the
//!   repository's `index.yaml` lists for that version (Helm's own pull does not
//!   compare them);
//! - with chart keys, from a repository: its provenance file (`helm package --sign`'s
//!   `.prov`) is signed by a trusted OpenPGP key and vouches for the archive. The
//!   file is kept beside the cached archive, which is checked again offline against
//!   the keys of each build;
//! - with chart keys, from a registry: the manifest Helm pulled carries a cosign
//!   signature by a trusted key (never taken from the cache).
//!
//! Blocking: the HTTP requests run on the caller's Tokio runtime (`Generate::run`
//! runs on a blocking thread of it).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tether_core::generate::Failure;
use tether_trust::provenance::{ProvenanceError, verify_provenance};
use tether_trust::trusted_keys::TrustedKeys;

/// The most of an `index.yaml` read (large public repositories list thousands of
/// versions in tens of megabytes).
const INDEX_BYTES: usize = 128 << 20;
/// The most of a provenance file read.
const PROV_BYTES: usize = 1 << 20;
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

const KEYS_HINT: &str = "a chart from a repository must carry a provenance file (`helm package --sign`) \
    and one from a registry a cosign signature, by a key among the chart keys \
    (`--chart-keys`, a Source's `spec.verifyCharts`); the last good revision stays applied";

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    entries: BTreeMap<String, Vec<IndexEntry>>,
}

#[derive(Debug, Deserialize)]
struct IndexEntry {
    version: String,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    urls: Vec<String>,
}

/// The provenance file's path beside an archive.
pub(super) fn prov_path(archive: &Path) -> std::path::PathBuf {
    let mut name = archive.file_name().unwrap_or_default().to_os_string();
    name.push(".prov");
    archive.with_file_name(name)
}

/// Checks an archive `helm pull --repo repo` wrote: the index's digest, and with
/// `keys` its provenance file, which is written beside it.
pub(super) fn repository_chart(
    repo: &str,
    chart: &str,
    archive: &Path,
    keys: Option<&TrustedKeys>,
) -> Result<(), Failure> {
    let archive_name = file_name(archive);
    let bytes = std::fs::read(archive).map_err(|e| Failure {
        message: format!("cannot read the chart archive Helm wrote: {e}"),
        hint: "set TETHER_CHART_CACHE to a writable directory".into(),
    })?;
    let version = archive_name
        .strip_prefix(&format!("{chart}-"))
        .and_then(|rest| rest.strip_suffix(".tgz"))
        .unwrap_or_default();
    let base =
        reqwest::Url::parse(&format!("{}/", repo.trim_end_matches('/'))).map_err(|e| Failure {
            message: format!("the chart repository {repo} is not a URL: {e}"),
            hint: "write the repository as https://host/path".into(),
        })?;
    let index_url = join(&base, "index.yaml")?;
    let index = fetch(&index_url, INDEX_BYTES)?.ok_or_else(|| Failure {
        message: format!("the chart repository has no index: {index_url} is not found"),
        hint: "a chart repository serves index.yaml (`helm repo index`)".into(),
    })?;
    let index: Index = serde_saphyr::from_slice(&index).map_err(|e| Failure {
        message: format!("the chart repository's index {index_url} cannot be read: {e}"),
        hint: "`helm repo index` writes a readable index".into(),
    })?;
    let entry = listed(&index, chart, version).ok_or_else(|| Failure {
        message: format!("the repository's index lists no {chart} {version}, which Helm fetched"),
        hint: "the repository changed while the chart was fetched; the next build tries again"
            .into(),
    })?;
    let digest = hex(&Sha256::digest(&bytes));
    // `helm repo index` writes the hex alone.
    if let Some(listed) = &entry.digest
        && !listed
            .trim_start_matches("sha256:")
            .eq_ignore_ascii_case(&digest)
    {
        let listed = listed.trim_start_matches("sha256:");
        return Err(Failure {
            message: format!(
                "the chart archive {archive_name} is not the one the repository's index lists: its digest is sha256:{digest}, the index says sha256:{listed}"
            ),
            hint: "the archive or the index was changed after the chart was published; nothing of it renders, and the last good revision stays applied".into(),
        });
    }
    let Some(keys) = keys else {
        return Ok(());
    };
    let archive_url = join(
        &base,
        entry.urls.first().map_or(archive_name, String::as_str),
    )?;
    let prov_url = format!("{archive_url}.prov");
    let prov = fetch(&prov_url, PROV_BYTES)?.ok_or_else(|| {
        unverified(
            archive_name,
            &format!("it has no provenance file ({prov_url} is not found)"),
            keys,
        )
    })?;
    let prov = String::from_utf8(prov)
        .map_err(|_| unverified(archive_name, "its provenance file is not text", keys))?;
    checked(keys, &prov, archive_name, &bytes)?;
    std::fs::write(prov_path(archive), prov).map_err(|e| Failure {
        message: format!("cannot keep the chart's provenance file: {e}"),
        hint: "set TETHER_CHART_CACHE to a writable directory".into(),
    })
}

/// Checks a cached archive against `keys` by the provenance file kept beside it:
/// `false` when none is kept (it was fetched without keys: fetch it again).
pub(super) fn cached_chart(archive: &Path, keys: &TrustedKeys) -> Result<bool, Failure> {
    let Ok(prov) = std::fs::read_to_string(prov_path(archive)) else {
        return Ok(false);
    };
    let Ok(bytes) = std::fs::read(archive) else {
        return Ok(false);
    };
    checked(keys, &prov, file_name(archive), &bytes).map(|()| true)
}

/// Checks the manifest `digest` Helm pulled from `reference` (`oci://host/repo/chart`)
/// for a cosign signature by one of `keys`.
pub(super) fn registry_chart(
    reference: &str,
    digest: &str,
    insecure: bool,
    keys: &TrustedKeys,
) -> Result<(), Failure> {
    let parsed = crate::oci::Reference::parse(reference).map_err(|e| Failure {
        message: e.to_string(),
        hint: "write the chart as oci://host/repository/chart".into(),
    })?;
    let access = crate::oci::Access {
        credentials: None,
        insecure,
    };
    block_on(crate::oci::verify_signature(&parsed, &access, digest, keys))?
        .map(|_| ())
        .map_err(|error| Failure {
            message: format!("the chart {}", tether_core::error_chain(&error)),
            hint: KEYS_HINT.into(),
        })
}

/// What `helm pull` said it pulled from a registry: the reference with its tag
/// (`oci://host/repo/chart:0.4.0`) and the manifest's digest.
pub(super) fn pulled(helm_output: &str) -> Option<(String, &str)> {
    let said = |prefix: &str| {
        helm_output
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .map(str::trim)
    };
    let digest = said("Digest: ").filter(|d| d.starts_with("sha256:"))?;
    let reference = said("Pulled: ")?;
    Some((
        format!("oci://{}", reference.trim_start_matches("oci://")),
        digest,
    ))
}

fn checked(
    keys: &TrustedKeys,
    prov: &str,
    archive_name: &str,
    bytes: &[u8],
) -> Result<(), Failure> {
    verify_provenance(keys, prov, archive_name, bytes)
        .map(|provenance| {
            tracing::debug!(chart = archive_name, signer = %provenance.signer, "chart verified");
        })
        .map_err(|error: ProvenanceError| unverified(archive_name, &error.to_string(), keys))
}

fn unverified(archive_name: &str, why: &str, keys: &TrustedKeys) -> Failure {
    let names = keys.names();
    let names = match names.is_empty() {
        true => "none".to_string(),
        false => names.join(", "),
    };
    Failure {
        message: format!("the chart {archive_name} is not verified: {why}; trusted keys: {names}"),
        hint: KEYS_HINT.into(),
    }
}

/// The index's entry of `chart` at `version`.
fn listed<'a>(index: &'a Index, chart: &str, version: &str) -> Option<&'a IndexEntry> {
    index
        .entries
        .get(chart)?
        .iter()
        .find(|entry| entry.version.trim_start_matches('v') == version.trim_start_matches('v'))
}

fn join(base: &reqwest::Url, path: &str) -> Result<String, Failure> {
    base.join(path).map(String::from).map_err(|e| Failure {
        message: format!("the chart repository's address {path} is not a URL: {e}"),
        hint: "check the repository's index.yaml".into(),
    })
}

fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `url`'s body, at most `limit` bytes; `None` when the server says it is not found.
fn fetch(url: &str, limit: usize) -> Result<Option<Vec<u8>>, Failure> {
    let failed = |why: String| Failure {
        message: format!("cannot fetch {url}: {why}"),
        hint: "check the chart repository; the last good revision stays applied".into(),
    };
    block_on(async {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        let response = client.get(url).send().await.map_err(|e| e.to_string())?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let mut response = response.error_for_status().map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&chunk);
            if body.len() > limit {
                return Err(format!("it is larger than {limit} bytes"));
            }
        }
        Ok(Some(body))
    })?
    .map_err(failed)
}

/// Runs `future` to completion from the blocking thread `Generate::run` is on.
fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, Failure> {
    let handle = tokio::runtime::Handle::try_current().map_err(|e| Failure {
        message: format!("cannot check the chart outside tether's runtime: {e}"),
        hint: "this is a bug of tether's".into(),
    })?;
    Ok(handle.block_on(future))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_entry_of_a_version_and_the_digest_helm_printed() {
        let index: Index = serde_saphyr::from_str(
            "apiVersion: v1\nentries:\n  hello:\n  - version: 1.2.3\n    digest: abc\n    urls: [hello-1.2.3.tgz]\n  - version: 1.3.0\n    urls: [https://cdn.example.org/hello-1.3.0.tgz]\n",
        )
        .unwrap();
        assert_eq!(
            listed(&index, "hello", "1.2.3").unwrap().digest.as_deref(),
            Some("abc")
        );
        assert_eq!(listed(&index, "hello", "v1.3.0").unwrap().digest, None);
        assert!(listed(&index, "hello", "2.0.0").is_none());
        assert!(listed(&index, "other", "1.2.3").is_none());
        let base = reqwest::Url::parse("http://127.0.0.1:8000/charts/").unwrap();
        assert_eq!(
            join(&base, "hello-1.2.3.tgz").unwrap(),
            "http://127.0.0.1:8000/charts/hello-1.2.3.tgz"
        );
        assert_eq!(
            join(&base, "https://cdn.example.org/hello-1.3.0.tgz").unwrap(),
            "https://cdn.example.org/hello-1.3.0.tgz"
        );
        assert_eq!(
            pulled("Pulled: 127.0.0.1:5000/charts/hello:0.4.0\nDigest: sha256:0123\n"),
            Some((
                "oci://127.0.0.1:5000/charts/hello:0.4.0".to_string(),
                "sha256:0123"
            ))
        );
        assert_eq!(pulled("Pulled: x\n"), None);
    }
}
