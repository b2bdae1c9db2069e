//! Deployment attestations in the cluster: after an apply that changed something, the
//! applied objects read back as the server holds them, the in-toto statement made
//! (`tether_core::attestation`), sealed in a DSSE envelope with the attestation key
//! (`tether_trust::dsse`), and kept as a ConfigMap in the inventory's namespace
//! (labelled `tether.dev/attestation-of: <inventory>`, data `envelope.json`), the
//! oldest beyond the bound deleted; and (or instead) pushed to an OCI registry
//! ([`registry`]). [`check`] reads the newest back (from the cluster, or the registry's
//! tag of the inventory, or one given), opens it against trusted keys and compares the
//! objects it names, as the server holds them now, with it
//! (`tether_core::attestation::compare`).

pub mod registry;

use std::collections::BTreeSet;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use thiserror::Error;

use crate::cluster::{ClusterError, Resources, api_error};
use crate::oci::OciError;
use registry::AttestationRegistry;
use tether_core::attestation::{
    Attestation, AttestedObject, Deployment, Drift, PREDICATE_TYPE, StatementError, compare,
    digest, owned_fields, writers,
};
use tether_core::ownership::Inventory;
use tether_core::render::RenderedObject;
use tether_trust::dsse::{Envelope, IN_TOTO_PAYLOAD_TYPE, RecordKey, open as open_envelope};
use tether_trust::trusted_keys::TrustedKeys;
use tether_trust::verify::{Refusal, Signer};

/// The label that names the inventory an attestation's ConfigMap attests.
pub const ATTESTATION_LABEL: &str = "tether.dev/attestation-of";
/// The ConfigMap's entry that holds the envelope.
pub const ENVELOPE_ENTRY: &str = "envelope.json";
/// How many attestations of an inventory are kept unless told otherwise.
pub const DEFAULT_KEEP: usize = 10;
/// A ConfigMap holds at most 1 MiB: room is left for its metadata.
const MAX_ENVELOPE_BYTES: usize = 1_000_000;
/// How many objects are read at once.
const READS_AT_ONCE: usize = 16;

#[derive(Debug, Error)]
pub enum AttestationError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(
        "the attestation of {objects} objects takes {bytes} bytes, more than a ConfigMap holds ({MAX_ENVELOPE_BYTES}): it was not kept"
    )]
    TooLarge { objects: usize, bytes: usize },
    #[error("no attestation of the inventory {inventory} in the namespace {namespace}")]
    NotFound {
        namespace: String,
        inventory: String,
    },
    #[error("{origin} holds no DSSE envelope: {reason}")]
    Unreadable { origin: String, reason: String },
    #[error("{origin} is not verified: {refusal} (trusted: {})", .keys.join(", "))]
    Unverified {
        origin: String,
        refusal: Box<Refusal>,
        keys: Vec<String>,
    },
    #[error("{origin}: {source}")]
    Statement {
        origin: String,
        source: StatementError,
    },
    #[error("the attestation was not pushed to the registry")]
    Push(#[source] OciError),
    #[error("cannot read the attestation from the registry")]
    Pull(#[source] OciError),
}

/// Where attestations are kept, and how many.
#[derive(Clone, Debug)]
pub struct Keeping {
    pub namespace: String,
    pub inventory: String,
    pub keep: usize,
    pub places: Places,
}

/// Where an inventory's attestations go: a ConfigMap in its namespace, a registry's
/// repository, or both.
#[derive(Clone, Debug)]
pub struct Places {
    pub in_cluster: bool,
    pub registry: Option<AttestationRegistry>,
}

impl Default for Places {
    fn default() -> Self {
        Places {
            in_cluster: true,
            registry: None,
        }
    }
}

/// An attestation kept: its ConfigMap's name, the reference it was pushed as, and how
/// many objects it names.
#[derive(Clone, Debug)]
pub struct Kept {
    pub name: Option<String>,
    pub pushed: Option<String>,
    pub objects: usize,
    pub signer: String,
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let places: Vec<String> = self
            .name
            .iter()
            .map(|name| format!("ConfigMap {name}"))
            .chain(self.pushed.iter().cloned())
            .collect();
        write!(
            f,
            "{} ({} objects, signed by {})",
            places.join(" and "),
            self.objects,
            self.signer
        )
    }
}

/// Reads `objects` back from the cluster, attests them as applied by `deployment`,
/// signs the statement with `key` and keeps it.
pub async fn attest(
    client: &Client,
    deployment: Deployment,
    objects: &[&RenderedObject],
    key: &RecordKey,
    keeping: &Keeping,
) -> Result<Kept, AttestationError> {
    let targets: Vec<Target> = objects
        .iter()
        .map(|o| Target::new(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name))
        .collect();
    let live = read_objects(client, &targets).await?;
    let attested = objects
        .iter()
        .zip(live)
        .filter_map(|(object, live)| {
            let live = live?;
            Some(AttestedObject {
                api_version: object.api_version.clone(),
                kind: object.kind.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                sent: digest(&tether_core::plan::with_applied_hash(&object.body)),
                fields: owned_fields(&live, &deployment.manager),
                writers: writers(&live, &deployment.manager),
            })
        })
        .collect();
    let attestation = Attestation {
        deployment,
        objects: attested,
    };
    let envelope = key.seal(IN_TOTO_PAYLOAD_TYPE, &attestation.statement());
    let text = serde_json::to_string(&envelope).unwrap_or_default();
    let time = &attestation.deployment.time;
    let pushed = match &keeping.places.registry {
        Some(store) => Some(
            registry::push(
                store,
                &keeping.inventory,
                time,
                PREDICATE_TYPE,
                text.clone().into_bytes(),
                keeping.keep,
            )
            .await
            .map_err(AttestationError::Push)?,
        ),
        None => None,
    };
    let name = match keeping.places.in_cluster {
        true if text.len() > MAX_ENVELOPE_BYTES => {
            return Err(AttestationError::TooLarge {
                objects: attestation.objects.len(),
                bytes: text.len(),
            });
        }
        true => Some(keep(client, keeping, time, text).await?),
        false => None,
    };
    Ok(Kept {
        name,
        pushed,
        objects: attestation.objects.len(),
        signer: key.name().to_string(),
    })
}

/// Creates the ConfigMap, then deletes the oldest beyond the bound.
async fn keep(
    client: &Client,
    keeping: &Keeping,
    time: &str,
    envelope: String,
) -> Result<String, AttestationError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &keeping.namespace);
    let stamp: String = time.chars().filter(char::is_ascii_digit).collect();
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some(format!("tether-attestation-{}-{stamp}-", keeping.inventory)),
            labels: Some([(ATTESTATION_LABEL.to_string(), keeping.inventory.clone())].into()),
            ..Default::default()
        },
        data: Some([(ENVELOPE_ENTRY.to_string(), envelope)].into()),
        ..Default::default()
    };
    let made = api
        .create(&PostParams::default(), &config_map)
        .await
        .map_err(api_error(format!(
            "keep the attestation in the namespace {}",
            keeping.namespace
        )))?;
    let mut kept = listed(&api, &keeping.inventory).await?;
    kept.reverse();
    for old in kept.iter().skip(keeping.keep.max(1)) {
        match api.delete(&old.name_any(), &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(error) => {
                return Err(
                    api_error(format!("delete the attestation {}", old.name_any()))(error).into(),
                );
            }
        }
    }
    Ok(made.name_any())
}

/// The inventory's attestations, oldest first.
async fn listed(api: &Api<ConfigMap>, inventory: &str) -> Result<Vec<ConfigMap>, AttestationError> {
    let mut items = api
        .list(&ListParams::default().labels(&format!("{ATTESTATION_LABEL}={inventory}")))
        .await
        .map_err(api_error(format!("list the attestations of {inventory}")))?
        .items;
    items.sort_by_key(|c| {
        (
            c.metadata.creation_timestamp.clone().map(|t| t.0),
            c.name_any(),
        )
    });
    Ok(items)
}

/// The newest attestation of `inventory` in `namespace`: its ConfigMap's name and
/// envelope.
async fn latest(
    client: &Client,
    namespace: &str,
    inventory: &str,
) -> Result<(String, Envelope), AttestationError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let newest =
        listed(&api, inventory)
            .await?
            .pop()
            .ok_or_else(|| AttestationError::NotFound {
                namespace: namespace.into(),
                inventory: inventory.into(),
            })?;
    let origin = format!("the ConfigMap {namespace}/{}", newest.name_any());
    let text = newest
        .data
        .as_ref()
        .and_then(|d| d.get(ENVELOPE_ENTRY))
        .ok_or_else(|| AttestationError::Unreadable {
            origin: origin.clone(),
            reason: format!("it has no entry {ENVELOPE_ENTRY}"),
        })?;
    Ok((newest.name_any(), envelope(text, &origin)?))
}

/// An envelope's JSON read; `origin` names where it came from.
pub fn envelope(text: &str, origin: &str) -> Result<Envelope, AttestationError> {
    serde_json::from_str(text).map_err(|e| AttestationError::Unreadable {
        origin: origin.into(),
        reason: e.to_string(),
    })
}

/// The attestation an envelope holds, if a trusted key signed it.
fn open(
    keys: &TrustedKeys,
    envelope: &Envelope,
    origin: &str,
) -> Result<(Attestation, Signer), AttestationError> {
    let (payload, signer) =
        open_envelope(keys, envelope).map_err(|refusal| AttestationError::Unverified {
            origin: origin.into(),
            refusal: Box::new(refusal),
            keys: keys.names(),
        })?;
    let attestation =
        Attestation::read(&payload).map_err(|source| AttestationError::Statement {
            origin: origin.into(),
            source,
        })?;
    Ok((attestation, signer))
}

/// An attestation checked against the cluster: where it came from, what it says, who
/// signed it, and how the live objects differ from it (none: clean).
#[derive(Clone, Debug)]
pub struct Checked {
    /// `the ConfigMap ns/name`, or the file's path.
    pub origin: String,
    pub attestation: Attestation,
    pub signer: Signer,
    pub drift: Vec<Drift>,
}

/// Which attestation [`check`] checks.
#[derive(Clone, Debug)]
pub enum Checking {
    /// One read elsewhere (a file), with its origin.
    Given { origin: String, envelope: Envelope },
    /// The newest of the inventory in its namespace.
    InCluster,
    /// One in a registry: a tag or digest, or the inventory's tag (the newest).
    InRegistry(AttestationRegistry),
}

/// Checks an attestation against `keys`, then the cluster's live objects against it:
/// what `tether verify` and the page's API both answer.
pub async fn check(
    client: &Client,
    checking: Checking,
    inventory: &Inventory,
    keys: &TrustedKeys,
) -> Result<Checked, AttestationError> {
    let (origin, envelope) = match checking {
        Checking::Given { origin, envelope } => (origin, envelope),
        Checking::InCluster => {
            let (name, envelope) = latest(client, &inventory.namespace, &inventory.name).await?;
            (
                format!("the ConfigMap {}/{name}", inventory.namespace),
                envelope,
            )
        }
        Checking::InRegistry(store) => {
            let (origin, bytes) = registry::pull(&store.repository, &store.access)
                .await
                .map_err(AttestationError::Pull)?;
            let envelope = envelope(&String::from_utf8_lossy(&bytes), &origin)?;
            (origin, envelope)
        }
    };
    let (attestation, signer) = open(keys, &envelope, &origin)?;
    let live = live(client, &attestation).await?;
    let drift = compare(&attestation, &live);
    Ok(Checked {
        origin,
        attestation,
        signer,
        drift,
    })
}

/// The objects an attestation names, as the server holds them now (none: not found).
async fn live(
    client: &Client,
    attestation: &Attestation,
) -> Result<Vec<Option<Value>>, AttestationError> {
    let targets: Vec<Target> = attestation
        .objects
        .iter()
        .map(|o| Target::new(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name))
        .collect();
    read_objects(client, &targets).await
}

/// An object to read back.
struct Target {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl Target {
    fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Target {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }
}

async fn read_objects(
    client: &Client,
    targets: &[Target],
) -> Result<Vec<Option<Value>>, AttestationError> {
    let kinds: BTreeSet<(String, String)> = targets
        .iter()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .collect();
    let resources = Resources::discover(client, &kinds).await?;
    // Each read owns what it needs, so the reads run at once.
    let reads: Vec<_> = targets
        .iter()
        .map(|target| {
            // A kind the server no longer serves: its objects are gone.
            let api = resources
                .api(
                    &target.api_version,
                    &target.kind,
                    target.namespace.as_deref(),
                )
                .ok();
            let (api_version, kind, name) = (
                target.api_version.clone(),
                target.kind.clone(),
                target.name.clone(),
            );
            async move {
                let Some(api) = api else {
                    return Ok(None);
                };
                match api.get_opt(&name).await {
                    Ok(Some(object)) => {
                        let mut value = serde_json::to_value(object).unwrap_or_default();
                        value["apiVersion"] = api_version.into();
                        value["kind"] = kind.into();
                        Ok(Some(value))
                    }
                    Ok(None) => Ok(None),
                    Err(error) => Err(api_error(format!("read {kind} {name}"))(error)),
                }
            }
        })
        .collect();
    let read: Vec<Result<Option<Value>, ClusterError>> =
        stream::iter(reads).buffered(READS_AT_ONCE).collect().await;
    Ok(read.into_iter().collect::<Result<_, _>>()?)
}
