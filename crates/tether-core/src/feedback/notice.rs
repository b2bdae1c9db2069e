//! Notices: the events of a Source that matter to people (built by the notifications work).
