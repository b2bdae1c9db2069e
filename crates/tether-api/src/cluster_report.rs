//! The `ClusterReport` custom resource (`tether.dev/v1alpha1`) of a fleet hub: what one
//! cluster's daemon reports of its Sources (its spec is [`tether_core::fleet::Report`]),
//! written by that cluster alone into the hub's namespace; `tether fleet status` reads
//! them. The hub's side (join, revoke) is `tether_admin::fleet`, the daemon's the
//! reporter of `tether_daemon`.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tether_core::fleet::Report;

/// The hub's namespace of reports, unless told otherwise.
pub const NAMESPACE: &str = "tether-fleet";

/// One cluster's report in the hub. Its name is the cluster's; the hub's RBAC lets
/// only that cluster's ServiceAccount write it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "tether.dev",
    version = "v1alpha1",
    kind = "ClusterReport",
    namespaced,
    shortname = "tcr",
    category = "tether",
    doc = "What one cluster's tether daemon reports of its Sources to a fleet hub",
    printcolumn = r#"{"name":"Reported","type":"date","jsonPath":".spec.reportedAt"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ClusterReportSpec {
    #[serde(flatten)]
    pub report: Report,
}

/// The CustomResourceDefinition of `ClusterReport`, for the hub.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let crd = <ClusterReport as kube_core::CustomResourceExt>::crd();
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    crate::crd::without_rust_formats(&mut value);
    serde_json::from_value(value).unwrap_or(crd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_lists_the_reports_fields() {
        let crd = serde_json::to_value(crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let properties = spec["properties"].as_object().unwrap();
        for field in ["reportedAt", "version", "heartbeatSeconds", "sources"] {
            assert!(properties.contains_key(field), "{field}: {spec}");
        }
        let source = &properties["sources"]["items"]["properties"];
        for field in [
            "namespace",
            "name",
            "wanted",
            "applied",
            "blockedOn",
            "drift",
            "counts",
        ] {
            assert!(source.get(field).is_some(), "{field}: {source}");
        }
    }
}
