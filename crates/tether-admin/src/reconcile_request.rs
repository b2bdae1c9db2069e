//! `tether reconcile SOURCE`: the request for a pass now, as the Source's annotation
//! (`tether_api::source_spec::reconcile_request`), which the replica running the
//! Source sees through its watch.

use kube::api::{Api, Patch, PatchParams};
use tether_api::source_spec::{Source, reconcile_request};

/// Sets the annotation that asks for a pass now; returns its value (the time).
pub async fn request_reconcile(api: &Api<Source>, name: &str) -> Result<String, kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&reconcile_request(&now)),
    )
    .await?;
    Ok(now)
}
