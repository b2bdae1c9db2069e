//! [`Models`]: every model of a repo, grouped by kind.

use super::image_policy::ImagePolicy;
use super::model_types::{
    DataModel, HelmChart, Host, Image, KubernetesResourceInstance, KubernetesService,
    KubernetesServiceInstance, Principal, Service, ServicePort, Site, Slice, TrustDomain,
    VolumeMount,
};

/// Every model of a repo, grouped by kind, each group in source order.
#[derive(Clone, Debug, Default)]
pub struct Models {
    pub kubernetes_services: Vec<KubernetesService>,
    pub sites: Vec<Site>,
    pub images: Vec<Image>,
    pub trust_domains: Vec<TrustDomain>,
    pub principals: Vec<Principal>,
    pub slices: Vec<Slice>,
    pub instances: Vec<KubernetesServiceInstance>,
    /// KubernetesConfigMaps and KubernetesSecrets.
    pub data: Vec<DataModel>,
    pub mounts: Vec<VolumeMount>,
    pub services: Vec<Service>,
    pub ports: Vec<ServicePort>,
    pub resources: Vec<KubernetesResourceInstance>,
    pub hosts: Vec<Host>,
    pub charts: Vec<HelmChart>,
    pub image_policies: Vec<ImagePolicy>,
}

impl Models {
    pub fn len(&self) -> usize {
        self.kubernetes_services.len()
            + self.sites.len()
            + self.images.len()
            + self.trust_domains.len()
            + self.principals.len()
            + self.slices.len()
            + self.instances.len()
            + self.data.len()
            + self.mounts.len()
            + self.services.len()
            + self.ports.len()
            + self.resources.len()
            + self.hosts.len()
            + self.charts.len()
            + self.image_policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
