//! The other clusters of a Source, reached through the `Cluster` resources of its
//! namespace (`tether_api::cluster_spec`): the platform team makes them, so no
//! repository ever holds a cluster's address or credentials. A Source whose models
//! name several KubernetesServices applies each one's part through the Cluster of its
//! name, and its own cluster's part (`--cluster-name`) directly.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tether_api::cluster_spec::Cluster;

use tether_engine::cluster::{Impersonation, Target};

/// The key of a kubeconfig Secret when the Cluster names none.
const DEFAULT_KEY: &str = "value";

/// How a Source of `namespace` reaches the other clusters: the Cluster named after
/// each KubernetesService, read when its part is planned, acting as `identity` there
/// when given; its client as the daemon's own are made (`daemon`: its user agent,
/// request timeout and fence).
pub(crate) fn resolver(
    client: Client,
    namespace: String,
    identity: Option<Impersonation>,
    daemon: Target,
) -> tether_engine::reconcile::clusters::Resolver {
    std::sync::Arc::new(move |service: String| {
        let (client, namespace, identity, daemon) = (
            client.clone(),
            namespace.clone(),
            identity.clone(),
            daemon.clone(),
        );
        Box::pin(async move {
            let reached = (identity.as_ref(), &daemon);
            client_for(&client, &namespace, &service, reached).await
        })
    })
}

/// The client of the Cluster `name` of `namespace`, or why there is none. The
/// Secret's content never appears in an error: only its name and key.
async fn client_for(
    client: &Client,
    namespace: &str,
    name: &str,
    (identity, daemon): (Option<&Impersonation>, &Target),
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
        Ok(Some(secret)) => client_of(&secret, key, identity, daemon)
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
    daemon: &Target,
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
    tether_engine::cluster::client_for(config, daemon)
        .map_err(|error| format!("no client for it: {error}"))
}
