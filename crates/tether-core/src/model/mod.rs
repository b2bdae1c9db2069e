//! Models: typed, spanned structs read from YAML documents.
//!
//! Each document becomes at most one model. Every problem found on the way (unknown
//! kind or field, missing field, value of the wrong type) is a diagnostic; a document
//! missing a required field yields no model, but its other fields are still checked.
//! This layer never does I/O and never looks at other models: references are plain
//! names here and are resolved by [`crate::resolve`].

mod data;
mod depends;
mod files;
mod image_policy;
mod image_policy_fields;
mod image_reference;
mod index;
mod kind;
mod kubernetes;
mod model_set;
mod model_types;
mod node_fields;
mod object;
mod read;
mod schema;
mod semver_range;

pub use data::ObjectReader;
pub use files::{data_file_paths, resolve_data_path};
pub use image_policy::{
    DEFAULT_INTERVAL, DEFAULT_MAX_TAGS, ImagePolicy, MAX_TAG_PATTERN_CHARS, MIN_INTERVAL, Order,
    Rule, TagFilter, UpdateMode,
};
pub use image_reference::{is_digest, is_valid_image_name, is_valid_tag, split_image_reference};
pub use index::{Idx, PerModel, indexed};
pub use kind::{CONFIG_MOUNT_ALIAS, Kind, XOS_FEEDBACK_FIELDS};
pub use model_set::Models;
pub use model_types::{
    ChartSource, ControllerKind, Data, DataKind, DataModel, Dependency, DependencyTarget,
    HelmChart, Host, Image, IntOrPercent, KubernetesResourceInstance, KubernetesService,
    KubernetesServiceInstance, MountTarget, Origin, Principal, Protocol, ReadyWhen, ResourceObject,
    Rollout, Service, ServicePort, Site, Slice, Spanned, Taint, TaintEffect, Text, TrustDomain,
    UpdateStrategy, VolumeMount,
};
pub use node_fields::LOCK_TAINT_KEY;
pub use object::{ModelObject, object_key};
pub use read::read_models;
pub use schema::model_schema;
pub use semver_range::{RangeError, SemverRange};
