//! What `tether install` puts in a cluster, as data (pure): the daemon's Namespace,
//! the Source and Cluster CRDs, its RBAC, a StatefulSet whose pods keep their event outboxes on a
//! volume of their own, a Service for the webhooks and a PodDisruptionBudget.
//! `tether install --export` prints it, and `deploy/` holds it.

use kube::CustomResourceExt;
use serde_json::{Value, json};

use tether_api::cluster_spec::Cluster;
use tether_api::source_spec::Source;

/// The label every installed object carries; `tether uninstall` and `tether check`
/// find them by it.
pub const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "tether");

/// The Secret holding the webhook secret (key `secret`), made by `tether install`
/// with random bytes; never part of an export, so that no secret goes to Git.
pub const WEBHOOK_SECRET: &str = "tether-webhook";

/// The name of the daemon's StatefulSet, ServiceAccount, Service and roles.
pub const NAME: &str = "tether";

/// Where the daemon's pods keep what must outlive them (event outboxes).
pub const STATE_MOUNT: &str = "/var/lib/tether";

/// The image the release build produces (`scripts/image`), tagged with the version.
pub fn default_image() -> String {
    format!("ghcr.io/tether-dev/tether:{}", env!("CARGO_PKG_VERSION"))
}

/// How to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallOptions {
    /// The daemon's namespace.
    pub namespace: String,
    pub image: String,
    pub replicas: u32,
    /// The state volume's StorageClass (default: the cluster's default class).
    pub storage_class: Option<String>,
}

impl InstallOptions {
    pub fn new() -> Self {
        InstallOptions {
            namespace: "tether-system".into(),
            image: default_image(),
            replicas: 2,
            storage_class: None,
        }
    }
}

impl Default for InstallOptions {
    fn default() -> Self {
        InstallOptions::new()
    }
}

/// The objects to apply, in the order they must be applied: the Namespace before
/// what lives in it, the CRD before anything could name a Source.
pub fn manifests(options: &InstallOptions) -> Vec<Value> {
    let ns = options.namespace.as_str();
    let mut objects = vec![namespace(ns)];
    objects.extend(crds());
    objects.extend([service_account(ns), cluster_role()]);
    objects.extend(people_roles());
    objects.extend([
        cluster_role_binding(ns),
        leader_role(ns),
        leader_role_binding(ns),
        service(ns),
        stateful_set(options),
        disruption_budget(ns),
    ]);
    objects
}

/// The CRDs (`tether crd`): Source and Cluster, labelled as installed.
pub fn crds() -> Vec<Value> {
    [
        serde_json::to_value(Source::crd()),
        serde_json::to_value(Cluster::crd()),
    ]
    .into_iter()
    .map(|crd| {
        let mut crd = crd.unwrap_or(Value::Null);
        tether_api::crd::without_rust_formats(&mut crd);
        labelled(&mut crd);
        crd
    })
    .collect()
}

/// Adds the part-of label to an object's metadata.
fn labelled(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(labels) = labels {
            labels.insert(PART_OF.0.into(), PART_OF.1.into());
        }
    }
}

fn labels() -> Value {
    json!({ "app.kubernetes.io/name": NAME, PART_OF.0: PART_OF.1 })
}

fn selector() -> Value {
    json!({ "app.kubernetes.io/name": NAME })
}

fn namespace(ns: &str) -> Value {
    // Its pods follow the `restricted` Pod Security profile; servers from 1.23 enforce it.
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": ns,
            "labels": {
                "app.kubernetes.io/name": NAME,
                PART_OF.0: PART_OF.1,
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        },
    })
}

fn service_account(ns: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": NAME, "namespace": ns, "labels": labels() },
    })
}

const ALL_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// What the daemon may do: no wildcard, no cluster-admin. Every kind tether renders
/// from models (examples/ render all of them), Nodes for Node models (labels, taints,
/// cordon, removal) and evictions to drain a leaving host, its Sources and their
/// status, Events, and impersonating the Sources' ServiceAccounts. A KubernetesResourceInstance may name another kind: add a rule
/// for it (the server's refusal is reported per object until then).
fn cluster_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": NAME, "labels": labels() },
        "rules": [
            { "apiGroups": [""], "verbs": ALL_VERBS, "resources": [
                "namespaces", "serviceaccounts", "configmaps", "secrets", "services",
                "pods", "limitranges", "resourcequotas", "persistentvolumeclaims",
            ] },
            { "apiGroups": [""], "resources": ["nodes"],
              "verbs": ["get", "list", "watch", "update", "patch", "delete"] },
            { "apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"] },
            { "apiGroups": ["apps"], "verbs": ALL_VERBS,
              "resources": ["deployments", "statefulsets", "daemonsets"] },
            { "apiGroups": ["apps"], "resources": ["replicasets"],
              "verbs": ["get", "list", "watch"] },
            { "apiGroups": ["batch"], "resources": ["jobs"], "verbs": ALL_VERBS },
            { "apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
              "verbs": ALL_VERBS },
            { "apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
              "verbs": ["get", "list", "watch"] },
            { "apiGroups": ["tether.dev"], "resources": ["sources"],
              "verbs": ["get", "list", "watch", "patch"] },
            { "apiGroups": ["tether.dev"], "resources": ["sources/status"],
              "verbs": ["get", "patch", "update"] },
            { "apiGroups": ["tether.dev"], "resources": ["clusters"],
              "verbs": ["get", "list", "watch"] },
            { "apiGroups": ["", "events.k8s.io"], "resources": ["events"],
              "verbs": ["create", "patch"] },
            // A Source acts as its ServiceAccount (spec.serviceAccountName,
            // --default-service-account), impersonated with the groups of every
            // ServiceAccount.
            { "apiGroups": [""], "resources": ["serviceaccounts", "groups"],
              "verbs": ["impersonate"] },
            // The web page and API: who a request's bearer token is (TokenReview) and
            // what they may do (SubjectAccessReview); Kubernetes decides, not tether.
            { "apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
              "verbs": ["create"] },
            { "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
              "verbs": ["create"] },
        ],
    })
}

/// The ready-made roles of people on the web page and API, to bind per namespace with
/// a RoleBinding (`kubectl create rolebinding alice-views --clusterrole tether-viewer
/// --user alice -n team`): the daemon asks a SubjectAccessReview for each verb below in
/// the Source's namespace. The custom verbs on `sources` are not Kubernetes' own: RBAC
/// grants any verb, and only the daemon asks for them.
pub const PEOPLE_ROLES: [&str; 3] = ["tether-viewer", "tether-operator", "tether-host-admin"];

/// Seeing a Source's page and API: `get` (and `list`, `watch`) on `sources`.
const VIEW_SOURCES: [&str; 3] = ["get", "list", "watch"];

/// [`PEOPLE_ROLES`] with their rules:
/// - `tether-viewer` sees the namespace's Sources (their objects, pods, drift, plans,
///   events, hosts), and acts on nothing;
/// - `tether-operator` also acts on the workloads: `scale` (a slice's replica count),
///   `restart` (a slice's pods, by a commit), `rollback` (a slice to an earlier
///   image), `reconcile` (a Source now) on `sources`; `delete` on `pods` (recreate a
///   pod) and `create` on `pods/exec` (restart a pod's containers): cluster-only
///   actions the API server would ask the same rights for;
/// - `tether-host-admin` also acts on the hosts: `label` (assign and remove a host
///   label) and `lock` (lock and unlock a host) on `sources`.
fn people_roles() -> [Value; 3] {
    let role = |name: &str, mut rules: Vec<Value>| {
        rules.insert(
            0,
            json!({ "apiGroups": ["tether.dev"], "resources": ["sources"], "verbs": VIEW_SOURCES }),
        );
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": { "name": name, "labels": labels() },
            "rules": rules,
        })
    };
    let [viewer, operator, host_admin] = PEOPLE_ROLES;
    [
        role(viewer, Vec::new()),
        role(
            operator,
            vec![
                json!({ "apiGroups": ["tether.dev"], "resources": ["sources"],
                        "verbs": ["scale", "restart", "rollback", "reconcile"] }),
                json!({ "apiGroups": [""], "resources": ["pods"], "verbs": ["delete"] }),
                json!({ "apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"] }),
            ],
        ),
        role(
            host_admin,
            vec![
                json!({ "apiGroups": ["tether.dev"], "resources": ["sources"],
                         "verbs": ["label", "lock"] }),
            ],
        ),
    ]
}

fn cluster_role_binding(ns: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": NAME, "labels": labels() },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME },
        "subjects": [{ "kind": "ServiceAccount", "name": NAME, "namespace": ns }],
    })
}

const LEADER_ROLE: &str = "tether-leader-election";

/// The replicas' Leases (each member's, or the leader election's), in the daemon's namespace
/// only; the Role keeps its first name, so an upgrade replaces it in place.
fn leader_role(ns: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": { "name": LEADER_ROLE, "namespace": ns, "labels": labels() },
        "rules": [{ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"] }],
    })
}

fn leader_role_binding(ns: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": { "name": LEADER_ROLE, "namespace": ns, "labels": labels() },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LEADER_ROLE },
        "subjects": [{ "kind": "ServiceAccount", "name": NAME, "namespace": ns }],
    })
}

/// Webhooks (/hook/github, /hook/gitlab, /hook/generic, /hook/registry) and /metrics;
/// any replica may take a webhook (a push reaches the Sources' owners through their
/// annotation, a pull request or a registry's push is passed on to the other replicas).
fn service(ns: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": NAME, "namespace": ns, "labels": labels() },
        "spec": {
            "selector": selector(),
            "ports": [{ "name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP" }],
        },
    })
}

/// A StatefulSet, so that each replica keeps its volume when its pod moves: the event
/// outboxes on it are delivered by the replica that recorded them, after any restart.
/// The Lease's holder runs the Sources; the other takes over when it stops.
fn stateful_set(options: &InstallOptions) -> Value {
    // Written as the server stores it, defaults included: the list is atomic, so a
    // template short of them would differ at every apply and count as a change.
    let mut claim = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": { "name": "state", "creationTimestamp": null },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": "1Gi" } },
            "volumeMode": "Filesystem",
        },
        "status": { "phase": "Pending" },
    });
    if let Some(class) = &options.storage_class {
        claim["spec"]["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": NAME,
            "namespace": options.namespace,
            // `tether check` and `tether version` read the daemon's version here.
            "labels": { "app.kubernetes.io/name": NAME, PART_OF.0: PART_OF.1,
                        "app.kubernetes.io/version": env!("CARGO_PKG_VERSION") },
        },
        "spec": {
            "serviceName": NAME,
            "replicas": options.replicas,
            // Replicas are peers sharing the Sources: no reason to start them in turn.
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": selector() },
            "template": {
                "metadata": { "labels": labels() },
                "spec": pod_spec(&options.image),
            },
            "volumeClaimTemplates": [claim],
        },
    })
}

/// The daemon's pod, under the `restricted` Pod Security profile: non-root, read-only
/// root filesystem, no capabilities, RuntimeDefault seccomp.
fn pod_spec(image: &str) -> Value {
    // Settings as the variables each flag also reads: the command line stays `run`.
    let env = json!([
        { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
        { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
        // Where the other replicas pass webhooks on to this one.
        { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
        { "name": "TETHER_SOURCES", "value": "true" },
        { "name": "TETHER_SHARD", "value": "true" },
        { "name": "TETHER_LISTEN", "value": "0.0.0.0:8080" },
        { "name": "TETHER_LOG_FORMAT", "value": "json" },
        { "name": "TETHER_WEBHOOK_SECRET_FILE", "value": "/etc/tether/webhook/secret" },
        { "name": "TETHER_SHUTDOWN_TIMEOUT", "value": "20s" },
        { "name": "TETHER_CACHE_DIR", "value": "/cache/repos" },
        { "name": "TETHER_STATE_DIR", "value": STATE_MOUNT },
        { "name": "HOME", "value": "/cache" },
    ]);
    json!({
        "serviceAccountName": NAME,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [{
            "name": NAME,
            "image": image,
            "args": ["run"],
            "env": env,
            "ports": [{ "name": "http", "containerPort": 8080, "protocol": "TCP" }],
            // Timeouts for a busy node: a slow answer is not an unready daemon.
            "readinessProbe": {
                "httpGet": { "path": "/readyz", "port": "http" }, "periodSeconds": 5, "timeoutSeconds": 5,
            },
            "livenessProbe": {
                "httpGet": { "path": "/healthz", "port": "http" },
                "initialDelaySeconds": 30, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 3,
            },
            "resources": { "requests": { "cpu": "100m", "memory": "128Mi" }, "limits": { "memory": "512Mi" } },
            "securityContext": {
                "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                "runAsNonRoot": true, "capabilities": { "drop": ["ALL"] },
                "seccompProfile": { "type": "RuntimeDefault" },
            },
            "volumeMounts": [
                { "name": "cache", "mountPath": "/cache" },
                { "name": "state", "mountPath": STATE_MOUNT },
                { "name": "webhook-secret", "mountPath": "/etc/tether/webhook", "readOnly": true },
            ],
        }],
        "volumes": [
            // Git clones: fetched again after a move, so an emptyDir suffices.
            { "name": "cache", "emptyDir": { "sizeLimit": "2Gi" } },
            // Without the Secret the daemon runs with its webhooks off.
            { "name": "webhook-secret", "secret": { "secretName": WEBHOOK_SECRET, "optional": true } },
        ],
    })
}

/// One replica stays through voluntary disruptions (node drains), so that a replica is
/// there to take over.
fn disruption_budget(ns: &str) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "name": NAME, "namespace": ns, "labels": labels() },
        "spec": { "minAvailable": 1, "selector": { "matchLabels": selector() } },
    })
}

/// The webhook Secret, holding `secret` (hex of random bytes, made by the caller).
pub fn webhook_secret(ns: &str, secret: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": WEBHOOK_SECRET, "namespace": ns, "labels": labels() },
        "type": "Opaque",
        "stringData": { "secret": secret },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    o["apiVersion"].as_str().unwrap(),
                    o["kind"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn the_namespace_and_the_crd_come_first_and_the_budget_last() {
        let objects = manifests(&InstallOptions::new());
        assert_eq!(kinds(&objects)[0], "v1 Namespace");
        assert_eq!(
            kinds(&objects)[1],
            "apiextensions.k8s.io/v1 CustomResourceDefinition"
        );
        assert_eq!(
            kinds(&objects).last().unwrap(),
            "policy/v1 PodDisruptionBudget"
        );
    }

    #[test]
    fn every_object_carries_the_part_of_label_and_no_secret_is_exported() {
        let objects = manifests(&InstallOptions::new());
        for object in &objects {
            assert_eq!(
                object["metadata"]["labels"][PART_OF.0], PART_OF.1,
                "{object}"
            );
            assert_ne!(object["kind"], "Secret");
        }
    }

    #[test]
    fn no_rule_grants_a_wildcard() {
        let roles = std::iter::once(cluster_role()).chain(people_roles());
        for rule in roles.flat_map(|role| role["rules"].as_array().unwrap().clone()) {
            for field in ["apiGroups", "resources", "verbs"] {
                for value in rule[field].as_array().unwrap() {
                    assert_ne!(value, "*", "{rule}");
                }
            }
        }
    }
}
