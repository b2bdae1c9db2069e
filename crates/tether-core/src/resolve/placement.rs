//! Placement: the cluster each model's objects go to. A KubernetesService is a
//! cluster; a model belongs to one as in XOS, through an `owner` (TrustDomain,
//! KubernetesServiceInstance, KubernetesResourceInstance, Node) or through what it
//! requires (a Slice its trust domain's, a Principal its trust domain's); a plain
//! object, a kustomization's or a chart's, through the TrustDomain named like its
//! namespace. With one KubernetesService (or none) everything is its; with several, a
//! model whose cluster cannot be told is an error, and so is one said to be in two,
//! and a `depends_on` across clusters (each cluster is reconciled apart, so one
//! cannot wait for another).

use std::collections::{BTreeMap, HashMap};

use super::resolver::{Resolver, label};
use crate::diagnostic::Span;
use crate::model::Kind;
use crate::workflow::{Need, Workflow};

/// Where a member's cluster is said: the cluster, and the place that says it.
type Claims = BTreeMap<String, Span>;

impl Resolver<'_> {
    /// Sets each member's `cluster`; an error for each member whose cluster is unknown
    /// or said twice, and for each `depends_on` across clusters.
    pub(super) fn place(&mut self, workflow: &mut Workflow) {
        let mut services: Vec<&str> = self.names.names(Kind::KubernetesService).collect();
        services.sort_unstable();
        if let [only] = services[..] {
            for member in &mut workflow.members {
                member.cluster = Some(only.to_string());
            }
        }
        if services.len() <= 1 {
            return;
        }
        let (claims, sources) = self.claims(workflow);
        let unclaimed: Vec<bool> = claims.iter().map(BTreeMap::is_empty).collect();
        for (i, member_claims) in claims.into_iter().enumerate() {
            let member = &workflow.members[i];
            let model = label(member.id.kind, model_name(&member.label));
            let has_owner = matches!(
                member.id.kind,
                Kind::TrustDomain
                    | Kind::KubernetesServiceInstance
                    | Kind::KubernetesResourceInstance
                    | Kind::Node
            );
            match member_claims.len() {
                1 => workflow.members[i].cluster = member_claims.into_keys().next(),
                // What it takes its cluster from is unplaced too: reported there.
                0 if sources[i].iter().any(|s| unclaimed[*s]) => {}
                0 if has_owner => self.error(
                    &model,
                    member.span,
                    "missing \"owner\"",
                    Some(format!(
                        "the repo has several KubernetesServices; name one: {}",
                        services.join(", ")
                    )),
                ),
                0 if member.objects.is_empty() => {}
                0 => self.error(
                    &model,
                    member.span,
                    "which KubernetesService's cluster this model belongs to is not said, and the repo has several",
                    Some(format!(
                        "put its objects in a namespace a TrustDomain with an owner names, or write it as a KubernetesResourceInstance with an owner: one of {}",
                        services.join(", ")
                    )),
                ),
                _ => {
                    let said: Vec<String> = member_claims
                        .iter()
                        .map(|(cluster, at)| format!("{cluster} (at {})", self.at(*at)))
                        .collect();
                    self.error(
                        &model,
                        member.span,
                        format!("belongs to two clusters: {}", said.join(" and ")),
                        Some(
                            "a model, its trust domain, and what it mounts or runs in belong to one KubernetesService"
                                .to_string(),
                        ),
                    );
                }
            }
        }
        self.check_needs_across(workflow);
    }

    /// What says each member's cluster: its own owner, the namespaces of its objects
    /// (plain objects), and the members it requires, followed to a fixed point.
    /// Also what each member takes its cluster from.
    fn claims(&self, workflow: &Workflow) -> (Vec<Claims>, Vec<Vec<usize>>) {
        let m = self.models;
        let domains: HashMap<&str, usize> = m
            .trust_domains
            .iter()
            .enumerate()
            .filter_map(|(i, td)| {
                let id = crate::workflow::ModelId {
                    kind: Kind::TrustDomain,
                    index: i,
                };
                Some((td.name.value.as_str(), workflow.member(id)?))
            })
            .collect();
        let mut claims: Vec<Claims> = workflow
            .members
            .iter()
            .map(|member| {
                let owner = match member.id.kind {
                    Kind::TrustDomain => m.trust_domains[member.id.index].owner.as_ref(),
                    Kind::KubernetesServiceInstance => m.instances[member.id.index].owner.as_ref(),
                    Kind::KubernetesResourceInstance => m.resources[member.id.index].owner.as_ref(),
                    Kind::Node => m.hosts[member.id.index].owner.as_ref(),
                    _ => None,
                };
                owner
                    .map(|o| (o.value.clone(), o.span))
                    .into_iter()
                    .collect()
            })
            .collect();
        // What a member takes from others: those it requires, and for objects written
        // as they are applied, the trust domains of their namespaces.
        let sources: Vec<Vec<usize>> = workflow
            .members
            .iter()
            .map(|member| {
                let mut from = member.requires.clone();
                if matches!(
                    member.id.kind,
                    Kind::KubernetesResourceInstance
                        | Kind::Manifest
                        | Kind::Kustomization
                        | Kind::HelmChart
                ) {
                    from.extend(
                        member
                            .objects
                            .iter()
                            .filter_map(|gate| domains.get(gate.key.namespace.as_deref()?)),
                    );
                }
                from
            })
            .collect();
        loop {
            let mut changed = false;
            for (i, from) in sources.iter().enumerate() {
                for &source in from {
                    let taken: Vec<(String, Span)> = claims[source]
                        .iter()
                        .filter(|(cluster, _)| !claims[i].contains_key(*cluster))
                        .map(|(cluster, at)| (cluster.clone(), *at))
                        .collect();
                    changed |= !taken.is_empty();
                    claims[i].extend(taken);
                }
            }
            if !changed {
                return (claims, sources);
            }
        }
    }

    /// An error at each `depends_on` whose model is in another cluster.
    fn check_needs_across(&mut self, workflow: &Workflow) {
        for member in &workflow.members {
            for need in &member.needs {
                let Need::Model {
                    member: needed,
                    span,
                } = need
                else {
                    continue;
                };
                let needed = &workflow.members[*needed];
                if let (Some(here), Some(there)) = (&member.cluster, &needed.cluster)
                    && here != there
                {
                    self.error(
                        &label(member.id.kind, model_name(&member.label)),
                        *span,
                        format!(
                            "depends on {}, which is in KubernetesService {there}'s cluster, not {here}'s",
                            needed.label
                        ),
                        Some(
                            "each cluster is reconciled apart, so a wave cannot wait for another cluster: drop the dependency, or move both models to one KubernetesService"
                                .to_string(),
                        ),
                    );
                }
            }
        }
    }
}

/// `name` of a member's `Kind/name` label.
fn model_name(label: &str) -> &str {
    label.split_once('/').map_or(label, |(_, name)| name)
}
