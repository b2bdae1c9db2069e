//! No two models render the same Kubernetes object.

use std::collections::HashMap;

use super::{InstanceLinks, Resolver, ServiceLinks, SliceLinks, label};
use crate::diagnostic::Span;
use crate::k8s;
use crate::model::{
    ControllerKind, DataKind, Idx, Kind, KubernetesServiceInstance, PerModel, Service, Slice,
    TrustDomain,
};

/// A rendered object's identity: API group, kind, namespace, name.
type ObjectKey = (String, String, Option<String>, String);

impl Resolver<'_> {
    /// No two models may render the same Kubernetes object; resource instances are the
    /// usual way to collide (an object also made by a model, or by another instance).
    pub(super) fn check_object_collisions(
        &mut self,
        slices: &PerModel<Slice, Option<SliceLinks>>,
        instances: &PerModel<KubernetesServiceInstance, Option<InstanceLinks>>,
        services: &Option<PerModel<Service, ServiceLinks>>,
    ) {
        let m = self.models;
        let td_name = |i: Idx<TrustDomain>| m.trust_domains[i].name.value.clone();
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
