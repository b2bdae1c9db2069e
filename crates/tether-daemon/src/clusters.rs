//! The `Cluster` custom resource (`tether.dev/v1alpha1`): how the daemon reaches the
//! cluster of a KubernetesService other than its own, named after it, in the
//! namespace of the Sources that use it. It names a Secret holding a kubeconfig (as
//! Flux's `spec.kubeConfig.secretRef`): the platform team makes both, so no
//! repository ever holds a cluster's address or credentials. A Source whose models
//! name several KubernetesServices applies each one's part through the Cluster of its
//! name, and its own cluster's part (`--cluster-name`) directly.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use tether_engine::cluster::Impersonation;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "tether.dev",
    version = "v1alpha1",
    kind = "Cluster",
    namespaced,
    shortname = "tcl",
    category = "tether",
    doc = "How the daemon reaches the cluster of a KubernetesService (named after it) for the Sources of this namespace",
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.kubeConfig.secretRef.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The kubeconfig that reaches the cluster. A Source with a
    /// `serviceAccountName` acts as that ServiceAccount there too (impersonated:
    /// the kubeconfig's user must be allowed to impersonate it).
    pub kube_config: KubeConfigReference,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigReference {
    pub secret_ref: SecretKeyReference,
}

/// A key of a Secret in the Cluster's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SecretKeyReference {
    pub name: String,
    /// The key holding the kubeconfig (default: `value`, as Flux's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The key of a kubeconfig Secret when the Cluster names none.
const DEFAULT_KEY: &str = "value";

/// How a Source of `namespace` reaches the other clusters: the Cluster named after
/// each KubernetesService, read when its part is planned, acting as `identity` there
/// when given.
pub fn resolver(
    client: Client,
    namespace: String,
    identity: Option<Impersonation>,
) -> tether_engine::reconcile::clusters::Resolver {
    std::sync::Arc::new(move |service: String| {
        let (client, namespace, identity) = (client.clone(), namespace.clone(), identity.clone());
        Box::pin(async move { client_for(&client, &namespace, &service, identity.as_ref()).await })
    })
}

/// The client of the Cluster `name` of `namespace`, or why there is none. The
/// Secret's content never appears in an error: only its name and key.
async fn client_for(
    client: &Client,
    namespace: &str,
    name: &str,
    identity: Option<&Impersonation>,
) -> Result<Client, String> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let cluster = match clusters.get_opt(name).await {
        Ok(Some(cluster)) => cluster,
        Ok(None) => {
            return Err(format!(
                "no Cluster resource {namespace}/{name} (and it is not this daemon's own cluster)"
            ));
        }
        Err(error) => {
            return Err(format!(
                "cannot read the Cluster resource {namespace}/{name}: {error}"
            ));
        }
    };
    let reference = &cluster.spec.kube_config.secret_ref;
    let key = reference.key.as_deref().unwrap_or(DEFAULT_KEY);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets.get_opt(&reference.name).await {
        Ok(Some(secret)) => client_of(&secret, key, identity)
            .await
            .map_err(|why| format!("Cluster {name}: Secret {}: {why}", reference.name)),
        Ok(None) => Err(format!(
            "Cluster {name}: its Secret {} does not exist",
            reference.name
        )),
        Err(error) => Err(format!(
            "Cluster {name}: cannot read its Secret {}: {error}",
            reference.name
        )),
    }
}

/// A client from the kubeconfig at `key` of `secret`.
async fn client_of(
    secret: &Secret,
    key: &str,
    identity: Option<&Impersonation>,
) -> Result<Client, String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .ok_or_else(|| format!("has no key {key}"))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| format!("{key} is not text"))?;
    // The parser's message may quote the text: say where, not what.
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|_| format!("{key} is not a kubeconfig"))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|_| format!("{key} is not a usable kubeconfig (its current context?)"))?;
    if let Some(identity) = identity {
        identity.apply_to(&mut config);
    }
    Client::try_from(config).map_err(|error| format!("no client for it: {error}"))
}
