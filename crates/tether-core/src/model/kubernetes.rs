//! Kubernetes spellings in models: a field written as Kubernetes names it
//! (`namespace`, `image`, `replicas`) is answered with the model field that says it
//! and why, and a model written as a Kubernetes object (`metadata`, `spec`) with how
//! it is written flat. The mapping follows what each model becomes (design.md §2).

use super::kind::Kind;
use crate::load::{Node, Value};

/// A Kubernetes field name written by habit, the model field that says it, the kind
/// it is meant for (any kind that has the field, when none), and the hint: what to
/// write, and why.
struct Spelling {
    kubernetes: &'static str,
    field: &'static str,
    only: Option<Kind>,
    hint: &'static str,
}

const fn spelling(kubernetes: &'static str, field: &'static str, hint: &'static str) -> Spelling {
    Spelling {
        kubernetes,
        field,
        only: None,
        hint,
    }
}

/// In order of preference: the first whose field the kind has answers.
const SPELLINGS: &[Spelling] = &[
    spelling(
        "namespace",
        "trust_domain",
        "write trust_domain: tether models name the namespace through trust_domain (a TrustDomain model is the Namespace)",
    ),
    spelling(
        "namespace",
        "slice",
        "the namespace is the trust_domain of the slice: set trust_domain on the Slice and remove namespace here",
    ),
    Spelling {
        kubernetes: "namespace",
        field: "name",
        only: Some(Kind::TrustDomain),
        hint: "a TrustDomain is the Namespace: its name is the namespace's, remove namespace",
    },
    spelling(
        "image",
        "default_image",
        "write default_image: a Slice's controller runs its default_image, an Image model written name:tag",
    ),
    spelling(
        "replicas",
        "controller_replica_count",
        "write controller_replica_count: a Slice's controller runs controller_replica_count replicas",
    ),
    spelling(
        "serviceAccountName",
        "principal",
        "write principal: a Principal model is the ServiceAccount the pods run as",
    ),
    spelling(
        "serviceAccount",
        "principal",
        "write principal: a Principal model is the ServiceAccount the pods run as",
    ),
    spelling(
        "strategy",
        "update_strategy",
        "write update_strategy: a Slice's update_strategy is its controller's strategy type",
    ),
    spelling(
        "updateStrategy",
        "update_strategy",
        "write update_strategy: a Slice's update_strategy is its controller's strategy type",
    ),
    spelling(
        "maxSurge",
        "max_surge",
        "write max_surge: model fields are written in snake_case",
    ),
    spelling(
        "maxUnavailable",
        "max_unavailable",
        "write max_unavailable: model fields are written in snake_case",
    ),
    spelling(
        "nodeName",
        "node",
        "write node: a pod's node is written node",
    ),
    spelling(
        "podIP",
        "pod_ip",
        "write pod_ip: the pod's IP is pod_ip (read from the cluster, not set by hand)",
    ),
    spelling(
        "mountPath",
        "mount_path",
        "write mount_path: model fields are written in snake_case",
    ),
    spelling(
        "subPath",
        "sub_path",
        "write sub_path: model fields are written in snake_case",
    ),
    spelling(
        "configMap",
        "config",
        "write config: a mount's config names a KubernetesConfigMap model",
    ),
    spelling(
        "secretName",
        "secret",
        "write secret: a mount's secret names a KubernetesSecret model",
    ),
    spelling(
        "stringData",
        "data",
        "write data: a KubernetesSecret's data holds the values as written; tether encodes them",
    ),
    spelling(
        "port",
        "internal_port",
        "write internal_port: a ServicePort's internal_port is the port of the Service and of its pods",
    ),
    spelling(
        "targetPort",
        "internal_port",
        "write internal_port: a ServicePort's internal_port is the port of the Service and of its pods",
    ),
    spelling(
        "containerPort",
        "internal_port",
        "write internal_port: a ServicePort's internal_port is the port of the Service and of its pods",
    ),
    spelling(
        "nodePort",
        "external_port",
        "write external_port: an external_port makes the Service a NodePort",
    ),
];

/// The hint for an unknown field that is a Kubernetes spelling of a field `kind` has:
/// `write trust_domain: tether models name the namespace through trust_domain …`.
pub(super) fn kubernetes_spelling(kind: Kind, name: &str) -> Option<String> {
    model_field(kind, name).map(|s| s.hint.to_string())
}

fn model_field(kind: Kind, name: &str) -> Option<&'static Spelling> {
    SPELLINGS.iter().find(|s| {
        s.kubernetes == name
            && s.only.is_none_or(|only| only == kind)
            && kind.fields().contains(&s.field)
    })
}

/// Top-level fields of a Kubernetes object, never of a model.
const OBJECT_SECTIONS: &[&str] = &["metadata", "spec"];

/// For a model written as a Kubernetes object (`metadata:`, `spec:`): the first such
/// section's key, and how the model is written flat: `metadata.name` as `name`, and
/// each field of the sections that a model field says (`metadata.namespace` as
/// `trust_domain`).
pub(super) fn object_shape<'n>(
    kind: Kind,
    fields: &[(&str, &'n Node, &'n Node)],
) -> Option<(&'n Node, String)> {
    let sections: Vec<&(&str, &Node, &Node)> = fields
        .iter()
        .filter(|(name, _, _)| OBJECT_SECTIONS.contains(name))
        .collect();
    let (_, first_key, _) = sections.first()?;
    let mut flat: Vec<String> = Vec::new();
    for (section, _, value) in &sections {
        let Value::Map(entries) = &value.value else {
            continue;
        };
        for (key, _) in entries {
            let Value::Str(name) = &key.value else {
                continue;
            };
            let field = match model_field(kind, name) {
                Some(spelling) => spelling.field,
                None if kind.fields().contains(&name.as_str()) => name.as_str(),
                None => continue,
            };
            let written = format!("{field} (for {section}.{name})");
            if !flat.contains(&written) {
                flat.push(written);
            }
        }
    }
    let hint = match flat.is_empty() {
        true => format!(
            "write the model's fields at the top level, beside kind; fields of {kind}: {}",
            kind.fields().join(", ")
        ),
        false => format!(
            "write the model's fields at the top level, beside kind: {}",
            flat.join(", ")
        ),
    };
    Some((*first_key, hint))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spelling whose model field no kind has would never be offered.
    #[test]
    fn every_spelling_names_a_field_a_kind_has() {
        for spelling in SPELLINGS {
            let kinds: Vec<Kind> = Kind::ALL
                .into_iter()
                .filter(|kind| spelling.only.is_none_or(|only| only == *kind))
                .filter(|kind| kind.fields().contains(&spelling.field))
                .collect();
            assert!(
                !kinds.is_empty(),
                "{} → {}",
                spelling.kubernetes,
                spelling.field
            );
            assert!(
                kinds
                    .iter()
                    .any(|kind| !kind.fields().contains(&spelling.kubernetes)),
                "{} is a field of every kind that has {}",
                spelling.kubernetes,
                spelling.field
            );
        }
    }

    #[test]
    fn a_namespace_is_answered_by_what_each_kind_names_it_with() {
        let field = |kind, name| model_field(kind, name).map(|s| s.field);
        assert_eq!(field(Kind::Slice, "namespace"), Some("trust_domain"));
        assert_eq!(
            field(Kind::KubernetesServiceInstance, "namespace"),
            Some("slice")
        );
        assert_eq!(field(Kind::TrustDomain, "namespace"), Some("name"));
        assert_eq!(field(Kind::Site, "namespace"), None);
        assert_eq!(field(Kind::Slice, "image"), Some("default_image"));
        // A KubernetesServiceInstance has an image field of its own.
        assert_eq!(field(Kind::KubernetesServiceInstance, "image"), None);
    }
}
