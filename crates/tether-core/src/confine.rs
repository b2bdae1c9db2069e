//! Confinement of a repository: the namespaces its objects may be in and the kinds it
//! may make (`confine:` in its `.tether.yaml`). What falls outside is an error at the
//! model that makes it, found before anything is compared or applied. Cluster-scoped
//! kinds are off unless listed. Pure. The API server's RBAC, with `--as`, is the
//! final word; this is the early, located one.

use std::collections::BTreeSet;

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::k8s::api_group;
use crate::render::RenderedObject;
use crate::settings::ConfineSettings;

/// The limits, as read from the settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    namespaces: Option<BTreeSet<String>>,
    kinds: Option<BTreeSet<String>>,
}

impl From<&ConfineSettings> for Confinement {
    fn from(settings: &ConfineSettings) -> Self {
        let set = |list: &Option<Vec<String>>| list.as_ref().map(|l| l.iter().cloned().collect());
        Confinement {
            namespaces: set(&settings.namespaces),
            kinds: set(&settings.kinds),
        }
    }
}

impl Confinement {
    /// Is `kind` of `api_version` listed (as `Kind`, or `Kind.group`)?
    fn lists_kind(&self, api_version: &str, kind: &str) -> Option<bool> {
        let kinds = self.kinds.as_ref()?;
        let qualified = match api_group(api_version) {
            "" => kind.to_string(),
            group => format!("{kind}.{group}"),
        };
        Some(kinds.contains(kind) || kinds.contains(&qualified))
    }
}

/// An error for each object that falls outside `confinement`, at its model.
pub fn check(objects: &[RenderedObject], confinement: &Confinement) -> Diagnostics {
    let mut diagnostics = Diagnostics::default();
    let listed = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(", ");
    for object in objects {
        let model = match object.model.split_once('/') {
            Some((kind, name)) => format!("{kind} \"{name}\""),
            None => object.model.clone(),
        };
        let at = |message: String, hint: &str| {
            Diagnostic::error(object.span, message)
                .in_model(model.clone())
                .with_hint(hint.to_string())
        };
        let kind_listed = confinement.lists_kind(&object.api_version, &object.kind);
        let outside = |namespace: &str| {
            let allowed = confinement.namespaces.as_ref()?;
            (!allowed.contains(namespace)).then(|| {
                at(
                    format!(
                        "{} is outside the namespaces this repository may use ({})",
                        object.display_name(),
                        listed(allowed)
                    ),
                    "use one of those namespaces, or widen confine.namespaces in .tether.yaml",
                )
            })
        };
        match &object.namespace {
            None if kind_listed != Some(true) => diagnostics.push(at(
                format!(
                    "{} is cluster-scoped, and this repository may make cluster-scoped kinds only where confine.kinds lists them",
                    object.display_name()
                ),
                "list the kind in confine.kinds of .tether.yaml, or leave it to the cluster's owners",
            )),
            // A Namespace is one of the namespaces: its name must be allowed too.
            None if object.kind == "Namespace" && object.api_version == "v1" => {
                if let Some(d) = outside(&object.name) {
                    diagnostics.push(d);
                }
            }
            None => {}
            Some(namespace) => {
                if let Some(d) = outside(namespace) {
                    diagnostics.push(d);
                }
                if kind_listed == Some(false) {
                    diagnostics.push(at(
                        format!(
                            "{} is a kind this repository may not make ({})",
                            object.display_name(),
                            listed(confinement.kinds.as_ref().unwrap_or(&BTreeSet::new()))
                        ),
                        "list the kind in confine.kinds of .tether.yaml",
                    ));
                }
            }
        }
    }
    diagnostics
}
