//! `tether reconcile SOURCE` and `tether approve SOURCE DIGEST`: the request for a
//! pass now, as the Source's annotation (`tether_api::source_spec::reconcile_request`),
//! which the replica running the Source sees through its watch; with an approval of a
//! held prune's deletions beside it (`tether_api::source_spec::approval_request`).

use kube::api::{Api, Patch, PatchParams};
use tether_api::source_spec::{Source, approval_request, reconcile_request};

/// Sets the annotation that asks for a pass now, and the one that approves the
/// deletions of digest `approve` when given; returns the request's value (the time).
pub async fn request_reconcile(
    api: &Api<Source>,
    name: &str,
    approve: Option<&str>,
) -> Result<String, kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = match approve {
        Some(digest) => approval_request(&now, digest),
        None => reconcile_request(&now),
    };
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(now)
}
