//! The index of model names by kind, and the traits that tell which kind (and which
//! trust domain) a referenced model is found under.

use std::collections::HashMap;

use crate::model::{
    DataModel, Idx, Kind, KubernetesService, Models, Principal, Service, Site, Slice, Text,
    TrustDomain,
};

/// A model that references name by its plain name, and the kind it is indexed under;
/// a lookup thus returns an index of the right model vector.
pub(super) trait Named {
    const KIND: Kind;
}

impl Named for KubernetesService {
    const KIND: Kind = Kind::KubernetesService;
}

impl Named for Site {
    const KIND: Kind = Kind::Site;
}

impl Named for TrustDomain {
    const KIND: Kind = Kind::TrustDomain;
}

impl Named for Slice {
    const KIND: Kind = Kind::Slice;
}

impl Named for Service {
    const KIND: Kind = Kind::Service;
}

/// A model named within a trust domain (`name`, or `trust_domain/name`).
pub(super) trait Namespaced: Sized {
    fn all(models: &Models) -> &Vec<Self>;
    fn trust_domain(&self) -> &str;
}

impl Namespaced for Principal {
    fn all(models: &Models) -> &Vec<Self> {
        &models.principals
    }

    fn trust_domain(&self) -> &str {
        &self.trust_domain.value
    }
}

impl Namespaced for DataModel {
    fn all(models: &Models) -> &Vec<Self> {
        &models.data
    }

    fn trust_domain(&self) -> &str {
        &self.trust_domain.value
    }
}

/// Names of the models that references can point at, by kind.
pub(super) struct NameIndex<'m> {
    by_kind: HashMap<Kind, HashMap<&'m str, Vec<usize>>>,
}

impl<'m> NameIndex<'m> {
    pub(super) fn build(models: &'m Models) -> Self {
        let mut index = NameIndex {
            by_kind: HashMap::new(),
        };
        index.add(&models.kubernetes_services, |m| {
            (Kind::KubernetesService, &m.name)
        });
        index.add(&models.sites, |m| (Kind::Site, &m.name));
        index.add(&models.images, |m| (Kind::Image, &m.name));
        index.add(&models.trust_domains, |m| (Kind::TrustDomain, &m.name));
        index.add(&models.principals, |m| (Kind::Principal, &m.name));
        index.add(&models.slices, |m| (Kind::Slice, &m.name));
        index.add(&models.instances, |m| {
            (Kind::KubernetesServiceInstance, &m.name)
        });
        index.add(&models.services, |m| (Kind::Service, &m.name));
        index.add(&models.resources, |m| (m.origin.kind, &m.name));
        index.add(&models.hosts, |m| (Kind::Node, &m.name));
        // ConfigMaps and Secrets share `models.data`; each is indexed under its kind.
        index.add(&models.data, |m| (m.data_kind.model_kind(), &m.name));
        index
    }

    /// Indexes `models` (one model vector) under the kind and name `key` gives.
    fn add<T>(&mut self, models: &'m [T], key: impl Fn(&'m T) -> (Kind, &'m Text)) {
        for (i, model) in models.iter().enumerate() {
            let (kind, name) = key(model);
            let index = self.by_kind.entry(kind).or_default();
            index.entry(name.value.as_str()).or_default().push(i);
        }
    }

    fn get(&self, kind: Kind, name: &str) -> &[usize] {
        self.by_kind
            .get(&kind)
            .and_then(|index| index.get(name))
            .map_or(&[], Vec::as_slice)
    }

    /// The models named `name` of `kind`, whose models are `T`s, in source order.
    pub(super) fn find<T>(&self, kind: Kind, name: &str) -> Vec<Idx<T>> {
        self.get(kind, name).iter().map(|&i| Idx::new(i)).collect()
    }

    pub(super) fn contains(&self, kind: Kind, name: &str) -> bool {
        !self.get(kind, name).is_empty()
    }

    pub(super) fn names(&self, kind: Kind) -> impl Iterator<Item = &'m str> + '_ {
        self.by_kind
            .get(&kind)
            .into_iter()
            .flat_map(|index| index.keys().copied())
    }
}
