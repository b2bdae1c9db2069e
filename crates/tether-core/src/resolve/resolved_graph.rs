//! What resolving gives: the [`Graph`] of models and their links, and the links of
//! each kind as one pass gathers them before the workflow is built.

use crate::model::{
    DataModel, Idx, Image, KubernetesServiceInstance, Models, PerModel, Principal, Service,
    ServicePort, Slice, TrustDomain, VolumeMount,
};
use crate::workflow::Workflow;

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

/// The links of every kind, as resolving gathers them, before the workflow is built.
pub(super) struct Links {
    pub(super) principals: PerModel<Principal, PrincipalLinks>,
    pub(super) data: PerModel<DataModel, DataLinks>,
    pub(super) slices: PerModel<Slice, SliceLinks>,
    pub(super) instances: PerModel<KubernetesServiceInstance, InstanceLinks>,
    pub(super) mounts: PerModel<VolumeMount, MountLinks>,
    pub(super) services: PerModel<Service, ServiceLinks>,
}
