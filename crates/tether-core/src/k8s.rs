//! Facts about Kubernetes that the pure stages need: naming rules, which built-in
//! kinds are cluster-scoped, the order in which kinds are applied, and the namespaces
//! a watch or a discovery looks at ([`Scope`]).

use std::collections::BTreeSet;

/// The namespace given to namespaced objects of a KubernetesResourceInstance that
/// do not name one, as `kubectl apply` does without a context namespace.
pub const DEFAULT_NAMESPACE: &str = "default";

/// RFC 1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric,
/// at most 63 characters (namespaces, container names).
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters (most object names).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// RFC 1035 label: a 1123 label that starts with a letter (Service names).
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A label value: at most 63 of alphanumerics, '-', '_', '.', starting and ending
/// alphanumeric (or empty).
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Why `key` is not a label key, as the API server checks it: an optional prefix (a
/// DNS-1123 subdomain of at most 253 characters) and `/`, then a name of 1 to 63
/// alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty() || prefix.len() > 253 || !is_dns1123_subdomain(prefix))
    {
        return Some(format!(
            "its prefix \"{prefix}\" is not a DNS subdomain (lower case, digits, '-' and '.', at most 253)"
        ));
    }
    if name.is_empty() {
        return Some("its name (after the prefix) is empty".into());
    }
    if name.len() > 63 {
        return Some(format!("its name is {} characters, past 63", name.len()));
    }
    if name.contains('/') || !is_label_value(name) {
        return Some(format!(
            "its name \"{name}\" must be alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ));
    }
    None
}

/// Why `value` is not a label value (see [`is_label_value`]).
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > 63 {
        return Some(format!("it is {} characters, past 63", value.len()));
    }
    (!is_label_value(value)).then(|| {
        "it must be empty, or alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
            .to_string()
    })
}

/// A name fixed to satisfy [`is_dns1123_label`], for hints.
pub fn suggest_dns1123_label(s: &str) -> String {
    let lowered: String = s
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let trimmed = lowered.trim_matches('-');
    trimmed
        .chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// Built-in kinds that are not namespaced. Kinds not listed (custom resources
/// included) are treated as namespaced when they come without a namespace only if
/// they are known to be: unknown kinds keep what was written.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "APIService",
    "PriorityClass",
    "RuntimeClass",
    "IngressClass",
    "PodSecurityPolicy",
    "CertificateSigningRequest",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ComponentStatus",
];

/// Built-in namespaced kinds, which get [`DEFAULT_NAMESPACE`] when none is written.
const NAMESPACED: &[&str] = &[
    "Pod",
    "Service",
    "Endpoints",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "LimitRange",
    "ResourceQuota",
    "ReplicationController",
    "PodTemplate",
    "Event",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "ControllerRevision",
    "Job",
    "CronJob",
    "Role",
    "RoleBinding",
    "Ingress",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "Lease",
    "EndpointSlice",
];

pub fn is_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED.contains(&kind)
}

/// Is this a built-in kind that lives in a namespace?
pub fn is_namespaced_builtin(kind: &str) -> bool {
    NAMESPACED.contains(&kind)
}

/// The apiVersion of a built-in kind, for references that leave it out.
pub fn builtin_api_version(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "ControllerRevision" => {
            "apps/v1"
        }
        "Job" => "batch/v1",
        "CronJob" => "batch/v1beta1",
        "CustomResourceDefinition" => "apiextensions.k8s.io/v1",
        "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding" => {
            "rbac.authorization.k8s.io/v1"
        }
        "Ingress" | "NetworkPolicy" | "IngressClass" => "networking.k8s.io/v1",
        "PodDisruptionBudget" => "policy/v1beta1",
        "HorizontalPodAutoscaler" => "autoscaling/v1",
        "StorageClass" => "storage.k8s.io/v1",
        "Lease" => "coordination.k8s.io/v1",
        "Pod"
        | "Service"
        | "Endpoints"
        | "ConfigMap"
        | "Secret"
        | "ServiceAccount"
        | "PersistentVolumeClaim"
        | "PersistentVolume"
        | "Namespace"
        | "Node"
        | "LimitRange"
        | "ResourceQuota"
        | "ReplicationController" => "v1",
        _ => return None,
    })
}

/// The namespace an object of a KubernetesResourceInstance is applied in.
pub fn effective_namespace(object: &serde_json::Value) -> Option<String> {
    let kind = object.get("kind")?.as_str()?;
    let written = object
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty());
    match written {
        _ if is_cluster_scoped(kind) => None,
        Some(namespace) => Some(namespace.to_string()),
        None if NAMESPACED.contains(&kind) => Some(DEFAULT_NAMESPACE.to_string()),
        None => None,
    }
}

/// The API group of an apiVersion (`apps/v1` → `apps`, `v1` → ``).
pub fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Apply order: definitions and namespaces first, then what workloads use, then
/// workloads, then what routes to them; unknown kinds (custom resources) last.
/// Deletion runs in the reverse order.
pub fn apply_rank(kind: &str) -> u8 {
    match kind {
        "CustomResourceDefinition" => 0,
        "Namespace" => 1,
        "ResourceQuota" | "LimitRange" | "PriorityClass" | "StorageClass" | "RuntimeClass" => 2,
        "ServiceAccount" | "PodSecurityPolicy" => 3,
        "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding" => 4,
        "Secret" | "ConfigMap" => 5,
        "PersistentVolume" | "PersistentVolumeClaim" => 6,
        "Pod"
        | "ReplicationController"
        | "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "CronJob" => 7,
        "Service"
        | "Endpoints"
        | "EndpointSlice"
        | "HorizontalPodAutoscaler"
        | "PodDisruptionBudget"
        | "NetworkPolicy"
        | "Ingress"
        | "IngressClass" => 8,
        "APIService" | "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => 9,
        _ => 10,
    }
}

/// Identity of an object: API group, kind, namespace, name (not the version, so that
/// an object keeps its identity across API versions).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        ObjectKey {
            group: api_group(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The namespaces a watch (and a discovery) looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespaces(BTreeSet<String>),
}

impl Scope {
    /// Every namespace for no names, else just those.
    pub fn from_names(names: impl IntoIterator<Item = String>) -> Self {
        let names: BTreeSet<String> = names.into_iter().collect();
        if names.is_empty() {
            Scope::All
        } else {
            Scope::Namespaces(names)
        }
    }

    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(names) => names.contains(namespace),
        }
    }

    /// One watch per entry: `None` watches every namespace.
    pub fn watches(&self) -> Vec<Option<String>> {
        match self {
            Scope::All => vec![None],
            Scope::Namespaces(names) => names.iter().cloned().map(Some).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("demo-trust"));
        assert!(!is_dns1123_label("mysite_demo1"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_dns1035_label("web"));
        assert!(!is_dns1035_label("1web"));
        assert!(is_label_value("mysite_demo1"));
        assert_eq!(label_key_problem("app.kubernetes.io/name"), None);
        assert_eq!(label_key_problem("tier"), None);
        assert!(label_key_problem("-tier").is_some());
        assert!(label_key_problem("Example.COM/tier").is_some());
        assert!(label_key_problem("a/b/c").is_some());
        assert!(label_key_problem("example.com/").is_some());
        assert!(label_key_problem(&"x".repeat(64)).is_some());
        assert_eq!(label_value_problem(""), None);
        assert!(label_value_problem("two words").is_some());
        assert!(!is_label_value("_x"));
        assert_eq!(suggest_dns1123_label("MySite_demo1"), "mysite-demo1");
    }

    #[test]
    fn namespaces_default_only_for_known_namespaced_kinds() {
        let cm = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        assert_eq!(effective_namespace(&cm).as_deref(), Some("default"));
        let ns =
            serde_json::json!({"kind": "ClusterRole", "metadata": {"name": "a", "namespace": "x"}});
        assert_eq!(effective_namespace(&ns), None);
        let cr = serde_json::json!({"kind": "Widget", "metadata": {"name": "a"}});
        assert_eq!(effective_namespace(&cr), None);
    }
}
