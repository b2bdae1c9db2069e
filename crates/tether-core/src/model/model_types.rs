//! The typed, spanned structs of every model kind, and what they share: a value with
//! where it was written ([`Spanned`]), a model's [`Origin`], its `depends_on` entries.

use super::kind::Kind;
use crate::diagnostic::Span;

/// A value and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

pub type Text = Spanned<String>;

/// When an object counts as ready, as a user writes it (`ready_when:`), for kinds
/// without a built-in rule or to replace it.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadyWhen {
    /// `condition: Type`: the status condition of that type is `True`.
    Condition(Text),
    /// `field: status.phase` and `value: Bound`: the field has that value.
    Field { path: Text, value: Text },
    /// `endpoints: true`: a Service with at least one ready endpoint.
    Endpoints,
}

/// What a `depends_on` entry names.
#[derive(Clone, Debug, PartialEq)]
pub enum DependencyTarget {
    /// `Kind/name` (or `Kind/trust_domain/name`): a model of the repo. `name` spans
    /// the whole entry.
    Model { kind: Kind, name: Text },
    /// `kind`, `namespace`, `name` (and `apiVersion` for kinds that are not built in):
    /// an object tether does not manage, which must exist and be ready.
    Object {
        api_version: Option<Text>,
        kind: Text,
        namespace: Option<Text>,
        name: Text,
    },
}

/// One entry of `depends_on`: the model's objects are applied only once its target
/// is ready.
#[derive(Clone, Debug, PartialEq)]
pub struct Dependency {
    pub target: DependencyTarget,
    pub ready_when: Option<Spanned<ReadyWhen>>,
    /// The entry in the list.
    pub span: Span,
}

/// Where a model is written: the span of its document (used for duplicates and for
/// problems that belong to the model as a whole).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Origin {
    pub kind: Kind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesService {
    pub origin: Origin,
    pub name: Text,
    /// `enabled: false`: Kubernetes is switched off for this repository, and
    /// `apply` and the daemon leave the cluster alone (StarlingX's rule that a
    /// system without Kubernetes behaves as if the feature did not exist).
    pub enabled: Option<Spanned<bool>>,
}

impl KubernetesService {
    pub fn is_enabled(&self) -> bool {
        self.enabled.as_ref().is_none_or(|e| e.value)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub origin: Origin,
    pub name: Text,
    pub abbreviated_name: Option<Text>,
    pub site_url: Option<Text>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub origin: Origin,
    pub name: Text,
    pub tag: Option<Text>,
    /// XOS's `kind` field of Image; only `container` exists.
    pub image_kind: Option<Text>,
    /// `sha256:…`: the tag's content, pinned (a digest ImagePolicy writes it).
    pub digest: Option<Text>,
}

impl Image {
    /// Docker's default when no tag is written.
    pub fn tag_or_default(&self) -> &str {
        self.tag.as_ref().map_or("latest", |t| t.value.as_str())
    }

    /// `name:tag` (or `name`), as other models refer to the Image.
    pub fn reference(&self) -> String {
        match &self.tag {
            Some(tag) => format!("{}:{}", self.name.value, tag.value),
            None => self.name.value.clone(),
        }
    }

    /// The `image:` string of a container: the reference, pinned to its digest
    /// when one is written (`name:tag@sha256:…`).
    pub fn container_image(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{}@{}", self.reference(), digest.value),
            None => self.reference(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrustDomain {
    pub origin: Origin,
    pub name: Text,
    pub owner: Option<Text>,
    pub xos_managed: Option<Spanned<bool>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Principal {
    pub origin: Origin,
    pub name: Text,
    pub trust_domain: Text,
    pub xos_managed: Option<Spanned<bool>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
}

impl ControllerKind {
    pub const ALL: [ControllerKind; 4] = [
        ControllerKind::Deployment,
        ControllerKind::StatefulSet,
        ControllerKind::DaemonSet,
        ControllerKind::Job,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Deployment => "Deployment",
            ControllerKind::StatefulSet => "StatefulSet",
            ControllerKind::DaemonSet => "DaemonSet",
            ControllerKind::Job => "Job",
        }
    }

    /// The apiVersion of the controller's object.
    pub fn api_version(self) -> &'static str {
        match self {
            ControllerKind::Job => "batch/v1",
            _ => "apps/v1",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    pub origin: Origin,
    pub name: Text,
    pub site: Option<Text>,
    pub trust_domain: Option<Text>,
    pub principal: Option<Text>,
    pub service: Option<Text>,
    /// `None` also for an explicit `none`/empty value: bare pods, no controller.
    pub controller_kind: Option<Spanned<ControllerKind>>,
    pub controller_replica_count: Option<Spanned<i64>>,
    pub default_image: Option<Text>,
    pub description: Option<Text>,
    pub enabled: Option<Spanned<bool>>,
    pub xos_managed: Option<Spanned<bool>>,
    pub depends_on: Vec<Dependency>,
    pub rollout: Rollout,
}

/// How a slice's controller replaces its pods, and the restarts asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rollout {
    pub update_strategy: Option<Spanned<UpdateStrategy>>,
    pub max_surge: Option<Spanned<IntOrPercent>>,
    pub max_unavailable: Option<Spanned<IntOrPercent>>,
    /// StatefulSet: only pods with an ordinal at or above it are updated.
    pub partition: Option<Spanned<i64>>,
    /// Deployment: a paused rollout (changes wait until it is resumed).
    pub paused: Option<Spanned<bool>>,
    /// A restart asked for at this time (`tether restart`): a new value rolls the pods.
    pub restarted_at: Option<Text>,
}

impl Rollout {
    /// The fields that are set, with their names, for checks per controller.
    pub fn fields(&self) -> Vec<(&'static str, Span)> {
        [
            (
                "update_strategy",
                self.update_strategy.as_ref().map(|x| x.span),
            ),
            ("max_surge", self.max_surge.as_ref().map(|x| x.span)),
            (
                "max_unavailable",
                self.max_unavailable.as_ref().map(|x| x.span),
            ),
            ("partition", self.partition.as_ref().map(|x| x.span)),
            ("paused", self.paused.as_ref().map(|x| x.span)),
            ("restarted_at", self.restarted_at.as_ref().map(|x| x.span)),
        ]
        .into_iter()
        .filter_map(|(name, span)| Some((name, span?)))
        .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateStrategy {
    RollingUpdate,
    Recreate,
    OnDelete,
}

impl UpdateStrategy {
    pub const ALL: [UpdateStrategy; 3] = [
        UpdateStrategy::RollingUpdate,
        UpdateStrategy::Recreate,
        UpdateStrategy::OnDelete,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UpdateStrategy::RollingUpdate => "RollingUpdate",
            UpdateStrategy::Recreate => "Recreate",
            UpdateStrategy::OnDelete => "OnDelete",
        }
    }
}

/// A pod count or a percentage of the replicas (`maxSurge`, `maxUnavailable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Count(i32),
    Percent(i32),
}

impl IntOrPercent {
    pub fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Count(0) | IntOrPercent::Percent(0))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesServiceInstance {
    pub origin: Origin,
    pub name: Text,
    pub slice: Text,
    pub image: Text,
    pub owner: Option<Text>,
    pub xos_managed: Option<Spanned<bool>>,
    pub pod_ip: Option<Text>,
    /// The node the pod runs on (read-only: discovery records it).
    pub node: Option<Text>,
    pub depends_on: Vec<Dependency>,
}

/// `xos_managed`, true unless written `false`: a model with `xos_managed: false`
/// records what others run (discovery writes such models) and renders nothing.
fn managed(flag: Option<&Spanned<bool>>) -> bool {
    flag.is_none_or(|m| m.value)
}

impl KubernetesServiceInstance {
    pub fn is_managed(&self) -> bool {
        managed(self.xos_managed.as_ref())
    }
}

impl TrustDomain {
    pub fn is_managed(&self) -> bool {
        managed(self.xos_managed.as_ref())
    }
}

impl Principal {
    pub fn is_managed(&self) -> bool {
        managed(self.xos_managed.as_ref())
    }
}

impl Slice {
    pub fn is_managed(&self) -> bool {
        managed(self.xos_managed.as_ref())
    }
}

/// A ConfigMap's or Secret's entries, keys in the order written.
pub type Data = Vec<(Text, Text)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataKind {
    Config,
    Secret,
}

impl DataKind {
    pub fn model_kind(self) -> Kind {
        match self {
            DataKind::Config => Kind::KubernetesConfigMap,
            DataKind::Secret => Kind::KubernetesSecret,
        }
    }

    /// The kind of the Kubernetes object it renders to.
    pub fn kubernetes_kind(self) -> &'static str {
        match self {
            DataKind::Config => "ConfigMap",
            DataKind::Secret => "Secret",
        }
    }
}

/// A KubernetesConfigMap or KubernetesSecret.
#[derive(Clone, Debug, PartialEq)]
pub struct DataModel {
    pub origin: Origin,
    pub data_kind: DataKind,
    pub name: Text,
    pub trust_domain: Text,
    /// `data`, then the text files of `files`.
    pub data: Data,
    /// The paths of `files` (a ConfigMap's), as written.
    pub files: Vec<Text>,
    /// The files of `files` that are not UTF-8 text (`binaryData`).
    pub binary_data: Vec<(Text, Vec<u8>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum MountTarget {
    ServiceInstance(Text),
    Slice(Text),
}

/// A KubernetesConfigVolumeMount or KubernetesSecretVolumeMount.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeMount {
    pub origin: Origin,
    pub data_kind: DataKind,
    /// The `config` or `secret` field: a name in the target's trust domain.
    pub source: Text,
    pub target: MountTarget,
    pub mount_path: Text,
    pub sub_path: Option<Text>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Service {
    pub origin: Origin,
    pub name: Text,
    pub description: Option<Text>,
    pub trust_domain: Option<Text>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServicePort {
    pub origin: Origin,
    pub name: Text,
    pub service: Text,
    pub internal_port: Spanned<i64>,
    pub external_port: Option<Spanned<i64>>,
    pub protocol: Option<Spanned<Protocol>>,
}

/// Objects applied as written. `origin.kind` says where they were written: a
/// KubernetesResourceInstance model's `resource_definition`, a repository file of
/// plain Kubernetes objects ([`Kind::Manifest`], named by its path), a
/// kustomization's build ([`Kind::Kustomization`], named by its directory) or a
/// chart's rendering ([`Kind::HelmChart`], named by its model, `name:phase` for its
/// hooks). Each is one step of the workflow.
#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesResourceInstance {
    pub origin: Origin,
    pub name: Text,
    /// The objects, each with where it starts.
    pub objects: Vec<ResourceObject>,
    /// Its Argo CD hooks: objects made anew by each apply that runs them, never
    /// recorded in an inventory ([`crate::hook`]).
    pub hooks: Vec<ResourceObject>,
    pub owner: Option<Text>,
    pub depends_on: Vec<Dependency>,
    /// When its objects count as ready, in place of their kind's built-in rule.
    pub ready_when: Option<Spanned<ReadyWhen>>,
}

/// One object applied as written, with where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceObject {
    pub value: serde_json::Value,
    pub span: Span,
    /// The file the generating tool made it from (a chart's template), when that is
    /// not the file of `span`.
    pub template: Option<String>,
}

/// A Helm chart rendered into a trust domain: the chart's objects are applied by
/// tether itself, recorded in its inventory (no Helm release).
#[derive(Clone, Debug, PartialEq)]
pub struct HelmChart {
    pub origin: Origin,
    pub name: Text,
    pub chart: Spanned<ChartSource>,
    /// A version, or a semver range (`^1.2`), of a chart from a repository.
    pub version: Option<Text>,
    /// The release name the templates see (`.Release.Name`); the model's name when absent.
    pub release_name: Option<Text>,
    pub trust_domain: Text,
    /// Values written in the model, as JSON.
    pub values: Option<Spanned<serde_json::Value>>,
    /// Values files, relative to the model's file, in the order Helm merges them.
    pub values_files: Vec<Text>,
    pub depends_on: Vec<Dependency>,
    pub ready_when: Option<Spanned<ReadyWhen>>,
}

impl HelmChart {
    pub fn release(&self) -> &str {
        self.release_name
            .as_ref()
            .unwrap_or(&self.name)
            .value
            .as_str()
    }
}

/// Where a chart comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ChartSource {
    /// A chart directory in the repository, relative to the models root.
    Path(String),
    /// A chart by name from a chart repository (`index.yaml` at `url`).
    Repository { url: String, name: String },
    /// A chart in an OCI registry (`oci://host/path/name`).
    Oci(String),
}

/// A host's Kubernetes node (`kind: Node`, named after the node): the labels and
/// taints tether keeps on it, and whether the host is locked. tether never creates
/// a node; it owns only what it set on one.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub origin: Origin,
    pub name: Text,
    /// The KubernetesService whose cluster the node is in.
    pub owner: Option<Text>,
    /// Keys and values in the order written.
    pub labels: Vec<(Text, Text)>,
    pub taints: Vec<Taint>,
    /// true: cordoned, with tether's `NoExecute` lock taint, so pods that do not
    /// tolerate it leave.
    pub locked: Option<Spanned<bool>>,
}

impl Host {
    pub fn is_locked(&self) -> bool {
        self.locked.as_ref().is_some_and(|l| l.value)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Taint {
    pub key: Text,
    pub value: Option<Text>,
    pub effect: Spanned<TaintEffect>,
    /// The entry in the list.
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub const ALL: [TaintEffect; 3] = [
        TaintEffect::NoSchedule,
        TaintEffect::PreferNoSchedule,
        TaintEffect::NoExecute,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}
