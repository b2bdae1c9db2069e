//! Validate and resolve: every reference to its model, every rule of design.md
//! section 2, all problems in one pass. The result, when there is no error, is a
//! [`Graph`] whose links later stages follow without checking again.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::diagnostic::{Diagnostic, Diagnostics, Span, suggestion};
use crate::k8s;
use crate::model::{ControllerKind, DataKind, Kind, Models, MountTarget, Protocol, Spanned, Text};
use crate::source::SourceFiles;

/// Indices into the vectors of [`Models`]; each `*Links` vector runs parallel to the
/// model vector of the same name.
#[derive(Clone, Debug)]
pub struct Graph {
    pub models: Models,
    pub principals: Vec<PrincipalLinks>,
    pub data: Vec<DataLinks>,
    pub slices: Vec<SliceLinks>,
    pub instances: Vec<InstanceLinks>,
    pub mounts: Vec<MountLinks>,
    pub services: Vec<ServiceLinks>,
}

#[derive(Clone, Debug)]
pub struct PrincipalLinks {
    pub trust_domain: usize,
}

#[derive(Clone, Debug)]
pub struct DataLinks {
    pub trust_domain: usize,
}

#[derive(Clone, Debug)]
pub struct SliceLinks {
    pub trust_domain: Option<usize>,
    pub principal: Option<usize>,
    pub service: Option<usize>,
    pub default_image: Option<usize>,
    /// Indices into `models.mounts` of the mounts that name this slice.
    pub mounts: Vec<usize>,
}

#[derive(Clone, Debug)]
pub struct InstanceLinks {
    pub slice: usize,
    pub trust_domain: usize,
    pub image: usize,
    /// Indices into `models.mounts` of the mounts that name this instance.
    pub mounts: Vec<usize>,
}

#[derive(Clone, Debug)]
pub struct MountLinks {
    /// Index into `models.data`.
    pub source: usize,
}

#[derive(Clone, Debug)]
pub struct ServiceLinks {
    /// Where the Service is rendered; `None` when it has no ports and no slices.
    pub trust_domain: Option<usize>,
    /// Indices into `models.ports`, in source order.
    pub ports: Vec<usize>,
}

/// Resolves and checks `models`; the graph is `None` when any error was found.
pub fn resolve(models: Models, files: &SourceFiles) -> (Option<Graph>, Diagnostics) {
    let mut resolver = Resolver {
        models: &models,
        files,
        diagnostics: Diagnostics::default(),
        names: NameIndex::build(&models),
    };
    let links = resolver.run();
    let diagnostics = resolver.diagnostics;
    if diagnostics.has_errors() {
        return (None, diagnostics);
    }
    let graph = links.map(|links| Graph {
        principals: links.principals,
        data: links.data,
        slices: links.slices,
        instances: links.instances,
        mounts: links.mounts,
        services: links.services,
        models,
    });
    (graph, diagnostics)
}

struct Links {
    principals: Vec<PrincipalLinks>,
    data: Vec<DataLinks>,
    slices: Vec<SliceLinks>,
    instances: Vec<InstanceLinks>,
    mounts: Vec<MountLinks>,
    services: Vec<ServiceLinks>,
}

/// Names of the models that references can point at, by kind.
struct NameIndex<'m> {
    by_kind: HashMap<Kind, HashMap<&'m str, Vec<usize>>>,
}

impl<'m> NameIndex<'m> {
    fn build(models: &'m Models) -> Self {
        let mut by_kind: HashMap<Kind, HashMap<&'m str, Vec<usize>>> = HashMap::new();
        let mut add = |kind: Kind, names: Vec<&'m str>| {
            let index = by_kind.entry(kind).or_default();
            for (i, name) in names.into_iter().enumerate() {
                index.entry(name).or_default().push(i);
            }
        };
        add(
            Kind::KubernetesService,
            models
                .kubernetes_services
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::Site,
            models.sites.iter().map(|m| m.name.value.as_str()).collect(),
        );
        add(
            Kind::Image,
            models
                .images
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::TrustDomain,
            models
                .trust_domains
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::Principal,
            models
                .principals
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::Slice,
            models
                .slices
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::KubernetesServiceInstance,
            models
                .instances
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::Service,
            models
                .services
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        add(
            Kind::KubernetesResourceInstance,
            models
                .resources
                .iter()
                .map(|m| m.name.value.as_str())
                .collect(),
        );
        // ConfigMaps and Secrets share `models.data`; index each kind separately.
        for kind in [DataKind::Config, DataKind::Secret] {
            let index = by_kind.entry(kind.model_kind()).or_default();
            for (i, m) in models
                .data
                .iter()
                .enumerate()
                .filter(|(_, m)| m.data_kind == kind)
            {
                index.entry(m.name.value.as_str()).or_default().push(i);
            }
        }
        NameIndex { by_kind }
    }

    fn get(&self, kind: Kind, name: &str) -> &[usize] {
        self.by_kind
            .get(&kind)
            .and_then(|index| index.get(name))
            .map_or(&[], Vec::as_slice)
    }

    fn names(&self, kind: Kind) -> impl Iterator<Item = &'m str> + '_ {
        self.by_kind
            .get(&kind)
            .into_iter()
            .flat_map(|index| index.keys().copied())
    }
}

/// A rendered object's identity: API group, kind, namespace, name.
type ObjectKey = (String, String, Option<String>, String);

/// A model name that becomes a Kubernetes name: the model kind, the name, its rule,
/// and the rule in words.
type NameRule<'a> = (Kind, &'a Text, fn(&str) -> bool, &'static str);

struct Resolver<'m> {
    models: &'m Models,
    files: &'m SourceFiles,
    diagnostics: Diagnostics,
    names: NameIndex<'m>,
}

/// `Kind "name"`, the label diagnostics carry.
fn label(kind: Kind, name: &str) -> String {
    format!("{kind} \"{name}\"")
}

impl<'m> Resolver<'m> {
    fn error(&mut self, model: &str, span: Span, message: impl Into<String>, hint: Option<String>) {
        self.diagnostics.push(
            Diagnostic::error(span, message)
                .in_model(model)
                .with_optional_hint(hint),
        );
    }

    fn run(&mut self) -> Option<Links> {
        self.check_duplicates();
        self.check_owners();
        self.check_names();
        let principals = self.resolve_principals();
        let data = self.resolve_data();
        let mut slices = self.resolve_slices();
        let mut instances = self.resolve_instances(&slices);
        let mounts = self.resolve_mounts(&mut slices, &mut instances);
        let services = self.resolve_services(&slices);
        self.check_object_collisions(&slices, &instances, &services);
        Some(Links {
            principals: principals?,
            data: data?,
            slices: slices.into_iter().collect::<Option<Vec<_>>>()?,
            instances: instances.into_iter().collect::<Option<Vec<_>>>()?,
            mounts: mounts?,
            services: services?,
        })
    }

    /// A reference by plain name to a model of `kind`.
    fn lookup(&mut self, from: &str, kind: Kind, reference: &Text) -> Option<usize> {
        let found = self.names.get(kind, &reference.value);
        if let Some(&first) = found.first() {
            return Some(first);
        }
        self.dangling(from, kind, reference);
        None
    }

    /// Reports a reference that names no model of `kind`, saying what it does name.
    fn dangling(&mut self, from: &str, kind: Kind, reference: &Text) {
        let other_kind = Kind::ALL
            .into_iter()
            .find(|k| *k != kind && !self.names.get(*k, &reference.value).is_empty());
        let (message, hint) = match other_kind {
            Some(other) => (
                format!("\"{}\" is a {other}, not a {kind}", reference.value),
                Some(format!("this field refers to a {kind}")),
            ),
            None => (
                format!("no {kind} named \"{}\"", reference.value),
                suggestion(&reference.value, self.names.names(kind))
                    .or_else(|| Some(format!("add a {kind} model named \"{}\"", reference.value))),
            ),
        };
        self.error(from, reference.span, message, hint);
    }

    fn check_duplicates(&mut self) {
        let m = self.models;
        let mut seen: HashMap<(Kind, String), Span> = HashMap::new();
        let named = |kind: Kind, name: &'m Text| (kind, name.value.clone(), name);
        let scoped = |kind: Kind, scope: &str, name: &'m Text| {
            (kind, format!("{scope}/{}", name.value), name)
        };
        let mut identities: Vec<(Kind, String, &Text)> = Vec::new();
        identities.extend(
            m.kubernetes_services
                .iter()
                .map(|x| named(Kind::KubernetesService, &x.name)),
        );
        identities.extend(m.sites.iter().map(|x| named(Kind::Site, &x.name)));
        identities.extend(m.images.iter().map(|x| {
            (
                Kind::Image,
                format!("{}:{}", x.name.value, x.tag_or_default()),
                &x.name,
            )
        }));
        identities.extend(
            m.trust_domains
                .iter()
                .map(|x| named(Kind::TrustDomain, &x.name)),
        );
        identities.extend(
            m.principals
                .iter()
                .map(|x| scoped(Kind::Principal, &x.trust_domain.value, &x.name)),
        );
        identities.extend(m.slices.iter().map(|x| named(Kind::Slice, &x.name)));
        identities.extend(
            m.data
                .iter()
                .map(|x| scoped(x.data_kind.model_kind(), &x.trust_domain.value, &x.name)),
        );
        identities.extend(m.services.iter().map(|x| named(Kind::Service, &x.name)));
        identities.extend(
            m.ports
                .iter()
                .map(|x| scoped(Kind::ServicePort, &x.service.value, &x.name)),
        );
        identities.extend(
            m.resources
                .iter()
                .map(|x| named(Kind::KubernetesResourceInstance, &x.name)),
        );
        for (kind, id, name) in identities {
            let span = name.span;
            match seen.get(&(kind, id.clone())) {
                Some(first) => {
                    let message = format!("duplicate {kind} \"{id}\"");
                    let hint = Some(format!(
                        "also defined at {}; each {kind} needs its own {}",
                        self.at(*first),
                        identity_words(kind)
                    ));
                    self.error(&label(kind, &name.value), span, message, hint);
                }
                None => {
                    seen.insert((kind, id), span);
                }
            }
        }
    }

    /// `path:line:column` of a span, for hints that point at another place in the repo.
    fn at(&self, span: Span) -> String {
        format!(
            "{}:{}:{}",
            self.files.path(span.file),
            span.line,
            span.column
        )
    }

    fn check_owners(&mut self) {
        let m = self.models;
        let owners: Vec<(String, Option<&Text>, Span)> = m
            .trust_domains
            .iter()
            .filter(|x| x.is_managed())
            .map(|x| {
                (
                    label(Kind::TrustDomain, &x.name.value),
                    x.owner.as_ref(),
                    x.origin.span,
                )
            })
            .chain(m.instances.iter().filter(|x| x.is_managed()).map(|x| {
                (
                    label(Kind::KubernetesServiceInstance, &x.name.value),
                    x.owner.as_ref(),
                    x.origin.span,
                )
            }))
            .chain(m.resources.iter().map(|x| {
                (
                    label(Kind::KubernetesResourceInstance, &x.name.value),
                    x.owner.as_ref(),
                    x.origin.span,
                )
            }))
            .collect();
        let mut services: Vec<&str> = self.names.names(Kind::KubernetesService).collect();
        services.sort_unstable();
        for (model, owner, span) in owners {
            match owner {
                Some(owner) => {
                    self.lookup(&model, Kind::KubernetesService, owner);
                }
                None if services.len() == 1 => {}
                None => {
                    let hint = if services.is_empty() {
                        "add a KubernetesService model (kind: KubernetesService, name: kubernetes), which owners default to".to_string()
                    } else {
                        format!(
                            "the repo has several KubernetesServices; name one: {}",
                            services.join(", ")
                        )
                    };
                    self.error(&model, span, "missing \"owner\"", Some(hint));
                }
            }
        }
    }

    /// Names that become Kubernetes names follow Kubernetes' rules.
    fn check_names(&mut self) {
        let m = self.models;
        let mut checks: Vec<NameRule> = Vec::new();
        for x in &m.trust_domains {
            checks.push((
                Kind::TrustDomain,
                &x.name,
                k8s::is_dns1123_label,
                "a namespace name: lowercase letters, digits and '-', at most 63",
            ));
        }
        for x in &m.principals {
            checks.push((
                Kind::Principal,
                &x.name,
                k8s::is_dns1123_subdomain,
                "a ServiceAccount name: lowercase letters, digits, '-' and '.'",
            ));
        }
        for x in &m.data {
            checks.push((
                x.data_kind.model_kind(),
                &x.name,
                k8s::is_dns1123_subdomain,
                "an object name: lowercase letters, digits, '-' and '.'",
            ));
        }
        for x in &m.instances {
            // A discovered pod has whatever name the cluster accepted.
            if x.is_managed() {
                checks.push((
                    Kind::KubernetesServiceInstance,
                    &x.name,
                    k8s::is_dns1123_label,
                    "a pod and container name: lowercase letters, digits and '-', at most 63",
                ));
            }
        }
        // A discovered slice renders nothing, so its name is free.
        for x in m.slices.iter().filter(|x| x.is_managed()) {
            if x.controller_kind.is_some() {
                checks.push((Kind::Slice, &x.name, k8s::is_dns1123_label, "the name of its controller and container: lowercase letters, digits and '-', at most 63"));
            } else {
                checks.push((
                    Kind::Slice,
                    &x.name,
                    k8s::is_label_value,
                    "a label value on its pods: letters, digits, '-', '_' and '.', at most 63",
                ));
            }
        }
        for x in &m.services {
            checks.push((Kind::Service, &x.name, k8s::is_dns1035_label, "a Service name: lowercase letters, digits and '-', starting with a letter, at most 63"));
        }
        for x in &m.ports {
            checks.push((
                Kind::ServicePort,
                &x.name,
                k8s::is_dns1123_label,
                "a port name: lowercase letters, digits and '-', at most 63",
            ));
        }
        for (kind, name, valid, rule) in checks {
            if !valid(&name.value) {
                let fixed = k8s::suggest_dns1123_label(&name.value);
                let hint = if !fixed.is_empty() && valid(&fixed) {
                    format!("it becomes {rule}; for example \"{fixed}\"")
                } else {
                    format!("it becomes {rule}")
                };
                self.error(
                    &label(kind, &name.value),
                    name.span,
                    format!("\"{}\" is not a valid {kind} name", name.value),
                    Some(hint),
                );
            }
        }
        for x in &m.images {
            self.check_image(x);
        }
    }

    fn check_image(&mut self, image: &crate::model::Image) {
        let model = label(Kind::Image, &image.name.value);
        let name = &image.name.value;
        let last_segment = name.rsplit('/').next().unwrap_or(name);
        if last_segment.contains(':') {
            self.error(
                &model,
                image.name.span,
                format!("image name \"{name}\" includes a tag"),
                Some("write the tag in the \"tag\" field".into()),
            );
        } else if name.is_empty()
            || name
                .chars()
                .any(|c| c.is_whitespace() || c.is_ascii_uppercase())
        {
            self.error(
                &model,
                image.name.span,
                format!("\"{name}\" is not a valid image name"),
                Some("image names are lowercase, without spaces".into()),
            );
        }
        if let Some(tag) = &image.tag {
            let valid = !tag.value.is_empty()
                && tag.value.len() <= 128
                && !tag.value.starts_with(['.', '-'])
                && tag
                    .value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if !valid {
                self.error(
                    &model,
                    tag.span,
                    format!("\"{}\" is not a valid image tag", tag.value),
                    Some("tags use letters, digits, '_', '.' and '-', at most 128".into()),
                );
            }
        }
    }

    /// A trust domain by name.
    fn trust_domain(&mut self, from: &str, reference: &Text) -> Option<usize> {
        self.lookup(from, Kind::TrustDomain, reference)
    }

    /// An Image reference: `name:tag`, or `name` when the repo has one tag of it.
    fn image(&mut self, from: &str, reference: &Text) -> Option<usize> {
        let images = &self.models.images;
        let (name, tag) = crate::model::split_image_reference(&reference.value);
        let candidates: Vec<usize> = self.names.get(Kind::Image, name).to_vec();
        match (tag, candidates.as_slice()) {
            (_, []) => {
                let hint = suggestion(name, self.names.names(Kind::Image))
                    .unwrap_or_else(|| format!("add an Image model with name \"{name}\""));
                self.error(
                    from,
                    reference.span,
                    format!("no Image named \"{name}\""),
                    Some(hint),
                );
                None
            }
            (Some(tag), found) => {
                let matching = found
                    .iter()
                    .copied()
                    .find(|i| images[*i].tag_or_default() == tag);
                if matching.is_none() {
                    let tags: Vec<&str> =
                        found.iter().map(|i| images[*i].tag_or_default()).collect();
                    self.error(
                        from,
                        reference.span,
                        format!("no Image \"{name}\" with tag \"{tag}\""),
                        Some(format!(
                            "tags of \"{name}\" in the repo: {}",
                            tags.join(", ")
                        )),
                    );
                }
                matching
            }
            (None, [only]) => Some(*only),
            (None, found) => {
                let refs: Vec<String> = found.iter().map(|i| images[*i].reference()).collect();
                self.error(
                    from,
                    reference.span,
                    format!("image \"{name}\" has {} tags in the repo", found.len()),
                    Some(format!("write one of: {}", refs.join(", "))),
                );
                None
            }
        }
    }

    /// A namespaced model (`name` in `context`, or `trust_domain/name`).
    fn namespaced(
        &mut self,
        from: &str,
        kind: Kind,
        reference: &Text,
        context: usize,
        why: &str,
    ) -> Option<usize> {
        let context_name = self.models.trust_domains[context].name.value.clone();
        let (td_name, name) = match reference.value.split_once('/') {
            Some((td, name)) => (td.to_string(), name.to_string()),
            None => (context_name.clone(), reference.value.clone()),
        };
        let candidates: Vec<usize> = self.names.get(kind, &name).to_vec();
        let trust_domain_of = |i: usize| -> &str {
            match kind {
                Kind::Principal => &self.models.principals[i].trust_domain.value,
                Kind::KubernetesConfigMap | Kind::KubernetesSecret => {
                    &self.models.data[i].trust_domain.value
                }
                _ => "",
            }
        };
        if let Some(found) = candidates
            .iter()
            .copied()
            .find(|i| trust_domain_of(*i) == td_name)
        {
            if td_name != context_name {
                self.error(from, reference.span, format!("{kind} \"{name}\" is in trust domain \"{td_name}\", not in \"{context_name}\""), Some(why.to_string()));
                return None;
            }
            return Some(found);
        }
        if let Some(elsewhere) = candidates.first() {
            let other = trust_domain_of(*elsewhere).to_string();
            self.error(
                from,
                reference.span,
                format!(
                    "{kind} \"{name}\" is in trust domain \"{other}\", not in \"{context_name}\""
                ),
                Some(why.to_string()),
            );
            return None;
        }
        self.dangling(from, kind, &Spanned::new(name, reference.span));
        None
    }

    fn resolve_principals(&mut self) -> Option<Vec<PrincipalLinks>> {
        let m = self.models;
        let links: Vec<Option<PrincipalLinks>> = m
            .principals
            .iter()
            .map(|x| {
                let from = label(Kind::Principal, &x.name.value);
                self.trust_domain(&from, &x.trust_domain)
                    .map(|trust_domain| PrincipalLinks { trust_domain })
            })
            .collect();
        links.into_iter().collect()
    }

    fn resolve_data(&mut self) -> Option<Vec<DataLinks>> {
        let m = self.models;
        let links: Vec<Option<DataLinks>> = m
            .data
            .iter()
            .map(|x| {
                let from = label(x.data_kind.model_kind(), &x.name.value);
                self.trust_domain(&from, &x.trust_domain)
                    .map(|trust_domain| DataLinks { trust_domain })
            })
            .collect();
        links.into_iter().collect()
    }

    fn resolve_slices(&mut self) -> Vec<Option<SliceLinks>> {
        let m = self.models;
        m.slices
            .iter()
            .map(|x| {
                let from = label(Kind::Slice, &x.name.value);
                let mut ok = true;
                if let Some(site) = &x.site {
                    ok &= self.lookup(&from, Kind::Site, site).is_some();
                }
                let trust_domain = match &x.trust_domain {
                    Some(td) => {
                        let found = self.trust_domain(&from, td);
                        ok &= found.is_some();
                        found
                    }
                    None => None,
                };
                let principal = match (&x.principal, trust_domain, &x.trust_domain) {
                    (Some(p), Some(td), _) => {
                        let found = self.namespaced(
                            &from,
                            Kind::Principal,
                            p,
                            td,
                            "a slice's principal must live in the slice's trust domain",
                        );
                        ok &= found.is_some();
                        found
                    }
                    (Some(p), None, None) => {
                        self.error(
                            &from,
                            p.span,
                            "a slice with a principal needs a trust_domain",
                            Some(
                                "set trust_domain: the ServiceAccount lives in that namespace"
                                    .into(),
                            ),
                        );
                        ok = false;
                        None
                    }
                    _ => None,
                };
                let service = match &x.service {
                    Some(s) => {
                        let found = self.lookup(&from, Kind::Service, s);
                        ok &= found.is_some();
                        found
                    }
                    None => None,
                };
                let default_image = match &x.default_image {
                    Some(i) => {
                        let found = self.image(&from, i);
                        ok &= found.is_some();
                        found
                    }
                    None => None,
                };
                if let Some(controller) = &x.controller_kind {
                    let kind = controller.value.name();
                    if x.trust_domain.is_none() {
                        self.error(
                            &from,
                            controller.span,
                            format!("a {kind} slice needs a trust_domain"),
                            Some(format!(
                                "set trust_domain: the {kind} is created in that namespace"
                            )),
                        );
                        ok = false;
                    }
                    if x.default_image.is_none() && x.is_managed() {
                        self.error(
                            &from,
                            controller.span,
                            format!("a {kind} slice needs a default_image"),
                            Some(
                                "set default_image to an Image (name:tag): its pods run it".into(),
                            ),
                        );
                        ok = false;
                    }
                    if controller.value == ControllerKind::DaemonSet
                        && let Some(count) = &x.controller_replica_count
                    {
                        self.diagnostics.push(
                            Diagnostic::warning(
                                count.span,
                                "controller_replica_count is ignored for a DaemonSet",
                            )
                            .in_model(from.clone())
                            .with_hint("a DaemonSet runs one pod per node"),
                        );
                    }
                } else if let Some(count) = &x.controller_replica_count {
                    self.diagnostics.push(
                        Diagnostic::warning(
                            count.span,
                            "controller_replica_count is ignored without controller_kind",
                        )
                        .in_model(from.clone())
                        .with_hint("set controller_kind: Deployment to run replicas"),
                    );
                }
                ok.then_some(SliceLinks {
                    trust_domain,
                    principal,
                    service,
                    default_image,
                    mounts: Vec::new(),
                })
            })
            .collect()
    }

    fn resolve_instances(&mut self, slices: &[Option<SliceLinks>]) -> Vec<Option<InstanceLinks>> {
        let m = self.models;
        let mut seen: HashMap<(usize, &str), Span> = HashMap::new();
        m.instances
            .iter()
            .map(|x| {
                let from = label(Kind::KubernetesServiceInstance, &x.name.value);
                let image = self.image(&from, &x.image);
                let slice = self.lookup(&from, Kind::Slice, &x.slice)?;
                let slice_model = &m.slices[slice];
                if let Some(pod_ip) = &x.pod_ip
                    && pod_ip.value.parse::<IpAddr>().is_err() {
                        self.error(&from, pod_ip.span, format!("\"{}\" is not an IP address", pod_ip.value), None);
                    }
                if x.is_managed()
                    && let Some(controller) = &slice_model.controller_kind {
                        self.error(
                            &from,
                            x.slice.span,
                            format!("slice \"{}\" is a {}: its controller creates its pods", slice_model.name.value, controller.value.name()),
                            Some("set xos_managed: false to record a pod the controller made, or remove controller_kind from the slice".into()),
                        );
                    }
                let links = slices[slice].as_ref()?;
                let Some(trust_domain) = links.trust_domain else {
                    if slice_model.trust_domain.is_none() {
                        self.error(&from, x.slice.span, format!("slice \"{}\" has no trust_domain, so the pod has no namespace", slice_model.name.value), Some("set trust_domain on the slice".into()));
                    }
                    return None;
                };
                if let Some(first) = seen.insert((trust_domain, x.name.value.as_str()), x.name.span) {
                    let td = &m.trust_domains[trust_domain].name.value;
                    self.error(&from, x.name.span, format!("duplicate KubernetesServiceInstance \"{}\" in trust domain \"{td}\"", x.name.value), Some(format!("also defined at {}; pods are identified by namespace and name", self.at(first))));
                }
                Some(InstanceLinks { slice, trust_domain, image: image?, mounts: Vec::new() })
            })
            .collect()
    }

    fn resolve_mounts(
        &mut self,
        slices: &mut [Option<SliceLinks>],
        instances: &mut [Option<InstanceLinks>],
    ) -> Option<Vec<MountLinks>> {
        let m = self.models;
        let mut paths: HashMap<(bool, usize, &str), Span> = HashMap::new();
        let mut links = Vec::new();
        let mut ok = true;
        for (index, x) in m.mounts.iter().enumerate() {
            let kind = x.origin.kind;
            let from = format!(
                "{kind} \"{}\" at \"{}\"",
                x.source.value, x.mount_path.value
            );
            // The target: its trust domain, and where this mount is recorded.
            let target = match &x.target {
                MountTarget::ServiceInstance(name) => self.instance(&from, name).and_then(|i| {
                    if !m.instances[i].is_managed() {
                        self.error(
                            &from,
                            name.span,
                            format!(
                                "pod \"{}\" is not managed by tether (xos_managed: false)",
                                name.value
                            ),
                            Some("tether only mounts volumes into pods it creates".into()),
                        );
                        return None;
                    }
                    let td = instances[i].as_ref()?.trust_domain;
                    Some((false, i, td))
                }),
                MountTarget::Slice(name) => self.lookup(&from, Kind::Slice, name).and_then(|s| {
                    if !m.slices[s].is_managed() {
                        self.error(
                            &from,
                            name.span,
                            format!(
                                "slice \"{}\" is not managed by tether (xos_managed: false)",
                                name.value
                            ),
                            Some("tether only mounts volumes into controllers it creates".into()),
                        );
                        return None;
                    }
                    let td = slices[s].as_ref()?.trust_domain;
                    if td.is_none() {
                        self.error(
                            &from,
                            name.span,
                            format!("slice \"{}\" has no trust_domain", name.value),
                            Some("set trust_domain on the slice".into()),
                        );
                    }
                    Some((true, s, td?))
                }),
            };
            let Some((is_slice, target, trust_domain)) = target else {
                ok = false;
                continue;
            };
            let why = "a mount's config map or secret must live in the trust domain of the pod it mounts into";
            let Some(source) = self.namespaced(
                &from,
                x.data_kind.model_kind(),
                &x.source,
                trust_domain,
                why,
            ) else {
                ok = false;
                continue;
            };
            if !x.mount_path.value.starts_with('/') {
                self.error(
                    &from,
                    x.mount_path.span,
                    format!("mount_path \"{}\" is not absolute", x.mount_path.value),
                    Some("start it with /".into()),
                );
                ok = false;
            }
            if let Some(sub_path) = &x.sub_path
                && (sub_path.value.starts_with('/') || sub_path.value.split('/').any(|c| c == ".."))
            {
                self.error(
                    &from,
                    sub_path.span,
                    format!(
                        "sub_path \"{}\" must be a relative path without \"..\"",
                        sub_path.value
                    ),
                    Some("it names a key of the config map or secret, e.g. app.conf".into()),
                );
                ok = false;
            }
            if let Some(first) = paths.insert(
                (is_slice, target, x.mount_path.value.as_str()),
                x.mount_path.span,
            ) {
                self.error(
                    &from,
                    x.mount_path.span,
                    format!(
                        "mount_path \"{}\" is already used in this pod",
                        x.mount_path.value
                    ),
                    Some(format!("also mounted at {}", self.at(first))),
                );
                ok = false;
            }
            if is_slice {
                if let Some(l) = slices[target].as_mut() {
                    l.mounts.push(index);
                }
            } else if let Some(l) = instances[target].as_mut() {
                l.mounts.push(index);
            }
            links.push(MountLinks { source });
        }
        ok.then_some(links)
    }

    /// A KubernetesServiceInstance by `name` (unique across trust domains) or `trust_domain/name`.
    fn instance(&mut self, from: &str, reference: &Text) -> Option<usize> {
        let (td, name) = match reference.value.split_once('/') {
            Some((td, name)) => (Some(td), name),
            None => (None, reference.value.as_str()),
        };
        let found: Vec<usize> = self
            .names
            .get(Kind::KubernetesServiceInstance, name)
            .iter()
            .copied()
            .filter(|i| td.is_none_or(|td| self.slice_trust_domain(*i) == Some(td)))
            .collect();
        match found.as_slice() {
            [only] => Some(*only),
            [] => {
                self.dangling(
                    from,
                    Kind::KubernetesServiceInstance,
                    &Spanned::new(name.to_string(), reference.span),
                );
                None
            }
            several => {
                let tds: Vec<String> = several
                    .iter()
                    .filter_map(|i| self.slice_trust_domain(*i))
                    .map(|td| format!("{td}/{name}"))
                    .collect();
                self.error(
                    from,
                    reference.span,
                    format!("\"{name}\" names pods in several trust domains"),
                    Some(format!("write one of: {}", tds.join(", "))),
                );
                None
            }
        }
    }

    fn slice_trust_domain(&self, instance: usize) -> Option<&'m str> {
        let m = self.models;
        let slice = self
            .names
            .get(Kind::Slice, &m.instances[instance].slice.value)
            .first()?;
        m.slices[*slice]
            .trust_domain
            .as_ref()
            .map(|t| t.value.as_str())
    }

    fn resolve_services(&mut self, slices: &[Option<SliceLinks>]) -> Option<Vec<ServiceLinks>> {
        let m = self.models;
        let mut ports: Vec<Vec<usize>> = vec![Vec::new(); m.services.len()];
        let mut node_ports: HashMap<i64, Span> = HashMap::new();
        let mut ok = true;
        for (i, p) in m.ports.iter().enumerate() {
            let from = label(Kind::ServicePort, &p.name.value);
            let internal = &p.internal_port;
            if !(1..=65535).contains(&internal.value) {
                self.error(
                    &from,
                    internal.span,
                    format!("internal_port {} is out of range", internal.value),
                    Some("ports are 1 to 65535".into()),
                );
                ok = false;
            }
            if let Some(external) = &p.external_port {
                if !(30000..=32767).contains(&external.value) {
                    self.error(
                        &from,
                        external.span,
                        format!(
                            "external_port {} is outside the NodePort range",
                            external.value
                        ),
                        Some("node ports are 30000 to 32767".into()),
                    );
                    ok = false;
                } else if let Some(first) = node_ports.insert(external.value, external.span) {
                    self.error(
                        &from,
                        external.span,
                        format!("external_port {} is already used", external.value),
                        Some(format!(
                            "node ports are unique in a cluster; also used at {}",
                            self.at(first)
                        )),
                    );
                    ok = false;
                }
            }
            match self.lookup(&from, Kind::Service, &p.service) {
                Some(s) => ports[s].push(i),
                None => ok = false,
            }
        }
        let mut links = Vec::new();
        for (s, service) in m.services.iter().enumerate() {
            let from = label(Kind::Service, &service.name.value);
            // Unique (port, protocol) pairs within the Service.
            let mut pairs: HashMap<(i64, Protocol), Span> = HashMap::new();
            for &p in &ports[s] {
                let port = &m.ports[p];
                let protocol = port.protocol.as_ref().map_or(Protocol::Tcp, |p| p.value);
                if let Some(first) = pairs.insert(
                    (port.internal_port.value, protocol),
                    port.internal_port.span,
                ) {
                    self.error(
                        &label(Kind::ServicePort, &port.name.value),
                        port.internal_port.span,
                        format!(
                            "port {}/{} is already in Service \"{}\"",
                            port.internal_port.value,
                            protocol.name(),
                            service.name.value
                        ),
                        Some(format!("also at {}", self.at(first))),
                    );
                    ok = false;
                }
            }
            let own = match &service.trust_domain {
                Some(td) => match self.trust_domain(&from, td) {
                    Some(found) => Some(found),
                    None => {
                        ok = false;
                        None
                    }
                },
                None => None,
            };
            let member_tds: Vec<(usize, usize)> = m
                .slices
                .iter()
                .enumerate()
                .filter(|(i, _)| slices[*i].as_ref().is_some_and(|l| l.service == Some(s)))
                .filter_map(|(i, _)| {
                    slices[i]
                        .as_ref()
                        .and_then(|l| l.trust_domain)
                        .map(|td| (i, td))
                })
                .collect();
            let mut trust_domain = own;
            for (slice, td) in member_tds {
                match trust_domain {
                    None => trust_domain = Some(td),
                    Some(expected) if expected != td => {
                        let slice_model = &m.slices[slice];
                        let span = slice_model
                            .service
                            .as_ref()
                            .map_or(slice_model.name.span, |t| t.span);
                        self.error(
                            &label(Kind::Slice, &slice_model.name.value),
                            span,
                            format!(
                                "Service \"{}\" is in trust domain \"{}\", this slice in \"{}\"",
                                service.name.value,
                                m.trust_domains[expected].name.value,
                                m.trust_domains[td].name.value
                            ),
                            Some("a Service and its slices share one trust domain".into()),
                        );
                        ok = false;
                    }
                    Some(_) => {}
                }
            }
            if trust_domain.is_none() && !ports[s].is_empty() {
                self.error(&from, service.name.span, "the Service has ports but no trust domain", Some("set trust_domain, or attach a slice with a trust_domain (slice field service)".into()));
                ok = false;
            }
            links.push(ServiceLinks {
                trust_domain,
                ports: std::mem::take(&mut ports[s]),
            });
        }
        ok.then_some(links)
    }

    /// No two models may render the same Kubernetes object; resource instances are the
    /// usual way to collide (an object also made by a model, or by another instance).
    fn check_object_collisions(
        &mut self,
        slices: &[Option<SliceLinks>],
        instances: &[Option<InstanceLinks>],
        services: &Option<Vec<ServiceLinks>>,
    ) {
        let m = self.models;
        let td_name = |i: usize| m.trust_domains[i].name.value.clone();
        let mut objects: Vec<(ObjectKey, String, Span)> = Vec::new();
        for x in m.trust_domains.iter().filter(|x| x.is_managed()) {
            objects.push((
                ("".into(), "Namespace".into(), None, x.name.value.clone()),
                label(Kind::TrustDomain, &x.name.value),
                x.name.span,
            ));
        }
        for x in m.principals.iter().filter(|x| x.is_managed()) {
            objects.push((
                (
                    "".into(),
                    "ServiceAccount".into(),
                    Some(x.trust_domain.value.clone()),
                    x.name.value.clone(),
                ),
                label(Kind::Principal, &x.name.value),
                x.name.span,
            ));
        }
        for x in &m.data {
            let kind = match x.data_kind {
                DataKind::Config => "ConfigMap",
                DataKind::Secret => "Secret",
            };
            objects.push((
                (
                    "".into(),
                    kind.into(),
                    Some(x.trust_domain.value.clone()),
                    x.name.value.clone(),
                ),
                label(x.data_kind.model_kind(), &x.name.value),
                x.name.span,
            ));
        }
        for (x, l) in m.slices.iter().zip(slices) {
            if let (Some(controller), Some(td), true) = (
                &x.controller_kind,
                l.as_ref().and_then(|l| l.trust_domain),
                x.is_managed(),
            ) {
                let group = if controller.value == ControllerKind::Job {
                    "batch"
                } else {
                    "apps"
                };
                objects.push((
                    (
                        group.into(),
                        controller.value.name().into(),
                        Some(td_name(td)),
                        x.name.value.clone(),
                    ),
                    label(Kind::Slice, &x.name.value),
                    x.name.span,
                ));
            }
        }
        for (x, l) in m.instances.iter().zip(instances) {
            if let (true, Some(l)) = (x.is_managed(), l) {
                objects.push((
                    (
                        "".into(),
                        "Pod".into(),
                        Some(td_name(l.trust_domain)),
                        x.name.value.clone(),
                    ),
                    label(Kind::KubernetesServiceInstance, &x.name.value),
                    x.name.span,
                ));
            }
        }
        if let Some(services) = services {
            for (x, l) in m.services.iter().zip(services) {
                if let (Some(td), false) = (l.trust_domain, l.ports.is_empty()) {
                    objects.push((
                        (
                            "".into(),
                            "Service".into(),
                            Some(td_name(td)),
                            x.name.value.clone(),
                        ),
                        label(Kind::Service, &x.name.value),
                        x.name.span,
                    ));
                }
            }
        }
        for x in &m.resources {
            for object in &x.objects {
                let v = &object.value;
                let api_version = v["apiVersion"].as_str().unwrap_or_default();
                let key = (
                    k8s::api_group(api_version).to_string(),
                    v["kind"].as_str().unwrap_or_default().to_string(),
                    k8s::effective_namespace(v),
                    v["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
                objects.push((
                    key,
                    label(Kind::KubernetesResourceInstance, &x.name.value),
                    object.span,
                ));
            }
        }
        // Models of one kind are already checked for duplicates: report only the
        // collisions that involve an object of a resource instance.
        let from_models =
            objects.len() - m.resources.iter().map(|r| r.objects.len()).sum::<usize>();
        let mut seen: HashMap<&ObjectKey, (&str, Span)> = HashMap::new();
        let mut collisions = Vec::new();
        for (position, (key, model, span)) in objects.iter().enumerate() {
            let first = seen.get(key).copied();
            seen.entry(key).or_insert((model, *span));
            if position < from_models {
                continue;
            }
            if let Some((first_model, first_span)) = first {
                let (_, kind, namespace, name) = key;
                let object = match namespace {
                    Some(ns) => format!("{kind} {ns}/{name}"),
                    None => format!("{kind} {name}"),
                };
                collisions.push((
                    model.clone(),
                    *span,
                    format!("{object} is also rendered from {first_model}"),
                    format!(
                        "every object comes from one model; the other is at {}",
                        self.at(first_span)
                    ),
                ));
            }
        }
        for (model, span, message, hint) in collisions {
            self.error(&model, span, message, Some(hint));
        }
    }
}

/// What makes a model of `kind` unique, for the duplicate hint.
fn identity_words(kind: Kind) -> &'static str {
    match kind {
        Kind::Image => "name and tag",
        Kind::Principal | Kind::KubernetesConfigMap | Kind::KubernetesSecret => {
            "name within its trust domain"
        }
        Kind::ServicePort => "name within its Service",
        _ => "name",
    }
}
