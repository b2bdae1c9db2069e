//! Finding models by name: the index of names by kind, and every kind of reference
//! (plain, namespaced, Image `name:tag`, instance `trust_domain/name`).

use std::collections::HashMap;

use super::Resolver;
use crate::diagnostic::suggestion;
use crate::model::{
    DataModel, Idx, Image, Kind, KubernetesService, KubernetesServiceInstance, Models, Principal,
    Service, Site, Slice, Spanned, Text, TrustDomain,
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

impl<'m> Resolver<'m> {
    /// A reference by plain name to a `T`.
    pub(super) fn lookup<T: Named>(&mut self, from: &str, reference: &Text) -> Option<Idx<T>> {
        let found = self.names.find(T::KIND, &reference.value);
        if let Some(&first) = found.first() {
            return Some(first);
        }
        self.dangling(from, T::KIND, reference);
        None
    }

    /// Reports a reference that names no model of `kind`, saying what it does name.
    pub(super) fn dangling(&mut self, from: &str, kind: Kind, reference: &Text) {
        let other_kind = Kind::ALL
            .into_iter()
            .find(|k| *k != kind && self.names.contains(*k, &reference.value));
        let (message, hint) = match other_kind {
            Some(other) => (
                format!("\"{}\" is a {other}, not a {kind}", reference.value),
                Some(format!("this field refers to a {kind}")),
            ),
            None => (
                format!("no {kind} named \"{}\"", reference.value),
                suggestion(&reference.value, self.names.names(kind))
                    .or_else(|| Some(self.add_model_hint(kind, &reference.value))),
            ),
        };
        self.error(from, reference.span, message, hint);
    }

    /// Add the model, unless an encrypted file that was not read may hold it.
    fn add_model_hint(&self, kind: Kind, name: &str) -> String {
        let closed: Vec<String> = self
            .files
            .iter()
            .filter(|(_, file)| matches!(file.sealing, crate::source::Sealing::Closed(_)))
            .map(|(id, _)| self.files.shown_path(id))
            .collect();
        match closed.is_empty() {
            true => format!("add a {kind} model named \"{name}\""),
            false => format!(
                "it may be in {}, encrypted and not read; if not, add a {kind} model named \"{name}\"",
                closed.join(", ")
            ),
        }
    }

    /// A trust domain by name.
    pub(super) fn trust_domain(
        &mut self,
        from: &str,
        reference: &Text,
    ) -> Option<Idx<TrustDomain>> {
        self.lookup(from, reference)
    }

    /// An Image reference: `name:tag`, or `name` when the repo has one tag of it.
    pub(super) fn image(&mut self, from: &str, reference: &Text) -> Option<Idx<Image>> {
        let images = &self.models.images;
        let (name, tag) = crate::model::split_image_reference(&reference.value);
        let candidates: Vec<Idx<Image>> = self.names.find(Kind::Image, name);
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
    pub(super) fn namespaced<T: Namespaced>(
        &mut self,
        from: &str,
        kind: Kind,
        reference: &Text,
        context: Idx<TrustDomain>,
        why: &str,
    ) -> Option<Idx<T>> {
        let context_name = self.models.trust_domains[context].name.value.clone();
        let (td_name, name) = match reference.value.split_once('/') {
            Some((td, name)) => (td.to_string(), name.to_string()),
            None => (context_name.clone(), reference.value.clone()),
        };
        let candidates: Vec<Idx<T>> = self.names.find(kind, &name);
        let trust_domain_of = |i: Idx<T>| T::all(self.models)[i].trust_domain();
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

    /// A KubernetesServiceInstance by `name` (unique across trust domains) or `trust_domain/name`.
    pub(super) fn instance(
        &mut self,
        from: &str,
        reference: &Text,
    ) -> Option<Idx<KubernetesServiceInstance>> {
        let (td, name) = match reference.value.split_once('/') {
            Some((td, name)) => (Some(td), name),
            None => (None, reference.value.as_str()),
        };
        let found: Vec<Idx<KubernetesServiceInstance>> = self
            .names
            .find(Kind::KubernetesServiceInstance, name)
            .into_iter()
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

    /// The trust domain of an instance's slice, before the slice is resolved.
    fn slice_trust_domain(&self, instance: Idx<KubernetesServiceInstance>) -> Option<&'m str> {
        let m = self.models;
        let slice: Idx<Slice> = *self
            .names
            .find(Kind::Slice, &m.instances[instance].slice.value)
            .first()?;
        m.slices[slice]
            .trust_domain
            .as_ref()
            .map(|t| t.value.as_str())
    }
}
