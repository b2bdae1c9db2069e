//! When an object is ready, from its state as the server gives it: the built-in rule
//! of each kind a workflow waits for, the health checks of custom kinds
//! ([`crate::health`]), kstatus's generic rules for any other kind, and the rules a
//! user writes (`ready_when`). Pure: the caller reads the object (and a Service's
//! Endpoints); tested with recorded object states.

use serde_json::Value;

use crate::health::{HealthChecks, Verdict};
use crate::workflow::Rule;

/// An object's readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Not yet; what it is waiting for.
    Waiting(String),
    /// It will not become ready without a change (a failed Job, a deadline passed).
    Failed(String),
}

/// The readiness of an object of `kind` by `rule`; `object` is `None` when it does
/// not exist, `endpoints` is the Service's Endpoints object (for
/// [`Rule::Endpoints`]). By the built-in rule, a kind with a health check in `checks`
/// is judged by it.
pub fn assess(
    kind: &str,
    rule: &Rule,
    object: Option<&Value>,
    endpoints: Option<&Value>,
    checks: &HealthChecks,
) -> Readiness {
    let Some(object) = object else {
        return Readiness::Waiting("does not exist".into());
    };
    match rule {
        Rule::BuiltIn => match checks.judge(object) {
            Some(verdict) => checked(object, verdict),
            None => built_in(kind, object),
        },
        Rule::Condition(wanted) => match condition(object, wanted) {
            Some(c) if c.status == "True" => Readiness::Ready,
            Some(c) => Readiness::Waiting(c.describe(wanted)),
            None => Readiness::Waiting(format!("no {wanted} condition yet")),
        },
        Rule::Field { path, value } => match field(object, path) {
            Some(found) if scalar_text(found) == *value => Readiness::Ready,
            Some(found) => Readiness::Waiting(format!(
                "{path} is {}, waiting for {value}",
                scalar_text(found)
            )),
            None => Readiness::Waiting(format!("{path} is not set, waiting for {value}")),
        },
        Rule::Endpoints => {
            let ready = endpoints
                .and_then(|e| e["subsets"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|subset| subset["addresses"].as_array())
                .map(Vec::len)
                .sum::<usize>();
            if ready > 0 {
                Readiness::Ready
            } else {
                Readiness::Waiting("no ready endpoints".into())
            }
        }
    }
}

/// The built-in rule of a kind; existence for kinds without one.
fn built_in(kind: &str, object: &Value) -> Readiness {
    match kind {
        "Deployment" => deployment(object),
        "StatefulSet" => stateful_set(object),
        "DaemonSet" => daemon_set(object),
        "Job" => job(object),
        "Pod" => pod(object),
        "PersistentVolumeClaim" => match phase(object) {
            "Bound" => Readiness::Ready,
            "Lost" => Readiness::Failed("the claim lost its volume (phase Lost)".into()),
            other => Readiness::Waiting(format!("phase {other}, not Bound")),
        },
        "CustomResourceDefinition" => match condition(object, "Established") {
            Some(c) if c.status == "True" => Readiness::Ready,
            _ => match condition(object, "NamesAccepted") {
                Some(c) if c.status == "False" => Readiness::Failed(c.describe("NamesAccepted")),
                _ => Readiness::Waiting("not Established yet".into()),
            },
        },
        "Namespace" => match phase(object) {
            "Active" => Readiness::Ready,
            "Terminating" => Readiness::Failed("the namespace is being deleted".into()),
            other => Readiness::Waiting(format!("phase {other}")),
        },
        _ => generic(object),
    }
}

/// A health check's verdict, with the object's Ready condition when it has one (what
/// its controller says of it).
fn checked(object: &Value, verdict: Verdict) -> Readiness {
    let said = condition(object, "Ready")
        .filter(|c| c.status != "True")
        .map(|c| format!("; {}", c.describe("Ready")))
        .unwrap_or_default();
    match verdict {
        Verdict::Current => Readiness::Ready,
        Verdict::NotObserved {
            observed,
            generation,
        } => Readiness::Waiting(format!(
            "the controller has seen generation {observed}, not {generation}"
        )),
        Verdict::InProgress(why) => Readiness::Waiting(format!("health check: {why}{said}")),
        Verdict::Failed(why) => Readiness::Failed(format!("health check failed: {why}{said}")),
        Verdict::Unknown(why) => Readiness::Waiting(format!("health check: {why}")),
    }
}

/// kstatus's rules for a kind with no rule of its own: being deleted, or its
/// controller has not seen the latest spec, is not ready; `Stalled` is failed;
/// `Reconciling`, or a `Ready` condition that is not `True`, is waiting; anything else
/// (a ConfigMap, an object without status) is ready.
fn generic(object: &Value) -> Readiness {
    if !object["metadata"]["deletionTimestamp"].is_null() {
        return Readiness::Waiting("it is being deleted".into());
    }
    if let (Some(observed), Some(generation)) = (
        object["status"]["observedGeneration"].as_i64(),
        object["metadata"]["generation"].as_i64(),
    ) && observed < generation
    {
        return Readiness::Waiting(format!(
            "the controller has seen generation {observed}, not {generation}"
        ));
    }
    if let Some(c) = condition(object, "Stalled").filter(|c| c.status == "True") {
        return Readiness::Failed(c.describe("Stalled"));
    }
    if let Some(c) = condition(object, "Reconciling").filter(|c| c.status == "True") {
        return Readiness::Waiting(c.describe("Reconciling"));
    }
    match condition(object, "Ready") {
        Some(c) if c.status != "True" => Readiness::Waiting(c.describe("Ready")),
        _ => Readiness::Ready,
    }
}

/// A status condition.
struct Condition<'a> {
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

impl Condition<'_> {
    fn describe(&self, kind: &str) -> String {
        let mut text = format!("{kind} is {}", self.status);
        if !self.reason.is_empty() {
            text.push_str(&format!(" ({})", self.reason));
        }
        if !self.message.is_empty() {
            text.push_str(&format!(": {}", self.message));
        }
        text
    }
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<Condition<'a>> {
    let found = object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(kind))?;
    let text = |field: &str| found[field].as_str().unwrap_or_default();
    Some(Condition {
        status: text("status"),
        reason: text("reason"),
        message: text("message"),
    })
}

/// The value at a dotted path (`status.phase`, `status.conditions.0.type`).
fn field<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(object, |value, step| match value {
        Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => value.get(step),
    })
}

/// A scalar as a user writes it in `value:` (`Bound`, `3`, `true`).
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn phase(object: &Value) -> &str {
    object["status"]["phase"].as_str().unwrap_or("Pending")
}

fn count(object: &Value, path: &str) -> i64 {
    field(object, path).and_then(Value::as_i64).unwrap_or(0)
}

/// Has the controller seen the latest spec?
fn observed(object: &Value) -> bool {
    count(object, "status.observedGeneration") >= count(object, "metadata.generation")
}

fn wanted_replicas(object: &Value) -> i64 {
    field(object, "spec.replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn deployment(object: &Value) -> Readiness {
    if let Some(c) = condition(object, "Progressing")
        && c.status == "False"
        && c.reason == "ProgressDeadlineExceeded"
    {
        return Readiness::Failed(c.describe("Progressing"));
    }
    if !observed(object) {
        return Readiness::Waiting("the controller has not seen the new spec yet".into());
    }
    let want = wanted_replicas(object);
    let updated = count(object, "status.updatedReplicas");
    let available = count(object, "status.availableReplicas");
    // Available counts old pods too: while any runs, the new ones may not all be
    // available yet (a surge of one: one old and one new available, one new starting).
    let old = count(object, "status.replicas") - updated;
    if updated < want || available < want {
        Readiness::Waiting(format!(
            "{available}/{want} replicas available, {updated}/{want} updated"
        ))
    } else if old > 0 {
        Readiness::Waiting(format!("{old} old replicas still running"))
    } else {
        Readiness::Ready
    }
}

fn stateful_set(object: &Value) -> Readiness {
    if !observed(object) {
        return Readiness::Waiting("the controller has not seen the new spec yet".into());
    }
    let want = wanted_replicas(object);
    let ready = count(object, "status.readyReplicas");
    let status = &object["status"];
    let rolled = status["updateRevision"].is_null()
        || status["updateRevision"] == status["currentRevision"]
        || count(object, "status.updatedReplicas") >= want;
    if ready >= want && rolled {
        Readiness::Ready
    } else {
        Readiness::Waiting(format!("{ready}/{want} replicas ready"))
    }
}

fn daemon_set(object: &Value) -> Readiness {
    if !observed(object) {
        return Readiness::Waiting("the controller has not seen the new spec yet".into());
    }
    let want = count(object, "status.desiredNumberScheduled");
    let ready = count(object, "status.numberReady");
    let updated = count(object, "status.updatedNumberScheduled");
    if ready >= want && updated >= want {
        Readiness::Ready
    } else {
        Readiness::Waiting(format!(
            "{ready}/{want} pods ready, {updated}/{want} updated"
        ))
    }
}

fn job(object: &Value) -> Readiness {
    if condition(object, "Complete").is_some_and(|c| c.status == "True") {
        return Readiness::Ready;
    }
    if let Some(c) = condition(object, "Failed")
        && c.status == "True"
    {
        return Readiness::Failed(format!("the Job failed: {}", c.describe("Failed")));
    }
    let want = field(object, "spec.completions")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let succeeded = count(object, "status.succeeded");
    let failed = count(object, "status.failed");
    let mut text = format!("{succeeded}/{want} completions");
    if failed > 0 {
        let limit = field(object, "spec.backoffLimit")
            .and_then(Value::as_i64)
            .unwrap_or(6);
        text.push_str(&format!(", {failed} failed pods (backoff limit {limit})"));
    }
    Readiness::Waiting(text)
}

fn pod(object: &Value) -> Readiness {
    match phase(object) {
        "Succeeded" => return Readiness::Ready,
        "Failed" => {
            let reason = object["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|c| {
                    let terminated = &c["state"]["terminated"];
                    terminated.is_object().then(|| {
                        format!(
                            "container {} exited with {} ({})",
                            c["name"].as_str().unwrap_or_default(),
                            terminated["exitCode"],
                            terminated["reason"].as_str().unwrap_or("Error")
                        )
                    })
                })
                .unwrap_or_else(|| "the pod failed".into());
            return Readiness::Failed(reason);
        }
        _ => {}
    }
    match condition(object, "Ready") {
        Some(c) if c.status == "True" => Readiness::Ready,
        _ => {
            let waiting = object["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|c| c["state"]["waiting"]["reason"].as_str());
            match waiting {
                Some(reason) => Readiness::Waiting(format!("phase {}, {reason}", phase(object))),
                None => Readiness::Waiting(format!("phase {}, not Ready", phase(object))),
            }
        }
    }
}

/// Where a controller's rollout is, in `kubectl rollout status`'s terms: `Ready` once
/// every pod runs the latest template (for a StatefulSet with a partition, the pods
/// from the partition up). A paused Deployment and an `OnDelete` strategy fail at once:
/// waiting would not end.
pub fn rollout(kind: &str, name: &str, object: &Value) -> Readiness {
    let spec = &object["spec"];
    let strategy = match kind {
        "Deployment" => spec["strategy"]["type"].as_str(),
        _ => spec["updateStrategy"]["type"].as_str(),
    };
    if strategy == Some("OnDelete") {
        return Readiness::Failed(format!(
            "{kind} {name} replaces its pods only when they are deleted (update_strategy: OnDelete): there is no rollout to follow"
        ));
    }
    if !observed(object) {
        return Readiness::Waiting(format!(
            "waiting for the {kind} controller to see {name}'s new spec"
        ));
    }
    match kind {
        "Deployment" => deployment_rollout(name, object),
        "StatefulSet" => stateful_set_rollout(object),
        "DaemonSet" => daemon_set_rollout(object),
        _ => built_in(kind, object),
    }
}

fn deployment_rollout(name: &str, object: &Value) -> Readiness {
    if let Readiness::Failed(why) = deployment(object) {
        return Readiness::Failed(why);
    }
    if object["spec"]["paused"].as_bool() == Some(true) {
        return Readiness::Failed(format!(
            "Deployment {name} is paused (paused: true): its rollout waits until it is resumed"
        ));
    }
    let want = wanted_replicas(object);
    let updated = count(object, "status.updatedReplicas");
    let replicas = count(object, "status.replicas");
    let available = count(object, "status.availableReplicas");
    if updated < want {
        Readiness::Waiting(format!("{updated} of {want} new replicas updated"))
    } else if replicas > updated {
        Readiness::Waiting(format!(
            "{} old replicas pending termination",
            replicas - updated
        ))
    } else if available < updated {
        Readiness::Waiting(format!(
            "{available} of {updated} updated replicas available"
        ))
    } else {
        Readiness::Ready
    }
}

fn stateful_set_rollout(object: &Value) -> Readiness {
    let want = wanted_replicas(object);
    let ready = count(object, "status.readyReplicas");
    if ready < want {
        return Readiness::Waiting(format!("{ready} of {want} pods ready"));
    }
    let updated = count(object, "status.updatedReplicas");
    if let Some(partition) = field(object, "spec.updateStrategy.rollingUpdate.partition")
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
    {
        let to_update = (want - partition).max(0);
        return match updated < to_update {
            true => Readiness::Waiting(format!(
                "{updated} of {to_update} pods above the partition ({partition}) updated"
            )),
            false => Readiness::Ready,
        };
    }
    let status = &object["status"];
    if !status["updateRevision"].is_null() && status["updateRevision"] != status["currentRevision"]
    {
        return Readiness::Waiting(format!(
            "{updated} of {want} pods at revision {}",
            status["updateRevision"].as_str().unwrap_or("?")
        ));
    }
    Readiness::Ready
}

fn daemon_set_rollout(object: &Value) -> Readiness {
    let want = count(object, "status.desiredNumberScheduled");
    let updated = count(object, "status.updatedNumberScheduled");
    let available = count(object, "status.numberAvailable");
    if updated < want {
        Readiness::Waiting(format!("{updated} of {want} new pods updated"))
    } else if available < want {
        Readiness::Waiting(format!("{available} of {want} updated pods available"))
    } else {
        Readiness::Ready
    }
}
