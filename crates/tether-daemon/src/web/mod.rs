//! The web page and its JSON API, served by the daemon (and by `tether ui`): the
//! views of [`tether_web`], filled from the source loops ([`views`]) and the cluster,
//! shown only to whom Kubernetes allows ([`auth`]); every action a Git commit made by
//! the same library calls as the CLI's.

pub mod auth;
