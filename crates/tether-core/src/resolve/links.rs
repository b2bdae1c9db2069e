//! Links of principals, config maps and secrets, slices and service instances.

use std::collections::HashMap;
use std::net::IpAddr;

use super::resolved_graph::{DataLinks, InstanceLinks, PrincipalLinks, SliceLinks};
use super::resolver::{Resolver, label};
use crate::diagnostic::{Diagnostic, Span};
use crate::model::{
    ControllerKind, DataModel, Idx, Kind, KubernetesServiceInstance, PerModel, Principal, Rollout,
    Service, Site, Slice, TrustDomain, UpdateStrategy,
};

impl Resolver<'_> {
    pub(super) fn resolve_principals(&mut self) -> Option<PerModel<Principal, PrincipalLinks>> {
        let m = self.models;
        let links: Vec<Option<PrincipalLinks>> = m
            .principals
            .iter()
            .map(|x| {
                let from = label(Kind::Principal, &x.name.value);
                self.trust_domain(&from, &x.trust_domain)
                    .map(|trust_domain| PrincipalLinks { trust_domain })
            })
            .collect();
        links.into_iter().collect()
    }

    pub(super) fn resolve_data(&mut self) -> Option<PerModel<DataModel, DataLinks>> {
        let m = self.models;
        let links: Vec<Option<DataLinks>> = m
            .data
            .iter()
            .map(|x| {
                let from = label(x.data_kind.model_kind(), &x.name.value);
                self.trust_domain(&from, &x.trust_domain)
                    .map(|trust_domain| DataLinks { trust_domain })
            })
            .collect();
        links.into_iter().collect()
    }

    pub(super) fn resolve_slices(&mut self) -> PerModel<Slice, Option<SliceLinks>> {
        let m = self.models;
        m.slices.iter().map(|x| self.resolve_slice(x)).collect()
    }

    fn resolve_slice(&mut self, x: &Slice) -> Option<SliceLinks> {
        let from = label(Kind::Slice, &x.name.value);
        let mut ok = true;
        let site = x.site.as_ref().map(|s| self.lookup::<Site>(&from, s));
        optional(&mut ok, site);
        let trust_domain = x.trust_domain.as_ref().map(|t| self.trust_domain(&from, t));
        let trust_domain = optional(&mut ok, trust_domain);
        let principal = self.slice_principal(&from, x, trust_domain);
        let principal = optional(&mut ok, principal);
        let service = x.service.as_ref().map(|s| self.lookup::<Service>(&from, s));
        let service = optional(&mut ok, service);
        let default_image = x.default_image.as_ref().map(|i| self.image(&from, i));
        let default_image = optional(&mut ok, default_image);
        ok &= self.check_controller(&from, x);
        ok.then_some(SliceLinks {
            trust_domain,
            principal,
            service,
            default_image,
            mounts: Vec::new(),
        })
    }

    /// The slice's principal, when one is written (`Some(None)` when it does not
    /// resolve): a ServiceAccount in the slice's trust domain.
    fn slice_principal(
        &mut self,
        from: &str,
        x: &Slice,
        trust_domain: Option<Idx<TrustDomain>>,
    ) -> Option<Option<Idx<Principal>>> {
        match (&x.principal, trust_domain, &x.trust_domain) {
            (Some(p), Some(td), _) => Some(self.namespaced(
                from,
                Kind::Principal,
                p,
                td,
                "a slice's principal must live in the slice's trust domain",
            )),
            (Some(p), None, None) => {
                self.error(
                    from,
                    p.span,
                    "a slice with a principal needs a trust_domain",
                    Some("set trust_domain: the ServiceAccount lives in that namespace".into()),
                );
                Some(None)
            }
            // A trust domain that does not resolve is reported already.
            _ => None,
        }
    }

    /// A controller needs a namespace and an image; a replica count needs a controller
    /// that has replicas (warnings). False on an error.
    fn check_controller(&mut self, from: &str, x: &Slice) -> bool {
        let mut ok = true;
        let Some(controller) = &x.controller_kind else {
            if let Some(count) = &x.controller_replica_count {
                self.diagnostics.push(
                    Diagnostic::warning(
                        count.span,
                        "controller_replica_count is ignored without controller_kind",
                    )
                    .in_model(from)
                    .with_hint("set controller_kind: Deployment to run replicas"),
                );
            }
            for (field, span) in x.rollout.fields() {
                self.error(
                    from,
                    span,
                    format!("{field} needs a controller; this slice has bare pods"),
                    Some(
                        "set controller_kind (Deployment, StatefulSet or DaemonSet), or remove it"
                            .into(),
                    ),
                );
            }
            return ok;
        };
        ok &= self.check_rollout(from, &x.rollout, controller.value);
        let kind = controller.value.name();
        if x.trust_domain.is_none() {
            self.error(
                from,
                controller.span,
                format!("a {kind} slice needs a trust_domain"),
                Some(format!(
                    "set trust_domain: the {kind} is created in that namespace"
                )),
            );
            ok = false;
        }
        if x.default_image.is_none() && x.is_managed() {
            self.error(
                from,
                controller.span,
                format!("a {kind} slice needs a default_image"),
                Some("set default_image to an Image (name:tag): its pods run it".into()),
            );
            ok = false;
        }
        if controller.value == ControllerKind::DaemonSet
            && let Some(count) = &x.controller_replica_count
        {
            self.diagnostics.push(
                Diagnostic::warning(
                    count.span,
                    "controller_replica_count is ignored for a DaemonSet",
                )
                .in_model(from)
                .with_hint("a DaemonSet runs one pod per node"),
            );
        }
        ok
    }

    /// The rollout fields a controller has (as its Kubernetes kind has them); an error
    /// for each it lacks, since it would be ignored.
    #[expect(
        clippy::too_many_lines,
        reason = "a table: which rollout fields each controller kind has"
    )]
    fn check_rollout(&mut self, from: &str, rollout: &Rollout, controller: ControllerKind) -> bool {
        use ControllerKind::{DaemonSet, Deployment, StatefulSet};
        let mut ok = true;
        for (field, span) in rollout.fields() {
            let kinds = match field {
                "max_surge" | "paused" => &[Deployment][..],
                "max_unavailable" => &[Deployment, DaemonSet][..],
                "partition" => &[StatefulSet][..],
                _ => &[Deployment, StatefulSet, DaemonSet][..],
            };
            if !kinds.contains(&controller) {
                let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
                let names = match names.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} or {last}", rest.join(", "))
                    }
                    _ => names.concat(),
                };
                self.error(
                    from,
                    span,
                    format!("{field} is not a setting of a {}", controller.name()),
                    Some(format!("{field} is for a {names} slice; remove it")),
                );
                ok = false;
            }
        }
        if let Some(strategy) = &rollout.update_strategy {
            let allowed = match controller {
                Deployment => [UpdateStrategy::RollingUpdate, UpdateStrategy::Recreate],
                _ => [UpdateStrategy::RollingUpdate, UpdateStrategy::OnDelete],
            };
            if controller != ControllerKind::Job && !allowed.contains(&strategy.value) {
                self.error(
                    from,
                    strategy.span,
                    format!(
                        "a {} has no {} update strategy",
                        controller.name(),
                        strategy.value.name()
                    ),
                    Some(format!(
                        "use {} or {}",
                        allowed[0].name(),
                        allowed[1].name()
                    )),
                );
                ok = false;
            }
            if strategy.value != UpdateStrategy::RollingUpdate {
                let rolling = [
                    ("max_surge", rollout.max_surge.as_ref().map(|x| x.span)),
                    (
                        "max_unavailable",
                        rollout.max_unavailable.as_ref().map(|x| x.span),
                    ),
                    ("partition", rollout.partition.as_ref().map(|x| x.span)),
                ];
                for (field, span) in rolling {
                    if let Some(span) = span {
                        self.error(
                            from,
                            span,
                            format!(
                                "{field} is a setting of RollingUpdate, not of {}",
                                strategy.value.name()
                            ),
                            Some("remove it, or set update_strategy: RollingUpdate".into()),
                        );
                        ok = false;
                    }
                }
            }
        }
        if controller == Deployment
            && let (Some(surge), Some(unavailable)) = (&rollout.max_surge, &rollout.max_unavailable)
            && surge.value.is_zero()
            && unavailable.value.is_zero()
        {
            self.error(
                from,
                unavailable.span,
                "max_surge and max_unavailable are both 0: the rollout could never replace a pod",
                Some("let one of them be more than 0".into()),
            );
            ok = false;
        }
        ok
    }

    pub(super) fn resolve_instances(
        &mut self,
        slices: &PerModel<Slice, Option<SliceLinks>>,
    ) -> PerModel<KubernetesServiceInstance, Option<InstanceLinks>> {
        let m = self.models;
        let mut seen: HashMap<(Idx<TrustDomain>, &str), Span> = HashMap::new();
        m.instances
            .iter()
            .map(|x| {
                let from = label(Kind::KubernetesServiceInstance, &x.name.value);
                let image = self.image(&from, &x.image);
                let slice = self.lookup::<Slice>(&from, &x.slice)?;
                let slice_model = &m.slices[slice];
                if let Some(pod_ip) = &x.pod_ip
                    && pod_ip.value.parse::<IpAddr>().is_err() {
                        self.error(&from, pod_ip.span, format!("\"{}\" is not an IP address", pod_ip.value), None);
                    }
                if x.is_managed()
                    && let Some(controller) = &slice_model.controller_kind {
                        self.error(
                            &from,
                            x.slice.span,
                            format!("slice \"{}\" is a {}: its controller creates its pods", slice_model.name.value, controller.value.name()),
                            Some("set xos_managed: false to record a pod the controller made, or remove controller_kind from the slice".into()),
                        );
                    }
                let links = slices[slice].as_ref()?;
                let Some(trust_domain) = links.trust_domain else {
                    if slice_model.trust_domain.is_none() {
                        self.error(&from, x.slice.span, format!("slice \"{}\" has no trust_domain, so the pod has no namespace", slice_model.name.value), Some("set trust_domain on the slice".into()));
                    }
                    return None;
                };
                if let Some(first) = seen.insert((trust_domain, x.name.value.as_str()), x.name.span) {
                    let td = &m.trust_domains[trust_domain].name.value;
                    self.error(&from, x.name.span, format!("duplicate KubernetesServiceInstance \"{}\" in trust domain \"{td}\"", x.name.value), Some(format!("also defined at {}; pods are identified by namespace and name", self.at(first))));
                }
                Some(InstanceLinks { slice, trust_domain, image: image?, mounts: Vec::new() })
            })
            .collect()
    }
}

/// The link of an optional field: `None` when the field is not written; `ok` turns
/// false when it is written but does not resolve.
fn optional<T>(ok: &mut bool, resolved: Option<Option<T>>) -> Option<T> {
    *ok &= resolved.as_ref().is_none_or(Option::is_some);
    resolved.flatten()
}
