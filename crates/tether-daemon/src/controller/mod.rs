//! Sources declared as `Source` resources: [`replica`] watches them and runs the
//! loops this replica leads or owns; [`source_run`] runs one Source's loop from its
//! spec, [`beside`] the work beside it (discovery, image automation, pull-request
//! plans), and [`status_writer`] writes its status and Events.

mod beside;
mod replica;
mod source_run;
mod status_writer;
mod wiring;

pub(crate) use replica::{Controller, Replicas};
pub(crate) use wiring::Directories;
