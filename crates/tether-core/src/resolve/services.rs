//! Links of Services: their ports (and the port rules), and the one trust domain they
//! share with their slices.

use std::collections::HashMap;

use super::resolved_graph::{ServiceLinks, SliceLinks};
use super::resolver::{Resolver, label};
use crate::diagnostic::Span;
use crate::model::{
    Idx, Kind, PerModel, Protocol, Service, ServicePort, Slice, TrustDomain, indexed,
};

impl Resolver<'_> {
    pub(super) fn resolve_services(
        &mut self,
        slices: &PerModel<Slice, Option<SliceLinks>>,
    ) -> Option<PerModel<Service, ServiceLinks>> {
        let m = self.models;
        let (mut ports, mut ok) = self.resolve_ports();
        let mut links = Vec::new();
        for (s, service) in indexed(&m.services) {
            let from = label(Kind::Service, &service.name.value);
            ok &= self.check_unique_ports(service, &ports[s]);
            let own = match &service.trust_domain {
                Some(td) => match self.trust_domain(&from, td) {
                    Some(found) => Some(found),
                    None => {
                        ok = false;
                        None
                    }
                },
                None => None,
            };
            let (trust_domain, shared) = self.service_trust_domain(s, own, slices);
            ok &= shared;
            // A slice of this Service whose links failed has its error already (a
            // misspelt trust domain, say); this one would only repeat it.
            let slice_failed = indexed(&m.slices).any(|(i, slice)| {
                slices[i].is_none()
                    && slice
                        .service
                        .as_ref()
                        .is_some_and(|t| t.value == service.name.value)
            });
            if trust_domain.is_none() && !ports[s].is_empty() && !slice_failed {
                self.error(&from, service.name.span, "the Service has ports but no trust domain", Some("set trust_domain, or attach a slice with a trust_domain (slice field service)".into()));
                ok = false;
            }
            links.push(ServiceLinks {
                trust_domain,
                ports: std::mem::take(&mut ports[s]),
            });
        }
        ok.then(|| links.into_iter().collect())
    }

    /// The ports of each Service, in source order, and whether every port is valid
    /// (port ranges, node ports unique in the cluster, an existing Service).
    fn resolve_ports(&mut self) -> (PerModel<Service, Vec<Idx<ServicePort>>>, bool) {
        let m = self.models;
        let mut ports: PerModel<Service, Vec<Idx<ServicePort>>> =
            m.services.iter().map(|_| Vec::new()).collect();
        let mut node_ports: HashMap<i64, Span> = HashMap::new();
        let mut ok = true;
        for (i, p) in indexed(&m.ports) {
            let from = label(Kind::ServicePort, &p.name.value);
            ok &= self.check_port_numbers(&from, p, &mut node_ports);
            match self.lookup::<Service>(&from, &p.service) {
                Some(s) => ports[s].push(i),
                None => ok = false,
            }
        }
        (ports, ok)
    }

    /// Port ranges, and node ports unique in the cluster; false on an error.
    fn check_port_numbers(
        &mut self,
        from: &str,
        p: &ServicePort,
        node_ports: &mut HashMap<i64, Span>,
    ) -> bool {
        let mut ok = true;
        let internal = &p.internal_port;
        if !(1..=65535).contains(&internal.value) {
            self.error(
                from,
                internal.span,
                format!("internal_port {} is out of range", internal.value),
                Some("ports are 1 to 65535".into()),
            );
            ok = false;
        }
        if let Some(external) = &p.external_port {
            if !(30000..=32767).contains(&external.value) {
                self.error(
                    from,
                    external.span,
                    format!(
                        "external_port {} is outside the NodePort range",
                        external.value
                    ),
                    Some("node ports are 30000 to 32767".into()),
                );
                ok = false;
            } else if let Some(first) = node_ports.insert(external.value, external.span) {
                self.error(
                    from,
                    external.span,
                    format!("external_port {} is already used", external.value),
                    Some(format!(
                        "node ports are unique in a cluster; also used at {}",
                        self.at(first)
                    )),
                );
                ok = false;
            }
        }
        ok
    }

    /// Unique (port, protocol) pairs within the Service; false on an error.
    fn check_unique_ports(&mut self, service: &Service, ports: &[Idx<ServicePort>]) -> bool {
        let m = self.models;
        let mut ok = true;
        let mut pairs: HashMap<(i64, Protocol), Span> = HashMap::new();
        for &p in ports {
            let port = &m.ports[p];
            let protocol = port.protocol.as_ref().map_or(Protocol::Tcp, |p| p.value);
            if let Some(first) = pairs.insert(
                (port.internal_port.value, protocol),
                port.internal_port.span,
            ) {
                self.error(
                    &label(Kind::ServicePort, &port.name.value),
                    port.internal_port.span,
                    format!(
                        "port {}/{} is already in Service \"{}\"",
                        port.internal_port.value,
                        protocol.name(),
                        service.name.value
                    ),
                    Some(format!("also at {}", self.at(first))),
                );
                ok = false;
            }
        }
        ok
    }

    /// Where the Service is rendered: its own trust domain, else its slices'; each
    /// member slice must be in that one (false when one is not).
    fn service_trust_domain(
        &mut self,
        s: Idx<Service>,
        own: Option<Idx<TrustDomain>>,
        slices: &PerModel<Slice, Option<SliceLinks>>,
    ) -> (Option<Idx<TrustDomain>>, bool) {
        let m = self.models;
        let service = &m.services[s];
        let member_tds: Vec<(Idx<Slice>, Idx<TrustDomain>)> = indexed(&m.slices)
            .filter_map(|(i, _)| {
                let links = slices[i].as_ref().filter(|l| l.service == Some(s))?;
                links.trust_domain.map(|td| (i, td))
            })
            .collect();
        let mut ok = true;
        let mut trust_domain = own;
        for (slice, td) in member_tds {
            match trust_domain {
                None => trust_domain = Some(td),
                Some(expected) if expected != td => {
                    let slice_model = &m.slices[slice];
                    let span = slice_model
                        .service
                        .as_ref()
                        .map_or(slice_model.name.span, |t| t.span);
                    self.error(
                        &label(Kind::Slice, &slice_model.name.value),
                        span,
                        format!(
                            "Service \"{}\" is in trust domain \"{}\", this slice in \"{}\"",
                            service.name.value,
                            m.trust_domains[expected].name.value,
                            m.trust_domains[td].name.value
                        ),
                        Some("a Service and its slices share one trust domain".into()),
                    );
                    ok = false;
                }
                Some(_) => {}
            }
        }
        (trust_domain, ok)
    }
}
