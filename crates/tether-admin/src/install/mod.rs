//! `tether install` and `tether uninstall`: the daemon's objects ([`manifests`]) applied
//! with server-side apply in order, the CRD waited for until it is established, and a
//! webhook Secret of random bytes made once; removal of exactly what install made.
//! The decisions (which PodDisruptionBudget, what changed, what is supported, what
//! keeps the namespace) are pure functions beside the requests.

pub mod manifests;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;
use thiserror::Error;

use tether_engine::cluster::{ClusterError, Resources};
use tether_engine::driver::{Backoff, Poll, Retries};

pub use manifests::{InstallOptions, manifests};

/// The field manager of install's applies (not the daemon's: its objects are not a
/// Source's).
pub const FIELD_MANAGER: &str = tether_core::ownership::INSTALL_MANAGER;

/// A server's Kubernetes version, major and minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    pub major: u32,
    pub minor: u32,
}

/// The oldest Kubernetes tether supports: its API types are this release's
/// (k8s-openapi's `v1_34`), and `scripts/compat` runs the cluster suite on it.
/// `tools/go/kubernetes-MINOR` pins each end of the range (tests/architecture.rs).
pub const OLDEST_SUPPORTED: ServerVersion = ServerVersion::new(1, 34);
/// The newest Kubernetes tether is tested on: every test runs on it.
pub const NEWEST_SUPPORTED: ServerVersion = ServerVersion::new(1, 37);

impl ServerVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        ServerVersion { major, minor }
    }

    /// From the server's `/version`; providers append to the minor (GKE's "27+").
    pub fn parse(major: &str, minor: &str) -> Option<Self> {
        let digits = |s: &str| -> Option<u32> {
            let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            s.get(..end)?.parse().ok()
        };
        Some(ServerVersion::new(digits(major)?, digits(minor)?))
    }

    /// Where the version stands against the supported range.
    pub fn support(self) -> Support {
        if self < OLDEST_SUPPORTED {
            Support::TooOld
        } else if self > NEWEST_SUPPORTED {
            Support::Newer
        } else {
            Support::Supported
        }
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Supported,
    /// Older than [`OLDEST_SUPPORTED`]: refused.
    TooOld,
    /// Newer than tether was built for: it likely works, nothing tested it.
    Newer,
}

#[derive(Debug, Error)]
pub enum InstallError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("cannot {action}")]
    Request {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("Kubernetes {0} is older than {OLDEST_SUPPORTED}, the oldest tether supports")]
    TooOld(ServerVersion),
    #[error("the CustomResourceDefinition {0} was not established within {1:?}")]
    NotEstablished(String, Duration),
    #[error("the server's version {0:?} is not major.minor")]
    UnreadableVersion(String),
    #[error("cannot make the webhook Secret")]
    Secret(#[source] serde_json::Error),
    #[error("cannot make a random webhook secret")]
    Random(#[source] getrandom::Error),
}

pub(crate) fn request(action: String) -> impl FnOnce(kube::Error) -> InstallError {
    move |source| InstallError::Request { action, source }
}

/// The server's version.
pub async fn server_version(client: &Client) -> Result<ServerVersion, InstallError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(request("read the server's version".into()))?;
    ServerVersion::parse(&info.major, &info.minor)
        .ok_or_else(|| InstallError::UnreadableVersion(format!("{}.{}", info.major, info.minor)))
}

/// What an apply did to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Configured,
    Unchanged,
}

impl Outcome {
    /// From install's own field-manager entry before and after the apply (`None`
    /// before: no object): the server keeps the entry, its time included, when an
    /// apply changes nothing. (The resourceVersion would not do: a controller's status
    /// update moves it.)
    pub fn of(
        before: Option<Option<&ManagedFieldsEntry>>,
        after: Option<&ManagedFieldsEntry>,
    ) -> Outcome {
        match before {
            None => Outcome::Created,
            Some(before) if before == after => Outcome::Unchanged,
            Some(_) => Outcome::Configured,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Configured => "configured",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// One object install applied, as `kind/name` (with its namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub object: String,
    pub outcome: Outcome,
}

/// How long the CRD may take to be established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// Applies the daemon's objects in order on a server of version `server` (refused
/// when older than supported); the webhook Secret is made once, with `random_secret`,
/// and kept on later installs (a rotation is the user's decision).
pub async fn install(
    client: &Client,
    server: ServerVersion,
    options: &InstallOptions,
    random_secret: &str,
) -> Result<Vec<Applied>, InstallError> {
    if server.support() == Support::TooOld {
        return Err(InstallError::TooOld(server));
    }
    let objects = manifests(options);
    let resources = Resources::discover(client, &kinds_of(&objects)).await?;
    let mut applied = Vec::new();
    for object in &objects {
        applied.push(apply(&resources, object).await?);
        if object["kind"] == "CustomResourceDefinition" {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            wait_established(client, name).await?;
        }
    }
    applied.push(ensure_webhook_secret(client, &options.namespace, random_secret).await?);
    Ok(applied)
}

fn kinds_of(objects: &[Value]) -> BTreeSet<(String, String)> {
    objects
        .iter()
        .map(|o| {
            let text = |field: &str| o[field].as_str().unwrap_or_default().to_string();
            (text("apiVersion"), text("kind"))
        })
        .collect()
}

/// `kind/name`, or `kind/namespace/name` for a namespaced object.
fn describe(object: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let metadata = &object["metadata"];
    match metadata["namespace"].as_str() {
        Some(ns) => format!("{}/{ns}/{}", text(&object["kind"]), text(&metadata["name"])),
        None => format!("{}/{}", text(&object["kind"]), text(&metadata["name"])),
    }
}

async fn apply(resources: &Resources, object: &Value) -> Result<Applied, InstallError> {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let api = resources.api(
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
        metadata["namespace"].as_str(),
    )?;
    let object_name = describe(object);
    let before = api
        .get_opt(name)
        .await
        .map_err(request(format!("read {object_name}")))?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // Another install applying the same object at once can make the server answer
    // 409 (it read the object before the other's write landed): the same apply again
    // is right, as it is idempotent.
    let mut retries = Retries::new(Backoff::request(), 5);
    let after: DynamicObject = loop {
        match api.patch(name, &params, &Patch::Apply(object)).await {
            Ok(after) => break after,
            Err(kube::Error::Api(response)) if response.code == 409 && retries.again().await => {
                tracing::debug!(object = %object_name, "the apply met another writer; again");
            }
            Err(error) => return Err(request(format!("apply {object_name}"))(error)),
        }
    };
    Ok(Applied {
        outcome: Outcome::of(before.as_ref().map(installs_entry), installs_entry(&after)),
        object: object_name,
    })
}

/// Install's field-manager entry of an object.
fn installs_entry(object: &DynamicObject) -> Option<&ManagedFieldsEntry> {
    object.metadata.managed_fields.iter().flatten().find(|e| {
        e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply")
    })
}

/// Is the CRD established (its kinds served)?
pub fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

pub(crate) async fn wait_established(client: &Client, name: &str) -> Result<(), InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut poll = Poll::new(Duration::from_millis(200), ESTABLISHED_TIMEOUT);
    loop {
        let crd = api
            .get_opt(name)
            .await
            .map_err(request(format!("read CustomResourceDefinition/{name}")))?;
        if crd.as_ref().is_some_and(established) {
            return Ok(());
        }
        if !poll.next().await {
            return Err(InstallError::NotEstablished(
                name.into(),
                ESTABLISHED_TIMEOUT,
            ));
        }
    }
}

async fn ensure_webhook_secret(
    client: &Client,
    namespace: &str,
    random_secret: &str,
) -> Result<Applied, InstallError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let object = format!("Secret/{namespace}/{}", manifests::WEBHOOK_SECRET);
    let existing = api
        .get_opt(manifests::WEBHOOK_SECRET)
        .await
        .map_err(request(format!("read {object}")))?;
    if existing.is_none() {
        let secret: Secret =
            serde_json::from_value(manifests::webhook_secret(namespace, random_secret))
                .map_err(InstallError::Secret)?;
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            // Another install running at the same time made it first: its secret stays.
            Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {
                return Ok(Applied {
                    object,
                    outcome: Outcome::Unchanged,
                });
            }
            Err(e) => return Err(request(format!("create {object}"))(e)),
        }
    }
    Ok(Applied {
        object,
        outcome: match existing {
            Some(_) => Outcome::Unchanged,
            None => Outcome::Created,
        },
    })
}

/// A webhook secret: 32 random bytes from the operating system, as hex.
pub fn random_webhook_secret() -> Result<String, InstallError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(InstallError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What uninstall removed, and what it kept and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Removal {
    pub deleted: Vec<String>,
    /// The namespace was kept because it holds these objects install did not make.
    pub kept_namespace_for: Vec<String>,
}

/// Removes what install made, the CRD with it (and so every Source: the daemon is gone
/// first, so none is acted on). Workloads the Sources applied stay, with their
/// inventories. The namespace goes only when nothing else lives in it.
pub async fn uninstall(client: &Client, namespace: &str) -> Result<Removal, InstallError> {
    let mut options = InstallOptions::new();
    options.namespace = namespace.to_string();
    let mut objects = manifests(&options);
    objects.push(manifests::webhook_secret(namespace, ""));
    let mut kinds = kinds_of(&objects);
    kinds.extend(
        NAMESPACE_CONTENTS.map(|(api_version, kind)| (api_version.to_string(), kind.to_string())),
    );
    let resources = Resources::discover(client, &kinds).await?;
    let foreign = foreign_objects(&resources, namespace).await?;
    let mut removal = Removal::default();
    // The reverse of the apply order: the daemon stops before its rights go.
    for object in objects.iter().rev() {
        let kind = object["kind"].as_str().unwrap_or_default();
        if kind == "Namespace" && !foreign.is_empty() {
            removal.kept_namespace_for = foreign.clone();
            continue;
        }
        let metadata = &object["metadata"];
        let api = resources.api(
            object["apiVersion"].as_str().unwrap_or_default(),
            kind,
            metadata["namespace"].as_str(),
        )?;
        let name = metadata["name"].as_str().unwrap_or_default();
        let deleted = api
            .delete(name, &DeleteParams::background())
            .await
            .map(|_| true)
            .or_else(|e| match e {
                kube::Error::Api(status) if status.code == 404 => Ok(false),
                e => Err(e),
            })
            .map_err(request(format!("delete {}", describe(object))))?;
        if deleted {
            removal.deleted.push(describe(object));
        }
    }
    Ok(removal)
}

/// Objects in the namespace that install did not make and Kubernetes did not make
/// for it: a namespace holding them is not tether's to delete.
async fn foreign_objects(
    resources: &Resources,
    namespace: &str,
) -> Result<Vec<String>, InstallError> {
    let mut foreign = Vec::new();
    for (api_version, kind) in NAMESPACE_CONTENTS {
        let api = resources.api(api_version, kind, Some(namespace))?;
        let listed = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(request(format!("list the {kind}s of {namespace}")))?;
        for item in listed.items {
            let name = item.metadata.name.clone().unwrap_or_default();
            let labels = item.metadata.labels.unwrap_or_default();
            let annotations = item.metadata.annotations.unwrap_or_default();
            if !made_for_the_namespace(kind, &name, &labels, &annotations) {
                foreign.push(format!("{kind}/{name}"));
            }
        }
    }
    Ok(foreign)
}

/// The kinds a user puts in a namespace that uninstall looks for (Sources go with
/// their CRD; their inventories, ConfigMaps, stay, and keep the namespace).
const NAMESPACE_CONTENTS: [(&str, &str); 5] = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
];

/// Whether an object in the daemon's namespace is install's or Kubernetes' own.
pub fn made_for_the_namespace(
    kind: &str,
    name: &str,
    labels: &std::collections::BTreeMap<String, String>,
    annotations: &std::collections::BTreeMap<String, String>,
) -> bool {
    let installed =
        labels.get(manifests::PART_OF.0).map(String::as_str) == Some(manifests::PART_OF.1);
    let kubernetes = match kind {
        "ConfigMap" => name == "kube-root-ca.crt",
        // Service account tokens (servers before 1.24 make one per account).
        "Secret" => annotations.contains_key("kubernetes.io/service-account.name"),
        _ => false,
    };
    installed || kubernetes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_providers_write_them_and_are_placed_in_the_range() {
        assert_eq!(
            ServerVersion::parse("1", "27+"),
            Some(ServerVersion::new(1, 27))
        );
        assert_eq!(ServerVersion::parse("1", "x"), None);
        assert_eq!(ServerVersion::new(1, 33).support(), Support::TooOld);
        assert_eq!(ServerVersion::new(1, 34).support(), Support::Supported);
        assert_eq!(ServerVersion::new(1, 37).support(), Support::Supported);
        assert_eq!(ServerVersion::new(1, 38).support(), Support::Newer);
    }

    #[test]
    fn an_apply_that_keeps_installs_entry_changed_nothing() {
        let entry = |time: &str| ManagedFieldsEntry {
            manager: Some(FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                time.parse().unwrap(),
            )),
            ..Default::default()
        };
        let (early, late) = (entry("2026-11-24T10:00:00Z"), entry("2026-11-24T10:05:00Z"));
        assert_eq!(Outcome::of(None, Some(&early)), Outcome::Created);
        assert_eq!(
            Outcome::of(Some(Some(&early)), Some(&early)),
            Outcome::Unchanged
        );
        assert_eq!(
            Outcome::of(Some(Some(&early)), Some(&late)),
            Outcome::Configured
        );
        // Made by someone else first: install's apply takes it over.
        assert_eq!(Outcome::of(Some(None), Some(&early)), Outcome::Configured);
    }

    #[test]
    fn a_random_secret_is_64_hex_digits_and_new_each_time() {
        let a = random_webhook_secret().unwrap();
        let b = random_webhook_secret().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
