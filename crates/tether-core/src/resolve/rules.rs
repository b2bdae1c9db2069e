//! Rules on single models: duplicates, owners, Kubernetes naming, image names and tags.

use std::collections::HashMap;

use super::resolver::{Resolver, label};
use crate::diagnostic::Span;
use crate::k8s;
use crate::model::{Kind, KubernetesService, Text, is_valid_image_name, is_valid_tag};

/// A model name that becomes a Kubernetes name: the model kind, the name, its rule,
/// and the rule in words.
type NameRule<'a> = (Kind, &'a Text, fn(&str) -> bool, &'static str);

impl<'m> Resolver<'m> {
    pub(super) fn check_duplicates(&mut self) {
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
        identities.extend(m.resources.iter().map(|x| named(x.origin.kind, &x.name)));
        identities.extend(m.hosts.iter().map(|x| named(Kind::Node, &x.name)));
        identities.extend(
            m.image_policies
                .iter()
                .map(|x| named(Kind::ImagePolicy, &x.name)),
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

    pub(super) fn check_owners(&mut self) {
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
            // Plain objects, kustomizations and charts name no owner: only models do.
            .chain(
                m.resources
                    .iter()
                    .filter(|x| x.origin.kind == Kind::KubernetesResourceInstance)
                    .map(|x| {
                        (
                            label(x.origin.kind, &x.name.value),
                            x.owner.as_ref(),
                            x.origin.span,
                        )
                    }),
            )
            .collect();
        // A model that is not managed (discovered) needs no owner; when it names one
        // (the KubernetesService of the cluster it was found in), it must be there.
        let unmanaged_owners: Vec<(String, &Text)> = m
            .trust_domains
            .iter()
            .filter(|x| !x.is_managed())
            .filter_map(|x| Some((label(Kind::TrustDomain, &x.name.value), x.owner.as_ref()?)))
            .chain(
                m.instances
                    .iter()
                    .filter(|x| !x.is_managed())
                    .filter_map(|x| {
                        Some((
                            label(Kind::KubernetesServiceInstance, &x.name.value),
                            x.owner.as_ref()?,
                        ))
                    }),
            )
            .collect();
        for (model, owner) in unmanaged_owners {
            self.lookup::<KubernetesService>(&model, owner);
        }
        // With several KubernetesServices, which one is the model's is placement's
        // question: its trust domain may say it (see `placement`).
        let none = self.names.names(Kind::KubernetesService).next().is_none();
        for (model, owner, span) in owners {
            match owner {
                Some(owner) => {
                    self.lookup::<KubernetesService>(&model, owner);
                }
                None if none => {
                    let hint = "add a KubernetesService model (kind: KubernetesService, name: kubernetes), which owners default to";
                    self.error(&model, span, "missing \"owner\"", Some(hint.to_string()));
                }
                None => {}
            }
        }
    }

    /// Names that become Kubernetes names follow Kubernetes' rules.
    #[expect(
        clippy::too_many_lines,
        reason = "a table: the naming rule of each kind of model, one entry each"
    )]
    pub(super) fn check_names(&mut self) {
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
        for x in &m.hosts {
            checks.push((
                Kind::Node,
                &x.name,
                k8s::is_dns1123_subdomain,
                "a node name: lowercase letters, digits, '-' and '.'",
            ));
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

    pub(super) fn check_image(&mut self, image: &crate::model::Image) {
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
        } else if !is_valid_image_name(name) {
            self.error(
                &model,
                image.name.span,
                format!("\"{name}\" is not a valid image name"),
                Some("image names are lowercase, without spaces".into()),
            );
        }
        if let Some(tag) = &image.tag
            && !is_valid_tag(&tag.value)
        {
            self.error(
                &model,
                tag.span,
                format!("\"{}\" is not a valid image tag", tag.value),
                Some("tags use letters, digits, '_', '.' and '-', at most 128".into()),
            );
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
