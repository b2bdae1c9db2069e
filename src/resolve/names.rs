//! Finding models by name: the index of names by kind, and every kind of reference
//! (plain, namespaced, Image `name:tag`, instance `trust_domain/name`).

use std::collections::HashMap;

use super::Resolver;
use crate::diagnostic::suggestion;
use crate::model::{DataKind, Kind, Models, Spanned, Text};

/// Names of the models that references can point at, by kind.
pub(super) struct NameIndex<'m> {
    by_kind: HashMap<Kind, HashMap<&'m str, Vec<usize>>>,
}

impl<'m> NameIndex<'m> {
    pub(super) fn build(models: &'m Models) -> Self {
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

    pub(super) fn get(&self, kind: Kind, name: &str) -> &[usize] {
        self.by_kind
            .get(&kind)
            .and_then(|index| index.get(name))
            .map_or(&[], Vec::as_slice)
    }

    pub(super) fn names(&self, kind: Kind) -> impl Iterator<Item = &'m str> + '_ {
        self.by_kind
            .get(&kind)
            .into_iter()
            .flat_map(|index| index.keys().copied())
    }
}

impl<'m> Resolver<'m> {
    /// A reference by plain name to a model of `kind`.
    pub(super) fn lookup(&mut self, from: &str, kind: Kind, reference: &Text) -> Option<usize> {
        let found = self.names.get(kind, &reference.value);
        if let Some(&first) = found.first() {
            return Some(first);
        }
        self.dangling(from, kind, reference);
        None
    }

    /// Reports a reference that names no model of `kind`, saying what it does name.
    pub(super) fn dangling(&mut self, from: &str, kind: Kind, reference: &Text) {
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

    /// A trust domain by name.
    pub(super) fn trust_domain(&mut self, from: &str, reference: &Text) -> Option<usize> {
        self.lookup(from, Kind::TrustDomain, reference)
    }

    /// An Image reference: `name:tag`, or `name` when the repo has one tag of it.
    pub(super) fn image(&mut self, from: &str, reference: &Text) -> Option<usize> {
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
    pub(super) fn namespaced(
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

    /// A KubernetesServiceInstance by `name` (unique across trust domains) or `trust_domain/name`.
    pub(super) fn instance(&mut self, from: &str, reference: &Text) -> Option<usize> {
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

    pub(super) fn slice_trust_domain(&self, instance: usize) -> Option<&'m str> {
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
}
