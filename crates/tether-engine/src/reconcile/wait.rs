//! Waiting for objects to be ready: what a wave of a workflow waits for before it
//! starts, a phase's hooks, and `--wait`. Each look reads the objects and judges them
//! by [`tether_core::readiness`]; a failure (a failed Job) ends the wait at once.
//! Also waiting for an object to be gone ([`deleted`]).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Endpoints;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PropagationPolicy};

use super::outcome::{Blocker, ObjectFailure};
use crate::cluster::Resources;
use crate::driver::Poll;
use tether_core::health::HealthChecks;
use tether_core::k8s::ObjectKey;
use tether_core::readiness::{Readiness, assess};
use tether_core::render::RenderedObject;
use tether_core::workflow::{Gate, Rule, WaveGate};

/// What `--wait` is told after each look: the workloads not ready yet with their
/// state, and how many workloads there are.
pub type WaitProgress<'a> = dyn Fn(&[(ObjectKey, String)], usize) + Sync + 'a;

/// What a wait tells after each look: the objects not ready yet, and why.
pub type NotReady<'a> = dyn Fn(&[(ObjectKey, String)]) + Sync + 'a;

/// How often the objects are looked at.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// How long the deletion of an object to make again may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until every gate is ready. `Err` with the blockers when one failed (or an
/// object it names failed to apply: `failed_here`), or when `timeout` ran out.
/// After each look, `progress` gets what is not ready yet.
pub(super) async fn wait_for(
    client: &Client,
    checks: &HealthChecks,
    gates: &[WaveGate],
    timeout: Duration,
    failed_here: &HashMap<ObjectKey, String>,
    progress: &NotReady<'_>,
) -> Result<(), Vec<Blocker>> {
    let mut poll = Poll::new(LOOK_EVERY, timeout);
    let mut kinds: BTreeSet<(String, String)> = gates
        .iter()
        .map(|g| (g.gate.api_version.clone(), g.gate.key.kind.clone()))
        .collect();
    kinds.insert(("v1".into(), "Endpoints".into()));
    let mut resources = Resources::discover(client, &kinds).await.ok();
    let mut pending: Vec<(&WaveGate, String)> = gates.iter().map(|g| (g, String::new())).collect();
    loop {
        let mut still = Vec::new();
        let mut failed = Vec::new();
        for (gate, _) in pending {
            let state = match failed_here.get(&gate.gate.key) {
                Some(why) => Readiness::Failed(format!("its apply failed: {why}")),
                None => look(client, checks, resources.as_ref(), &gate.gate).await,
            };
            match state {
                Readiness::Ready => {}
                Readiness::Waiting(why) => still.push((gate, why)),
                Readiness::Failed(why) => failed.push(blocker(gate, why, true)),
            }
        }
        let not_ready: Vec<(ObjectKey, String)> = still
            .iter()
            .map(|(g, why)| (g.gate.key.clone(), why.clone()))
            .collect();
        progress(&not_ready);
        if failed.is_empty() && still.is_empty() {
            return Ok(());
        }
        if !failed.is_empty() || !poll.next().await {
            failed.extend(still.into_iter().map(|(g, why)| blocker(g, why, false)));
            return Err(failed);
        }
        // A kind the server did not serve may be defined by now (a CRD of this apply).
        if resources.is_none() || still.iter().any(|(_, why)| why.starts_with(UNSERVED)) {
            resources = Resources::discover(client, &kinds).await.ok();
        }
        pending = still;
    }
}

fn blocker(gate: &WaveGate, state: String, failed: bool) -> Blocker {
    Blocker {
        key: gate.gate.key.clone(),
        state,
        failed,
        external: gate.external,
        needed_by: gate.needed_by.clone(),
    }
}

const UNSERVED: &str = "the server does not serve";

/// One look at a gate's object (and a Service's Endpoints, when asked for).
async fn look(
    client: &Client,
    checks: &HealthChecks,
    resources: Option<&Resources>,
    gate: &Gate,
) -> Readiness {
    let key = &gate.key;
    let api = resources.ok_or(()).and_then(|r| {
        r.api(&gate.api_version, &key.kind, key.namespace.as_deref())
            .map_err(|_| ())
    });
    let Ok(api) = api else {
        return Readiness::Waiting(format!("{UNSERVED} {} {}", gate.api_version, key.kind));
    };
    let object = match api.get_opt(&key.name).await {
        Ok(found) => found.map(|o| serde_json::to_value(o).unwrap_or_default()),
        Err(e) => return Readiness::Waiting(format!("cannot read it: {e}")),
    };
    let endpoints = match (&gate.rule, &key.namespace) {
        (Rule::Endpoints, Some(namespace)) => {
            let api = kube::Api::<Endpoints>::namespaced(client.clone(), namespace);
            match api.get_opt(&key.name).await {
                Ok(found) => found.map(|e| serde_json::to_value(e).unwrap_or_default()),
                Err(e) => return Readiness::Waiting(format!("cannot read its endpoints: {e}")),
            }
        }
        _ => None,
    };
    assess(
        &key.kind,
        &gate.rule,
        object.as_ref(),
        endpoints.as_ref(),
        checks,
    )
}

/// Waits until the workloads among `objects` are ready (Deployments available,
/// StatefulSets and DaemonSets ready, Pods ready, Jobs complete), and the objects of a
/// kind with a health check healthy, and returns the ones that were not when
/// `timeout` ran out or that failed, with their state. After each look, `progress`
/// gets the ones still waited for and the number of workloads.
pub(super) async fn wait_ready(
    client: &Client,
    checks: &HealthChecks,
    objects: &[RenderedObject],
    timeout: Duration,
    progress: &WaitProgress<'_>,
) -> Vec<(ObjectKey, String)> {
    let gates: Vec<WaveGate> = objects
        .iter()
        .filter(|o| {
            matches!(
                o.kind.as_str(),
                "Deployment" | "StatefulSet" | "DaemonSet" | "Pod" | "Job"
            ) || checks.covers(&o.api_version, &o.kind)
        })
        .map(|o| WaveGate {
            gate: Gate {
                api_version: o.api_version.clone(),
                key: o.key(),
                rule: Rule::BuiltIn,
            },
            external: false,
            needed_by: Vec::new(),
        })
        .collect();
    let workloads = gates.len();
    let shown = |not_ready: &[(ObjectKey, String)]| progress(not_ready, workloads);
    match wait_for(client, checks, &gates, timeout, &HashMap::new(), &shown).await {
        Ok(()) => Vec::new(),
        Err(blockers) => blockers.into_iter().map(|b| (b.key, b.state)).collect(),
    }
}

/// Deletes an object to make again (its pods first, as `kubectl replace --force`
/// does) and waits until it is gone; `doing` names why in a failure.
pub(super) async fn deleted(
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    doing: &str,
) -> Result<(), ObjectFailure> {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    let failed = |e: kube::Error| ObjectFailure::Request {
        message: format!("{doing}: {}", ObjectFailure::of_kube_error(&e)),
    };
    match api.delete(&key.name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(()),
        Err(e) => return Err(failed(e)),
    }
    let mut poll = Poll::new(Duration::from_millis(250), DELETE_TIMEOUT);
    loop {
        match api.get_opt(&key.name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) if poll.next().await => {}
            Ok(Some(_)) => {
                return Err(ObjectFailure::Request {
                    message: format!(
                        "{doing}: still being deleted after {}s",
                        DELETE_TIMEOUT.as_secs()
                    ),
                });
            }
            Err(e) => return Err(failed(e)),
        }
    }
}
