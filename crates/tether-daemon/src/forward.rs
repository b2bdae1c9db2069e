//! A push for a Source that another replica runs (the leader, or its owner among
//! the shard's members) is passed on through the Source's reconcile annotation,
//! which that replica's watch sees.

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tether_api::source_spec::{Source, reconcile_request};
use tether_api::webhook::Push;
use tokio::sync::watch;

use crate::clock::now;
use crate::shard::{Share, source_id};

/// Passes a webhook's push to the Sources it concerns that another replica runs
/// (the leader, or their owner among the shard's members) through their annotation,
/// which that replica's watch sees.
#[derive(Clone)]
pub(crate) struct Forwarder {
    pub(crate) client: Client,
    pub(crate) store: Store<Source>,
    pub(crate) share: watch::Receiver<Share>,
}

impl Forwarder {
    /// Requests a reconcile of every Source `push` concerns that this replica does
    /// not run; returns how many.
    pub(crate) async fn forward(&self, push: &Push) -> usize {
        let elsewhere: Vec<(Api<Source>, String)> = self
            .store
            .state()
            .into_iter()
            .filter(|source| push.concerns(&source.spec.url, source.spec.reference.as_deref()))
            .filter(|source| !self.share.borrow().owns(&source_id(source)))
            .map(|source| {
                let namespace = source.namespace().unwrap_or_default();
                (
                    Api::namespaced(self.client.clone(), &namespace),
                    source.name_any(),
                )
            })
            .collect();
        let requests = elsewhere.into_iter().map(|(api, name)| async move {
            let request = Patch::Merge(reconcile_request(&now()));
            match api.patch(&name, &PatchParams::default(), &request).await {
                Ok(_) => 1,
                Err(error) => {
                    tracing::warn!(%error, source = %name, "cannot forward the push");
                    0
                }
            }
        });
        futures::stream::iter(requests)
            .buffer_unordered(16)
            .collect::<Vec<usize>>()
            .await
            .into_iter()
            .sum()
    }
}
