//! The one pass: [`resolve`] runs every check and resolution in order and builds the
//! [`Graph`] when no error was found.

use super::depends::Needs;
use super::name_index::NameIndex;
use super::resolved_graph::{Graph, Links};
use super::resolver::Resolver;
use crate::diagnostic::Diagnostics;
use crate::model::Models;
use crate::source::SourceFiles;

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

impl Resolver<'_> {
    fn run(&mut self) -> Option<(Links, Needs)> {
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
}
