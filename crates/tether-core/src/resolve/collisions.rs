//! No two models render the same Kubernetes object.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use super::resolved_graph::{InstanceLinks, ServiceLinks, SliceLinks};
use super::resolver::{Resolver, label};
use crate::diagnostic::Span;
use crate::k8s::ObjectKey;
use crate::model::{
    Idx, Kind, KubernetesServiceInstance, ModelObject, PerModel, Service, Slice, Text, TrustDomain,
    object_key,
};

/// An object a model renders, with the model's label and the span to report it at.
struct Rendered {
    key: ObjectKey,
    model: String,
    span: Span,
}

impl Rendered {
    fn of(object: ModelObject<'_>, kind: Kind, name: &Text) -> Option<Self> {
        Some(Rendered {
            key: object_key(object)?,
            model: label(kind, &name.value),
            span: name.span,
        })
    }
}

impl Resolver<'_> {
    /// No two models may render the same Kubernetes object; resource instances are the
    /// usual way to collide (an object also made by a model, or by another instance).
    pub(super) fn check_object_collisions(
        &mut self,
        slices: &PerModel<Slice, Option<SliceLinks>>,
        instances: &PerModel<KubernetesServiceInstance, Option<InstanceLinks>>,
        services: &Option<PerModel<Service, ServiceLinks>>,
    ) {
        let from_models = self.objects_of_models(slices, instances, services);
        let from_resources = self.objects_of_resources();
        let mut seen: HashMap<&ObjectKey, (&str, Span)> = HashMap::new();
        for object in &from_models {
            seen.entry(&object.key)
                .or_insert((&object.model, object.span));
        }
        // Models of one kind are already checked for duplicates: report only the
        // collisions that involve an object of a resource instance.
        for object in &from_resources {
            match seen.entry(&object.key) {
                Entry::Occupied(first) => {
                    let (first_model, first_span) = *first.get();
                    let hint = format!(
                        "every object comes from one model; the other is at {}",
                        self.at(first_span)
                    );
                    self.error(
                        &object.model,
                        object.span,
                        format!("{} is also rendered from {first_model}", object.key),
                        Some(hint),
                    );
                }
                Entry::Vacant(entry) => {
                    entry.insert((&object.model, object.span));
                }
            }
        }
    }

    /// The objects that models other than resource instances render, in render's order.
    fn objects_of_models(
        &self,
        slices: &PerModel<Slice, Option<SliceLinks>>,
        instances: &PerModel<KubernetesServiceInstance, Option<InstanceLinks>>,
        services: &Option<PerModel<Service, ServiceLinks>>,
    ) -> Vec<Rendered> {
        let m = self.models;
        let td_name = |i: Idx<TrustDomain>| m.trust_domains[i].name.value.as_str();
        let mut objects = Vec::new();
        for x in m.trust_domains.iter().filter(|x| x.is_managed()) {
            objects.extend(Rendered::of(
                ModelObject::TrustDomain(x),
                Kind::TrustDomain,
                &x.name,
            ));
        }
        for x in m.principals.iter().filter(|x| x.is_managed()) {
            objects.extend(Rendered::of(
                ModelObject::Principal(x),
                Kind::Principal,
                &x.name,
            ));
        }
        for x in &m.data {
            let kind = x.data_kind.model_kind();
            objects.extend(Rendered::of(ModelObject::Data(x), kind, &x.name));
        }
        for x in &m.hosts {
            objects.extend(Rendered::of(ModelObject::Host(x), Kind::Node, &x.name));
        }
        for (x, l) in m.slices.iter().zip(slices) {
            if let (Some(td), true) = (l.as_ref().and_then(|l| l.trust_domain), x.is_managed()) {
                let object = ModelObject::Slice(x, td_name(td));
                objects.extend(Rendered::of(object, Kind::Slice, &x.name));
            }
        }
        for (x, l) in m.instances.iter().zip(instances) {
            if let (true, Some(l)) = (x.is_managed(), l) {
                let object = ModelObject::Instance(x, td_name(l.trust_domain));
                objects.extend(Rendered::of(
                    object,
                    Kind::KubernetesServiceInstance,
                    &x.name,
                ));
            }
        }
        for (x, l) in m.services.iter().zip(services.iter().flatten()) {
            if let (Some(td), false) = (l.trust_domain, l.ports.is_empty()) {
                let object = ModelObject::Service(x, td_name(td));
                objects.extend(Rendered::of(object, Kind::Service, &x.name));
            }
        }
        objects
    }

    /// The objects of every resource instance's `resource_definition`.
    fn objects_of_resources(&self) -> Vec<Rendered> {
        let mut objects = Vec::new();
        for x in &self.models.resources {
            for object in &x.objects {
                objects.extend(object_key(ModelObject::Resource(&object.value)).map(|key| {
                    Rendered {
                        key,
                        model: label(x.origin.kind, &x.name.value),
                        span: object.span,
                    }
                }));
            }
        }
        objects
    }
}
