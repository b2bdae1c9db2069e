//! Notice receivers (built by the notifications work).
