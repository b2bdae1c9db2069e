//! What a kubelet reports about a pod's containers: the status of a pod that starts,
//! and of one whose container restarts, fails or finishes. Pure: each function returns
//! the status patch to write.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use serde_json::{Value, json};

/// What happens to a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// The container exits and the kubelet starts it again: its restart count rises.
    Restart,
    /// The container exits with an error: the pod fails (restartPolicy Never) or the
    /// container waits in CrashLoopBackOff.
    Fail,
    /// The container exits successfully: the pod succeeds (restartPolicy Never or
    /// OnFailure) or the container is started again (Always).
    Finish,
    /// The container passes its readiness probe (it runs, not ready, under the
    /// annotation `sim.tether.dev/ready: "false"`).
    Ready,
}

pub fn now() -> String {
    // RFC 3339 in UTC, with the time type k8s-openapi itself uses, cut to the second as
    // the API server cuts creationTimestamp: rounded up, a pod that became Ready at
    // .6 s looked Ready after an object created 0.3 s later.
    use k8s_openapi::jiff::{RoundMode, TimestampRound, Unit};
    let to_second = TimestampRound::new()
        .smallest(Unit::Second)
        .mode(RoundMode::Trunc);
    k8s_openapi::jiff::Timestamp::now()
        .round(to_second)
        .map_or_else(|_| String::new(), |t| t.to_string())
}

fn conditions(ready: bool) -> Value {
    let ready = if ready { "True" } else { "False" };
    json!([
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now()},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
        {"type": "Ready", "status": ready, "lastTransitionTime": now()},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": now()},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
    ])
}

/// The status of a pod bound to a node whose containers all started, ready or (as
/// a readiness probe that does not pass yet) not. Init containers completed, except
/// sidecars (`restartPolicy: Always`), which run beside the containers and are ready
/// with them.
pub fn started(pod: &Pod, host_ip: &str, pod_ip: &str, ready: bool) -> Value {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let status_of = |c: &k8s_openapi::api::core::v1::Container, state: Value, ready: bool| {
        let image = c.image.clone().unwrap_or_default();
        json!({
            "name": c.name, "image": image, "imageID": format!("sim://{image}"),
            "containerID": format!("sim://{namespace}/{name}/{}", c.name),
            "ready": ready, "started": true, "restartCount": 0, "state": state,
        })
    };
    let containers: Vec<Value> = spec
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| status_of(c, json!({"running": {"startedAt": now()}}), ready))
        .collect();
    let init_containers: Vec<Value> = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            if c.restart_policy.as_deref() == Some("Always") {
                return status_of(c, json!({"running": {"startedAt": now()}}), ready);
            }
            let done = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now(), "finishedAt": now()}});
            status_of(c, done, true)
        })
        .collect();
    json!({"status": {
        "phase": "Running", "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": now(),
        "conditions": conditions(ready),
        "containerStatuses": containers,
        "initContainerStatuses": init_containers,
    }})
}

/// The status after `action` on `container` (all containers when `None`), or why it
/// cannot be done.
pub fn after(
    pod: &Pod,
    container: Option<&str>,
    action: Action,
    exit_code: i32,
) -> Result<Value, String> {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if phase != "Running" {
        return Err(format!("the pod is {phase}, not Running"));
    }
    let mut statuses: Vec<ContainerStatus> = status
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    if let Some(name) = container
        && !statuses.iter().any(|s| s.name == name)
    {
        let known: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "the pod has no container {name} (it has: {})",
            known.join(", ")
        ));
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let (exit_code, reason) = match action {
        Action::Restart | Action::Finish | Action::Ready => (0, "Completed"),
        Action::Fail => (if exit_code == 0 { 1 } else { exit_code }, "Error"),
    };
    let restarts = match action {
        Action::Restart => true,
        Action::Finish => policy == "Always",
        Action::Fail => policy != "Never",
        Action::Ready => false,
    };
    let terminated =
        json!({"exitCode": exit_code, "reason": reason, "startedAt": now(), "finishedAt": now()});
    let mut patched = Vec::new();
    for status in &mut statuses {
        let mut value = serde_json::to_value(&*status).map_err(|e| e.to_string())?;
        if container.is_none_or(|name| name == status.name) {
            if action == Action::Ready {
                if status.state.as_ref().is_some_and(|s| s.running.is_none()) {
                    return Err(format!("the container {} is not running", status.name));
                }
                value["ready"] = json!(true);
            } else if restarts {
                value["restartCount"] = json!(status.restart_count + 1);
                value["lastState"] = json!({"terminated": terminated});
                value["state"] = if action == Action::Fail {
                    json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}})
                } else {
                    json!({"running": {"startedAt": now()}})
                };
                value["ready"] = json!(action != Action::Fail);
            } else {
                value["state"] = json!({"terminated": terminated});
                value["ready"] = json!(false);
            }
            value["started"] = json!(value["state"].get("running").is_some());
        }
        patched.push(value);
    }
    let terminated_code = |s: &Value| s["state"]["terminated"]["exitCode"].as_i64();
    let ended = patched.iter().all(|s| terminated_code(s).is_some());
    let ready = patched.iter().all(|s| s["ready"] == json!(true));
    let mut patch =
        json!({"status": {"containerStatuses": patched, "conditions": conditions(ready)}});
    if ended {
        let failed = patched.iter().any(|s| terminated_code(s) != Some(0));
        patch["status"]["phase"] = json!(if failed { "Failed" } else { "Succeeded" });
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(policy: &str, containers: &[&str]) -> Pod {
        let specs: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "nginx"}))
            .collect();
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"restartPolicy": policy, "containers": specs},
        }))
        .unwrap();
        let status = started(&pod, "127.0.0.1", "10.244.0.2", true);
        pod.status = Some(serde_json::from_value(status["status"].clone()).unwrap());
        pod
    }

    fn act(pod: &mut Pod, container: Option<&str>, action: Action, exit_code: i32) {
        let patch = after(pod, container, action, exit_code).unwrap();
        let mut status = serde_json::to_value(pod.status.take()).unwrap();
        for (key, value) in patch["status"].as_object().unwrap() {
            status[key] = value.clone();
        }
        pod.status = Some(serde_json::from_value(status).unwrap());
    }

    fn container(pod: &Pod, index: usize) -> ContainerStatus {
        pod.status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[index]
            .clone()
    }

    fn phase(pod: &Pod) -> &str {
        pod.status.as_ref().unwrap().phase.as_deref().unwrap()
    }

    #[test]
    fn a_started_pod_runs_with_its_ip_and_ready_containers() {
        let pod = running("Always", &["web", "sidecar"]);
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.244.0.2"));
        assert!(container(&pod, 0).ready && container(&pod, 1).ready);
    }

    #[test]
    fn a_sidecar_runs_beside_the_containers_and_a_plain_init_container_completes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {
                "initContainers": [
                    {"name": "migrate", "image": "m"},
                    {"name": "proxy", "image": "p", "restartPolicy": "Always"},
                ],
                "containers": [{"name": "web", "image": "w"}],
            },
        }))
        .unwrap();
        for ready in [true, false] {
            let status: k8s_openapi::api::core::v1::PodStatus = serde_json::from_value(
                started(&pod, "10.0.0.1", "10.244.0.2", ready)["status"].clone(),
            )
            .unwrap();
            let init = status.init_container_statuses.unwrap();
            let state = |i: usize| init[i].state.clone().unwrap();
            assert_eq!(
                state(0).terminated.unwrap().reason.as_deref(),
                Some("Completed")
            );
            assert!(state(1).running.is_some(), "the sidecar runs");
            assert_eq!(
                init[1].ready, ready,
                "the sidecar is ready with the containers"
            );
            assert_eq!(status.host_ips.unwrap()[0].ip, "10.0.0.1");
            let conditions = status.conditions.unwrap();
            assert!(
                conditions
                    .iter()
                    .any(|c| c.type_ == "PodReadyToStartContainers" && c.status == "True")
            );
        }
    }

    #[test]
    fn a_restart_raises_the_count_and_keeps_the_pod_running() {
        let mut pod = running("Always", &["web", "sidecar"]);
        act(&mut pod, Some("web"), Action::Restart, 0);
        act(&mut pod, Some("web"), Action::Restart, 0);
        assert_eq!(container(&pod, 0).restart_count, 2);
        assert_eq!(container(&pod, 1).restart_count, 0);
        assert_eq!(phase(&pod), "Running");
        assert!(container(&pod, 0).ready);
    }

    #[test]
    fn a_failure_crash_loops_under_always_and_fails_the_pod_under_never() {
        let mut always = running("Always", &["web"]);
        act(&mut always, None, Action::Fail, 0);
        let web = container(&always, 0);
        assert_eq!(phase(&always), "Running");
        assert!(!web.ready);
        assert_eq!(web.restart_count, 1);
        assert_eq!(
            web.state.unwrap().waiting.unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        // Restarting it brings it back.
        act(&mut always, None, Action::Restart, 0);
        assert!(container(&always, 0).ready);

        let mut never = running("Never", &["job"]);
        act(&mut never, None, Action::Fail, 3);
        assert_eq!(phase(&never), "Failed");
        let terminated = container(&never, 0).state.unwrap().terminated.unwrap();
        assert_eq!(terminated.exit_code, 3);
    }

    #[test]
    fn finishing_succeeds_a_pod_once_every_container_ended() {
        let mut pod = running("OnFailure", &["a", "b"]);
        act(&mut pod, Some("a"), Action::Finish, 0);
        assert_eq!(phase(&pod), "Running");
        act(&mut pod, Some("b"), Action::Finish, 0);
        assert_eq!(phase(&pod), "Succeeded");
        assert_eq!(
            after(&pod, None, Action::Restart, 0).unwrap_err(),
            "the pod is Succeeded, not Running"
        );
    }

    #[test]
    fn a_pod_started_unready_becomes_ready_on_request() {
        let mut pod = running("Always", &["web"]);
        let status = started(&pod, "127.0.0.1", "10.244.0.2", false);
        pod.status = Some(serde_json::from_value(status["status"].clone()).unwrap());
        assert_eq!(phase(&pod), "Running");
        assert!(!container(&pod, 0).ready);
        act(&mut pod, None, Action::Ready, 0);
        assert!(container(&pod, 0).ready);
        let conditions = pod.status.as_ref().unwrap().conditions.clone().unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
    }

    #[test]
    fn an_unknown_container_is_named_with_the_ones_there_are() {
        let pod = running("Always", &["web"]);
        assert_eq!(
            after(&pod, Some("db"), Action::Restart, 0).unwrap_err(),
            "the pod has no container db (it has: web)"
        );
    }
}
