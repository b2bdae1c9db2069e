//! A fleet view that holds no cluster's keys: each cluster's daemon writes a compact
//! report of its Sources (a `ClusterReport`, `tether.dev/v1alpha1`) into a hub's API
//! server over an outbound connection, as a ServiceAccount of its own whose RBAC lets
//! it write only its own report; `tether fleet status` reads the reports.
//!
//! - this module: the `ClusterReport` resource (its spec is
//!   [`tether_core::fleet::Report`]) and the hub's namespace;
//! - [`hub`]: a hub admin's side: `join` (ServiceAccount, Role limited to the cluster's
//!   report by name, RoleBinding, token, the empty report, a kubeconfig for the
//!   daemon), `revoke`, and `reports` (what `fleet status` reads);
//! - [`reporter`]: the daemon's side, a driven loop on its own task that reports on
//!   changes of its Sources' status and at each heartbeat, and retries with backoff
//!   while the hub is away.
//!
//! **Invariant:** the hub holds no cluster's credentials and contacts no cluster:
//! nothing here builds a client from a report's content; the only clients are the
//! hub's (from the caller's kubeconfig) and, in the daemon, its own cluster's.

pub mod hub;
pub mod reporter;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tether_core::fleet::Report;

/// The hub's namespace of reports, unless told otherwise.
pub const NAMESPACE: &str = "tether-fleet";

/// One cluster's report in the hub. Its name is the cluster's; the hub's RBAC lets
/// only that cluster's ServiceAccount write it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
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
    <ClusterReport as kube::CustomResourceExt>::crd()
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
