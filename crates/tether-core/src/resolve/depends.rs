//! `depends_on`: each entry to the model it names or the cluster object it describes,
//! and the [`Workflow`] of the whole repo, whose cycles are errors.

use super::resolved_graph::Links;
use super::resolver::{Resolver, label};
use std::collections::BTreeMap;

use crate::diagnostic::Span;
use crate::directive::{self, ARGO_SYNC_WAVE};
use crate::k8s::{ObjectKey, builtin_api_version};
use crate::model::{
    ControllerKind, Dependency, DependencyTarget, Idx, Kind, ModelObject, ReadyWhen, Service,
    Slice, Spanned, Text, TrustDomain, indexed, object_key,
};
use crate::workflow::{Cycle, Gate, Member, ModelId, Need, Rule, SyncConflict, Workflow};

/// A `depends_on` entry, resolved.
pub(super) enum Resolved {
    Model(ModelId, Span),
    Object(Gate, Span),
}

/// The resolved `depends_on` entries of every model that has some.
pub(super) type Needs = Vec<(ModelId, Vec<Resolved>)>;

impl Rule {
    fn of(ready_when: Option<&Spanned<ReadyWhen>>) -> Rule {
        match ready_when.map(|r| &r.value) {
            None => Rule::BuiltIn,
            Some(ReadyWhen::Condition(c)) => Rule::Condition(c.value.clone()),
            Some(ReadyWhen::Field { path, value }) => Rule::Field {
                path: path.value.clone(),
                value: value.value.clone(),
            },
            Some(ReadyWhen::Endpoints) => Rule::Endpoints,
        }
    }
}

impl Resolver<'_> {
    /// Resolves every `depends_on` entry, reporting each one that names nothing.
    pub(super) fn resolve_needs(&mut self) -> Needs {
        let m = self.models;
        let mut needs = Vec::new();
        let with_deps = m
            .slices
            .iter()
            .enumerate()
            .map(|(i, x)| (Kind::Slice, i, &x.name, &x.depends_on))
            .chain(
                m.instances
                    .iter()
                    .enumerate()
                    .map(|(i, x)| (Kind::KubernetesServiceInstance, i, &x.name, &x.depends_on)),
            )
            .chain(
                m.resources
                    .iter()
                    .enumerate()
                    .map(|(i, x)| (x.origin.kind, i, &x.name, &x.depends_on)),
            )
            .filter(|(.., deps)| !deps.is_empty());
        for (kind, index, name, deps) in with_deps {
            let from = label(kind, &name.value);
            let resolved: Vec<Resolved> = deps
                .iter()
                .filter_map(|d| self.dependency(&from, d))
                .collect();
            needs.push((ModelId { kind, index }, resolved));
        }
        needs
    }

    fn dependency(&mut self, from: &str, dependency: &Dependency) -> Option<Resolved> {
        match &dependency.target {
            DependencyTarget::Model { kind, name } => self
                .model_id(from, *kind, name)
                .map(|id| Resolved::Model(id, dependency.span)),
            DependencyTarget::Object {
                api_version,
                kind,
                namespace,
                name,
            } => {
                let api_version = api_version
                    .as_ref()
                    .map(|a| a.value.as_str())
                    .or_else(|| builtin_api_version(&kind.value))
                    .unwrap_or_default();
                let namespace = namespace
                    .as_ref()
                    .map(|n| n.value.as_str())
                    .filter(|_| !crate::k8s::is_cluster_scoped(&kind.value));
                let gate = Gate {
                    api_version: api_version.to_string(),
                    key: ObjectKey::new(api_version, &kind.value, namespace, &name.value),
                    rule: Rule::of(dependency.ready_when.as_ref()),
                };
                Some(Resolved::Object(gate, dependency.span))
            }
        }
    }

    /// The model a `Kind/name` entry names.
    fn model_id(&mut self, from: &str, kind: Kind, reference: &Text) -> Option<ModelId> {
        let id = |index: usize| ModelId { kind, index };
        match kind {
            Kind::Slice => self.lookup::<Slice>(from, reference).map(|i| id(i.index())),
            Kind::TrustDomain => self
                .lookup::<TrustDomain>(from, reference)
                .map(|i| id(i.index())),
            Kind::Service => self
                .lookup::<Service>(from, reference)
                .map(|i| id(i.index())),
            Kind::KubernetesServiceInstance => {
                self.instance(from, reference).map(|i| id(i.index()))
            }
            Kind::KubernetesResourceInstance
            | Kind::HelmChart
            | Kind::Manifest
            | Kind::Kustomization => {
                let found = self.names.find::<()>(kind, &reference.value);
                if found.is_empty() {
                    self.dangling(from, kind, reference);
                }
                found.first().map(|i| id(i.index()))
            }
            Kind::Principal | Kind::KubernetesConfigMap | Kind::KubernetesSecret => {
                self.namespaced_model(from, kind, reference)
            }
            Kind::Node => {
                self.error(
                    from,
                    reference.span,
                    "a Node is a host, not a step of the workflow: there is nothing to wait for",
                    Some("pods wait for a ready node by themselves (the scheduler places them once one is)".into()),
                );
                None
            }
            Kind::KubernetesService
            | Kind::Site
            | Kind::Image
            | Kind::ImagePolicy
            | Kind::ServicePort
            | Kind::KubernetesConfigVolumeMount
            | Kind::KubernetesSecretVolumeMount => {
                let hint = match kind {
                    Kind::ServicePort => "depend on its Service".to_string(),
                    Kind::KubernetesConfigVolumeMount => {
                        "depend on the KubernetesConfigMap it mounts".to_string()
                    }
                    Kind::KubernetesSecretVolumeMount => {
                        "depend on the KubernetesSecret it mounts".to_string()
                    }
                    _ => "depend on a model that makes objects: a Slice, a KubernetesServiceInstance, a KubernetesResourceInstance, …".to_string(),
                };
                let article = kind.article();
                self.error(
                    from,
                    reference.span,
                    format!("{article} {kind} makes no Kubernetes object of its own: there is nothing to wait for"),
                    Some(hint),
                );
                None
            }
        }
    }

    /// A Principal, ConfigMap or Secret: `name`, unique in the repo, or
    /// `trust_domain/name`.
    fn namespaced_model(&mut self, from: &str, kind: Kind, reference: &Text) -> Option<ModelId> {
        let m = self.models;
        let (td, name) = match reference.value.split_once('/') {
            Some((td, name)) => (Some(td), name),
            None => (None, reference.value.as_str()),
        };
        let trust_domain_of = |i: usize| match kind {
            Kind::Principal => m.principals[i].trust_domain.value.as_str(),
            _ => m.data[i].trust_domain.value.as_str(),
        };
        let found: Vec<usize> = self
            .names
            .find::<()>(kind, name)
            .into_iter()
            .map(Idx::index)
            .filter(|i| td.is_none_or(|td| trust_domain_of(*i) == td))
            .collect();
        match found.as_slice() {
            [only] => Some(ModelId { kind, index: *only }),
            [] => {
                self.dangling(from, kind, &Spanned::new(name.to_string(), reference.span));
                None
            }
            several => {
                let written: Vec<String> = several
                    .iter()
                    .map(|i| format!("{kind}/{}/{name}", trust_domain_of(*i)))
                    .collect();
                self.error(
                    from,
                    reference.span,
                    format!("\"{name}\" names a {kind} in several trust domains"),
                    Some(format!("write one of: {}", written.join(", "))),
                );
                None
            }
        }
    }

    /// The workflow of the resolved models; every dependency cycle is an error.
    pub(super) fn build_workflow(&mut self, links: &Links, needs: Needs) -> Workflow {
        let mut workflow = Workflow::new(self.members(links));
        for (id, resolved) in needs {
            let Some(member) = workflow.member(id) else {
                continue;
            };
            let mapped: Vec<Need> = resolved
                .into_iter()
                .filter_map(|r| match r {
                    Resolved::Model(target, span) => workflow
                        .member(target)
                        .map(|member| Need::Model { member, span }),
                    // An object another step makes is that step's, as if named by it.
                    Resolved::Object(gate, span) => Some(match workflow.maker_of(&gate.key) {
                        Some(maker) if maker != member => Need::Model {
                            member: maker,
                            span,
                        },
                        _ => Need::Object { gate, span },
                    }),
                })
                .collect();
            workflow.members[member].needs = mapped;
        }
        for cycle in workflow.cycles() {
            self.report_cycle(&workflow, &cycle);
        }
        if let Some(conflict) = workflow.plan_waves() {
            self.report_sync_conflict(&workflow, &conflict);
        }
        workflow
    }

    fn report_sync_conflict(&mut self, workflow: &Workflow, conflict: &SyncConflict) {
        let waiting = &workflow.members[conflict.member];
        let needed = &workflow.members[conflict.needed];
        self.error(
            &written_as(&waiting.label),
            conflict.span,
            format!(
                "{} waits for {}, whose objects {ARGO_SYNC_WAVE} puts after it (sync-wave {} against {})",
                waiting.label,
                needed.label,
                conflict.needed_sync_wave,
                conflict.sync_wave
            ),
            Some(format!(
                "give {}'s objects a sync-wave no later than {}, or remove this depends_on entry",
                needed.label, conflict.sync_wave
            )),
        );
    }

    fn report_cycle(&mut self, workflow: &Workflow, cycle: &Cycle) {
        let member = |i: usize| &workflow.members[cycle.members[i % cycle.members.len()]];
        let mut chain = member(0).label.clone();
        for (i, link) in cycle.links.iter().enumerate() {
            chain.push_str(" → ");
            chain.push_str(&member(i + 1).label);
            if link.is_none() {
                chain.push_str(" (its slice)");
            }
        }
        let first = member(0);
        let at = cycle.links[0]
            .or_else(|| cycle.links.iter().flatten().next().copied())
            .unwrap_or(first.span);
        let others: Vec<String> = cycle
            .links
            .iter()
            .flatten()
            .filter(|s| **s != at)
            .map(|s| self.at(*s))
            .collect();
        let mut hint = "remove one of these depends_on entries".to_string();
        if !others.is_empty() {
            hint.push_str(&format!(" (the others: {})", others.join(", ")));
        }
        self.error(
            &written_as(&first.label),
            at,
            format!("dependency cycle: {chain}"),
            Some(hint),
        );
    }

    /// A member for every model that makes (or stands for) objects.
    fn members(&self, links: &Links) -> Vec<Member> {
        let m = self.models;
        let mut members = Vec::new();
        let td_name = |td: Idx<TrustDomain>| m.trust_domains[td].name.value.as_str();
        let td_id = |td: Idx<TrustDomain>| ModelId {
            kind: Kind::TrustDomain,
            index: td.index(),
        };
        let mut requires: Vec<(usize, Vec<ModelId>)> = Vec::new();
        // (slice index, member of the instance) of each pod of a slice without controller.
        let mut bare_pods: Vec<(usize, usize)> = Vec::new();
        for (i, x) in m.trust_domains.iter().enumerate() {
            let mut node = member(Kind::TrustDomain, i, &x.name, x.origin.span, x.is_managed());
            node.objects.extend(gate(
                object_key(ModelObject::TrustDomain(x)),
                "v1",
                Rule::BuiltIn,
            ));
            members.push(node);
        }
        for (i, x) in indexed(&m.principals) {
            let mut node = member(
                Kind::Principal,
                i.index(),
                &x.name,
                x.origin.span,
                x.is_managed(),
            );
            node.objects.extend(gate(
                object_key(ModelObject::Principal(x)),
                "v1",
                Rule::BuiltIn,
            ));
            requires.push((members.len(), vec![td_id(links.principals[i].trust_domain)]));
            members.push(node);
        }
        for (i, x) in indexed(&m.data) {
            let mut node = member(
                x.data_kind.model_kind(),
                i.index(),
                &x.name,
                x.origin.span,
                true,
            );
            node.objects
                .extend(gate(object_key(ModelObject::Data(x)), "v1", Rule::BuiltIn));
            requires.push((members.len(), vec![td_id(links.data[i].trust_domain)]));
            members.push(node);
        }
        self.workload_members(links, &mut members, &mut requires, &mut bare_pods);
        for (i, x) in indexed(&m.services) {
            let l = &links.services[i];
            let mut node = member(Kind::Service, i.index(), &x.name, x.origin.span, true);
            if let (Some(td), false) = (l.trust_domain, l.ports.is_empty()) {
                let key = object_key(ModelObject::Service(x, td_name(td)));
                node.objects.extend(gate(key, "v1", Rule::BuiltIn));
                requires.push((members.len(), vec![td_id(td)]));
            }
            members.push(node);
        }
        for (i, x) in m.resources.iter().enumerate() {
            let mut node = member(x.origin.kind, i, &x.name, x.origin.span, true);
            let rule = Rule::of(x.ready_when.as_ref());
            for object in &x.objects {
                let key = object_key(ModelObject::Resource(&object.value));
                let api_version = object.value["apiVersion"].as_str().unwrap_or_default();
                // A sync-wave tether cannot read is reported where it is written.
                let sync_wave = directive::directives(&object.value).map_or(0, |d| d.sync_wave);
                if let (Some(key), true) = (&key, sync_wave != 0) {
                    node.sync_waves.insert(key.clone(), sync_wave);
                }
                node.objects.extend(gate(key, api_version, rule.clone()));
            }
            members.push(node);
        }
        // Hosts wait for nothing and nothing waits for them; members so that
        // `--only Node/name` selects one.
        for (i, x) in m.hosts.iter().enumerate() {
            members.push(member(Kind::Node, i, &x.name, x.origin.span, true));
        }
        link_members(&mut members, requires, bare_pods);
        members
    }

    /// The members of slices and pods: what they require (trust domain, principal,
    /// mounted data), and the pods of slices without a controller.
    fn workload_members(
        &self,
        links: &Links,
        members: &mut Vec<Member>,
        requires: &mut Vec<(usize, Vec<ModelId>)>,
        bare_pods: &mut Vec<(usize, usize)>,
    ) {
        let m = self.models;
        let td_name = |td: Idx<TrustDomain>| m.trust_domains[td].name.value.as_str();
        let td_id = |td: Idx<TrustDomain>| ModelId {
            kind: Kind::TrustDomain,
            index: td.index(),
        };
        let data_id = |mount: Idx<crate::model::VolumeMount>| {
            let source = links.mounts[mount].source;
            ModelId {
                kind: m.data[source].data_kind.model_kind(),
                index: source.index(),
            }
        };
        for (i, x) in indexed(&m.slices) {
            let l = &links.slices[i];
            let mut node = member(
                Kind::Slice,
                i.index(),
                &x.name,
                x.origin.span,
                x.is_managed(),
            );
            let enabled = x.enabled.as_ref().is_none_or(|e| e.value);
            let has_object = x.controller_kind.as_ref().is_some_and(|c| {
                enabled
                    || matches!(
                        c.value,
                        ControllerKind::Deployment | ControllerKind::StatefulSet
                    )
            });
            if let (Some(td), Some(controller), true) =
                (l.trust_domain, &x.controller_kind, has_object)
            {
                let key = object_key(ModelObject::Slice(x, td_name(td)));
                node.objects
                    .extend(gate(key, controller.value.api_version(), Rule::BuiltIn));
            }
            let mut needed: Vec<ModelId> = l.trust_domain.map(td_id).into_iter().collect();
            needed.extend(l.principal.map(|p| ModelId {
                kind: Kind::Principal,
                index: p.index(),
            }));
            needed.extend(l.mounts.iter().map(|mount| data_id(*mount)));
            requires.push((members.len(), needed));
            members.push(node);
        }
        for (i, x) in indexed(&m.instances) {
            let l = &links.instances[i];
            let slice = &m.slices[l.slice];
            let mut node = member(
                Kind::KubernetesServiceInstance,
                i.index(),
                &x.name,
                x.origin.span,
                x.is_managed(),
            );
            let enabled = slice.enabled.as_ref().is_none_or(|e| e.value);
            if slice.controller_kind.is_none() && (enabled || !x.is_managed()) {
                let key = object_key(ModelObject::Instance(x, td_name(l.trust_domain)));
                node.objects.extend(gate(key, "v1", Rule::BuiltIn));
                bare_pods.push((l.slice.index(), members.len()));
            }
            let mut needed = vec![
                ModelId {
                    kind: Kind::Slice,
                    index: l.slice.index(),
                },
                td_id(l.trust_domain),
            ];
            needed.extend(l.mounts.iter().map(|mount| data_id(*mount)));
            requires.push((members.len(), needed));
            members.push(node);
        }
    }
}

/// A member's `Kind/name` as an error names the model: `Kind "name"`.
fn written_as(label: &str) -> String {
    match label.split_once('/') {
        Some((kind, name)) => format!("{kind} \"{name}\""),
        None => label.to_string(),
    }
}

/// A member of the workflow, before its links are known.
fn member(kind: Kind, index: usize, name: &Text, span: Span, managed: bool) -> Member {
    Member {
        id: ModelId { kind, index },
        label: format!("{kind}/{}", name.value),
        span,
        managed,
        wave: 0,
        waves: BTreeMap::new(),
        sync_waves: BTreeMap::new(),
        needs: Vec::new(),
        requires: Vec::new(),
        objects: Vec::new(),
        cluster: None,
    }
}

/// The gate of an object, when the model makes one.
fn gate(key: Option<ObjectKey>, api_version: &str, rule: Rule) -> Option<Gate> {
    key.map(|key| Gate {
        api_version: api_version.to_string(),
        key,
        rule,
    })
}

/// Sets what each member requires, and gives a slice without a controller the pods
/// of its instances as its objects: it is ready when they are.
fn link_members(
    members: &mut [Member],
    requires: Vec<(usize, Vec<ModelId>)>,
    bare_pods: Vec<(usize, usize)>,
) {
    let position: std::collections::HashMap<ModelId, usize> =
        members.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
    for (member, ids) in requires {
        let mut found: Vec<usize> = ids
            .iter()
            .filter_map(|id| position.get(id).copied())
            .collect();
        found.sort_unstable();
        found.dedup();
        members[member].requires = found;
    }
    for (slice, pod) in bare_pods {
        let id = ModelId {
            kind: Kind::Slice,
            index: slice,
        };
        if let Some(&slice) = position.get(&id) {
            let objects = members[pod].objects.clone();
            members[slice].objects.extend(objects);
        }
    }
}
