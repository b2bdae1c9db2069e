//! Validate and resolve: every reference to its model, every rule of design.md
//! section 2, all problems in one pass. The result, when there is no error, is a
//! [`Graph`] whose links later stages follow without checking again.

mod collisions;
mod depends;
mod links;
mod mounts;
mod names;
mod placement;
mod rules;
mod services;

use crate::diagnostic::{Diagnostic, Diagnostics, Span};
use crate::model::{
    DataModel, Idx, Image, Kind, KubernetesServiceInstance, Models, PerModel, Principal, Service,
    ServicePort, Slice, TrustDomain, VolumeMount,
};
use crate::source::SourceFiles;
use crate::workflow::Workflow;

use names::NameIndex;

/// The models and their links: each `*Links` vector runs parallel to the model
/// vector of the same name and is indexed by that model's [`Idx`].
#[derive(Clone, Debug)]
pub struct Graph {
    pub models: Models,
    pub principals: PerModel<Principal, PrincipalLinks>,
    pub data: PerModel<DataModel, DataLinks>,
    pub slices: PerModel<Slice, SliceLinks>,
    pub instances: PerModel<KubernetesServiceInstance, InstanceLinks>,
    pub mounts: PerModel<VolumeMount, MountLinks>,
    pub services: PerModel<Service, ServiceLinks>,
    /// Which models wait for which, and the wave each one is applied in.
    pub workflow: Workflow,
}

#[derive(Clone, Debug)]
pub struct PrincipalLinks {
    pub trust_domain: Idx<TrustDomain>,
}

#[derive(Clone, Debug)]
pub struct DataLinks {
    pub trust_domain: Idx<TrustDomain>,
}

#[derive(Clone, Debug)]
pub struct SliceLinks {
    pub trust_domain: Option<Idx<TrustDomain>>,
    pub principal: Option<Idx<Principal>>,
    pub service: Option<Idx<Service>>,
    pub default_image: Option<Idx<Image>>,
    /// The mounts that name this slice.
    pub mounts: Vec<Idx<VolumeMount>>,
}

#[derive(Clone, Debug)]
pub struct InstanceLinks {
    pub slice: Idx<Slice>,
    pub trust_domain: Idx<TrustDomain>,
    pub image: Idx<Image>,
    /// The mounts that name this instance.
    pub mounts: Vec<Idx<VolumeMount>>,
}

#[derive(Clone, Debug)]
pub struct MountLinks {
    /// The ConfigMap or Secret mounted.
    pub source: Idx<DataModel>,
}

#[derive(Clone, Debug)]
pub struct ServiceLinks {
    /// Where the Service is rendered; `None` when it has no ports and no slices.
    pub trust_domain: Option<Idx<TrustDomain>>,
    /// The Service's ports, in source order.
    pub ports: Vec<Idx<ServicePort>>,
}

/// Resolves and checks `models`; the graph is `None` when any error was found.
pub fn resolve(models: Models, files: &SourceFiles) -> (Option<Graph>, Diagnostics) {
    let mut resolver = Resolver {
        models: &models,
        files,
        diagnostics: Diagnostics::default(),
        names: NameIndex::build(&models),
    };
    let resolved = resolver.run().map(|(links, needs)| {
        let mut workflow = resolver.build_workflow(&links, needs);
        resolver.place(&mut workflow);
        (links, workflow)
    });
    let diagnostics = resolver.diagnostics;
    if diagnostics.has_errors() {
        return (None, diagnostics);
    }
    let graph = resolved.map(|(links, workflow)| Graph {
        principals: links.principals,
        data: links.data,
        slices: links.slices,
        instances: links.instances,
        mounts: links.mounts,
        services: links.services,
        workflow,
        models,
    });
    (graph, diagnostics)
}

struct Links {
    principals: PerModel<Principal, PrincipalLinks>,
    data: PerModel<DataModel, DataLinks>,
    slices: PerModel<Slice, SliceLinks>,
    instances: PerModel<KubernetesServiceInstance, InstanceLinks>,
    mounts: PerModel<VolumeMount, MountLinks>,
    services: PerModel<Service, ServiceLinks>,
}

struct Resolver<'m> {
    models: &'m Models,
    files: &'m SourceFiles,
    diagnostics: Diagnostics,
    names: NameIndex<'m>,
}

/// `Kind "name"`, the label diagnostics carry.
fn label(kind: Kind, name: &str) -> String {
    format!("{kind} \"{name}\"")
}

impl Resolver<'_> {
    fn error(&mut self, model: &str, span: Span, message: impl Into<String>, hint: Option<String>) {
        self.diagnostics.push(
            Diagnostic::error(span, message)
                .in_model(model)
                .with_optional_hint(hint),
        );
    }

    fn run(&mut self) -> Option<(Links, depends::Needs)> {
        self.check_duplicates();
        self.check_owners();
        self.check_names();
        let principals = self.resolve_principals();
        let data = self.resolve_data();
        let mut slices = self.resolve_slices();
        let mut instances = self.resolve_instances(&slices);
        let mounts = self.resolve_mounts(&mut slices, &mut instances);
        let services = self.resolve_services(&slices);
        self.check_object_collisions(&slices, &instances, &services);
        let needs = self.resolve_needs();
        let links = Links {
            principals: principals?,
            data: data?,
            slices: slices.into_iter().collect::<Option<_>>()?,
            instances: instances.into_iter().collect::<Option<_>>()?,
            mounts: mounts?,
            services: services?,
        };
        Some((links, needs))
    }

    /// `path:line:column` of a span, for hints that point at another place in the repo.
    fn at(&self, span: Span) -> String {
        format!(
            "{}:{}:{}",
            self.files.shown_path(span.file),
            span.line,
            span.column
        )
    }
}
