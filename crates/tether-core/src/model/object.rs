//! The one answer to "which Kubernetes object does this model become": resolve checks
//! these identities for collisions and render writes them into `metadata`, so what is
//! checked is by construction what is rendered.

use super::model_types::{
    DataModel, Host, KubernetesServiceInstance, Principal, Service, Slice, Text, TrustDomain,
};
use crate::k8s::{ObjectKey, effective_namespace};

/// A model that becomes a Kubernetes object of its own, with the namespace it is
/// rendered in when that comes from a resolved link (the trust domain of a slice, a pod
/// or a Service); Principals, ConfigMaps and Secrets name their trust domain themselves.
#[derive(Clone, Copy, Debug)]
pub enum ModelObject<'m> {
    TrustDomain(&'m TrustDomain),
    Principal(&'m Principal),
    /// A KubernetesConfigMap or KubernetesSecret.
    Data(&'m DataModel),
    Slice(&'m Slice, &'m str),
    Instance(&'m KubernetesServiceInstance, &'m str),
    Service(&'m Service, &'m str),
    /// One object of a KubernetesResourceInstance's `resource_definition`.
    Resource(&'m serde_json::Value),
    Host(&'m Host),
}

/// The identity (group, kind, namespace, name) of the object `model` renders to;
/// `None` for a slice without a controller, whose pods are their instances' objects.
pub fn object_key(model: ModelObject<'_>) -> Option<ObjectKey> {
    let key = |api_version: &str, kind: &str, namespace: Option<&str>, name: &Text| {
        Some(ObjectKey::new(api_version, kind, namespace, &name.value))
    };
    match model {
        ModelObject::TrustDomain(x) => key("v1", "Namespace", None, &x.name),
        ModelObject::Principal(x) => {
            key("v1", "ServiceAccount", Some(&x.trust_domain.value), &x.name)
        }
        ModelObject::Data(x) => key(
            "v1",
            x.data_kind.kubernetes_kind(),
            Some(&x.trust_domain.value),
            &x.name,
        ),
        ModelObject::Slice(x, namespace) => {
            let controller = x.controller_kind.as_ref()?.value;
            key(
                controller.api_version(),
                controller.name(),
                Some(namespace),
                &x.name,
            )
        }
        ModelObject::Host(x) => key("v1", "Node", None, &x.name),
        ModelObject::Instance(x, namespace) => key("v1", "Pod", Some(namespace), &x.name),
        ModelObject::Service(x, namespace) => key("v1", "Service", Some(namespace), &x.name),
        ModelObject::Resource(object) => {
            // Read has checked that these fields are present and non-empty.
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            let api_version = text(&object["apiVersion"]);
            Some(ObjectKey::new(
                &api_version,
                &text(&object["kind"]),
                effective_namespace(object).as_deref(),
                &text(&object["metadata"]["name"]),
            ))
        }
    }
}
