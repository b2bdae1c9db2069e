//! What a deletion would take with it: a Namespace's objects (every namespaced kind
//! the server lists, read as metadata, Secrets as their type only), a
//! CustomResourceDefinition's custom resources (in every namespace). Only read when a
//! plan deletes or releases one; `tether_core::inventory::contents_of` sorts what is
//! found.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PartialObjectMeta};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, ResourceExt};

use crate::cluster::ClusterError;
use crate::cluster::api_error;
use tether_core::inventory::ContainedObject;
use tether_core::k8s::ObjectKey;
use tether_core::ownership::{MANAGED_BY_LABEL, MANAGER, PART_OF_LABEL};

/// Every object in `namespace` but Events.
pub(super) async fn list_namespace(
    client: &Client,
    namespace: &str,
) -> Result<Vec<ContainedObject>, ClusterError> {
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
            objects.extend(list.items.iter().map(|item| contained(&resource, item)));
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

/// Every custom resource of the CustomResourceDefinition `name`, in every namespace;
/// none when the definition is gone or its kind not served. A list the client may
/// not make fails the plan: what the deletion would take cannot be known.
pub(super) async fn list_custom_resources(
    client: &Client,
    name: &str,
) -> Result<Vec<ContainedObject>, ClusterError> {
    let definitions: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(definition) = definitions
        .get_opt(name)
        .await
        .map_err(api_error(format!("read CustomResourceDefinition {name}")))?
    else {
        return Ok(Vec::new());
    };
    let spec = &definition.spec;
    let Some(version) = spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| spec.versions.iter().find(|v| v.served))
    else {
        return Ok(Vec::new());
    };
    let resource = ApiResource {
        group: spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", spec.group, version.name),
        kind: spec.names.kind.clone(),
        plural: spec.names.plural.clone(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = match api.list_metadata(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(api_error(format!("list {} objects", resource.kind))(e)),
    };
    Ok(list
        .items
        .iter()
        .map(|item| contained(&resource, item))
        .collect())
}

/// An object of `resource`'s kind, as a metadata list gives it.
fn contained(resource: &ApiResource, item: &PartialObjectMeta<DynamicObject>) -> ContainedObject {
    ContainedObject {
        key: ObjectKey::new(
            &resource.api_version,
            &resource.kind,
            item.namespace().as_deref(),
            &item.name_any(),
        ),
        uid: item.uid().unwrap_or_default(),
        owners: item
            .owner_references()
            .iter()
            .map(|o| o.uid.clone())
            .collect(),
        secret_type: None,
        inventory: inventory_of(item),
    }
}

/// The ApplySet id of the tether inventory an object's labels name.
fn inventory_of(item: &PartialObjectMeta<DynamicObject>) -> Option<String> {
    let labels = item.labels();
    let tethers = labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGER);
    tethers
        .then(|| labels.get(PART_OF_LABEL).cloned())
        .flatten()
}
