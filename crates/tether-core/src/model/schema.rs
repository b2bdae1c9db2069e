//! The model format as a JSON Schema (`tether schema`), for editors: completion,
//! hover text and inline errors through yaml-language-server. Generated from the types
//! below with schemars; a test keeps their fields equal to what the reader accepts
//! ([`Kind::fields`]), and the choices come from the model enums themselves.

// The document types are read by schemars only: their fields are never read.
#![allow(dead_code)]

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;

use super::image_policy::{Order, UpdateMode};
use super::kind::XOS_FEEDBACK_FIELDS;
use super::model_types::{ControllerKind, Protocol, TaintEffect, UpdateStrategy};

/// The JSON Schema of one model document, pretty-printed.
pub fn model_schema() -> String {
    let mut schema = schemars::schema_for!(ModelDocument).to_value();
    without_null(&mut schema);
    with_xos_bookkeeping(&mut schema);
    with_kubernetes_objects(&mut schema);
    if let Some(root) = schema.as_object_mut() {
        root.insert(
            "$id".into(),
            "https://tether.dev/schemas/model/v1.json".into(),
        );
        root.insert("title".into(), "tether model".into());
    }
    serde_json::to_string_pretty(&schema).unwrap_or_default() + "\n"
}

/// A document with another `apiVersion` than tether's is a Kubernetes object applied
/// as written (beside the models): the schema accepts it, checking only what tether
/// checks before the server does.
fn with_kubernetes_objects(schema: &mut serde_json::Value) {
    if let Some(variants) = schema.get_mut("oneOf").and_then(|v| v.as_array_mut()) {
        variants.push(serde_json::json!({
            "title": "Kubernetes object",
            "description": "A Kubernetes object beside the models, applied as written (managed, diffed and pruned like a model's).",
            "type": "object",
            "required": ["apiVersion", "kind", "metadata"],
            "properties": {
                "apiVersion": {"type": "string", "not": {"pattern": "^tether/"}},
                "kind": {"type": "string"},
                "metadata": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string", "minLength": 1}}
                }
            }
        }));
    }
}

/// XOS's bookkeeping fields, which exports carry: tether ignores them with a warning,
/// so the schema accepts them, as deprecated.
fn with_xos_bookkeeping(schema: &mut serde_json::Value) {
    let Some(variants) = schema.get_mut("oneOf").and_then(|v| v.as_array_mut()) else {
        return;
    };
    for variant in variants {
        if let Some(properties) = variant
            .get_mut("properties")
            .and_then(|p| p.as_object_mut())
        {
            for field in XOS_FEEDBACK_FIELDS {
                properties.insert(
                    (*field).into(),
                    serde_json::json!({"deprecated": true, "description": "XOS bookkeeping: ignored by tether, with a warning."}),
                );
            }
        }
    }
}

/// An optional field is left out, never written `null` (tether refuses `tag: null`):
/// schemars' `anyOf: [T, null]` (or `type: [T, null]`) for an `Option<T>` becomes `T`.
fn without_null(schema: &mut serde_json::Value) {
    let is_null = |v: &serde_json::Value| v.get("type").is_some_and(|t| t == "null");
    if let Some(object) = schema.as_object_mut() {
        if let Some(serde_json::Value::Array(any_of)) = object.get("anyOf")
            && any_of.len() == 2
            && let Some(kept) = any_of.iter().find(|v| !is_null(v))
            && any_of.iter().any(is_null)
        {
            let kept = kept.clone();
            object.remove("anyOf");
            if let serde_json::Value::Object(kept) = kept {
                object.extend(kept);
            }
        }
        if let Some(serde_json::Value::Array(types)) = object.get("type")
            && types.len() == 2
            && types.iter().any(|t| t == "null")
            && let Some(kept) = types.iter().find(|t| *t != "null")
        {
            let kept = kept.clone();
            object.insert("type".into(), kept);
        }
        object.values_mut().for_each(without_null);
    } else if let Some(array) = schema.as_array_mut() {
        array.iter_mut().for_each(without_null);
    }
}

/// A tether model: one YAML document, whose `kind` says which.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind")]
enum ModelDocument {
    KubernetesService(KubernetesServiceDoc),
    Site(SiteDoc),
    Image(ImageDoc),
    TrustDomain(TrustDomainDoc),
    Principal(PrincipalDoc),
    Slice(SliceDoc),
    KubernetesServiceInstance(ServiceInstanceDoc),
    KubernetesConfigMap(ConfigMapDoc),
    KubernetesSecret(DataDoc),
    KubernetesConfigVolumeMount(ConfigMountDoc),
    /// The deprecated XOS name of KubernetesConfigVolumeMount.
    #[deprecated]
    KubernetesConfigMapVolumeMount(ConfigMountDoc),
    KubernetesSecretVolumeMount(SecretMountDoc),
    Service(ServiceDoc),
    ServicePort(ServicePortDoc),
    KubernetesResourceInstance(ResourceInstanceDoc),
    Node(NodeDoc),
    HelmChart(HelmChartDoc),
    ImagePolicy(ImagePolicyDoc),
}

/// A field value whose schema is given by hand-picked JSON (a choice from a model
/// enum, a range), rather than derived from its Rust type.
macro_rules! value_schema {
    ($(#[$doc:meta])* $name:ident, $schema:expr) => {
        $(#[$doc])*
        struct $name;

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                serde::de::IgnoredAny::deserialize(deserializer).map(|_| $name)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                $schema
            }
        }
    };
}

value_schema!(
    /// A scalar read as text, spelled as written (`tag: 1.25` is "1.25").
    Scalar,
    json_schema!({"type": ["string", "number", "boolean"]})
);
value_schema!(
    ApiVersion,
    json_schema!({"const": "tether/v1", "description": "Optional; the only version is tether/v1."})
);
value_schema!(ControllerKindName, {
    let mut kinds: Vec<&str> = ControllerKind::ALL.iter().map(|k| k.name()).collect();
    kinds.extend(["none", ""]);
    json_schema!({
        "enum": kinds,
        "description": "The controller of the slice's pods; none (or empty): bare pods, the slice's KubernetesServiceInstances.",
    })
});
value_schema!(ProtocolName, {
    let protocols: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
    json_schema!({"enum": protocols, "description": "TCP unless written."})
});
value_schema!(
    ReplicaCount,
    json_schema!({"type": "integer", "minimum": 0, "maximum": i32::MAX, "description": "Replicas of a Deployment or StatefulSet (default 1)."})
);
value_schema!(UpdateStrategyName, {
    let names: Vec<&str> = UpdateStrategy::ALL.iter().map(|s| s.name()).collect();
    json_schema!({"enum": names})
});
value_schema!(
    /// A pod count, or a percentage of the replicas ("25%").
    IntOrPercentDoc,
    json_schema!({"oneOf": [
        {"type": "integer", "minimum": 0, "maximum": i32::MAX},
        {"type": "string", "pattern": "^(100|[0-9]{1,2})%$"}
    ]})
);
value_schema!(
    Ordinal,
    json_schema!({"type": "integer", "minimum": 0, "maximum": i32::MAX})
);
value_schema!(
    Port,
    json_schema!({"type": "integer", "minimum": 1, "maximum": 65535})
);

/// One entry of `depends_on`: a model as `Kind/name`, or an object tether does not
/// manage by kind, namespace and name. The model's objects are applied only once it
/// is ready.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum DependencyDoc {
    /// `Kind/name` (or `Kind/trust_domain/name`) of a model of the repo.
    Model(String),
    Object(ObjectDependencyDoc),
}

/// An object tether does not manage, which must exist and be ready first.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ObjectDependencyDoc {
    /// Needed for kinds that are not built into Kubernetes.
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: String,
    /// Needed for namespaced kinds.
    namespace: Option<String>,
    name: String,
    ready_when: Option<ReadyWhenDoc>,
}

/// When an object counts as ready, in place of its kind's built-in rule: one of
/// `condition`, `field` with `value`, or `endpoints`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadyWhenDoc {
    /// A status condition type that must be True, e.g. `Established`.
    condition: Option<String>,
    /// A field path, e.g. `status.phase`; with `value`.
    field: Option<String>,
    value: Option<Scalar>,
    /// A Service with at least one ready endpoint.
    endpoints: Option<bool>,
}

/// The data of a ConfigMap or Secret: key: value pairs, or (as XOS stored it) one
/// JSON-encoded object in a string.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum Data {
    Entries(BTreeMap<String, Scalar>),
    Json(String),
}

/// The singleton that stands for the Kubernetes cluster itself.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KubernetesServiceDoc {
    api_version: Option<ApiVersion>,
    /// Always `kubernetes`.
    name: Scalar,
    /// false: Kubernetes is off for this repository; `apply` and the daemon leave
    /// the cluster alone.
    enabled: Option<bool>,
}

/// A deployment site; slices name it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SiteDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    abbreviated_name: Option<Scalar>,
    site_url: Option<Scalar>,
}

/// A container image; slices and instances name it, with or without its tag.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ImageDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    /// The image without its tag, e.g. `registry.local:5000/shop/api`.
    name: Scalar,
    /// The tag (default `latest`); quote it when it looks like a number.
    tag: Option<Scalar>,
    /// XOS's `kind` of Image: only `container`.
    image_kind: Option<Scalar>,
    /// `sha256:` and 64 hex digits: containers run `name:tag@digest` (a digest
    /// ImagePolicy writes it).
    digest: Option<Digest>,
}

/// A Kubernetes Namespace.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TrustDomainDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    /// The KubernetesService (`kubernetes`).
    owner: Option<Scalar>,
    /// false: a record of what others run (discovery writes these); renders nothing.
    xos_managed: Option<bool>,
}

/// A Kubernetes ServiceAccount in a trust domain.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PrincipalDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    trust_domain: Scalar,
    /// false: a record of what others run (discovery writes these); renders nothing.
    xos_managed: Option<bool>,
}

/// A group of pods: a Deployment, StatefulSet, DaemonSet or Job, or bare pods.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SliceDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    site: Option<Scalar>,
    trust_domain: Option<Scalar>,
    /// The Principal (ServiceAccount) its pods run as.
    principal: Option<Scalar>,
    /// The Service whose selector takes its pods.
    service: Option<Scalar>,
    controller_kind: Option<ControllerKindName>,
    controller_replica_count: Option<ReplicaCount>,
    /// The Image of its containers: `name` or `name:tag` of an Image model.
    default_image: Option<Scalar>,
    description: Option<Scalar>,
    /// false: rendered with no pods (replicas 0, a suspended Job).
    enabled: Option<bool>,
    /// false: a record of what others run (discovery writes these); renders nothing.
    xos_managed: Option<bool>,
    /// Models and objects that must be ready before its objects are applied.
    depends_on: Option<Vec<DependencyDoc>>,
    /// How the controller replaces pods: RollingUpdate, Recreate (Deployment) or
    /// OnDelete (StatefulSet, DaemonSet).
    update_strategy: Option<UpdateStrategyName>,
    /// Deployment: pods above the replica count during a rolling update.
    max_surge: Option<IntOrPercentDoc>,
    /// Deployment, DaemonSet: pods that may be unavailable during a rolling update.
    max_unavailable: Option<IntOrPercentDoc>,
    /// StatefulSet: only pods with this ordinal or above are updated.
    partition: Option<Ordinal>,
    /// Deployment: true holds the rollout of changes until it is false again.
    paused: Option<bool>,
    /// A restart asked for at this time (RFC 3339); written by `tether restart`.
    restarted_at: Option<String>,
}

/// A Kubernetes Pod of a slice without a controller.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ServiceInstanceDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    slice: Scalar,
    /// An Image model: `name` or `name:tag`.
    image: Scalar,
    owner: Option<Scalar>,
    /// false: a record of what others run (discovery writes these); renders nothing.
    xos_managed: Option<bool>,
    /// Read-only: the pod's IP, as discovery records it.
    pod_ip: Option<Scalar>,
    /// Read-only: the node the pod runs on, as discovery records it.
    node: Option<Scalar>,
    /// Models and objects that must be ready before the pod is applied.
    depends_on: Option<Vec<DependencyDoc>>,
}

/// A ConfigMap or Secret in a trust domain. A Secret's values never appear in diffs,
/// reports or logs.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DataDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    trust_domain: Scalar,
    data: Option<Data>,
}

/// A ConfigMap in a trust domain: `data` written here, and `files` of the repository.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ConfigMapDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    trust_domain: Scalar,
    data: Option<Data>,
    /// Files of the repository (paths relative to this file): a file, or a directory
    /// whose files become one key each (the file name); binary files go to binaryData.
    files: Option<Files>,
}

/// One path, or a list of paths.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum Files {
    One(String),
    Many(Vec<String>),
}

/// A ConfigMap mounted into the pods of a slice or an instance.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ConfigMountDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    /// The KubernetesConfigMap, in the target's trust domain.
    config: Scalar,
    #[serde(flatten)]
    mount: MountDoc,
}

/// A Secret mounted into the pods of a slice or an instance.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SecretMountDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    /// The KubernetesSecret, in the target's trust domain.
    secret: Scalar,
    #[serde(flatten)]
    mount: MountDoc,
}

/// Where a ConfigMap or Secret is mounted.
#[derive(Deserialize, JsonSchema)]
struct MountDoc {
    /// The KubernetesServiceInstance to mount into (or `slice`).
    service_instance: Option<Scalar>,
    /// The Slice to mount into (or `service_instance`).
    slice: Option<Scalar>,
    mount_path: Scalar,
    sub_path: Option<Scalar>,
}

/// A Kubernetes Service selecting the pods of the slices that name it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ServiceDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    description: Option<Scalar>,
    /// Default: the trust domain of its slices.
    trust_domain: Option<Scalar>,
}

/// A port of a Service.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ServicePortDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    service: Scalar,
    /// The pods' port.
    internal_port: Port,
    /// A node port (30000-32767): the Service becomes a NodePort Service.
    external_port: Option<Port>,
    protocol: Option<ProtocolName>,
}

/// A Helm chart rendered by Helm (`helm template`) and applied by tether, its objects
/// recorded in tether's inventory (no Helm release). Hooks become steps: pre-install
/// hooks before the chart's objects, post-install hooks after.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HelmChartDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    /// A chart directory relative to this file, a chart's name in `repository`, or
    /// `oci://host/path/chart`.
    chart: Scalar,
    /// A chart repository (`https://…`, serving index.yaml) or an OCI registry path
    /// (`oci://host/path`).
    repository: Option<Scalar>,
    /// A version, or a semver range (`^1.2`), of a chart from a repository.
    version: Option<Scalar>,
    /// `.Release.Name` in the templates (default: the model's name).
    release_name: Option<Scalar>,
    /// The namespace of the chart's objects (`.Release.Namespace`).
    trust_domain: Scalar,
    /// The chart's values, as in a values.yaml.
    values: Option<std::collections::BTreeMap<String, serde_json::Value>>,
    /// Values files relative to this file (sops-encrypted ones too), merged in order
    /// before `values`.
    values_files: Option<Vec<String>>,
    /// Models and objects that must be ready before the chart's objects are applied.
    depends_on: Option<Vec<DependencyDoc>>,
    /// When the chart's objects count as ready to the models that depend on it.
    ready_when: Option<ReadyWhenDoc>,
}

/// Any Kubernetes YAML, applied as written (normalized as the API server would).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ResourceInstanceDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    /// Kubernetes objects as YAML text (a block scalar, `|`), `---` between objects.
    resource_definition: String,
    owner: Option<Scalar>,
    /// Read-only in tether: it records what it applied in the cluster.
    kubectl_state: Option<Scalar>,
    /// Models and objects that must be ready before its objects are applied.
    depends_on: Option<Vec<DependencyDoc>>,
    /// When its objects count as ready to the models that depend on it.
    ready_when: Option<ReadyWhenDoc>,
}

value_schema!(
    /// A label's value: text (empty, or written as nothing, is allowed).
    LabelValue,
    json_schema!({"anyOf": [{"type": "string", "maxLength": 63}, {"const": null}]})
);
value_schema!(TaintEffectName, {
    let names: Vec<&str> = TaintEffect::ALL.iter().map(|e| e.name()).collect();
    json_schema!({"enum": names})
});

/// A host's Kubernetes node, named after it. tether never creates a node: it keeps
/// its labels, taints and lock on one that joined the cluster.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    /// The node's name in the cluster.
    name: Scalar,
    /// The KubernetesService whose cluster the node is in (when the repo has several).
    owner: Option<Scalar>,
    /// Labels tether keeps on the node; labels others set are left alone.
    labels: Option<BTreeMap<String, LabelValue>>,
    /// Taints tether keeps on the node; taints others set are left alone.
    taints: Option<Vec<TaintDoc>>,
    /// true: cordoned, with a NoExecute taint, so pods that do not tolerate it leave.
    locked: Option<bool>,
}

value_schema!(
    Digest,
    json_schema!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"})
);
value_schema!(OrderName, {
    let names: Vec<&str> = Order::ALL.iter().map(|o| o.name()).collect();
    json_schema!({"enum": names, "description": "asc: the highest wins; desc: the lowest wins."})
});
value_schema!(UpdateModeName, {
    let names: Vec<&str> = UpdateMode::ALL.iter().map(|u| u.name()).collect();
    json_schema!({"enum": names, "description": "commit (default): on the Source's branch; branch: on tether/image/<name>, updated in place."})
});
value_schema!(
    /// A duration with its unit (`30s`, `10m`, `1h`).
    DurationText,
    json_schema!({"type": "string", "pattern": "^\\s*[0-9]+\\s*[a-zA-Zµ]+(\\s*[0-9]+\\s*[a-zA-Zµ]+)*\\s*$"})
);
value_schema!(
    TagCount,
    json_schema!({"type": "integer", "minimum": 1, "description": "More tags than this (default 5000): nothing is chosen, with a warning."})
);

/// Which tags of an image repository replace the ones written in the repo: exactly
/// one of `semver`, `numerical`, `alphabetical` and `digest`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ImagePolicyDoc {
    #[serde(rename = "apiVersion")]
    api_version: Option<ApiVersion>,
    name: Scalar,
    /// The image repository as Image models name it, without a tag or a digest.
    image: String,
    /// A semver range (Flux's spelling): the highest admitted version wins.
    semver: Option<Scalar>,
    /// Rank tags (or what extract takes of them) as numbers.
    numerical: Option<OrderName>,
    /// Rank tags (or what extract takes of them) in byte order.
    alphabetical: Option<OrderName>,
    /// Follow this tag's digest.
    digest: Option<Scalar>,
    /// Only tags that match (a Rust regex).
    tag_pattern: Option<String>,
    /// What is ranked: tag_pattern's groups in replacement syntax (`$ts`).
    extract: Option<String>,
    /// A tag younger than this is not chosen.
    min_age: Option<DurationText>,
    /// How often the registry is listed (default 5m, at least 10s).
    interval: Option<DurationText>,
    /// The Secret with the registry's credentials.
    secret: Option<String>,
    /// A plain-HTTP registry.
    insecure: Option<bool>,
    max_tags: Option<TagCount>,
    update: Option<UpdateModeName>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TaintDoc {
    key: String,
    value: Option<String>,
    effect: TaintEffectName,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    fn schema() -> serde_json::Value {
        serde_json::from_str(&model_schema()).unwrap()
    }

    /// The properties the schema allows for documents of `kind`.
    fn properties(schema: &serde_json::Value, kind: &str) -> Vec<String> {
        let variant = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["properties"]["kind"]["const"] == kind)
            .unwrap_or_else(|| panic!("no variant for {kind}"));
        let mut names: Vec<String> = variant["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_kind_has_exactly_the_fields_the_reader_accepts() {
        let schema = schema();
        for kind in Kind::ALL {
            let mut expected: Vec<String> = kind.fields().iter().map(|f| f.to_string()).collect();
            expected.extend(["apiVersion".to_string(), "kind".to_string()]);
            expected.extend(XOS_FEEDBACK_FIELDS.iter().map(|f| f.to_string()));
            expected.sort();
            assert_eq!(properties(&schema, kind.name()), expected, "{kind}");
        }
        assert_eq!(
            properties(&schema, crate::model::CONFIG_MOUNT_ALIAS),
            properties(&schema, "KubernetesConfigVolumeMount")
        );
    }

    #[test]
    fn required_fields_are_required() {
        let schema = schema();
        let slice = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["properties"]["kind"]["const"] == "ServicePort")
            .unwrap();
        let mut required: Vec<&str> = slice["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r.as_str())
            .collect();
        required.sort();
        assert_eq!(required, ["internal_port", "kind", "name", "service"]);
    }
}
