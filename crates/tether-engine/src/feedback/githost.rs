//! The Git hosts' APIs (built by the Git host work).
