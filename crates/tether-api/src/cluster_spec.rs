//! The `Cluster` custom resource (`tether.dev/v1alpha1`): how the daemon reaches the
//! cluster of a KubernetesService other than its own, named after it, in the
//! namespace of the Sources that use it. It names a Secret holding a kubeconfig (as
//! Flux's `spec.kubeConfig.secretRef`): the platform team makes both, so no
//! repository ever holds a cluster's address or credentials.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
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
