//! Confinement: the namespaces a source's objects may be in and the kinds it may make.
//! Two parties set it: the platform team in a daemon's Source (`spec.confine`, and
//! the daemon's `--no-cross-namespace-objects`), and the repository's author in its
//! `.tether.yaml` (`confine:`). The repository may only narrow what the Source allows:
//! the effective confinement is the intersection of the two. What falls outside is an
//! error at the model that makes it, found before anything is compared or applied,
//! naming who forbids it. Cluster-scoped kinds are off unless listed. Pure. The API
//! server's RBAC, as the Source's identity, is the final word; this is the early,
//! located one.

use std::collections::BTreeSet;

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::k8s::api_group;
use crate::render::RenderedObject;
use crate::settings::ConfineSettings;

/// The limits, as read from the settings. A list absent means unrestricted on that
/// side, except that cluster-scoped kinds need listing: settings without `kinds` allow
/// any namespaced kind and no cluster-scoped one. The default limits nothing at all
/// (a side that sets no confinement).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    namespaces: Option<BTreeSet<String>>,
    /// The namespaced kinds allowed; `None`: any.
    kinds: Option<BTreeSet<String>>,
    /// The cluster-scoped kinds allowed; `None`: any (only where nothing is confined).
    /// Kept apart from `kinds` because their absence means the opposite: a side whose
    /// settings list no kinds allows every namespaced kind but no cluster-scoped one,
    /// so meeting a side that lists some must not let those through.
    cluster_kinds: Option<BTreeSet<String>>,
}

impl From<&ConfineSettings> for Confinement {
    fn from(settings: &ConfineSettings) -> Self {
        let set = |list: &Option<Vec<String>>| list.as_ref().map(|l| l.iter().cloned().collect());
        let kinds: Option<BTreeSet<String>> = set(&settings.kinds);
        Confinement {
            namespaces: set(&settings.namespaces),
            cluster_kinds: Some(kinds.clone().unwrap_or_default()),
            kinds,
        }
    }
}

/// Why an object falls outside a confinement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A cluster-scoped kind that the kinds do not list.
    ClusterScoped,
    /// In a namespace (or, for a Namespace, named one) not listed.
    Namespace(String),
    /// A namespaced kind not listed.
    Kind,
}

impl Confinement {
    /// Only `namespaces`, any namespaced kind: a Source confined to its own namespace.
    pub fn to_namespaces(namespaces: impl IntoIterator<Item = String>) -> Self {
        Confinement {
            namespaces: Some(namespaces.into_iter().collect()),
            kinds: None,
            cluster_kinds: Some(BTreeSet::new()),
        }
    }

    /// Does it list the namespaces (else any namespace is allowed)?
    pub fn lists_namespaces(&self) -> bool {
        self.namespaces.is_some()
    }

    /// What both allow: each list is the intersection of the two, or the one given
    /// when only one side lists. A repository's confinement narrows a Source's and can
    /// never widen it.
    #[must_use]
    pub fn intersect(&self, other: &Confinement) -> Confinement {
        let both = |a: &Option<BTreeSet<String>>, b: &Option<BTreeSet<String>>| match (a, b) {
            (Some(a), Some(b)) => Some(a.intersection(b).cloned().collect()),
            (Some(one), None) | (None, Some(one)) => Some(one.clone()),
            (None, None) => None,
        };
        Confinement {
            namespaces: both(&self.namespaces, &other.namespaces),
            kinds: both(&self.kinds, &other.kinds),
            cluster_kinds: both(&self.cluster_kinds, &other.cluster_kinds),
        }
    }

    /// Is `kind` of `api_version` in `kinds` (as `Kind`, or `Kind.group`)? `None` when
    /// `kinds` lists nothing (no limit).
    fn lists(kinds: Option<&BTreeSet<String>>, api_version: &str, kind: &str) -> Option<bool> {
        let kinds = kinds?;
        let qualified = match api_group(api_version) {
            "" => kind.to_string(),
            group => format!("{kind}.{group}"),
        };
        Some(kinds.contains(kind) || kinds.contains(&qualified))
    }

    /// Why an object (`namespace` none for a cluster-scoped one) falls outside, if it
    /// does.
    pub fn violation(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Violation> {
        let outside = |namespace: &str| {
            let allowed = self.namespaces.as_ref()?;
            (!allowed.contains(namespace)).then(|| Violation::Namespace(namespace.to_string()))
        };
        let kind_listed = match namespace {
            Some(_) => Self::lists(self.kinds.as_ref(), api_version, kind),
            None => Self::lists(self.cluster_kinds.as_ref(), api_version, kind),
        };
        match namespace {
            None if kind_listed == Some(false) => Some(Violation::ClusterScoped),
            // A Namespace is one of the namespaces: its name must be allowed too.
            None if kind == "Namespace" && api_version == "v1" => outside(name),
            None => None,
            Some(namespace) => outside(namespace)
                .or_else(|| (kind_listed == Some(false)).then_some(Violation::Kind)),
        }
    }

    fn listed(set: Option<&BTreeSet<String>>) -> String {
        set.into_iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A Source's confinement, as the platform team sets it, and the identity the Source
/// acts as (a refusal names it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceConfinement {
    pub confinement: Confinement,
    /// `system:serviceaccount:NS:NAME`, or how the daemon's own identity is said.
    pub identity: String,
    /// The namespaces come from the daemon's `--no-cross-namespace-objects` (the
    /// Source's own), not from its spec.
    pub own_namespace_only: bool,
}

impl SourceConfinement {
    /// What the refusal of `object` says, and the hint.
    fn refusal(&self, object: &RenderedObject, violation: &Violation) -> (String, String) {
        let refused = format!(
            "apply {} refused for {}",
            object.display_name(),
            self.identity
        );
        let limits = &self.confinement;
        let why = match violation {
            Violation::ClusterScoped if self.own_namespace_only => {
                "it is cluster-scoped, and the daemon confines a Source to its own namespace unless the Source's spec.confine lists namespaces (and, for a cluster-scoped kind, spec.confine.kinds lists it)".to_string()
            }
            Violation::ClusterScoped => {
                "it is cluster-scoped, and the Source's spec allows cluster-scoped kinds only where spec.confine.kinds lists them".to_string()
            }
            Violation::Namespace(_) if self.own_namespace_only => format!(
                "the daemon confines a Source to its own namespace ({}) unless the Source's spec.confine lists namespaces",
                Confinement::listed(limits.namespaces.as_ref())
            ),
            Violation::Namespace(_) => format!(
                "the Source's spec confines it to the namespaces {}",
                Confinement::listed(limits.namespaces.as_ref())
            ),
            Violation::Kind => format!(
                "the Source's spec allows only the kinds {}",
                Confinement::listed(limits.kinds.as_ref())
            ),
        };
        (
            format!("{refused}: {why}"),
            "the Source's spec is the platform team's, not the repository's: ask the Source's owners to widen spec.confine, or stay within it".into(),
        )
    }
}

/// An error for each object that falls outside what both the Source (if confined) and
/// the repository (`repository`, its `.tether.yaml`) allow, at its model, saying which
/// of the two forbids it (the Source first: the repository cannot widen it).
pub fn check(
    objects: &[RenderedObject],
    source: Option<&SourceConfinement>,
    repository: Option<&Confinement>,
) -> Diagnostics {
    let mut diagnostics = Diagnostics::default();
    let unrestricted = Confinement::default();
    let effective = match (source, repository) {
        (None, None) => return diagnostics,
        (Some(source), repository) => source
            .confinement
            .intersect(repository.unwrap_or(&unrestricted)),
        (None, Some(repository)) => repository.clone(),
    };
    let violation = |c: &Confinement, o: &RenderedObject| {
        c.violation(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name)
    };
    for object in objects {
        if violation(&effective, object).is_none() {
            continue;
        }
        let model = match object.model.split_once('/') {
            Some((kind, name)) => format!("{kind} \"{name}\""),
            None => object.model.clone(),
        };
        let by_source = source.and_then(|s| Some((s, violation(&s.confinement, object)?)));
        let (message, hint) = match (by_source, repository) {
            (Some((source, why)), _) => source.refusal(object, &why),
            (None, Some(repository)) => match violation(repository, object) {
                Some(why) => repository_refusal(repository, object, &why),
                None => continue,
            },
            (None, None) => continue,
        };
        diagnostics.push(
            Diagnostic::error(object.span, message)
                .in_model(model)
                .with_hint(hint),
        );
    }
    diagnostics
}

/// What the refusal of `object` by the repository's own `confine:` says, and the hint.
fn repository_refusal(
    repository: &Confinement,
    object: &RenderedObject,
    violation: &Violation,
) -> (String, String) {
    let name = object.display_name();
    match violation {
        Violation::ClusterScoped => (
            format!(
                "{name} is cluster-scoped, and this repository may make cluster-scoped kinds only where confine.kinds lists them"
            ),
            "list the kind in confine.kinds of .tether.yaml, or leave it to the cluster's owners"
                .into(),
        ),
        Violation::Namespace(_) => (
            format!(
                "{name} is outside the namespaces this repository may use ({})",
                Confinement::listed(repository.namespaces.as_ref())
            ),
            "use one of those namespaces, or widen confine.namespaces in .tether.yaml".into(),
        ),
        Violation::Kind => (
            format!(
                "{name} is a kind this repository may not make ({})",
                Confinement::listed(repository.kinds.as_ref())
            ),
            "list the kind in confine.kinds of .tether.yaml".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confinement(namespaces: Option<&[&str]>, kinds: Option<&[&str]>) -> Confinement {
        let list = |l: Option<&[&str]>| l.map(|l| l.iter().map(|s| (*s).to_string()).collect());
        Confinement::from(&ConfineSettings {
            namespaces: list(namespaces),
            kinds: list(kinds),
        })
    }

    #[test]
    fn a_repository_narrows_a_sources_confinement_and_cannot_widen_it() {
        let a = Some(&["team-a"][..]);
        let ab = Some(&["team-a", "team-b"][..]);
        // (the Source's, the repository's, the namespace asked for, allowed)
        let cases = [
            // Widening: the repository lists B, the Source does not.
            (a, ab, "team-b", false),
            (a, ab, "team-a", true),
            // Narrowing: the Source allows B, the repository keeps to A.
            (ab, a, "team-b", false),
            (ab, a, "team-a", true),
            // An unrestricted side leaves the other's list.
            (None, a, "team-b", false),
            (a, None, "team-b", false),
            (None, None, "team-b", true),
            // Disjoint lists allow nothing.
            (a, Some(&["team-c"][..]), "team-a", false),
        ];
        for (source, repository, namespace, allowed) in cases {
            let effective = confinement(source, None).intersect(&confinement(repository, None));
            let violation = effective.violation("v1", "ConfigMap", Some(namespace), "x");
            assert_eq!(
                violation.is_none(),
                allowed,
                "{source:?} ∩ {repository:?} for {namespace}: {violation:?}"
            );
        }
    }

    #[test]
    fn kinds_intersect_and_cluster_scoped_kinds_need_listing_on_both_sides() {
        let source = confinement(
            None,
            Some(&["ConfigMap", "ClusterRole.rbac.authorization.k8s.io"]),
        );
        let cases = [
            // (the repository's kinds, apiVersion, kind, namespace, violation)
            (None, "v1", "ConfigMap", Some("a"), None),
            (None, "v1", "Secret", Some("a"), Some(Violation::Kind)),
            // A repository whose `confine` lists no kinds allows no cluster-scoped
            // one, alone or beside a Source that lists some.
            (
                None,
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                None,
                Some(Violation::ClusterScoped),
            ),
            (
                Some(&["ClusterRole.rbac.authorization.k8s.io"][..]),
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                None,
                None,
            ),
            // The repository may drop a kind the Source allows, not add one.
            (
                Some(&["ConfigMap", "Secret"][..]),
                "v1",
                "Secret",
                Some("a"),
                Some(Violation::Kind),
            ),
            (
                Some(&["ConfigMap"][..]),
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                None,
                Some(Violation::ClusterScoped),
            ),
        ];
        for (repository, api_version, kind, namespace, expected) in cases {
            let effective = source.intersect(&confinement(None, repository));
            assert_eq!(
                effective.violation(api_version, kind, namespace, "x"),
                expected,
                "{repository:?} {kind}"
            );
        }
    }

    #[test]
    fn a_namespace_is_one_of_the_namespaces() {
        let only_a = Confinement::to_namespaces(["team-a".to_string()]);
        let with_namespaces =
            confinement(Some(&["team-a"]), Some(&["Namespace"])).intersect(&Confinement::default());
        assert_eq!(
            with_namespaces.violation("v1", "Namespace", None, "team-b"),
            Some(Violation::Namespace("team-b".into()))
        );
        assert_eq!(
            with_namespaces.violation("v1", "Namespace", None, "team-a"),
            None
        );
        // Without the kind listed, a Namespace is a cluster-scoped kind refused.
        assert_eq!(
            only_a.violation("v1", "Namespace", None, "team-a"),
            Some(Violation::ClusterScoped)
        );
    }

    /// A Source that lists no kinds allows any namespaced kind and no cluster-scoped
    /// one; a repository listing cluster-scoped kinds must not add them (it did: the
    /// two lists met as "the one given", and the repository's became the Source's).
    #[test]
    fn a_repository_cannot_add_a_cluster_scoped_kind_to_a_source_that_lists_none() {
        let repository = confinement(
            None,
            Some(&[
                "ConfigMap",
                "Namespace",
                "ClusterRole.rbac.authorization.k8s.io",
            ]),
        );
        for source in [
            confinement(Some(&["team-a"]), None),
            Confinement::to_namespaces(["team-a".to_string()]),
        ] {
            let effective = source.intersect(&repository);
            assert_eq!(
                effective.violation("rbac.authorization.k8s.io/v1", "ClusterRole", None, "x"),
                Some(Violation::ClusterScoped)
            );
            assert_eq!(
                effective.violation("v1", "Namespace", None, "team-a"),
                Some(Violation::ClusterScoped)
            );
            // Namespaced kinds: the repository's list narrows, as before.
            assert_eq!(
                effective.violation("v1", "ConfigMap", Some("team-a"), "x"),
                None
            );
            assert_eq!(
                effective.violation("v1", "Secret", Some("team-a"), "x"),
                Some(Violation::Kind)
            );
        }
        // Nothing confined on either side: anything goes.
        assert_eq!(
            Confinement::default()
                .intersect(&Confinement::default())
                .violation("rbac.authorization.k8s.io/v1", "ClusterRole", None, "x"),
            None
        );
    }
}
