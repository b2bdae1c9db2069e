//! Links of volume mounts: the pod or slice they go into, and the config map or secret
//! they mount from the same trust domain.

use std::collections::HashMap;

use super::resolved_graph::{InstanceLinks, MountLinks, SliceLinks};
use super::resolver::Resolver;
use crate::diagnostic::Span;
use crate::model::{
    Idx, KubernetesServiceInstance, MountTarget, PerModel, Slice, Text, TrustDomain, VolumeMount,
    indexed,
};

/// What a mount goes into: one pod, or every pod of a slice.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    Instance(Idx<KubernetesServiceInstance>),
    Slice(Idx<Slice>),
}

impl Resolver<'_> {
    pub(super) fn resolve_mounts(
        &mut self,
        slices: &mut PerModel<Slice, Option<SliceLinks>>,
        instances: &mut PerModel<KubernetesServiceInstance, Option<InstanceLinks>>,
    ) -> Option<PerModel<VolumeMount, MountLinks>> {
        let m = self.models;
        let mut paths: HashMap<(Target, &str), Span> = HashMap::new();
        let mut links = Vec::new();
        let mut ok = true;
        for (index, x) in indexed(&m.mounts) {
            let kind = x.origin.kind;
            let from = format!(
                "{kind} \"{}\" at \"{}\"",
                x.source.value, x.mount_path.value
            );
            let target = match &x.target {
                MountTarget::ServiceInstance(name) => self.instance_target(&from, name, instances),
                MountTarget::Slice(name) => self.slice_target(&from, name, slices),
            };
            let Some((target, trust_domain)) = target else {
                ok = false;
                continue;
            };
            let why = "a mount's config map or secret must live in the trust domain of the pod it mounts into";
            let Some(source) = self.namespaced(
                &from,
                x.data_kind.model_kind(),
                &x.source,
                trust_domain,
                why,
            ) else {
                ok = false;
                continue;
            };
            ok &= self.check_mount_paths(&from, x);
            if let Some(first) =
                paths.insert((target, x.mount_path.value.as_str()), x.mount_path.span)
            {
                self.error(
                    &from,
                    x.mount_path.span,
                    format!(
                        "mount_path \"{}\" is already used in this pod",
                        x.mount_path.value
                    ),
                    Some(format!("also mounted at {}", self.at(first))),
                );
                ok = false;
            }
            let target_mounts = match target {
                Target::Slice(s) => slices[s].as_mut().map(|l| &mut l.mounts),
                Target::Instance(i) => instances[i].as_mut().map(|l| &mut l.mounts),
            };
            if let Some(mounts) = target_mounts {
                mounts.push(index);
            }
            links.push(MountLinks { source });
        }
        ok.then(|| links.into_iter().collect())
    }

    /// A pod to mount into, and its trust domain: one that tether creates.
    fn instance_target(
        &mut self,
        from: &str,
        name: &Text,
        instances: &PerModel<KubernetesServiceInstance, Option<InstanceLinks>>,
    ) -> Option<(Target, Idx<TrustDomain>)> {
        let i = self.instance(from, name)?;
        if !self.models.instances[i].is_managed() {
            self.error(
                from,
                name.span,
                format!(
                    "pod \"{}\" is not managed by tether (xos_managed: false)",
                    name.value
                ),
                Some("tether only mounts volumes into pods it creates".into()),
            );
            return None;
        }
        let td = instances[i].as_ref()?.trust_domain;
        Some((Target::Instance(i), td))
    }

    /// A slice to mount into, and its trust domain: one that tether renders, in a
    /// namespace.
    fn slice_target(
        &mut self,
        from: &str,
        name: &Text,
        slices: &PerModel<Slice, Option<SliceLinks>>,
    ) -> Option<(Target, Idx<TrustDomain>)> {
        let s = self.lookup::<Slice>(from, name)?;
        if !self.models.slices[s].is_managed() {
            self.error(
                from,
                name.span,
                format!(
                    "slice \"{}\" is not managed by tether (xos_managed: false)",
                    name.value
                ),
                Some("tether only mounts volumes into controllers it creates".into()),
            );
            return None;
        }
        let td = slices[s].as_ref()?.trust_domain;
        if td.is_none() {
            self.error(
                from,
                name.span,
                format!("slice \"{}\" has no trust_domain", name.value),
                Some("set trust_domain on the slice".into()),
            );
        }
        Some((Target::Slice(s), td?))
    }

    /// `mount_path` is absolute and `sub_path` stays inside the volume; false on an error.
    fn check_mount_paths(&mut self, from: &str, x: &VolumeMount) -> bool {
        let mut ok = true;
        if !x.mount_path.value.starts_with('/') {
            self.error(
                from,
                x.mount_path.span,
                format!("mount_path \"{}\" is not absolute", x.mount_path.value),
                Some("start it with /".into()),
            );
            ok = false;
        }
        if let Some(sub_path) = &x.sub_path
            && (sub_path.value.starts_with('/') || sub_path.value.split('/').any(|c| c == ".."))
        {
            self.error(
                from,
                sub_path.span,
                format!(
                    "sub_path \"{}\" must be a relative path without \"..\"",
                    sub_path.value
                ),
                Some("it names a key of the config map or secret, e.g. app.conf".into()),
            );
            ok = false;
        }
        ok
    }
}
