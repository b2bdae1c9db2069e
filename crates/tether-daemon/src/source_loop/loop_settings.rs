//! A Source's spec, checked into what its loop runs with: where the models come from
//! (a Git ref or an OCI artifact), its inventory, and the settings of its passes
//! (plan and apply options, drift and rewrite policies, the interval). A spec that
//! cannot be run is a [`SpecError`], said in the Source's status.

use std::path::PathBuf;
use std::time::Duration;

use tether_api::source_spec::{DriftPolicy, RewritePolicy, SourceSpec, VerifyMode};
use tether_core::health::HealthChecks;
use tether_core::ownership::Inventory;
use tether_engine::git::Credentials;
use tether_engine::git::verify::{self, Verification};
use tether_engine::oci::{self, Access, Reference};
use tether_engine::reconcile::{ApplyOptions, PlanOptions, Reads};
use tether_engine::repo::Repo;

/// A Source's spec that cannot be run, said in the Source's status.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum SpecError {
    #[error("spec.interval: {0}")]
    Interval(String),
    #[error("spec.path: {0:?} leaves the repository")]
    Path(String),
    #[error("spec.url: {0}")]
    Artifact(String),
    #[error("spec.timeout: {0}")]
    Timeout(String),
    #[error("spec.deletionBudget: {0}")]
    DeletionBudget(String),
    /// An expression of `spec.healthCheckExprs` that does not compile, at its field.
    #[error("{0}")]
    HealthCheck(String),
}

/// What each pass of a source does, fixed for the loop's life: the options of its
/// plans and applies, its drift and rewrite policies, and the interval between passes.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) plan: PlanOptions,
    pub(crate) apply: ApplyOptions,
    pub(crate) drift: DriftPolicy,
    pub(crate) rewrites: RewritePolicy,
    pub(crate) interval: Duration,
}

/// What a Source asks, checked: where its models come from, its inventory, and the
/// settings of its passes.
#[derive(Clone, Debug)]
pub(crate) struct SourceSettings {
    pub(crate) repo: Repo,
    pub(crate) inventory: Inventory,
    /// `spec.healthCheckExprs`, compiled.
    pub(crate) health: HealthChecks,
    pub(crate) settings: Settings,
}

/// The default interval of a Source.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// The loop's settings of the Source `namespace`/`name` (`spec`), given the Git cache
/// and the credentials read from `secretRef`.
pub(crate) fn settings_of(
    spec: &SourceSpec,
    namespace: &str,
    name: &str,
    cache: PathBuf,
    credentials: Credentials,
) -> Result<SourceSettings, SpecError> {
    let interval = match &spec.interval {
        Some(text) => tether_core::settings::parse_duration(text).map_err(SpecError::Interval)?,
        None => DEFAULT_INTERVAL,
    };
    if interval < Duration::from_millis(100) {
        return Err(SpecError::Interval(
            "must be at least 100ms (webhooks and drift trigger passes in between)".into(),
        ));
    }
    let path = PathBuf::from(spec.path.as_deref().unwrap_or("."));
    if path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(SpecError::Path(path.display().to_string()));
    }
    let repo = repo_of(spec, path, cache, credentials)?;
    Ok(SourceSettings {
        repo,
        inventory: spec.inventory_of(namespace, name),
        health: spec
            .health_checks()
            .map_err(|e| SpecError::HealthCheck(e.to_string()))?,
        settings: Settings {
            interval,
            plan: PlanOptions {
                prune: spec.prune,
                allow_empty: spec.allow_empty,
                dry_run_new: false,
                partial: false,
                // Passes read the API server's cache, as the daemon's watches do.
                reads: Reads::Cached,
                budget: spec.deletion_budget().map_err(SpecError::DeletionBudget)?,
            },
            apply: ApplyOptions {
                prune: spec.prune,
                correct_drift: spec.drift == DriftPolicy::Correct,
                wave_timeout: spec.timeout().map_err(SpecError::Timeout)?,
                ..ApplyOptions::default()
            },
            drift: spec.drift,
            rewrites: spec.rewrites,
        },
    })
}

/// Where a Source's models come from: its artifact or its Git ref, with the
/// signatures it must carry (no key is trusted until a pass reads the Secret's).
fn repo_of(
    spec: &SourceSpec,
    path: PathBuf,
    cache: PathBuf,
    credentials: Credentials,
) -> Result<Repo, SpecError> {
    Ok(match Reference::is_oci(&spec.url) {
        true if spec
            .verify
            .as_ref()
            .is_some_and(|v| v.mode != VerifyMode::Head) =>
        {
            return Err(SpecError::Artifact(
                "spec.verify.mode: an artifact has no tag to verify; leave the mode out (its cosign signature is checked)".into(),
            ));
        }
        true if spec.discovery.is_some() => {
            return Err(SpecError::Artifact(
                "spec.discovery commits to Git; an artifact cannot take commits".into(),
            ));
        }
        true => Repo::Oci {
            reference: artifact_reference(spec)?,
            path,
            cache,
            access: Access {
                credentials: credentials.token.map(|password| oci::Credentials {
                    username: credentials.username.unwrap_or_default(),
                    password,
                }),
                insecure: spec.insecure,
            },
            verify: spec.verify.as_ref().map(|_| Default::default()),
        },
        false => Repo::Git {
            url: spec.url.clone(),
            reference: spec.reference.clone(),
            path,
            cache,
            credentials,
            verify: spec.verify.as_ref().map(|verify| Verification {
                mode: match verify.mode {
                    VerifyMode::Head => verify::VerifyMode::Head,
                    VerifyMode::Tag => verify::VerifyMode::Tag,
                    VerifyMode::TagAndHead => verify::VerifyMode::TagAndHead,
                },
                keys: Default::default(),
            }),
        },
    })
}

/// The artifact an oci:// URL names, with `ref` as its tag or digest (Flux's
/// spelling); a tag or digest in both is refused.
fn artifact_reference(spec: &SourceSpec) -> Result<Reference, SpecError> {
    let reference = Reference::parse(&spec.url).map_err(|e| SpecError::Artifact(e.to_string()))?;
    let Some(text) = &spec.reference else {
        return Ok(reference);
    };
    let named_in_url = spec
        .url
        .rsplit('/')
        .next()
        .is_some_and(|last| last.contains([':', '@']));
    if named_in_url {
        return Err(SpecError::Artifact(format!(
            "{} names its tag or digest, and spec.ref names {text}: give one",
            spec.url
        )));
    }
    let target = oci::target_of(text).ok_or_else(|| {
        SpecError::Artifact(format!(
            "spec.ref {text:?} is neither a tag nor a sha256: digest"
        ))
    })?;
    Ok(reference.with_target(target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_status::{commit_of_revision, revision_name};

    fn spec(yaml: &str) -> SourceSpec {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn a_minimal_spec_gets_the_defaults() {
        let spec = spec("url: https://example.com/models.git\n");
        let settings = settings_of(
            &spec,
            "team",
            "web",
            "/cache".into(),
            Credentials::default(),
        )
        .unwrap();
        assert_eq!(settings.settings.interval, DEFAULT_INTERVAL);
        assert_eq!(settings.inventory.display(), "team/web");
        assert_eq!(settings.settings.drift, DriftPolicy::Correct);
        assert!(!settings.settings.plan.prune && !settings.settings.apply.prune);
        assert_eq!(
            revision_name(spec.reference.as_deref(), "abc"),
            "HEAD@sha1:abc"
        );
    }

    #[test]
    fn an_applied_revision_counts_only_for_the_ref_it_names() {
        let main = revision_name(Some("main"), "abc");
        assert_eq!(commit_of_revision(&main, Some("main")), Some("abc"));
        assert_eq!(commit_of_revision(&main, Some("release")), None);
        assert_eq!(commit_of_revision(&main, None), None);
        let head = revision_name(None, "def");
        assert_eq!(commit_of_revision(&head, None), Some("def"));
        assert_eq!(commit_of_revision("garbage", Some("main")), None);
    }

    #[test]
    fn an_artifact_takes_its_tag_from_the_url_or_from_ref() {
        let settings = |yaml: &str| {
            settings_of(
                &spec(yaml),
                "n",
                "s",
                "/c".into(),
                Credentials {
                    username: Some("ci".into()),
                    token: Some("secret".into()),
                    ..Credentials::default()
                },
            )
        };
        let in_url = settings("url: oci://registry.example/team/models:v1\n").unwrap();
        let Repo::Oci {
            reference, access, ..
        } = in_url.repo
        else {
            panic!("not an artifact: {:?}", in_url.repo);
        };
        assert_eq!(
            reference.to_string(),
            "oci://registry.example/team/models:v1"
        );
        assert_eq!(access.credentials.unwrap().password, "secret");
        let in_ref =
            settings("url: oci://registry.example/team/models\nref: v2\ninsecure: true\n").unwrap();
        let Repo::Oci {
            reference, access, ..
        } = in_ref.repo
        else {
            panic!("not an artifact: {:?}", in_ref.repo);
        };
        assert_eq!(
            reference.to_string(),
            "oci://registry.example/team/models:v2"
        );
        assert!(access.insecure);
        let both = settings("url: oci://registry.example/team/models:v1\nref: v2\n").unwrap_err();
        assert!(both.to_string().contains("give one"), "{both}");
        let discovery =
            settings("url: oci://registry.example/team/models\ndiscovery: {}\n").unwrap_err();
        assert!(
            discovery.to_string().contains("cannot take commits"),
            "{discovery}"
        );
        let digest = format!("sha256:{}", "b".repeat(64));
        let revision = format!("v1@{digest}");
        assert_eq!(revision_name(Some("v1"), &revision), revision);
        assert_eq!(commit_of_revision(&revision, None), Some(revision.as_str()));
    }

    #[test]
    fn bad_intervals_and_escaping_paths_are_refused() {
        let short = spec("url: u\ninterval: 99ms\n");
        assert!(matches!(
            settings_of(&short, "n", "s", "/c".into(), Credentials::default()),
            Err(SpecError::Interval(_))
        ));
        let shortest = spec("url: u\ninterval: 100ms\n");
        let settings =
            settings_of(&shortest, "n", "s", "/c".into(), Credentials::default()).unwrap();
        assert_eq!(settings.settings.interval, Duration::from_millis(100));
        let escaping = spec("url: u\npath: ../other\n");
        assert_eq!(
            settings_of(&escaping, "n", "s", "/c".into(), Credentials::default()).unwrap_err(),
            SpecError::Path("../other".into())
        );
    }
}
