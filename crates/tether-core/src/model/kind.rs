//! The model kinds and the fields each one accepts.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    KubernetesService,
    Site,
    Image,
    TrustDomain,
    Principal,
    Slice,
    KubernetesServiceInstance,
    KubernetesConfigMap,
    KubernetesSecret,
    KubernetesConfigVolumeMount,
    KubernetesSecretVolumeMount,
    Service,
    ServicePort,
    KubernetesResourceInstance,
    Node,
    /// A Helm chart rendered with values into a trust domain (Kolla's layer 3).
    HelmChart,
    /// Which tags of an image repository replace the ones written (image automation).
    ImagePolicy,
    /// Not a model one writes: the plain Kubernetes objects of one repository file.
    Manifest,
    /// Not a model one writes: the output of a kustomization directory.
    Kustomization,
}

/// The deprecated XOS spelling of [`Kind::KubernetesConfigVolumeMount`].
pub const CONFIG_MOUNT_ALIAS: &str = "KubernetesConfigMapVolumeMount";

/// XOS bookkeeping fields that XOS itself set on every model. Copied XOS exports carry
/// them; tether ignores them with a warning instead of failing on them.
pub const XOS_FEEDBACK_FIELDS: &[&str] = &[
    "id",
    "created",
    "updated",
    "enacted",
    "policed",
    "backend_register",
    "backend_need_delete",
    "backend_need_reap",
    "backend_status",
    "backend_code",
    "deleted",
    "write_protect",
    "lazy_blocked",
    "no_sync",
    "no_policy",
    "policy_status",
    "policy_code",
    "leaf_model_name",
];

impl Kind {
    /// The kinds a `kind:` field may name.
    pub const ALL: [Kind; 17] = [
        Kind::KubernetesService,
        Kind::Site,
        Kind::Image,
        Kind::TrustDomain,
        Kind::Principal,
        Kind::Slice,
        Kind::KubernetesServiceInstance,
        Kind::KubernetesConfigMap,
        Kind::KubernetesSecret,
        Kind::KubernetesConfigVolumeMount,
        Kind::KubernetesSecretVolumeMount,
        Kind::Service,
        Kind::ServicePort,
        Kind::KubernetesResourceInstance,
        Kind::Node,
        Kind::HelmChart,
        Kind::ImagePolicy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::KubernetesService => "KubernetesService",
            Kind::Site => "Site",
            Kind::Image => "Image",
            Kind::TrustDomain => "TrustDomain",
            Kind::Principal => "Principal",
            Kind::Slice => "Slice",
            Kind::KubernetesServiceInstance => "KubernetesServiceInstance",
            Kind::KubernetesConfigMap => "KubernetesConfigMap",
            Kind::KubernetesSecret => "KubernetesSecret",
            Kind::KubernetesConfigVolumeMount => "KubernetesConfigVolumeMount",
            Kind::KubernetesSecretVolumeMount => "KubernetesSecretVolumeMount",
            Kind::Service => "Service",
            Kind::ServicePort => "ServicePort",
            Kind::KubernetesResourceInstance => "KubernetesResourceInstance",
            Kind::Node => "Node",
            Kind::HelmChart => "HelmChart",
            Kind::ImagePolicy => "ImagePolicy",
            Kind::Manifest => "Manifest",
            Kind::Kustomization => "Kustomization",
        }
    }

    /// "a" or "an", as the kind's name is said.
    pub fn article(self) -> &'static str {
        if self.name().starts_with(['A', 'E', 'I', 'O', 'U']) {
            "an"
        } else {
            "a"
        }
    }

    /// The kind a `kind:` value names, also through the deprecated alias.
    pub fn parse(name: &str) -> Option<Kind> {
        if name == CONFIG_MOUNT_ALIAS {
            return Some(Kind::KubernetesConfigVolumeMount);
        }
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The kind of a step of the workflow, as `depends_on` names it: a model kind, or
    /// `Manifest` (a file of plain objects) and `Kustomization` (a directory).
    pub fn parse_step(name: &str) -> Option<Kind> {
        Kind::parse(name).or_else(|| {
            [Kind::Manifest, Kind::Kustomization]
                .into_iter()
                .find(|k| k.name() == name)
        })
    }

    /// The fields a model of this kind may have, besides `kind` and `apiVersion`.
    #[expect(
        clippy::too_many_lines,
        reason = "a table: one arm per kind, its fields in the order the docs list them"
    )]
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::KubernetesService => &["name", "enabled"],
            Kind::Site => &["name", "abbreviated_name", "site_url"],
            Kind::Image => &["name", "tag", "image_kind", "digest"],
            Kind::TrustDomain => &["name", "owner", "xos_managed"],
            Kind::Principal => &["name", "trust_domain", "xos_managed"],
            Kind::Slice => &[
                "name",
                "site",
                "trust_domain",
                "principal",
                "service",
                "controller_kind",
                "controller_replica_count",
                "default_image",
                "description",
                "enabled",
                "xos_managed",
                "depends_on",
                "update_strategy",
                "max_surge",
                "max_unavailable",
                "partition",
                "paused",
                "restarted_at",
            ],
            Kind::KubernetesServiceInstance => &[
                "name",
                "slice",
                "image",
                "owner",
                "xos_managed",
                "pod_ip",
                "node",
                "depends_on",
            ],
            Kind::KubernetesConfigMap => &["name", "trust_domain", "data", "files"],
            Kind::KubernetesSecret => &["name", "trust_domain", "data"],
            Kind::KubernetesConfigVolumeMount => &[
                "config",
                "service_instance",
                "slice",
                "mount_path",
                "sub_path",
            ],
            Kind::KubernetesSecretVolumeMount => &[
                "secret",
                "service_instance",
                "slice",
                "mount_path",
                "sub_path",
            ],
            Kind::Service => &["name", "description", "trust_domain"],
            Kind::ServicePort => &[
                "name",
                "service",
                "internal_port",
                "external_port",
                "protocol",
            ],
            Kind::KubernetesResourceInstance => &[
                "name",
                "resource_definition",
                "owner",
                "kubectl_state",
                "depends_on",
                "ready_when",
            ],
            Kind::Node => &["name", "owner", "labels", "taints", "locked"],
            Kind::HelmChart => &[
                "name",
                "chart",
                "repository",
                "version",
                "release_name",
                "trust_domain",
                "values",
                "values_files",
                "depends_on",
                "ready_when",
            ],
            Kind::ImagePolicy => &[
                "name",
                "image",
                "semver",
                "numerical",
                "alphabetical",
                "digest",
                "tag_pattern",
                "extract",
                "min_age",
                "interval",
                "secret",
                "insecure",
                "max_tags",
                "update",
            ],
            Kind::Manifest | Kind::Kustomization => &[],
        }
    }

    /// Kubernetes kinds people write by habit, and the model kind that makes them.
    pub fn for_kubernetes_kind(kubernetes_kind: &str) -> Option<Kind> {
        Some(match kubernetes_kind {
            "Namespace" => Kind::TrustDomain,
            "ServiceAccount" => Kind::Principal,
            "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => Kind::Slice,
            "Pod" => Kind::KubernetesServiceInstance,
            "ConfigMap" => Kind::KubernetesConfigMap,
            "Secret" => Kind::KubernetesSecret,
            _ => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
