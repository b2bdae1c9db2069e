//! Finding models by name: every kind of reference (plain, namespaced, Image
//! `name:tag`, instance `trust_domain/name`), looked up in the index of names.

use super::name_index::{Named, Namespaced};
use super::resolver::Resolver;
use crate::diagnostic::suggestion;
use crate::model::{
    Idx, Image, Kind, KubernetesServiceInstance, Slice, Spanned, Text, TrustDomain,
};

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
