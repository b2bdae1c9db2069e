//! Image automation: where policies write the images they choose, and the edits
//! that write them.

pub mod markers;
pub mod update;
