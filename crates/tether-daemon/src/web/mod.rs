//! The web page and its JSON API, served by the daemon (and by `tether ui`): the
//! views of [`tether_web`], filled from the source loops (`crate::loop_views`) and the
//! cluster ([`live_state`]), shown only to whom Kubernetes allows ([`auth`]); every
//! action a Git commit made by the same library calls as the CLI's ([`act`]), and a
//! Source's attestation checked as `tether verify` checks it ([`attestation`]). The
//! routes are [`router`]'s, what the handlers share [`handling`]'s.

pub(crate) mod act;
pub(crate) mod attestation;
pub mod auth;
pub(crate) mod handling;
pub(crate) mod live_state;
pub(crate) mod pages;
pub(crate) mod router;

pub(crate) use handling::Web;
