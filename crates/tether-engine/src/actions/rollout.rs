//! `tether rollout status`: follow a controller's rollout to its end, as `kubectl
//! rollout status` does, judged by [`tether_core::readiness::rollout`].

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use thiserror::Error;

use crate::driver::Poll;
use tether_core::model::ControllerKind;
use tether_core::readiness::{Readiness, rollout};

#[derive(Debug, Error)]
pub enum RolloutError {
    #[error("{kind} {namespace}/{name} does not exist in the cluster (apply the models first)")]
    Missing {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("cannot read {kind} {namespace}/{name}")]
    Read {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Failed(String),
    #[error("the rollout of {kind} {namespace}/{name} did not finish within {}s: {state}", timeout.as_secs())]
    Timeout {
        kind: &'static str,
        namespace: String,
        name: String,
        timeout: Duration,
        state: String,
    },
    #[error("a {0} has no rollout to follow")]
    NoRollout(&'static str),
}

/// How often the controller is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Waits until the controller `name` in `namespace` has rolled out, telling
/// `progress` each new state.
pub async fn status(
    client: &Client,
    kind: ControllerKind,
    namespace: &str,
    name: &str,
    timeout: Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<(), RolloutError> {
    let resource = match kind {
        ControllerKind::Deployment => ApiResource::erase::<Deployment>(&()),
        ControllerKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        ControllerKind::DaemonSet => ApiResource::erase::<DaemonSet>(&()),
        ControllerKind::Job => return Err(RolloutError::NoRollout("Job")),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let kind_name = kind.name();
    let mut poll = Poll::new(LOOK_EVERY, timeout);
    let mut last = String::new();
    loop {
        let object = api
            .get_opt(name)
            .await
            .map_err(|source| RolloutError::Read {
                kind: kind_name,
                namespace: namespace.to_string(),
                name: name.to_string(),
                source,
            })?
            .ok_or_else(|| RolloutError::Missing {
                kind: kind_name,
                namespace: namespace.to_string(),
                name: name.to_string(),
            })?;
        let value = serde_json::to_value(&object).unwrap_or_default();
        let state = match rollout(kind_name, name, &value) {
            Readiness::Ready => return Ok(()),
            Readiness::Failed(why) => return Err(RolloutError::Failed(why)),
            Readiness::Waiting(why) => why,
        };
        if state != last {
            progress(&state);
            last = state;
        }
        if !poll.next().await {
            return Err(RolloutError::Timeout {
                kind: kind_name,
                namespace: namespace.to_string(),
                name: name.to_string(),
                timeout,
                state: last,
            });
        }
    }
}
