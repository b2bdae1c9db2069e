//! What a namespace about to be pruned holds: every namespaced kind the server lists,
//! read as metadata (Secrets as their type only). Only read when a plan deletes a
//! Namespace; `tether_core::inventory::namespace_contents` sorts what is found.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, ResourceExt};

use crate::cluster::ClusterError;
use crate::cluster::api_error;
use tether_core::inventory::NamespacedObject;
use tether_core::k8s::ObjectKey;

/// Every object in `namespace` but Events.
pub(super) async fn list_namespace(
    client: &Client,
    namespace: &str,
) -> Result<Vec<NamespacedObject>, ClusterError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(api_error("discover the server's API".into()))?;
    let mut objects = Vec::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            let listable = capabilities.scope == Scope::Namespaced
                && capabilities.supports_operation(verbs::LIST)
                && resource.kind != "Event";
            if !listable {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let list = match api.list_metadata(&ListParams::default()).await {
                Ok(list) => list,
                // A kind this client may not list: its objects stay unknown.
                Err(kube::Error::Api(_)) => continue,
                Err(e) => return Err(api_error(format!("list {} objects", resource.kind))(e)),
            };
            for item in list.items {
                objects.push(NamespacedObject {
                    key: ObjectKey::new(
                        &resource.api_version,
                        &resource.kind,
                        Some(namespace),
                        &item.name_any(),
                    ),
                    uid: item.uid().unwrap_or_default(),
                    owners: item
                        .owner_references()
                        .iter()
                        .map(|o| o.uid.clone())
                        .collect(),
                    secret_type: None,
                });
            }
        }
    }
    // A Secret's type tells a service account's token from a user's Secret; the values
    // are read with it and dropped at once.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = secrets.list(&ListParams::default()).await {
        for secret in list.items {
            let name = secret.name_any();
            if let Some(object) = objects
                .iter_mut()
                .find(|o| o.key.kind == "Secret" && o.key.group.is_empty() && o.key.name == name)
            {
                object.secret_type = secret.type_;
            }
        }
    }
    Ok(objects)
}
