//! Links of principals, config maps and secrets, slices and service instances.

use std::collections::HashMap;
use std::net::IpAddr;

use super::{DataLinks, InstanceLinks, PrincipalLinks, Resolver, SliceLinks, label};
use crate::diagnostic::{Diagnostic, Span};
use crate::model::{
    ControllerKind, DataModel, Idx, Kind, KubernetesServiceInstance, PerModel, Principal, Service,
    Site, Slice, TrustDomain,
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
        m.slices
            .iter()
            .map(|x| {
                let from = label(Kind::Slice, &x.name.value);
                let mut ok = true;
                if let Some(site) = &x.site {
                    ok &= self.lookup::<Site>(&from, site).is_some();
                }
                let trust_domain = match &x.trust_domain {
                    Some(td) => {
                        let found = self.trust_domain(&from, td);
                        ok &= found.is_some();
                        found
                    }
                    None => None,
                };
                let principal = match (&x.principal, trust_domain, &x.trust_domain) {
                    (Some(p), Some(td), _) => {
                        let found = self.namespaced(
                            &from,
                            Kind::Principal,
                            p,
                            td,
                            "a slice's principal must live in the slice's trust domain",
                        );
                        ok &= found.is_some();
                        found
                    }
                    (Some(p), None, None) => {
                        self.error(
                            &from,
                            p.span,
                            "a slice with a principal needs a trust_domain",
                            Some(
                                "set trust_domain: the ServiceAccount lives in that namespace"
                                    .into(),
                            ),
                        );
                        ok = false;
                        None
                    }
                    _ => None,
                };
                let service = match &x.service {
                    Some(s) => {
                        let found = self.lookup::<Service>(&from, s);
                        ok &= found.is_some();
                        found
                    }
                    None => None,
                };
                let default_image = match &x.default_image {
                    Some(i) => {
                        let found = self.image(&from, i);
                        ok &= found.is_some();
                        found
                    }
                    None => None,
                };
                if let Some(controller) = &x.controller_kind {
                    let kind = controller.value.name();
                    if x.trust_domain.is_none() {
                        self.error(
                            &from,
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
                            &from,
                            controller.span,
                            format!("a {kind} slice needs a default_image"),
                            Some(
                                "set default_image to an Image (name:tag): its pods run it".into(),
                            ),
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
                            .in_model(from.clone())
                            .with_hint("a DaemonSet runs one pod per node"),
                        );
                    }
                } else if let Some(count) = &x.controller_replica_count {
                    self.diagnostics.push(
                        Diagnostic::warning(
                            count.span,
                            "controller_replica_count is ignored without controller_kind",
                        )
                        .in_model(from.clone())
                        .with_hint("set controller_kind: Deployment to run replicas"),
                    );
                }
                ok.then_some(SliceLinks {
                    trust_domain,
                    principal,
                    service,
                    default_image,
                    mounts: Vec::new(),
                })
            })
            .collect()
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
