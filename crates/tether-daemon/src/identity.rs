//! Who a Source acts as, and what it may name: the platform team's choices (the
//! Source's `serviceAccountName` and `confine`, the daemon's
//! `--default-service-account` and `--no-cross-namespace-objects`), not the
//! repository's. A Source with a ServiceAccount gets a client of its own that
//! impersonates it (Flux's semantics), so that RBAC decides what it changes; the
//! confinement refuses early, at the models, what falls outside.

use kube::Client;
use tether_core::confine::{Confinement, SourceConfinement};
use tether_core::settings::ConfineSettings;
use tether_engine::cluster::{ClusterError, Impersonation, Target, client_of};

use tether_api::source_spec::SourceSpec;

/// How the daemon's Sources act on the cluster.
#[derive(Clone, Debug, Default)]
pub(crate) struct Identities {
    /// The daemon's own connection, from which a Source's impersonating one is made.
    pub target: Target,
    /// The ServiceAccount (of its own namespace) a Source without
    /// `spec.serviceAccountName` acts as; none: the daemon's own identity.
    pub default_service_account: Option<String>,
    /// A Source may name objects only in its own namespace (and no cluster-scoped
    /// kind) unless its `spec.confine` lists the namespaces.
    pub no_cross_namespace_objects: bool,
}

/// How a refusal names the daemon's own identity (no ServiceAccount impersonated).
pub(crate) const DAEMON_IDENTITY: &str = "the daemon's own identity";

impl Identities {
    /// The ServiceAccount the Source in `namespace` acts as (its own, else the
    /// daemon's default), with the groups Kubernetes gives every ServiceAccount (RBAC
    /// bindings to them apply as they would to the account's own token); none when it
    /// acts as the daemon.
    pub(crate) fn impersonation(
        &self,
        namespace: &str,
        spec: &SourceSpec,
    ) -> Option<Impersonation> {
        let name = spec
            .service_account_name
            .as_ref()
            .or(self.default_service_account.as_ref())?;
        Some(Impersonation::service_account(namespace, name))
    }

    /// A client of the daemon's cluster acting as `identity`. It makes no request:
    /// the server answers, or refuses, each of the Source's own.
    pub(crate) async fn client(&self, identity: &Impersonation) -> Result<Client, ClusterError> {
        client_of(&Target {
            impersonate: Some(identity.user.clone()),
            impersonate_groups: identity.groups.clone(),
            ..self.target.clone()
        })
        .await
    }

    /// What the Source in `namespace` may name: its `spec.confine`, held to its own
    /// namespace under `--no-cross-namespace-objects` unless the spec lists namespaces;
    /// none when neither limits it.
    pub(crate) fn confinement(
        &self,
        namespace: &str,
        spec: &SourceSpec,
    ) -> Option<SourceConfinement> {
        let declared = spec.confine.as_ref().map(|c| {
            Confinement::from(&ConfineSettings {
                namespaces: c.namespaces.clone(),
                kinds: c.kinds.clone(),
            })
        });
        let own_namespace_only = self.no_cross_namespace_objects
            && declared.as_ref().is_none_or(|c| !c.lists_namespaces());
        let confinement = match (declared, own_namespace_only) {
            (declared, true) => Confinement::to_namespaces([namespace.to_string()])
                .intersect(&declared.unwrap_or_default()),
            (Some(declared), false) => declared,
            (None, false) => return None,
        };
        Some(SourceConfinement {
            confinement,
            identity: self
                .impersonation(namespace, spec)
                .map_or_else(|| DAEMON_IDENTITY.into(), |i| i.user),
            own_namespace_only,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_api::source_spec::SourceConfine;

    fn spec(service_account: Option<&str>, confine: Option<SourceConfine>) -> SourceSpec {
        let mut spec: SourceSpec =
            serde_json::from_value(serde_json::json!({"url": "https://example.com/r.git"}))
                .unwrap();
        spec.service_account_name = service_account.map(str::to_string);
        spec.confine = confine;
        spec
    }

    #[test]
    fn a_source_acts_as_its_service_account_else_the_default_else_the_daemon() {
        let daemon = Identities::default();
        let defaulted = Identities {
            default_service_account: Some("tether".into()),
            ..Identities::default()
        };
        let user = |identities: &Identities, spec: &SourceSpec| {
            identities.impersonation("team-a", spec).map(|i| i.user)
        };
        let named = spec(Some("deployer"), None);
        let unnamed = spec(None, None);
        assert_eq!(
            user(&daemon, &named).as_deref(),
            Some("system:serviceaccount:team-a:deployer")
        );
        assert_eq!(
            user(&defaulted, &named).as_deref(),
            Some("system:serviceaccount:team-a:deployer")
        );
        assert_eq!(user(&daemon, &unnamed), None);
        assert_eq!(
            user(&defaulted, &unnamed).as_deref(),
            Some("system:serviceaccount:team-a:tether")
        );
        assert_eq!(
            defaulted.impersonation("team-a", &named).unwrap().groups,
            ["system:serviceaccounts", "system:serviceaccounts:team-a"]
        );
    }

    #[test]
    fn without_cross_namespace_objects_a_source_keeps_to_its_namespace_unless_its_spec_lists_namespaces()
     {
        let strict = Identities {
            no_cross_namespace_objects: true,
            ..Identities::default()
        };
        let allowed = |identities: &Identities, spec: &SourceSpec, namespace: &str| {
            identities.confinement("team-a", spec).is_none_or(|c| {
                c.confinement
                    .violation("v1", "ConfigMap", Some(namespace), "x")
                    .is_none()
            })
        };
        let listed = spec(
            None,
            Some(SourceConfine {
                namespaces: Some(vec!["team-a".into(), "shared".into()]),
                kinds: None,
            }),
        );
        let kinds_only = spec(
            None,
            Some(SourceConfine {
                namespaces: None,
                kinds: Some(vec!["ConfigMap".into()]),
            }),
        );
        let open = spec(None, None);
        // (the daemon, the Source, the namespace, allowed)
        let cases = [
            (&strict, &open, "team-a", true),
            (&strict, &open, "team-b", false),
            (&strict, &listed, "shared", true),
            (&strict, &listed, "team-b", false),
            (&strict, &kinds_only, "team-b", false),
            (&Identities::default(), &open, "team-b", true),
            (&Identities::default(), &listed, "team-b", false),
        ];
        for (identities, spec, namespace, expected) in cases {
            assert_eq!(
                allowed(identities, spec, namespace),
                expected,
                "{:?} {namespace}",
                spec.confine
            );
        }
        let said = strict.confinement("team-a", &open).unwrap();
        assert!(said.own_namespace_only);
        assert_eq!(said.identity, DAEMON_IDENTITY);
        assert!(
            !strict
                .confinement("team-a", &listed)
                .unwrap()
                .own_namespace_only
        );
    }
}
