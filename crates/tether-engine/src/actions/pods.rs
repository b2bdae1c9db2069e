//! Actions on one running pod that change nothing in Git, because the desired state
//! stays the same: `recreate` (delete it so that it is made again from scratch) and
//! `restart_containers` (end each container's main process so that the kubelet starts
//! it again in the same pod). Each first marks the pod with [`ACTION_ANNOTATION`] (so
//! the events the pod watch publishes say why) and records a Kubernetes Event.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Client;
use kube::api::{Api, AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use thiserror::Error;

use crate::driver::Poll;
use crate::events::sink::{PodRef, pod_event};
use tether_core::events::ACTION_ANNOTATION;
use tether_core::ownership::{MANAGED_BY_LABEL, MANAGER, MODEL_ANNOTATION};
use tether_core::remedy::Remedy;

#[derive(Debug, Error)]
pub enum PodActionError {
    #[error("no pod {name} in namespace {namespace}{}", suggestion.as_deref().map(|s| format!("; {s}")).unwrap_or_default())]
    NotFound {
        namespace: String,
        name: String,
        suggestion: Option<String>,
    },
    #[error(
        "pod {namespace}/{name} has no controller and tether did not create it: deleted, nothing would make it again"
    )]
    NothingRemakes { namespace: String, name: String },
    #[error(
        "pod {namespace}/{name} has restartPolicy Never: a container that ends is not started again, so the pod would stop"
    )]
    NeverRestarts { namespace: String, name: String },
    #[error("pod {namespace}/{name} has no container named {container}; it has {}", containers.join(", "))]
    NoSuchContainer {
        namespace: String,
        name: String,
        container: String,
        containers: Vec<String>,
    },
    #[error(
        "cannot end the main process of container {container} in pod {namespace}/{name} (`kill 1` through the exec API): {reason}"
    )]
    Exec {
        namespace: String,
        name: String,
        container: String,
        reason: String,
    },
    #[error("{what} did not happen within {}s", timeout.as_secs())]
    Timeout { what: String, timeout: Duration },
    #[error("the API server refused: {0}")]
    Kube(#[from] kube::Error),
}

impl PodActionError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            PodActionError::Exec { .. } => Some(Remedy::RecreateInstead),
            PodActionError::NothingRemakes { .. } => Some(Remedy::DeleteItYourself),
            _ => None,
        }
    }
}

/// Who makes a recreated pod again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Maker {
    /// Its controller (`kind/name` of the owner reference).
    Controller { kind: String, name: String },
    /// tether, from this model (a bare pod of a slice without controller): the caller
    /// applies it.
    Tether { model: String },
}

#[derive(Clone, Debug)]
pub struct Recreated {
    pub old_uid: String,
    pub maker: Maker,
    /// The pod its controller made in its place (name, uid), once seen.
    pub replacement: Option<(String, String)>,
}

/// Deletes the pod so that its controller (or tether) makes it again; with a
/// controller, waits up to `timeout` for the pod that replaces it.
pub async fn recreate(
    client: &Client,
    namespace: &str,
    name: &str,
    by: &str,
    timeout: Duration,
) -> Result<Recreated, PodActionError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = get(&pods, namespace, name).await?;
    let old_uid = pod.metadata.uid.clone().unwrap_or_default();
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .cloned();
    let maker = match (
        &owner,
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MODEL_ANNOTATION)),
    ) {
        (Some(owner), _) => Maker::Controller {
            kind: owner.kind.clone(),
            name: owner.name.clone(),
        },
        (None, Some(model))
            if pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .map(String::as_str)
                == Some(MANAGER) =>
        {
            Maker::Tether {
                model: model.clone(),
            }
        }
        _ => {
            return Err(PodActionError::NothingRemakes {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
    };
    let made_by = match &maker {
        Maker::Controller { kind, name } => format!("its {kind} {name}"),
        Maker::Tether { model } => format!("tether (from {model})"),
    };
    let action = mark(client, &pod, "recreate", by).await?;
    record(
        client,
        &pod,
        "Recreate",
        "recreate",
        format!("tether recreate: {action}; the pod is deleted so that {made_by} makes it again"),
    )
    .await?;
    let siblings = match &owner {
        Some(owner) => owned_by(&pods, &owner.uid).await?,
        None => Vec::new(),
    };
    pods.delete(name, &DeleteParams::default()).await?;
    let replacement = match &owner {
        Some(owner) => Some(replacement(&pods, &owner.uid, &siblings, timeout).await?),
        None => {
            gone(&pods, name, &old_uid, timeout).await?;
            None
        }
    };
    Ok(Recreated {
        old_uid,
        maker,
        replacement,
    })
}

/// Ends the main process (PID 1) of each container (or of `container`) with
/// SIGTERM through the exec API, and waits until each restart count rose: the pod,
/// its uid, IP and volumes stay; what a container wrote outside volumes is lost.
#[expect(
    clippy::too_many_lines,
    reason = "one action: choose the containers, end each, wait for every restart, in that order"
)]
pub async fn restart_containers(
    client: &Client,
    namespace: &str,
    name: &str,
    container: Option<&str>,
    by: &str,
    timeout: Duration,
) -> Result<Vec<String>, PodActionError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = get(&pods, namespace, name).await?;
    let spec = pod.spec.clone().unwrap_or_default();
    if spec.restart_policy.as_deref() == Some("Never") {
        return Err(PodActionError::NeverRestarts {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }
    let names: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
    let chosen: Vec<String> = match container {
        Some(wanted) if names.iter().any(|n| n == wanted) => vec![wanted.to_string()],
        Some(wanted) => {
            return Err(PodActionError::NoSuchContainer {
                namespace: namespace.to_string(),
                name: name.to_string(),
                container: wanted.to_string(),
                containers: names,
            });
        }
        None => names,
    };
    let before = restart_counts(&pod);
    let action = mark(client, &pod, "restart-containers", by).await?;
    record(
        client,
        &pod,
        "RestartContainers",
        "restart-containers",
        format!(
            "tether restart-containers: {action}; containers {}",
            chosen.join(", ")
        ),
    )
    .await?;
    for container in &chosen {
        let params = AttachParams::default()
            .container(container.as_str())
            .stdin(false)
            .stdout(false)
            .stderr(true);
        let exec_error = |reason: String| PodActionError::Exec {
            namespace: namespace.to_string(),
            name: name.to_string(),
            container: container.clone(),
            reason,
        };
        let mut process = pods.exec(name, ["kill", "1"], &params).await.map_err(|e| {
            exec_error(match &e {
                // The server's own words, not the structure they came in.
                kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
                other => tether_core::error_chain(other),
            })
        })?;
        if let Some(status) = process.take_status()
            && let Some(status) = status.await
        {
            kill_outcome(&status).map_err(exec_error)?;
        }
        let _ = process.join().await;
    }
    let mut poll = Poll::new(Duration::from_millis(500), timeout);
    loop {
        let now = restart_counts(&get(&pods, namespace, name).await?);
        if chosen
            .iter()
            .all(|c| now.get(c).copied().unwrap_or(0) > before.get(c).copied().unwrap_or(0))
        {
            return Ok(chosen);
        }
        if !poll.next().await {
            return Err(PodActionError::Timeout {
                what: format!(
                    "a restart of {} in pod {namespace}/{name}",
                    chosen.join(", ")
                ),
                timeout,
            });
        }
    }
}

/// Whether `kill 1` ended the container's main process, from the exec's status.
/// When the main process ends, the kernel kills every other process of its pid
/// namespace, `kill` itself among them if it has not exited yet: exit code 137
/// (SIGKILL) is then the sign that it worked, not a failure. Any other failure is one
/// (no `kill` in the image, exec refused); the restart counts confirm the rest.
fn kill_outcome(status: &Status) -> Result<(), String> {
    if status.status.as_deref() != Some("Failure") {
        return Ok(());
    }
    let killed_with_its_container = status.reason.as_deref() == Some("NonZeroExitCode")
        && status
            .details
            .iter()
            .flat_map(|d| d.causes.iter().flatten())
            .any(|c| {
                c.reason.as_deref() == Some("ExitCode") && c.message.as_deref() == Some("137")
            });
    if killed_with_its_container {
        Ok(())
    } else {
        Err(status.message.clone().unwrap_or_default())
    }
}

async fn get(pods: &Api<Pod>, namespace: &str, name: &str) -> Result<Pod, PodActionError> {
    if let Some(pod) = pods.get_opt(name).await? {
        return Ok(pod);
    }
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    Err(PodActionError::NotFound {
        namespace: namespace.to_string(),
        name: name.to_string(),
        suggestion: tether_core::diagnostic::suggestion(name, names.iter().map(String::as_str)),
    })
}

fn restart_counts(pod: &Pod) -> std::collections::BTreeMap<String, i32> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|all| {
            all.iter()
                .map(|c| (c.name.clone(), c.restart_count))
                .collect()
        })
        .unwrap_or_default()
}

/// Writes [`ACTION_ANNOTATION`] on the pod; returns its value.
async fn mark(
    client: &Client,
    pod: &Pod,
    action: &str,
    by: &str,
) -> Result<String, PodActionError> {
    let pods: Api<Pod> = Api::namespaced(
        client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let value = format!(
        "{action} at {} by {by}",
        k8s_openapi::jiff::Timestamp::now()
    );
    let patch = serde_json::json!({"metadata": {"annotations": {ACTION_ANNOTATION: value}}});
    pods.patch(
        pod.metadata.name.as_deref().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(value)
}

async fn record(
    client: &Client,
    pod: &Pod,
    reason: &str,
    action: &str,
    message: String,
) -> Result<(), PodActionError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let about = PodRef {
        namespace,
        name,
        uid: pod.metadata.uid.as_deref().unwrap_or_default(),
    };
    let event_name = format!(
        "{name}.tether-{action}-{}",
        k8s_openapi::jiff::Timestamp::now().as_millisecond()
    );
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    events
        .create(
            &PostParams::default(),
            &pod_event(&about, event_name, reason, action, message),
        )
        .await?;
    Ok(())
}

/// The live pods of the controller with uid `owner`: (name, uid).
async fn owned_by(pods: &Api<Pod>, owner: &str) -> Result<Vec<(String, String)>, PodActionError> {
    let listed = pods.list(&ListParams::default()).await?;
    Ok(listed
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == owner)
        })
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect())
}

/// The pod the controller (`owner` uid) made that was not among `before`.
async fn replacement(
    pods: &Api<Pod>,
    owner: &str,
    before: &[(String, String)],
    timeout: Duration,
) -> Result<(String, String), PodActionError> {
    let mut poll = Poll::new(Duration::from_millis(250), timeout);
    loop {
        let new = owned_by(pods, owner)
            .await?
            .into_iter()
            .find(|(_, uid)| !before.iter().any(|(_, known)| known == uid));
        if let Some(new) = new {
            return Ok(new);
        }
        if !poll.next().await {
            return Err(PodActionError::Timeout {
                what: "a pod in place of the recreated one".into(),
                timeout,
            });
        }
    }
}

/// Waits until the pod `name` with `uid` is gone.
async fn gone(
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> Result<(), PodActionError> {
    let mut poll = Poll::new(Duration::from_millis(250), timeout);
    loop {
        match pods.get_opt(name).await? {
            Some(p) if p.metadata.uid.as_deref() == Some(uid) => {}
            _ => return Ok(()),
        }
        if !poll.next().await {
            return Err(PodActionError::Timeout {
                what: format!("the deletion of pod {name}"),
                timeout,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn failure(reason: &str, exit_code: &str, message: &str) -> Status {
        Status {
            status: Some("Failure".into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some(exit_code.into()),
                    ..StatusCause::default()
                }]),
                ..StatusDetails::default()
            }),
            ..Status::default()
        }
    }

    #[test]
    fn kill_is_judged_by_how_it_ended() {
        let success = Status {
            status: Some("Success".into()),
            ..Status::default()
        };
        let cases = [
            ("kill exited by itself", success, Ok(())),
            (
                "kill was killed with the container whose main process it ended",
                failure(
                    "NonZeroExitCode",
                    "137",
                    "command terminated with non-zero exit code: command terminated with exit code 137",
                ),
                Ok(()),
            ),
            (
                "no kill in the image",
                failure("NonZeroExitCode", "127", "exit code 127"),
                Err("exit code 127".to_string()),
            ),
            (
                "kill refused: the process is not there",
                failure("NonZeroExitCode", "1", "exit code 1"),
                Err("exit code 1".to_string()),
            ),
            (
                "an exec error without an exit code",
                Status {
                    status: Some("Failure".into()),
                    reason: Some("InternalError".into()),
                    message: Some("container not found".into()),
                    ..Status::default()
                },
                Err("container not found".to_string()),
            ),
        ];
        for (case, status, want) in cases {
            assert_eq!(kill_outcome(&status), want, "{case}");
        }
    }
}
