//! Render: a pure function from the resolved [`Graph`] to Kubernetes objects, in
//! apply order. Objects carry only the fields tether sets (server-side apply makes
//! tether the owner of exactly those), plus tether's ownership labels and annotations.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, Deployment, DeploymentSpec,
    DeploymentStrategy, RollingUpdateDaemonSet, RollingUpdateDeployment,
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, Namespace, Node, NodeSpec, Pod, PodSpec,
    PodTemplateSpec, Secret, SecretVolumeSource, Service, ServiceAccount, ServicePort, ServiceSpec,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::diagnostic::Span;
use crate::host;
use crate::k8s;
use crate::model::{
    self, ControllerKind, DataKind, DataModel, Host, Idx, Image, IntOrPercent, Kind,
    KubernetesServiceInstance, ModelObject, Origin, Principal, Protocol, Rollout, Slice, Text,
    TrustDomain, indexed, object_key,
};
use crate::normalize::normalize;
use crate::ownership::{
    HOOK_OF_LABEL, Inventory, MANAGED_BY_LABEL, MANAGER, MODEL_ANNOTATION, SOURCE_ANNOTATION,
    ownership_labels,
};
use crate::resolve::Graph;
use crate::source::SourceFiles;
use crate::workflow::ModelId;

pub const DESCRIPTION_ANNOTATION: &str = "tether.dev/description";
/// On the pod template of a slice that mounts ConfigMaps or Secrets: a hash of their
/// content (as Helm charts' `checksum/config`), so that a changed file rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "tether.dev/config-hash";
/// On the pod template of a slice restarted with `tether restart` (its `restarted_at`),
/// as `kubectl rollout restart` writes `kubectl.kubernetes.io/restartedAt`.
pub const RESTARTED_AT_ANNOTATION: &str = "tether.dev/restarted-at";
/// Label on the pods of a slice; the controller's selector, and XOS's slice name.
pub const SLICE_LABEL: &str = "xos_slice_name";
/// Label on the pods of a slice with a service; what the Service selects (as in XOS).
pub const SERVICE_LABEL: &str = "xos_service";

/// A rendered Kubernetes object and the model it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedObject {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// `Kind/name` of the model.
    pub model: String,
    /// The model's file, relative to the models root.
    pub source: String,
    /// Where the model is written, for diagnostics about the object.
    pub span: Span,
    /// The model, as the workflow knows it.
    pub model_id: ModelId,
    /// The wave of the workflow it is applied in (see [`crate::workflow`]).
    pub wave: usize,
    pub body: serde_json::Value,
}

/// Stars the values of every Secret (`data`, `stringData`): what `render` prints of
/// a repository with encrypted files unless asked for the values.
pub fn hide_secret_values(objects: &mut [RenderedObject]) {
    for object in objects.iter_mut().filter(|o| o.kind == "Secret") {
        for field in ["data", "stringData"] {
            if let Some(entries) = object
                .body
                .get_mut(field)
                .and_then(serde_json::Value::as_object_mut)
            {
                for value in entries.values_mut() {
                    *value = serde_json::Value::String("***".into());
                }
            }
        }
    }
}

impl RenderedObject {
    /// The object's identity, as plan and the inventory key it.
    pub fn key(&self) -> k8s::ObjectKey {
        k8s::ObjectKey::new(
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }

    /// `Kind namespace/name`, as reports show an object.
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// Renders every object of the graph, in apply order.
pub fn render(graph: &Graph, files: &SourceFiles, inventory: &Inventory) -> Vec<RenderedObject> {
    let mut renderer = Renderer::new(graph, files, inventory);
    renderer.render_all();
    let mut objects = renderer.objects;
    objects.sort_by(|a, b| {
        (
            a.wave,
            k8s::apply_rank(&a.kind),
            &a.kind,
            &a.namespace,
            &a.name,
        )
            .cmp(&(
                b.wave,
                k8s::apply_rank(&b.kind),
                &b.kind,
                &b.namespace,
                &b.name,
            ))
    });
    objects
}

/// The Argo CD hooks of the graph's resources, labelled as tether's and as made for
/// the inventory, but not as its objects: each apply that runs them makes them anew
/// (see [`crate::hook`]). A hook's `name` is its `generateName` when it has no name.
pub fn render_hooks(
    graph: &Graph,
    files: &SourceFiles,
    inventory: &Inventory,
) -> Vec<RenderedObject> {
    let mut renderer = Renderer::new(graph, files, inventory);
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        (HOOK_OF_LABEL.to_string(), renderer.applyset.clone()),
    ]);
    for (i, r) in graph.models.resources.iter().enumerate() {
        renderer.enter(r.origin.kind, i);
        for hook in &r.hooks {
            let mut body = hook.value.clone();
            normalize(&mut body);
            // A namespaced built-in kind without a namespace goes to `default`, as the
            // plan's objects do.
            let namespace = k8s::effective_namespace(&body);
            renderer.label_resource(
                &mut body,
                r.origin,
                &r.name.value,
                namespace,
                labels.clone(),
            );
            renderer.push_value(r.origin, &r.name.value, body);
            if let Some(pushed) = renderer.objects.last_mut()
                && pushed.name.is_empty()
            {
                let prefix = &pushed.body["metadata"]["generateName"];
                pushed.name = prefix.as_str().unwrap_or_default().to_string();
            }
        }
    }
    renderer.objects
}

struct Renderer<'g> {
    graph: &'g Graph,
    files: &'g SourceFiles,
    applyset: String,
    objects: Vec<RenderedObject>,
    /// The model being rendered.
    model: ModelId,
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl<'g> Renderer<'g> {
    fn new(graph: &'g Graph, files: &'g SourceFiles, inventory: &Inventory) -> Self {
        Renderer {
            graph,
            files,
            applyset: inventory.applyset_id(),
            objects: Vec::new(),
            model: ModelId {
                kind: Kind::KubernetesService,
                index: 0,
            },
        }
    }
    fn ownership_labels(&self) -> BTreeMap<String, String> {
        ownership_labels(&self.applyset)
    }

    fn annotations(&self, origin: Origin, name: &str) -> BTreeMap<String, String> {
        labels(&[
            (MODEL_ANNOTATION, &format!("{}/{name}", origin.kind)),
            (SOURCE_ANNOTATION, self.files.path(origin.span.file)),
        ])
    }

    /// The metadata of the object `key` names, which comes from [`object_key`]: the
    /// identity resolve checked for collisions.
    fn metadata(&self, origin: Origin, model_name: &str, key: &k8s::ObjectKey) -> ObjectMeta {
        ObjectMeta {
            name: Some(key.name.clone()),
            namespace: key.namespace.clone(),
            labels: Some(self.ownership_labels()),
            annotations: Some(self.annotations(origin, model_name)),
            ..ObjectMeta::default()
        }
    }

    fn push<T: Serialize>(
        &mut self,
        origin: Origin,
        model_name: &str,
        key: &k8s::ObjectKey,
        object: &T,
    ) {
        // Serializing k8s-openapi types to JSON cannot fail: no maps with non-string keys.
        let body = serde_json::to_value(object).unwrap_or_default();
        self.push_value(origin, model_name, body);
        debug_assert_eq!(
            self.objects.last().map(RenderedObject::key).as_ref(),
            Some(key),
            "render and resolve disagree on the object of {model_name}"
        );
    }

    fn push_value(&mut self, origin: Origin, model_name: &str, body: serde_json::Value) {
        let body = conventional_order(body);
        let sync_wave = crate::directive::directives(&body).map_or(0, |d| d.sync_wave);
        let wave = self.graph.workflow.wave_of(self.model, sync_wave);
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        self.objects.push(RenderedObject {
            api_version: text(&body["apiVersion"]),
            kind: text(&body["kind"]),
            namespace: body["metadata"]["namespace"].as_str().map(str::to_string),
            name: text(&body["metadata"]["name"]),
            model: format!("{}/{model_name}", origin.kind),
            source: self.files.path(origin.span.file).to_string(),
            span: origin.span,
            model_id: self.model,
            wave,
            body,
        });
    }

    fn td_name(&self, index: Idx<TrustDomain>) -> &str {
        &self.graph.models.trust_domains[index].name.value
    }

    /// Renders the next objects as made by model `index` of `kind`.
    fn enter(&mut self, kind: Kind, index: usize) {
        self.model = ModelId { kind, index };
    }

    fn render_all(&mut self) {
        let m = &self.graph.models;
        for (i, td) in m.trust_domains.iter().enumerate() {
            if td.is_managed() {
                self.enter(Kind::TrustDomain, i);
                self.render_namespace(td);
            }
        }
        for (i, p) in m.principals.iter().enumerate() {
            if p.is_managed() {
                self.enter(Kind::Principal, i);
                self.render_service_account(p);
            }
        }
        for (i, d) in m.data.iter().enumerate() {
            self.enter(d.data_kind.model_kind(), i);
            self.render_data(d);
        }
        for (i, _) in indexed(&m.slices) {
            self.enter(Kind::Slice, i.index());
            self.render_slice(i);
        }
        for (i, _) in indexed(&m.instances) {
            self.enter(Kind::KubernetesServiceInstance, i.index());
            self.render_bare_pod(i);
        }
        for (i, _) in indexed(&m.services) {
            self.enter(Kind::Service, i.index());
            self.render_service(i);
        }
        for (i, host) in m.hosts.iter().enumerate() {
            self.enter(Kind::Node, i);
            self.render_node(host);
        }
        for (i, r) in m.resources.iter().enumerate() {
            self.enter(r.origin.kind, i);
            for object in &r.objects {
                let Some(key) = object_key(ModelObject::Resource(&object.value)) else {
                    continue;
                };
                let mut body = object.value.clone();
                normalize(&mut body);
                let labels = self.ownership_labels();
                self.label_resource(&mut body, r.origin, &r.name.value, key.namespace, labels);
                // A chart's object names its template: the file a reader opens.
                if let Some(template) = &object.template
                    && let Some(annotations) = body
                        .pointer_mut("/metadata/annotations")
                        .and_then(serde_json::Value::as_object_mut)
                {
                    annotations.insert(SOURCE_ANNOTATION.into(), template.clone().into());
                }
                self.push_value(r.origin, &r.name.value, body);
                if let (Some(template), Some(pushed)) = (&object.template, self.objects.last_mut())
                {
                    pushed.source.clone_from(template);
                }
            }
        }
    }

    /// A host's node: tether's labels, the record of the taints it keeps (see
    /// [`crate::host`]), and the cordon of a locked host. Never a new node: the plan
    /// applies it only over a node that exists.
    fn render_node(&mut self, host: &Host) {
        let Some(key) = object_key(ModelObject::Host(host)) else {
            return;
        };
        let name = &host.name.value;
        let mut metadata = self.metadata(host.origin, name, &key);
        let mut node_labels: BTreeMap<String, String> = host
            .labels
            .iter()
            .map(|(k, v)| (k.value.clone(), v.value.clone()))
            .collect();
        node_labels.extend(self.ownership_labels());
        metadata.labels = Some(node_labels);
        let taints = host::model_taints(host);
        metadata.annotations.get_or_insert_default().insert(
            host::TAINTS_ANNOTATION.into(),
            host::taints_annotation(&taints),
        );
        let object = Node {
            metadata,
            spec: host.is_locked().then(|| NodeSpec {
                unschedulable: Some(true),
                ..NodeSpec::default()
            }),
            ..Node::default()
        };
        self.push(host.origin, name, &key, &object);
    }

    fn render_namespace(&mut self, td: &TrustDomain) {
        let Some(key) = object_key(ModelObject::TrustDomain(td)) else {
            return;
        };
        let name = &td.name.value;
        let object = Namespace {
            metadata: self.metadata(td.origin, name, &key),
            ..Namespace::default()
        };
        self.push(td.origin, name, &key, &object);
    }

    fn render_service_account(&mut self, p: &Principal) {
        let Some(key) = object_key(ModelObject::Principal(p)) else {
            return;
        };
        let name = &p.name.value;
        let object = ServiceAccount {
            metadata: self.metadata(p.origin, name, &key),
            ..ServiceAccount::default()
        };
        self.push(p.origin, name, &key, &object);
    }

    fn render_data(&mut self, d: &DataModel) {
        let Some(key) = object_key(ModelObject::Data(d)) else {
            return;
        };
        let name = &d.name.value;
        let metadata = self.metadata(d.origin, name, &key);
        let entries = d
            .data
            .iter()
            .map(|(k, v)| (k.value.clone(), v.value.clone()));
        match d.data_kind {
            DataKind::Config => {
                let binary: BTreeMap<String, ByteString> = d
                    .binary_data
                    .iter()
                    .map(|(k, v)| (k.value.clone(), ByteString(v.clone())))
                    .collect();
                let object = ConfigMap {
                    metadata,
                    data: Some(entries.collect()),
                    binary_data: (!binary.is_empty()).then_some(binary),
                    ..ConfigMap::default()
                };
                self.push(d.origin, name, &key, &object);
            }
            DataKind::Secret => {
                let object = Secret {
                    metadata,
                    type_: Some("Opaque".into()),
                    data: Some(
                        entries
                            .map(|(k, v)| (k, ByteString(v.into_bytes())))
                            .collect(),
                    ),
                    ..Secret::default()
                };
                self.push(d.origin, name, &key, &object);
            }
        }
    }

    /// Adds tether's labels and annotations, and the default namespace, to an object
    /// written by hand (already normalized); everything else stays as written.
    fn label_resource(
        &self,
        body: &mut serde_json::Value,
        origin: Origin,
        model_name: &str,
        namespace: Option<String>,
        labels: BTreeMap<String, String>,
    ) {
        let Some(object) = body.as_object_mut() else {
            return;
        };
        let metadata = object
            .entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
        let Some(metadata) = metadata.as_object_mut() else {
            return;
        };
        if let Some(namespace) = namespace {
            metadata.insert("namespace".into(), namespace.into());
        }
        for (field, values) in [
            ("labels", labels),
            ("annotations", self.annotations(origin, model_name)),
        ] {
            // Normalization dropped `labels:` with no value: tether's go on a new map.
            let entry = metadata
                .entry(field)
                .or_insert_with(|| serde_json::json!({}));
            if let Some(map) = entry.as_object_mut() {
                for (k, v) in values {
                    map.insert(k, v.into());
                }
            }
        }
    }

    /// The pod template of a slice's controller: its labels, and the hash of the
    /// configuration it mounts.
    fn pod_template(&self, slice: Idx<Slice>, spec: PodSpec) -> PodTemplateSpec {
        let mut annotations = BTreeMap::new();
        if let Some(hash) = self.config_hash(&self.graph.slices[slice].mounts) {
            annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), hash);
        }
        if let Some(at) = &self.graph.models.slices[slice].rollout.restarted_at {
            annotations.insert(RESTARTED_AT_ANNOTATION.to_string(), at.value.clone());
        }
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(self.pod_labels(slice)),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            }),
            spec: Some(spec),
        }
    }

    /// A hash of the content of the ConfigMaps and Secrets a slice's pods mount:
    /// a changed configuration changes the pod template, so the pods roll.
    fn config_hash(&self, mounts: &[Idx<model::VolumeMount>]) -> Option<String> {
        if mounts.is_empty() {
            return None;
        }
        let g = self.graph;
        let mut sources: Vec<Idx<DataModel>> = mounts.iter().map(|m| g.mounts[*m].source).collect();
        sources.sort();
        sources.dedup();
        let mut hasher = Sha256::new();
        for source in sources {
            let d = &g.models.data[source];
            hasher.update(format!(
                "{}\0{}\0",
                d.data_kind.kubernetes_kind(),
                d.name.value
            ));
            let mut entries: Vec<(&str, &[u8])> = d
                .data
                .iter()
                .map(|(k, v)| (k.value.as_str(), v.value.as_bytes()))
                .chain(
                    d.binary_data
                        .iter()
                        .map(|(k, v)| (k.value.as_str(), v.as_slice())),
                )
                .collect();
            entries.sort();
            for (key, value) in entries {
                hasher.update(key.as_bytes());
                hasher.update([0]);
                hasher.update((value.len() as u64).to_be_bytes());
                hasher.update(value);
            }
        }
        let digest = hasher.finalize();
        Some(digest.iter().take(16).map(|b| format!("{b:02x}")).collect())
    }

    /// Labels of the pods of a slice: the selector of its controller and its Service.
    fn pod_labels(&self, slice: Idx<Slice>) -> BTreeMap<String, String> {
        let s = &self.graph.models.slices[slice];
        let mut pod_labels = labels(&[(SLICE_LABEL, &s.name.value)]);
        if let Some(service) = self.graph.slices[slice].service {
            pod_labels.insert(
                SERVICE_LABEL.into(),
                self.graph.models.services[service].name.value.clone(),
            );
        }
        pod_labels
    }

    /// The pod spec of a slice's controller or of one of its bare pods.
    fn pod_spec(
        &self,
        slice: Idx<Slice>,
        container: &str,
        image: Idx<Image>,
        mounts: &[Idx<model::VolumeMount>],
    ) -> PodSpec {
        let g = self.graph;
        let mut volumes: Vec<Volume> = Vec::new();
        let mut volume_mounts = Vec::new();
        for &mount in mounts {
            let model = &g.models.mounts[mount];
            let source = &g.models.data[g.mounts[mount].source];
            let volume_name = volume_name(source.data_kind, &source.name.value);
            if !volumes.iter().any(|v| v.name == volume_name) {
                volumes.push(match source.data_kind {
                    DataKind::Config => Volume {
                        name: volume_name.clone(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: source.name.value.clone(),
                            ..ConfigMapVolumeSource::default()
                        }),
                        ..Volume::default()
                    },
                    DataKind::Secret => Volume {
                        name: volume_name.clone(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(source.name.value.clone()),
                            ..SecretVolumeSource::default()
                        }),
                        ..Volume::default()
                    },
                });
            }
            volume_mounts.push(VolumeMount {
                name: volume_name,
                mount_path: model.mount_path.value.clone(),
                sub_path: model.sub_path.as_ref().map(|s| s.value.clone()),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
        let principal = g.slices[slice]
            .principal
            .map(|p| g.models.principals[p].name.value.clone());
        PodSpec {
            service_account_name: principal,
            containers: vec![Container {
                name: container.to_string(),
                image: Some(g.models.images[image].container_image()),
                volume_mounts: (!volume_mounts.is_empty()).then_some(volume_mounts),
                ..Container::default()
            }],
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..PodSpec::default()
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a slice's controller object written top to bottom as Kubernetes lays it out"
    )]
    fn render_slice(&mut self, index: Idx<Slice>) {
        let g = self.graph;
        let slice = &g.models.slices[index];
        let links = &g.slices[index];
        let (Some(controller), Some(td), Some(image), true) = (
            &slice.controller_kind,
            links.trust_domain,
            links.default_image,
            slice.is_managed(),
        ) else {
            return;
        };
        let Some(key) = object_key(ModelObject::Slice(slice, self.td_name(td))) else {
            return;
        };
        let enabled = slice.enabled.as_ref().is_none_or(|e| e.value);
        let name = &slice.name.value;
        let mut metadata = self.metadata(slice.origin, name, &key);
        annotate_description(&mut metadata, slice.description.as_ref());
        let mut spec = self.pod_spec(index, name, image, &links.mounts);
        let template = |spec: PodSpec| self.pod_template(index, spec);
        let selector = LabelSelector {
            match_labels: Some(labels(&[(SLICE_LABEL, name)])),
            ..LabelSelector::default()
        };
        let count = slice
            .controller_replica_count
            .as_ref()
            .map(|c| i32::try_from(c.value).unwrap_or(i32::MAX));
        // A disabled slice keeps its Deployment or StatefulSet at zero replicas; a
        // DaemonSet or Job has no such off switch, so it is not rendered.
        let replicas = Some(if enabled { count.unwrap_or(1) } else { 0 });
        match controller.value {
            ControllerKind::Deployment => {
                let object = Deployment {
                    metadata,
                    spec: Some(DeploymentSpec {
                        replicas,
                        selector,
                        strategy: deployment_strategy(&slice.rollout),
                        paused: slice.rollout.paused.as_ref().map(|p| p.value),
                        template: template(spec),
                        ..DeploymentSpec::default()
                    }),
                    ..Deployment::default()
                };
                self.push(slice.origin, name, &key, &object);
            }
            ControllerKind::StatefulSet => {
                let service_name = links
                    .service
                    .map_or_else(|| name.clone(), |s| g.models.services[s].name.value.clone());
                let object = StatefulSet {
                    metadata,
                    spec: Some(StatefulSetSpec {
                        replicas,
                        selector,
                        service_name: Some(service_name),
                        update_strategy: stateful_set_strategy(&slice.rollout),
                        template: template(spec),
                        ..StatefulSetSpec::default()
                    }),
                    ..StatefulSet::default()
                };
                self.push(slice.origin, name, &key, &object);
            }
            ControllerKind::DaemonSet if enabled => {
                let object = DaemonSet {
                    metadata,
                    spec: Some(DaemonSetSpec {
                        selector,
                        update_strategy: daemon_set_strategy(&slice.rollout),
                        template: template(spec),
                        ..DaemonSetSpec::default()
                    }),
                    ..DaemonSet::default()
                };
                self.push(slice.origin, name, &key, &object);
            }
            ControllerKind::Job if enabled => {
                spec.restart_policy = Some("Never".into());
                let object = Job {
                    metadata,
                    spec: Some(JobSpec {
                        parallelism: count,
                        completions: count,
                        template: template(spec),
                        ..JobSpec::default()
                    }),
                    ..Job::default()
                };
                self.push(slice.origin, name, &key, &object);
            }
            ControllerKind::DaemonSet | ControllerKind::Job => {}
        }
    }

    /// A KubernetesServiceInstance that tether manages, in a slice without a controller.
    fn render_bare_pod(&mut self, index: Idx<KubernetesServiceInstance>) {
        let g = self.graph;
        let instance = &g.models.instances[index];
        let links = &g.instances[index];
        let slice = &g.models.slices[links.slice];
        let enabled = slice.enabled.as_ref().is_none_or(|e| e.value);
        if !instance.is_managed() || slice.controller_kind.is_some() || !enabled {
            return;
        }
        let object = ModelObject::Instance(instance, self.td_name(links.trust_domain));
        let Some(key) = object_key(object) else {
            return;
        };
        let name = &instance.name.value;
        let mut metadata = self.metadata(instance.origin, name, &key);
        metadata
            .labels
            .get_or_insert_default()
            .extend(self.pod_labels(links.slice));
        let mounts: Vec<Idx<model::VolumeMount>> = links
            .mounts
            .iter()
            .chain(&g.slices[links.slice].mounts)
            .copied()
            .collect();
        let object = Pod {
            metadata,
            spec: Some(self.pod_spec(links.slice, name, links.image, &mounts)),
            ..Pod::default()
        };
        self.push(instance.origin, name, &key, &object);
    }

    fn render_service(&mut self, index: Idx<model::Service>) {
        let g = self.graph;
        let service = &g.models.services[index];
        let links = &g.services[index];
        let Some(td) = links.trust_domain else { return };
        if links.ports.is_empty() {
            return;
        }
        let name = &service.name.value;
        let ports: Vec<ServicePort> = links
            .ports
            .iter()
            .map(|&p| {
                let port = &g.models.ports[p];
                let number = i32::try_from(port.internal_port.value).unwrap_or_default();
                ServicePort {
                    name: Some(port.name.value.clone()),
                    port: number,
                    target_port: Some(IntOrString::Int(number)),
                    protocol: Some(
                        port.protocol
                            .as_ref()
                            .map_or(Protocol::Tcp, |p| p.value)
                            .name()
                            .to_string(),
                    ),
                    node_port: port
                        .external_port
                        .as_ref()
                        .and_then(|e| i32::try_from(e.value).ok()),
                    ..ServicePort::default()
                }
            })
            .collect();
        let node_port = ports.iter().any(|p| p.node_port.is_some());
        let Some(key) = object_key(ModelObject::Service(service, self.td_name(td))) else {
            return;
        };
        let mut metadata = self.metadata(service.origin, name, &key);
        annotate_description(&mut metadata, service.description.as_ref());
        let object = Service {
            metadata,
            spec: Some(ServiceSpec {
                type_: Some(if node_port { "NodePort" } else { "ClusterIP" }.into()),
                selector: Some(labels(&[(SERVICE_LABEL, name)])),
                ports: Some(ports),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        self.push(service.origin, name, &key, &object);
    }
}

/// A model's `description`, kept on its object for `kubectl describe`.
fn int_or_string(value: IntOrPercent) -> IntOrString {
    match value {
        IntOrPercent::Count(n) => IntOrString::Int(n),
        IntOrPercent::Percent(p) => IntOrString::String(format!("{p}%")),
    }
}

fn strategy_type(rollout: &Rollout) -> Option<String> {
    rollout
        .update_strategy
        .as_ref()
        .map(|s| s.value.name().to_string())
}

/// Only what the model sets: an unset field stays the server's default, owned by no one.
fn deployment_strategy(rollout: &Rollout) -> Option<DeploymentStrategy> {
    let rolling = (rollout.max_surge.is_some() || rollout.max_unavailable.is_some()).then(|| {
        RollingUpdateDeployment {
            max_surge: rollout.max_surge.as_ref().map(|x| int_or_string(x.value)),
            max_unavailable: rollout
                .max_unavailable
                .as_ref()
                .map(|x| int_or_string(x.value)),
        }
    });
    let type_ = strategy_type(rollout);
    (type_.is_some() || rolling.is_some()).then_some(DeploymentStrategy {
        type_,
        rolling_update: rolling,
    })
}

fn stateful_set_strategy(rollout: &Rollout) -> Option<StatefulSetUpdateStrategy> {
    let rolling = rollout
        .partition
        .as_ref()
        .map(|p| RollingUpdateStatefulSetStrategy {
            partition: Some(i32::try_from(p.value).unwrap_or(i32::MAX)),
            ..RollingUpdateStatefulSetStrategy::default()
        });
    let type_ = strategy_type(rollout);
    (type_.is_some() || rolling.is_some()).then_some(StatefulSetUpdateStrategy {
        type_,
        rolling_update: rolling,
    })
}

fn daemon_set_strategy(rollout: &Rollout) -> Option<DaemonSetUpdateStrategy> {
    let rolling = rollout
        .max_unavailable
        .as_ref()
        .map(|x| RollingUpdateDaemonSet {
            max_unavailable: Some(int_or_string(x.value)),
            ..RollingUpdateDaemonSet::default()
        });
    let type_ = strategy_type(rollout);
    (type_.is_some() || rolling.is_some()).then_some(DaemonSetUpdateStrategy {
        type_,
        rolling_update: rolling,
    })
}

fn annotate_description(metadata: &mut ObjectMeta, description: Option<&Text>) {
    if let Some(description) = description {
        metadata
            .annotations
            .get_or_insert_default()
            .insert(DESCRIPTION_ANNOTATION.into(), description.value.clone());
    }
}

/// The objects as multi-document YAML, for `kubectl apply -f -`. Strings that YAML 1.1
/// would read as another type (`"on"`, `"0755"`) are quoted.
pub fn to_yaml(objects: &[RenderedObject]) -> Result<String, serde_saphyr::SerializeError> {
    yaml_stream(objects.iter().map(|o| &o.body))
}

/// Objects as a multi-document YAML stream, each document opened by `---`.
pub fn yaml_stream<'a>(
    objects: impl IntoIterator<Item = &'a serde_json::Value>,
) -> Result<String, serde_saphyr::SerializeError> {
    let mut text = String::new();
    for object in objects {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(object)?);
    }
    Ok(text)
}

/// The objects as a pretty-printed JSON `v1` List.
pub fn to_json_list(objects: &[RenderedObject]) -> String {
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": objects.iter().map(|o| &o.body).collect::<Vec<_>>(),
    });
    let mut text = serde_json::to_string_pretty(&list).unwrap_or_default();
    text.push('\n');
    text
}

/// `apiVersion`, `kind`, `metadata` (name, namespace, labels, annotations first),
/// then the rest as it was: the order people write and read objects in.
fn conventional_order(body: serde_json::Value) -> serde_json::Value {
    fn leading(value: serde_json::Value, first: &[&str]) -> serde_json::Value {
        let serde_json::Value::Object(mut map) = value else {
            return value;
        };
        let mut ordered = serde_json::Map::with_capacity(map.len());
        for key in first {
            if let Some(v) = map.shift_remove(*key) {
                ordered.insert((*key).to_string(), v);
            }
        }
        ordered.extend(map);
        serde_json::Value::Object(ordered)
    }
    let mut body = leading(body, &["apiVersion", "kind", "metadata"]);
    if let Some(metadata) = body.get_mut("metadata") {
        *metadata = leading(
            metadata.take(),
            &["name", "namespace", "labels", "annotations"],
        );
    }
    body
}

/// A volume name (a DNS label) for a config map or secret; long names are shortened
/// with a hash so that two sources never share a volume name.
fn volume_name(kind: DataKind, source: &str) -> String {
    let prefix = match kind {
        DataKind::Config => "config",
        DataKind::Secret => "secret",
    };
    let name = format!("{prefix}-{}", source.replace('.', "-"));
    if name.len() <= 63 {
        return name;
    }
    let digest = Sha256::digest(source.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hash}", name[..54].trim_end_matches('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_are_dns_labels() {
        assert_eq!(volume_name(DataKind::Config, "app.conf"), "config-app-conf");
        let long = volume_name(DataKind::Secret, &"x".repeat(80));
        assert!(k8s::is_dns1123_label(&long), "{long}");
        assert_ne!(long, volume_name(DataKind::Secret, &"x".repeat(81)));
    }
}
