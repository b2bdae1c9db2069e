//! One source, reconciled continuously: a pass plans and applies (and prunes, when
//! asked); the next pass comes after the interval (with jitter), at once when
//! something triggers it (a saved model file, a webhook, a requested reconcile), or
//! when a watch sees drift on an object the source applied. A loop is three values
//! and a reconciler: its [`Settings`] (from a Source's spec or the flags), what its
//! passes remember ([`Memory`]), and who learns of each pass ([`Observers`]: status,
//! feedback, the page, Events; metrics by its id).
//!
//! - [`lifecycle`]: the loop, what wakes it, how it runs under the driver;
//! - [`pass`]: one pass, step by step;
//! - [`pass_outcome`]: what a pass did, and the pure decisions on it;
//! - [`memory`], [`observers`], [`loop_settings`]: the three values.

mod lifecycle;
mod loop_settings;
mod memory;
mod observers;
mod pass;
mod pass_outcome;

pub(crate) use lifecycle::{Origin, PassStop, SourceLoop};
pub(crate) use loop_settings::{Settings, SourceSettings, settings_of};
pub(crate) use memory::Memory;
pub(crate) use observers::{NoStatus, Observers, StatusSink};
pub(crate) use pass_outcome::{ClusterState, Rewrite};
pub use pass_outcome::{PassError, PassOutcome};
